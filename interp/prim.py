"""Tensor IR: whole-array numpy evaluation of ``prim`` ops.

* ``prim.elementwise`` runs its scalar body once, with the input tensors as the "scalars";
* ``prim.reduce`` is ``ufunc.reduce`` over the reduced dims (kept with extent 1);
* ``prim.index_map`` evaluates its affine maps on the result's coordinate grid
  (``np.indices``; ``floordiv`` floors, ``mod`` is non-negative) and gathers; the concat form
  fills each input's segment of the concat axis through that input's map (maps take the
  result coordinates).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.ir import Operation

from llmopt.interp._core import (
    OutOfBoundsError,
    Value,
    combiner,
    compile_map,
    error,
    np_dtype,
    shape_of,
)
from llmopt.interp.host import HostInterpreter, host_impl
from llmopt.interp.scalar import eval_scalar_block


@host_impl("prim.elementwise")
def _elementwise(interp: HostInterpreter, op: Operation, args: list[Value]) -> list[Value]:
    """The scalar body once, on whole tensors."""
    typ = op.results[0].type
    (value,) = eval_scalar_block(op.regions[0].block, args, "prim.yield")
    out = np.empty(shape_of(typ), dtype=np_dtype(typ))
    out[...] = value
    return [out]


@host_impl("prim.reduce")
def _reduce(interp: HostInterpreter, op: Operation, args: list[Value]) -> list[Value]:
    """``ufunc.reduce`` over the reduced dims, kept with extent 1."""
    (x,) = args
    kind = op.properties["kind"].data  # type: ignore[attr-defined]
    dims = tuple(int(d) for d in op.properties["dims"].get_values())  # type: ignore[attr-defined]
    if not dims:
        return [np.array(x, copy=True)]
    return [combiner(kind).reduce(x, axis=dims, keepdims=True)]


def _gather(op: Operation, x: np.ndarray, coords: Sequence[Value], k: int) -> Value:
    """``x[map_k(coords)]``, bounds-checked."""
    idx = compile_map(op.properties["maps"].data[k].data)(coords)  # type: ignore[attr-defined]
    for dim, (i, extent) in enumerate(zip(idx, x.shape, strict=True)):
        bad = (np.asarray(i) < 0) | (np.asarray(i) >= extent)
        if bad.any():
            first = int(np.asarray(i)[np.unravel_index(int(np.argmax(bad)), bad.shape)])
            raise error(OutOfBoundsError, op, f"map #{k} reads coordinate {first} of dim {dim} "
                        f"of input #{k}, whose extent is {extent}")
    return x[tuple(idx)]


@host_impl("prim.index_map")
def _index_map(interp: HostInterpreter, op: Operation, args: list[Value]) -> list[Value]:
    """Gathers through the map(s); the concat form fills one segment per input."""
    typ = op.results[0].type
    shape = shape_of(typ)
    out = np.empty(shape, dtype=np_dtype(typ))
    concat = op.properties.get("concat")
    if concat is None:
        out[...] = _gather(op, args[0], np.indices(shape, sparse=True), 0)
        return [out]
    axis = concat.value.data  # type: ignore[attr-defined]
    start = 0
    for k, x in enumerate(args):
        stop = start + x.shape[axis]
        coords = list(np.indices(shape, sparse=True))
        coords[axis] = coords[axis][tuple(slice(start, stop) if d == axis else slice(None)
                                          for d in range(len(shape)))]
        segment = tuple(slice(start, stop) if d == axis else slice(None)
                        for d in range(len(shape)))
        out[segment] = _gather(op, x, coords, k)
        start = stop
    return [out]
