"""Split an ATen graph into the pieces llmopt compiles and the ops left to PyTorch.

What llmopt supports is what its Torch IR importer translates:
:func:`~llmopt.frontend.capture.supported_ops` (the converter table of
:mod:`llmopt.frontend.capture`), so adding a converter there is all it takes for the backend
to compile an op. :class:`LlmoptSupport` answers torch.fx's partitioner with that table, plus
the dtypes :func:`~llmopt.frontend.capture.element_type` knows, and minus the nodes a
translation already refused (a converter can turn down an op it lists, e.g. ``div`` with a
rounding mode). :func:`partition` runs ``CapabilityBasedPartitioner`` with it: every maximal
group of supported nodes that does not create a cycle becomes a ``call_module`` of a
``fused_<k>`` submodule; the rest stays in the graph as PyTorch calls.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch.fx.passes.operator_support import OperatorSupportBase

from llmopt.frontend.capture import (
    _DROPPED,
    _MULTI_CONVERTERS,
    CaptureError,
    _is_size,
    element_type,
    source_line,
    supported_ops,
)

if TYPE_CHECKING:
    import torch
    from torch.fx import GraphModule, Node

PREFIX = "fused_"
"""The name prefix of the submodules llmopt compiles."""


@dataclass(frozen=True)
class Fallback:
    """An ATen op that runs in PyTorch: ``count`` nodes of it, why, and where the first came
    from (a source line of the model, when the graph has one)."""

    op: str
    count: int
    reason: str
    where: str | None = None

    def __str__(self) -> str:
        text = f"{self.op} x{self.count} ({self.reason})"
        return f"{text} at {self.where}" if self.where else text


def _dtype_ok(value: Any) -> bool:
    import torch

    if isinstance(value, list | tuple):
        return all(_dtype_ok(v) for v in value)
    if not isinstance(value, torch.Tensor):
        return False
    try:
        element_type(value.dtype)
    except CaptureError:
        return False
    return True


class LlmoptSupport(OperatorSupportBase):
    """A node is supported when its ATen overload has a converter, its result and tensor
    operands have Torch IR dtypes, and no translation refused it (``refused``)."""

    def __init__(self, refused: Iterable[str] = ()) -> None:
        self.ops = frozenset(supported_ops()) - _DROPPED
        self.refused = set(refused)

    def reason(self, node: Node) -> str | None:
        """Why ``node`` is not supported, or ``None`` when it is."""
        if node.name in self.refused:
            return "its translation failed"
        if node.target is operator.getitem:
            source = node.args[0]
            if getattr(source, "op", None) == "call_function" and \
                    str(source.target) in _MULTI_CONVERTERS:  # type: ignore[union-attr]
                return self.reason(source)  # type: ignore[arg-type]
            return "a getitem of an unsupported op"
        if str(node.target) not in self.ops:
            return "no Torch IR translation"
        if not _dtype_ok(node.meta.get("val")):
            return "a result dtype Torch IR does not hold"
        tensors = [a.meta.get("val") for a in node.all_input_nodes if not _is_size(a)]
        if not all(_dtype_ok(v) for v in tensors):
            return "an operand dtype Torch IR does not hold"
        return None

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: Node
                          ) -> bool:
        return node.op == "call_function" and self.reason(node) is None


def drop_assertions(gm: GraphModule) -> None:
    """Erase the ops the importer drops (metadata and scalar assertions): shapes are fixed by
    the time the graph is partitioned, and an assertion left to PyTorch would split it."""
    for node in reversed(list(gm.graph.nodes)):
        if node.op == "call_function" and str(node.target) in _DROPPED and not node.users:
            gm.graph.erase_node(node)
    gm.recompile()


def fallbacks(gm: GraphModule, support: LlmoptSupport,
              refused: Mapping[str, str] | None = None) -> list[Fallback]:
    """The ATen ops of ``gm`` (before fusion) that run in PyTorch, most frequent first;
    ``refused`` gives the translator's message for refused nodes."""
    counts: Counter[str] = Counter()
    reasons: dict[str, str] = {}
    where: dict[str, str | None] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or _is_size(node):
            continue  # size arithmetic computes no tensor: nothing for a kernel
        why = support.reason(node)
        if why is None:
            continue
        op = str(getattr(node.target, "__name__", node.target)) \
            if node.target is operator.getitem else str(node.target)
        counts[op] += 1
        if op not in reasons:
            reasons[op] = (refused or {}).get(node.name, why)
            line = source_line(node)
            where[op] = str(line) if line else None
    return [Fallback(op, n, reasons[op], where[op]) for op, n in counts.most_common()]


def partition(gm: GraphModule, support: LlmoptSupport) -> GraphModule:
    """``gm`` with each group of supported nodes fused into a ``fused_<k>`` submodule (a
    ``call_module`` node); a group of views alone (nothing computed) stays in PyTorch."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

    partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
    parts = [p for p in partitioner.propose_partitions()
             if any(str(n.target) not in VIEW_OPS for n in p.nodes)]
    return partitioner.fuse_partitions(parts, prefix=PREFIX)


VIEW_OPS = (
    "aten.view.default", "aten.reshape.default", "aten._unsafe_view.default",
    "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims", "aten.expand.default",
    "aten.transpose.int", "aten.permute.default", "aten.t.default", "aten.slice.Tensor",
    "aten.alias.default", "aten.clone.default", "aten.detach.default",
    "_operator.getitem",
)  # fmt: skip
"""Ops that move no arithmetic: a partition of only these is not worth a kernel."""


__all__ = ["PREFIX", "Fallback", "LlmoptSupport", "drop_assertions", "fallbacks", "partition"]
