"""llmopt: a hackable LLM compiler on xDSL, from PyTorch to CUDA through six IR levels.

The public API: :func:`capture`, :func:`lower`, :func:`cuda_source`, :func:`compile`,
:func:`parse`, :func:`register_pass`, :func:`register_dialect`, :func:`explain` (what
``torch.compile(model, backend="llmopt")`` compiles and what runs in PyTorch),
:class:`Generator` and :func:`generate` (greedy generation with a KV cache). Heavy
dependencies (torch, CUDA) load only when a function that needs them runs.
"""

from llmopt.api import capture, compile, cuda_source, lower, make_context, parse, prepare
from llmopt.registry import register_dialect, register_pass, register_pipeline

__all__ = [
    "Generator", "capture", "check_numerics", "compile", "cuda_source", "explain", "generate",
    "lower", "make_context", "parse", "prepare",
    "register_dialect", "register_pass", "register_pipeline",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # numpy-backed parts load on first use, keeping `llm-opt` quick to start.
    if name == "check_numerics":
        from llmopt.numerics import check_numerics

        return check_numerics
    if name == "explain":  # imports torch
        from llmopt.dynamo.explain import explain

        return explain
    if name in ("Generator", "generate"):
        from llmopt import generation

        return getattr(generation, name)
    if name == "interp":
        import importlib

        return importlib.import_module("llmopt.interp")
    raise AttributeError(f"module 'llmopt' has no attribute {name!r}")
