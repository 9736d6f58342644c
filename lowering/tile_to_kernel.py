"""``tile-to-kernel``: Tile IR → Kernel IR, every scheduling decision made explicit.

Matches every ``tile.kernel`` and, inside the resulting kernels, every ``tile.forall``,
``tile.coop_reduce``, ``loop.for``, ``loop.reduce``, ``loop.load`` and ``loop.store``:

* ``tile.kernel @k grid G block B (...)`` → a module-level ``kernel.func @k(buffers) block B``
  (the name made unique) holding the body, and in its place
  ``kernel.launch @k grid G block B smem 0 (buffers)``: ``smem`` is the *dynamic* shared
  memory of the launch, and every shared buffer made here is a statically sized
  ``kernel.shared`` (``kernel-to-cuda`` moves a kernel's buffers into dynamic shared memory,
  and raises ``smem``, when they total more than the 48 KiB CUDA declares statically). Only
  1-D launch shapes (``[n, 1, 1]``) are accepted. Outlined kernels that are identical
  (``dedup-kernels``' structural key: a model's identical layers) then become one, launched
  by each, before anything inside them is lowered: the rest of the pass, and every pass
  after it, sees each distinct kernel once.
* ``tile.forall`` → ``scf.for %p = first to points step stride`` — ``over threads``: first =
  ``block_id * block_dim + thread_id``, stride = ``grid_dim * block_dim``; ``over blocks``:
  ``block_id`` / ``grid_dim``; ``over block_threads``: ``thread_id`` / ``block_dim`` — then
  ``%p`` is delinearised into the forall's ivs with ``arith.remui``/``divui`` by the constant
  extents (innermost fastest). The loop bound is the bounds guard. Over block_threads the
  block size is known: a forall with exactly one point per thread becomes straight-line code
  (``%p`` = thread id, no loop, no guard), and one with ``r ≤ 32`` points per thread for every
  thread (points a multiple of the block) a loop ``%round = 0 to r`` marked ``unroll`` with
  ``%p = %round · B + thread_id`` — its iterations' loads can all be in flight at once.
* ``loop.for`` → ``scf.for 0 to extent step 1``; ``loop.reduce`` → ``scf.for`` with one
  ``iter_args`` accumulator starting at the identity of its kind (add 0, mul 1, max -inf,
  min +inf), combined by ``arith.addf/mulf/maximumf/minimumf`` (integers: ``addi/muli/
  maxsi/minsi``).
* ``loop.load``/``loop.store`` → ``kernel.load``/``kernel.store`` with each coordinate of the
  affine map computed by ``arith`` index ops. ``floordiv``/``mod``/``ceildiv`` are exact for
  negative operands (``floordivsi``, ``((a rem c) + c) rem c``, ``ceildivsi``) unless a range
  analysis over the loop extents proves the operand non-negative (then ``divui``/``remui``,
  or nothing when ``a mod c`` is ``a``). A ``clamp`` load (or copy source) gets each
  coordinate the range analysis cannot bound below the buffer's last index through an
  ``arith.minsi`` with it (the innermost of a copy of ``n`` with ``extent - n``).
* ``tile.coop_reduce`` over a block of B threads (B a multiple of 32): each thread folds
  ``k = tid, tid + B, ...`` into a private accumulator, the warp folds it with
  ``kernel.shuffle_xor`` 16, 8, 4, 2, 1 (every lane gets the warp's total); with more than one
  warp, lane 0 of each warp writes it into a ``kernel.shared : memref<NWARPxT>`` buffer
  (one per coop_reduce, declared at the top of the kernel), ``kernel.barrier``, every thread
  folds the NWARP partials in the same order (so all threads hold the same bits), and a
  second ``kernel.barrier`` lets the shared buffer be reused.
* ``tile.copy``/``tile.async_copy %src[map_s(ivs)] to %dst[map_d(ivs)] count n`` →
  ``kernel.copy``/``kernel.async_copy %src[...] to %dst[...] count n``, both index lists
  computed like a ``loop.load``'s (a ``tile.alloc registers`` side loses its distributed
  dimensions, as in loads and stores); ``tile.async_commit``/``async_wait`` →
  ``kernel.async_commit``/``async_wait``.
* Inside a ``tile.forall over blocks`` the ops directly in its body run one after another
  for the whole block: a ``kernel.barrier`` is inserted between two of them when one writes
  a buffer that the other (run by other threads: a forall over block_threads or a
  coop_reduce) reads or writes. An asynchronous copy counts as reading its source but not as
  writing its destination (see :func:`buffer_effects`); a ``kernel.barrier`` already in the
  body orders the steps around it like an inserted one. Different points of a forall are
  independent (they touch different elements), so one block moving on to its next point
  needs no barrier; for the same reason the foralls over threads or blocks that sit side by
  side in one kernel must not depend on each other (``loop-to-tile`` puts dependent nests in
  separate kernels).

**Runtime extents** (a symbolic length): a loop or cooperative reduction with a runtime bound
runs ``scf.for`` up to that value; a forall with runtime extents runs to their product (the
static part a constant) and delinearises by the runtime extent along those dims (the unrolled
and one-point forms need a static point count); a launch with a runtime grid keeps it
(``kernel.launch @k grid [%grid max 8, 1, 1]``), and the length is a kernel parameter like a
buffer. Buffers with ``?`` extents stay row-major ``memref<1x?x64xf32>``; a clamped access
along a ``?`` extent clamps to the kernel's length parameter (``min(i, %n - 1)``).

Why: Kernel IR has no implicit behaviour left — every thread index, bound check, barrier
and shuffle is an op — so the CUDA printer below it only prints.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import (
    AnyFloat,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    StringAttr,
    i64,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, Region, SSAValue
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
)
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from llmopt.dialects import kernel, loop, mma, tile, wgmma
from llmopt.dialects.wgmma import SWIZZLE_ATTR
from llmopt.lowering._symbols import unique_name
from llmopt.passes._rewrite import KeepLocation, fail
from llmopt.passes.kernel.dedup_kernels import DedupKernels
from llmopt.target import WARP

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


# --- reductions ----------------------------------------------------------------------------------


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


# --- ranges and affine index arithmetic ----------------------------------------------------------

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

    def clamped(self, amap: AffineMap, shape: Sequence[int | SSAValue], last: int = 1
                ) -> list[SSAValue]:
        """The results of ``amap`` clamped from above into a buffer of ``shape`` (the
        innermost to ``extent - last``; a runtime extent is an ``index`` value): an
        ``arith.minsi`` wherever the range analysis cannot show the coordinate is below
        the limit already."""
        out = []
        for d, e in enumerate(amap.results):
            value, (_, hi) = self.expr(e)
            below = last if d == len(shape) - 1 else 1
            extent = shape[d]
            if isinstance(extent, SSAValue):
                limit = self.emit(arith.SubiOp(extent, self.emit.index(below)))
                value = self.emit(arith.MinSIOp(value, limit))
            elif hi is None or hi > extent - below:
                value = self.emit(arith.MinSIOp(value, self.emit.index(extent - below)))
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
    fn = enclosing_func(op)
    lengths = [] if fn is None else [a for a in fn.body.block.args
                                     if isinstance(a.type, IndexType)]
    if len(lengths) != 1:
        raise fail(op, "a clamped access of a buffer with ? extents needs the kernel's one "
                       f"length parameter (found {len(lengths)})")
    return [lengths[0] if e < 0 else e for e in shape]


@dataclass
class LowerLoad(RewritePattern):
    """``loop.load %b[map(ivs)]`` → index arithmetic + ``kernel.load %b[...]``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: loop.LoadOp, rewriter: PatternRewriter) -> None:
        emit = Emitter(rewriter, InsertPoint.before(op))
        affine = AffineEmitter(emit, op.indices)
        if op.clamped:
            indices = affine.clamped(op.map.data, clamp_shape(op, op.buffer))
        else:
            indices = affine.results(op.map.data)
        new = kernel.LoadOp(op.buffer, indices)
        new.attributes |= op.attributes
        rewriter.replace(op, new)


def _source(op: tile.CopyBase | tile.PrefetchOp, affine: AffineEmitter, buffer: SSAValue,
            amap: AffineMap) -> list[SSAValue]:
    """The indices of the first of the ``count`` elements ``op`` takes from ``buffer``,
    clamped into it for a ``clamp`` op (the innermost to ``extent - count``)."""
    if op.clamped:
        return affine.clamped(amap, clamp_shape(op, buffer), op.elements)
    return affine.results(amap)


@dataclass
class LowerCopy(RewritePattern):
    """``tile.copy``/``tile.async_copy %s[map_s(ivs)] to %d[map_d(ivs)]`` → index arithmetic
    + ``kernel.copy``/``kernel.async_copy %s[...] to %d[...]``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.CopyBase, rewriter: PatternRewriter) -> None:
        emit = Emitter(rewriter, InsertPoint.before(op))
        affine = AffineEmitter(emit, op.indices)
        src = _source(op, affine, op.src, op.src_map.data)
        dst = affine.results(op.dst_map.data)
        cls = kernel.AsyncCopyOp if isinstance(op, tile.AsyncCopyOp) else kernel.CopyOp
        new = cls(op.src, src, op.dst, dst, op.elements)
        new.attributes |= op.attributes
        rewriter.replace(op, new)


@dataclass
class LowerPrefetch(RewritePattern):
    """``tile.prefetch %b[map(ivs)]`` → index arithmetic (clamped as a copy's source, with
    ``clamp``) + ``kernel.prefetch %b[...]``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.PrefetchOp, rewriter: PatternRewriter) -> None:
        affine = AffineEmitter(Emitter(rewriter, InsertPoint.before(op)), op.indices)
        new = kernel.PrefetchOp(op.buffer, _source(op, affine, op.buffer, op.map.data),
                                op.elements)
        new.attributes |= op.attributes
        rewriter.replace(op, new)


@dataclass
class LowerAsyncCommit(RewritePattern):
    """``tile.async_commit`` → ``kernel.async_commit``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.AsyncCommitOp, rewriter: PatternRewriter) -> None:
        new = kernel.AsyncCommitOp()
        new.attributes |= op.attributes
        rewriter.replace(op, new)


@dataclass
class LowerAsyncWait(RewritePattern):
    """``tile.async_wait n`` → ``kernel.async_wait n``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.AsyncWaitOp, rewriter: PatternRewriter) -> None:
        new = kernel.AsyncWaitOp(op.groups)
        new.attributes |= op.attributes
        rewriter.replace(op, new)


@dataclass
class LowerStore(RewritePattern):
    """``loop.store %v, %b[map(ivs)]`` → index arithmetic + ``kernel.store %v, %b[...]``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: loop.StoreOp, rewriter: PatternRewriter) -> None:
        emit = Emitter(rewriter, InsertPoint.before(op))
        indices = AffineEmitter(emit, op.indices).results(op.map.data)
        new = kernel.StoreOp(op.value, op.buffer, indices)
        new.attributes |= op.attributes
        rewriter.replace(op, new)


# --- loops ---------------------------------------------------------------------------------------


def enclosing_func(op: Operation) -> kernel.FuncOp | None:
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, kernel.FuncOp):
        parent = parent.parent_op()
    return parent


@dataclass
class LowerFor(RewritePattern):
    """``loop.for %i = 0 to n`` → ``scf.for %i = 0 to n step 1``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: loop.ForOp, rewriter: PatternRewriter) -> None:
        emit = Emitter(rewriter, InsertPoint.before(op))
        lb, ub, step = emit.index(0), op.bound or emit.index(op.trip_count), emit.index(1)
        body = rewriter.move_region_contents_to_new_regions(op.body)
        body.block.add_op(scf.YieldOp())
        new = scf.ForOp(lb, ub, step, [], body)
        new.attributes |= op.attributes
        rewriter.replace(op, new)


@dataclass
class LowerReduce(RewritePattern):
    """``loop.reduce`` → ``scf.for`` with one accumulator starting at the identity."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: loop.ReduceOp, rewriter: PatternRewriter) -> None:
        kind, typ = op.kind.data, op.result.type
        check_reducible(op, kind, typ)
        emit = Emitter(rewriter, InsertPoint.before(op))
        lb, ub, step = emit.index(0), op.bound or emit.index(op.trip_count), emit.index(1)
        init = emit(identity(kind, typ))
        body = rewriter.move_region_contents_to_new_regions(op.body)
        accumulate_body(body, kind, typ, rewriter)
        new = scf.ForOp(lb, ub, step, [init], body)
        new.attributes |= op.attributes
        rewriter.replace(op, new)


def runtime_points(op: tile.ForallOp, emit: Emitter) -> SSAValue:
    """The number of points of ``op``: a constant, or the product of its runtime extents and
    the constant product of the others."""
    sizes = op.runtime_sizes
    static = 1
    for k, e in enumerate(op.shape):
        if k not in sizes:
            static *= e
    if not sizes:
        return emit.index(static)
    points: SSAValue | None = None
    for k in sorted(sizes):
        points = sizes[k] if points is None else emit(arith.MuliOp(points, sizes[k]))
    assert points is not None
    if static != 1:
        points = emit(arith.MuliOp(points, emit.index(static)))
    return points


@dataclass
class LowerForall(RewritePattern):
    """``tile.forall`` → a strided ``scf.for`` over the linearised points + delinearisation."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.ForallOp, rewriter: PatternRewriter) -> None:
        emit = Emitter(rewriter, InsertPoint.before(op))
        mapping = op.mapping.data
        if mapping == "threads":
            bid = emit(kernel.BlockIdOp("x"))
            bdim = emit(kernel.BlockDimOp("x"))
            tid = emit(kernel.ThreadIdOp("x"))
            first = emit(arith.AddiOp(emit(arith.MuliOp(bid, bdim)), tid))
            stride = emit(arith.MuliOp(emit(kernel.GridDimOp("x")), bdim))
        elif mapping == "blocks":
            first = emit(kernel.BlockIdOp("x"))
            stride = emit(kernel.GridDimOp("x"))
        fn = enclosing_func(op)
        threads = fn.block_shape[0] if fn is not None and fn.block_shape[1:] == (1, 1) else 0
        sizes = op.runtime_sizes
        if sizes:  # the point count is only known at runtime: the plain strided loop
            threads = 0
        one_each = mapping == "block_threads" and threads == op.points
        rounds = op.points // threads if mapping == "block_threads" and threads else 0
        even = rounds > 1 and op.points % threads == 0 and rounds <= MAX_UNROLLED_ROUNDS
        if mapping == "block_threads":
            first = emit(kernel.ThreadIdOp("x"))
            if not (one_each or even):
                stride = emit(kernel.BlockDimOp("x"))
        block = Block(arg_types=[INDEX])
        p = block.args[0]
        p.name_hint = "p"
        inner = Emitter(rewriter, InsertPoint.at_end(block))
        if one_each:  # every thread owns exactly its own point: no loop, no guard
            inner = emit
            p = first
        elif even:  # every thread owns `rounds` points: a fixed, unrolled loop over them
            p.name_hint = "round"
            p = inner(arith.AddiOp(inner(arith.MuliOp(p, inner.index(threads))), first))
        ivs: list[SSAValue] = [p] * len(op.shape)
        rest = p
        for k in range(len(op.shape) - 1, -1, -1):
            extent = op.shape[k]
            if extent == 1 and k not in sizes:
                ivs[k] = inner.index(0)
            elif all(e == 1 and d not in sizes for d, e in enumerate(op.shape[:k])):
                ivs[k] = rest  # rest < extent already
            else:
                by = sizes[k] if k in sizes else inner.index(extent)
                ivs[k] = inner(arith.RemUIOp(rest, by))
                rest = inner(arith.DivUIOp(rest, by))
        for old, new in zip(op.ivs, ivs, strict=True):
            if not isinstance(new.owner, arith.ConstantOp) and new is not first:
                new.name_hint = old.name_hint or new.name_hint
        if one_each:
            rewriter.inline_block(op.body.block, InsertPoint.before(op), ivs)
            rewriter.erase(op)
            return
        rewriter.inline_block(op.body.block, InsertPoint.at_end(block), ivs)
        for new in ivs:
            if isinstance(new.owner, arith.ConstantOp):
                new.name_hint = None  # a constant shared by several uses keeps no iv's name
        block.add_op(scf.YieldOp())
        if even:
            new_loop = scf.ForOp(emit.index(0), emit.index(rounds), emit.index(1), [],
                                 Region(block))
            new_loop.attributes["unroll"] = IntegerAttr(0, i64)
        else:
            new_loop = scf.ForOp(first, runtime_points(op, emit), stride, [], Region(block))
        new_loop.attributes |= op.attributes
        rewriter.replace(op, new_loop)


@dataclass
class LowerCoopReduce(RewritePattern):
    """``tile.coop_reduce`` → strided private fold, warp shuffles, shared-memory step."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.CoopReduceOp, rewriter: PatternRewriter) -> None:
        fn = enclosing_func(op)
        if fn is None:
            raise fail(op, "tile.coop_reduce outside a kernel")
        threads = fn.block_shape[0]
        if threads % WARP or fn.block_shape[1:] != (1, 1):
            raise fail(op, f"a cooperative reduction needs a block of a multiple of {WARP} "
                           f"threads along x, got {list(fn.block_shape)}")
        kind, typ = op.kind.data, op.result.type
        check_reducible(op, kind, typ)
        emit = Emitter(rewriter, InsertPoint.before(op))
        tid = emit(kernel.ThreadIdOp("x"))
        init = emit(identity(kind, typ))
        body = rewriter.move_region_contents_to_new_regions(op.body)
        accumulate_body(body, kind, typ, rewriter)
        ub = op.bound or emit.index(op.trip_count)
        fold = scf.ForOp(tid, ub, emit.index(threads), [init], body)
        partial = emit(fold)
        partial.name_hint = "partial"
        for offset in SHUFFLE_OFFSETS:
            other = emit(kernel.ShuffleXorOp(partial, offset))
            partial = emit(combiner(kind, partial, other))
        warps = threads // WARP
        if warps > 1:
            shared = kernel.SharedOp(MemRefType(typ, [warps]))
            shared.result.name_hint = "partials"
            hoist_to_func(fn, shared, rewriter)
            lane = emit(arith.RemUIOp(tid, emit.index(WARP)))
            warp = emit(arith.DivUIOp(tid, emit.index(WARP)))
            leader = emit(arith.CmpiOp(lane, emit.index(0), "eq"))
            emit.op(scf.IfOp(leader, [], [kernel.StoreOp(partial, shared.result, [warp]),
                                          scf.YieldOp()]))
            emit.op(kernel.BarrierOp())
            block = Block(arg_types=[INDEX, typ])
            w, acc = block.args
            w.name_hint, acc.name_hint = "w", "acc"
            value = kernel.LoadOp(shared.result, [w])
            combined = combiner(kind, acc, value.result)
            block.add_ops([value, combined, scf.YieldOp(combined.results[0])])
            partial = emit(scf.ForOp(emit.index(0), emit.index(warps), emit.index(1), [init],
                                     Region(block)))
            emit.op(kernel.BarrierOp())
        rewriter.replace(op, [], [partial])


# --- barriers between the steps of a row ---------------------------------------------------------


def is_private(buffer: SSAValue) -> bool:
    """Whether ``buffer`` is a register buffer: each thread touches only its own slice."""
    owner = buffer.owner
    return isinstance(owner, tile.AllocOp) and owner.space.data == "registers"


def buffer_effects(op: Operation) -> tuple[set[SSAValue], set[SSAValue]]:
    """The buffers that ``op`` and the ops nested in it read and write (register buffers
    are private to each thread and never shared, so they are left out).

    A ``mma.ldmatrix`` reads its (shared) buffer like a load, a ``wgmma.mma`` both of its
    tiles. A copy
    (``tile.copy``/``kernel.copy``) reads its source and writes its destination.
    An asynchronous copy (``tile.async_copy``/``kernel.async_copy``) reads its source like a
    load, but its write to the shared destination is *not* counted as an access of the step
    that issues it: the data arrive later, at a ``tile.async_wait`` of the issuing thread, so
    no barrier placed around the issuing step would order them. Whoever emits asynchronous
    copies also emits the waits and the ``kernel.barrier`` ops (after a wait, before the
    destination is read by other threads; before a destination that others still read is
    overwritten) that make them safe."""
    reads: set[SSAValue] = set()
    writes: set[SSAValue] = set()
    for inner in op.walk():
        if isinstance(inner, loop.LoadOp | kernel.LoadOp | mma.LdMatrixOp):
            if not is_private(inner.buffer):
                reads.add(inner.buffer)
        elif isinstance(inner, loop.StoreOp | kernel.StoreOp):
            if not is_private(inner.buffer):
                writes.add(inner.buffer)
        elif isinstance(inner, wgmma.MmaOp):  # reads both shared tiles
            reads.update((inner.a, inner.b))
        elif isinstance(inner, tile.CopyBase | kernel.CopyBase):
            if not is_private(inner.src):
                reads.add(inner.src)
            if isinstance(inner, tile.CopyOp | kernel.CopyOp) and not is_private(inner.dst):
                writes.add(inner.dst)
    return reads, writes


def spreads_over_threads(op: Operation) -> bool:
    """Whether ``op`` hands work to different threads of the block (so its accesses are not
    repeated identically by every thread)."""
    return any(isinstance(inner, tile.ForallOp | tile.CoopReduceOp) for inner in op.walk())


class Pending:
    """Accesses since the last barrier: buffer → whether some were spread over threads."""

    def __init__(self) -> None:
        self.reads: dict[SSAValue, bool] = {}
        self.writes: dict[SSAValue, bool] = {}

    def clear(self) -> None:
        """A barrier: every pending access is complete and visible."""
        self.reads.clear()
        self.writes.clear()

    def races(self, op: Operation) -> bool:
        """Whether ``op`` may conflict with a pending access made by another thread."""
        reads, writes = buffer_effects(op)
        spread = spreads_over_threads(op)
        for buf in writes:
            for pending in (self.writes, self.reads):
                if buf in pending and (spread or pending[buf]):
                    return True
        for buf in reads:
            if buf in self.writes and (spread or self.writes[buf]):
                return True
        return False

    def add(self, op: Operation) -> None:
        """Record the accesses of ``op``."""
        reads, writes = buffer_effects(op)
        spread = spreads_over_threads(op)
        for buf in reads:
            self.reads[buf] = self.reads.get(buf, False) or spread
        for buf in writes:
            self.writes[buf] = self.writes.get(buf, False) or spread

    def copy(self) -> Pending:
        """An independent copy."""
        other = Pending()
        other.reads = dict(self.reads)
        other.writes = dict(self.writes)
        return other

    def only(self, keep: Callable[[SSAValue], bool]) -> Pending:
        """A copy restricted to the buffers ``keep`` accepts."""
        other = Pending()
        other.reads = {b: v for b, v in self.reads.items() if keep(b)}
        other.writes = {b: v for b, v in self.writes.items() if keep(b)}
        return other


@dataclass
class InsertRowBarriers(RewritePattern):
    """Barriers inside a ``tile.forall over blocks``, so that its steps run in order.

    A sequential ``scf.for`` among the steps (the K loop of a tiled matrix product) is
    followed inside: its body's steps are ordered the same way, and when the start of the
    next iteration would conflict with accesses at the end of the previous one (a shared
    tile overwritten while other threads still read it), a barrier ends the body. The same
    wrap-around check on the block-local buffers of the forall body covers a block moving on
    to its next point.
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.ForallOp, rewriter: PatternRewriter) -> None:
        if op.mapping.data != "blocks":
            return
        fn = enclosing_func(op)
        threads = fn.block_shape[0] if fn is not None else WARP

        def syncs(step: Operation) -> bool:
            return isinstance(step, kernel.BarrierOp) or (
                isinstance(step, tile.CoopReduceOp) and threads > WARP
            )

        def order(block: Block, pending: Pending) -> Pending:
            """Insert barriers between the steps of ``block``; the accesses left pending."""
            for step in list(block.ops):
                if isinstance(step, kernel.BarrierOp):
                    pending.clear()
                    continue
                if isinstance(step, scf.YieldOp):
                    continue
                if pending.races(step):
                    rewriter.insert(kernel.BarrierOp(), InsertPoint.before(step))
                    pending.clear()
                if isinstance(step, scf.ForOp) and spreads_over_threads(step):
                    if wrap(step.body.block, order(step.body.block, pending.copy()),
                            lambda _: True):
                        pending.clear()
                    else:
                        pending.add(step)
                    continue
                pending.add(step)
                if syncs(step):
                    pending.clear()
            return pending

        def wrap(block: Block, end: Pending, keep: Callable[[SSAValue], bool]) -> bool:
            """End ``block`` with a barrier if its next run would race with ``end``."""
            pending = end.only(keep)
            for step in block.ops:
                if isinstance(step, kernel.BarrierOp) or syncs(step):
                    return False
                if isinstance(step, scf.YieldOp):
                    break
                if pending.races(step):
                    last = block.last_op
                    point = (InsertPoint.before(last) if isinstance(last, scf.YieldOp)
                             else InsertPoint.at_end(block))
                    rewriter.insert(kernel.BarrierOp(), point)
                    return True
            return False

        body = op.body.block
        wrap(body, order(body, Pending()), lambda b: isinstance(b.owner, tile.AllocOp))


# --- block-local buffers -------------------------------------------------------------------------


def hoist_to_func(fn: kernel.FuncOp, op: Operation, rewriter: PatternRewriter) -> None:
    """Insert ``op`` (a buffer declaration) after the declarations at the top of ``fn``."""
    first = fn.body.block.first_op
    while isinstance(first, kernel.SharedOp | kernel.LocalOp):
        first = first.next_op
    point = InsertPoint.before(first) if first is not None else InsertPoint.at_end(fn.body.block)
    rewriter.insert(op, point)


def _register_access(access: Operation, buffer: SSAValue) -> tuple[AffineMap, Sequence[SSAValue]]:
    """The affine map and indices through which ``access`` (a load, a store or a synchronous
    copy) touches the register buffer ``buffer``."""
    if isinstance(access, loop.LoadOp | loop.StoreOp) and access.buffer is buffer:
        return access.map.data, access.indices
    if isinstance(access, tile.CopyOp) and (access.src is buffer) != (access.dst is buffer):
        amap = access.dst_map if access.dst is buffer else access.src_map
        return amap.data, access.indices
    raise fail(access, "a register buffer is only loaded, stored and copied (tile.copy) "
                       "to or from another buffer")


def owning_forall(op: Operation) -> tile.ForallOp | None:
    """The innermost ``tile.forall over block_threads`` around ``op``."""
    parent = op.parent_op()
    while parent is not None and not (
        isinstance(parent, tile.ForallOp) and parent.mapping.data == "block_threads"
    ):
        parent = parent.parent_op()
    return parent


@dataclass
class LowerAlloc(RewritePattern):
    """``tile.alloc shared`` → ``kernel.shared``; ``tile.alloc registers`` → ``kernel.local``
    holding one thread's slice, every access re-indexed without the distributed dimensions."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.AllocOp, rewriter: PatternRewriter) -> None:
        fn = enclosing_func(op)
        if fn is None:
            raise fail(op, "tile.alloc outside a kernel")
        typ = op.result.type
        assert isinstance(typ, MemRefType)
        if op.space.data == "shared":
            new = kernel.SharedOp(typ)
            if SWIZZLE_ATTR in op.attributes:  # a layout kernel-to-cuda keeps
                new.attributes[SWIZZLE_ATTR] = op.attributes[SWIZZLE_ATTR]
            new.result.name_hint = op.result.name_hint
            hoist_to_func(fn, new, rewriter)
            rewriter.replace(op, [], [new.result])
            return
        accesses = [(use.operation, _register_access(use.operation, op.result))
                     for use in op.result.uses]
        distributed: int | None = None
        for access, (amap, indices) in accesses:
            forall = owning_forall(access)
            if forall is None or fn.block_shape != (forall.points, 1, 1):
                raise fail(access, "a register buffer is accessed only inside a tile.forall "
                                   "over block_threads with one point per thread")
            n = len(forall.shape)
            leading = amap.results[:n]
            ok = (distributed in (None, n) and tuple(typ.get_shape()[:n]) == forall.shape
                  and all(isinstance(e, AffineDimExpr)
                          and indices[e.position] is iv
                          for e, iv in zip(leading, forall.ivs, strict=True)))
            if not ok:
                raise fail(access, f"a register buffer's leading indices must be the "
                                   f"induction variables of the enclosing forall over "
                                   f"block_threads {list(forall.shape)}")
            distributed = n
        n = distributed or 0
        shape = list(typ.get_shape()[n:]) or [1]
        width = getattr(typ.element_type, "bitwidth", 32)
        size = math.prod(shape) * max(width // 8, 1)
        if size > kernel.MAX_LOCAL_BYTES:
            raise fail(op, f"each thread's slice {shape} of this register buffer is {size} "
                           f"bytes, more than the {kernel.MAX_LOCAL_BYTES} a CUDA thread "
                           "may have")
        local = kernel.LocalOp(MemRefType(typ.element_type, shape))
        local.result.name_hint = op.result.name_hint
        hoist_to_func(fn, local, rewriter)
        for access, (amap, _) in accesses:
            results = amap.results[n:] or (AffineConstantExpr(0),)
            new_map = AffineMap(amap.num_dims, amap.num_symbols, tuple(results))
            new_access: Operation
            if isinstance(access, loop.LoadOp):
                new_access = loop.LoadOp(local.result, new_map, access.indices)
            elif isinstance(access, loop.StoreOp):
                new_access = loop.StoreOp(access.value, local.result, new_map, access.indices)
            else:
                assert isinstance(access, tile.CopyOp)
                to_local = access.dst is op.result
                new_access = tile.CopyOp(
                    access.src if to_local else local.result,
                    access.src_map.data if to_local else new_map,
                    local.result if to_local else access.dst,
                    new_map if to_local else access.dst_map.data,
                    access.indices, access.elements, access.clamped)
            new_access.attributes |= access.attributes
            rewriter.replace(access, new_access)
        rewriter.erase(op)


# --- kernels -------------------------------------------------------------------------------------


@dataclass
class OutlineKernel(RewritePattern):
    """``tile.kernel`` → module-level ``kernel.func`` + ``kernel.launch`` in its place."""

    taken: set[str]

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.KernelOp, rewriter: PatternRewriter) -> None:
        grid, block = op.grid_shape, op.block_shape
        if grid[1:] != (1, 1) or block[1:] != (1, 1):
            raise fail(op, f"only 1-D launch shapes are supported, got grid {list(grid)} "
                           f"block {list(block)}")
        top: Operation = op
        while (parent := top.parent_op()) is not None and not isinstance(parent, ModuleOp):
            top = parent
        if top is op:
            raise fail(op, "a tile.kernel must sit inside a function")
        name = unique_name(self.taken, op.sym_name.data)
        body = rewriter.move_region_contents_to_new_regions(op.body)
        body.block.add_op(kernel.ReturnOp())
        fn = kernel.FuncOp(name, [a.type for a in body.block.args], block, body)
        fn.attributes |= op.attributes
        rewriter.insert(fn, InsertPoint.before(top))
        rewriter.replace(op, kernel.LaunchOp(name, grid, block, op.buffers,
                                             grid_size=op.grid_size))


@dataclass(frozen=True)
class TileToKernel(ModulePass):
    """Lower Tile IR to Kernel IR (see the module docstring)."""

    name = "tile-to-kernel"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        taken: set[str] = set()
        for inner in op.walk():
            sym = inner.properties.get("sym_name")
            if isinstance(sym, StringAttr) and not isinstance(inner, tile.KernelOp):
                taken.add(sym.data)

        def walk(*patterns: RewritePattern) -> None:
            PatternRewriteWalker(
                KeepLocation(GreedyRewritePatternApplier(list(patterns))),
                apply_recursively=False,
            ).rewrite_module(op)

        walk(OutlineKernel(taken))
        # Identical layers give identical kernels: lower each distinct one once.
        DedupKernels().apply(ctx, op)
        walk(InsertRowBarriers())
        walk(LowerAlloc())
        walk(LowerLoad(), LowerStore(), LowerCopy(), LowerPrefetch(), LowerAsyncCommit(),
             LowerAsyncWait())
        walk(LowerForall(), LowerCoopReduce(), LowerFor(), LowerReduce())
