"""Translate ``torch.export``'s first graph directly when it is already a pure ATen graph.

``torch.export.export`` returns the *pre-dispatch* graph: ATen ops before functionalization,
with regions under ``torch.no_grad()`` wrapped in a ``wrap_with_set_grad_enabled``
higher-order op. ``ExportedProgram.run_decompositions({})`` traces it once more into the
functional ATen graph that :mod:`llmopt.frontend.capture` translates — for a whole model
with a symbolic length, more than half of the capture's time, spent on symbolic-shape
arithmetic.

An inference graph without in-place ops and with no other higher-order op needs none of
that: :func:`prepare_direct` inlines the grad-mode regions (a grad mode changes nothing in
inference), drops what no output uses, and says whether the graph can be translated as it
is. The capture falls back to the decomposed graph when it cannot, or when its translation
meets an op that only the decomposed graph spells in Torch IR's terms.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch.fx import GraphModule, Node

GRAD_MODE_REGION = "wrap_with_set_grad_enabled"
"""The higher-order op that ``torch.no_grad()`` / ``enable_grad()`` regions become."""


def _mutates(node: Node) -> bool:
    """Whether ``node`` is an ATen op that writes into one of its arguments (``add_``,
    ``copy_``, an ``out=`` variant)."""
    import torch

    target = node.target
    return isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable


def _direct_ok(graph_module: GraphModule) -> bool:
    """Whether every call is a non-mutating ATen op, a Python ``getitem`` or size arithmetic
    on symbols, or a grad-mode region of such calls."""
    import torch

    for node in graph_module.graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            continue
        if node.op != "call_function":
            return False
        if str(node.target) == GRAD_MODE_REGION:
            if not _direct_ok(getattr(graph_module, node.args[1].target)):
                return False
        elif isinstance(node.target, torch._ops.HigherOrderOperator) or _mutates(node):
            return False
    return True


def _inline_regions(graph_module: GraphModule) -> None:
    """Replace every grad-mode region by its body, its results' ``getitem`` by the values."""
    graph = graph_module.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or str(node.target) != GRAD_MODE_REGION:
            continue
        body: Any = getattr(graph_module, node.args[1].target)
        _inline_regions(body)
        inputs = [n for n in body.graph.nodes if n.op == "placeholder"]
        val_map = dict(zip(inputs, node.args[2:], strict=True))
        with graph.inserting_before(node):
            results = graph.graph_copy(body.graph, val_map)
        results = results if isinstance(results, tuple | list) else (results,)
        for user in list(node.users):
            if user.target is not operator.getitem:
                raise ValueError(f"a grad-mode region's result used by {user.format_node()}")
            user.replace_all_uses_with(results[user.args[1]])
            graph.erase_node(user)
        graph.erase_node(node)


def prepare_direct(exported: torch.export.ExportedProgram) -> bool:
    """Make ``exported``'s graph directly translatable if it can be (see the module
    docstring): its grad-mode regions inlined and dead code dropped, in place (the graph
    means what it meant, so a later ``run_decompositions`` still works on it). Whether it
    now holds only non-mutating ATen ops."""
    graph_module = exported.graph_module
    if not _direct_ok(graph_module):
        return False
    _inline_regions(graph_module)
    graph_module.graph.eliminate_dead_code()
    graph_module.recompile()
    return True


__all__ = ["GRAD_MODE_REGION", "prepare_direct"]
