"""Tensor IR: whole-array numpy evaluation of ``prim`` ops.

* ``prim.elementwise`` runs its scalar body once, with the input tensors as the "scalars"
  and each ``prim.coord d`` as the coordinate grid of dim ``d`` (``arange`` along that axis);
* ``prim.reduce`` is ``ufunc.reduce`` over the reduced dims (kept with extent 1);
* ``prim.index_map`` evaluates its affine maps on the result's coordinate grid
  (``np.indices``; ``floordiv`` floors, ``mod`` is non-negative) and gathers; the concat form
  fills each input's segment of the concat axis through that input's map (maps take the
  result coordinates);
* ``prim.gather`` is ``numpy.take`` along its axis, bounds-checked;
* ``prim.insert`` copies ``dest`` and writes ``src`` over the slice at its offset.

Symbolic extents take their runtime values: an ``elementwise`` op's shape is its inputs'
(which must agree) or, for a fill, its type with the ``sizes`` operands in the ``?`` dims; an
``index_map``'s result shape comes from its ``sizes`` and its maps read the ``symbols``
operands as the map symbols ``s0, s1, ...``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.ir import Operation

from llmopt.dialects._symbols import with_extents
from llmopt.interp._core import (
    InterpretError,
    OutOfBoundsError,
    Value,
    combiner,
    compile_map,
    error,
    np_dtype,
)
from llmopt.interp.host import HostInterpreter, host_impl
from llmopt.interp.scalar import apply_scalar


@host_impl("prim.elementwise")
def _elementwise(interp: HostInterpreter, op: Operation, args: list[Value]) -> list[Value]:
    """The scalar body once, on whole tensors (``prim.coord`` gives coordinate grids)."""
    typ = op.results[0].type
    block = op.regions[0].block
    inputs, sizes = args[:len(block.args)], args[len(block.args):]
    if inputs:
        shape = tuple(inputs[0].shape)
        for k, x in enumerate(inputs[1:], 1):
            if tuple(x.shape) != shape:
                raise error(InterpretError, op, f"input #{k} has shape {list(x.shape)}, input "
                            f"#0 has {list(shape)}")
    else:
        shape = with_extents(typ, [int(n) for n in sizes])
    env: dict[object, Value] = dict(zip(block.args, inputs, strict=True))
    value: Value = None
    for inner in block.ops:
        if inner.name == "prim.yield":
            value = env[inner.operands[0]]
            break
        if inner.name == "prim.coord":
            dim = inner.properties["dim"].value.data  # type: ignore[attr-defined]
            grid = [1] * len(shape)
            grid[dim] = shape[dim]
            env[inner.results[0]] = np.arange(shape[dim], dtype=np.int64).reshape(grid)
            continue
        results = apply_scalar(inner, [env[v] for v in inner.operands])
        env.update(zip(inner.results, results, strict=True))
    out = np.empty(shape, dtype=np_dtype(typ))
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


def _gather(op: Operation, x: np.ndarray, coords: Sequence[Value], k: int,
            symbols: Sequence[int] = ()) -> Value:
    """``x[map_k(coords, symbols)]``, bounds-checked."""
    amap = op.properties["maps"].data[k].data  # type: ignore[attr-defined]
    idx = compile_map(amap)([*coords, *symbols])
    for dim, (i, extent) in enumerate(zip(idx, x.shape, strict=True)):
        bad = (np.asarray(i) < 0) | (np.asarray(i) >= extent)
        if bad.any():
            first = int(np.asarray(i)[np.unravel_index(int(np.argmax(bad)), bad.shape)])
            raise error(OutOfBoundsError, op, f"map #{k} reads coordinate {first} of dim {dim} "
                        f"of input #{k}, whose extent is {extent}")
    return x[tuple(idx)]


@host_impl("prim.gather")
def _gather_op(interp: HostInterpreter, op: Operation, args: list[Value]) -> list[Value]:
    """``numpy.take(table, indices, axis)``, bounds-checked."""
    table, indices = args
    axis = op.properties["axis"].value.data  # type: ignore[attr-defined]
    extent = table.shape[axis]
    bad = (indices < 0) | (indices >= extent)
    if bad.any():
        first = int(indices[np.unravel_index(int(np.argmax(bad)), bad.shape)])
        raise error(OutOfBoundsError, op, f"index {first} is out of bounds for dim {axis} of "
                    f"the table, whose extent is {extent}")
    return [np.take(table, indices.astype(np.int64), axis=axis)]


@host_impl("prim.insert")
def _insert(interp: HostInterpreter, op: Operation, args: list[Value]) -> list[Value]:
    """A copy of ``dest`` with ``src`` written at the offset along the axis, bounds-checked."""
    src, dest = args[0], args[1]
    axis = op.properties["axis"].value.data  # type: ignore[attr-defined]
    offset = (int(args[2]) if len(args) > 2
              else op.properties["offset"].value.data)  # type: ignore[attr-defined]
    if not 0 <= offset <= dest.shape[axis] - src.shape[axis]:
        raise error(OutOfBoundsError, op, f"offset {offset} puts the {src.shape[axis]} rows of "
                    f"src outside dest's extent {dest.shape[axis]} along axis {axis}")
    out = np.array(dest, copy=True)
    index = [slice(None)] * dest.ndim
    index[axis] = slice(offset, offset + src.shape[axis])
    out[tuple(index)] = src
    return [out]


@host_impl("prim.index_map")
def _index_map(interp: HostInterpreter, op: Operation, args: list[Value]) -> list[Value]:
    """Gathers through the map(s); the concat form fills one segment per input."""
    typ = op.results[0].type
    n_inputs, n_symbols = len(op.inputs), len(op.symbols)  # type: ignore[attr-defined]
    symbols = [int(v) for v in args[n_inputs:n_inputs + n_symbols]]
    shape = with_extents(typ, [int(n) for n in args[n_inputs + n_symbols:]])
    if any(e < 1 for e in shape):
        raise error(InterpretError, op, f"result extents {list(shape)} must be positive")
    args = args[:n_inputs]
    out = np.empty(shape, dtype=np_dtype(typ))
    concat = op.properties.get("concat")
    if concat is None:
        out[...] = _gather(op, args[0], np.indices(shape, sparse=True), 0, symbols)
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
        out[segment] = _gather(op, x, coords, k, symbols)
        start = stop
    return [out]
