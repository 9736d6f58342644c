"""Interpreter implementations of the ``mbarrier`` dialect (Kernel IR).

Each barrier of a launch keeps five numbers: the arrivals a phase expects (0 until
``mbarrier.init``), the arrivals of the phase in progress, the bytes of transactions
announced in it and the bytes completed in it, and how many phases have completed. A phase
completes when its arrivals reach the count and its completed bytes the announced ones; a
barrier on which no op announces bytes behaves as one without transactions. The evaluator
runs every thread of a block one op after another, so a wait can only be satisfied by
arrivals that came before it in that order — or, in a branch of an ``scf.if`` whose
branches run as cooperating tasks (:mod:`llmopt.interp._tasks`; a producer's and its
consumers' branches), by arrivals of the other branch, which runs while this one waits. A
wait for a phase that no thread can complete is reported, as is an arrival beyond a
phase's count.

``mbarrier.arrive_copies`` takes the executing threads' asynchronous copies out of their
groups and binds them to the phase their arrival counts towards; they are written when a
thread's ``mbarrier.wait`` finds that phase complete (or at the end of the launch), so a
consumer that reads a slot without waiting for its phase reads what was there before, as
on the GPU. Those writes reset the race checker's record of the locations (see
:meth:`~llmopt.interp.kernel.RaceChecker.forget`): the barriers, not ``kernel.barrier``
epochs, order them.

``mbarrier.expect_bytes`` is an arrival that also announces bytes in the phase in progress;
the copies that complete them (``tma.load``, :mod:`llmopt.interp.tma`) go through
:func:`complete_bytes`, which binds their data to the phase in progress as
``arrive_copies`` binds copies, and refuses more bytes than the phase has announced so far.
PTX lets the count of pending bytes run below zero for a while, but the order a kernel
relies on is that one thread's ``expect_bytes`` comes before its copies, and a copy beyond
the announced bytes is the sign of a missing or short ``expect_bytes``, which on the GPU
completes the phase early and lets the consumers read a slot still being filled.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from xdsl.ir import Operation, SSAValue

from llmopt.dialects.kernel import enclosing_func
from llmopt.dialects.mbarrier import (
    ArriveClusterOp,
    ArriveCopiesOp,
    BarrierAccess,
    ExpectBytesOp,
    InitOp,
    WaitOp,
)
from llmopt.dialects.wgmma import WARPGROUP
from llmopt.interp._core import InterpretError, Value, error
from llmopt.interp.kernel import KernelEvaluator, _ids
from llmopt.interp.simt import BLOCKING, Bound, InFlight, SimtEvaluator, buffer_of, simt_impl

BLOCKING.add("mbarrier.wait")


@dataclass
class _Barriers:
    """The state of one buffer of barriers (flat over its storage: block, then indices)."""

    size: int
    threads: int
    count: np.ndarray = field(init=False)
    arrived: np.ndarray = field(init=False)
    expected: np.ndarray = field(init=False)
    """Per barrier, the bytes of transactions announced in the phase in progress."""
    landed: np.ndarray = field(init=False)
    """Per barrier, the bytes of transactions completed in the phase in progress."""
    phase: np.ndarray = field(init=False)
    arrivers: list[list[int]] = field(init=False)
    """Per barrier, the global ids of the threads that arrived in the phase in progress."""
    completers: list[list[int]] = field(init=False)
    """Per barrier, those of its last completed phase."""

    def __post_init__(self) -> None:
        self.count = np.zeros(self.size, np.int64)
        self.arrived = np.zeros(self.size, np.int64)
        self.expected = np.zeros(self.size, np.int64)
        self.landed = np.zeros(self.size, np.int64)
        self.phase = np.zeros(self.size, np.int64)
        self.arrivers = [[] for _ in range(self.size)]
        self.completers = [[] for _ in range(self.size)]


_STATE: weakref.WeakKeyDictionary[KernelEvaluator, dict[int, _Barriers]] = (
    weakref.WeakKeyDictionary())


def barrier_index(ev: SimtEvaluator, op: Operation, bars: SSAValue,
                  indices: Sequence[SSAValue]) -> tuple[np.ndarray, list[Value]]:
    """The storage of the barrier buffer ``bars`` and the full (block-prefixed,
    bounds-checked) index of the barrier ``bars[indices]`` over the frame, for
    :meth:`~llmopt.interp.kernel.KernelEvaluator.lanes`."""
    kev = _ids(ev, op)
    buf = buffer_of(ev, op, bars)
    idx = ev.check_bounds(op, buf.shape[1:], [ev.env[v] for v in indices], ev.mask)
    return buf, kev.location(idx, True)


def barriers(kev: KernelEvaluator, buf: np.ndarray) -> _Barriers:
    """The state of the barrier buffer stored in ``buf``."""
    return _STATE.setdefault(kev, {}).setdefault(id(buf), _Barriers(buf.size, kev.threads[1]))


def _lanes(ev: SimtEvaluator, op: Operation) -> tuple[KernelEvaluator, _Barriers, np.ndarray,
                                                       np.ndarray, np.ndarray]:
    """The launch, the state of ``op``'s barrier buffer, and for each executing thread the
    flat location of its barrier, its global id and the storage array."""
    kev = _ids(ev, op)
    assert isinstance(op, BarrierAccess)
    buf, full = barrier_index(ev, op, op.bars, op.indices)
    coords, tids = kev.lanes(full)
    loc = np.ravel_multi_index(coords, buf.shape)
    return kev, barriers(kev, buf), loc, tids, buf


def _where(kev: KernelEvaluator, buf: np.ndarray, loc: int) -> str:
    """Words for a barrier's flat location."""
    block, *coords = (int(c) for c in np.unravel_index(loc, buf.shape))
    return f"barrier {coords} of block {block}"


@simt_impl("mbarrier.init")
def _init(ev: SimtEvaluator, op: Operation) -> None:
    """Each barrier named expects ``count`` arrivals a phase, phase 0 in progress."""
    assert isinstance(op, InitOp)
    kev, state, loc, _, buf = _lanes(ev, op)
    unique, times = np.unique(loc, return_counts=True)
    if (times > 1).any():
        raise error(InterpretError, op, f"{int(times.max())} threads initialise "
                    f"{_where(kev, buf, int(unique[np.argmax(times)]))} at once")
    state.count[loc] = op.arrivals
    state.arrived[loc] = 0
    state.expected[loc] = 0
    state.landed[loc] = 0
    state.phase[loc] = 0


def _check_initialised(op: Operation, kev: KernelEvaluator, state: _Barriers,
                       loc: np.ndarray, buf: np.ndarray, verb: str) -> None:
    """Raise unless every barrier of ``loc`` was initialised (``verb`` says what ``op``
    does there)."""
    unset = state.count[loc] == 0
    if unset.any():
        raise error(InterpretError, op, f"{verb} {_where(kev, buf, int(loc[unset][0]))} "
                    "before it was initialised")


def _arrive(op: Operation, kev: KernelEvaluator, state: _Barriers, loc: np.ndarray,
            tids: np.ndarray, buf: np.ndarray, announced: int = 0) -> None:
    """One arrival of each executing thread, announcing ``announced`` bytes of transactions
    each; a phase whose count is reached (and whose announced bytes have all landed)
    completes."""
    _check_initialised(op, kev, state, loc, buf, "arrives at")
    np.add.at(state.arrived, loc, 1)
    if announced:
        np.add.at(state.expected, loc, announced)
    for at, tid in zip(loc.tolist(), tids.tolist(), strict=True):
        state.arrivers[at].append(tid)
    touched = np.unique(loc)
    over = state.arrived[touched] > state.count[touched]
    if over.any():
        at = int(touched[over][0])
        raise error(InterpretError, op, f"{int(state.arrived[at])} arrivals at "
                    f"{_where(kev, buf, at)} in one phase, which expects "
                    f"{int(state.count[at])}")
    _complete_phases(kev, state, touched)


def _complete_phases(kev: KernelEvaluator, state: _Barriers, touched: np.ndarray) -> None:
    """Complete the phase in progress of each barrier of ``touched`` (distinct flat
    locations) whose arrivals reached its count and whose bytes all landed."""
    done = touched[(state.arrived[touched] == state.count[touched])
                   & (state.landed[touched] == state.expected[touched])]
    state.phase[done] += 1
    state.arrived[done] = 0
    state.expected[done] = 0
    state.landed[done] = 0
    for at in done.tolist():
        state.completers[at], state.arrivers[at] = state.arrivers[at], []
    if done.size:  # a phase completed: threads that wait for it may go on
        kev.happened()


def complete_bytes(op: Operation, kev: KernelEvaluator, buf: np.ndarray, loc: np.ndarray,
                   amount: int, copy: InFlight, barrier: np.ndarray) -> None:
    """Asynchronous copies complete ``amount`` bytes of transactions on each barrier of
    ``loc`` (one entry per executing thread; ``buf`` is the barrier buffer's storage): the
    elements of ``copy`` are bound to the phase in progress of their barrier ``barrier`` (a
    flat location per element) and land when a wait sees it complete; a phase whose bytes
    and arrivals are then all in completes. Raises when a barrier was not initialised or
    when more bytes complete than its phase in progress announced."""
    state = barriers(kev, buf)
    _check_initialised(op, kev, state, loc, buf, "completes transactions on")
    added = np.zeros(buf.size, np.int64)
    np.add.at(added, loc, amount)
    touched = np.unique(loc)
    over = state.landed[touched] + added[touched] > state.expected[touched]
    if over.any():
        at = int(touched[over][0])
        raise error(InterpretError, op, f"completes {int(added[at])} bytes of transactions on "
                    f"{_where(kev, buf, at)}, whose phase in progress announced "
                    f"{int(state.expected[at])} (of which {int(state.landed[at])} already "
                    "landed): an mbarrier.expect_bytes of the phase must announce every byte "
                    "before the copy is issued")
    if copy.loc.size:
        kev.copies(op).bound.append(Bound(copy, barrier, state.phase[barrier].copy()))
    state.landed += added
    _complete_phases(kev, state, touched)


@simt_impl("mbarrier.arrive")
def _arrive_now(ev: SimtEvaluator, op: Operation) -> None:
    """Each executing thread arrives."""
    kev, state, loc, tids, buf = _lanes(ev, op)
    _arrive(op, kev, state, loc, tids, buf)


@simt_impl("mbarrier.arrive_cluster")
def _arrive_cluster(ev: SimtEvaluator, op: Operation) -> None:
    """Each executing thread arrives on the barrier at the same place of block ``cta`` of
    its cluster (of ``kernel.func … cluster n``, along ``x``), for its warpgroup: a
    thread that waits for the phase is ordered after the accesses of the whole
    warpgroup."""
    assert isinstance(op, ArriveClusterOp)
    kev = _ids(ev, op)
    buf, full = barrier_index(ev, op, op.bars, op.indices)
    func = enclosing_func(op)
    n = 1 if func is None else func.cluster_size
    cta = ev.env[op.cta]
    (block, *coords, peer), tids = kev.lanes([*full, cta])
    if ((peer < 0) | (peer >= n)).any():
        raise error(InterpretError, op, f"arrives at block {int(peer.max())} of a cluster of "
                    f"{n}")
    target = block - block % n + peer
    if (target >= buf.shape[0]).any():
        raise error(InterpretError, op, f"arrives at block {int(target.max())} of a launch of "
                    f"{buf.shape[0]} (clusters of {n})")
    loc = np.ravel_multi_index((target, *coords), buf.shape)
    state = barriers(kev, buf)
    _check_initialised(op, kev, state, loc, buf, "arrives at")
    first = tids - tids % WARPGROUP  # the arrival stands for the warpgroup's threads
    for at, lead in zip(loc.tolist(), first.tolist(), strict=True):
        state.arrivers[at].extend(range(lead, lead + WARPGROUP))
    _arrive(op, kev, state, loc, tids, buf)


@simt_impl("mbarrier.expect_bytes")
def _expect_bytes(ev: SimtEvaluator, op: Operation) -> None:
    """Each executing thread arrives and announces the op's bytes in the phase in
    progress."""
    assert isinstance(op, ExpectBytesOp)
    kev, state, loc, tids, buf = _lanes(ev, op)
    _arrive(op, kev, state, loc, tids, buf, op.bytes)


@simt_impl("mbarrier.arrive_copies")
def _arrive_copies(ev: SimtEvaluator, op: Operation) -> None:
    """Each executing thread's copies in flight are bound to the phase in progress of its
    barrier, and the thread arrives."""
    assert isinstance(op, ArriveCopiesOp)
    kev, state, loc, tids, buf = _lanes(ev, op)
    barrier_of = np.full(kev.gtid.size, -1, np.int64)
    barrier_of[tids] = loc
    active = barrier_of >= 0
    copies = kev.copies(op)
    for copy in copies.take(active):
        at = barrier_of[copy.tids]
        copies.bound.append(Bound(copy, at, state.phase[at].copy()))
    _arrive(op, kev, state, loc, tids, buf)


@simt_impl("mbarrier.wait")
def _wait(ev: SimtEvaluator, op: Operation) -> None:
    """Each executing thread's phase of the given parity must have completed (the barrier's
    phase in progress has the other parity); the copies bound to the completed phases of
    the barriers waited for land."""
    assert isinstance(op, WaitOp)
    kev, state, loc, _, buf = _lanes(ev, op)
    parity = np.broadcast_to(ev.env[op.parity], kev.frame)
    parity = parity.reshape(-1) if ev.mask is None else parity[
        np.broadcast_to(ev.mask, kev.frame)]
    _check_initialised(op, kev, state, loc, buf, "waits at")
    blocked = state.phase[loc] % 2 == parity % 2
    while blocked.any() and ev.wait_for_others():  # other tasks run, and something happened
        blocked = state.phase[loc] % 2 == parity % 2
    if blocked.any():
        i = int(np.argmax(blocked))
        at = int(loc[i])
        pending = (f", {int(state.landed[at])} of {int(state.expected[at])} announced bytes"
                   if state.expected[at] else "")
        raise error(InterpretError, op, f"waits for the phase of parity {int(parity[i]) % 2} "
                    f"of {_where(kev, buf, at)}, which has not completed ({int(state.phase[at])} "
                    f"phases done, {int(state.arrived[at])} of {int(state.count[at])} arrivals"
                    f"{pending} in the next): no thread before it in program order, nor one of "
                    "a branch running beside it, completes it")
    if kev.races is not None:
        kev.races.release(np.asarray([tid for at in np.unique(loc).tolist()
                                      for tid in state.completers[at]], np.int64))
    copies = kev.copies(op)
    waited = np.zeros(buf.size, np.bool_)
    waited[loc] = True
    kept: list[Bound] = []
    for bound in copies.bound:
        lands = waited[bound.barrier] & (bound.phase < state.phase[bound.barrier])
        if not lands.any():
            kept.append(bound)
            continue
        landed = bound.copy.subset(lands)
        if kev.races is not None:
            kev.races.forget(landed.buffer, landed.loc)
        landed.write()
        if not lands.all():
            rest = ~lands
            kept.append(Bound(bound.copy.subset(rest), bound.barrier[rest], bound.phase[rest]))
    copies.bound = kept
