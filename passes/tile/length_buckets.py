"""``length-buckets``: a product over a symbolic length gets one kernel per length bucket,
chosen on the host when it is launched.

**Matches** a ``tile.kernel`` that ``register-tile`` tiles with *runtime rows* (its rows
are the symbolic length, see :func:`~llmopt.passes.tile.register_tile.match_contraction`)
and that is not a bucket's variant already (``llmopt.bucket``).

**Produces**, for the bounds ``b₁ < b₂ < …`` (option ``bounds``, default 32, 128, 256,
512, 1024) below the length's maximum ``M``, a chain of host ``scf.if`` around copies of the
kernel::

    %le32 = arith.cmpi ule, %seq, %c32 : index
    scf.if %le32 {
      tile.kernel @linear_le32 ... { tile.forall (%i, %j) in [%n max 32, 2048] ... }
    } else {
      %le128 = arith.cmpi ule, %seq, %c128 : index
      scf.if %le128 { ... @linear_le128 ... } else { ... @linear (max M) ... }
    }

Each copy has the maximum of its row extent lowered to its bucket's bound and
``{llmopt.bucket = b}``; the scheduling passes that follow (``split-k``,
``register-tile``) choose each copy's schedule for that maximum, as they would for a
static product of ``b`` rows.

Below those, the bucket of at most ``coop_rows`` rows (option, default 2; 0: none) gets
the *cooperative* schedule that ``loop-to-tile`` gives a static matrix-vector product: a
block per output (``tile.forall … over blocks``, the rows innermost, so that the blocks
that read one weight row run together), each reduction a ``tile.coop_reduce`` of the
block's threads, the stores one thread's (``{llmopt.bucket = 2, llmopt.coop}``), its grid
``%seq · outputs`` computed before the launch. Where the length is a symbol (at least 1 by
definition; or an argument every call passes a symbol for), one more bucket comes first:
``%seq <= 1`` is exactly one row, and its variant (``<name>_coop1``) has static extents
and a static grid, the kernel a static program's matrix-vector product, which
``warp-gemv`` then schedules a warp per output::

    %le1 = arith.cmpi ule, %seq, %c1 : index
    scf.if %le1 {
      tile.kernel @linear_coop1 grid [2048, 1, 1] block [256, 1, 1] ... {
        tile.forall (%j, %i) in [2048, 1] over blocks {
          %s = tile.coop_reduce add %k = 0 to 2048 : f32 { ... }
          tile.forall (%once) in [1] over block_threads { loop.store ... }
        } ...
    } else {
      %le2 = arith.cmpi ule, %seq, %c2 : index
      scf.if %le2 {
        %grid_coop2 = arith.muli %seq, %c2048 : index
        tile.kernel @linear_coop2 grid [%grid_coop2 max 4096, 1, 1] block [256, 1, 1] ... {
          tile.forall (%j, %i) in [2048, %n max 2] over blocks { ... }
      } else { ... the buckets above ... }

Adjacent buckets for which the heuristics choose the same
schedule (:func:`~llmopt.passes.tile._schedule.choose_product_schedule`) share one copy,
and a kernel whose buckets all agree is left alone. The host evaluates the conditions at
every launch (and the executor sizes an allocation under ``%seq <= b``, such as
``split-k``'s partial sums, for ``b`` rows).

**Why** a schedule is chosen for the largest extent it may meet: for a 2048-token maximum
that is 128-row blocks over K whole, which at a prompt of 17 tokens compute 111 rows of
padding per block on a tenth of the multiprocessors. The bucket of a short prompt gets the
schedule of a short prompt (smaller blocks, K cut into slices), in the IR where it can be
read and overridden, not in the executor. One token is the extreme: a register tile of
32 rows computes 31 of padding, and cutting K into slices for the multiprocessors costs a
second launch; a block per output reads each weight row once, coalesced, in one launch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp, StringAttr, UnitAttr, i64
from xdsl.ir import BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import Rewriter

from llmopt.dialects import tile
from llmopt.dialects._symbols import function_symbols
from llmopt.dialects._syntax import int_array
from llmopt.lowering._loop_bands import round_up
from llmopt.lowering._loop_build import distribute_over_block
from llmopt.passes._rewrite import KeepLocation
from llmopt.passes.tile._access import launch_grid
from llmopt.passes.tile.register_tile import Contraction, contraction_schedule, match_contraction
from llmopt.target import WARP

BUCKET_ATTR = "llmopt.bucket"
COOP_ATTR = "llmopt.coop"
"""Marks the cooperative variant of the smallest bucket."""
COOP_ROWS = 2
"""Rows up to which the cooperative variant runs by default. Up to two tokens it is faster
than the register tiles of the first bucket; from four, where each block reads one row of
the input per output, the tiles, which share those reads, are faster
(``bench/results/symbolic-coop-rows-h200.md``)."""
COOP_THREADS = 256
"""The cooperative variant's block: as ``loop-to-tile``'s row schedule, at most 256
threads, fewer for a short reduction."""
DEFAULT_BOUNDS = (32, 128, 256, 512, 1024)
"""Where the schedules change most. Four times apart, a prompt just above a bound (200
tokens) runs with the schedule of a product up to four times its size, hence 256; the
heuristics' own time model then puts the worst bucket at a seventh slower than the exact
length's schedule over TinyLlama's and Qwen2.5-7B's products at lengths 1-2047, as with
every power of two from 16 to 512, with a fifth fewer kernels. 1024: without it a prompt of
513-1024 tokens runs the schedules of the 2048-token maximum, which for Qwen2.5-7B's
query, key, value, output and down projections are not those of 1000 rows, and the symbolic
layer at 1000 tokens was the slowest against its static program
(``bench/results/symbolic-short-lengths-h200.md``). No bound below 32: one and two rows
have the cooperative variants (``coop_rows``), and from 3 to 32 rows the heuristics choose
one schedule for the layers' products but Qwen2.5-7B's gate/up, which takes eight K slices
up to 8 rows (``bounds=8,32,…`` gives it that bucket)."""


def buckets_of(found: Contraction, bounds: tuple[int, ...], arch: str) -> list[int]:
    """The bounds that get a variant of their own: those below the maximum whose schedule
    differs from the next larger bucket's (the last bucket, the maximum, always)."""
    top = found.extents[found.m]
    kept, schedule = [top], contraction_schedule(found, arch)
    for b in sorted((b for b in set(bounds) if b < top), reverse=True):
        if (smaller := contraction_schedule(found, arch, b)) != schedule:
            kept.append(b)
            schedule = smaller
    return sorted(kept)


def narrowed(op: tile.KernelOp, length: BlockArgument, bound: int) -> tile.KernelOp:
    """A copy of ``op`` whose foralls over ``length`` (a body argument) run at most
    ``bound`` points along it, named ``<name>_le<bound>``."""
    copy = op.clone()
    arg = copy.body.block.args[length.index]
    for inner in copy.walk():
        if isinstance(inner, tile.ForallOp):
            dims = [d for d, v in inner.runtime_sizes.items() if v is arg]
            if dims:
                inner.extents = int_array([min(e, bound) if d in dims else e
                                           for d, e in enumerate(inner.shape)])
    copy.sym_name = StringAttr(f"{op.sym_name.data}_le{bound}")
    copy.attributes[BUCKET_ATTR] = IntegerAttr(bound, i64)
    return copy


def cooperative(op: tile.KernelOp, found: Contraction, bound: int,
                grid: SSAValue | None) -> tile.KernelOp:
    """A copy of ``op`` for at most ``bound`` rows with the cooperative schedule (see the
    module docstring), launched on ``grid`` blocks, named ``<name>_coop<bound>``. Without
    ``grid`` the rows are exactly one (a static extent, a static grid)."""
    copy = op.clone()
    index = list(op.body.block.ops).index(found.forall)
    old = list(copy.body.block.ops)[index]
    assert isinstance(old, tile.ForallOp)
    rows = found.m
    order = [d for d in range(len(old.shape)) if d != rows] + [rows]
    extents = [min(old.shape[d], bound) if d == rows else old.shape[d] for d in order]
    length = old.runtime_sizes[rows]
    sizes = {} if grid is None else {len(order) - 1: length}
    forall = tile.ForallOp(extents, "blocks", sizes=sizes)
    for new_iv, d in zip(forall.ivs, order, strict=True):
        old.ivs[d].replace_all_uses_with(new_iv)
        new_iv.name_hint = old.ivs[d].name_hint
    for inner in list(old.body.block.ops):
        inner.detach()
        forall.body.block.add_op(inner)
    copy.body.block.insert_op_before(forall, old)
    copy.body.block.erase_op(old)
    distribute_over_block(forall.body.block, PatternRewriter(forall))
    width = max(red.trip_count for red in found.reduces)
    threads = min(COOP_THREADS, round_up(width, WARP))
    points = math.prod(extents)
    coop = tile.KernelOp(f"{op.sym_name.data}_coop{bound}", [points, 1, 1], [threads, 1, 1],
                         copy.buffers, Rewriter.move_region_contents_to_new_regions(copy.body),
                         grid_size=grid)
    coop.attributes |= op.attributes
    coop.attributes[BUCKET_ATTR] = IntegerAttr(bound, i64)
    coop.attributes[COOP_ATTR] = UnitAttr()
    return coop


def at_least_one(length: SSAValue) -> bool:
    """Whether the runtime ``length`` is never below 1: a symbol of its function (whose
    minimum is at least 1), or an argument of a function every call of which passes such a
    value (``outline-repeated-kernels``' functions)."""
    if not isinstance(length, BlockArgument):
        return False
    fn = length.block.parent_op()
    if not isinstance(fn, func.FuncOp) or length.block is not fn.body.block:
        return False
    if any(sym.arg == length.index and sym.min >= 1
           for sym in function_symbols(fn).values()):
        return True
    module = fn.parent_op()
    calls = [op for op in module.walk() if isinstance(op, func.CallOp)
             and op.callee.root_reference.data == fn.sym_name.data] if module else []
    return bool(calls) and all(at_least_one(call.arguments[length.index]) for call in calls)


@dataclass
class BucketKernel(RewritePattern):
    """Wrap one matched kernel in its buckets' ``scf.if`` chain (see the module docstring)."""

    bounds: tuple[int, ...]
    arch: str
    coop_rows: int = COOP_ROWS

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.KernelOp, rewriter: PatternRewriter) -> None:
        if BUCKET_ATTR in op.attributes:
            return
        found = match_contraction(op)
        if found is None or found.length is None:
            return
        kept = buckets_of(found, self.bounds, self.arch)
        coop = 0 < self.coop_rows < kept[0]
        if len(kept) == 1 and not coop:
            return
        host_length = op.buffers[found.length.index]
        top = kept[-1]
        last = op.clone()
        last.attributes[BUCKET_ATTR] = IntegerAttr(top, i64)
        chain: list[Operation] = [last]
        for bound in reversed(kept[:-1]):
            chain = self._choice(host_length, bound, [narrowed(op, found.length, bound)],
                                 chain)
        one_row = coop and at_least_one(host_length)
        if coop and not (one_row and self.coop_rows == 1):
            per_row = math.prod(found.extents) // found.extents[found.m]
            grid_ops, grid = launch_grid(host_length, 1, per_row)
            grid.name_hint = f"grid_coop{self.coop_rows}"
            variant = cooperative(op, found, self.coop_rows, grid)
            chain = self._choice(host_length, self.coop_rows, [*grid_ops, variant], chain)
        if one_row:  # exactly one row: all static
            chain = self._choice(host_length, 1, [cooperative(op, found, 1, None)], chain)
        rewriter.replace(op, chain, [])

    @staticmethod
    def _choice(length: SSAValue, bound: int, small: list[Operation],
                large: list[Operation]) -> list[Operation]:
        """``%le = length <= bound; scf.if %le { small } else { large }``."""
        limit = arith.ConstantOp(IntegerAttr(bound, IndexType()))
        cond = arith.CmpiOp(length, limit, "ule")
        limit.result.name_hint = f"c{bound}"
        cond.result.name_hint = f"le{bound}"
        choice = scf.IfOp(cond, [], [*small, scf.YieldOp()], [*large, scf.YieldOp()])
        return [limit, cond, choice]


@dataclass(frozen=True)
class LengthBuckets(ModulePass):
    """One kernel variant per length bucket (see the module docstring). Options: ``bounds``
    (increasing bucket bounds, each at least 2), ``coop_rows`` (the cooperative variant's
    bound, below the smallest bucket; 0: none), ``arch``."""

    name = "length-buckets"

    bounds: tuple[int, ...] = field(default=DEFAULT_BOUNDS)
    coop_rows: int = COOP_ROWS
    arch: str = "sm_90"

    def __post_init__(self) -> None:
        if not self.bounds or any(not isinstance(b, int) or b < 2 for b in self.bounds):
            raise ValueError(f"bounds must be integers of at least 2, got {self.bounds}")
        if list(self.bounds) != sorted(set(self.bounds)):
            raise ValueError(f"bounds must increase, got {self.bounds}")
        if not isinstance(self.coop_rows, int) or self.coop_rows < 0:
            raise ValueError(f"coop_rows must be an integer of at least 0, got {self.coop_rows}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(KeepLocation(BucketKernel(self.bounds, self.arch, self.coop_rows)),
                             apply_recursively=False).rewrite_module(op)


__all__ = ["BUCKET_ATTR", "COOP_ATTR", "COOP_ROWS", "DEFAULT_BOUNDS", "LengthBuckets", "buckets_of",
           "cooperative", "narrowed"]
