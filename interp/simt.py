"""The vectorised evaluator shared by Loop, Tile and Kernel IR.

A region runs *once* for all the points it stands for. Every value is a numpy array (or
scalar) that broadcasts against the current **frame**: a tuple of axis extents. At Tile and
Kernel IR the frame starts as ``(blocks, threads_per_block)`` (one axis per block, one per
thread of a block); at Loop IR it starts empty. Every free loop (``loop.for``), reduce loop
(``loop.reduce``), strided ``tile.forall`` and per-thread ``tile.coop_reduce`` fold
*prepends* one axis for its induction variable, so values defined outside a loop broadcast
against values inside it with no reshaping (numpy aligns shapes on the right).

A **mask** (a boolean array broadcastable to the frame, or ``None`` for "all active") says
which points really execute: strided assignments whose last round has fewer points than
threads, ``scf.if`` branches and ``scf.for`` loops with per-thread bounds. Values in masked-off
lanes are computed but never stored and never make a load fail.

Running an axis of all its iterations at once is exact for the loops it is used for: free
loops have independent iterations, and reduce loops fold their yielded values strictly left
to right afterwards. When a frame would grow too large the axis is processed in chunks, in
order, which is equally exact.

**Asynchronous copies** (``tile.async_copy``/``kernel.async_copy``, CUDA's ``cp.async``) are
modelled so that a missing or misplaced wait gives wrong numbers, as on the GPU:

* the copy reads its source when it is issued and keeps the values *in flight*, with the
  destination locations and the global id of the thread that issued each element; the
  destination is not touched;
* ``async_commit`` closes each executing thread's open group: its in-flight elements get the
  thread's next group number;
* ``async_wait N`` writes, in issue order, the elements of every executing thread whose group
  is older than that thread's ``N`` newest committed groups, and forgets them; uncommitted
  elements stay in flight;
* at the end of the launch whatever is still in flight, committed or not, is written (the
  GPU completes a thread's copies before the kernel ends).

**Threads that wait for each other** (``mbarrier`` phases): an ``scf.if`` whose branches
hold such a wait runs them as cooperating tasks, switching from one to the other where a
task waits for something only the other does (see :mod:`llmopt.interp._tasks`).

Groups are counted per thread, so commits and waits under a mask (in an ``scf.if``, or in a
loop with per-thread bounds) are exact: a masked-off thread neither commits nor waits. Lanes
that one thread runs *at once* — the rounds of a ``tile.forall`` and the iterations of a free
``loop.for`` at Tile IR, which the GPU runs one after another — share that thread's counter
and commit or wait once per executed op; at Kernel IR every such loop is an ``scf.for`` and
this cannot happen.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Block, Operation, SSAValue

from llmopt.interp._core import (
    InterpretError,
    OutOfBoundsError,
    UnsupportedOpError,
    Value,
    error,
    fold_leading,
    identity,
)
from llmopt.interp._tasks import BLOCKING, Branch, Tasks
from llmopt.interp.scalar import SCALAR_IMPLS

SimtImpl = Callable[["SimtEvaluator", Operation], None]
"""``impl(evaluator, op)``: interpret ``op``, binding its results in ``evaluator.env``."""

SIMT_IMPLS: dict[str, SimtImpl] = {}
"""Op name → interpretation inside loop nests and kernels (besides the scalar ops)."""

FRAME_BUDGET = 1 << 22
"""Largest frame (in points) a loop axis may grow to before it is processed in chunks."""


def simt_impl(*names: str) -> Callable[[SimtImpl], SimtImpl]:
    """Register an interpretation for ops inside loop nests and kernels."""

    def register(fn: SimtImpl) -> SimtImpl:
        """Add ``fn`` to the table."""
        for name in names:
            SIMT_IMPLS[name] = fn
        return fn

    return register


@dataclass
class InFlight:
    """Elements of one asynchronous copy op that are not written to their destination yet."""

    op: Operation
    """The ``async_copy`` op that issued them."""
    buffer: np.ndarray
    """The destination storage."""
    shared: bool
    """Whether ``buffer`` is a Kernel-IR shared buffer (for race checks)."""
    loc: np.ndarray
    """Flat (C-order) locations in ``buffer``, one per element."""
    values: np.ndarray
    """The values read from the source when the copy was issued."""
    tids: np.ndarray
    """The global id (``block * threads_per_block + thread``) of the issuing thread."""
    group: np.ndarray
    """The issuing thread's group number of each element; ``-1`` until committed."""

    def subset(self, keep: np.ndarray) -> InFlight:
        """The elements selected by the boolean array ``keep``."""
        return InFlight(self.op, self.buffer, self.shared, self.loc[keep], self.values[keep],
                        self.tids[keep], self.group[keep])

    def write(self) -> None:
        """Write the elements to their destination, in order."""
        self.buffer[np.unravel_index(self.loc, self.buffer.shape)] = self.values


@dataclass
class Bound:
    """Elements in flight that complete on an mbarrier phase (``mbarrier.arrive_copies``)
    instead of a wait of their thread."""

    copy: InFlight
    barrier: np.ndarray
    """Per element, the flat location of its barrier (in the barrier buffer's storage)."""
    phase: np.ndarray
    """Per element, the phase of that barrier the thread's arrival counts towards."""


class AsyncCopies:
    """The asynchronous copies of one launch (see the module docstring)."""

    def __init__(self, threads: int) -> None:
        """No copies; ``threads`` threads in the launch, none of which has committed."""
        self.committed = np.zeros(threads, np.int64)
        """Per global thread id, how many groups the thread has committed."""
        self.copies: list[InFlight] = []
        """Elements in flight, in issue order."""
        self.bound: list[Bound] = []
        """Elements in flight bound to mbarrier phases, in the order of their arrivals."""

    def _remove(self, picks: Callable[[InFlight], np.ndarray]) -> list[InFlight]:
        """Remove and return, in issue order, the elements in flight where ``picks`` (a
        boolean per element of a copy) is true."""
        taken: list[InFlight] = []
        kept: list[InFlight] = []
        for copy in self.copies:
            mine = picks(copy)
            if mine.all():
                taken.append(copy)
            elif mine.any():
                taken.append(copy.subset(mine))
                kept.append(copy.subset(~mine))
            else:
                kept.append(copy)
        self.copies = kept
        return taken

    def take(self, active: np.ndarray) -> list[InFlight]:
        """Remove and return, in issue order, every element in flight (committed or not) of
        the threads where ``active`` (a boolean per global thread id) is true."""
        return self._remove(lambda copy: active[copy.tids])

    def issue(self, copy: InFlight) -> None:
        """Add the elements of one executed copy op to their threads' open groups."""
        if copy.loc.size:
            self.copies.append(copy)

    def commit(self, active: np.ndarray) -> None:
        """The threads where ``active`` (a boolean per global thread id) close their open
        group."""
        for copy in self.copies:
            closing = (copy.group < 0) & active[copy.tids]
            if closing.any():
                copy.group[closing] = self.committed[copy.tids[closing]]
        self.committed[active] += 1

    def complete(self, active: np.ndarray | None, pending: int = 0) -> list[InFlight]:
        """Remove and return, in issue order, the elements that a wait leaving ``pending``
        groups in flight completes for the threads where ``active`` is true; with ``active``
        ``None``, every element in flight (the end of the launch)."""
        if active is None:
            done = self.copies + [bound.copy for bound in self.bound]
            self.copies, self.bound = [], []
            return done
        return self._remove(lambda copy: (copy.group >= 0) & active[copy.tids]
                            & (copy.group < self.committed[copy.tids] - pending))


def and_masks(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    """The conjunction of two masks (``None`` is "all active")."""
    if a is None:
        return b
    if b is None:
        return a
    return a & b


class SimtEvaluator:
    """Interprets a region for all points of a frame at once (see the module docstring).

    ``threads`` is ``(blocks, threads_per_block)`` for Tile and Kernel IR (the last two
    frame axes), ``None`` for Loop IR.
    """

    def __init__(self, env: dict[SSAValue, Value], threads: tuple[int, int] | None) -> None:
        """Start with the launch frame and no mask."""
        self.env = env
        self.mask: np.ndarray | None = None
        self.threads = threads
        self.frame: tuple[int, ...] = threads if threads is not None else ()
        self.impls = SIMT_IMPLS
        self.owned: dict[int, list[np.ndarray]] = {}
        """Buffers with one copy per point of the frame's leading axes (``tile.alloc``): id →
        the index arrays of those axes, prepended to every access."""
        self.async_copies: AsyncCopies | None = None
        """The asynchronous copies in flight (created by the first async op)."""
        self.tasks: Tasks | None = None
        """Branches running as cooperating tasks (created by the first ``scf.if`` that runs
        its branches so; see :mod:`llmopt.interp._tasks`)."""
        self._may_wait: dict[Operation, bool] = {}

    # --- running ops ----------------------------------------------------------------------

    def run_block(self, block: Block) -> tuple[Operation, tuple[Value, ...]] | None:
        """Run ``block``'s ops; return its terminator (if any) with its operand values."""
        env = self.env
        impls = self.impls
        for op in block.ops:
            impl = impls.get(op.name)
            if impl is not None:
                impl(self, op)
                continue
            scalar = SCALAR_IMPLS.get(op.name)
            if scalar is not None:
                operands = [env[v] for v in op.operands]
                try:
                    out = scalar(op, *operands)
                except InterpretError:
                    raise
                except Exception as exc:
                    raise error(InterpretError, op, f"{type(exc).__name__}: {exc}") from exc
                if len(op.results) == 1:
                    env[op.results[0]] = out
                else:
                    for res, val in zip(op.results, out, strict=True):
                        env[res] = val
                continue
            if op.name in TERMINATORS:
                return op, tuple(env[v] for v in op.operands)
            raise error(UnsupportedOpError, op, "no interpretation for this op inside a "
                        "loop nest or kernel")
        return None

    def run_region_block(self, block: Block) -> tuple[Value, ...]:
        """Run ``block`` and return the values its terminator yields (``()`` if none)."""
        end = self.run_block(block)
        return () if end is None else end[1]

    # --- threads that wait for each other -------------------------------------------------

    def may_wait(self, op: Operation) -> bool:
        """Whether an op nested in ``op`` may wait for other threads (``BLOCKING``)."""
        found = self._may_wait.get(op)
        if found is None:
            found = self._may_wait[op] = any(o.name in BLOCKING for o in op.walk())
        return found

    def run_tasks(self, branches: Sequence[Branch]) -> list[tuple[Value, ...]]:
        """Run ``branches`` (each a mask and a function running it) as cooperating tasks;
        what each yields (see :mod:`llmopt.interp._tasks`)."""
        if self.tasks is None:
            self.tasks = Tasks(self)
        return self.tasks.run(branches)

    def wait_for_others(self) -> bool:
        """The executing threads wait for what other threads do: the other tasks run until
        something happens. ``False`` when nothing can (no other task, or all wait)."""
        return self.tasks is not None and self.tasks.wait()

    def happened(self) -> None:
        """Something threads may wait for happened (an mbarrier arrival)."""
        if self.tasks is not None:
            self.tasks.happened()

    # --- frames ---------------------------------------------------------------------------

    @property
    def frame_size(self) -> int:
        """The number of points in the frame."""
        return math.prod(self.frame)

    def chunk(self, extent: int) -> int:
        """How many iterations of a new axis of ``extent`` to run at once."""
        return max(1, min(extent, FRAME_BUDGET // max(1, self.frame_size)))

    def axis(self, values: np.ndarray) -> np.ndarray:
        """``values`` (1-D) as a new leading axis of the current frame."""
        return values.reshape((values.shape[0],) + (1,) * len(self.frame))

    def push(self, extent: int) -> tuple[int, ...]:
        """Prepend an axis of ``extent`` to the frame; returns the previous frame."""
        saved = self.frame
        self.frame = (extent,) + saved
        return saved

    def reduce_axis(self, op: Operation, kind: str, body: Block, iv: SSAValue, extent: int,
                    dtype: np.dtype, index: Callable[[np.ndarray], Value] | None = None,
                    mask: Callable[[np.ndarray], np.ndarray | None] | None = None) -> Value:
        """Fold ``body``'s yielded value over a new leading axis of ``extent`` iterations.

        Iteration ``s`` binds ``iv`` to ``index(s)`` (default ``s``); lanes where ``mask(s)``
        or the enclosing mask is false contribute the identity. The fold runs strictly in
        order of ``s`` (chunk by chunk when the frame is large). The result broadcasts against
        the outer frame.
        """
        step = self.chunk(extent)
        acc: Value | None = None
        ident = identity(kind, dtype)
        saved_mask = self.mask
        for start in range(0, extent, step):
            s = self.axis(np.arange(start, min(extent, start + step)))
            saved = self.push(s.shape[0])
            try:
                self.env[iv] = s if index is None else index(s)
                lane_mask = None if mask is None else mask(s)
                self.mask = and_masks(saved_mask, lane_mask)
                (value,) = self.run_region_block(body)
            finally:
                self.frame = saved
                self.mask = saved_mask
            value = np.asarray(value, dtype=dtype)
            full = (s.shape[0],) + tuple(1 for _ in saved)
            value = value.reshape((1,) * (len(full) - value.ndim) + value.shape)
            active = and_masks(saved_mask, lane_mask)
            if active is not None:
                value = np.where(active, value, ident)
            shape = np.broadcast_shapes(value.shape, full)
            value = np.broadcast_to(value, shape)
            acc = fold_leading(kind, value, acc)
        assert acc is not None, f"{op.name}: empty reduction"
        return acc

    # --- memory ---------------------------------------------------------------------------

    def check_bounds(self, op: Operation, shape: Sequence[int], indices: Sequence[Value],
                     mask: np.ndarray | None) -> list[Value]:
        """Raise :class:`OutOfBoundsError` if an active lane indexes outside ``shape``;
        return the indices clamped into range (masked-off lanes may hold anything)."""
        out: list[Value] = []
        for dim, (idx, extent) in enumerate(zip(indices, shape, strict=True)):
            if np.ndim(idx) == 0:
                if not 0 <= int(idx) < extent:
                    if mask is None or np.any(mask):
                        raise self.bounds_error(op, dim, idx, extent, None, mask)
                    idx = 0
                out.append(idx)
                continue
            bad = (idx < 0) | (idx >= extent)
            if bad.any():
                active_bad = bad if mask is None else bad & mask
                if active_bad.any():
                    raise self.bounds_error(op, dim, idx, extent, active_bad, mask)
                idx = np.clip(idx, 0, extent - 1)
            out.append(idx)
        return out

    def bounds_error(self, op: Operation, dim: int, idx: Value, extent: int,
                     bad: np.ndarray | None, mask: np.ndarray | None) -> OutOfBoundsError:
        """An out-of-bounds diagnostic naming ``op`` and the first offending point."""
        if bad is None:
            value = int(idx)
            point = ""
        else:
            full = np.broadcast_to(bad, np.broadcast_shapes(bad.shape, self.frame))
            first = np.unravel_index(int(np.argmax(full)), full.shape)
            value = int(np.broadcast_to(idx, full.shape)[first])
            point = f" at {self.describe_point(first)}"
        exc = error(OutOfBoundsError, op,
                    f"index {value} is out of bounds for dimension {dim} of extent {extent}"
                    f"{point}")
        return exc  # type: ignore[return-value]

    def describe_point(self, point: tuple[int, ...]) -> str:
        """Words for a point of the frame (the thread, and loop iteration numbers)."""
        extra = len(point) - len(self.frame)
        point = point[extra:] if extra > 0 else point
        parts: list[str] = []
        if self.threads is not None and len(point) >= 2:
            blocks, threads = self.threads
            block, thread = point[-2], point[-1]
            parts.append(f"block {block}, thread {thread}")
            point = point[:-2]
        if point:
            # Axes are prepended as loops open: the outermost loop's index comes last.
            parts.append("iteration " + str([int(i) for i in reversed(point)])
                         + " of the enclosing loops (outermost first)")
        return ", ".join(parts) or "the only point"

    def gather(self, op: Operation, buffer: np.ndarray, indices: Sequence[Value]) -> Value:
        """``buffer[indices]`` for every active lane (bounds checked under the mask)."""
        owners = self.owned.get(id(buffer), [])
        idx = self.check_bounds(op, buffer.shape[len(owners):], indices, self.mask)
        return buffer[(*owners, *idx)]

    def scatter(self, op: Operation, buffer: np.ndarray, indices: Sequence[Value],
                value: Value) -> None:
        """``buffer[indices] = value`` for every active lane (bounds checked under the mask)."""
        mask = self.mask
        owners = self.owned.get(id(buffer), [])
        idx = [*owners, *self.check_bounds(op, buffer.shape[len(owners):], indices, mask)]
        if not idx:  # a 0-d buffer: every active lane writes its one element
            written = np.asarray(value)
            if mask is not None:
                written, sel = np.broadcast_arrays(written, mask)
                written = written[sel]
            if written.size:  # the last lane wins, as repeated fancy indices do
                buffer[()] = written.ravel()[-1]
            return
        if mask is None:
            arrays = np.broadcast_arrays(*idx, value)
            buffer[tuple(arrays[:-1])] = arrays[-1]
            return
        arrays = np.broadcast_arrays(*idx, value, mask)
        sel = arrays[-1]
        buffer[tuple(a[sel] for a in arrays[:-2])] = arrays[-2][sel]


    # --- asynchronous copies ----------------------------------------------------------------

    def copies(self, op: Operation) -> AsyncCopies:
        """The launch's asynchronous-copy state (``op`` needs a launch shape)."""
        if self.threads is None:
            raise error(InterpretError, op, "needs a launch shape: it must sit in a kernel")
        if self.async_copies is None:
            self.async_copies = AsyncCopies(self.threads[0] * self.threads[1])
        return self.async_copies

    def thread_ids(self) -> np.ndarray:
        """The global thread id of every lane, shaped ``(blocks, threads)``."""
        assert self.threads is not None
        blocks, threads = self.threads
        return np.arange(blocks * threads).reshape(blocks, threads)

    def active_threads(self) -> np.ndarray:
        """A boolean per global thread id: whether the thread executes the current op (in
        at least one lane, see the module docstring)."""
        assert self.threads is not None
        size = self.threads[0] * self.threads[1]
        if self.mask is None:
            return np.ones(size, np.bool_)
        return np.broadcast_to(self.mask, self.frame).reshape(-1, size).any(axis=0)

    def copy_elements(self, op: Operation, buffer: np.ndarray, prefix: Sequence[Value],
                      indices: Sequence[Value], typ: MemRefType, count: int) -> list[Value]:
        """The full storage indices of the ``count`` elements an asynchronous copy touches in
        ``buffer`` from ``indices`` (its first element) on, along a new leading axis of
        extent ``count``; ``prefix`` are the storage axes in front of the buffer's own (the
        block of a shared buffer, the owners of a ``tile.alloc``). Every active lane's
        elements must be in bounds, and its first element's offset (from the strides and
        offset of ``typ``) a multiple of ``count``."""
        step = np.arange(count).reshape((count,) + (1,) * len(self.frame))
        last = np.asarray(indices[-1]) + step
        shape = buffer.shape[len(prefix):]
        checked = self.check_bounds(op, shape, [*indices[:-1], last], self.mask)
        if count > 1:
            found = self.misaligned(typ, indices, count)
            if found is not None:
                at, where = found
                raise error(InterpretError, op, f"misaligned copy: element offset {at} is not "
                            f"a multiple of {count} (the copy moves {count} elements) at "
                            f"{where}")
        return [*prefix, *checked]

    def misaligned(self, typ: MemRefType, indices: Sequence[Value], multiple: int
                   ) -> tuple[int, str] | None:
        """The element offset (from the strides and offset of ``typ``) of ``indices`` at
        the first active point where it is no multiple of ``multiple``, and that point
        described; ``None`` where every one is (or the layout is not static)."""
        strides, offset = typ.get_strides(), typ.get_offset()
        if strides is None or offset is None or None in strides:
            return None
        first: Value = int(offset)
        for idx, stride in zip(indices, strides, strict=True):
            first = first + np.asarray(idx) * int(stride)  # type: ignore[arg-type]
        bad = np.asarray(first % multiple != 0)
        if self.mask is not None:
            bad = bad & self.mask
        if not bad.any():
            return None
        full = np.broadcast_to(bad, np.broadcast_shapes(bad.shape, self.frame))
        point = np.unravel_index(int(np.argmax(full)), full.shape)
        return int(np.broadcast_to(first, full.shape)[point]), self.describe_point(point)

    def check_prefetch(self, op: Operation, shape: Sequence[int], indices: Sequence[Value],
                       typ: MemRefType, count: int) -> None:
        """A prefetch changes no value; check what the GPU needs of it: every active lane's
        ``count`` elements from ``indices`` on lie inside ``shape`` and start at a multiple
        of :data:`~llmopt.dialects.kernel.PREFETCH_GRANULE` bytes."""
        from llmopt.dialects.kernel import PREFETCH_GRANULE

        last = np.asarray(indices[-1]) + (count - 1)
        self.check_bounds(op, shape, [*indices[:-1], indices[-1]], self.mask)
        self.check_bounds(op, shape, [*indices[:-1], last], self.mask)
        elements = PREFETCH_GRANULE // (typ.element_type.bitwidth // 8)  # type: ignore[attr-defined]
        found = self.misaligned(typ, indices, max(elements, 1))
        if found is not None:
            at, where = found
            raise error(InterpretError, op, f"misaligned prefetch: element offset {at} is not "
                        f"at a multiple of {PREFETCH_GRANULE} bytes at {where}")

    def copy_lanes(self, arrays: Sequence[Value], count: int
                   ) -> tuple[list[np.ndarray], np.ndarray]:
        """``arrays`` (from :meth:`copy_elements`) and the global thread ids, as flat arrays
        over the active lanes' elements."""
        shape = (count, *self.frame)
        full = [np.broadcast_to(a, shape) for a in (*arrays, self.thread_ids())]
        if self.mask is None:
            flat = [a.reshape(-1) for a in full]
        else:
            sel = np.broadcast_to(self.mask, shape)
            flat = [a[sel] for a in full]
        return flat[:-1], flat[-1]

    def finish_copies(self) -> list[InFlight]:
        """Everything still in flight at the end of the launch (to be written)."""
        if self.async_copies is None:
            return []
        return self.async_copies.complete(None)


TERMINATORS = frozenset(
    {"loop.yield", "tile.yield", "scf.yield", "kernel.return", "prim.yield"}
)
"""Ops that end a region and hand values to the op that owns it."""


# --- scf: sequential loops and conditionals -----------------------------------------------------


@simt_impl("scf.for")
def _scf_for(ev: SimtEvaluator, op: Operation) -> None:
    """A sequential loop; with per-thread bounds, a masked loop that runs while any lane is
    active (lanes whose own loop has ended keep their loop-carried values)."""
    env = ev.env
    lb, ub, step = (env[v] for v in op.operands[:3])
    carried = [env[v] for v in op.operands[3:]]
    body = op.regions[0].block
    iv_arg, iter_args = body.args[0], body.args[1:]
    if np.ndim(lb) == 0 and np.ndim(ub) == 0 and np.ndim(step) == 0:
        if int(step) <= 0:
            raise error(InterpretError, op, f"step must be positive, got {int(step)}")
        dtype = np.asarray(lb).dtype
        for i in range(int(lb), int(ub), int(step)):
            env[iv_arg] = dtype.type(i)
            for arg, val in zip(iter_args, carried, strict=True):
                env[arg] = val
            carried = list(ev.run_region_block(body))
    else:
        outer = ev.mask
        iv = np.asarray(lb)
        if np.any((np.asarray(step) <= 0) & ((iv < ub) if outer is None else outer)):
            raise error(InterpretError, op, "step must be positive in every thread")
        try:
            while True:
                active = and_masks(outer, np.asarray(iv < ub))
                if active is None or not active.any():
                    break
                ev.mask = active
                env[iv_arg] = iv
                for arg, val in zip(iter_args, carried, strict=True):
                    env[arg] = val
                new = ev.run_region_block(body)
                carried = [np.where(active, n, c) for n, c in zip(new, carried, strict=True)]
                iv = iv + step
        finally:
            ev.mask = outer
    for res, val in zip(op.results, carried, strict=True):
        env[res] = val


@simt_impl("scf.if")
def _scf_if(ev: SimtEvaluator, op: Operation) -> None:
    """Both branches under complementary masks when the condition differs between lanes;
    as cooperating tasks when they hold an op that may wait for other threads (see
    :mod:`llmopt.interp._tasks`)."""
    env = ev.env
    cond = env[op.operands[0]]
    then_block = op.regions[0].block
    else_block = op.regions[1].blocks.first if op.regions[1].blocks else None
    if np.ndim(cond) == 0:
        if cond:
            values = ev.run_region_block(then_block)
        elif else_block is not None:
            values = ev.run_region_block(else_block)
        else:
            values = ()
    else:
        outer = ev.mask
        then_mask = and_masks(outer, cond)
        else_mask = and_masks(outer, ~cond)
        then_vals: tuple[Value, ...] | None = None
        else_vals: tuple[Value, ...] | None = None
        runs_then = then_mask is None or then_mask.any()
        runs_else = else_block is not None and (else_mask is None or else_mask.any())
        try:
            if runs_then and runs_else and ev.may_wait(op):  # branches that wait for each other
                assert else_block is not None
                then_vals, else_vals = ev.run_tasks(
                    [(then_mask, lambda: ev.run_region_block(then_block)),
                     (else_mask, lambda: ev.run_region_block(else_block))])
            else:
                if runs_then:
                    ev.mask = then_mask
                    then_vals = ev.run_region_block(then_block)
                if runs_else:
                    assert else_block is not None
                    ev.mask = else_mask
                    else_vals = ev.run_region_block(else_block)
        finally:
            ev.mask = outer
        if then_vals is None:
            values = else_vals or ()
        elif else_vals is None:
            values = then_vals
        else:
            values = tuple(np.where(cond, t, e) for t, e in zip(then_vals, else_vals,
                                                                 strict=True))
    for res, val in zip(op.results, values, strict=True):
        env[res] = val


def buffer_of(ev: SimtEvaluator, op: Operation, value: SSAValue) -> np.ndarray:
    """The numpy storage bound to a memref value."""
    buf = ev.env[value]
    if not isinstance(buf, np.ndarray):
        raise error(InterpretError, op, f"operand {value} is not bound to a buffer")
    return buf
