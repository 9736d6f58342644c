"""Kernel IR: ``kernel.func`` bodies, SIMT-vectorised over every thread of the launch.

``kernel.launch`` runs the callee once with the frame ``(blocks, threads_per_block)``:
``kernel.thread_id``/``block_id`` are integer arrays along those axes, so each op executes
for all threads in lock-step. Per-thread control flow is masked: ``scf.for`` with bounds that
differ between threads iterates while any thread is active, ``scf.if`` runs both branches under
complementary masks (as cooperating tasks when they wait for each other through ``mbarrier``
phases: :mod:`llmopt.interp._tasks`). Loads and stores gather and scatter per thread and raise
:class:`~llmopt.interp.OutOfBoundsError` when an active thread leaves the buffer (a dropped
bounds guard). ``kernel.shared`` is one buffer per block, ``kernel.local`` one per thread
(private, so never part of a race); a launch's ``smem`` (dynamic shared memory, which
``kernel-to-cuda`` raises when it moves more than 48 KiB of shared buffers there) changes
nothing here. ``kernel.shuffle_xor`` permutes
values between the lanes of each warp of 32 consecutive threads.

Lock-step execution would hide missing barriers, so memory accesses are checked against
CUDA's rules instead. Between two ``kernel.barrier`` ops (an *epoch* of a block), a
shared-memory location written by one thread may not be read or written by another, nor
written after another thread read it; a global location written by one thread may not be
read or written by another thread unless both are in one block with a barrier in between.
Violations raise :class:`~llmopt.interp.RaceError` naming both ops and both threads. A
barrier or shuffle reached by only part of a block (or warp) raises
:class:`~llmopt.interp.DivergenceError`.

``kernel.copy`` reads its source and writes its destination at once, race-checked like a load
and a store. ``kernel.async_copy`` reads its source when issued and writes its destination
only when a ``kernel.async_wait`` of the issuing thread completes the copy's group (or at the
end of the launch; see :mod:`llmopt.interp.simt`), so a read before the wait sees stale
data. For the race checks the copy writes its destination both when it is issued and when it
completes, each time as the issuing thread: another thread touching the element in the
epoch of either — in particular before a ``kernel.barrier`` that follows the wait — is a race.
(An access in an epoch strictly between the two, with the copy in flight across two barriers,
is not detected.) Its source read is checked like ``kernel.load``'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Operation, SSAValue

from llmopt.dialects._symbols import is_dynamic, shape_of_type
from llmopt.interp._core import (
    DivergenceError,
    InterpretError,
    RaceError,
    Value,
    error,
    np_dtype,
    op_text,
    shape_of,
    uninitialized,
)
from llmopt.interp.host import HostInterpreter, host_impl
from llmopt.interp.simt import InFlight, SimtEvaluator, buffer_of, simt_impl

_NONE = np.iinfo(np.int64).max


def _dims(op: Operation, name: str) -> tuple[int, int, int]:
    """A three-extent launch-shape property."""
    values = tuple(int(v) for v in op.properties[name].get_values())  # type: ignore[attr-defined]
    if len(values) != 3:
        raise error(InterpretError, op, f"{name} must have three extents, got {list(values)}")
    return values  # type: ignore[return-value]


@dataclass
class _Track:
    """Who touched each element of one buffer in the current epoch(s)."""

    shared: bool
    size: int
    writer: np.ndarray = field(init=False)  # global thread id of the last writer, -1: none
    w_epoch: np.ndarray = field(init=False)  # the writer's block epoch at the write
    w_op: np.ndarray = field(init=False)
    r_lo: np.ndarray = field(init=False)  # shared only: smallest/largest reader this epoch
    r_hi: np.ndarray = field(init=False)
    r_epoch: np.ndarray = field(init=False)
    r_op: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        """Empty tracking arrays."""
        self.writer = np.full(self.size, -1, np.int64)
        self.w_epoch = np.zeros(self.size, np.int64)
        self.w_op = np.zeros(self.size, np.int32)
        if self.shared:
            self.r_lo = np.full(self.size, _NONE, np.int64)
            self.r_hi = np.full(self.size, -1, np.int64)
            self.r_epoch = np.full(self.size, -1, np.int64)
            self.r_op = np.zeros(self.size, np.int32)


class RaceChecker:
    """Tracks memory accesses of one launch by epoch and raises on conflicting ones."""

    def __init__(self, blocks: int, threads: int) -> None:
        self.blocks = blocks
        self.threads = threads
        self.epoch = np.zeros(blocks, np.int64)
        self.tracks: dict[int, _Track] = {}
        self.names: dict[int, str] = {}
        self.ops: list[Operation] = []
        self.op_ids: dict[Operation, int] = {}

    def _op_id(self, op: Operation) -> int:
        """A small integer standing for ``op`` in the tracking arrays."""
        k = self.op_ids.get(op)
        if k is None:
            k = self.op_ids[op] = len(self.ops)
            self.ops.append(op)
        return k

    def _thread(self, gtid: int) -> str:
        """Words for a global thread id."""
        return f"thread {gtid % self.threads} of block {gtid // self.threads}"

    def _where(self, buf: np.ndarray, loc: int, shared: bool) -> str:
        """Words for a flat location of ``buf``."""
        coords = [int(c) for c in np.unravel_index(loc, buf.shape)]
        name = self.names.get(id(buf), "buffer")
        if shared:
            return f"shared {name}{coords[1:]} (block {coords[0]})"
        return f"{name}{coords}"

    def _raise(self, what: str, op: Operation, first_op: Operation, buf: np.ndarray,
               loc: int, shared: bool, first: int, second: int, verb: str) -> RaceError:
        """A race diagnostic naming both accesses."""
        msg = (f"data race ({what}) on {self._where(buf, loc, shared)}: {self._thread(first)} "
               f"accessed it in '{op_text(first_op)}' and {self._thread(second)} {verb} it "
               f"with no kernel.barrier in between")
        return error(RaceError, op, msg)  # type: ignore[return-value]

    def read(self, op: Operation, buf: np.ndarray, loc: np.ndarray, lo: np.ndarray,
             hi: np.ndarray, shared: bool) -> None:
        """Record reads of the flat locations ``loc`` of ``buf``.

        Entry ``i`` stands for reads of ``loc[i]`` by active threads of one block whose global
        ids span ``lo[i]..hi[i]`` (one thread when ``lo[i] == hi[i]``).
        """
        track = self.tracks.get(id(buf))
        if track is None:
            if not shared:
                return  # nothing written yet in this launch: nothing to race with
            track = self.tracks[id(buf)] = _Track(True, buf.size)
        block = lo // self.threads
        epoch = self.epoch[block]
        writer = track.writer[loc]
        clash = (writer >= 0) & ((writer != lo) | (writer != hi)) & (
            (writer // self.threads != block) | (track.w_epoch[loc] == epoch))
        if clash.any():
            i = int(np.argmax(clash))
            reader = int(lo[i]) if int(lo[i]) != int(writer[i]) else int(hi[i])
            raise self._raise("read after write", op, self.ops[track.w_op[loc[i]]], buf,
                              int(loc[i]), shared, int(writer[i]), reader, "reads")
        if shared:
            stale = track.r_epoch[loc] != epoch
            if stale.any():
                fresh_loc = loc[stale]
                track.r_lo[fresh_loc] = _NONE
                track.r_hi[fresh_loc] = -1
                track.r_epoch[fresh_loc] = epoch[stale]
            np.minimum.at(track.r_lo, loc, lo)
            np.maximum.at(track.r_hi, loc, hi)
            track.r_op[loc] = self._op_id(op)

    def write(self, op: Operation, buf: np.ndarray, loc: np.ndarray, tids: np.ndarray,
              shared: bool, name: str, source: Operation | None = None) -> None:
        """Record that threads ``tids`` wrote the flat locations ``loc`` of ``buf``; ``op``
        is where a conflict is reported, ``source`` (default ``op``) the op recorded as the
        writer (an asynchronous copy completed by a later wait)."""
        writer_op = op if source is None else source
        track = self.tracks.get(id(buf))
        if track is None:
            track = self.tracks[id(buf)] = _Track(shared, buf.size)
            self.names.setdefault(id(buf), name)
        if loc.size > 1:
            order = np.argsort(loc, kind="stable")
            same = loc[order[1:]] == loc[order[:-1]]
            if same.any():
                i = int(np.argmax(same))
                a, b = int(tids[order[i]]), int(tids[order[i + 1]])
                raise self._raise("write after write", op, writer_op, buf, int(loc[order[i]]),
                                  shared, a, b, "writes")
        epoch = self.epoch[tids // self.threads]
        writer = track.writer[loc]
        clash = (writer >= 0) & (writer != tids) & (
            (writer // self.threads != tids // self.threads) | (track.w_epoch[loc] == epoch))
        if clash.any():
            i = int(np.argmax(clash))
            raise self._raise("write after write", op, self.ops[track.w_op[loc[i]]], buf,
                              int(loc[i]), shared, int(writer[i]), int(tids[i]), "writes")
        if shared:
            lo, hi = track.r_lo[loc], track.r_hi[loc]
            clash = (track.r_epoch[loc] == epoch) & (hi >= 0) & ((lo != tids) | (hi != tids))
            if clash.any():
                i = int(np.argmax(clash))
                reader = int(lo[i]) if int(lo[i]) != int(tids[i]) else int(hi[i])
                raise self._raise("write after read", op, self.ops[track.r_op[loc[i]]], buf,
                                  int(loc[i]), shared, reader, int(tids[i]), "writes")
        track.writer[loc] = tids
        track.w_epoch[loc] = epoch
        track.w_op[loc] = self._op_id(writer_op)

    def barrier(self, blocks: np.ndarray | None) -> None:
        """The threads of ``blocks`` (a boolean per block; ``None``: all) passed a barrier."""
        if blocks is None:
            self.epoch += 1
        else:
            self.epoch[blocks] += 1

    def forget(self, buf: np.ndarray, loc: np.ndarray) -> None:
        """The flat locations ``loc`` of ``buf`` were just written through an mbarrier
        phase (copies that landed at a wait for it): that protocol orders the write after
        the reads the writer's threads waited for and before the waiters' own accesses, so
        the locations start with no writer and no readers."""
        track = self.tracks.get(id(buf))
        if track is None:
            return
        track.writer[loc] = -1
        if track.shared:
            track.r_lo[loc] = _NONE
            track.r_hi[loc] = -1

    def release(self, arrived: np.ndarray) -> None:
        """Threads waited for an mbarrier phase that the threads ``arrived`` (global ids)
        completed: what those threads wrote or read before arriving happens before whatever
        the waiters do next, so those accesses leave the record (an approximation: the
        record keeps one writer and one span of readers a location, so a third thread that
        did not wait is no longer checked against them either)."""
        mine = np.zeros(self.blocks * self.threads, np.bool_)
        mine[arrived] = True
        for track in self.tracks.values():
            if not track.shared:
                continue
            written = track.writer >= 0
            track.writer[written & mine[np.where(written, track.writer, 0)]] = -1
            read = track.r_hi >= 0
            lo = np.where(read, track.r_lo, 0)
            hi = np.where(read, track.r_hi, 0)
            gone = read & mine[lo] & mine[hi]
            track.r_lo[gone] = _NONE
            track.r_hi[gone] = -1

    def grid_sync(self) -> None:
        """Every thread of the grid passed a point after which all global writes before it
        are visible to all (``kernel.last_block``): a barrier for every block, and no
        global write before it races with an access after it."""
        self.epoch += 1
        for track in self.tracks.values():
            if not track.shared:
                track.writer[:] = -1


class KernelEvaluator(SimtEvaluator):
    """A :class:`SimtEvaluator` for one launch: thread ids, shared memory, race checks."""

    def __init__(self, env: dict[SSAValue, Value], grid: tuple[int, int, int],
                 block: tuple[int, int, int], check_races: bool) -> None:
        blocks, threads = math.prod(grid), math.prod(block)
        super().__init__(env, threads=(blocks, threads))
        self.grid = grid
        self.block = block
        self.tid = np.arange(threads).reshape(1, threads)
        self.bid = np.arange(blocks).reshape(blocks, 1)
        self.gtid = self.bid * threads + self.tid
        self.shared: set[int] = set()
        self.local: set[int] = set()
        self.races = RaceChecker(blocks, threads) if check_races else None

    def lanes(self, values: Sequence[Value]) -> tuple[list[np.ndarray], np.ndarray]:
        """``values`` and the global thread ids for every active thread, as flat arrays."""
        frame = self.frame
        mask = self.mask
        arrays = [np.broadcast_to(v, frame) for v in (*values, self.gtid)]
        if mask is None:
            flat = [a.reshape(-1) for a in arrays]
        else:
            sel = np.broadcast_to(mask, frame)
            flat = [a[sel] for a in arrays]
        return flat[:-1], flat[-1]

    def location(self, idx: Sequence[Value], shared: bool) -> list[Value]:
        """The full index tuple of an access (shared buffers gain the block index)."""
        return [self.bid, *idx] if shared else list(idx)

    def per_block(self, values: Sequence[Value]) -> bool:
        """Whether ``values`` are the same for all threads of a block (scalars, or arrays
        whose thread axis has extent 1)."""
        return all(np.ndim(v) == 0 or (np.ndim(v) <= 2 and np.shape(v)[-1] == 1)
                   for v in values)

    def block_spans(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For each block with an active thread: its index, the smallest and largest active
        global thread id, and the number of active threads."""
        blocks, threads = self.threads  # type: ignore[misc]
        first = np.arange(blocks) * threads
        if self.mask is None:
            return (np.arange(blocks), first, first + threads - 1,
                    np.full(blocks, threads))
        active = np.broadcast_to(self.mask, (blocks, threads))
        count = active.sum(axis=1)
        some = np.nonzero(count)[0]
        rows = active[some]
        lo = first[some] + np.argmax(rows, axis=1)
        hi = first[some] + threads - 1 - np.argmax(rows[:, ::-1], axis=1)
        return some, lo, hi, count[some]

    def block_values(self, values: Sequence[Value], blocks: np.ndarray) -> list[np.ndarray]:
        """Per-block ``values`` (see :meth:`per_block`) for the given blocks, as flat arrays."""
        out = []
        for v in values:
            arr = np.broadcast_to(v, (self.threads[0], 1))  # type: ignore[index]
            out.append(arr[blocks, 0])
        return out


def _ids(ev: SimtEvaluator, op: Operation) -> KernelEvaluator:
    """The launch ``op`` runs in (kernel ops are only valid in a launched kernel.func)."""
    if not isinstance(ev, KernelEvaluator):
        raise error(InterpretError, op, "only valid inside a kernel.func launched by "
                    "kernel.launch")
    return ev


def _component(linear: np.ndarray, extents: tuple[int, int, int], dim: str) -> Value:
    """The ``dim`` component of linear ids over ``extents`` (x fastest)."""
    x, y, z = extents
    size = {"x": x, "y": y, "z": z}[dim]
    if size == 1:
        return np.int64(0)
    if dim == "x":
        return linear % x
    if dim == "y":
        return (linear // x) % y
    return linear // (x * y)


@simt_impl("kernel.thread_id", "kernel.block_id", "kernel.block_dim", "kernel.grid_dim")
def _special(ev: SimtEvaluator, op: Operation) -> None:
    """Thread/block ids (arrays over the frame) and block/grid extents (scalars)."""
    kev = _ids(ev, op)
    dim = op.properties["dim"].data  # type: ignore[attr-defined]
    if op.name == "kernel.thread_id":
        value = _component(kev.tid, kev.block, dim)
    elif op.name == "kernel.block_id":
        value = _component(kev.bid, kev.grid, dim)
    else:
        extents = kev.block if op.name == "kernel.block_dim" else kev.grid
        value = np.int64(extents["xyz".index(dim)])
    ev.env[op.results[0]] = value


@simt_impl("kernel.shared")
def _shared(ev: SimtEvaluator, op: Operation) -> None:
    """One poisoned buffer per block."""
    kev = _ids(ev, op)
    typ = op.results[0].type
    assert isinstance(typ, MemRefType)
    buf = uninitialized((kev.threads[0], *shape_of(typ)), np_dtype(typ))  # type: ignore[index]
    kev.shared.add(id(buf))
    if kev.races is not None:
        kev.races.names[id(buf)] = _name(op.results[0], "shared")
    ev.env[op.results[0]] = buf


@simt_impl("kernel.local")
def _local(ev: SimtEvaluator, op: Operation) -> None:
    """One poisoned buffer per thread."""
    kev = _ids(ev, op)
    typ = op.results[0].type
    assert isinstance(typ, MemRefType)
    buf = uninitialized((*kev.threads, *shape_of(typ)), np_dtype(typ))  # type: ignore[misc]
    kev.local.add(id(buf))
    ev.env[op.results[0]] = buf


def _local_index(kev: KernelEvaluator, op: Operation, buf: np.ndarray,
                 idx: list[Value]) -> tuple[Value, ...]:
    """The full index of a thread-private access: block, thread, then the checked indices."""
    idx = kev.check_bounds(op, buf.shape[2:], idx, kev.mask)
    return (kev.bid, kev.tid, *idx)


def _name(value: SSAValue, default: str) -> str:
    """``%name`` of a value for diagnostics."""
    return f"%{value.name_hint}" if value.name_hint else default


@simt_impl("kernel.load")
def _load(ev: SimtEvaluator, op: Operation) -> None:
    """A per-thread gather, bounds- and race-checked."""
    ev.env[op.results[0]] = read(ev, op, op.operands[0], [ev.env[v] for v in op.operands[1:]])


def read(ev: SimtEvaluator, op: Operation, buffer: SSAValue, idx: list[Value]) -> Value:
    """``buffer[idx]`` for every active thread, read by ``op`` as ``kernel.load`` reads:
    bounds-checked, and race-checked against writes since the last barrier."""
    kev = _ids(ev, op)
    buf = buffer_of(ev, op, buffer)
    if id(buf) in kev.local:
        return buf[_local_index(kev, op, buf, idx)]
    shared = id(buf) in kev.shared
    shape = buf.shape[1:] if shared else buf.shape
    idx = ev.check_bounds(op, shape, idx, ev.mask)
    full = kev.location(idx, shared)
    value = buf[tuple(full)]
    races = kev.races
    if races is not None and (shared or id(buf) in races.tracks):
        races.names.setdefault(id(buf), _name(buffer, "buffer"))
        if kev.per_block(full):
            blocks, lo, hi, _ = kev.block_spans()
            coords = kev.block_values(full, blocks)
        else:
            coords, lo = kev.lanes(full)
            hi = lo
        races.read(op, buf, np.ravel_multi_index(coords, buf.shape), lo, hi, shared)
    return value


@simt_impl("kernel.store")
def _store(ev: SimtEvaluator, op: Operation) -> None:
    """A per-thread scatter of the active threads, bounds- and race-checked."""
    kev = _ids(ev, op)
    value = ev.env[op.operands[0]]
    buf = buffer_of(ev, op, op.operands[1])
    idx = [ev.env[v] for v in op.operands[2:]]
    if id(buf) in kev.local:
        full = _local_index(kev, op, buf, idx)
        if ev.mask is None:
            *coords, values = np.broadcast_arrays(*full, value)
        else:
            *coords, values, sel = np.broadcast_arrays(*full, value, ev.mask)
            coords, values = [c[sel] for c in coords], values[sel]
        buf[tuple(coords)] = values
        return
    shared = id(buf) in kev.shared
    shape = buf.shape[1:] if shared else buf.shape
    idx = ev.check_bounds(op, shape, idx, ev.mask)
    full = kev.location(idx, shared)
    races = kev.races
    if kev.per_block([*full, value]):
        # One location and one value per block (e.g. a store guarded by ``tid == 0``).
        blocks, lo, hi, count = kev.block_spans()
        *coords, values = kev.block_values([*full, value], blocks)
        if races is not None:
            loc = _flat_locations(coords, buf.shape, values)
            many = count > 1
            if many.any():
                i = int(np.argmax(many))
                raise races._raise("write after write", op, op, buf, int(loc[i]), shared,
                                   int(lo[i]), int(hi[i]), "writes")
            races.write(op, buf, loc, lo, shared, _name(op.operands[1], "buffer"))
    else:
        (*coords, values), tids = kev.lanes([*full, value])
        if races is not None:
            loc = _flat_locations(coords, buf.shape, values)
            races.write(op, buf, loc, tids, shared, _name(op.operands[1], "buffer"))
    if not coords:  # a 0-d buffer: the writers' value (more than one is a race above)
        if np.size(values):
            buf[()] = np.ravel(values)[-1]
        return
    buf[tuple(coords)] = values


def _flat_locations(coords: list[np.ndarray], shape: tuple[int, ...],
                    values: np.ndarray) -> np.ndarray:
    """The flat location of every written value: its coordinates raveled, or, in a 0-d
    buffer (no coordinates), location 0 for each."""
    if not coords:
        return np.zeros(np.shape(values), dtype=np.intp)
    return np.ravel_multi_index(coords, shape)


@simt_impl("kernel.barrier", "kernel.cluster_barrier")
def _barrier(ev: SimtEvaluator, op: Operation) -> None:
    """Ends the block's epoch; every thread of a block must reach it (the blocks run in
    lock-step here, so a cluster's barrier is its blocks' barriers). In Tile IR (no
    :class:`KernelEvaluator`, but a launch shape) it does nothing: there every op of a block
    step already runs for the whole block before the next."""
    if not isinstance(ev, KernelEvaluator) and ev.threads is not None:
        return
    kev = _ids(ev, op)
    blocks: np.ndarray | None = None
    if ev.mask is not None:
        active = np.broadcast_to(ev.mask, kev.frame)
        blocks = active.any(axis=1)
        partial = blocks & ~active.all(axis=1)
        if partial.any():
            b = int(np.argmax(partial))
            count = int(active[b].sum())
            raise error(DivergenceError, op, f"only {count} of the {kev.threads[1]} threads of "
                        f"block {b} reach this barrier (it sits in divergent control flow)")
    if kev.races is not None:
        kev.races.barrier(blocks)


@simt_impl("kernel.last_block")
def _last_block(ev: SimtEvaluator, op: Operation) -> None:
    """The region in the block with the highest id, after every block arrived.

    The launch runs in lock-step, so every block has done its work before the op; the block
    that would draw the last ticket when the blocks arrive in order of their ids runs the
    region (on the GPU it is whichever arrives last, which the region may not depend on:
    the verifier rejects ``kernel.block_id`` inside). For the race checks the op is a grid
    barrier. The counter must hold zero on arrival (a host allocation ``{llmopt.zeroed}``,
    put back to zero by every launch before); it holds zero after.
    """
    kev = _ids(ev, op)
    outer = ev.mask
    if outer is not None and not np.broadcast_to(outer, kev.frame).all():
        raise error(DivergenceError, op, "only part of the grid reaches kernel.last_block "
                    "(it sits in divergent control flow)")
    counter = buffer_of(ev, op, op.operands[0])
    held = int(counter.reshape(-1)[0])
    if held != 0:
        raise error(InterpretError, op, f"the counter holds {held} when the launch reaches "
                    "kernel.last_block, not 0: allocate it zeroed (memref.alloc() "
                    "{llmopt.zeroed}) and let every launch that uses it finish")
    if kev.races is not None:
        kev.races.grid_sync()
    blocks = kev.threads[0]  # type: ignore[index]
    ev.mask = np.asarray(kev.bid == blocks - 1)
    try:
        ev.run_region_block(op.regions[0].block)
    finally:
        ev.mask = outer


@simt_impl("kernel.opaque")
def _opaque(ev: SimtEvaluator, op: Operation) -> None:
    """Its operand: only the CUDA compiler cannot see it."""
    ev.env[op.results[0]] = ev.env[op.operands[0]]


@simt_impl("kernel.shuffle_xor")
def _shuffle_xor(ev: SimtEvaluator, op: Operation) -> None:
    """The value of lane ``lane ^ offset``; every lane read must exist and be active."""
    kev = _ids(ev, op)
    offset = op.properties["offset"].value.data  # type: ignore[attr-defined]
    blocks, threads = kev.frame
    src = np.arange(threads) ^ offset
    missing = src >= threads
    if ev.mask is None:
        if missing.any():
            t = int(np.argmax(missing))
            raise _missing_lane(op, 0, t, int(src[t]), threads)
    else:
        active = np.broadcast_to(ev.mask, kev.frame)
        gone = active & missing
        if gone.any():
            b, t = (int(i) for i in np.unravel_index(int(np.argmax(gone)), gone.shape))
            raise _missing_lane(op, b, t, int(src[t]), threads)
        reads_inactive = active & ~active[:, np.minimum(src, threads - 1)]
        if reads_inactive.any():
            b, t = (int(i) for i in np.unravel_index(int(np.argmax(reads_inactive)),
                                                     reads_inactive.shape))
            raise error(DivergenceError, op, f"thread {t} of block {b} reads thread "
                        f"{int(src[t])}, which does not execute this shuffle (divergent warp)")
    value = ev.env[op.operands[0]]
    if np.ndim(value) == 0 or np.shape(value)[-1] == 1:
        ev.env[op.results[0]] = value
    elif threads % (2 * offset) == 0:
        # Lane l ^ o swaps the two halves of every group of 2*o consecutive lanes.
        shape = np.shape(value)
        groups = np.reshape(value, shape[:-1] + (threads // (2 * offset), 2, offset))
        ev.env[op.results[0]] = groups[..., ::-1, :].reshape(shape)
    else:
        ev.env[op.results[0]] = np.asarray(value)[..., src]


def _missing_lane(op: Operation, block: int, thread: int, source: int, threads: int
                  ) -> DivergenceError:
    """The diagnostic for a shuffle from a lane past the end of the block."""
    return error(DivergenceError, op,  # type: ignore[return-value]
                 f"thread {thread} of block {block} reads lane {source % 32} of its warp, which "
                 f"does not exist in a block of {threads} threads")


def _prefix(kev: KernelEvaluator, buf: np.ndarray) -> list[Value]:
    """The storage axes in front of a buffer's own: the block of a ``kernel.shared``
    buffer, the block and thread of a ``kernel.local`` one."""
    if id(buf) in kev.local:
        return [kev.bid, kev.tid]
    return [kev.bid] if id(buf) in kev.shared else []


def _copied(ev: SimtEvaluator, op: Operation, asynchronous: bool) -> InFlight:
    """The elements a ``kernel.copy``/``kernel.async_copy`` moves, read from its source now
    (race-checked like a load); the destination write is recorded for the race checks as the
    executing threads' (an asynchronous copy records it again when it completes)."""
    kev = _ids(ev, op)
    count = op.properties["count"].value.data  # type: ignore[attr-defined]
    segments = op.properties["operandSegmentSizes"]
    sizes = [int(n) for n in segments.get_values()]  # type: ignore[attr-defined]
    src_value, dst_value = op.operands[0], op.operands[1 + sizes[1]]
    src_idx = [ev.env[v] for v in op.operands[1:1 + sizes[1]]]
    dst_idx = [ev.env[v] for v in op.operands[2 + sizes[1]:2 + sizes[1] + sizes[3]]]
    ok = ev.env[op.operands[-1]] if len(sizes) > 4 and sizes[4] else None
    src = buffer_of(kev, op, src_value)
    dst = buffer_of(kev, op, dst_value)
    if asynchronous and (id(src) in kev.local or id(dst) in kev.local):
        raise error(InterpretError, op, "an asynchronous copy cannot access a kernel.local "
                    "buffer")
    src_shared, dst_shared = id(src) in kev.shared, id(dst) in kev.shared
    assert isinstance(src_value.type, MemRefType) and isinstance(dst_value.type, MemRefType)
    source = kev.copy_elements(op, src, _prefix(kev, src), src_idx, src_value.type, count)
    target = kev.copy_elements(op, dst, _prefix(kev, dst), dst_idx, dst_value.type, count)
    flat, tids = kev.copy_lanes([*source, *target, True if ok is None else ok], count)
    src_coords = tuple(flat[:len(source)])
    dst_coords = tuple(flat[len(source):len(source) + len(target)])
    reading = flat[-1].astype(bool)  # ``if %ok``: the lanes whose ok is false write zeros
    values = np.where(reading, src[src_coords], np.zeros((), src.dtype))
    src_loc = np.ravel_multi_index(src_coords, src.shape)
    dst_loc = np.ravel_multi_index(dst_coords, dst.shape)
    races = kev.races
    if races is not None:
        if id(src) not in kev.local and (src_shared or id(src) in races.tracks):
            races.names.setdefault(id(src), _name(src_value, "buffer"))
            races.read(op, src, src_loc[reading], tids[reading], tids[reading], src_shared)
        if id(dst) not in kev.local:
            races.write(op, dst, dst_loc, tids, dst_shared, _name(dst_value, "buffer"))
    return InFlight(op, dst, dst_shared, dst_loc, values, tids,
                    np.full(dst_loc.shape, -1, np.int64))


@simt_impl("kernel.copy")
def _copy(ev: SimtEvaluator, op: Operation) -> None:
    """Read the source and write the destination at once (both race-checked)."""
    _copied(ev, op, False).write()


@simt_impl("kernel.async_copy")
def _async_copy(ev: SimtEvaluator, op: Operation) -> None:
    """Read the source now (race-checked like a load), record the destination write, and
    keep the values in flight until a wait (see the module docstring)."""
    kev = _ids(ev, op)
    kev.copies(op).issue(_copied(ev, op, True))


def _complete(kev: KernelEvaluator, op: Operation, done: list[InFlight]) -> None:
    """Write completed copies, recorded (as ``op``, when race checks are on) as writes by the
    threads that issued them."""
    races = kev.races
    for copy in done:
        if races is not None:
            races.write(op, copy.buffer, copy.loc, copy.tids, copy.shared,
                        races.names.get(id(copy.buffer), "buffer"), source=copy.op)
        copy.write()


@simt_impl("kernel.wait_prior_grids", "kernel.launch_dependents")
def _grid_dependency(ev: SimtEvaluator, op: Operation) -> None:
    """Nothing to do: the interpreter runs one launch after the other."""


@simt_impl("kernel.set_max_registers")
def _set_max_registers(ev: SimtEvaluator, op: Operation) -> None:
    """Nothing to do: registers hold no values the interpreter keeps."""


@simt_impl("kernel.prefetch")
def _prefetch(ev: SimtEvaluator, op: Operation) -> None:
    """A hint that changes nothing: only its range is checked (in bounds, aligned)."""
    kev = _ids(ev, op)
    buffer, *indices = op.operands
    buf = buffer_of(kev, op, buffer)
    assert isinstance(buffer.type, MemRefType)
    count = op.properties["count"].value.data  # type: ignore[attr-defined]
    kev.check_prefetch(op, buf.shape, [ev.env[v] for v in indices], buffer.type, count)


@simt_impl("kernel.async_commit")
def _async_commit(ev: SimtEvaluator, op: Operation) -> None:
    """The executing threads close their open groups."""
    kev = _ids(ev, op)
    kev.copies(op).commit(kev.active_threads())


@simt_impl("kernel.async_wait")
def _async_wait(ev: SimtEvaluator, op: Operation) -> None:
    """Complete the executing threads' groups older than their ``pending`` newest ones."""
    kev = _ids(ev, op)
    pending = op.properties["pending"].value.data  # type: ignore[attr-defined]
    _complete(kev, op, kev.copies(op).complete(kev.active_threads(), pending))


def _fits(shape: tuple[int, ...], typ: MemRefType) -> bool:
    """Whether an array of ``shape`` is a buffer of ``typ`` (a ``?`` extent takes any)."""
    want = shape_of_type(typ)
    return len(shape) == len(want) and all(is_dynamic(w) or g == w
                                           for g, w in zip(shape, want, strict=True))


@host_impl("kernel.launch")
def _launch(interp: HostInterpreter, op: Operation, args: list[Value]) -> list[Value]:
    """Run the callee for every thread of the grid; buffers alias the host's."""
    name = op.properties["kernel"].root_reference.data  # type: ignore[attr-defined]
    fn = interp.lookup(name, op)
    if fn.name != "kernel.func":
        raise error(InterpretError, op, f"@{name} is not a kernel.func")
    grid, block = _dims(op, "grid"), _dims(op, "block")
    body = fn.regions[0].block
    if len(args) == len(body.args) + 1:  # the runtime grid size
        size = int(args[-1])
        if not 1 <= size <= grid[0]:
            raise error(InterpretError, op, f"the grid size is {size}, outside [1, {grid[0]}] "
                        "(its declared maximum)")
        grid = (size, *grid[1:])
        args = args[:-1]
    if _dims(fn, "block") != block:
        raise error(InterpretError, op, f"launches @{name} with block {list(block)}, the "
                    f"kernel is compiled for {list(_dims(fn, 'block'))}")
    body = fn.regions[0].block
    if len(args) != len(body.args):
        raise error(InterpretError, op, f"@{name} takes {len(body.args)} arguments, "
                    f"{len(args)} given")
    env: dict[SSAValue, Value] = {}
    for arg, value in zip(body.args, args, strict=True):
        if isinstance(arg.type, MemRefType):
            if not isinstance(value, np.ndarray) or not _fits(value.shape, arg.type):
                raise error(InterpretError, op, f"argument {_name(arg, '')} needs a buffer "
                            f"{arg.type}")
            env[arg] = value
        else:
            env[arg] = np_dtype(arg.type).type(value)
    ev = KernelEvaluator(env, grid, block, interp.check_races)
    if ev.races is not None:
        for arg, value in zip(body.args, args, strict=True):
            if isinstance(value, np.ndarray):
                ev.races.names.setdefault(id(value), _name(arg, "buffer"))
    ev.run_block(body)
    for copy in ev.finish_copies():
        _complete(ev, copy.op, [copy])
    return []
