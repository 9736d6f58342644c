"""The affine helpers of ``index-set-split``: ranges, ``mod``/``floordiv`` made plain over a
range, and one spelling of a linear expression."""

from __future__ import annotations

import itertools

import pytest
from xdsl.ir.affine import AffineConstantExpr, AffineDimExpr, AffineExpr, AffineMap

from llmopt.passes.loop._affine_ranges import canonical, expr_range, simplify

D0, D1 = AffineDimExpr(0), AffineDimExpr(1)


def _values(expr: AffineExpr, ranges: dict[int, tuple[int, int]]) -> list[int]:
    amap = AffineMap(2, 0, (expr,))
    spans = [range(ranges.get(k, (0, 3))[0], ranges.get(k, (0, 3))[1] + 1) for k in range(2)]
    return [amap.eval(list(point), [])[0] for point in itertools.product(*spans)]


@pytest.mark.parametrize(("expr", "plain"), [
    ((D0 + 32) % 32, D0),
    ((D0 + -32) % 32, D0),
    ((D0 % 32) + 32, D0 + 32),
    ((D0 + 32) // 32, AffineConstantExpr(1)),
    (D1 * 64 + ((D0 + 32) % 32), D1 * 64 + D0),
])
def test_a_range_inside_one_multiple_drops_mod_and_floordiv(expr: AffineExpr,
                                                            plain: AffineExpr) -> None:
    ranges = {0: (0, 31)}
    got = simplify(expr, ranges)
    assert str(canonical(got)) == str(canonical(plain))
    assert _values(got, ranges) == _values(expr, ranges)


def test_a_range_across_multiples_keeps_the_mod() -> None:
    expr = (D0 + 16) % 32
    assert "mod" in str(simplify(expr, {0: (0, 31)}))
    assert expr_range(expr, {0: (0, 31)}) == (0, 31)


def test_two_spellings_of_one_index_become_one() -> None:
    a = (D1 * 8 + D0) + 4
    b = D1 * 8 + (D0 + 4)
    c = (D0 + 4) + D1 * 8
    assert str(canonical(a)) == str(canonical(b)) == str(canonical(c))
    assert _values(canonical(a), {}) == _values(a, {})
