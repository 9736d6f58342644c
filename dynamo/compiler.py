"""The ``llmopt`` backend of ``torch.compile``: each graph Dynamo hands over, compiled by llmopt.

Dynamo calls :func:`backend` once per graph (a graph break gives two graphs, each compiled on
its own) with a torch-level FX graph whose placeholders are the frame's inputs, parameters and
buffers. :class:`CompiledGraph` is what it returns; on a call it

1. looks the call's shapes up in its cache and, on a miss, **specialises** the graph to them
   (:meth:`CompiledGraph._specialise`) — to one *symbolic* program when Dynamo's graph has
   symbolic sizes (``dynamic=True``, or a dim marked dynamic) and the call's extents there
   lie in ``[2, max_seq]`` (:func:`symbolic_key`), else to the call's exact shapes
   (:func:`specialization_key`):
2. ``torch.export`` of the Dynamo graph on the call's tensors (those symbolic dims exported as
   ``torch.export.Dim`` of at least 2 and at most ``max_seq``), with the empty decomposition
   table — the same ATen level :func:`llmopt.capture` translates (``linear``, ``silu``,
   ``scaled_dot_product_attention`` and ``rms_norm`` intact), where ``aot_autograd`` would
   have decomposed them into ``addmm`` and backend-specific attention kernels;
3. partitions the ATen graph (:mod:`llmopt.dynamo.partition`): supported groups become
   ``fused_<k>`` submodules, each translated to Torch IR
   (:func:`~llmopt.frontend.graph.capture_graph`), lowered and replaced by a
   :class:`~llmopt.dynamo.runner.PartitionRunner`; a node the translator refuses joins the ops
   left to PyTorch and the graph is partitioned again;
4. lists the ops that run in PyTorch once (an :class:`LlmoptFallbackWarning`).

Dynamo itself never recompiles for a new length when the frame was compiled with
``dynamic=True`` (or the dim marked dynamic): its graph is symbolic, and so is llmopt's
program — one set of kernels for every length from 2 to ``max_seq``, the length read from
the call's shapes. A length outside that range, or a graph whose symbolic export or
translation fails (said once, in an :class:`LlmoptFallbackWarning`), gets a program per
length instead. See ``docs/torch-compile.md``.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from llmopt.dynamo.partition import (
    PREFIX,
    Fallback,
    LlmoptSupport,
    drop_assertions,
    fallbacks,
    partition,
)

MAX_RETRIES = 16
"""How many refused nodes a graph may have before its remaining partitions run in PyTorch."""


class LlmoptFallbackWarning(UserWarning):
    """Some ops of a compiled graph run in PyTorch (listed in the message)."""


class LlmoptInterpreterWarning(UserWarning):
    """No CUDA tensors: llmopt's kernels run in the Kernel-IR interpreter on the CPU."""


@dataclass(frozen=True)
class BackendOptions:
    """``torch.compile(model, backend="llmopt", options={...})``.

    Attributes:
        dtype: run the graph in this floating-point dtype (a ``torch.dtype`` or its name,
            ``"bfloat16"``): floating inputs and weights are converted once per
            specialisation, results converted back. ``None`` keeps the model's dtypes.
        cuda_graph: replay each compiled partition from a CUDA graph (its results are then
            static buffers overwritten by the next call, as with ``llmopt.compile``).
        pipeline: the pass pipeline (lowered for the GPU's architecture on a GPU, to Kernel
            IR for the CPU interpreter).
        interpret: run the Kernel-IR interpreter even for CUDA tensors (results copied back).
        max_seq: the largest extent of a symbolic dim that the one symbolic program serves
            (its buffers are planned for it); longer calls get a program of their own.
    """

    dtype: torch.dtype | None = None
    cuda_graph: bool = False
    pipeline: str = "lower-to-cuda"
    interpret: bool = False
    max_seq: int = 2048
    explain: bool = field(default=False, repr=False)
    """Analyse only (for :func:`llmopt.explain`): partition and translate, run in PyTorch."""

    @classmethod
    def parse(cls, options: Mapping[str, Any] | None) -> BackendOptions:
        """Options from ``torch.compile``'s dict; unknown keys raise ``ValueError``."""
        values = dict(options or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown llmopt backend option(s) {unknown}; options: "
                             f"{sorted(known - {'explain'})}")
        dtype = values.get("dtype")
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype, None)
        if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise ValueError(f"dtype must be a floating-point torch dtype, got "
                             f"{values.get('dtype')!r}")
        values["dtype"] = dtype
        top = values.get("max_seq", cls.max_seq)
        if isinstance(top, bool) or not isinstance(top, int) or top < 2:
            raise ValueError(f"max_seq must be an integer of at least 2, got {top!r}")
        return cls(**values)


_SAID: set[str] = set()
"""Process-wide notes already given (the interpreter warning comes once)."""


def _say_once(key: str, message: str, category: type[Warning]) -> None:
    if key not in _SAID:
        _SAID.add(key)
        warnings.warn(message, category, stacklevel=4)


def specialization_key(args: Sequence[Any]) -> tuple[Any, ...]:
    """What one compiled program is specialised to: each tensor's shape, dtype and device
    (and the value of a scalar tensor, which a graph may read with ``.item()``), each
    number's value.

    The key of a program for exact shapes; the one symbolic program's key is
    :func:`symbolic_key`, which leaves Dynamo's symbolic dims out.
    """
    key: list[Any] = []
    for arg in args:
        if isinstance(arg, torch.Tensor):
            scalar = arg.item() if arg.ndim == 0 and arg.device.type == "cpu" else None
            key.append((tuple(arg.shape), arg.dtype, arg.device, scalar))
        else:
            key.append(arg)
    return tuple(key)


def symbolic_key(args: Sequence[Any], dims: Mapping[int, Mapping[int, str]], max_seq: int,
                 sizes: Iterable[int] = ()) -> tuple[Any, ...] | None:
    """:func:`specialization_key` with the extents of ``dims`` (argument position -> {dim:
    symbol}) and the size arguments at ``sizes`` (Dynamo passes a symbolic size it reads as
    an ``int``) left out: the key of the one symbolic program. ``None`` when there are no such
    dims or an extent there lies outside ``[2, max_seq]`` (export specialises 1)."""
    if not dims:
        return None
    key = list(specialization_key(args))
    for k in sizes:
        key[k] = None
    for k, entries in dims.items():
        shape, *rest = key[k]
        if any(not 2 <= shape[d] <= max_seq for d in entries):
            return None
        key[k] = (tuple(None if d in entries else e for d, e in enumerate(shape)), *rest)
    return ("symbolic", *key)


def size_arguments(gm: torch.fx.GraphModule) -> dict[int, str]:
    """The positions of ``gm``'s placeholders that are symbolic ``int`` sizes, and their
    symbols."""
    return {k: str(value.node.expr)
            for k, node in enumerate(gm.graph.find_nodes(op="placeholder"))
            if isinstance(value := node.meta.get("example_value"), torch.SymInt)
            and value.node.expr.is_Symbol}


def symbolic_dims(gm: torch.fx.GraphModule) -> dict[str, dict[int, str]]:
    """Dynamo's symbolic dims of the graph's tensor inputs, as :func:`llmopt.capture`'s
    ``dynamic=`` (placeholder name -> {dim: symbol})."""
    out: dict[str, dict[int, str]] = {}
    for node in gm.graph.find_nodes(op="placeholder"):
        value = node.meta.get("example_value")
        if not isinstance(value, torch.Tensor):
            continue
        dims = {d: str(e.node.expr) for d, e in enumerate(value.shape)
                if isinstance(e, torch.SymInt) and not e.node.expr.is_number}
        if dims:
            out[node.name] = dims
    return out


@dataclass
class Specialised:
    """The graph at one set of shapes: the partitioned ATen graph whose ``fused_<k>``
    submodules are llmopt programs, and how the call's arguments reach it."""

    module: torch.fx.GraphModule
    inputs: list[Callable[[Sequence[Any]], Any]]
    out_spec: Any
    fallbacks: list[Fallback]
    partitions: int
    compiled_ops: int
    restore: list[torch.dtype | None]

    def __call__(self, args: Sequence[Any]) -> Any:
        from torch.utils._pytree import tree_unflatten

        flat = self.module(*(get(args) for get in self.inputs))
        flat = [out if dtype is None else out.to(dtype)
                for out, dtype in zip(flat, self.restore, strict=True)]
        return tree_unflatten(flat, self.out_spec)


class CompiledGraph:
    """What :func:`backend` returns for one Dynamo graph: a cache of :class:`Specialised`
    programs by :func:`specialization_key`."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                 options: BackendOptions) -> None:
        self.gm = gm
        self.options = options
        self.cache: dict[tuple[Any, ...], Specialised] = {}
        self.symbolic = symbolic_dims(gm)
        placeholders = [n.name for n in gm.graph.find_nodes(op="placeholder")]
        self.symbolic_args = {placeholders.index(name): dims
                              for name, dims in self.symbolic.items()}
        """Argument position -> {dim: Dynamo's symbol}."""
        self.size_args = size_arguments(gm)
        """Positions of the arguments that are symbolic sizes (``int`` at a call)."""
        self.symbolic_error: str | None = None
        """Why the symbolic program could not be built (then every length has its own)."""
        self._warned: set[tuple[str, ...]] = set()

    def __call__(self, *args: Any) -> Any:
        if self.options.explain:
            self._lookup(args)  # analyse only: partition and translate, then run in PyTorch
            return self.gm(*args)
        if torch.is_grad_enabled() and any(
                isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            _say_once("grad", "llmopt compiles inference: with gradients required the graph "
                      "runs in PyTorch (call it under torch.no_grad())", LlmoptFallbackWarning)
            return self.gm(*args)
        return self._lookup(args)(args)

    def _lookup(self, args: Sequence[Any]) -> Specialised:
        key = None
        if self.symbolic_error is None:
            key = symbolic_key(args, self.symbolic_args, self.options.max_seq, self.size_args)
        if key is not None and key not in self.cache:
            try:
                self._add(key, args, self.symbolic_args, self.size_args)
            except Exception as err:  # noqa: BLE001 - reported; each length gets a program
                self.symbolic_error = f"{type(err).__name__}: {err}".splitlines()[0]
                warnings.warn(f"llmopt: no one program for every length ({self.symbolic_error})"
                              "; compiling a program per length", LlmoptFallbackWarning,
                              stacklevel=3)
                key = None
        if key is None:
            key = specialization_key(args)
            if key not in self.cache:
                self._add(key, args)
        return self.cache[key]

    def _add(self, key: tuple[Any, ...], args: Sequence[Any],
             dynamic: Mapping[int, Mapping[int, str]] | None = None,
             sizes: Mapping[int, str] | None = None) -> None:
        """:meth:`_specialise` into the cache under ``key``; the ops left to PyTorch are
        said once per set of them."""
        with torch.no_grad():
            found = self.cache[key] = self._specialise(args, dynamic, sizes)
        names = tuple(f.op for f in found.fallbacks)
        if names and names not in self._warned and not self.options.explain:
            self._warned.add(names)
            listed = "; ".join(str(f) for f in found.fallbacks)
            warnings.warn(f"llmopt: {len(names)} op(s) run in PyTorch: {listed}",
                          LlmoptFallbackWarning, stacklevel=4)

    @property
    def fallbacks(self) -> list[Fallback]:
        """The ops left to PyTorch, over every specialisation so far."""
        seen: dict[str, Fallback] = {}
        for spec in self.cache.values():
            for f in spec.fallbacks:
                seen.setdefault(f.op, f)
        return list(seen.values())

    def _specialise(self, args: Sequence[Any],
                    dynamic: Mapping[int, Mapping[int, str]] | None = None,
                    sizes: Mapping[int, str] | None = None) -> Specialised:
        from llmopt.dynamo.specialise import specialise

        return specialise(self.gm, args, self.options, dynamic, sizes)


def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *,
            options: Mapping[str, Any] | None = None, mode: str | None = None
            ) -> CompiledGraph:
    """The ``torch.compile`` backend (``backend="llmopt"``, registered through the
    ``torch_dynamo_backends`` entry point); ``mode`` is accepted and ignored."""
    return CompiledGraph(gm, example_inputs, BackendOptions.parse(options))


def copy_graph(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose graph can be edited without touching Dynamo's."""
    return torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))


__all__ = [
    "PREFIX", "BackendOptions", "CompiledGraph", "LlmoptFallbackWarning",
    "LlmoptInterpreterWarning", "Specialised", "backend", "copy_graph", "drop_assertions",
    "fallbacks", "partition", "specialization_key", "symbolic_dims", "symbolic_key",
    "LlmoptSupport",
]  # fmt: skip
