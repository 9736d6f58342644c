"""Range-aware simplification of ``floordiv``/``mod`` in re-indexing (``passes/tile/_access``):
the simplified expression is checked against the original at every point of the ranges."""

from __future__ import annotations

import itertools

import pytest
from xdsl.ir.affine import AffineConstantExpr, AffineDimExpr, AffineExpr, AffineMap

from llmopt.passes.tile._access import Range, simplify_ranges

BN, NJ, TJ = AffineDimExpr(0), AffineDimExpr(1), AffineDimExpr(2)
RANGES: list[Range] = [(0, 13), (0, 3), (0, 15)]
COLUMN = BN * 64 + NJ * 16 + TJ  # a 64-wide block's column: bn·64 + nj·16 + tj


def _values(expr: AffineExpr, ranges: list[Range]) -> list[int]:
    amap = AffineMap(len(ranges), 0, (expr,))
    points = itertools.product(*(range(lo, hi + 1) for lo, hi in ranges))  # type: ignore[operator]
    return [amap.eval(list(p), [])[0] for p in points]


@pytest.mark.parametrize("expr,want", [
    # a block's 64 columns lie in one head of 128: the head is the block's
    (COLUMN // 128, "(d0 floordiv 2)"),
    (COLUMN % 128, "(((d1 * 16) + d2) + ((d0 mod 2) * 64))"),
    ((COLUMN // 128) // 7, "((d0 floordiv 2) floordiv 7)"),
    ((COLUMN + 64) // 128, "((d0 + 1) floordiv 2)"),
    # the fine part may reach past 64: nothing to split
    ((COLUMN + 5) // 128, None),
    # the earlier rules still apply
    ((BN * 128 + TJ) // 128, "d0"),
    ((BN * 256 + TJ * 32) // 32, None),
])
def test_split_division_is_exact(expr: AffineExpr, want: str | None) -> None:
    got = simplify_ranges(expr, RANGES)
    if want is not None:
        assert str(got) == want
    assert _values(got, RANGES) == _values(expr, RANGES)


@pytest.mark.parametrize("c", [2, 3, 8, 24, 64, 96, 128, 192])
@pytest.mark.parametrize("shift", [0, 1, 16, 63, 64, 130])
def test_division_and_remainder_keep_their_values(c: int, shift: int) -> None:
    for expr in (COLUMN + shift, BN * 48 + NJ * 12 + TJ + shift, BN * 96 + TJ * 4 + shift):
        for op in (expr // c, expr % c):
            assert _values(simplify_ranges(op, RANGES), RANGES) == _values(op, RANGES), op
    assert isinstance(simplify_ranges(AffineConstantExpr(7) // 2, RANGES), AffineConstantExpr)
