"""Interpretation of the ``tma`` dialect (bulk tensor copies) at Kernel IR.

``tma.load`` is modelled like a ``kernel.async_copy`` bound to an ``mbarrier`` phase
(:mod:`llmopt.interp.mbarrier`), one box per executing thread:

* when the op runs, each executing thread reads the box whose corner is ``src[indices]``
  (extent ``tile`` in the last dimensions of ``src``, 1 in the others; elements outside
  ``src``, negative coordinates included, read as zero, as the tensor map's bounds make
  them on the GPU) and keeps the values in flight, bound to the phase in progress of the
  barrier it names; the destination, ``dst[dst_indices, …]``, is not touched yet;
* the copy completes its bytes of transactions on that barrier at once, which may complete
  the phase (once its arrivals are in too): announcing fewer bytes than the copies complete
  (``mbarrier.expect_bytes``), or naming a barrier no ``mbarrier.init`` set up, is an error;
* the values land when a thread's ``mbarrier.wait`` sees the phase complete (or at the end
  of the launch), so a consumer that reads the slot without waiting reads what was there
  before, as on the GPU.

A multicast copy (``multicast n``) does the same for the part of the box that the thread's
block copies (its rank in its cluster, ``block mod n``), once for each block of its cluster:
the part lands in each block's ``dst`` and completes its bytes on each block's barrier.

For the race checks the copy writes its destination when it is issued, as the issuing
thread, so another thread touching the slot before it waits for the phase is a race; when
the values land the checker forgets the locations, since the barrier orders that write
(:meth:`~llmopt.interp.kernel.RaceChecker.forget`). The in-bounds source elements are
race-checked as a load's. Shared buffers are seen logically: a swizzled destination
(``llmopt.swizzle``) holds the box at its logical positions, the swizzle being the layout
``kernel-to-cuda`` prints, as for every other access of such a buffer.
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Operation

from llmopt.dialects.tma import LoadOp
from llmopt.interp._core import InterpretError, error
from llmopt.interp.kernel import KernelEvaluator, _ids, _name
from llmopt.interp.mbarrier import barrier_index, complete_bytes
from llmopt.interp.simt import InFlight, SimtEvaluator, buffer_of, simt_impl


@simt_impl("tma.load")
def _load(ev: SimtEvaluator, op: Operation) -> None:
    """Each executing thread reads its box now (zero outside the source), binds it to its
    barrier's phase in progress, and completes the copy's bytes there (see the module
    docstring)."""
    assert isinstance(op, LoadOp)
    kev = _ids(ev, op)
    src = buffer_of(kev, op, op.src)
    dst = buffer_of(kev, op, op.dst)
    if id(src) in kev.shared or id(src) in kev.local:
        raise error(InterpretError, op, "the source must be a global buffer")
    if id(dst) not in kev.shared:
        raise error(InterpretError, op, "the destination must be a kernel.shared buffer")
    tile, box = op.tile, op.box
    lead = len(op.dst_indices)
    dst_idx = ev.check_bounds(op, dst.shape[1:1 + lead], [ev.env[v] for v in op.dst_indices],
                              ev.mask)
    bars, bar_full = barrier_index(ev, op, op.bars, op.bar_indices)
    corner = [ev.env[v] for v in op.src_indices]
    flat, tids = kev.lanes([*corner, *kev.location(dst_idx, True), *bar_full])
    if not tids.size:
        return
    rank = src.ndim
    corner_l, dst_l, bar_l = flat[:rank], flat[rank:rank + 1 + lead], flat[rank + 1 + lead:]
    n, first = op.blocks, rank - len(tile)
    part = dst_l[0] % n * op.part[0]  # the rows before the thread's part (0 unless multicast)
    corner_l[first] = corner_l[first] + part

    # Element e of a thread's box: src[corner + offset[e]], dst[block, *dst_idx, *tile[e]].
    offsets = np.indices(box).reshape(rank, -1)
    coords = [c[:, None] + o[None, :] for c, o in zip(corner_l, offsets, strict=True)]
    inside = np.ones(coords[0].shape, np.bool_)
    for c, extent in zip(coords, src.shape, strict=True):
        inside &= (c >= 0) & (c < extent)
    clipped = tuple(np.clip(c, 0, extent - 1) for c, extent in zip(coords, src.shape,
                                                                     strict=True))
    values = np.where(inside, src[clipped], np.zeros((), src.dtype)).astype(src.dtype)
    count = offsets.shape[1]
    within = [np.broadcast_to(t[None, :], coords[0].shape) for t in offsets[first:]]
    within[0] = within[0] + part[:, None]
    elem_tids = np.repeat(tids, count)
    if n > 1 and kev.threads is not None and kev.threads[0] % n:
        raise error(InterpretError, op, f"a multicast to clusters of {n} blocks in a launch "
                    f"of {kev.threads[0]} blocks")
    for peer in range(n):  # each block of the cluster (the thread's own when not multicast)
        block = dst_l[0] - dst_l[0] % n + peer
        target = [np.broadcast_to(d[:, None], coords[0].shape) for d in (block, *dst_l[1:])]
        dst_loc = np.ravel_multi_index([*target, *within], dst.shape).reshape(-1)
        bar_loc = np.ravel_multi_index((block, *bar_l[1:]), bars.shape)
        _land(op, kev, src, dst, (clipped, inside), values, dst_loc, elem_tids,
              (bars, bar_loc, count), peer == 0)


def _land(op: LoadOp, kev: KernelEvaluator, src: np.ndarray, dst: np.ndarray,
          read: tuple[tuple[np.ndarray, ...], np.ndarray], values: np.ndarray,
          dst_loc: np.ndarray, elem_tids: np.ndarray,
          barrier: tuple[np.ndarray, np.ndarray, int], first: bool) -> None:
    """The copy's elements bound for one block: race-checked (the source's reads once, with
    ``first``), put in flight to ``dst_loc`` and bound to the barriers ``bar_loc``, whose
    bytes they complete."""
    clipped, inside = read
    bars, bar_loc, count = barrier
    races = kev.races
    if races is not None:
        if first and id(src) in races.tracks:  # a global buffer some thread of the launch wrote
            read_tids = elem_tids[inside.reshape(-1)]
            races.names.setdefault(id(src), _name(op.src, "buffer"))
            races.read(op, src, np.ravel_multi_index(clipped, src.shape)[inside], read_tids,
                       read_tids, False)
        races.write(op, dst, dst_loc, elem_tids, True, _name(op.dst, "shared"))
    copy = InFlight(op, dst, True, dst_loc, values.reshape(-1), elem_tids,
                    np.full(dst_loc.shape, -1, np.int64))
    complete_bytes(op, kev, bars, bar_loc, op.bytes, copy, np.repeat(bar_loc, count))
