"""Affine expressions over dims of known ranges: the values an expression takes
(:func:`expr_range`), ``mod`` and ``floordiv`` that a range makes plain (:func:`simplify`),
and one spelling of a linear expression (:func:`canonical`), so that two maps of one index
compare equal. ``index-set-split`` composes an access with ``%i = %j + k·c`` and needs all
three.
"""

from __future__ import annotations

from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
)

from llmopt.passes.loop._fuse_analysis import rebuild

Range = tuple[int, int]
"""An inclusive integer interval."""


def expr_range(expr: AffineExpr, ranges: dict[int, Range]) -> Range | None:
    """The values ``expr`` takes with each dim in ``ranges``; ``None`` when a dim it uses
    has none (or for a form this does not bound)."""
    if isinstance(expr, AffineConstantExpr):
        return expr.value, expr.value
    if isinstance(expr, AffineDimExpr):
        return ranges.get(expr.position)
    if not isinstance(expr, AffineBinaryOpExpr):
        return None
    lhs = expr_range(expr.lhs, ranges)
    rhs = expr_range(expr.rhs, ranges)
    if lhs is None or rhs is None:
        return None
    if expr.kind == AffineBinaryOpKind.Add:
        return lhs[0] + rhs[0], lhs[1] + rhs[1]
    if expr.kind == AffineBinaryOpKind.Mul:
        ends = [a * b for a in lhs for b in rhs]
        return min(ends), max(ends)
    if rhs[0] != rhs[1] or rhs[0] <= 0:
        return None
    m = rhs[0]
    if expr.kind == AffineBinaryOpKind.FloorDiv:
        return lhs[0] // m, lhs[1] // m
    if expr.kind == AffineBinaryOpKind.Mod:
        return (lhs[0] % m, lhs[1] % m) if lhs[0] // m == lhs[1] // m else (0, m - 1)
    return None


def simplify(expr: AffineExpr, ranges: dict[int, Range]) -> AffineExpr:
    """``expr`` with each ``x mod m`` and ``x floordiv m`` whose ``x`` stays within one
    multiple of ``m`` over ``ranges`` written without it (``x - q·m`` and ``q``)."""
    if not isinstance(expr, AffineBinaryOpExpr):
        return expr
    lhs, rhs = simplify(expr.lhs, ranges), simplify(expr.rhs, ranges)
    if expr.kind in (AffineBinaryOpKind.Mod, AffineBinaryOpKind.FloorDiv) and isinstance(
            rhs, AffineConstantExpr) and rhs.value > 0:
        span = expr_range(lhs, ranges)
        if span is not None and span[0] // rhs.value == span[1] // rhs.value:
            q = span[0] // rhs.value
            if expr.kind == AffineBinaryOpKind.FloorDiv:
                return AffineConstantExpr(q)
            return rebuild(lhs + AffineConstantExpr(-q * rhs.value))
    return rebuild(AffineBinaryOpExpr(expr.kind, lhs, rhs))


def linear_terms(expr: AffineExpr) -> dict[int, int] | None:
    """``expr`` as ``{dim position: coefficient}`` with the constant at ``-1``, or ``None``
    when it is not linear (a ``mod``, a ``floordiv``, a product of dims)."""
    if isinstance(expr, AffineConstantExpr):
        return {-1: expr.value}
    if isinstance(expr, AffineDimExpr):
        return {expr.position: 1}
    if not isinstance(expr, AffineBinaryOpExpr):
        return None
    lhs, rhs = linear_terms(expr.lhs), linear_terms(expr.rhs)
    if lhs is None or rhs is None:
        return None
    if expr.kind == AffineBinaryOpKind.Add:
        return {k: lhs.get(k, 0) + rhs.get(k, 0) for k in lhs.keys() | rhs.keys()}
    if expr.kind == AffineBinaryOpKind.Mul:
        for const, other in ((lhs, rhs), (rhs, lhs)):
            if set(const) <= {-1}:
                return {k: v * const.get(-1, 0) for k, v in other.items()}
    return None


def canonical(expr: AffineExpr) -> AffineExpr:
    """``expr`` with each linear part written one way: its dims in order, each times its
    coefficient, then the constant (two spellings of one index become one map)."""
    terms = linear_terms(expr)
    if terms is None:
        if isinstance(expr, AffineBinaryOpExpr):
            return rebuild(AffineBinaryOpExpr(expr.kind, canonical(expr.lhs),
                                              canonical(expr.rhs)))
        return expr
    out: AffineExpr | None = None
    for position in sorted(k for k, v in terms.items() if k >= 0 and v):
        term = AffineDimExpr(position) * terms[position]
        out = term if out is None else out + term
    const = terms.get(-1, 0)
    if out is None:
        return AffineConstantExpr(const)
    return rebuild(out + const) if const else rebuild(out)
