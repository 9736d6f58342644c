"""Interpretations of the scalar ``arith`` and ``math`` ops, on numpy values.

Every level uses this table: a ``prim.elementwise`` body runs once with whole tensors as its
"scalars", a loop body with arrays over the iteration grid, a kernel body with arrays over
threads. Results keep the IR's dtype (``f32`` ops compute and round in ``float32``). An op
on 16-bit floats (``f16``, ``bf16``: storage types) computes in ``float32`` and rounds its
result once to the 16-bit type, to nearest even: what ``kernel-to-cuda`` prints for it
(``__float2bfloat16(__bfloat162float(a) + __bfloat162float(b))``), and what PyTorch does for
one op on 16-bit tensors.

Extend it with :func:`scalar_impl`::

    @scalar_impl("mydialect.fancy")
    def _fancy(op: Operation, x: Value) -> Value:
        return np.sin(x) * 2
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
)
from xdsl.ir import Block, Operation

from llmopt.interp._core import (
    InterpretError,
    UnsupportedOpError,
    Value,
    error,
    is_float,
    is_half,
    np_dtype,
    shape_of,
)

ScalarImpl = Callable[..., Value]
"""``impl(op, *operand_values) -> result value`` (a tuple for several results)."""

SCALAR_IMPLS: dict[str, ScalarImpl] = {}
"""Op name → interpretation, for ops without regions that compute from their operands."""


def scalar_impl(*names: str) -> Callable[[ScalarImpl], ScalarImpl]:
    """Register an interpretation for the ops called ``names``."""

    def register(fn: ScalarImpl) -> ScalarImpl:
        """Add ``fn`` to the table."""
        for name in names:
            SCALAR_IMPLS[name] = fn
        return fn

    return register


def result_dtype(op: Operation, k: int = 0) -> np.dtype:
    """The numpy dtype of ``op``'s ``k``-th result (its element type for shaped types)."""
    return np_dtype(op.results[k].type)


def cast(value: Value, dtype: np.dtype) -> Value:
    """``value`` in ``dtype`` (scalars stay scalars)."""
    if isinstance(value, np.ndarray):
        return value.astype(dtype, copy=False)
    return dtype.type(value)


def _unsigned(value: Value) -> Value:
    """Reinterpret a signless integer as unsigned of the same width."""
    arr = np.asarray(value)
    if arr.dtype.kind == "b":
        return arr.astype(np.uint8)
    return arr.view(np.dtype(f"uint{arr.dtype.itemsize * 8}"))


def _scalarize(value: Value) -> Value:
    """0-d arrays become numpy scalars (cheaper, and they keep the dtype)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]
    return value


# --- constants ----------------------------------------------------------------------------------


@scalar_impl("arith.constant")
def _constant(op: Operation) -> Value:
    """A scalar (or dense tensor) constant in the result type."""
    attr = op.properties["value"]
    dtype = result_dtype(op)
    if isinstance(attr, FloatAttr | IntegerAttr):
        value = attr.value.data
        if dtype.kind == "b":
            return np.bool_(value & 1)
        if dtype.kind in "iu":
            bits = dtype.itemsize * 8
            value = int(value) & ((1 << bits) - 1)
            if value >= 1 << (bits - 1):
                value -= 1 << bits
        return dtype.type(value)
    if isinstance(attr, DenseIntOrFPElementsAttr):
        shape = shape_of(op.results[0].type)
        values = np.asarray(attr.get_values(), dtype=dtype)
        return np.broadcast_to(values, shape).copy() if values.size == 1 else values.reshape(shape)
    raise error(UnsupportedOpError, op, f"constant attribute {attr} is not supported")


# --- floating point -----------------------------------------------------------------------------


def _binary(ufunc: np.ufunc) -> ScalarImpl:
    """An interpretation applying a binary ufunc."""
    return lambda op, a, b: ufunc(a, b)


def _unary(ufunc: Callable[[Value], Value]) -> ScalarImpl:
    """An interpretation applying a unary function."""
    return lambda op, a: ufunc(a)


for _name, _ufunc in {
    "arith.addf": np.add, "arith.subf": np.subtract, "arith.mulf": np.multiply,
    "arith.divf": np.divide, "arith.remf": np.fmod,
    "arith.maximumf": np.maximum, "arith.minimumf": np.minimum,  # NaN-propagating
    "arith.maxnumf": np.fmax, "arith.minnumf": np.fmin,  # NaN-ignoring
    "math.powf": np.power, "math.atan2": np.arctan2, "math.copysign": np.copysign,
    "arith.addi": np.add, "arith.subi": np.subtract, "arith.muli": np.multiply,
    "arith.andi": np.bitwise_and, "arith.ori": np.bitwise_or, "arith.xori": np.bitwise_xor,
    "arith.maxsi": np.maximum, "arith.minsi": np.minimum,
}.items():
    SCALAR_IMPLS[_name] = _binary(_ufunc)

for _name, _fn in {
    "arith.negf": np.negative, "math.absf": np.abs, "math.absi": np.abs,
    "math.exp": np.exp, "math.exp2": np.exp2, "math.expm1": np.expm1,
    "math.log": np.log, "math.log2": np.log2, "math.log10": np.log10, "math.log1p": np.log1p,
    "math.sqrt": np.sqrt, "math.cbrt": np.cbrt,
    "math.sin": np.sin, "math.cos": np.cos, "math.tan": np.tan,
    "math.sinh": np.sinh, "math.cosh": np.cosh, "math.tanh": np.tanh,
    "math.asin": np.arcsin, "math.acos": np.arccos, "math.atan": np.arctan,
    "math.asinh": np.arcsinh, "math.acosh": np.arccosh, "math.atanh": np.arctanh,
    "math.floor": np.floor, "math.ceil": np.ceil, "math.trunc": np.trunc,
    "math.roundeven": np.rint,
}.items():
    SCALAR_IMPLS[_name] = _unary(_fn)


@scalar_impl("math.rsqrt")
def _rsqrt(op: Operation, a: Value) -> Value:
    """``1 / sqrt(a)`` in ``a``'s dtype."""
    one = np.asarray(a).dtype.type(1)
    return one / np.sqrt(a)


@scalar_impl("math.round")
def _round(op: Operation, a: Value) -> Value:
    """Round half away from zero (C's ``round``), not numpy's half to even."""
    return np.copysign(np.floor(np.abs(a) + np.asarray(a).dtype.type(0.5)), a)


@scalar_impl("math.fma")
def _fma(op: Operation, a: Value, b: Value, c: Value) -> Value:
    """``a * b + c`` as the hardware's fused op: for types narrower than f64 the product is
    exact in f64 and the sum is rounded to f64, then to the type (almost always one
    rounding)."""
    dtype = np.asarray(a).dtype
    if dtype == np.float64:
        return a * b + c  # numpy has no fused multiply-add; f64 rounds twice here
    wide = np.float64
    return cast(np.asarray(a, wide) * np.asarray(b, wide) + np.asarray(c, wide), dtype)


_ERF = np.frompyfunc(math.erf, 1, 1)


@scalar_impl("math.erf")
def _erf(op: Operation, a: Value) -> Value:
    """The error function (through ``math.erf``, in f64, then rounded)."""
    dtype = result_dtype(op)
    return _scalarize(np.asarray(_ERF(np.asarray(a, np.float64)), dtype=dtype))


@scalar_impl("math.fpowi", "math.ipowi")
def _powi(op: Operation, a: Value, b: Value) -> Value:
    """A float or integer base to an integer power."""
    dtype = result_dtype(op)
    return cast(np.power(a, np.asarray(b).astype(dtype) if is_float(dtype) else b), dtype)


_CMPF: dict[int, Callable[[Value, Value], Value]] = {
    0: lambda a, b: np.zeros(np.broadcast(a, b).shape, bool),
    1: lambda a, b: a == b,
    2: lambda a, b: a > b,
    3: lambda a, b: a >= b,
    4: lambda a, b: a < b,
    5: lambda a, b: a <= b,
    6: lambda a, b: (a != b) & ~(np.isnan(a) | np.isnan(b)),
    7: lambda a, b: ~(np.isnan(a) | np.isnan(b)),
    8: lambda a, b: (a == b) | np.isnan(a) | np.isnan(b),
    9: lambda a, b: ~(a <= b),
    10: lambda a, b: ~(a < b),
    11: lambda a, b: ~(a >= b),
    12: lambda a, b: ~(a > b),
    13: lambda a, b: a != b,
    14: lambda a, b: np.isnan(a) | np.isnan(b),
    15: lambda a, b: np.ones(np.broadcast(a, b).shape, bool),
}


@scalar_impl("arith.cmpf")
def _cmpf(op: Operation, a: Value, b: Value) -> Value:
    """Float comparison, ordered (``o*``: false on NaN) or unordered (``u*``)."""
    pred = op.properties["predicate"].value.data  # type: ignore[attr-defined]
    return _scalarize(np.asarray(_CMPF[pred](a, b)))


# --- integers -----------------------------------------------------------------------------------


@scalar_impl("arith.cmpi")
def _cmpi(op: Operation, a: Value, b: Value) -> Value:
    """Integer comparison; ``u*`` predicates compare as unsigned."""
    pred = op.properties["predicate"].value.data  # type: ignore[attr-defined]
    if pred >= 6:
        a, b = _unsigned(a), _unsigned(b)
        pred -= 4
    fn = (np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal)[pred]
    return _scalarize(np.asarray(fn(a, b)))


def _trunc_div(a: Value, b: Value) -> Value:
    """Integer division rounding toward zero."""
    q = np.floor_divide(a, b)
    fix = (np.remainder(a, b) != 0) & ((np.asarray(a) < 0) != (np.asarray(b) < 0))
    return q + fix.astype(np.asarray(q).dtype)


@scalar_impl("arith.divsi")
def _divsi(op: Operation, a: Value, b: Value) -> Value:
    """Signed division rounding toward zero."""
    return cast(_trunc_div(a, b), result_dtype(op))


@scalar_impl("arith.remsi")
def _remsi(op: Operation, a: Value, b: Value) -> Value:
    """Signed remainder with the dividend's sign."""
    return cast(np.fmod(a, b), result_dtype(op))


@scalar_impl("arith.floordivsi")
def _floordivsi(op: Operation, a: Value, b: Value) -> Value:
    """Signed division rounding down."""
    return cast(np.floor_divide(a, b), result_dtype(op))


@scalar_impl("arith.ceildivsi")
def _ceildivsi(op: Operation, a: Value, b: Value) -> Value:
    """Signed division rounding up."""
    return cast(-np.floor_divide(np.negative(a), b), result_dtype(op))


def _unsigned_binary(ufunc: np.ufunc) -> ScalarImpl:
    """An interpretation applying ``ufunc`` to the operands as unsigned."""
    def impl(op: Operation, a: Value, b: Value) -> Value:
        """The unsigned interpretation."""
        dtype = result_dtype(op)
        return _scalarize(np.asarray(ufunc(_unsigned(a), _unsigned(b))).astype(dtype))

    return impl


for _name, _ufunc in {
    "arith.divui": np.floor_divide, "arith.remui": np.remainder,
    "arith.maxui": np.maximum, "arith.minui": np.minimum,
}.items():
    SCALAR_IMPLS[_name] = _unsigned_binary(_ufunc)


@scalar_impl("arith.ceildivui")
def _ceildivui(op: Operation, a: Value, b: Value) -> Value:
    """Unsigned division rounding up."""
    ua, ub = _unsigned(a), _unsigned(b)
    q = np.floor_divide(ua, ub) + (np.remainder(ua, ub) != 0)
    return _scalarize(np.asarray(q).astype(result_dtype(op)))


def _shift_amount(a: Value, b: Value) -> tuple[np.ndarray, int]:
    """The shift amounts as int64 and the bit width of ``a``."""
    bits = np.asarray(a).dtype.itemsize * 8
    return np.asarray(b).astype(np.int64), bits


@scalar_impl("arith.shli")
def _shli(op: Operation, a: Value, b: Value) -> Value:
    """Shift left; amounts of the bit width or more give 0."""
    amount, bits = _shift_amount(a, b)
    out = np.left_shift(a, np.clip(amount, 0, bits - 1))
    return _scalarize(np.where(amount >= bits, 0, out).astype(result_dtype(op)))


@scalar_impl("arith.shrsi")
def _shrsi(op: Operation, a: Value, b: Value) -> Value:
    """Arithmetic shift right."""
    amount, bits = _shift_amount(a, b)
    return _scalarize(np.right_shift(a, np.clip(amount, 0, bits - 1)).astype(result_dtype(op)))


@scalar_impl("arith.shrui")
def _shrui(op: Operation, a: Value, b: Value) -> Value:
    """Logical shift right; amounts of the bit width or more give 0."""
    amount, bits = _shift_amount(a, b)
    ua = _unsigned(a)
    out = np.right_shift(ua, np.clip(amount, 0, bits - 1).astype(ua.dtype))
    return _scalarize(np.where(amount >= bits, 0, out).astype(result_dtype(op)))


# --- selection and conversions ------------------------------------------------------------------


@scalar_impl("arith.select")
def _select(op: Operation, cond: Value, a: Value, b: Value) -> Value:
    """``cond ? a : b`` per lane."""
    if np.ndim(cond) == 0:
        return a if cond else b
    return np.where(cond, a, b)


@scalar_impl("arith.extf", "arith.truncf", "arith.sitofp", "arith.fptosi", "arith.extsi",
             "arith.trunci", "arith.index_cast")
def _convert(op: Operation, a: Value) -> Value:
    """Casts between float widths, ints and floats, and int widths."""
    dtype = result_dtype(op)
    if dtype.kind == "b" and np.asarray(a).dtype.kind in "iu":
        return _scalarize(np.asarray(np.bitwise_and(a, 1)).astype(bool))
    with np.errstate(all="ignore"):
        return cast(a, dtype)


@scalar_impl("arith.extui", "arith.uitofp", "arith.index_castui")
def _convert_unsigned(op: Operation, a: Value) -> Value:
    """Casts that read the operand as unsigned."""
    return _scalarize(np.asarray(_unsigned(a)).astype(result_dtype(op)))


@scalar_impl("arith.fptoui")
def _fptoui(op: Operation, a: Value) -> Value:
    """Float to unsigned integer."""
    dtype = result_dtype(op)
    unsigned = np.dtype(f"uint{dtype.itemsize * 8}")
    return _scalarize(np.asarray(a).astype(unsigned).view(dtype))


@scalar_impl("arith.bitcast")
def _bitcast(op: Operation, a: Value) -> Value:
    """Reinterpret the bits."""
    return _scalarize(np.asarray(a).view(result_dtype(op)))


# --- blocks of scalar ops -----------------------------------------------------------------------


_CONVERSIONS = frozenset({
    "arith.extf", "arith.truncf", "arith.fptosi", "arith.fptoui", "arith.sitofp",
    "arith.uitofp", "arith.bitcast", "arith.select", "arith.constant",
})  # fmt: skip
"""Ops that move 16-bit values as they are (no arithmetic to widen)."""

_F32 = np.dtype(np.float32)


def _widened(impl: ScalarImpl, op: Operation, operands: Sequence[Value]) -> Value:
    """``impl`` applied to the ``float32`` values of 16-bit float operands, its 16-bit float
    result rounded once (to nearest even) to the result type."""
    wide = [cast(v, _F32) if is_half(np.asarray(v).dtype) else v for v in operands]
    out = impl(op, *wide)
    if len(op.results) == 1:
        dtype = result_dtype(op)
        return cast(out, dtype) if is_half(dtype) else out
    return out


def apply_scalar(op: Operation, operands: Sequence[Value]) -> tuple[Value, ...]:
    """Interpret one scalar op; raise :class:`UnsupportedOpError` if none is registered.

    ``arith``/``math`` arithmetic on 16-bit floats computes in ``float32`` and rounds once
    (see the module docstring)."""
    impl = SCALAR_IMPLS.get(op.name)
    if impl is None:
        raise error(UnsupportedOpError, op, "no interpretation for this op here")
    if (op.name.startswith(("arith.", "math.")) and op.name not in _CONVERSIONS
            and any(is_half(np.asarray(v).dtype) for v in operands)):
        impl = partial(_widened, impl)
    try:
        out = impl(op, *operands)
    except InterpretError:
        raise
    except Exception as exc:  # a numpy failure on this op's operands
        raise error(InterpretError, op, f"{type(exc).__name__}: {exc}") from exc
    if len(op.results) == 1:
        return (out,)
    return tuple(out)


def eval_scalar_block(block: Block, args: Sequence[Value], terminator: str) -> tuple[Value, ...]:
    """Run a region body of scalar ops (no control flow) and return what ``terminator`` yields.

    Used for ``prim.elementwise`` bodies, where the "scalars" are whole tensors.
    """
    env: dict[object, Value] = dict(zip(block.args, args, strict=True))
    for op in block.ops:
        operands = [env[v] for v in op.operands]
        if op.name == terminator:
            return tuple(operands)
        for res, val in zip(op.results, apply_scalar(op, operands), strict=True):
            env[res] = val
    raise InterpretError(f"region ends without '{terminator}'")
