"""The loop nests ``mma-fragments`` builds: fragments of ``a`` and ``b`` loaded from their
tiles for a chunk of ``K_STEP`` (``fragment_nest``), split into TF32 parts (``tf32_hi``), and
the ``mma.sync`` products into the accumulators (``product_nests``)."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    FloatAttr,
    IntegerAttr,
    f32,
    i32,
)
from xdsl.ir import Block, SSAValue
from xdsl.ir.affine import AffineConstantExpr, AffineDimExpr, AffineExpr, AffineMap

from llmopt.dialects import loop, mma
from llmopt.passes.tile._access import UNROLL, loop_nest
from llmopt.passes.tile._mma_match import K_STEP, Operand, Update

__all__ = ["fragment_nest", "product_nests", "tf32_hi"]


def fragment_nest(operand: Operand, kk: SSAValue, kq: SSAValue, ivs: dict[str, SSAValue],
                  thread_ivs: list[SSAValue], extents: dict[str, int], terms: int,
                  split: int) -> loop.ForOp:
    """``loop.for %i (or %j), %q``: the load of one fragment element, rounded to TF32 (and
    the rounding of what is left) into the fragment registers."""
    a = operand.role == "a"
    outer = "i" if a else "j"
    nest, inner, (r, q) = loop_nest([extents[outer], 4 if a else 2], [outer, "q"], UNROLL)
    load = operand.load
    merged: list[SSAValue] = []

    def dim(value: SSAValue) -> AffineExpr:
        for k, m in enumerate(merged):
            if m is value:
                return AffineDimExpr(k)
        merged.append(value)
        return AffineDimExpr(len(merged) - 1)

    k_col = dim(kq) * K_STEP + dim(ivs["t"]) + ((dim(q) // 2) * 4 if a else dim(q) * 4)
    replace: list[AffineExpr] = []
    for value in load.indices:
        if value is kk:
            replace.append(k_col)
        elif value is ivs[outer]:
            replace.append(dim(r))
        elif a and value is ivs["rh"]:
            replace.append(dim(q) % 2)
        elif not a and value is ivs["t"]:
            replace.append(AffineConstantExpr(0))
        elif not a and value is ivs["rl"]:
            replace.append(dim(ivs["g"]))
        else:
            replace.append(dim(value))
    results = tuple(e.replace_dims_and_symbols(replace, []) for e in load.map.data.results)
    value = loop.LoadOp(load.buffer, AffineMap(len(merged), 0, results), list(merged),
                        load.clamped)
    inner.add_op(value)
    hi = tf32_hi(inner, value.result, split if terms == 3 else 1)
    where = [*thread_ivs, r, q]
    frag_map = AffineMap.identity(len(where))
    assert operand.hi is not None
    inner.add_op(loop.StoreOp(hi, operand.hi, frag_map, where))
    if terms == 3:
        assert operand.lo is not None
        rest = arith.SubfOp(value.result, hi)
        inner.add_op(rest)
        lo = rest.result
        if split == 1:
            rounded = mma.ToTf32Op(rest.result)
            inner.add_op(rounded)
            lo = rounded.result
        inner.add_op(loop.StoreOp(lo, operand.lo, frag_map, where))
    return nest


def tf32_hi(block: Block, x: SSAValue, split: int) -> SSAValue:
    """``x``'s TF32 part: ``mma.to_tf32`` (split 1 and 2), or ``x`` with its low 13 bits
    cleared (3: one ``and``, where the rounding costs four instructions on sm_90)."""
    if split != 3:
        op = mma.ToTf32Op(x)
        block.add_op(op)
        return op.result
    bits = arith.BitcastOp(x, i32)
    mask = arith.ConstantOp(IntegerAttr(-0x2000, i32))
    cleared = arith.AndIOp(bits.result, mask.result)
    back = arith.BitcastOp(cleared.result, f32)
    block.add_ops([bits, mask, cleared, back])
    return back.result


def product_nests(updates: list[Update], operands: dict[tuple[object, ...], Operand],
                  thread_ivs: list[SSAValue], extents: dict[str, int], terms: int,
                  parts: list[SSAValue] | None, zero: bool = True,
                  accumulate: bool = True, order: int = 2) -> list[loop.ForOp]:
    """``loop.for %i, %j`` nests: per update, ``terms`` tensor-core products summed from
    zero and then added to the accumulator's four elements in ``f32``. ``parts`` (one
    ``[…, I, J, 4]`` register buffer per update, or ``None``: each ``(i, j)``'s chain from
    zero straight into the accumulators) hold the sums between nests: ``order`` 2 takes
    the products term by term over every ``(i, j)`` (independent products back to back),
    1 each ``(i, j)``'s chain at once; ``zero``/``accumulate``: start with the nest that
    zeroes ``parts`` / end with the one adding them to the accumulators."""
    n = len(thread_ivs)

    def loads(block: Block, buffer: SSAValue, prefix: list[SSAValue], tail: list[int]
              ) -> list[SSAValue]:
        values = []
        for q in tail:
            dims = [AffineDimExpr(d) for d in range(n + len(prefix))]
            amap = AffineMap(n + len(prefix), 0, (*dims, AffineConstantExpr(q)))
            load = loop.LoadOp(buffer, amap, [*thread_ivs, *prefix])
            block.add_op(load)
            values.append(load.result)
        return values

    def spot(rh: int, rl: int) -> AffineMap:
        dims = [AffineDimExpr(d) for d in range(n)]
        return AffineMap(n + 2, 0, (*dims, AffineDimExpr(n), AffineConstantExpr(rh),
                                    AffineDimExpr(n + 1), AffineConstantExpr(rl)))

    spots = [spot(rh, rl) for rh, rl in ((0, 0), (0, 1), (1, 0), (1, 1))]

    def chain(a: Operand, b: Operand) -> list[tuple[SSAValue, SSAValue]]:
        assert a.hi is not None and b.hi is not None
        if terms == 1:
            return [(a.hi, b.hi)]
        assert a.lo is not None and b.lo is not None
        return [(a.lo, b.hi), (a.hi, b.lo), (a.hi, b.hi)]

    def product(block: Block, fa: SSAValue, fb: SSAValue, i: SSAValue, j: SSAValue,
                c: list[SSAValue]) -> list[SSAValue]:
        op = mma.SyncOp(loads(block, fa, [i], [0, 1, 2, 3]), loads(block, fb, [j], [0, 1]), c)
        block.add_op(op)
        return list(op.results)

    def add_to(block: Block, acc: SSAValue, where: list[SSAValue],
               d: list[SSAValue]) -> None:
        for amap, part in zip(spots, d, strict=True):
            old = loop.LoadOp(acc, amap, where)
            total = arith.AddfOp(old.result, part)
            block.add_ops([old, total, loop.StoreOp(total.result, acc, amap, where)])

    def ij_nest() -> tuple[loop.ForOp, Block, list[SSAValue]]:
        return loop_nest([extents["i"], extents["j"]], ["i", "j"], UNROLL)

    def store_part(block: Block, part: SSAValue, i: SSAValue, j: SSAValue,
                   values: Sequence[SSAValue]) -> None:
        for r, value in enumerate(values):
            dims = [AffineDimExpr(k) for k in range(n + 2)]
            amap = AffineMap(n + 2, 0, (*dims, AffineConstantExpr(r)))
            block.add_op(loop.StoreOp(value, part, amap, [*thread_ivs, i, j]))

    if parts is None:
        nest, inner, (i, j) = ij_nest()
        for update in updates:
            zero = arith.ConstantOp(FloatAttr(0.0, f32))
            inner.add_op(zero)
            d = [zero.result] * 4
            for fa, fb in chain(operands[update.a], operands[update.b]):
                d = product(inner, fa, fb, i, j, d)
            add_to(inner, update.store.buffer, [*thread_ivs, i, j], d)
        return [nest]
    nests = []
    if zero:
        nest, inner, (i, j) = ij_nest()
        cst = arith.ConstantOp(FloatAttr(0.0, f32))
        inner.add_op(cst)
        for part in parts:
            store_part(inner, part, i, j, [cst.result] * 4)
        nests.append(nest)
    if order == 1 and terms:
        nest, inner, (i, j) = ij_nest()
        for update, part in zip(updates, parts, strict=True):
            d = loads(inner, part, [i, j], [0, 1, 2, 3])
            for fa, fb in chain(operands[update.a], operands[update.b]):
                d = product(inner, fa, fb, i, j, d)
            store_part(inner, part, i, j, d)
        nests.append(nest)
    for term in range(terms if order == 2 else 0):
        nest, inner, (i, j) = ij_nest()
        for update, part in zip(updates, parts, strict=True):
            fa, fb = chain(operands[update.a], operands[update.b])[term]
            c = loads(inner, part, [i, j], [0, 1, 2, 3])
            store_part(inner, part, i, j, product(inner, fa, fb, i, j, c))
        nests.append(nest)
    if accumulate:
        nest, inner, (i, j) = ij_nest()
        for update, part in zip(updates, parts, strict=True):
            d = loads(inner, part, [i, j], [0, 1, 2, 3])
            add_to(inner, update.store.buffer, [*thread_ivs, i, j], d)
        nests.append(nest)
    return nests


