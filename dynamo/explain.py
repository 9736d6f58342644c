"""``llmopt.explain(model, inputs)``: what the backend would compile, and what runs in PyTorch.

:func:`explain` compiles ``model`` with an analysing instance of the backend and calls it once:
every graph Dynamo hands over is exported, partitioned and translated to Torch IR exactly as
``backend="llmopt"`` does, but nothing is lowered and the graphs run in PyTorch, so the answer
comes in about the time of an export.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from llmopt.dynamo.compiler import BackendOptions, CompiledGraph
from llmopt.dynamo.partition import Fallback


@dataclass(frozen=True)
class Explanation:
    """What ``torch.compile(model, backend="llmopt")`` does with a model.

    Attributes:
        graphs: the graphs Dynamo compiled (one more than its graph breaks).
        partitions: the pieces llmopt compiles, over all graphs.
        compiled_ops: the ATen ops in those pieces.
        fallbacks: the ATen ops that run in PyTorch, each with a count and a reason.
        symbolic: per graph, Dynamo's symbolic dims (input -> {dim: symbol}).
    """

    graphs: int
    partitions: int
    compiled_ops: int
    fallbacks: list[Fallback] = field(default_factory=list[Fallback])
    symbolic: list[dict[str, dict[int, str]]] = field(
        default_factory=list[dict[str, dict[int, str]]])

    @property
    def fallback_ops(self) -> list[str]:
        """The names of the ATen ops that run in PyTorch."""
        return [f.op for f in self.fallbacks]

    def __str__(self) -> str:
        lines = [f"{self.graphs} graph(s), {self.partitions} llmopt piece(s) holding "
                 f"{self.compiled_ops} ATen op(s); {len(self.fallbacks)} op(s) run in PyTorch"]
        lines += [f"  {f}" for f in self.fallbacks]
        return "\n".join(lines)


def explain(model: Any, inputs: Sequence[Any], kwargs: Mapping[str, Any] | None = None, *,
            dynamic: bool | None = None, options: Mapping[str, Any] | None = None
            ) -> Explanation:
    """Compile ``model`` (a module or function) for analysis and call it once on ``inputs``
    (positional) and ``kwargs``; return what the llmopt backend compiles and what falls back.

    ``dynamic`` is passed to ``torch.compile``; ``options`` are the backend's
    (:class:`~llmopt.dynamo.compiler.BackendOptions`).
    """
    parsed = BackendOptions.parse({**dict(options or {}), "explain": True})
    graphs: list[CompiledGraph] = []

    def analyse(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> CompiledGraph:
        graphs.append(CompiledGraph(gm, example_inputs, parsed))
        return graphs[-1]

    compiled = torch.compile(model, backend=analyse, dynamic=dynamic)
    with torch.no_grad():
        compiled(*inputs, **dict(kwargs or {}))
    merged: dict[str, Fallback] = {}
    partitions = compiled_ops = 0
    for graph in graphs:
        for spec in graph.cache.values():
            partitions += spec.partitions
            compiled_ops += spec.compiled_ops
        for f in graph.fallbacks:
            if f.op in merged:
                f = Fallback(f.op, merged[f.op].count + f.count, merged[f.op].reason,
                             merged[f.op].where)
            merged[f.op] = f
    return Explanation(len(graphs), partitions, compiled_ops,
                       sorted(merged.values(), key=lambda f: -f.count),
                       [g.symbolic for g in graphs])


__all__ = ["Explanation", "explain"]
