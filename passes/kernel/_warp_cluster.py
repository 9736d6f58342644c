"""The grid of a ``warp-specialize``d kernel: persistent blocks that take several tiles each
(:func:`persist`), and clusters (``cluster=n``) in which blocks that compute neighbouring
tiles share the box they both read, each copying ``1 / n`` of it to all of them
(:func:`plan`; see :mod:`llmopt.passes.kernel.warp_specialize`).

A block's tiles are ``p = block_id, block_id + grid, …`` of a grid-stride loop (or ``p =
block_id`` without one). With ``n`` dividing the grid and the number of tiles, blocks ``b``
and ``b + 1 … b + n - 1`` of a cluster (``b`` a multiple of ``n``) take tiles ``p … p + n -
1`` with ``p`` a multiple of ``n`` at every step, and run the same number of steps. A box is
*shared* when its corner is the same for the ``n`` tiles of every such group, as the weight
tile of a product is when its row-band index is ``p mod m`` for an ``m`` that ``n`` divides:
that is checked by evaluating the corner for every tile."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import arith, scf
from xdsl.ir import Block, Operation, Region, SSAValue

from llmopt.dialects import kernel, mbarrier
from llmopt.dialects._syntax import constant_index, int_array
from llmopt.dialects.wgmma import swizzle
from llmopt.lowering._cuda_shared import SWIZZLE_ALIGN, TMA_ALIGN
from llmopt.passes.kernel._box_copies import BoxCopy, evaluate
from llmopt.passes.kernel._warp_roles import KLoop
from llmopt.passes.kernel._warp_steps import EMPTY, Builder


@dataclass(frozen=True)
class Cluster:
    """How a specialised kernel runs in clusters: ``size`` blocks, the boxes at ``shared``
    (indices into the K loop's boxes) multicast to them."""

    size: int
    shared: tuple[int, ...]


def _tile_value(loop: KLoop, grids: list[int]) -> tuple[SSAValue, int] | None:
    """The value that numbers the block's tile and how many tiles there are: the
    grid-stride loop's variable and its constant bound (the loop from ``block_id x`` by
    ``grid_dim x``), else ``block_id x`` and the launches' one grid (``grids``); ``None``
    when neither is so."""
    parent = loop.k_loop.parent_op()
    if isinstance(parent, scf.ForOp):
        tiles = constant_index(parent.ub)
        lb, step = parent.lb.owner, parent.step.owner
        if (tiles is None or not isinstance(lb, kernel.BlockIdOp) or lb.dim.data != "x"
                or not (isinstance(step, kernel.GridDimOp) and step.dim.data == "x")):
            return None
        return parent.body.block.args[0], tiles
    ids = [op for op in loop.func.walk() if isinstance(op, kernel.BlockIdOp)
           and op.dim.data == "x"]
    if len(ids) != 1 or len(set(grids)) != 1:
        return None
    return ids[0].result, grids[0]


def _launches(func: kernel.FuncOp) -> list[kernel.LaunchOp] | None:
    """The launches of ``func``, or ``None`` unless each has a static one-dimensional
    grid."""
    module = func.parent_op()
    if module is None:
        return None
    launches = [op for op in module.walk() if isinstance(op, kernel.LaunchOp)
                and op.kernel.root_reference.data == func.sym_name.data]
    if not launches or any(op.grid_size is not None or op.grid_shape[1:] != (1, 1)
                           for op in launches):
        return None
    return launches


def persist(loop: KLoop, blocks: int) -> None:
    """Launch ``loop``'s kernel with at most ``blocks`` blocks (the multiprocessors, for a
    block that runs alone on one) when its grid-stride loop has more tiles than that and
    every launch gives each tile a block: each block then runs several tiles, and its
    producer fills the next tile's slots while the consumers finish the last one."""
    launches = _launches(loop.func)
    if launches is None or not isinstance(loop.k_loop.parent_op(), scf.ForOp):
        return
    found = _tile_value(loop, [op.grid_shape[0] for op in launches])
    if found is None or found[1] <= blocks or any(op.grid_shape[0] != found[1]
                                                  for op in launches):
        return
    for op in launches:
        op.properties["grid"] = int_array([blocks, 1, 1])


def _shared(box: BoxCopy, tile: SSAValue, tiles: int, size: int,
            fetch: SSAValue) -> bool:
    """Whether ``box``'s corner is the same for tiles ``p … p + size - 1`` of every group
    (evaluated at chunk 0)."""
    for first in range(0, tiles, size):
        corners = set()
        for p in range(first, first + size):
            env = {tile: p, fetch: 0}
            corner = []
            for c, terms in box.corner:
                values = [v for v in (evaluate(leaf, env) for leaf in terms) if v is not None]
                if len(values) != len(terms):
                    return False
                corner.append(c + sum(k * v for k, v in zip(terms.values(), values,
                                                             strict=True)))
            corners.add(tuple(corner))
        if len(corners) != 1:
            return False
    return True


def _divides(box: BoxCopy, size: int) -> bool:
    """Whether ``box``'s tile splits into ``size`` parts of whole rows, each starting
    where a tile may (a whole period of a swizzled buffer's swizzle)."""
    tile = box.tile
    if tile[0] % size:
        return False
    align = SWIZZLE_ALIGN if swizzle(box.copy.dst) is not None else TMA_ALIGN
    return box.bytes // size % align == 0


def plan(loop: KLoop, boxes: list[BoxCopy], size: int) -> Cluster | None:
    """How ``loop``'s kernel runs in clusters of ``size``, or ``None`` when it cannot: the
    tiles and every launch's grid a multiple of ``size`` (see the module docstring) and a
    shared box that splits into ``size`` parts (every such box is multicast)."""
    launches = _launches(loop.func)
    if launches is None:
        return None
    grids = [op.grid_shape[0] for op in launches]
    found = _tile_value(loop, grids)
    if found is None:
        return None
    tile, tiles = found
    if tiles % size or any(g % size for g in grids):
        return None
    fetch = loop.k_loop.body.block.args[3]
    shared = [k for k, box in enumerate(boxes)
              if _divides(box, size) and _shared(box, tile, tiles, size, fetch)]
    if not shared:
        return None
    return Cluster(size, tuple(shared))


def producer_tail(loop: KLoop, bars: SSAValue, tile: SSAValue, is_consumer: SSAValue,
                  ) -> list[Operation]:
    """Ops that, after the block's last tile, make its producer wait until every slot is
    released by the consumers of every block of the cluster — their arrivals on this
    block's barriers are then done, and no block of the cluster touches its shared memory
    any more, so it may end. (A block's own consumers read every chunk copied into it
    before they finish.)"""
    slots = loop.ahead + 1
    waits = Block()
    build = Builder(waits)
    for j in range(slots):  # the releases the next ``slots`` fills would wait for
        s, use = build.slot(tile, build.const(loop.trips + j), loop.trips, slots)
        build.op(mbarrier.WaitOp(bars, [build.const(EMPTY), s], build.parity(use, 1)))
    waits.add_op(scf.YieldOp())
    parent = loop.k_loop.parent_op()
    body = Block()
    inner = Builder(body)
    if isinstance(parent, scf.ForOp):
        p = parent.body.block.args[0]
        nxt = inner.bin(arith.AddiOp, p, parent.step)
        last = inner.op(arith.CmpiOp(nxt, parent.ub, "uge")).results[0]
        inner.op(scf.IfOp(last, [], Region(waits)))
    else:
        for op in list(waits.ops)[:-1]:
            op.detach()
            body.add_op(op)
    body.add_op(scf.YieldOp())
    return [scf.IfOp(is_consumer, [], Region(Block([scf.YieldOp()])), Region(body))]
