"""Loop IR: ``loop.kernel`` nests, vectorised over their free loops.

Each ``loop.for`` prepends an axis to the frame and binds its induction variable to
``arange(extent)`` along it, so every op inside runs once on arrays holding all iterations
(free loops have independent iterations, so this is the loop's meaning, not an
approximation). ``loop.reduce`` does the same for its iterations, then folds the yielded
values along that axis strictly in iteration order, in the value's dtype — the rounding of a
sequential loop. ``loop.load`` gathers with fancy indexing through the affine map,
``loop.store`` scatters; either raises :class:`~llmopt.interp.OutOfBoundsError` on an index
outside the buffer.

A loop with a runtime bound (``loop.for %i = 0 to %n max 2048``) runs ``%n`` iterations;
the bound must be one value for every point of the frame (a kernel argument, or computed
from one) and at most the loop's ``extent``, else the interpretation fails at the loop.
A kernel's ``index`` arguments (runtime extents) are bound to the integers passed for them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import IndexType
from xdsl.ir import Operation, SSAValue

from llmopt.interp._core import InterpretError, Value, compile_map, error, identity, np_dtype
from llmopt.interp.host import HostInterpreter, host_impl
from llmopt.interp.simt import SimtEvaluator, buffer_of, simt_impl


def _ints(op: Operation, name: str) -> int:
    """An integer property."""
    return op.properties[name].value.data  # type: ignore[attr-defined]


def trip_count(ev: SimtEvaluator, op: Operation) -> int:
    """The iterations of a ``loop.for``/``loop.reduce``: its ``extent``, or the value of its
    runtime bound (checked: one value for the whole frame, within ``[0, extent]``)."""
    extent = _ints(op, "extent")
    if not op.operands:
        return extent
    value = np.asarray(ev.env[op.operands[0]])
    if value.size != 1 and not (value == value.flat[0]).all():
        raise error(InterpretError, op, "the loop bound differs between points of the nest")
    count = int(value.flat[0])
    if not 0 <= count <= extent:
        raise error(InterpretError, op, f"the loop bound is {count}, outside [0, {extent}] "
                    "(its declared maximum)")
    return count


@simt_impl("loop.for")
def _for(ev: SimtEvaluator, op: Operation) -> None:
    """A free loop: one new frame axis holding every iteration (chunked if large)."""
    extent = trip_count(ev, op)
    body = op.regions[0].block
    iv = body.args[0]
    step = ev.chunk(extent)
    for start in range(0, extent, step):
        values = ev.axis(np.arange(start, min(extent, start + step)))
        saved = ev.push(values.shape[0])
        try:
            ev.env[iv] = values
            ev.run_block(body)
        finally:
            ev.frame = saved


@simt_impl("loop.reduce")
def _reduce(ev: SimtEvaluator, op: Operation) -> None:
    """A reduce loop: all iterations on a new axis, folded in iteration order."""
    body = op.regions[0].block
    kind = op.properties["kind"].data  # type: ignore[attr-defined]
    dtype = np_dtype(op.results[0].type)
    extent = trip_count(ev, op)
    if extent == 0:
        ev.env[op.results[0]] = identity(kind, dtype)
        return
    ev.env[op.results[0]] = ev.reduce_axis(op, kind, body, body.args[0], extent, dtype)


def affine_indices(ev: SimtEvaluator, op: Operation, indices: Sequence[SSAValue]
                   ) -> tuple[Value, ...]:
    """The coordinates an affine access of ``op`` touches, for every point of the frame."""
    amap = op.properties["map"].data  # type: ignore[attr-defined]
    return compile_map(amap)([ev.env[v] for v in indices])


def clamped(indices: Sequence[Value], shape: Sequence[int], last: int = 1
            ) -> tuple[Value, ...]:
    """``indices`` clamped from above into a buffer of ``shape``: ``min(i, extent - 1)``,
    the innermost ``min(i, extent - last)`` (a copy of ``last`` elements)."""
    limits = [e - 1 for e in shape]
    limits[-1] = shape[-1] - last
    return tuple(np.minimum(i, lim) for i, lim in zip(indices, limits, strict=True))


@simt_impl("loop.load")
def _load(ev: SimtEvaluator, op: Operation) -> None:
    """A gather through the affine map, bounds-checked (after the clamp, if any)."""
    buffer = buffer_of(ev, op, op.operands[0])
    indices = affine_indices(ev, op, op.operands[1:])
    if "clamp" in op.properties:
        owners = len(ev.owned.get(id(buffer), []))
        indices = clamped(indices, buffer.shape[owners:])
    ev.env[op.results[0]] = ev.gather(op, buffer, indices)


@simt_impl("loop.store")
def _store(ev: SimtEvaluator, op: Operation) -> None:
    """A scatter through the affine map, bounds-checked."""
    value = ev.env[op.operands[0]]
    buffer = buffer_of(ev, op, op.operands[1])
    ev.scatter(op, buffer, affine_indices(ev, op, op.operands[2:]), value)


def bind_buffers(op: Operation, args: list[Value]) -> dict[SSAValue, Value]:
    """The environment of a kernel body: its block arguments bound to the buffers (and the
    ``index`` arguments to their integers)."""
    block = op.regions[0].block
    for k, (arg, buf) in enumerate(zip(block.args, args, strict=True)):
        if isinstance(arg.type, IndexType):
            if np.ndim(buf) != 0:
                raise error(InterpretError, op, f"operand #{k} is not an index")
            continue
        if not isinstance(buf, np.ndarray):
            raise error(InterpretError, op, f"operand #{k} is not a buffer")
    return dict(zip(block.args, args, strict=True))


@host_impl("loop.kernel")
def _kernel(interp: HostInterpreter, op: Operation, args: list[Value]) -> list[Value]:
    """Run a ``loop.kernel`` body once, vectorised over its loops."""
    ev = SimtEvaluator(bind_buffers(op, args), threads=None)
    ev.run_block(op.regions[0].block)
    return []
