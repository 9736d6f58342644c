"""``torch.compile(model, backend="llmopt")``: llmopt as a Dynamo backend.

The backend (:func:`~llmopt.dynamo.compiler.backend`) is registered through the
``torch_dynamo_backends`` entry point; :func:`~llmopt.dynamo.explain.explain` says which ops of
a model would run in PyTorch. Importing this package imports torch.
"""

from llmopt.dynamo.compiler import (
    BackendOptions,
    CompiledGraph,
    LlmoptFallbackWarning,
    LlmoptInterpreterWarning,
    backend,
    specialization_key,
    symbolic_dims,
)
from llmopt.dynamo.explain import Explanation, explain
from llmopt.dynamo.partition import Fallback, LlmoptSupport

__all__ = [
    "BackendOptions", "CompiledGraph", "Explanation", "Fallback", "LlmoptFallbackWarning",
    "LlmoptInterpreterWarning", "LlmoptSupport", "backend", "explain", "specialization_key",
    "symbolic_dims",
]  # fmt: skip
