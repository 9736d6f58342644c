"""The L2 prefetches of a ``warp-gemv`` block: the first bytes of each of its weight rows.

A block of ``R`` outputs reads ``R`` rows of each weight (the loads of the reductions that
use the row dimension), each lane a 16-byte chunk at a time. Before its lanes start, the
block asks for the first bytes of every one of those rows at once::

    tile.forall (%row) in [R] over block_threads {
      tile.prefetch %W[nb·R + %row, 0] count C : memref<N×K×T>    // per weight
    }

``C`` splits the block's budget (option ``prefetch_bytes`` of ``warp-gemv``, in bytes) evenly
over its rows and weights, at most a whole row, in multiples of 16 bytes (a bulk
prefetch's unit). Where ``R`` does not divide the outputs the row is clamped into the
weight, like the lanes' copies.

Why: one instruction puts a row's bytes in flight, instead of the four chunks a lane has
outstanding; and under programmatic launch (``programmatic-launch``) the prefetch runs
before the block's wait on the kernel in front, so a projection's weights stream into L2
while the RMSNorm, attention or merge before it — short kernels that leave memory idle —
still run. The prefetch changes no value, so it may precede the wait.
"""

from __future__ import annotations

from xdsl.dialects.builtin import MemRefType
from xdsl.ir import SSAValue

from llmopt.dialects import loop, tile
from llmopt.dialects.kernel import PREFETCH_GRANULE
from llmopt.passes.tile._access import Cloner, Linear, block_threads
from llmopt.passes.tile._gemv_match import Gemv, element_bytes

PREFETCH_BYTES = 0
"""The bytes of weight rows a block asks for ahead by default (option ``prefetch_bytes``):
none. A decode step whose blocks asked for 32 KiB (the whole rows of a block of 8 outputs of
a 2048-wide 16-bit weight, the first 4 KiB of each row of wider ones) ran slower on the
H200 (``bench/results/decode-ab-prefetch-h200.md``): the prefetches compete with the weight
stream of the product in front."""


def weight_loads(found: Gemv) -> list[tuple[tile.CoopReduceOp, loop.LoadOp]]:
    """The loads of ``found``'s reductions that read a row of the output's own (they use
    the row dimension), each with its reduction: the weights."""
    row_iv = found.forall.ivs[found.row]
    return [(red, op) for red in found.reduces for op in red.body.block.ops
            if isinstance(op, loop.LoadOp) and any(v is row_iv for v in op.indices)]


def row_prefetches(found: Gemv, values: dict[SSAValue, SSAValue], rows: int, nb: SSAValue,
                   budget: int) -> tile.ForallOp | None:
    """The forall of the block's prefetches (see the module docstring), or ``None`` when
    the budget leaves no 16 bytes to a row."""
    loads = weight_loads(found)
    if not loads or budget <= 0:
        return None
    per_row = budget // (rows * len(loads))
    ragged = found.forall.shape[found.row] % rows != 0
    forall, (r,) = block_threads([rows], ["row"])
    row_iv = found.forall.ivs[found.row]
    for red, load in loads:
        width = element_bytes(load.result.type)
        count = min(found.k, per_row // width)
        count -= count % (PREFETCH_GRANULE // width)
        buffer = values.get(load.buffer, load.buffer)
        if count <= 0 or not isinstance(buffer.type, MemRefType):
            continue
        cloner = Cloner({red.iv: Linear.of(const=0), row_iv: Linear.of((rows, nb), (1, r))},
                        dict(values))
        amap, operands = cloner.access(load.map.data, load.indices)
        forall.body.block.add_op(tile.PrefetchOp(buffer, amap, operands, count, ragged))
    return forall if forall.body.block.first_op is not None else None
