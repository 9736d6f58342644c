"""Loop IR: ``loop.kernel`` nests, vectorised over their free loops.

Each ``loop.for`` prepends an axis to the frame and binds its induction variable to
``arange(extent)`` along it, so every op inside runs once on arrays holding all iterations
(free loops have independent iterations, so this is the loop's meaning, not an
approximation). ``loop.reduce`` does the same for its iterations, then folds the yielded
values along that axis strictly in iteration order, in the value's dtype — the rounding of a
sequential loop. ``loop.load`` gathers with fancy indexing through the affine map,
``loop.store`` scatters; either raises :class:`~llmopt.interp.OutOfBoundsError` on an index
outside the buffer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.ir import Operation, SSAValue

from llmopt.interp._core import InterpretError, Value, compile_map, error, np_dtype
from llmopt.interp.host import HostInterpreter, host_impl
from llmopt.interp.simt import SimtEvaluator, buffer_of, simt_impl


def _ints(op: Operation, name: str) -> int:
    """An integer property."""
    return op.properties[name].value.data  # type: ignore[attr-defined]


@simt_impl("loop.for")
def _for(ev: SimtEvaluator, op: Operation) -> None:
    """A free loop: one new frame axis holding every iteration (chunked if large)."""
    extent = _ints(op, "extent")
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
    ev.env[op.results[0]] = ev.reduce_axis(op, kind, body, body.args[0], _ints(op, "extent"),
                                           dtype)


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
    """The environment of a kernel body: its block arguments bound to the buffers."""
    block = op.regions[0].block
    for k, buf in enumerate(args):
        if not isinstance(buf, np.ndarray):
            raise error(InterpretError, op, f"operand #{k} is not a buffer")
    return dict(zip(block.args, args, strict=True))


@host_impl("loop.kernel")
def _kernel(interp: HostInterpreter, op: Operation, args: list[Value]) -> list[Value]:
    """Run a ``loop.kernel`` body once, vectorised over its loops."""
    ev = SimtEvaluator(bind_buffers(op, args), threads=None)
    ev.run_block(op.regions[0].block)
    return []
