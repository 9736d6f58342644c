"""``loop-to-tile``: Loop IR → Tile IR, the default schedule.

Matches every ``loop.kernel`` and rewrites it into ``tile.kernel`` (same symbol name, same
bound buffers) whose launch shape and loop-to-GPU mapping are written down as ops:

* **Units.** The kernel body is cut into *units*: each top-level ``loop.for`` nest is one, and
  each run of other side-effecting top-level ops (a full reduction, a scalar store) is one
  with an empty band. Side-effect-free scalar ops at the top level stay there (every thread
  computes them). A unit's values may not be used outside it.
* **Band.** The band of a nest is its maximal perfect chain of ``loop.for``. Side-effect-free
  scalar ops and loads that sit beside a single inner loop are first sunk into it (they are
  recomputed per inner iteration, which keeps the nest perfect and the band long).
* **Row schedule** — when the band body still holds a nested ``loop.for`` (an imperfect nest:
  a row computation such as RMSNorm or softmax), or holds a ``loop.reduce`` and the band has
  fewer than ``coop_threshold`` points (too few for one thread per point, e.g. GEMV), or holds
  only reductions that each read one buffer along its innermost coordinate (a row sum: one
  thread per row would read addresses a row apart from its neighbours'), or is a
  matrix-vector product (one band dimension wider than 1) whose reductions read rows of a
  weight along their innermost coordinate (one thread per output would read them a row
  apart; reductions that use no band variable, a row's statistics that
  ``recompute-into-products`` put beside a product, do not count here):
  ``tile.forall over blocks`` over the band; each ``loop.reduce`` directly in its body becomes
  a ``tile.coop_reduce`` (the block's threads share it), each ``loop.for`` nest directly in it
  becomes a ``tile.forall over block_threads`` (its perfect chain flattened), each run of
  ``loop.store`` directly in it is wrapped in a one-point ``tile.forall over block_threads``
  (one thread writes it). Block = the widest of those inner extents (divided by 8 when the
  band has at least ``coop_threshold`` rows) rounded up to a warp, capped at ``block_size``;
  grid = the band's points (capped at ``max_grid``).
* **Thread schedule** — otherwise: ``tile.forall over threads`` over the band; inner
  ``loop.reduce``/``loop.for`` stay sequential. Block = ``block_size`` (fewer for small
  bands, rounded up to a warp), grid = ceil(points / block) (capped at ``max_grid``).
  Consecutive threads take consecutive innermost indices, so innermost accesses coalesce.
* **Runtime extents** — a loop that runs to a runtime bound (a symbolic length, ``loop.for
  %i = 0 to %n max 2048``) becomes a forall dim of that runtime extent (``in [1, %n max
  2048, 64]``), a cooperative reduction with that bound, or stays a sequential loop; the
  schedule is chosen for the maximum. The grid is then computed where the kernel is
  launched, from the length: ``ceildiv(64 * %seq, 256)`` blocks for a forall over threads,
  ``%seq`` for one over blocks (capped at ``max_grid``; the larger of the units' grids when a
  kernel has several), and ``grid [%g max G, 1, 1]`` records it with its largest value.

A kernel's units run as consecutive foralls of one ``tile.kernel`` (block and grid = the
largest any unit asks for: every mapping is a bound-checked strided loop, so larger launch
shapes stay correct). Foralls of one kernel have no grid-wide synchronisation between them,
so units that touch a buffer another one writes go to a new ``tile.kernel`` (named
``<name>_1``, ...), launched after it. Why: this is the simplest schedule that is correct
for every Loop IR kernel and still coalesced and parallel for the shapes of LLM layers; the
scheduling passes at Tile IR refine it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import IndexType, ModuleOp, StringAttr
from xdsl.ir import Block, Operation, SSAValue
from xdsl.ir.affine import AffineDimExpr
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import IsTerminator, is_side_effect_free
from xdsl.utils.exceptions import PassFailedException

from llmopt.dialects import loop, tile
from llmopt.lowering._extents import ExtentError, minimum_of
from llmopt.lowering._symbols import unique_name
from llmopt.passes._rewrite import KeepLocation, fail
from llmopt.target import ARCH, DEFAULT_ARCH, MAX_THREADS_PER_BLOCK, WARP

MAX_GRID = 2**31 - 1
MAX_POINTS = 2**63 - 1


def round_up(value: int, multiple: int) -> int:
    """The least multiple of ``multiple`` that is at least ``value``."""
    return -(-value // multiple) * multiple


def product(values: Iterable[int]) -> int:
    """The product of ``values`` (1 for none)."""
    n = 1
    for v in values:
        n *= v
    return n


def is_pure_scalar(op: Operation) -> bool:
    """A region-less op without side effects (``arith``/``math``): free to recompute or move."""
    return not op.regions and not op.has_trait(IsTerminator) and is_side_effect_free(op)


def accessed_buffers(ops: Iterable[Operation]) -> tuple[set[SSAValue], set[SSAValue]]:
    """The buffers read and written by ``ops`` and everything nested in them."""
    reads: set[SSAValue] = set()
    writes: set[SSAValue] = set()
    for top in ops:
        for op in top.walk():
            if isinstance(op, loop.LoadOp):
                reads.add(op.buffer)
            elif isinstance(op, loop.StoreOp):
                writes.add(op.buffer)
    return reads, writes


# --- bands ---------------------------------------------------------------------------------------


def sink_into_inner_loop(block: Block) -> None:
    """If ``block`` holds one ``loop.for`` beside only side-effect-free scalar ops and loads
    used nowhere but in that loop, move those ops to the front of the loop's body.

    Loads are moved only from buffers the inner loop does not write, so each moved op
    computes the same value inside the loop as before it.
    """
    inner_loops = [op for op in block.ops if isinstance(op, loop.ForOp)]
    if len(inner_loops) != 1:
        return
    inner = inner_loops[0]
    others = [op for op in block.ops if op is not inner]
    if not others:
        return
    if not all(is_pure_scalar(op) or isinstance(op, loop.LoadOp) for op in others):
        return
    moved = set(others)
    for op in others:
        for result in op.results:
            for use in result.uses:
                if use.operation not in moved and not inner.is_ancestor(use.operation):
                    return
    _, written = accessed_buffers([inner])
    if any(isinstance(op, loop.LoadOp) and op.buffer in written for op in others):
        return
    target = inner.body.block
    anchor = target.first_op
    for op in others:
        op.detach()
        if anchor is None:
            target.add_op(op)
        else:
            target.insert_op_before(op, anchor)


def perfect_band(outer: loop.ForOp) -> list[loop.ForOp]:
    """The maximal perfect chain of ``loop.for`` starting at ``outer`` (sinking scalar ops
    into single inner loops first, see :func:`sink_into_inner_loop`)."""
    band = [outer]
    while True:
        body = band[-1].body.block
        sink_into_inner_loop(body)
        ops = list(body.ops)
        if len(ops) == 1 and isinstance(ops[0], loop.ForOp):
            band.append(ops[0])
        else:
            return band


def band_body(band: Sequence[loop.ForOp]) -> Block:
    """The body of the band's innermost loop."""
    return band[-1].body.block


def fold_band_into(band: Sequence[loop.ForOp], forall: tile.ForallOp,
                   rewriter: PatternRewriter) -> None:
    """Move the band's innermost body into ``forall`` (band ivs → forall ivs); erase the band."""
    for loop_op, iv in zip(band[:-1], forall.ivs, strict=False):
        loop_op.iv.replace_all_uses_with(iv)
    inner = band[-1].body.block
    rewriter.inline_block(inner, InsertPoint.at_end(forall.body.block), [forall.ivs[-1]])
    rewriter.erase(band[0])


# --- schedules -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    """The mapping chosen for one unit: ``blocks`` (row schedule) or ``threads``."""

    mapping: str
    extents: tuple[int, ...]
    threads: int
    """threads per block this unit asks for (a multiple of a warp)"""
    sizes: dict[int, SSAValue] = field(default_factory=dict[int, SSAValue])
    """the dims of ``extents`` (then maxima) that run to a runtime bound, and that bound"""

    @property
    def points(self) -> int:
        """Points of the iteration space the forall covers."""
        return product(self.extents)

    def grid(self, threads_per_block: int, max_grid: int) -> int:
        """Blocks this unit needs when the kernel runs ``threads_per_block`` threads a block."""
        if self.mapping == "blocks":
            return max(1, min(self.points, max_grid))
        return max(1, min(-(-self.points // threads_per_block), max_grid))


def inner_nest_points(op: loop.ForOp) -> int:
    """Points of the perfect chain of free loops starting at ``op`` (no IR change)."""
    points = op.trip_count
    ops = list(op.body.block.ops)
    while len(ops) == 1 and isinstance(ops[0], loop.ForOp):
        points *= ops[0].trip_count
        ops = list(ops[0].body.block.ops)
    return points


ROW_POINTS_PER_THREAD = 8
"""Points of a row each thread takes in the row schedule when the band has at least
``coop_threshold`` rows: the GPU is full anyway, and a block per row pays its barriers and
its shuffles per row, so narrower blocks (64 threads for a 512-wide softmax) do more work per
barrier and fit more rows per multiprocessor."""


def reads_one_row(red: loop.ReduceOp) -> bool:
    """Whether ``red`` reads one buffer along the reduction, with its index alone in the
    innermost coordinate (a row sum or max, not a product of two operands): a thread per
    row would then read addresses a row apart from its neighbours', where a block per row
    reads consecutive ones."""
    iv = red.body.block.args[0]
    buffers = set()
    for op in red.body.walk():
        if isinstance(op, loop.LoadOp) and iv in op.indices:
            last = op.map.data.results[-1]
            if not (isinstance(last, AffineDimExpr) and op.indices[last.position] is iv):
                return False
            buffers.add(op.buffer)
    return len(buffers) == 1


def reads_rows_apart(red: loop.ReduceOp, iv: SSAValue) -> bool:
    """Whether ``red`` reads a buffer with its index alone in the innermost coordinate and
    the band's ``iv`` in another one (a weight row ``W[n, k]`` of a matrix-vector product):
    threads on consecutive ``iv`` would read addresses a row apart."""
    k = red.body.block.args[0]
    for op in red.body.walk():
        if isinstance(op, loop.LoadOp) and k in op.indices and iv in op.indices:
            last = op.map.data.results[-1]
            if (isinstance(last, AffineDimExpr) and op.indices[last.position] is k
                    and any(iv is op.indices[d] for r in op.map.data.results[:-1]
                            for d in r.used_dims())):
                return True
    return False


def uses_any(op: Operation, ivs: Sequence[SSAValue]) -> bool:
    """Whether ``op`` or an op nested in it takes one of ``ivs`` as an operand."""
    wanted = set(ivs)
    return any(v in wanted for inner in op.walk() for v in inner.operands)


def choose_schedule(extents: Sequence[int], body: Block, block_size: int,
                    coop_threshold: int, ivs: Sequence[SSAValue] = ()) -> Schedule:
    """The default schedule of a band with ``extents`` (induction variables ``ivs``) whose
    innermost body is ``body``."""
    points = product(extents)
    reduces = [op for op in body.ops if isinstance(op, loop.ReduceOp)]
    fors = [op for op in body.ops if isinstance(op, loop.ForOp)]
    row_reads = bool(reduces) and all(reads_one_row(r) for r in reduces)
    # A matrix-vector product (one band dimension wider than 1: nothing for register-tile
    # to tile) reading weight rows along its sum: a block per output reads them coalesced.
    # Reductions that use no band variable (a row's statistics that ``recompute-into-
    # products`` put beside a product) are the same for every output: each block computes
    # them cooperatively first.
    wide = [iv for iv, e in zip(ivs, extents, strict=False) if e > 1]
    varying = [r for r in reduces if uses_any(r, ivs)]
    gemv = (bool(varying) and len(wide) == 1
            and all(reads_rows_apart(r, wide[0]) for r in varying))
    if fors or (reduces and (points < coop_threshold or row_reads or gemv)):
        widths = [r.trip_count for r in reduces] + [inner_nest_points(f) for f in fors]
        width = max(widths)
        if points >= coop_threshold:  # rows enough to fill the GPU: several points a thread
            width = -(-width // ROW_POINTS_PER_THREAD)
        threads = min(block_size, round_up(width, WARP))
        return Schedule("blocks", tuple(extents), threads)
    return Schedule("threads", tuple(extents), min(block_size, round_up(points, WARP)))


# --- units ---------------------------------------------------------------------------------------


@dataclass
class Unit:
    """Top-level ops of a kernel body that become one forall."""

    ops: list[Operation]
    band: list[loop.ForOp] = field(default_factory=list[loop.ForOp])
    schedule: Schedule | None = None

    @property
    def anchor(self) -> Operation:
        """The unit's first op: its forall is inserted there."""
        return self.ops[0]

    def conflicts_with(self, other: Unit) -> bool:
        """Whether running both without a grid-wide barrier could race."""
        reads, writes = accessed_buffers(self.ops)
        other_reads, other_writes = accessed_buffers(other.ops)
        return bool(writes & (other_reads | other_writes) or other_writes & reads)


def split_units(kernel: loop.KernelOp) -> tuple[list[Operation], list[Unit]]:
    """Cut the kernel body into the top-level scalar ops kept in place and the units."""
    block = kernel.body.block
    shared: list[Operation] = []
    units: list[Unit] = []
    owner: dict[Operation, Unit] = {}
    run: Unit | None = None
    for op in list(block.ops):
        if isinstance(op, loop.ForOp):
            run = None
            unit = Unit([op])
            units.append(unit)
        elif is_pure_scalar(op) and not any(
            isinstance(v.owner, Operation) and v.owner in owner for v in op.operands
        ):
            shared.append(op)
            continue
        else:
            if run is None:
                run = Unit([])
                units.append(run)
            run.ops.append(op)
            unit = run
        owner[op] = unit
    # Shared ops depend only on block arguments and earlier shared ops: hoisting them above
    # every unit keeps them defined before the foralls that replace the units use them.
    if units:
        first = units[0].anchor
        for op in shared:
            op.detach()
            block.insert_op_before(op, first)
    units = merge_connected(units, block, owner)
    for unit in units:
        for op in unit.ops:
            for result in op.results:
                for use in result.uses:
                    user = block.find_ancestor_op_in_block(use.operation)
                    if user is None or owner.get(user) is not unit:
                        raise fail(op, "its value is used outside its loop nest; loop-to-tile "
                                       "cannot map the two to separate foralls")
    for unit in units:
        if len(unit.ops) == 1 and isinstance(unit.anchor, loop.ForOp):
            unit.band = perfect_band(unit.anchor)
    return shared, units


def merge_connected(units: list[Unit], block: Block, owner: dict[Operation, Unit]
                    ) -> list[Unit]:
    """Merge each unit that uses a value defined by an earlier unit with it and with the
    units between them (a full reduction, then a loop nest scaling by its result): one
    unit with no band, which the row schedule runs in order on one block. ``owner`` is
    updated."""
    index = {id(unit): k for k, unit in enumerate(units)}
    k = 0
    while k < len(units):
        first = k
        for top in units[k].ops:
            for op in top.walk():
                for value in op.operands:
                    definer = value.owner
                    if not isinstance(definer, Operation):
                        continue
                    ancestor = block.find_ancestor_op_in_block(definer)
                    source = owner.get(ancestor) if ancestor is not None else None
                    if source is not None and source is not units[k]:
                        first = min(first, index[id(source)])
        if first == k:
            k += 1
            continue
        merged = Unit([op for unit in units[first:k + 1] for op in unit.ops])
        for op in merged.ops:
            owner[op] = merged
        units[first:k + 1] = [merged]
        index = {id(unit): j for j, unit in enumerate(units)}
        k = first
    return units


def phases(units: Sequence[Unit]) -> list[list[Unit]]:
    """Group consecutive units into kernels: a unit conflicting with one before it in the
    current kernel starts the next kernel."""
    groups: list[list[Unit]] = []
    for unit in units:
        if groups and not any(unit.conflicts_with(prior) for prior in groups[-1]):
            groups[-1].append(unit)
        else:
            groups.append([unit])
    return groups


# --- building the tile IR ------------------------------------------------------------------------


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


def one_thread(ops: Sequence[Operation], rewriter: PatternRewriter) -> tile.ForallOp:
    """Wrap ``ops`` (consecutive) in a one-point ``tile.forall over block_threads``."""
    forall = tile.ForallOp([1], "block_threads")
    forall.location = ops[0].location
    forall.ivs[0].name_hint = "once"
    rewriter.insert(forall, InsertPoint.before(ops[0]))
    for op in ops:
        op.detach()
        forall.body.block.add_op(op)
    return forall


def distribute_over_block(body: Block, rewriter: PatternRewriter) -> None:
    """Row schedule inside ``body`` (a forall over blocks): reductions become cooperative,
    free nests go to the block's threads, stores to one thread."""
    stores: list[Operation] = []
    for op in list(body.ops):
        if isinstance(op, loop.StoreOp):
            stores.append(op)
            continue
        if stores:
            one_thread(stores, rewriter)
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


@dataclass
class ScheduleKernel(RewritePattern):
    """``loop.kernel`` → one or more ``tile.kernel`` carrying the default schedule."""

    block_size: int
    coop_threshold: int
    max_grid: int
    taken: set[str]

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: loop.KernelOp, rewriter: PatternRewriter) -> None:
        shared, units = split_units(op)
        for unit in units:
            if unit.band:
                extents = [f.trip_count for f in unit.band]
                if product(extents) > MAX_POINTS:
                    raise fail(unit.band[0], f"the loop nest {extents} has {product(extents)} "
                                             f"points, more than an index counts ({MAX_POINTS})")
                unit.schedule = choose_schedule(
                    extents, band_body(unit.band), self.block_size, self.coop_threshold,
                    [f.body.block.args[0] for f in unit.band])
                sizes = band_sizes(unit.band)
                if sizes:
                    unit.schedule = replace(unit.schedule, sizes=sizes)
            else:
                # Full reductions and loop nests that use their results: one block's
                # threads share them (row schedule); scalar stores: one thread.
                widths = [o.trip_count for o in unit.ops if isinstance(o, loop.ReduceOp)]
                widths += [inner_nest_points(o) for o in unit.ops if isinstance(o, loop.ForOp)]
                threads = min(self.block_size, round_up(max(widths, default=1), WARP))
                unit.schedule = Schedule("blocks" if widths else "threads", (1,), threads)
        groups = phases(units) or [[]]
        name = op.sym_name.data
        new_kernels: list[tile.KernelOp] = []
        threads_of = [max((u.schedule.threads for u in group if u.schedule), default=WARP)
                      for group in groups]
        # Every group's runtime grid before the first kernel takes the body (and its
        # arguments, which the grids are computed from).
        grid_sizes = [runtime_grid(op, group, threads, self.max_grid, rewriter)
                      for group, threads in zip(groups, threads_of, strict=True)]
        for k, (group, threads, grid_size) in enumerate(zip(groups, threads_of, grid_sizes,
                                                            strict=True)):
            grid = max(
                (u.schedule.grid(threads, self.max_grid) for u in group if u.schedule),
                default=1,
            )
            if k == 0:
                body = Rewriter.move_region_contents_to_new_regions(op.body)
                kernel = tile.KernelOp(name, [grid, 1, 1], [threads, 1, 1], op.buffers, body,
                                       grid_size)
            else:
                kernel = tile.KernelOp(unique_name(self.taken, name), [grid, 1, 1], [threads, 1, 1],
                                       op.buffers, grid_size=grid_size)
                for new, old in zip(kernel.body.block.args, new_kernels[0].body.block.args,
                                    strict=True):
                    new.name_hint = old.name_hint
                move_into(kernel, shared, group, new_kernels[0].body.block.args)
            kernel.attributes |= op.attributes
            new_kernels.append(kernel)
        for kernel, group in zip(new_kernels, groups, strict=True):
            for unit in group:
                build_unit(unit, kernel.body.block, rewriter)
        # Shared scalar ops that only the later kernels used are dead in the first one.
        for shared_op in reversed(shared):
            if shared_op.parent is new_kernels[0].body.block and not any(
                r.uses for r in shared_op.results
            ):
                rewriter.erase(shared_op)
        rewriter.replace(op, new_kernels, [])


@dataclass(frozen=True)
class LoopToTile(ModulePass):
    """Lower Loop IR to Tile IR with the default schedule (see the module docstring).

    Options (all overridable from the pipeline, e.g. ``loop-to-tile{block_size=128}``):
    ``arch`` (the target GPU, ``sm_90``), ``block_size`` (threads per block, a multiple of
    32), ``coop_threshold`` (bands with a reduction and fewer points than this get the row
    schedule), ``max_grid`` (the largest grid; foralls stride beyond it).
    """

    name = "loop-to-tile"

    arch: str = DEFAULT_ARCH
    block_size: int = 256
    coop_threshold: int = 4096
    max_grid: int = MAX_GRID

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not ARCH.fullmatch(self.arch):
            raise PassFailedException(f"loop-to-tile: arch must look like 'sm_90', got "
                                      f"'{self.arch}'")
        if not (WARP <= self.block_size <= MAX_THREADS_PER_BLOCK
                and self.block_size % WARP == 0):
            raise PassFailedException(
                f"loop-to-tile: block_size must be a multiple of {WARP} in "
                f"[{WARP}, {MAX_THREADS_PER_BLOCK}], got {self.block_size}"
            )
        if self.coop_threshold < 0 or not 1 <= self.max_grid <= MAX_GRID:
            raise PassFailedException(
                "loop-to-tile: coop_threshold must be ≥ 0 and max_grid in [1, 2^31-1]"
            )
        taken: set[str] = set()
        for inner in op.walk():
            sym = inner.properties.get("sym_name")
            if isinstance(sym, StringAttr):
                taken.add(sym.data)
        PatternRewriteWalker(
            KeepLocation(
                ScheduleKernel(self.block_size, self.coop_threshold, self.max_grid, taken)
            ),
            apply_recursively=False,
        ).rewrite_module(op)
