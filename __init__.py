"""llmopt: a hackable LLM compiler on xDSL, from PyTorch to CUDA through six IR levels.

The public API: :func:`capture`, :func:`lower`, :func:`cuda_source`, :func:`compile`,
:func:`parse`, :func:`register_pass`, :func:`register_dialect`. Heavy dependencies (torch,
CUDA) load only when a function that needs them runs.
"""

from llmopt.api import capture, compile, cuda_source, lower, make_context, parse
from llmopt.registry import register_dialect, register_pass, register_pipeline

__all__ = [
    "capture", "compile", "cuda_source", "lower", "make_context", "parse",
    "register_dialect", "register_pass", "register_pipeline",
]
__version__ = "0.1.0"
