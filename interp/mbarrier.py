"""Interpreter implementations of the ``mbarrier`` dialect (Kernel IR).

Each barrier of a launch keeps three numbers: the arrivals a phase expects (0 until
``mbarrier.init``), the arrivals of the phase in progress, and how many phases have
completed. The evaluator runs every thread of a block one op after another, so a wait can
only be satisfied by arrivals that came before it in that order — or, in a branch of an
``scf.if`` whose branches run as cooperating tasks (:mod:`llmopt.interp._tasks`; a
producer's and its consumers' branches), by arrivals of the other branch, which runs while
this one waits. A wait for a phase that no thread can complete is reported, as is an
arrival beyond a phase's count.

``mbarrier.arrive_copies`` takes the executing threads' asynchronous copies out of their
groups and binds them to the phase their arrival counts towards; they are written when a
thread's ``mbarrier.wait`` finds that phase complete (or at the end of the launch), so a
consumer that reads a slot without waiting for its phase reads what was there before, as
on the GPU. Those writes reset the race checker's record of the locations (see
:meth:`~llmopt.interp.kernel.RaceChecker.forget`): the barriers, not ``kernel.barrier``
epochs, order them.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np
from xdsl.ir import Operation

from llmopt.dialects.mbarrier import ArriveCopiesOp, BarrierAccess, InitOp, WaitOp
from llmopt.interp._core import InterpretError, error
from llmopt.interp.kernel import KernelEvaluator, _ids
from llmopt.interp.simt import BLOCKING, Bound, SimtEvaluator, buffer_of, simt_impl

BLOCKING.add("mbarrier.wait")


@dataclass
class _Barriers:
    """The state of one buffer of barriers (flat over its storage: block, then indices)."""

    size: int
    threads: int
    count: np.ndarray = field(init=False)
    arrived: np.ndarray = field(init=False)
    phase: np.ndarray = field(init=False)
    arrivers: list[list[int]] = field(init=False)
    """Per barrier, the global ids of the threads that arrived in the phase in progress."""
    completers: list[list[int]] = field(init=False)
    """Per barrier, those of its last completed phase."""

    def __post_init__(self) -> None:
        self.count = np.zeros(self.size, np.int64)
        self.arrived = np.zeros(self.size, np.int64)
        self.phase = np.zeros(self.size, np.int64)
        self.arrivers = [[] for _ in range(self.size)]
        self.completers = [[] for _ in range(self.size)]


_STATE: weakref.WeakKeyDictionary[KernelEvaluator, dict[int, _Barriers]] = (
    weakref.WeakKeyDictionary())


def _lanes(ev: SimtEvaluator, op: Operation) -> tuple[KernelEvaluator, _Barriers, np.ndarray,
                                                       np.ndarray, np.ndarray]:
    """The launch, the state of ``op``'s barrier buffer, and for each executing thread the
    flat location of its barrier, its global id and the storage array."""
    kev = _ids(ev, op)
    assert isinstance(op, BarrierAccess)
    buf = buffer_of(ev, op, op.bars)
    idx = ev.check_bounds(op, buf.shape[1:], [ev.env[v] for v in op.indices], ev.mask)
    coords, tids = kev.lanes(kev.location(idx, True))
    loc = np.ravel_multi_index(coords, buf.shape)
    state = _STATE.setdefault(kev, {}).setdefault(id(buf), _Barriers(buf.size, kev.threads[1]))
    return kev, state, loc, tids, buf


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
    state.phase[loc] = 0


def _arrive(op: Operation, kev: KernelEvaluator, state: _Barriers, loc: np.ndarray,
            tids: np.ndarray, buf: np.ndarray) -> None:
    """One arrival of each executing thread; a phase whose count is reached completes."""
    unset = state.count[loc] == 0
    if unset.any():
        raise error(InterpretError, op, f"arrives at {_where(kev, buf, int(loc[unset][0]))} "
                    "before it was initialised")
    np.add.at(state.arrived, loc, 1)
    for at, tid in zip(loc.tolist(), tids.tolist(), strict=True):
        state.arrivers[at].append(tid)
    touched = np.unique(loc)
    over = state.arrived[touched] > state.count[touched]
    if over.any():
        at = int(touched[over][0])
        raise error(InterpretError, op, f"{int(state.arrived[at])} arrivals at "
                    f"{_where(kev, buf, at)} in one phase, which expects "
                    f"{int(state.count[at])}")
    done = touched[state.arrived[touched] == state.count[touched]]
    state.phase[done] += 1
    state.arrived[done] = 0
    for at in done.tolist():
        state.completers[at], state.arrivers[at] = state.arrivers[at], []
    if done.size:  # a phase completed: threads that wait for it may go on
        kev.happened()


@simt_impl("mbarrier.arrive")
def _arrive_now(ev: SimtEvaluator, op: Operation) -> None:
    """Each executing thread arrives."""
    kev, state, loc, tids, buf = _lanes(ev, op)
    _arrive(op, kev, state, loc, tids, buf)


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
    unset = state.count[loc] == 0
    if unset.any():
        raise error(InterpretError, op, f"waits at {_where(kev, buf, int(loc[unset][0]))} "
                    "before it was initialised")
    blocked = state.phase[loc] % 2 == parity % 2
    while blocked.any() and ev.wait_for_others():  # other tasks run, and something happened
        blocked = state.phase[loc] % 2 == parity % 2
    if blocked.any():
        i = int(np.argmax(blocked))
        at = int(loc[i])
        raise error(InterpretError, op, f"waits for the phase of parity {int(parity[i]) % 2} "
                    f"of {_where(kev, buf, at)}, which has not completed ({int(state.phase[at])} "
                    f"phases done, {int(state.arrived[at])} of {int(state.count[at])} arrivals "
                    "in the next): no thread before it in program order, nor one of a "
                    "branch running beside it, completes it")
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
