"""Loop nests as ``loop-to-tile`` takes them apart: perfect bands of free loops, folded
into foralls, and the *units* of a kernel (a band with what it needs) grouped into phases
(see :mod:`llmopt.lowering.loop_to_tile`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from xdsl.ir import Block, Operation, SSAValue
from xdsl.pattern_rewriter import (
    PatternRewriter,
)
from xdsl.rewriter import InsertPoint
from xdsl.traits import IsTerminator, is_side_effect_free

from llmopt.dialects import loop, tile
from llmopt.passes._rewrite import fail

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
