"""Building Kernel IR for ``tile-to-kernel``: an op emitter, the identities and combiners
of reductions, value ranges and affine index arithmetic (see
:mod:`llmopt.lowering.tile_to_kernel`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import (
    AnyFloat,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
)
from xdsl.ir import Attribute, BlockArgument, Operation, Region, SSAValue
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
)
from xdsl.pattern_rewriter import PatternRewriter
from xdsl.rewriter import InsertPoint

from llmopt.dialects import kernel, loop, tile
from llmopt.passes._rewrite import fail

MAX_UNROLLED_ROUNDS = 32
SHUFFLE_OFFSETS = (16, 8, 4, 2, 1)
INDEX = IndexType()


class Emitter:
    """Inserts ops at one insertion point, in order, and builds index arithmetic."""

    def __init__(self, rewriter: PatternRewriter, point: InsertPoint) -> None:
        self.rewriter = rewriter
        self.point = point
        self._constants: dict[int, SSAValue] = {}

    def __call__(self, op: Operation) -> SSAValue:
        """Insert ``op`` (which has one result); return that result."""
        self.rewriter.insert(op, self.point)
        return op.results[0]

    def op(self, op: Operation) -> Operation:
        """Insert ``op`` (results or not); return it."""
        self.rewriter.insert(op, self.point)
        return op

    def index(self, value: int) -> SSAValue:
        """An ``index`` constant (one per value and emitter)."""
        if value not in self._constants:
            const = arith.ConstantOp.from_int_and_width(value, INDEX)
            self._constants[value] = self(const)
        return self._constants[value]



def identity(kind: str, typ: Attribute) -> arith.ConstantOp:
    """The identity of reduction ``kind`` over scalars of ``typ``."""
    if isinstance(typ, AnyFloat):
        value = {"add": 0.0, "mul": 1.0, "max": float("-inf"), "min": float("inf")}[kind]
        return arith.ConstantOp(FloatAttr(value, typ))
    if isinstance(typ, IntegerType):
        width = typ.width.data
        value = {"add": 0, "mul": 1, "max": -(2 ** (width - 1)), "min": 2 ** (width - 1) - 1}[kind]
        return arith.ConstantOp.from_int_and_width(value, typ)
    if isinstance(typ, IndexType):
        value = {"add": 0, "mul": 1, "max": -(2**63), "min": 2**63 - 1}[kind]
        return arith.ConstantOp.from_int_and_width(value, typ)
    raise ValueError(f"no identity for a '{kind}' reduction over {typ}")


_FLOAT_COMBINERS: dict[str, Callable[[SSAValue, SSAValue], Operation]] = {
    "add": arith.AddfOp, "mul": arith.MulfOp, "max": arith.MaximumfOp, "min": arith.MinimumfOp,
}
_INT_COMBINERS: dict[str, Callable[[SSAValue, SSAValue], Operation]] = {
    "add": arith.AddiOp, "mul": arith.MuliOp, "max": arith.MaxSIOp, "min": arith.MinSIOp,
}


def combiner(kind: str, lhs: SSAValue, rhs: SSAValue) -> Operation:
    """``lhs <kind> rhs`` as one ``arith`` op."""
    table = _FLOAT_COMBINERS if isinstance(lhs.type, AnyFloat) else _INT_COMBINERS
    return table[kind](lhs, rhs)


def check_reducible(op: Operation, kind: str, typ: Attribute) -> None:
    """Reject reductions over types without an identity here (a diagnostic at ``op``)."""
    if not isinstance(typ, AnyFloat | IntegerType | IndexType):
        raise fail(op, f"cannot lower a '{kind}' reduction over {typ}")


def accumulate_body(body: Region, kind: str, typ: Attribute, rewriter: PatternRewriter) -> None:
    """Turn a reduce body (ending in ``loop.yield``/``tile.yield`` of one value) into an
    ``scf.for`` body with an accumulator: ``%n = combine(%acc, %v); scf.yield %n``."""
    block = body.block
    acc = block.insert_arg(typ, 1)
    acc.name_hint = "acc"
    last = block.last_op
    assert isinstance(last, loop.YieldOp | tile.YieldOp)
    combined = combiner(kind, acc, last.values[0])
    rewriter.replace(last, [combined, scf.YieldOp(combined.results[0])])


Range = tuple[int | None, int | None]
UNKNOWN: Range = (None, None)


def value_range(value: SSAValue) -> Range:
    """Bounds of an index value that is a loop iv (of a not yet lowered loop, or of an
    ``scf.for`` with constant bounds counting up from 0 or more) or a constant."""
    if isinstance(value, BlockArgument):
        parent = value.block.parent_op()
        if isinstance(parent, loop.ForOp | loop.ReduceOp | tile.CoopReduceOp) and not value.index:
            return (0, parent.trip_count - 1)
        if isinstance(parent, tile.ForallOp):
            return (0, parent.shape[value.index] - 1)
        if isinstance(parent, scf.ForOp) and not value.index:  # a sequential loop's counter
            lb, ub = value_range(parent.lb), value_range(parent.ub)
            if lb[0] is not None and lb[0] >= 0 and ub[1] is not None and ub[1] > lb[0]:
                return (lb[0], ub[1] - 1)
        if isinstance(parent, scf.ForOp) and value.index:
            return _wrapping_counter(parent, value.index - 1)
        return UNKNOWN
    owner = value.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
        v = owner.value.value.data
        return (v, v)
    return UNKNOWN


def _wrapping_counter(loop_op: scf.ForOp, k: int) -> Range:
    """The range of ``loop_op``'s ``k``-th ``iter_arg`` when it is a counter that starts at a
    constant in ``[0, c)`` and is stepped as ``select(x + 1 < c, x + 1, 0)`` (what
    ``async-copy`` carries): ``[0, c - 1]``; else unknown."""
    yielded = loop_op.body.block.last_op
    if not isinstance(yielded, scf.YieldOp) or k >= len(yielded.operands):
        return UNKNOWN
    select = yielded.operands[k].owner
    if not isinstance(select, arith.SelectOp):
        return UNKNOWN
    cmp, stepped, zero = select.operands
    cond = cmp.owner
    if not (isinstance(cond, arith.CmpiOp) and cond.predicate.value.data == SLT
            and cond.lhs is stepped and value_range(zero) == (0, 0)):
        return UNKNOWN
    limit = value_range(cond.rhs)
    init = value_range(loop_op.iter_args[k])
    if limit[0] is None or limit[0] != limit[1] or init[0] is None or init[1] is None:
        return UNKNOWN
    if 0 <= init[0] and init[1] < limit[0]:
        return (0, limit[0] - 1)
    return UNKNOWN


SLT = 2
"""``arith.cmpi``'s predicate number for "signed less than"."""


def _add(a: int | None, b: int | None) -> int | None:
    """A sum of bounds (``None``: unbounded)."""
    return None if a is None or b is None else a + b


def _scale(r: Range, c: int) -> Range:
    """The range of ``x * c`` for ``x`` in ``r``."""
    lo = None if r[0] is None else r[0] * c
    hi = None if r[1] is None else r[1] * c
    return (lo, hi) if c >= 0 else (hi, lo)


class AffineEmitter:
    """Computes the results of affine maps over given index operands with ``arith`` ops."""

    def __init__(self, emit: Emitter, operands: Sequence[SSAValue]) -> None:
        self.emit = emit
        self.operands = operands
        self.ranges = [value_range(v) for v in operands]

    def results(self, amap: AffineMap) -> list[SSAValue]:
        """One ``index`` value per result of ``amap``."""
        return [self.expr(e)[0] for e in amap.results]

    def clamped(self, amap: AffineMap, shape: Sequence[int | SSAValue], last: int = 1,
                clamps: list[tuple[SSAValue, SSAValue]] | None = None) -> list[SSAValue]:
        """The results of ``amap`` clamped from above into a buffer of ``shape`` (the
        innermost to ``extent - last``; a runtime extent is an ``index`` value): an
        ``arith.minsi`` wherever the range analysis cannot show the coordinate is below
        the limit already. Each clamp's coordinate and limit are appended to ``clamps``
        (when given)."""
        out = []
        for d, e in enumerate(amap.results):
            value, (_, hi) = self.expr(e)
            below = last if d == len(shape) - 1 else 1
            extent = shape[d]
            limit: SSAValue | None = None
            if isinstance(extent, SSAValue):
                limit = self.emit(arith.SubiOp(extent, self.emit.index(below)))
            elif hi is None or hi > extent - below:
                limit = self.emit.index(extent - below)
            if limit is not None:
                if clamps is not None:
                    clamps.append((value, limit))
                value = self.emit(arith.MinSIOp(value, limit))
            out.append(value)
        return out

    def expr(self, e: AffineExpr) -> tuple[SSAValue, Range]:
        """The value of ``e`` and its range."""
        emit = self.emit
        if isinstance(e, AffineDimExpr):
            return self.operands[e.position], self.ranges[e.position]
        if isinstance(e, AffineConstantExpr):
            return emit.index(e.value), (e.value, e.value)
        if not isinstance(e, AffineBinaryOpExpr):
            raise ValueError(f"unsupported affine expression {e}")
        kind = e.kind
        if isinstance(e.rhs, AffineConstantExpr):
            c = e.rhs.value
            lhs, r = self.expr(e.lhs)
            if kind is AffineBinaryOpKind.Add:
                if c == 0:
                    return lhs, r
                return emit(arith.AddiOp(lhs, emit.index(c))), (_add(r[0], c), _add(r[1], c))
            if kind is AffineBinaryOpKind.Mul:
                if c == 1:
                    return lhs, r
                return emit(arith.MuliOp(lhs, emit.index(c))), _scale(r, c)
            if c > 0:
                return self._div_mod(kind, lhs, r, c)
        lhs, r = self.expr(e.lhs)
        rhs, s = self.expr(e.rhs)
        if kind is AffineBinaryOpKind.Add:
            return emit(arith.AddiOp(lhs, rhs)), (_add(r[0], s[0]), _add(r[1], s[1]))
        if kind is AffineBinaryOpKind.Mul:
            return emit(arith.MuliOp(lhs, rhs)), UNKNOWN
        if kind is AffineBinaryOpKind.FloorDiv:
            return emit(arith.FloorDivSIOp(lhs, rhs)), UNKNOWN
        if kind is AffineBinaryOpKind.CeilDiv:
            return emit(arith.CeilDivSIOp(lhs, rhs)), UNKNOWN
        rem = emit(arith.RemSIOp(lhs, rhs))
        return emit(arith.RemSIOp(emit(arith.AddiOp(rem, rhs)), rhs)), UNKNOWN

    def _div_mod(self, kind: AffineBinaryOpKind, lhs: SSAValue, r: Range, c: int
                 ) -> tuple[SSAValue, Range]:
        """``lhs floordiv/ceildiv/mod c`` for a constant ``c > 0``."""
        emit = self.emit
        lo, hi = r
        nonneg = lo is not None and lo >= 0
        if kind is AffineBinaryOpKind.Mod:
            if nonneg and hi is not None and hi < c:
                return lhs, r
            if nonneg:
                return emit(arith.RemUIOp(lhs, emit.index(c))), (0, c - 1)
            rem = emit(arith.RemSIOp(lhs, emit.index(c)))
            shifted = emit(arith.AddiOp(rem, emit.index(c)))
            return emit(arith.RemSIOp(shifted, emit.index(c))), (0, c - 1)
        if c == 1:
            return lhs, r
        if kind is AffineBinaryOpKind.FloorDiv:
            out: Range = (None if lo is None else lo // c, None if hi is None else hi // c)
            if nonneg:
                return emit(arith.DivUIOp(lhs, emit.index(c))), out
            return emit(arith.FloorDivSIOp(lhs, emit.index(c))), out
        out = (None if lo is None else -(-lo // c), None if hi is None else -(-hi // c))
        if nonneg:
            bumped = emit(arith.AddiOp(lhs, emit.index(c - 1)))
            return emit(arith.DivUIOp(bumped, emit.index(c))), out
        return emit(arith.CeilDivSIOp(lhs, emit.index(c))), out


def memref_shape(value: SSAValue) -> tuple[int, ...]:
    """The static shape of a memref value."""
    assert isinstance(value.type, MemRefType)
    return value.type.get_shape()


def clamp_shape(op: Operation, value: SSAValue) -> list[int | SSAValue]:
    """The shape of the buffer a clamped access of ``op`` reads, each ``?`` extent the
    kernel's length parameter (its one ``index`` parameter: every ``?`` of a kernel's
    buffers is bound to it, see :mod:`llmopt.lowering._symbolic_layout`)."""
    shape = memref_shape(value)
    if all(e >= 0 for e in shape):
        return list(shape)
    fn = kernel.enclosing_func(op)
    lengths = [] if fn is None else [a for a in fn.body.block.args
                                     if isinstance(a.type, IndexType)]
    if len(lengths) != 1:
        raise fail(op, "a clamped access of a buffer with ? extents needs the kernel's one "
                       f"length parameter (found {len(lengths)})")
    return [lengths[0] if e < 0 else e for e in shape]


def hoist_to_func(fn: kernel.FuncOp, op: Operation, rewriter: PatternRewriter) -> None:
    """Insert ``op`` (a buffer declaration) after the declarations at the top of ``fn``."""
    first = fn.body.block.first_op
    while isinstance(first, kernel.SharedOp | kernel.LocalOp):
        first = first.next_op
    point = InsertPoint.before(first) if first is not None else InsertPoint.at_end(fn.body.block)
    rewriter.insert(op, point)
