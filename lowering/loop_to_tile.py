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
  fewer than ``coop_threshold`` points (too few for one thread per point, e.g. GEMV) and a
  reduction of at least ``coop_min`` iterations (a warp's worth by default), or holds
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

The loop nests' bands and units live in ``_loop_bands``, the Tile IR built from them in
``_loop_build``; this module chooses each unit's schedule and drives the rewrite.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Block, Operation, SSAValue
from xdsl.ir.affine import AffineDimExpr
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import Rewriter
from xdsl.utils.exceptions import PassFailedException

from llmopt.dialects import loop, tile
from llmopt.lowering._loop_bands import (
    MAX_GRID,
    MAX_POINTS,
    Schedule,
    band_body,
    phases,
    product,
    round_up,
    split_units,
)
from llmopt.lowering._loop_build import (
    band_sizes,
    build_unit,
    move_into,
    runtime_grid,
)
from llmopt.lowering._symbols import unique_name
from llmopt.passes._rewrite import KeepLocation, fail
from llmopt.target import ARCH, DEFAULT_ARCH, MAX_THREADS_PER_BLOCK, WARP


def inner_nest_points(op: loop.ForOp) -> int:
    """Points of the perfect chain of free loops starting at ``op`` (no IR change)."""
    points = op.trip_count
    ops = list(op.body.block.ops)
    while len(ops) == 1 and isinstance(ops[0], loop.ForOp):
        points *= ops[0].trip_count
        ops = list(ops[0].body.block.ops)
    return points


COOP_MIN = WARP
"""The default ``coop_min``: a band of few points goes cooperative only for a reduction of
at least a warp's worth of iterations (a split-key merge over 4-16 splits gets a thread an
output: faster on a decode step, ``bench/results/decode-ab-nopf-h200.md``)."""

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
                    coop_threshold: int, ivs: Sequence[SSAValue] = (),
                    coop_min: int = COOP_MIN) -> Schedule:
    """The default schedule of a band with ``extents`` (induction variables ``ivs``) whose
    innermost body is ``body``; a band is too small for a thread a point only while its
    longest reduction has at least ``coop_min`` iterations."""
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
    few = points < coop_threshold and max((r.trip_count for r in reduces), default=0) >= coop_min
    if fors or (reduces and (few or row_reads or gemv)):
        widths = [r.trip_count for r in reduces] + [inner_nest_points(f) for f in fors]
        width = max(widths)
        if points >= coop_threshold:  # rows enough to fill the GPU: several points a thread
            width = -(-width // ROW_POINTS_PER_THREAD)
        threads = min(block_size, round_up(width, WARP))
        return Schedule("blocks", tuple(extents), threads)
    return Schedule("threads", tuple(extents), min(block_size, round_up(points, WARP)))


@dataclass
class ScheduleKernel(RewritePattern):
    """``loop.kernel`` → one or more ``tile.kernel`` carrying the default schedule."""

    block_size: int
    coop_threshold: int
    max_grid: int
    taken: set[str]
    coop_min: int = COOP_MIN

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
                    [f.body.block.args[0] for f in unit.band], self.coop_min)
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
    schedule), ``coop_min`` (… unless every reduction has fewer iterations than this, as a
    split-key merge's few splits, which would leave most of a warp idle: they get a thread
    a point; :data:`COOP_MIN` by default, 1 takes the row schedule for any), ``max_grid``
    (the largest grid; foralls stride beyond it).
    """

    name = "loop-to-tile"

    arch: str = DEFAULT_ARCH
    block_size: int = 256
    coop_threshold: int = 4096
    coop_min: int = COOP_MIN
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
                ScheduleKernel(self.block_size, self.coop_threshold, self.max_grid, taken,
                               self.coop_min)
            ),
            apply_recursively=False,
        ).rewrite_module(op)
