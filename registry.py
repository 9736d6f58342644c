"""Registries of llmopt's dialects, passes, named pipelines and targets.

Everything here is imported lazily: a registry entry is a zero-argument factory, so that
`llm-opt` on a small file does not import torch, transformers or CUDA libraries unless a
pass that needs them runs.

Researchers extend llmopt with :func:`register_pass` and :func:`register_dialect`.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import TypeVar

from xdsl.ir import Dialect
from xdsl.passes import ModulePass

_PassT = TypeVar("_PassT", bound=type[ModulePass])

#: dialect name -> factory returning the xDSL ``Dialect``
DIALECTS: dict[str, Callable[[], Dialect]] = {}
#: pass name -> factory returning the ``ModulePass`` subclass
PASSES: dict[str, Callable[[], type[ModulePass]]] = {}


def _lazy(module: str, attr: str) -> Callable[[], object]:
    def factory() -> object:
        return getattr(import_module(module), attr)

    return factory


def register_dialect(dialect: Dialect | Callable[[], Dialect]) -> None:
    """Make a dialect (or a factory of one) known to ``llm-opt`` and the Python API."""
    if isinstance(dialect, Dialect):
        DIALECTS[dialect.name] = lambda d=dialect: d
    else:
        d = dialect()
        DIALECTS[d.name] = dialect


def register_pass(cls: _PassT) -> _PassT:
    """Class decorator: make an xDSL ``ModulePass`` subclass usable by name in ``-p``."""
    if not (isinstance(cls, type) and issubclass(cls, ModulePass)):
        raise TypeError(f"register_pass expects a ModulePass subclass, got {cls!r}")
    PASSES[cls.name] = lambda c=cls: c
    return cls


# --- llmopt's own dialects -------------------------------------------------------------------
for _name, _module, _attr in [
    ("torch", "llmopt.dialects.torch", "Torch"),
    ("prim", "llmopt.dialects.prim", "Prim"),
    ("loop", "llmopt.dialects.loop", "Loop"),
    ("tile", "llmopt.dialects.tile", "Tile"),
    ("kernel", "llmopt.dialects.kernel", "Kernel"),
    ("cuda", "llmopt.dialects.cuda", "Cuda"),
]:
    DIALECTS[_name] = _lazy(_module, _attr)  # type: ignore[assignment]

# --- llmopt's own passes: name -> (module, class) -----------------------------------------------
_BUILTIN_PASSES: dict[str, tuple[str, str]] = {
    "torch-to-prim": ("llmopt.lowering.torch_to_prim", "TorchToPrim"),
    "prim-to-loop": ("llmopt.lowering.prim_to_loop", "PrimToLoop"),
    "loop-to-tile": ("llmopt.lowering.loop_to_tile", "LoopToTile"),
    "tile-to-kernel": ("llmopt.lowering.tile_to_kernel", "TileToKernel"),
    "kernel-to-cuda": ("llmopt.lowering.kernel_to_cuda", "KernelToCuda"),
    "fuse-kernels": ("llmopt.passes.loop.fuse_kernels", "FuseKernels"),
}
for _name, (_module, _attr) in _BUILTIN_PASSES.items():
    PASSES[_name] = _lazy(_module, _attr)  # type: ignore[assignment]

#: named pipelines: name -> (default options, expansion). The expansion is a pass-pipeline
#: string whose ``{opt}`` placeholders are filled from the options given at the use site,
#: e.g. ``lower-to-cuda{arch=sm_80}``.
PIPELINES: dict[str, tuple[dict[str, str], str]] = {
    "lower-to-cuda": (
        {"arch": "sm_90"},
        "torch-to-prim,canonicalize,prim-to-loop,fuse-kernels,canonicalize,cse,"
        "loop-to-tile{{arch={arch}}},tile-to-kernel,canonicalize,cse,kernel-to-cuda",
    ),
}
