"""Re-indexing cloned loop bodies: loop variables replaced by affine expressions of others.

The Tile-IR scheduling passes split a loop variable into several (a block index, a thread
index, a register index). Loads and stores take their indices through an affine map, so the
substitution composes into the map; any other user of the variable gets the value computed
with ``arith`` ops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, UnitAttr, i64
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.ir.affine import AffineConstantExpr, AffineDimExpr, AffineExpr, AffineMap

from llmopt.dialects import loop, tile

INDEX = IndexType()

UNROLL: dict[str, Attribute] = {"unroll": IntegerAttr(0, i64)}
"""The attributes of a loop that ``kernel-to-cuda`` unrolls completely (``#pragma unroll``)."""


@dataclass(frozen=True)
class Linear:
    """``const + sum(coef * value)`` over index values."""

    terms: tuple[tuple[int, SSAValue], ...]
    const: int = 0

    @staticmethod
    def of(*terms: tuple[int, SSAValue], const: int = 0) -> Linear:
        """A linear expression; terms with coefficient 0 are dropped."""
        return Linear(tuple((c, v) for c, v in terms if c), const)


def lin_sum(*parts: tuple[int, Linear]) -> Linear:
    """``Σ coef · linear``."""
    terms = [(coef * c, v) for coef, lin in parts for c, v in lin.terms]
    return Linear.of(*terms, const=sum(coef * lin.const for coef, lin in parts))


def at(coords: Sequence[Linear], operands: list[SSAValue] | None = None
       ) -> tuple[AffineMap, list[SSAValue]]:
    """The affine map and operands of an access at ``coords``; given ``operands`` (another
    access's, for a copy whose two maps share one operand list), they are extended and the
    map is over all of them."""
    operands = [] if operands is None else operands
    results: list[AffineExpr] = []
    for lin in coords:
        expr: AffineExpr = AffineConstantExpr(lin.const)
        for coef, value in lin.terms:
            if value not in operands:
                operands.append(value)
            expr = expr + AffineDimExpr(operands.index(value)) * coef
        results.append(expr)
    n = len(operands)
    ranges = [iv_range(v) for v in operands]
    return AffineMap(n, 0, tuple(simplified(e, n, ranges) for e in results)), operands


def load_at(buffer: tile.AllocOp, *coords: Linear) -> loop.LoadOp:
    return loop.LoadOp(buffer.result, *at(coords))


def store_at(value: SSAValue, buffer: tile.AllocOp, *coords: Linear) -> loop.StoreOp:
    return loop.StoreOp(value, buffer.result, *at(coords))


@dataclass
class Cloner:
    """Clones region-less ops into a block, with index values substituted.

    ``subst`` maps an old index value to a :class:`Linear` over new values; ``values`` maps
    other old values to new ones. Loads and stores get composed affine maps; other users of
    a substituted value get it computed by ``arith`` ops (once per cloner).
    """

    subst: dict[SSAValue, Linear]
    values: dict[SSAValue, SSAValue] = field(default_factory=dict)
    _materialised: dict[SSAValue, SSAValue] = field(default_factory=dict)

    def expr_of(self, old: SSAValue, operands: list[SSAValue]) -> AffineExpr:
        """``old`` as an affine expression over ``operands`` (appended to as needed)."""

        def dim(value: SSAValue) -> AffineExpr:
            if value not in operands:
                operands.append(value)
            return AffineDimExpr(operands.index(value))

        lin = self.subst.get(old)
        if lin is None:
            return dim(self.values.get(old, old))
        expr: AffineExpr = AffineConstantExpr(lin.const)
        for coef, value in lin.terms:
            expr = expr + dim(value) * coef
        return expr

    def access(self, amap: AffineMap, indices: Sequence[SSAValue],
               results: Sequence[AffineExpr] | None = None) -> tuple[AffineMap, list[SSAValue]]:
        """The map and operands of an access ``amap(indices)`` after substitution, divisions
        and remainders simplified with the ranges of the loop variables."""
        operands: list[SSAValue] = []
        dims = [self.expr_of(v, operands) for v in indices]
        base = amap if results is None else AffineMap(amap.num_dims, 0, tuple(results))
        new = base.replace_dims_and_symbols(dims, [], len(operands), 0)
        n = new.num_dims
        ranges = [iv_range(v) for v in operands]
        return AffineMap(n, 0, tuple(simplified(r, n, ranges) for r in new.results)), operands

    def value(self, old: SSAValue, block: Block) -> SSAValue:
        """The new value standing for ``old`` (a substituted index is computed in ``block``,
        at its start)."""
        if old in self.values:
            return self.values[old]
        lin = self.subst.get(old)
        if lin is None:
            return old
        if old not in self._materialised:
            ops, total = _linear_ops(lin)
            first = block.first_op
            for op in ops:
                if first is None:
                    block.add_op(op)
                else:
                    block.insert_op_before(op, first)
            self._materialised[old] = total
        return self._materialised[old]

    def clone_into(self, op: Operation, block: Block) -> Operation:
        """Append a copy of ``op`` to ``block``; its results are recorded in ``values``."""
        if op.regions:
            raise ValueError(f"cannot clone '{op.name}' with regions")
        if isinstance(op, loop.LoadOp):
            amap, operands = self.access(op.map.data, op.indices)
            new: Operation = loop.LoadOp(self.value(op.buffer, block), amap, operands,
                                         op.clamped)
        elif isinstance(op, loop.StoreOp):
            amap, operands = self.access(op.map.data, op.indices)
            new = loop.StoreOp(self.value(op.value, block), self.value(op.buffer, block), amap,
                               operands)
        else:
            mapper = {v: self.value(v, block) for v in op.operands}
            new = op.clone(value_mapper=mapper)
        new.attributes |= op.attributes
        block.add_op(new)
        for old_res, new_res in zip(op.results, new.results, strict=True):
            self.values[old_res] = new_res
            new_res.name_hint = old_res.name_hint
        return new


@dataclass
class ClampingCloner(Cloner):
    """A :class:`Cloner` whose copies of loads from ``global_buffers`` are clamped: the
    loads of a ragged tile, whose rows or columns past the output's edge read the edge."""

    global_buffers: set[SSAValue] = field(default_factory=set)

    def clone_into(self, op: Operation, block: Block) -> Operation:
        new = super().clone_into(op, block)
        if isinstance(new, loop.LoadOp) and new.buffer in self.global_buffers:
            new.clamp = UnitAttr()
        return new


def guard_inside(block: Block, bounds: Sequence[tuple[SSAValue, SSAValue | int]]) -> Block:
    """Append to ``block`` an ``scf.if`` that runs when every ``value < bound`` holds (the
    stores of a ragged tile's outputs inside the output; a bound is a constant or a runtime
    ``index`` value); returns its (empty) body."""
    cond: SSAValue | None = None
    for value, bound in bounds:
        if isinstance(bound, int):
            limit = arith.ConstantOp(IntegerAttr(bound, IndexType()))
            block.add_op(limit)
            bound = limit.result
        inside = arith.CmpiOp(value, bound, "ult")
        block.add_op(inside)
        if cond is None:
            cond = inside.result
        else:
            both = arith.AndIOp(cond, inside.result)
            block.add_op(both)
            cond = both.result
    assert cond is not None
    then = Block()
    block.add_op(scf.IfOp(cond, [], Region(then)))
    return then


def index_into(block: Block, value: int) -> SSAValue:
    """An ``index`` constant appended to ``block``."""
    op = arith.ConstantOp(IntegerAttr(value, IndexType()))
    block.add_op(op)
    return op.result


def _linear_ops(lin: Linear) -> tuple[list[Operation], SSAValue]:
    """The ``arith`` ops computing ``lin`` as an ``index`` value, and that value."""
    ops: list[Operation] = []

    def const(v: int) -> SSAValue:
        return _push(ops, arith.ConstantOp(IntegerAttr(v, IndexType())))

    total = const(lin.const)
    for coef, v in lin.terms:
        term = v if coef == 1 else _push(ops, arith.MuliOp(v, const(coef)))
        total = _push(ops, arith.AddiOp(total, term))
    return ops, total


def linear_into(block: Block, lin: Linear) -> SSAValue:
    """``lin`` as an ``index`` value computed by ``arith`` ops appended to ``block``."""
    ops, total = _linear_ops(lin)
    block.add_ops(ops)
    return total


def slice_of(ops: Sequence[Operation], value: SSAValue) -> list[Operation]:
    """The ops of ``ops`` (in their order) that ``value`` depends on, itself included."""
    needed: set[Operation] = set()
    wanted = [value]
    members = set(ops)
    while wanted:
        owner = wanted.pop().owner
        if isinstance(owner, Operation) and owner in members and owner not in needed:
            needed.add(owner)
            wanted.extend(owner.operands)
    return [op for op in ops if op in needed]


def ceildiv_into(block: Block, value: SSAValue, c: int) -> SSAValue:
    """``ceildiv(value, c)`` (``c > 0``), appended to ``block``."""
    out = arith.CeilDivUIOp(value, index_into(block, c))
    block.add_op(out)
    return out.result


def launch_grid(length: SSAValue, block_rows: int, per_row_block: int
                ) -> tuple[list[Operation], SSAValue]:
    """The grid of a kernel whose blocks tile a runtime ``length`` (a function-level value)
    ``block_rows`` rows at a time, ``per_row_block`` blocks for each such row block:
    ``ceildiv(length, block_rows) · per_row_block``, as the ops to insert before the launch
    and their result (named ``grid``)."""
    ops = Block()
    grid = length if block_rows == 1 else ceildiv_into(ops, length, block_rows)
    if per_row_block != 1:
        total = arith.MuliOp(grid, index_into(ops, per_row_block))
        ops.add_op(total)
        grid = total.result
    return _detached(ops, grid)


def threads_grid(length: SSAValue, per_row: int, threads: int
                 ) -> tuple[list[Operation], SSAValue]:
    """The grid of a kernel with one thread per point of a ``tile.forall over threads`` of
    runtime ``length`` rows (a function-level value), ``per_row`` points each, ``threads``
    per block: ``ceildiv(length · per_row, threads)``, as the ops to insert before the
    launch and their result (named ``grid``)."""
    ops = Block()
    points = length
    if per_row != 1:
        scaled = arith.MuliOp(length, index_into(ops, per_row))
        ops.add_op(scaled)
        points = scaled.result
    return _detached(ops, ceildiv_into(ops, points, threads))


def _detached(ops: Block, grid: SSAValue) -> tuple[list[Operation], SSAValue]:
    """``ops``'s ops taken out of it, and ``grid`` (their result) named ``grid``."""
    grid.name_hint = "grid"
    listed = list(ops.ops)
    for op in listed:
        op.detach()
    return listed, grid


def close_guards(block: Block) -> None:
    """Terminate the ``scf.if`` bodies :func:`guard_inside` made in ``block``'s nest."""
    for op in block.walk():
        if isinstance(op, scf.IfOp):
            body = op.true_region.block
            if not isinstance(body.last_op, scf.YieldOp):
                body.add_op(scf.YieldOp())


def _push(ops: list[Operation], op: Operation) -> SSAValue:
    ops.append(op)
    return op.results[0]


def counted_for(extent: int, name: str, attrs: dict[str, Attribute]
                ) -> tuple[list[Operation], scf.ForOp, SSAValue]:
    """``scf.for %name = 0 to extent step 1`` (no iter_args) with ``attrs``, an empty body
    block (no terminator yet), and the constants of its bounds, which go before it."""
    bounds = [arith.ConstantOp(IntegerAttr(v, IndexType())) for v in (0, extent, 1)]
    body = Block(arg_types=[IndexType()])
    iv = body.args[0]
    iv.name_hint = name
    for_op = scf.ForOp(bounds[0].result, bounds[1].result, bounds[2].result, [],
                       Region(body))
    for_op.attributes |= attrs
    return list(bounds), for_op, iv


def loop_nest(extents: Sequence[int], names: Sequence[str], attrs: dict[str, Attribute]
              ) -> tuple[loop.ForOp, Block, list[SSAValue]]:
    """Perfectly nested ``loop.for`` ops (outermost first) with ``attrs`` on each; returns
    the outermost loop, the innermost body and the induction variables."""
    loops = [loop.ForOp(e) for e in extents]
    for lp, name in zip(loops, names, strict=True):
        lp.body.block.args[0].name_hint = name
        lp.attributes |= attrs
    for outer, inner in zip(loops, loops[1:], strict=False):
        outer.body.block.add_op(inner)
    return loops[0], loops[-1].body.block, [lp.body.block.args[0] for lp in loops]


def block_threads(extents: Sequence[int], names: Sequence[str]
                  ) -> tuple[tile.ForallOp, list[SSAValue]]:
    """An empty ``tile.forall over block_threads`` with named induction variables."""
    forall = tile.ForallOp(extents, "block_threads")
    for arg, name in zip(forall.ivs, names, strict=True):
        arg.name_hint = name
    return forall, list(forall.ivs)


def linear_form(expr: AffineExpr) -> tuple[dict[int, int], int] | None:
    """``expr`` as (dim → coefficient, constant) when it is linear (no division or modulo,
    no product of two dims); ``None`` otherwise."""
    from xdsl.ir.affine import AffineBinaryOpExpr, AffineBinaryOpKind

    if isinstance(expr, AffineConstantExpr):
        return {}, expr.value
    if isinstance(expr, AffineDimExpr):
        return {expr.position: 1}, 0
    if not isinstance(expr, AffineBinaryOpExpr):
        return None
    lhs, rhs = linear_form(expr.lhs), linear_form(expr.rhs)
    if lhs is None or rhs is None:
        return None
    if expr.kind is AffineBinaryOpKind.Add:
        coefs = dict(lhs[0])
        for d, c in rhs[0].items():
            coefs[d] = coefs.get(d, 0) + c
        return {d: c for d, c in coefs.items() if c}, lhs[1] + rhs[1]
    if expr.kind is AffineBinaryOpKind.Mul:
        if not rhs[0]:
            return {d: c * rhs[1] for d, c in lhs[0].items() if c * rhs[1]}, lhs[1] * rhs[1]
        if not lhs[0]:
            return {d: c * lhs[1] for d, c in rhs[0].items() if c * lhs[1]}, lhs[1] * rhs[1]
    return None


Range = tuple[int, int | None]


def iv_range(value: SSAValue) -> Range | None:
    """``(lo, hi)`` of a loop or forall induction variable (``hi`` None: unbounded), else
    ``None``."""
    from xdsl.ir import BlockArgument

    if not isinstance(value, BlockArgument):
        return None
    parent = value.block.parent_op()
    if isinstance(parent, tile.ForallOp):
        return (0, parent.shape[value.index] - 1)
    if isinstance(parent, loop.ForOp | loop.ReduceOp) and value.index == 0:
        return (0, parent.trip_count - 1)
    return None


def _bounds(coefs: dict[int, int], const: int, ranges: Sequence[Range | None]
            ) -> tuple[int, int] | None:
    """Bounds of ``const + sum(c·d)`` when every ``d`` with a coefficient is bounded."""
    lo = hi = const
    for d, c in coefs.items():
        r = ranges[d]
        if r is None or r[1] is None:
            return None
        a, b = c * r[0], c * r[1]
        lo += min(a, b)
        hi += max(a, b)
    return lo, hi


def _coarse_fine(rest: dict[int, int], const: int, c: int, ranges: Sequence[Range | None]
                 ) -> tuple[int, dict[int, int], int, dict[int, int], int] | None:
    """A step ``a`` dividing ``c`` that splits ``rest + const mod c`` into coarse terms
    (coefficients multiples of ``a``) and fine terms bounded in ``[0, a)``: ``(a, coarse,
    coarse constant, fine, fine constant)``, the largest such ``a``, else ``None``."""
    steps = sorted({math.gcd(k, c) for k in rest.values()} - {1, c}, reverse=True)
    for a in steps:
        coarse = {d: k for d, k in rest.items() if k % a == 0}
        fine = {d: k for d, k in rest.items() if k % a}
        low = const % c
        bounds = _bounds(fine, low % a, ranges)
        if coarse and bounds is not None and 0 <= bounds[0] and bounds[1] < a:
            return a, coarse, low - low % a, fine, low % a
    return None


def _split_div_mod(kind: object, aligned: dict[int, int], const: int, c: int, a: int,
                   coarse: dict[int, int], coarse_const: int, fine: dict[int, int],
                   fine_const: int, ranges: Sequence[Range | None]) -> AffineExpr:
    """``(c·q + a·X + f) floordiv c = q + X floordiv (c/a)`` and ``… mod c = a·(X mod (c/a))
    + f`` when ``0 ≤ f < a`` and ``a`` divides ``c``."""
    from xdsl.ir.affine import AffineBinaryOpExpr, AffineBinaryOpKind

    x: AffineExpr = AffineConstantExpr(coarse_const // a)
    for d, k in coarse.items():
        x = x + AffineDimExpr(d) * (k // a)
    if kind is AffineBinaryOpKind.Mod:
        out: AffineExpr = AffineConstantExpr(fine_const)
        for d, k in fine.items():
            out = out + AffineDimExpr(d) * k
        inner = simplify_ranges(AffineBinaryOpExpr(AffineBinaryOpKind.Mod, x,
                                                   AffineConstantExpr(c // a)), ranges)
        return out + inner * a
    out = AffineConstantExpr(const // c)
    for d, k in aligned.items():
        out = out + AffineDimExpr(d) * (k // c)
    return out + simplify_ranges(AffineBinaryOpExpr(AffineBinaryOpKind.FloorDiv, x,
                                                    AffineConstantExpr(c // a)), ranges)


def simplify_ranges(expr: AffineExpr, ranges: Sequence[Range | None]) -> AffineExpr:
    """``expr`` with ``e floordiv c`` and ``e mod c`` simplified: the multiples of ``c`` in a
    linear ``e`` come out (``(256·r + t) floordiv 32`` is ``8·r + t floordiv 32``), a
    remainder known to lie in ``[0, c)`` needs no division (``(64·b + t) floordiv 64`` is
    ``b`` and ``(64·b + t) mod 64`` is ``t`` when ``0 ≤ t < 64``), and a remainder whose
    fine part stays below a step ``a`` of ``c`` divides only its coarse part
    (``(64·b + t) floordiv 128`` is ``b floordiv 2`` and ``(64·b + t) mod 128`` is
    ``64·(b mod 2) + t`` when ``0 ≤ t < 64``: a block's 64 columns lie in one head of 128)."""
    from xdsl.ir.affine import AffineBinaryOpExpr, AffineBinaryOpKind

    if not isinstance(expr, AffineBinaryOpExpr):
        return expr
    lhs = simplify_ranges(expr.lhs, ranges)
    rhs = simplify_ranges(expr.rhs, ranges)
    kind = expr.kind
    if kind in (AffineBinaryOpKind.FloorDiv, AffineBinaryOpKind.Mod) and isinstance(
            rhs, AffineConstantExpr) and rhs.value > 0:
        c = rhs.value
        form = linear_form(lhs)
        if form is not None:
            coefs, const = form
            aligned = {d: k for d, k in coefs.items() if k % c == 0}
            rest = {d: k for d, k in coefs.items() if k % c}
            remainder: AffineExpr = AffineConstantExpr(const % c)
            for d, k in rest.items():
                remainder = remainder + AffineDimExpr(d) * k
            bounds = _bounds(rest, const % c, ranges)
            small = bounds is not None and 0 <= bounds[0] and bounds[1] < c
            if not small and rest:
                split = _coarse_fine(rest, const, c, ranges)
                if split is not None:
                    return _split_div_mod(kind, aligned, const, c, *split, ranges)
            if kind is AffineBinaryOpKind.Mod:
                # (c·q + r) mod c = r mod c, and = r when 0 <= r < c.
                return remainder if small else AffineBinaryOpExpr(kind, remainder, rhs)
            # (c·q + r) floordiv c = q + r floordiv c, and = q when 0 <= r < c.
            out: AffineExpr = AffineConstantExpr(const // c)
            for d, k in aligned.items():
                out = out + AffineDimExpr(d) * (k // c)
            if not small:
                out = out + AffineBinaryOpExpr(kind, remainder, rhs)
            return out
    if lhs is expr.lhs and rhs is expr.rhs:
        return expr
    if kind is AffineBinaryOpKind.Add:
        return lhs + rhs
    if kind is AffineBinaryOpKind.Mul:
        return lhs * rhs
    return AffineBinaryOpExpr(kind, lhs, rhs)  # as written (e.g. a negative divisor)


def simplified(expr: AffineExpr, num_dims: int, ranges: Sequence[Range | None]) -> AffineExpr:
    """:func:`simplify_ranges`, then xDSL's own simplification (which gives up on some
    expressions, e.g. a division by a negative constant: those stay as they are)."""
    expr = simplify_ranges(expr, ranges)
    try:
        return expr.simplify(num_dims, 0)
    except ValueError:
        return expr
