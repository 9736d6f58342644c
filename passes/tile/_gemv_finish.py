"""How a ``warp-gemv`` block finishes its rows (see :mod:`llmopt.passes.tile.warp_gemv`): the
lane partials of each row (32, or ``32·S`` with ``S`` warps a row) become the row's total,
and the epilogue of the old kernel (bias, activation, residual, the store) runs on it.

* **In the lanes** (``shuffle=true``): in the lanes' own forall, each warp
  combines its partials with ``tile.lane_reduce`` (warp shuffles); the epilogue follows
  there, every lane of the row computing it and lane 0 storing::

      tile.forall (%w, %l) in [R, 32] over block_threads {
        %p = <the lane's sum>
        %total = tile.lane_reduce add %p : f32
        <the epilogue with the row nb·R + w>             // every lane: its loads do not
        scf.if %l < 1 { <the store> }                    // wait for the sum
      }

  No shared memory, no barrier: a warp finishes its row as soon as its own loads arrive,
  and the epilogue's loads (a residual row, a token's index) need nothing the sum gives,
  so the CUDA compiler may issue them with the weights'.
* **Through shared memory** (``shuffle=false``, the default: measured faster on a decode
  step, ``bench/results/decode-ab-nopf-h200.md``): each lane stores its partial in a shared
  ``[R, 32·S]`` tile; after the barrier a second forall gives each row one thread, which
  sums the row's partials in lane order and runs the epilogue. This is the only form for
  ``S > 1``: the slices of a row are different warps.

Where ``R`` does not divide the outputs, the warps past the last output skip the epilogue
(its loads would read past the row's buffers).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith
from xdsl.dialects.builtin import IndexType, IntegerAttr, MemRefType
from xdsl.ir import Block, Operation, SSAValue

from llmopt.dialects import loop, tile
from llmopt.passes.tile._access import UNROLL, Cloner, Linear, at, block_threads, guard_inside
from llmopt.passes.tile._gemv_match import Gemv


def _epilogue(found: Gemv) -> list[Operation]:
    """The old forall's ops after the reductions, the store's forall left out."""
    return [op for op in found.forall.body.block.ops
            if op is not found.once and op not in found.prologue
            and not isinstance(op, tile.CoopReduceOp | tile.AllocOp)]


def _once_at_zero(found: Gemv, cloner: Cloner, block: Block) -> None:
    """Map the store forall's one point to ``0`` in ``cloner`` (constant in ``block``)."""
    zero = arith.ConstantOp(IntegerAttr(0, IndexType()))
    block.add_op(zero)
    cloner.values[found.once.ivs[0]] = zero.result


def finish_in_lanes(found: Gemv, lanes: tile.ForallOp, partials: Sequence[SSAValue],
                    values: dict[SSAValue, SSAValue], row: Linear, outputs: int,
                    ragged: bool) -> None:
    """Append to ``lanes`` (the ``[R, 32]`` forall that computed ``partials``, one per
    reduction of ``found``) the warp totals and the epilogue for ``row``."""
    block = lanes.body.block
    lane = lanes.ivs[-1]
    cloner = Cloner({found.forall.ivs[found.row]: row}, dict(values))
    for red, partial in zip(found.reduces, partials, strict=True):
        total = tile.LaneReduceOp("add", partial)
        block.add_op(total)
        cloner.values[red.result] = total.result
    inner = block
    if ragged:
        inner = guard_inside(inner, [(cloner.value(found.forall.ivs[found.row], inner),
                                      outputs)])
    for op in _epilogue(found):
        cloner.clone_into(op, inner)
    store = guard_inside(inner, [(lane, 1)])
    _once_at_zero(found, cloner, store)
    for op in found.once.body.block.ops:
        cloner.clone_into(op, store)


def stash_partials(lanes: tile.ForallOp, body: Block, partials: Sequence[SSAValue],
                   rows: int) -> list[SSAValue]:
    """Store each lane's ``partials`` into a shared ``[rows, 32·S]`` tile (allocated in
    ``body``, the forall over blocks) from ``lanes``; returns the tiles."""
    w, lane = lanes.ivs
    tiles = []
    for partial in partials:
        part = tile.AllocOp("shared", MemRefType(partial.type, [rows, lanes.shape[-1]]))
        part.result.name_hint = "part"
        body.add_op(part)
        lanes.body.block.add_op(loop.StoreOp(partial, part.result,
                                             *at([Linear.of((1, w)), Linear.of((1, lane))])))
        tiles.append(part.result)
    return tiles


def finish_in_shared(found: Gemv, body: Block, tiles: Sequence[SSAValue],
                     values: dict[SSAValue, SSAValue], rows: int, nb: SSAValue,
                     outputs: int, ragged: bool) -> None:
    """Append to ``body`` (the forall over blocks) a forall of a thread a row that sums the
    row's ``32·S`` partials from ``tiles`` (one per reduction of ``found``, in lane order)
    and runs the epilogue."""
    epi, (w_out,) = block_threads([rows], ["w"])
    body.add_op(epi)
    row_iv = found.forall.ivs[found.row]
    cloner = Cloner({row_iv: Linear.of((rows, nb), (1, w_out))}, dict(values))
    inner = epi.body.block
    if ragged:  # the last block's warps past the outputs store nothing
        inner = guard_inside(inner, [(cloner.value(row_iv, inner), outputs)])
    for red, part in zip(found.reduces, tiles, strict=True):
        typ = red.result.type
        assert isinstance(part.type, MemRefType)
        total = loop.ReduceOp("add", part.type.get_shape()[-1], typ)
        total.attributes |= UNROLL
        lane_iv = total.body.block.args[0]
        lane_iv.name_hint = "lane"
        load = loop.LoadOp(part, *at([Linear.of((1, w_out)), Linear.of((1, lane_iv))]))
        total.body.block.add_ops([load, loop.YieldOp(load.result)])
        inner.add_op(total)
        cloner.values[red.result] = total.result
    _once_at_zero(found, cloner, inner)
    for op in [*_epilogue(found), *found.once.body.block.ops]:
        cloner.clone_into(op, inner)
