"""Tile IR: scheduled kernels, SIMT-vectorised over the launch's blocks and threads.

A ``tile.kernel`` runs with the frame ``(blocks, threads_per_block)`` from its ``grid`` and
``block`` (each linearised, x fastest). Its mapped loops execute exactly the assignment the
GPU performs:

* ``tile.forall ... over blocks``: block ``b`` takes the points ``b, b + G, b + 2G, ...`` of
  the row-major linearised iteration space (``G`` blocks);
* ``over threads``: global thread ``t = b * B + tid`` takes ``t, t + G*B, ...``;
* ``over block_threads``: thread ``tid`` of each block takes ``tid, tid + B, ...``.

The rounds of the strided loop become a new frame axis, and a point past the end of the
space masks its lane off (the thread or block that owns no point does nothing). A runtime
extent (``in [1, %n max 128, 64]``) takes its value for the launch, checked against its
maximum; so do a ``tile.coop_reduce`` with a runtime bound and a kernel whose grid is a
runtime value (``grid [%g max 512, 1, 1]``).

``tile.coop_reduce`` is computed in the order the generated code must use, so a schedule
that changes the order changes the rounding and shows: thread ``tid`` folds ``k = tid,
tid + B, ...`` sequentially (starting from the identity); the partials of each warp of 32
lanes are combined by an xor butterfly (``v = v ⊕ shfl_xor(v, o)`` for o = 16, 8, 4, 2, 1;
lanes past a partial last warp hold the identity); with several warps, every thread then
folds the warp totals in warp order, starting from the identity (they pass through shared
memory). Every thread receives the same bits: the total. ``tile.lane_reduce`` is that
butterfly alone, over each warp's 32 lanes (or each group's). Loops, loads, stores and scalar ops
inside are interpreted as at Loop IR.

``tile.alloc`` (shared or registers alike) is one poisoned buffer per point of the frame's
leading axes at the alloc — per block and per round of the enclosing forall over blocks; in
a forall over threads, per thread and round — and every access to it is routed to the copy
of the point that makes it.

``tile.copy`` moves its elements at once. ``tile.async_copy``/``async_commit``/``async_wait``
keep the copied values in flight until a
wait of the issuing thread completes their group (see :mod:`llmopt.interp.simt`): a read of
the destination before that sees the old contents (a fresh ``tile.alloc`` is NaN). Every op
of a block step runs for the whole block before the next one, so an explicit
``kernel.barrier`` in Tile IR changes nothing here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Operation, SSAValue

from llmopt.dialects import tile
from llmopt.interp._core import (
    InterpretError,
    Value,
    block_tree,
    butterfly,
    compile_map,
    error,
    identity,
    np_dtype,
    shape_of,
    uninitialized,
)
from llmopt.interp.host import HostInterpreter, host_impl
from llmopt.interp.loop import bind_buffers, clamped
from llmopt.interp.simt import InFlight, SimtEvaluator, and_masks, buffer_of, simt_impl


def _ints(op: Operation, name: str) -> tuple[int, ...]:
    """An ``array<i64: ...>`` property."""
    return tuple(int(v) for v in op.properties[name].get_values())  # type: ignore[attr-defined]


def thread_axes(ev: SimtEvaluator, op: Operation) -> tuple[int, int]:
    """``(blocks, threads_per_block)`` of the enclosing launch."""
    if ev.threads is None:
        raise error(InterpretError, op, "needs a launch shape: it must sit in a tile.kernel")
    return ev.threads


@simt_impl("tile.forall")
def _forall(ev: SimtEvaluator, op: Operation) -> None:
    """The strided assignment of points to blocks or threads; rounds become an axis."""
    blocks, threads = thread_axes(ev, op)
    extents = list(_ints(op, "extents"))
    if "dynamic" in op.properties:
        for dim, size in zip(_ints(op, "dynamic"), op.operands, strict=True):
            extents[dim] = runtime_extent(ev, op, size, extents[dim])
    points = math.prod(extents)
    mapping = op.properties["mapping"].data  # type: ignore[attr-defined]
    bid = np.arange(blocks).reshape(blocks, 1)
    tid = np.arange(threads).reshape(1, threads)
    if mapping == "blocks":
        base, stride = bid, blocks
    elif mapping == "threads":
        base, stride = bid * threads + tid, blocks * threads
    elif mapping == "block_threads":
        base, stride = tid, threads
    else:
        raise error(InterpretError, op, f"unknown mapping '{mapping}'")
    rounds = -(-points // stride)
    body = op.regions[0].block
    outer = ev.mask
    step = ev.chunk(rounds)
    for start in range(0, rounds, step):
        r = ev.axis(np.arange(start, min(rounds, start + step)))
        point = r * stride + base
        owned = point < points
        saved = ev.push(r.shape[0])
        try:
            ev.mask = and_masks(outer, None if owned.all() else owned)
            rest = point
            for iv, extent in reversed(list(zip(body.args, extents, strict=True))):
                ev.env[iv] = rest % extent
                rest = rest // extent
            ev.run_block(body)
        finally:
            ev.frame = saved
            ev.mask = outer


def runtime_extent(ev: SimtEvaluator, op: Operation, value: SSAValue, most: int) -> int:
    """The value of a runtime extent of ``op``: one integer for the launch, in ``[0, most]``."""
    arr = np.asarray(ev.env[value])
    if arr.size != 1 and not (arr == arr.flat[0]).all():
        raise error(InterpretError, op, "a runtime extent differs between threads")
    count = int(arr.flat[0])
    if not 0 <= count <= most:
        raise error(InterpretError, op, f"a runtime extent is {count}, outside [0, {most}] "
                    "(its declared maximum)")
    return count


@simt_impl("tile.coop_reduce")
def _coop_reduce(ev: SimtEvaluator, op: Operation) -> None:
    """Per-thread strided folds, then the block tree (see the module docstring)."""
    _, threads = thread_axes(ev, op)
    extent = op.properties["extent"].value.data  # type: ignore[attr-defined]
    if op.operands:
        extent = runtime_extent(ev, op, op.operands[0], extent)
    kind = op.properties["kind"].data  # type: ignore[attr-defined]
    dtype = np_dtype(op.results[0].type)
    body = op.regions[0].block
    tid = np.arange(threads)
    rounds = -(-extent // threads)
    if rounds == 0:
        ev.env[op.results[0]] = identity(kind, dtype)
        return

    def index(s: np.ndarray) -> np.ndarray:
        """The reduce index thread ``tid`` handles in round ``s``."""
        return s * threads + tid

    def mask(s: np.ndarray) -> np.ndarray | None:
        """Whether that index is in range (``None``: always)."""
        if rounds * threads == extent:
            return None
        return index(s) < extent

    partial: Value = ev.reduce_axis(op, kind, body, body.args[0], rounds, dtype, index, mask)
    partial = np.asarray(partial)
    ndim = len(ev.frame)
    partial = partial.reshape((1,) * (ndim - partial.ndim) + partial.shape)
    ev.env[op.results[0]] = block_tree(kind, partial, threads)


@simt_impl("tile.lane_reduce")
def _lane_reduce(ev: SimtEvaluator, op: Operation) -> None:
    """Each warp's 32 values (each group's ``lanes``) combined by the xor butterfly; every
    lane gets the total."""
    _, threads = thread_axes(ev, op)
    kind = op.properties["kind"].data  # type: ignore[attr-defined]
    dtype = np_dtype(op.results[0].type)
    value = np.asarray(ev.env[op.operands[0]], dtype=dtype)
    full = np.broadcast_to(value, np.broadcast_shapes(value.shape, ev.frame))
    lanes = op.group  # type: ignore[attr-defined]
    warps = full.reshape(full.shape[:-1] + (threads // lanes, lanes))
    ev.env[op.results[0]] = butterfly(kind, warps).reshape(full.shape)


@simt_impl("tile.alloc")
def _alloc(ev: SimtEvaluator, op: Operation) -> None:
    """One buffer per block point: the frame's axes other than the thread axis own a copy
    (a register buffer of one point — in a forall over threads or block_threads, or a
    cooperative reduction's body —, one per point: every axis does)."""
    thread_axes(ev, op)
    typ = op.results[0].type
    assert isinstance(typ, MemRefType)
    per_point = isinstance(op, tile.AllocOp) and op.space.data == "registers" and (
        tile.point_private(op))
    prefix = ev.frame if per_point else ev.frame[:-1]
    buf = uninitialized((*prefix, *shape_of(typ)), np_dtype(typ))
    n = len(ev.frame)
    ev.owned[id(buf)] = [np.arange(e).reshape((e,) + (1,) * (n - 1 - a))
                         for a, e in enumerate(prefix)]
    ev.env[op.results[0]] = buf


def _access(ev: SimtEvaluator, op: Operation, prop: str, indices: Sequence[SSAValue]
            ) -> tuple[Value, ...]:
    """The coordinates the affine map ``prop`` of ``op`` gives for every point of the frame."""
    amap = op.properties[prop].data  # type: ignore[attr-defined]
    return compile_map(amap)([ev.env[v] for v in indices])


def _first(ev: SimtEvaluator, op: Operation, buf: np.ndarray, prop: str,
           indices: Sequence[SSAValue], count: int) -> tuple[Value, ...]:
    """The coordinates of the first of the ``count`` elements ``op`` takes from ``buf``,
    clamped into it for a ``clamp`` op (to its runtime extents, those of a ``?`` type)."""
    start = _access(ev, op, prop, indices)
    if "clamp" in op.properties:
        start = clamped(start, buf.shape[len(ev.owned.get(id(buf), [])):], count)
    return start


def _copied(ev: SimtEvaluator, op: Operation) -> InFlight:
    """The elements a ``tile.copy``/``tile.async_copy`` moves, read from its source now."""
    thread_axes(ev, op)
    src_value, dst_value, *indices = op.operands
    src = buffer_of(ev, op, src_value)
    dst = buffer_of(ev, op, dst_value)
    count = op.properties["count"].value.data  # type: ignore[attr-defined]
    assert isinstance(src_value.type, MemRefType) and isinstance(dst_value.type, MemRefType)
    start = _first(ev, op, src, "src_map", indices, count)
    source = ev.copy_elements(op, src, ev.owned.get(id(src), []), start, src_value.type,
                              count)
    target = ev.copy_elements(op, dst, ev.owned.get(id(dst), []),
                              _access(ev, op, "dst_map", indices), dst_value.type, count)
    flat, tids = ev.copy_lanes([*source, *target], count)
    values = src[tuple(flat[:len(source)])]
    loc = np.ravel_multi_index(tuple(flat[len(source):]), dst.shape)
    return InFlight(op, dst, False, loc, values, tids, np.full(loc.shape, -1, np.int64))


@simt_impl("tile.copy")
def _copy(ev: SimtEvaluator, op: Operation) -> None:
    """Read the source and write the destination at once."""
    _copied(ev, op).write()


@simt_impl("tile.async_copy")
def _async_copy(ev: SimtEvaluator, op: Operation) -> None:
    """Read the source now; the values stay in flight until a wait (module docstring)."""
    ev.copies(op).issue(_copied(ev, op))


@simt_impl("tile.prefetch")
def _prefetch(ev: SimtEvaluator, op: Operation) -> None:
    """A hint that changes nothing: only its range is checked (in bounds, aligned)."""
    thread_axes(ev, op)
    buffer, *indices = op.operands
    buf = buffer_of(ev, op, buffer)
    count = op.properties["count"].value.data  # type: ignore[attr-defined]
    assert isinstance(buffer.type, MemRefType)
    start = _first(ev, op, buf, "map", indices, count)
    owners = len(ev.owned.get(id(buf), []))
    ev.check_prefetch(op, buf.shape[owners:], start, buffer.type, count)


@simt_impl("tile.async_commit")
def _async_commit(ev: SimtEvaluator, op: Operation) -> None:
    """The executing threads close their open groups."""
    thread_axes(ev, op)
    ev.copies(op).commit(ev.active_threads())


@simt_impl("tile.async_wait")
def _async_wait(ev: SimtEvaluator, op: Operation) -> None:
    """Write the executing threads' groups older than their ``pending`` newest ones."""
    thread_axes(ev, op)
    pending = op.properties["pending"].value.data  # type: ignore[attr-defined]
    for done in ev.copies(op).complete(ev.active_threads(), pending):
        done.write()


@host_impl("tile.kernel")
def _kernel(interp: HostInterpreter, op: Operation, args: list[Value]) -> list[Value]:
    """Run a ``tile.kernel`` body for all blocks and threads of its launch shape; copies
    still in flight at the end are written."""
    grid = list(_ints(op, "grid"))
    bound = len(op.regions[0].block.args)
    if len(args) > bound:  # the runtime grid size
        size = int(args[bound])
        if not 1 <= size <= grid[0]:
            raise error(InterpretError, op, f"the grid size is {size}, outside [1, {grid[0]}] "
                        "(its declared maximum)")
        grid[0] = size
        args = args[:bound]
    blocks = math.prod(grid)
    threads = math.prod(_ints(op, "block"))
    ev = SimtEvaluator(bind_buffers(op, args), threads=(blocks, threads))
    ev.run_block(op.regions[0].block)
    for done in ev.finish_copies():
        done.write()
    return []
