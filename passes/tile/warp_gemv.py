"""``warp-gemv``: a product of one row runs a warp per output and reads 16 bytes at a time.

**Matches** the schedule ``loop-to-tile`` gives a matrix-vector product (a decode step's
projections, one token's logits): a ``tile.kernel`` whose body is one static
``tile.forall … over blocks`` (one output a block) holding

* one or more ``tile.coop_reduce add %k = 0 to K`` (static ``K``) whose bodies are loads,
  region-less scalar ops and the yield, where every load's innermost index is exactly ``%k``
  (its other indices do not use it) and at least one load depends on the forall's *row*
  dimension — the innermost dimension of extent above one that the loads use (the weight's
  row);
* block-uniform scalar ops (loads, ``arith``/``math``: the epilogue — bias, activation,
  residual) and a last ``tile.forall (%once) in [1] over block_threads`` storing the output;
* optionally, first, a *prologue*: ``tile.coop_reduce`` ops and scalar ops that use no
  forall variable (a row's statistics, which ``recompute-into-products`` puts beside a
  product), whose results the reductions may use.

Every buffer a reduction loads keeps rows of a multiple of ``V`` elements (``V`` = 16 bytes
of the narrowest element loaded: 4 ``f32``, 8 ``bf16``/``f16``), and ``K`` is a multiple of
``V``.

**Produces** ``R`` outputs a block, ``S`` warps each (``R`` = ``rows``, by default the
largest power of two up to 8 that leaves at least one block a multiprocessor, counting every
block of the forall and of its siblings: the matched kernels of the same block that share a
buffer with it, which get the same ``R``; ``S`` = ``slices``, see *Slices*), lane
``l`` of the ``32·S`` of row ``w`` walking the chunks ``c`` of ``V`` consecutive ``k``
(shown for ``S = 1``; with more, read ``32·S`` for each ``32``)::

    tile.kernel grid [ceildiv(N, R)·…] block [32·R] {
      tile.forall (…, %nb, …) in [… ceildiv(N, R) …] over blocks {
        tile.forall (%row) in [R] over block_threads {    // prefetch_bytes, sm_90+: the
          tile.prefetch %W[nb·R + row, 0] count C         // first bytes of each weight row
        }                                                  // into L2 (see _gemv_prefetch)
        <the prologue, unchanged: every thread of the block takes part, once a block>
        tile.forall (%w, %l) in [R, 32] over block_threads {
          %p = loop.reduce add %c = 0 to ceildiv(K, 32·V) {
            tile.copy %W[nb·R + w, V·(32·c + l)] to %fw[w, l, 0] count 16 bytes   // per load
            loop.reduce add %v = 0 to V { <the body, %k = V·(32·c + l) + v, loads from %fw> }
          }
          loop.store %p, %part[%w, %l]                     // one shared partial a lane
        }
        tile.forall (%w) in [R] over block_threads {      // after a barrier
          %total = loop.reduce add %l = 0 to 32 { loop.load %part[%w, %l] }
          <the epilogue with the row nb·R + w and %total for the reduction>
        }
      }
    }

(see :mod:`~llmopt.passes.tile._gemv_finish`; ``shuffle=true`` combines a row's partials by
warp shuffles instead, ``tile.lane_reduce``, and the warp finishes its row itself).

Where ``32·V`` does not divide ``K`` the last chunk's copies are clamped into the row and
its lanes past ``K`` add zero; where ``R`` does not divide ``N`` the last block's warps past
``N`` read the last row (clamped) and store nothing.

**Slices.** A row of ``K`` elements is ``K / V`` chunks, ``K / (32·V)`` a lane: 8 for a
2048-wide row of halves, 22 for a 5632-wide one. The chunk loop keeps ``chunks`` (4) in
flight, so a lane waits for memory ``K / (32·V·chunks)`` times in a row. Where the product
has few rows (a decode step's output and down projections: 2048) those waits are the
kernel's time: its few warps cannot keep enough bytes in flight to reach the bandwidth.
``S`` warps a row split the row's chunks ``S`` ways (lane ``L < 32·S`` takes chunks
``L, L + 32·S, …``); the block's shared ``[R, 32·S]`` partials then hold the reduction
across the slices, which the row's thread sums after the barrier. By default ``S`` is the
fewest warps (a power of two) that leave a lane at most ``chunks`` chunks, as long as the
warps of the product and of the products reading its input with it (a layer's query, key
and value projections, which get the same ``S``), ``S`` times their rows, stay within what
the GPU's multiprocessors hold at once at 64 registers a lane (32 warps each: a second wave
of warps costs more than a lane's longer loop saves), the ``32·S`` lanes still divide the
row's chunks where 32 did, and ``R·S`` is at most 8 (256 threads): large products keep a
warp a row. ``shuffle=true`` keeps ``S = 1``.

**Why** the cooperative schedule gives each output a whole block: with ``K = 2048`` and 256
threads a thread reads 8 scalars, then the block pays shuffles, two barriers and a
shared-memory step per output, and each block's loads are too few to keep the memory system
busy; 16-bit weights are read two bytes a load. A decode step is a chain of such products
whose time is the weights' bytes over the bandwidth reached, so the loads must be 16 bytes
wide and many in flight: a warp per row reads it 512 bytes an instruction, every lane's
chunks are independent, and the only cross-lane step is one shared-memory sum per output.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, MemRefType, ModuleOp, i64
from xdsl.ir import Block, BlockArgument, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from llmopt.dialects import loop, tile
from llmopt.passes._rewrite import KeepLocation
from llmopt.passes.tile._access import (
    Cloner,
    Linear,
    block_threads,
    close_guards,
)
from llmopt.passes.tile._gemv_finish import finish_in_lanes, finish_in_shared, stash_partials
from llmopt.passes.tile._gemv_lanes import CHUNKS_IN_FLIGHT, LaneSum
from llmopt.passes.tile._gemv_match import GEMV_ATTR, Gemv, match_gemv
from llmopt.passes.tile._gemv_prefetch import PREFETCH_BYTES, row_prefetches
from llmopt.passes.tile._gemv_stage import stage_operands
from llmopt.target import BULK_PREFETCH_MIN_SM, WARP, arch_number
from llmopt.target import for_arch as limits

MAX_ROWS = 8
"""Warps a block at most (256 threads): ``R·S``."""
LANE_REGISTERS = 64
"""The registers a lane is assumed to take when counting the warps the GPU holds at once
(a multiprocessor's registers over this: 32 warps of 32 lanes): slices that need more
warps than that would run in two waves."""


def choose_rows(products: Sequence[tuple[int, int]], sms: int) -> int:
    """The outputs a block for ``products``, each given as ``(outputs, others)``: the rows
    of its row dimension and how many blocks each block of rows is repeated for (the
    forall's other positions: a product stored as heads × head dim has a block of each
    head's rows for every head). The largest power of two up to :data:`MAX_ROWS` that
    leaves at least one block a multiprocessor counting every block of every product (a
    small product spreads over the whole GPU)."""
    rows = MAX_ROWS
    while rows > 1 and sum(o * -(-n // rows) for n, o in products) < sms:
        rows //= 2
    return rows


def sibling_rows(module: ModuleOp, sms: int) -> dict[tile.KernelOp, int]:
    """The rows a block of each matched kernel of ``module`` with a warp a row (see
    :func:`sibling_shapes`)."""
    return {k: rows for k, (rows, _) in sibling_shapes(module, sms).items()}


def sibling_shapes(module: ModuleOp, sms: int, warps: int = 0,
                   chunks: int = CHUNKS_IN_FLIGHT) -> dict[tile.KernelOp, tuple[int, int]]:
    """The rows (for a warp a row: :func:`choose_rows`) and slices (warps a row,
    :func:`choose_slices`; 1 where ``warps``, the warps the GPU holds at once, is 0) of
    each matched kernel of ``module``, chosen for it and its *siblings* together: the
    matched kernels passed one buffer in one block (directly or through another sibling,
    where they run or where the functions holding them are called), such as a layer's
    query, key and value projections of one normalised input. They get one block shape, so
    ``fuse-launches`` can make them one launch, and enough blocks between them to fill the
    GPU."""
    found = {k: g for k in module.walk() if isinstance(k, tile.KernelOp)
             and (g := match_gemv(k)) is not None}
    calls: dict[str, list[func.CallOp]] = {}
    for op in module.walk():
        if isinstance(op, func.CallOp):
            calls.setdefault(op.callee.root_reference.data, []).append(op)
    rows = {k: choose_rows([_extents(found[o]) for o in group], sms)
            for group in _groups(found, calls, reads_only=False) for k in group}
    slices = {k: 1 for k in found}
    if warps:  # the kernels whose reductions read one buffer: one launch once fused
        for group in _groups(found, calls, reads_only=True):
            width = max(-(-found[o].k // found[o].vector) for o in group)
            chosen = choose_slices([_extents(found[o]) for o in group], width, chunks, warps)
            slices |= dict.fromkeys(group, chosen)
    return {k: (rows[k], slices[k]) for k in found}


def _extents(found: Gemv) -> tuple[int, int]:
    """``(outputs, others)`` of a matched kernel (see :func:`choose_rows`)."""
    outputs = found.forall.shape[found.row]
    return outputs, math.prod(found.forall.shape) // outputs


def _groups(found: dict[tile.KernelOp, Gemv], calls: dict[str, list[func.CallOp]],
            reads_only: bool) -> list[list[tile.KernelOp]]:
    """The kernels of ``found`` joined by a buffer passed to two of them in one block
    (directly or through another kernel of the group). With ``reads_only`` only the
    buffers their reductions load count (a layer's query, key and value projections of one
    normalised row, whose warps add up in one launch); kernels that only pass a buffer
    along (a projection writing the residual stream the next one adds) then stay apart."""
    parent = {k: k for k in found}

    def root(k: tile.KernelOp) -> tile.KernelOp:
        while parent[k] is not k:
            k = parent[k]
        return k

    readers: dict[tuple[Block | None, SSAValue], tile.KernelOp] = {}
    for k, g in found.items():
        read = ({op.buffer for red in g.reduces for op in red.body.walk()
                 if isinstance(op, loop.LoadOp)} if reads_only else None)
        for place in _buffers_where_run(k, calls, read):
            other = readers.setdefault(place, k)
            if other is not k:
                parent[root(k)] = root(other)
    groups: dict[tile.KernelOp, list[tile.KernelOp]] = {}
    for k in found:
        groups.setdefault(root(k), []).append(k)
    return list(groups.values())


def choose_slices(products: Sequence[tuple[int, int]], row_chunks: int, chunks: int,
                  warps: int) -> int:
    """The warps a row for ``products`` (as in :func:`choose_rows`) whose rows are
    ``row_chunks`` chunks of 16 bytes: the fewest, a power of two up to :data:`MAX_ROWS`,
    that leave each lane at most ``chunks`` chunks, while every product's rows times the
    slices stay within ``warps`` (the warps the GPU holds at once) and the lanes still
    divide a row they divided (a ragged last chunk clamps every copy and masks every
    element)."""
    rows = sum(o * n for n, o in products)
    slices = 1
    while (slices < MAX_ROWS and -(-row_chunks // (WARP * slices)) > chunks
           and rows * slices * 2 <= warps
           and (row_chunks % (WARP * slices) or not row_chunks % (WARP * slices * 2))):
        slices *= 2
    return slices


def _buffers_where_run(kernel: tile.KernelOp, calls: dict[str, list[func.CallOp]],
                       only: set[SSAValue] | None = None
                       ) -> list[tuple[Block | None, SSAValue]]:
    """The buffers ``kernel`` takes (with ``only``: those whose body arguments are in it),
    each with the block it is passed in: its own operands, and where it is the body of a
    function (``outline-repeated-kernels`` gives each kernel that identical layers repeat a
    function of its own), what every call passes for them."""
    places: list[tuple[Block | None, SSAValue]] = []
    owner = kernel.parent_op()
    for buffer, arg in zip(kernel.buffers, kernel.body.block.args, strict=True):
        if not isinstance(buffer.type, MemRefType) or (only is not None and arg not in only):
            continue
        places.append((kernel.parent_block(), buffer))
        if (isinstance(owner, func.FuncOp) and isinstance(buffer, BlockArgument)
                and buffer.block is owner.body.block):
            places += [(call.parent_block(), call.arguments[buffer.index])
                       for call in calls.get(owner.sym_name.data, [])]
    return places


@dataclass
class ScheduleGemv(RewritePattern):
    """Rewrite one matched kernel (see the module docstring)."""

    rows: int
    chosen: dict[tile.KernelOp, tuple[int, int]]
    """Each kernel's chosen rows (for a warp a row) and slices (:func:`sibling_shapes`),
    used where the options leave them 0."""
    slices: int = 0
    chunks: int = CHUNKS_IN_FLIGHT
    prefetch: int = 0
    """Bytes of weight rows a block prefetches into L2 first (0: none)."""
    stage: bool = True
    """Whether a computed operand is staged in shared memory once a block."""
    shuffle: bool = False
    """Whether a row's lane partials are combined by warp shuffles (else shared memory)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.KernelOp, rewriter: PatternRewriter) -> None:
        found = match_gemv(op)
        if found is None:
            return
        outputs = found.forall.shape[found.row]
        rows, slices = self.chosen[op]
        slices = _power_of_two(self.slices or slices)
        if self.rows:
            rows = self.rows
            if not self.slices:  # a chosen S keeps the block within MAX_ROWS warps
                slices = min(slices, _power_of_two(MAX_ROWS // rows))
        else:
            rows = min(rows, MAX_ROWS // slices)
        rows = _power_of_two(min(rows, outputs))  # whole warps, even blocks
        new = _rebuilt(op, found, rows, self.chunks, self.prefetch, self.stage, self.shuffle,
                       slices)
        rewriter.replace(op, new)


def _power_of_two(n: int) -> int:
    """The largest power of two up to ``n`` (at least 1)."""
    return 1 << (max(n, 1).bit_length() - 1)


def _rebuilt(kernel: tile.KernelOp, found: Gemv, rows: int,
             chunks: int = CHUNKS_IN_FLIGHT, prefetch: int = 0, stage: bool = True,
             shuffle: bool = False, slices: int = 1) -> tile.KernelOp:
    """``kernel`` with ``found``'s forall scheduled ``rows`` outputs a block, ``slices``
    warps each."""
    width = WARP * slices
    old = found.forall
    outputs = old.shape[found.row]
    extents = list(old.shape)
    extents[found.row] = -(-outputs // rows)
    grid = [min(kernel.grid_shape[0], math.prod(extents)), 1, 1]
    new = tile.KernelOp(kernel.sym_name.data, grid, [rows * width, 1, 1], kernel.buffers)
    new.attributes |= kernel.attributes
    new.attributes[GEMV_ATTR] = DictionaryAttr({"rows": IntegerAttr(rows, i64),
                                                "slices": IntegerAttr(slices, i64),
                                                "vector": IntegerAttr(found.vector, i64)})
    args = dict(zip(kernel.body.block.args, new.body.block.args, strict=True))
    for arg, new_arg in args.items():
        new_arg.name_hint = arg.name_hint
    top = Cloner({}, dict(args))
    for op in kernel.body.block.ops:
        if op is not old:
            top.clone_into(op, new.body.block)
    forall = tile.ForallOp(extents, "blocks")
    for iv, new_iv in zip(old.ivs, forall.ivs, strict=True):
        new_iv.name_hint = iv.name_hint
    nb = forall.ivs[found.row]
    nb.name_hint = "nb"
    new.body.block.add_op(forall)
    body = forall.body.block
    row_iv = old.ivs[found.row]
    values = top.values | {iv: new_iv for iv, new_iv in zip(old.ivs, forall.ivs, strict=True)
                           if iv is not row_iv}  # the row is substituted: nb·R + w
    ahead = row_prefetches(found, values, rows, nb, prefetch)
    if ahead is not None:  # before anything that reads: it may precede the grid wait
        body.add_op(ahead)
    for op in found.prologue:  # a row's statistics: once a block, all its threads
        body.add_op(op.clone(value_mapper=values))
    ragged = outputs % rows != 0
    clamp = ragged or found.k % (width * found.vector) != 0
    lanes, (w, lane) = block_threads([rows, width], ["w", "l"])
    partials = []
    staged = stage_operands(found, values, body) if stage else {}
    for red in found.reduces:
        lane_sum = LaneSum(found, red, values, rows, w, lane, chunks, staged.get(red), width)
        ops, partial = lane_sum.build(body, Linear.of((rows, nb), (1, w)), clamp)
        lanes.body.block.add_ops(ops)
        partials.append(partial)
    if shuffle and slices == 1:
        finish_in_lanes(found, lanes, partials, values, Linear.of((rows, nb), (1, w)),
                        outputs, ragged)
        body.add_op(lanes)
    else:
        tiles = stash_partials(lanes, body, partials, rows)
        body.add_op(lanes)
        finish_in_shared(found, body, tiles, values, rows, nb, outputs, ragged)
    close_guards(body)
    return new


@dataclass(frozen=True)
class WarpGemv(ModulePass):
    """Schedule matrix-vector products a warp per output with 16-byte loads (see the module
    docstring). Options: ``rows`` (outputs a block, a power of two up to 8; 0 = chosen from
    the outputs and the GPU's multiprocessors), ``chunks`` (the 16-byte chunks of each
    operand a lane has in flight: the unroll factor of its chunk loop), ``prefetch_bytes``
    (bytes of its weight rows a block asks the L2 cache for before it starts, where ``arch``
    has bulk prefetches (sm_90+), see :mod:`~llmopt.passes.tile._gemv_prefetch`; 0, the
    default: none),
    ``stage`` (default ``true``: an operand computed from ``k`` alone, such as a normalised
    row, is computed once a block into shared memory, see
    :mod:`~llmopt.passes.tile._gemv_stage`), ``shuffle`` (default ``false``: the lanes'
    partials go through shared memory to a thread a row; ``true``: each warp combines them
    by shuffles and finishes its row itself, see :mod:`~llmopt.passes.tile._gemv_finish`),
    ``slices`` (warps a row, a power of two up to 8; 0 = chosen, see *Slices*; a row of
    several warps finishes through shared memory whatever ``shuffle`` says), ``arch``."""

    name = "warp-gemv"

    rows: int = 0
    chunks: int = CHUNKS_IN_FLIGHT
    prefetch_bytes: int = PREFETCH_BYTES
    stage: bool = True
    shuffle: bool = False
    slices: int = 0
    arch: str = "sm_90"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = limits(self.arch)
        resident = min(target.threads_per_sm, target.regs_per_sm // LANE_REGISTERS) // WARP
        warps = 0 if self.shuffle else target.sms * resident
        chosen = sibling_shapes(op, target.sms, warps, self.chunks)
        prefetch = self.prefetch_bytes if arch_number(self.arch) >= BULK_PREFETCH_MIN_SM else 0
        pattern = ScheduleGemv(self.rows, chosen, self.slices, self.chunks, prefetch,
                               self.stage, self.shuffle)
        PatternRewriteWalker(KeepLocation(pattern),
                             apply_recursively=False).rewrite_module(op)


__all__ = ["GEMV_ATTR", "WarpGemv", "choose_rows", "choose_slices", "match_gemv",
           "sibling_rows", "sibling_shapes"]
