"""Branches of a divergent ``scf.if`` that wait for each other, run as cooperating tasks.

The evaluator runs the threads of a launch one op after another, all at once, and a
divergent ``scf.if`` runs its then-branch for its threads before its else-branch starts.
Threads that hand work to each other through ``mbarrier`` phases cannot always run so: in a
warp-specialised kernel whose producer and consumers each run a branch of their own to the
end of the kernel, the consumers wait for phases that only the producer's later ops
complete. So an ``scf.if`` whose branches hold an op that may wait (:data:`BLOCKING`) runs
each branch as a *task*, under its own mask:

* one task runs at a time, the then-branch first; a task runs until it ends or waits for
  something that has not happened (a phase that has not completed);
* then another task runs: one that has not waited yet, else one that waits for something
  since which an *event* happened (:meth:`Tasks.happened`: an arrival); the waiting task
  resumes, and looks again, once it is picked so;
* after an event a task that waits runs at once, before the task that caused the event
  goes on: the consumers of a slot read it as soon as it is full, so a producer that
  refills it without waiting for its release races with their reads;
* when no task can go on, the wait fails as it would alone (its op reports it); an error in
  a task ends its sibling tasks and is raised where the ``scf.if`` runs.

A program in which every wait is satisfied by ops before it in program order runs exactly
as it did without tasks. Each task is a Python thread that only runs while it holds the
turn, so the interpreter's state (the values, buffers, copies in flight and race records)
is shared and never touched by two tasks at once; the evaluator's mask and frame are saved
and restored at every switch.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from llmopt.interp._core import Value
    from llmopt.interp.simt import SimtEvaluator

BLOCKING: set[str] = set()
"""Names of the ops that may wait for other threads of the launch (each op's
interpretation registers its name, e.g. ``mbarrier.wait``)."""

Branch = tuple["np.ndarray | None", Callable[[], tuple["Value", ...]]]
"""A branch to run as a task: its mask and a function that runs it and returns what it
yields."""


class _Cancelled(BaseException):
    """Unwinds a task whose sibling failed (caught where the task ends)."""


class _Task:
    """A branch run as a task (or the evaluator's own thread, the root task)."""

    def __init__(self, parent: _Task | None, mask: np.ndarray | None,
                 frame: tuple[int, ...]) -> None:
        self.parent = parent
        self.mask = mask
        self.frame = frame
        self.children = 0
        """Child tasks that have not ended (the task waits for them while it is not 0)."""
        self.waiting_since: int | None = None
        """The event count when the task began to wait (``None``: it does not wait)."""
        self.done = False
        self.failure: BaseException | None = None
        """The first error raised by one of its child tasks."""
        self.result: tuple[Value, ...] = ()

    @property
    def cancelled(self) -> bool:
        """Whether a task that shares an ancestor's child tasks with this one failed."""
        task = self.parent
        while task is not None:
            if task.failure is not None:
                return True
            task = task.parent
        return False


class Tasks:
    """The tasks of one evaluator (see the module docstring)."""

    def __init__(self, ev: SimtEvaluator) -> None:
        self.ev = ev
        self.turn = threading.Condition()
        self.current = _Task(None, ev.mask, ev.frame)
        """The task that holds the turn."""
        self.tasks = [self.current]
        self.events = 0
        """How many events happened (see :meth:`happened`)."""

    def happened(self) -> None:
        """Something a waiting task may wait for happened (an mbarrier arrival): a task
        that waits runs now, if there is one, and this one after it."""
        self.events += 1
        me = self.current
        woken = [t for t in self._live(me) if t.waiting_since is not None
                 and t.waiting_since < self.events and not t.cancelled]
        if woken:
            self._switch(me, woken[0])

    def run(self, branches: Sequence[Branch]) -> list[tuple[Value, ...]]:
        """Run ``branches`` as tasks, the first first; return what each yields once all
        have ended, or raise the first error one of them raised."""
        parent = self.current
        ev = self.ev
        children = [_Task(parent, mask, ev.frame) for mask, _ in branches]
        parent.children = len(children)
        at = self.tasks.index(parent) + 1
        self.tasks[at:at] = children
        for child, (_, body) in zip(children, branches, strict=True):
            context = contextvars.copy_context()  # numpy's error state, among others
            threading.Thread(target=context.run, args=(self._main, child, body),
                             daemon=True).start()
        try:
            self._switch(parent, children[0])
        finally:
            self.tasks = [t for t in self.tasks if t not in children]
        failure, parent.failure = parent.failure, None
        if failure is not None:
            raise failure
        return [child.result for child in children]

    def wait(self) -> bool:
        """The running task waits for an event: the other tasks run until one happens.
        ``True`` when one happened (the caller looks again whether what it waits for has
        happened, and may wait again); ``False`` when no task can go on."""
        me = self.current
        since = me.waiting_since = self.events
        picked = self._next(me)
        if picked is not None:
            self._switch(me, picked)
        me.waiting_since = None
        return self.events > since

    def _main(self, task: _Task, body: Callable[[], tuple[Value, ...]]) -> None:
        """A task's thread: wait for the turn, run the branch, hand the turn on."""
        with self.turn:
            while self.current is not task:
                self.turn.wait()
        ev = self.ev
        ev.mask, ev.frame = task.mask, task.frame
        parent = task.parent
        assert parent is not None
        try:
            if task.cancelled:
                raise _Cancelled
            task.result = body()
        except _Cancelled:
            pass
        except BaseException as exc:  # raised where the scf.if runs, after the siblings end
            if parent.failure is None:
                parent.failure = exc
        finally:
            task.done = True
            parent.children -= 1
            picked = self._next(task)
            if picked is None:  # the others all wait, with nothing new: one of them fails
                picked = self._live(task)[0]
            with self.turn:
                self.current = picked
                self.turn.notify_all()

    def _live(self, me: _Task) -> list[_Task]:
        """The tasks other than ``me`` that may run (not ended, not waiting for child
        tasks), round from the one after ``me``."""
        at = self.tasks.index(me)
        order = self.tasks[at + 1:] + self.tasks[:at]
        return [t for t in order if not t.done and t.children == 0]

    def _next(self, me: _Task) -> _Task | None:
        """The task to run after ``me``: a cancelled one (to end it), else one that does not
        wait, else one that waits since before the last event; ``None`` if there is none."""
        live = self._live(me)
        cancelled = [t for t in live if t.cancelled]
        ready = [t for t in live if t.waiting_since is None]
        woken = [t for t in live if t.waiting_since is not None
                 and t.waiting_since < self.events]
        for tasks in (cancelled, ready, woken):
            if tasks:
                return tasks[0]
        return None

    def _switch(self, me: _Task, to: _Task) -> None:
        """Hand the turn from ``me`` to ``to``; return once ``me`` holds it again."""
        ev = self.ev
        me.mask, me.frame = ev.mask, ev.frame
        with self.turn:
            self.current = to
            self.turn.notify_all()
            while self.current is not me:
                self.turn.wait()
        ev.mask, ev.frame = me.mask, me.frame
        if me.cancelled:
            raise _Cancelled
