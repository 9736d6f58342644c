"""Host ``index`` arithmetic as value trees, and their rebuilding inside a kernel.

A kernel that must know what its launch computed on the host from a length (its grid, an
argument) computes it again: ``lengths-in-memory`` from the lengths it loads,
``fuse-launches`` from the length parameter its members share. Both read the host's ops as
an :data:`Expr` whose leaves they name, and rebuild it with an :class:`ExprBuilder`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from xdsl.dialects import arith
from xdsl.dialects.builtin import IndexType, IntegerAttr
from xdsl.ir import Operation, SSAValue

from llmopt.codegen.symbolic import is_index_arith

Expr = tuple[Hashable, ...]
"""Host ``index`` arithmetic as a tree: a leaf its reader names (``("sym", k)``,
``("len",)``), ``("const", c)`` or ``(op name, predicate or None, lhs, rhs)``."""

ARITH: dict[str, type[Operation]] = {op.name: op for op in arith.Arith.operations}
"""``arith`` ops by name: the binary ops of host ``index`` arithmetic are rebuilt from
their names."""


def index_expr(value: SSAValue, leaf: Callable[[SSAValue], Expr | None],
               cache: dict[SSAValue, Expr | None] | None = None) -> Expr | None:
    """``value`` as an :data:`Expr`: ``leaf(value)`` where that names it, an ``index``
    constant, or index arithmetic of such; ``None`` when it is anything else. ``cache``
    keeps the trees of values already read."""
    if cache is not None and value in cache:
        return cache[value]
    found = leaf(value)
    op = value.owner
    if found is None and isinstance(op, arith.ConstantOp) and isinstance(
            value.type, IndexType) and isinstance(op.value, IntegerAttr):
        found = ("const", op.value.value.data)
    elif found is None and isinstance(op, Operation) and is_index_arith(op):
        lhs, rhs = (index_expr(v, leaf, cache) for v in op.operands[:2])
        if lhs is not None and rhs is not None:
            predicate = op.predicate.value.data if isinstance(op, arith.CmpiOp) else None
            found = (op.name, predicate, lhs, rhs)
    if cache is not None:
        cache[value] = found
    return found


@dataclass
class ExprBuilder:
    """Rebuilds :data:`Expr` trees as ops, each distinct tree once: ``leaf`` gives the
    value of a leaf (adding what it needs through :meth:`add`); the ops made wait in
    ``ops`` until the caller places them."""

    leaf: Callable[[ExprBuilder, Expr], SSAValue]
    ops: list[Operation] = field(default_factory=list[Operation])
    built: dict[Expr, SSAValue] = field(default_factory=dict[Expr, SSAValue])

    def value(self, expr: Expr) -> SSAValue:
        if expr in self.built:
            return self.built[expr]
        if expr[0] == "const":
            result = self.add(arith.ConstantOp(IntegerAttr(int(expr[1]),  # type: ignore[arg-type]
                                                           IndexType())))
        elif len(expr) == 4:
            lhs, rhs = (self.value(e) for e in expr[2:])  # type: ignore[arg-type]
            if expr[0] == "arith.cmpi":
                result = self.add(arith.CmpiOp(lhs, rhs, int(expr[1])))  # type: ignore[arg-type]
            else:
                result = self.add(ARITH[str(expr[0])](lhs, rhs))  # type: ignore[call-arg]
        else:
            result = self.leaf(self, expr)
        self.built[expr] = result
        return result

    def add(self, op: Operation) -> SSAValue:
        self.ops.append(op)
        return op.results[0]

    def take(self) -> list[Operation]:
        """The ops made since the last call, to be placed before their first use."""
        ops, self.ops = self.ops, []
        return ops
