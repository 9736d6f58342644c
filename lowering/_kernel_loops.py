"""``tile-to-kernel``'s loops: ``loop.for``/``loop.reduce``, foralls over blocks and
threads, cooperative reductions (warp shuffles and a shared-memory step) and the lanes' own
reductions (warp shuffles alone)."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import (
    IntegerAttr,
    MemRefType,
    i64,
)
from xdsl.ir import Block, Region, SSAValue
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from llmopt.dialects import kernel, loop, tile
from llmopt.dialects.kernel import enclosing_func
from llmopt.lowering._kernel_emit import (
    INDEX,
    MAX_UNROLLED_ROUNDS,
    SHUFFLE_OFFSETS,
    Emitter,
    accumulate_body,
    check_reducible,
    combiner,
    hoist_to_func,
    identity,
)
from llmopt.passes._rewrite import fail
from llmopt.target import WARP


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


def even_rounds(points: int, threads: int) -> int:
    """How many points each of a block's ``threads`` owns when they divide ``points`` (a
    static count) into at most :data:`MAX_UNROLLED_ROUNDS` fixed rounds; 0 otherwise (no
    threads known, a remainder, or too many rounds to unroll whole)."""
    if not threads or points % threads or points // threads > MAX_UNROLLED_ROUNDS:
        return 0
    return points // threads


def round_point(emit: Emitter, counter: SSAValue, threads: int, first: SSAValue) -> SSAValue:
    """``counter * threads + first``: a thread's point in round ``counter``."""
    return emit(arith.AddiOp(emit(arith.MuliOp(counter, emit.index(threads))), first))


def rounds_loop(emit: Emitter, rounds: int, inits: list[SSAValue], body: Region) -> scf.ForOp:
    """``scf.for %round = 0 to rounds step 1`` over ``body``, marked for full unrolling, its
    bounds placed by ``emit``."""
    loop_op = scf.ForOp(emit.index(0), emit.index(rounds), emit.index(1), inits, body)
    loop_op.attributes["unroll"] = IntegerAttr(0, i64)
    return loop_op


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
        rounds = even_rounds(op.points, threads) if mapping == "block_threads" else 0
        one_each, even = rounds == 1, rounds > 1
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
            p = round_point(inner, p, threads, first)
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
            new_loop = rounds_loop(emit, rounds, [], Region(block))
        else:
            new_loop = scf.ForOp(first, runtime_points(op, emit), stride, [], Region(block))
        new_loop.attributes |= op.attributes
        rewriter.replace(op, new_loop)


def warp_butterfly(emit: Emitter, kind: str, value: SSAValue, lanes: int = WARP) -> SSAValue:
    """``value`` combined over the lanes of its warp (of its group of ``lanes`` consecutive
    lanes) by the xor butterfly (``v = v ⊕ shfl_xor(v, o)`` for o = 16, 8, 4, 2, 1, those
    below ``lanes``): every lane gets the total."""
    for offset in (o for o in SHUFFLE_OFFSETS if o < lanes):
        other = emit(kernel.ShuffleXorOp(value, offset))
        value = emit(combiner(kind, value, other))
    return value


def fold_in_rounds(body: Region, rounds: int, threads: int, tid: SSAValue, init: SSAValue,
                   emit: Emitter, rewriter: PatternRewriter) -> SSAValue:
    """A thread's private fold over its ``rounds`` points ``round * threads + tid`` of a
    reduction its block's ``threads`` divide: a loop of constant bounds marked for full
    unrolling (one round: the body alone, at ``tid``), so the points' loads are independent
    instructions the GPU has in flight at once (the strided ``for (r = tid; r < n; r +=
    threads)`` has a trip count that depends on the thread, which NVRTC unrolls only in part,
    behind a remainder check: a round trip to memory for every few points).
    ``body`` is the accumulating body (:func:`accumulate_body`: block arguments ``(point,
    acc)``); ``emit`` places the fold."""
    if rounds == 1:
        step = body.block.last_op
        assert isinstance(step, scf.YieldOp)
        value = step.arguments[0]
        rewriter.erase_op(step)
        for arg in body.block.args:  # the thread id and the identity keep no loop names
            arg.name_hint = None
        rewriter.inline_block(body.block, emit.point, [tid, init])
        return value
    block = Block(arg_types=[INDEX, body.block.args[1].type])
    counter, acc = block.args
    counter.name_hint, acc.name_hint = "round", "acc"
    inner = Emitter(rewriter, InsertPoint.at_end(block))
    point = round_point(inner, counter, threads, tid)
    point.name_hint = body.block.args[0].name_hint
    rewriter.inline_block(body.block, InsertPoint.at_end(block), [point, acc])
    return emit(rounds_loop(emit, rounds, [init], Region(block)))


@dataclass
class LowerCoopReduce(RewritePattern):
    """``tile.coop_reduce`` → private fold (strided, or unrolled over a fixed number of
    rounds where the block's threads divide a static trip count, unless ``unroll`` is
    off), warp shuffles, shared-memory step."""

    unroll: bool = True

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
        rounds = even_rounds(op.trip_count, threads) if op.bound is None and self.unroll else 0
        if rounds:
            partial = fold_in_rounds(body, rounds, threads, tid, init, emit, rewriter)
        else:
            ub = op.bound or emit.index(op.trip_count)
            partial = emit(scf.ForOp(tid, ub, emit.index(threads), [init], body))
        partial.name_hint = "partial"
        partial = warp_butterfly(emit, kind, partial)
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


@dataclass
class LowerLaneReduce(RewritePattern):
    """``tile.lane_reduce`` → the xor butterfly of warp shuffles over its group of lanes (its
    forall gives every thread one point, so the whole warp reaches it together)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.LaneReduceOp, rewriter: PatternRewriter) -> None:
        kind, typ = op.kind.data, op.result.type
        check_reducible(op, kind, typ)
        emit = Emitter(rewriter, InsertPoint.before(op))
        rewriter.replace(op, [], [warp_butterfly(emit, kind, op.value, op.group)])
