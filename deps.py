"""llmopt's optional dependencies: what each one is needed for and how to install it.

torch, transformers, safetensors and the CUDA libraries load only where they are used (the
IR tools start without them). When one is missing, :func:`missing_dependency` turns the
``ImportError`` into a :class:`MissingDependency` whose message is one line — the package
and the ``pip`` command that installs it — which ``llmopt`` and ``llm-opt`` print instead
of a traceback (exit status 1). Library code raises :class:`MissingDependency` itself where
a dependency is found missing only when it is used (a CUDA library that cuda-python cannot
load).
"""

from __future__ import annotations

__all__ = ["INSTALL", "MissingDependency", "missing_dependency"]

TORCH_CPU = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
"""The CPU build of torch on any machine (a plain ``pip install torch`` may fetch a CUDA
build of several GB)."""

MODELS = "pip install 'transformers>=5.0' safetensors tqdm"
"""The ``models`` extra of llmopt (``pip install -e '.[models]'`` in a checkout)."""

CUDA = "pip install cuda-python nvidia-cuda-nvrtc 'cuda-toolkit[cudart,cccl,crt]'"
"""cuda-python, the NVRTC library and the CUDA headers NVRTC compiles against."""

INSTALL: dict[str, tuple[str, str]] = {
    "torch": ("torch", TORCH_CPU),
    "transformers": ("transformers (llmopt's 'models' extra)", MODELS),
    "safetensors": ("safetensors (llmopt's 'models' extra)", MODELS),
    "tqdm": ("tqdm (llmopt's 'models' extra)", MODELS),
    "cuda": ("cuda-python", CUDA),
}
"""Top-level module name -> (the package to install, the command that installs it)."""


class MissingDependency(ImportError):
    """An optional dependency is not installed (or cannot be loaded).

    Its message is ``needs PACKAGE: COMMAND``; ``package`` and ``install`` hold the parts.
    """

    def __init__(self, package: str, install: str) -> None:
        super().__init__(f"needs {package}: {install}")
        self.package = package
        self.install = install


def missing_dependency(err: BaseException) -> MissingDependency | None:
    """The missing optional dependency behind ``err``, if that is what it is: ``err`` or an
    exception it was raised from (``__cause__``, ``__context__``) is a
    :class:`MissingDependency`, or a ``ModuleNotFoundError`` for a module of :data:`INSTALL`."""
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, MissingDependency):
            return cause
        if isinstance(cause, ModuleNotFoundError) and cause.name:
            known = INSTALL.get(cause.name.split(".")[0])
            if known is not None:
                return MissingDependency(*known)
        cause = cause.__cause__ or cause.__context__
    return None
