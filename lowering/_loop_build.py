"""Tile IR built by ``loop-to-tile``: a unit's loops distributed over blocks and threads,
cooperative reductions, and a kernel's grid at a runtime length."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith
from xdsl.dialects.builtin import IndexType
from xdsl.ir import Block, Operation, SSAValue
from xdsl.pattern_rewriter import (
    PatternRewriter,
)
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import is_side_effect_free

from llmopt.dialects import loop, tile
from llmopt.lowering._extents import ExtentError, minimum_of
from llmopt.lowering._loop_bands import Unit, fold_band_into, perfect_band, product


def band_sizes(band: Sequence[loop.ForOp]) -> dict[int, SSAValue]:
    """The dims of ``band`` that run to a runtime bound, and that bound."""
    return {k: f.bound for k, f in enumerate(band) if f.bound is not None}


def to_coop_reduce(red: loop.ReduceOp, rewriter: PatternRewriter) -> tile.CoopReduceOp:
    """Replace ``red`` by a ``tile.coop_reduce`` with its body (``loop.yield`` → ``tile.yield``)."""
    bound = red.bound
    body = Rewriter.move_region_contents_to_new_regions(red.body)
    yield_op = body.block.last_op
    assert isinstance(yield_op, loop.YieldOp)
    rewriter.replace(yield_op, tile.YieldOp(*yield_op.values))
    coop = tile.CoopReduceOp(red.kind.data, red.trip_count, red.result.type, body, bound)
    coop.location = red.location
    rewriter.replace(red, coop)
    return coop


def to_block_threads(outer: loop.ForOp, rewriter: PatternRewriter) -> tile.ForallOp:
    """Replace a free nest by a ``tile.forall over block_threads`` over its perfect chain."""
    band = perfect_band(outer)
    forall = tile.ForallOp([f.trip_count for f in band], "block_threads",
                           sizes=band_sizes(band))
    forall.location = outer.location
    rewriter.insert(forall, InsertPoint.before(outer))
    fold_band_into(band, forall, rewriter)
    return forall


def one_thread(ops: Sequence[Operation], rewriter: PatternRewriter,
               before: Operation | None = None) -> tile.ForallOp:
    """Move ``ops`` into a one-point ``tile.forall over block_threads`` placed before
    ``before``, or at the end of their block."""
    forall = tile.ForallOp([1], "block_threads")
    forall.location = ops[0].location
    forall.ivs[0].name_hint = "once"
    block = ops[0].parent_block()
    assert block is not None
    where = InsertPoint.before(before) if before is not None else InsertPoint.at_end(block)
    rewriter.insert(forall, where)
    for op in ops:
        op.detach()
        forall.body.block.add_op(op)
    return forall


def _passable(op: Operation, written: set[SSAValue]) -> bool:
    """Whether a store of one of ``written`` may move down past ``op``: a scalar op, or a
    load of another buffer."""
    if isinstance(op, loop.LoadOp):
        return op.buffer not in written
    return not op.regions and is_side_effect_free(op)


def distribute_over_block(body: Block, rewriter: PatternRewriter) -> None:
    """Row schedule inside ``body`` (a forall over blocks): reductions become cooperative,
    free nests go to the block's threads, stores to one thread. A store moves down past
    the scalar ops and loads after it that do not read what it writes, so that the stores
    of one output point (the two halves of a rotary embedding) share one thread's forall
    at the end, the form ``warp-gemv`` matches."""
    stores: list[Operation] = []
    for op in list(body.ops):
        if isinstance(op, loop.StoreOp):
            stores.append(op)
            continue
        if stores and _passable(op, {s.buffer for s in stores if isinstance(s, loop.StoreOp)}):
            continue
        if stores:
            one_thread(stores, rewriter, before=op)
            stores = []
        if isinstance(op, loop.ReduceOp):
            to_coop_reduce(op, rewriter)
        elif isinstance(op, loop.ForOp):
            to_block_threads(op, rewriter)
    if stores:
        one_thread(stores, rewriter)


def build_unit(unit: Unit, kernel_block: Block, rewriter: PatternRewriter) -> None:
    """Replace the unit's ops in ``kernel_block`` by its forall."""
    schedule = unit.schedule
    assert schedule is not None
    # The band's runtime bounds as they are now: a later kernel's band was moved into it,
    # its bounds rebound to that kernel's arguments.
    sizes = band_sizes(unit.band) if schedule.sizes and unit.band else schedule.sizes
    forall = tile.ForallOp(schedule.extents, schedule.mapping, sizes=sizes)
    forall.location = unit.anchor.location
    rewriter.insert(forall, InsertPoint.before(unit.anchor))
    if unit.band:
        for iv, loop_op in zip(forall.ivs, unit.band, strict=True):
            if loop_op.iv.name_hint:
                iv.name_hint = loop_op.iv.name_hint
        fold_band_into(unit.band, forall, rewriter)
    else:
        forall.ivs[0].name_hint = "once"
        for op in unit.ops:
            op.detach()
            forall.body.block.add_op(op)
    if schedule.mapping == "blocks":
        distribute_over_block(forall.body.block, rewriter)


def move_into(kernel: tile.KernelOp, shared: Sequence[Operation], units: Sequence[Unit],
              old_args: Sequence[SSAValue]) -> None:
    """Fill a fresh ``kernel`` with ``units`` (moved) and the shared scalar ops they need
    (cloned); uses of ``old_args`` inside become the kernel's own block arguments."""
    block = kernel.body.block
    mapping: dict[SSAValue, SSAValue] = dict(zip(old_args, block.args, strict=True))
    needed: set[Operation] = set()
    shared_set = set(shared)
    work = [op for unit in units for top in unit.ops for op in top.walk()]
    while work:
        op = work.pop()
        for value in op.operands:
            owner = value.owner
            if isinstance(owner, Operation) and owner in shared_set and owner not in needed:
                needed.add(owner)
                work.append(owner)
    for op in shared:
        if op in needed:
            clone = op.clone(mapping)
            block.add_op(clone)
            mapping.update(zip(op.results, clone.results, strict=True))
    for unit in units:
        for op in unit.ops:
            op.detach()
            block.add_op(op)
    for old, new in mapping.items():
        old.replace_uses_with_if(new, lambda use: kernel.is_ancestor(use.operation))


def runtime_grid(kernel: loop.KernelOp, group: Sequence[Unit], threads: int, max_grid: int,
                 rewriter: PatternRewriter) -> SSAValue | None:
    """The grid of a kernel whose units have runtime extents, computed before ``kernel``
    from the function-level values bound to them (see the module docstring); ``None`` when
    every unit's grid is static."""
    if not any(u.schedule is not None and u.schedule.sizes for u in group):
        return None
    outer = dict(zip(kernel.body.block.args, kernel.buffers, strict=True))
    where = InsertPoint.before(kernel)

    def emit(new: Operation) -> SSAValue:
        rewriter.insert(new, where)
        return new.results[0]

    def const(value: int) -> SSAValue:
        return emit(arith.ConstantOp.from_int_and_width(value, IndexType()))

    grids: list[SSAValue] = []
    for unit in group:
        schedule = unit.schedule
        if schedule is None:
            continue
        static = product(e for k, e in enumerate(schedule.extents) if k not in schedule.sizes)
        if not schedule.sizes:
            grids.append(const(schedule.grid(threads, max_grid)))
            continue
        points: SSAValue | None = None
        for k in sorted(schedule.sizes):
            value = outer[schedule.sizes[k]]
            points = value if points is None else emit(arith.MuliOp(points, value))
        assert points is not None
        if static != 1:
            points = emit(arith.MuliOp(points, const(static)))
        grid = points
        if schedule.mapping != "blocks":
            grid = emit(arith.CeilDivUIOp(points, const(threads)))
        if schedule.grid(threads, max_grid) == max_grid:  # the largest grid reaches the cap
            grid = emit(arith.MinUIOp(grid, const(max_grid)))
        if _may_be_below_one(points):
            grid = emit(arith.MaxUIOp(grid, const(1)))
        grids.append(grid)
    result = grids[0]
    for other in grids[1:]:
        result = emit(arith.MaxUIOp(result, other))
    if isinstance(result.owner, Operation):  # not the symbol itself
        result.name_hint = "grid"
    return result


def _may_be_below_one(points: SSAValue) -> bool:
    """Whether a runtime count of points may be 0 at some length: its least value over the
    symbols' bounds, or ``True`` when the arithmetic computing it cannot be bounded (the
    grid then keeps a floor of one block either way)."""
    try:
        return minimum_of(points) < 1
    except ExtentError:
        return True
