"""Shared pieces of llmopt's numpy interpreters: errors, types, affine maps, reductions.

Values in every interpreter are numpy arrays or numpy scalars whose dtype is the IR type's
(``f32`` → ``float32``, ``f16`` → ``float16``, ``bf16`` → ``ml_dtypes.bfloat16``, ``index`` →
``int64``, ``i1`` → ``bool``), so arithmetic rounds exactly as the IR says. An ``arith``/``math``
op on a 16-bit float computes in ``float32`` and rounds its result once, to nearest even, as
``kernel-to-cuda`` prints it (see :func:`llmopt.interp.scalar.apply_scalar`). Inside loop nests
and kernels a value is an array that *broadcasts* against the current iteration grid: an axis
of extent 1 means "the same for every point along that axis".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, TypeAlias

import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerType,
    MemRefType,
    TensorType,
)
from xdsl.ir import Attribute, Operation
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
    AffineSymExpr,
)

Value: TypeAlias = Any
"""A runtime value: a numpy array or numpy scalar (or a Python int for affine indices)."""

IndexArray: TypeAlias = np.ndarray | int | np.integer
"""An integer coordinate: a scalar, or an array broadcastable against the iteration grid."""


# --- errors -------------------------------------------------------------------------------------


class InterpretError(Exception):
    """The program cannot be interpreted, or it is wrong; the message names the op."""


class UnsupportedOpError(InterpretError):
    """No interpretation is registered for an op at the level where it was met."""


class OutOfBoundsError(InterpretError):
    """A load or store touched a buffer outside its extents (e.g. a dropped bounds guard)."""


class RaceError(InterpretError):
    """Two threads accessed one memory location, at least one writing, with no barrier between."""


class DivergenceError(InterpretError):
    """A barrier or warp shuffle was reached by only part of the threads that must all reach it."""


def op_text(op: Operation, limit: int = 200) -> str:
    """A one-line rendering of ``op`` for diagnostics (regions elided)."""
    if op.regions:
        text = op.name
    else:
        text = " ".join(str(op).split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def where(op: Operation) -> str:
    """``'<op text>' in @kernel`` (with the source location when the parser recorded one)."""
    parts = [f"'{op_text(op)}'"]
    parent = op.parent_op()
    while parent is not None:
        sym = parent.properties.get("sym_name")
        if sym is not None and parent.name != "builtin.module":
            parts.append(f"in {parent.name} @{sym.data}")  # type: ignore[attr-defined]
            break
        parent = parent.parent_op()
    loc = getattr(op, "location", None)
    if loc is not None and "unknown" not in str(loc):
        parts.append(f"at {loc}")
    return " ".join(parts)


def error(cls: type[InterpretError], op: Operation, message: str) -> InterpretError:
    """An error of class ``cls`` whose message starts with the op (``kernel.load: ...``)."""
    return cls(f"{op.name}: {message}\n  op: {where(op)}")


# --- types --------------------------------------------------------------------------------------


@cache
def bfloat16() -> np.dtype:
    """NumPy's ``bf16`` (from ``ml_dtypes``, imported on first use)."""
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def is_float(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is a floating-point dtype (``bfloat16`` included, whose numpy kind
    is ``'V'``)."""
    return dtype.kind == "f" or dtype == bfloat16()


def is_half(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is a 16-bit float: ``float16`` or ``bfloat16``."""
    return dtype.itemsize == 2 and is_float(dtype)


def np_dtype(typ: Attribute) -> np.dtype:
    """The numpy dtype of a scalar, tensor or memref type."""
    if isinstance(typ, TensorType | MemRefType):
        typ = typ.element_type
    if isinstance(typ, Float32Type):
        return np.dtype(np.float32)
    if isinstance(typ, Float64Type):
        return np.dtype(np.float64)
    if isinstance(typ, Float16Type):
        return np.dtype(np.float16)
    if isinstance(typ, IndexType):
        return np.dtype(np.int64)
    if isinstance(typ, IntegerType):
        width = typ.width.data
        if width == 1:
            return np.dtype(np.bool_)
        if width in (8, 16, 32, 64):
            return np.dtype(f"int{width}")
    if isinstance(typ, BFloat16Type):
        return bfloat16()
    raise InterpretError(f"no numpy dtype for type {typ}")


def shape_of(typ: Attribute) -> tuple[int, ...]:
    """The static shape of a tensor or memref type (``()`` for scalars)."""
    if isinstance(typ, TensorType | MemRefType):
        shape = tuple(int(d) for d in typ.get_shape())
        if any(d < 0 for d in shape):
            raise InterpretError(f"dynamic shapes are not supported: {typ}")
        return shape
    return ()


def uninitialized(shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
    """Fresh storage filled with a poison value (NaN, or the most negative integer).

    Reading memory that no one wrote then shows up in the results instead of passing as zeros.
    """
    if is_float(dtype):
        return np.full(tuple(shape), np.nan, dtype=dtype)
    if dtype.kind == "b":
        return np.zeros(tuple(shape), dtype=dtype)
    return np.full(tuple(shape), np.iinfo(dtype).min, dtype=dtype)


# --- affine maps --------------------------------------------------------------------------------

AffineFn: TypeAlias = Callable[[Sequence[IndexArray]], IndexArray]


def _compile_expr(expr: AffineExpr, num_dims: int) -> AffineFn:
    """One affine expression as a closure over the dims."""
    if isinstance(expr, AffineConstantExpr):
        value = int(expr.value)
        return lambda dims: value
    if isinstance(expr, AffineDimExpr):
        pos = expr.position
        return lambda dims: dims[pos]
    if isinstance(expr, AffineSymExpr):
        pos = num_dims + expr.position
        return lambda dims: dims[pos]
    if isinstance(expr, AffineBinaryOpExpr):
        lhs = _compile_expr(expr.lhs, num_dims)
        rhs = _compile_expr(expr.rhs, num_dims)
        kind = expr.kind
        if kind is AffineBinaryOpKind.Add:
            return lambda dims: lhs(dims) + rhs(dims)
        if kind is AffineBinaryOpKind.Mul:
            return lambda dims: lhs(dims) * rhs(dims)
        # Floor division and a non-negative modulus (for positive divisors): Python's and
        # numpy's ``//`` and ``%`` on integers have exactly these semantics.
        if kind is AffineBinaryOpKind.FloorDiv:
            return lambda dims: lhs(dims) // rhs(dims)
        if kind is AffineBinaryOpKind.Mod:
            return lambda dims: lhs(dims) % rhs(dims)
        if kind is AffineBinaryOpKind.CeilDiv:
            return lambda dims: -((-lhs(dims)) // rhs(dims))
    raise InterpretError(f"cannot evaluate affine expression {expr}")


@cache
def compile_map(amap: AffineMap) -> Callable[[Sequence[IndexArray]], tuple[IndexArray, ...]]:
    """``amap`` as a function of integer dims (scalars or broadcastable numpy arrays).

    Symbols, if any, follow the dims in the argument list.
    """
    fns = tuple(_compile_expr(e, amap.num_dims) for e in amap.results)
    return lambda dims: tuple(f(dims) for f in fns)


# --- reductions ---------------------------------------------------------------------------------

_UFUNCS: dict[str, np.ufunc] = {
    "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum,
}


def combiner(kind: str) -> np.ufunc:
    """The numpy ufunc that combines two partial results of a reduction ``kind``."""
    try:
        return _UFUNCS[kind]
    except KeyError:
        raise InterpretError(f"unknown reduction kind '{kind}'") from None


def identity(kind: str, dtype: np.dtype) -> Value:
    """The identity element of reduction ``kind`` in ``dtype``."""
    if kind == "add":
        return dtype.type(0)
    if kind == "mul":
        return dtype.type(1)
    if is_float(dtype):
        return dtype.type(-np.inf if kind == "max" else np.inf)
    if dtype.kind == "b":
        return np.bool_(kind == "min")
    info = np.iinfo(dtype)
    return dtype.type(info.min if kind == "max" else info.max)


def fold_leading(kind: str, values: np.ndarray, acc: Value | None = None) -> np.ndarray:
    """Combine ``values`` along axis 0 strictly left to right: ``((acc ⊕ v0) ⊕ v1) ⊕ ...``.

    This is the order of a sequential loop, in the values' dtype (``ufunc.accumulate`` is
    sequential by definition; ``ufunc.reduce`` may sum pairwise). Max and min are exact in
    any order and use ``reduce``.
    """
    ufunc = combiner(kind)
    if acc is not None:
        values = np.concatenate([np.broadcast_to(acc, values.shape[1:])[None], values], axis=0)
    if kind in ("max", "min"):
        return ufunc.reduce(values, axis=0)
    return ufunc.accumulate(values, axis=0)[-1]


def butterfly(kind: str, values: np.ndarray) -> np.ndarray:
    """A warp's xor-shuffle reduction along the last axis (extent 32, or the lanes of a group:
    a power of two), every lane getting the total: for offset 16, 8, 4, 2, 1 (those below the
    extent): ``v = v ⊕ shfl_xor(v, offset)``."""
    ufunc = combiner(kind)
    shape = values.shape
    lanes = shape[-1]
    for offset in (o for o in (16, 8, 4, 2, 1) if o < lanes):
        # Lane l ^ offset: swap the halves of every group of 2 * offset lanes.
        groups = values.reshape(shape[:-1] + (lanes // (2 * offset), 2, offset))
        values = ufunc(values, groups[..., ::-1, :].reshape(shape))
    return values


def block_tree(kind: str, partials: np.ndarray, threads: int) -> np.ndarray:
    """Combine per-thread partials (last axis: the block's threads) as a GPU block does.

    Lanes of each warp of 32 are combined by :func:`butterfly` (lanes past the end of a
    partial last warp hold the identity); then, when the block has several warps, every
    thread folds the warp totals in warp order starting from the identity
    (``((id ⊕ w0) ⊕ w1) ⊕ ...``, the totals passing through shared memory). Returns the total
    with the last axis reduced to extent 1.
    """
    dtype = partials.dtype
    ident = identity(kind, dtype)
    partials = np.broadcast_to(partials, partials.shape[:-1] + (threads,))
    warps = -(-threads // 32)
    if warps * 32 != threads:
        pad = np.full(partials.shape[:-1] + (warps * 32 - threads,), ident, dtype=dtype)
        partials = np.concatenate([partials, pad], axis=-1)
    per_warp = butterfly(kind, partials.reshape(partials.shape[:-1] + (warps, 32)))[..., 0]
    if warps == 1:
        return per_warp
    return fold_leading(kind, np.moveaxis(per_warp, -1, 0))[..., None]
