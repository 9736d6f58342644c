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

**Produces** ``R`` outputs a block, a warp each (``R`` = ``rows``, by default the largest
power of two up to 8 that leaves at least one block a multiprocessor, counting every block
of the forall and of its siblings: the matched kernels of the same block that share a
buffer with it, which get the same ``R``), lane ``l`` of warp
``w`` walking the chunks ``c`` of ``V`` consecutive ``k``::

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

from llmopt.dialects import tile
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
"""Outputs a block at most (8 warps, 256 threads)."""


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
    """The rows of each matched kernel of ``module``, chosen for it and its *siblings*
    together: the matched kernels passed one buffer in one block (directly or through
    another sibling, where they run or where the functions holding them are called), such
    as a layer's query, key and value projections of one normalised input. They get one
    block shape, so ``fuse-launches`` can make them one launch, and enough blocks between
    them to fill the GPU."""
    found = {k: g for k in module.walk() if isinstance(k, tile.KernelOp)
             and (g := match_gemv(k)) is not None}
    parent = {k: k for k in found}

    def root(k: tile.KernelOp) -> tile.KernelOp:
        while parent[k] is not k:
            k = parent[k]
        return k

    calls: dict[str, list[func.CallOp]] = {}
    for op in module.walk():
        if isinstance(op, func.CallOp):
            calls.setdefault(op.callee.root_reference.data, []).append(op)
    readers: dict[tuple[Block | None, SSAValue], tile.KernelOp] = {}
    for k in found:
        for place in _buffers_where_run(k, calls):
            other = readers.setdefault(place, k)
            if other is not k:
                parent[root(k)] = root(other)
    groups: dict[tile.KernelOp, list[tuple[int, int]]] = {}
    for k, g in found.items():
        outputs = g.forall.shape[g.row]
        groups.setdefault(root(k), []).append((outputs, math.prod(g.forall.shape) // outputs))
    return {k: choose_rows(groups[root(k)], sms) for k in found}


def _buffers_where_run(kernel: tile.KernelOp, calls: dict[str, list[func.CallOp]]
                       ) -> list[tuple[Block | None, SSAValue]]:
    """The buffers ``kernel`` takes, each with the block it is passed in: its own operands,
    and where it is the body of a function (``outline-repeated-kernels`` gives each kernel
    that identical layers repeat a function of its own), what every call passes for them."""
    places: list[tuple[Block | None, SSAValue]] = []
    owner = kernel.parent_op()
    for buffer in kernel.buffers:
        if not isinstance(buffer.type, MemRefType):
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
    chosen: dict[tile.KernelOp, int]
    """Each kernel's rows when ``rows`` is 0 (:func:`sibling_rows`)."""
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
        rows = min(self.rows or self.chosen[op], outputs)
        rows = 1 << (rows.bit_length() - 1)  # a power of two: whole warps, even blocks
        new = _rebuilt(op, found, rows, self.chunks, self.prefetch, self.stage, self.shuffle)
        rewriter.replace(op, new)


def _rebuilt(kernel: tile.KernelOp, found: Gemv, rows: int,
             chunks: int = CHUNKS_IN_FLIGHT, prefetch: int = 0, stage: bool = True,
             shuffle: bool = False) -> tile.KernelOp:
    """``kernel`` with ``found``'s forall scheduled ``rows`` outputs a block."""
    old = found.forall
    outputs = old.shape[found.row]
    extents = list(old.shape)
    extents[found.row] = -(-outputs // rows)
    grid = [min(kernel.grid_shape[0], math.prod(extents)), 1, 1]
    new = tile.KernelOp(kernel.sym_name.data, grid, [rows * WARP, 1, 1], kernel.buffers)
    new.attributes |= kernel.attributes
    new.attributes[GEMV_ATTR] = DictionaryAttr({"rows": IntegerAttr(rows, i64),
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
    clamp = ragged or found.k % (WARP * found.vector) != 0
    lanes, (w, lane) = block_threads([rows, WARP], ["w", "l"])
    partials = []
    staged = stage_operands(found, values, body) if stage else {}
    for red in found.reduces:
        lane_sum = LaneSum(found, red, values, rows, w, lane, chunks, staged.get(red))
        ops, partial = lane_sum.build(body, Linear.of((rows, nb), (1, w)), clamp)
        lanes.body.block.add_ops(ops)
        partials.append(partial)
    if shuffle:
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
    ``arch``."""

    name = "warp-gemv"

    rows: int = 0
    chunks: int = CHUNKS_IN_FLIGHT
    prefetch_bytes: int = PREFETCH_BYTES
    stage: bool = True
    shuffle: bool = False
    arch: str = "sm_90"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        chosen = {} if self.rows else sibling_rows(op, limits(self.arch).sms)
        prefetch = self.prefetch_bytes if arch_number(self.arch) >= BULK_PREFETCH_MIN_SM else 0
        pattern = ScheduleGemv(self.rows, chosen, self.chunks, prefetch, self.stage,
                               self.shuffle)
        PatternRewriteWalker(KeepLocation(pattern),
                             apply_recursively=False).rewrite_module(op)


__all__ = ["GEMV_ATTR", "WarpGemv", "choose_rows", "match_gemv", "sibling_rows"]
