"""Torch IR: each ``torch`` op evaluated on whole numpy arrays, in the tensors' dtype.

16-bit float operands (``f16``, ``bf16``) are widened to ``float32`` first and the result is
rounded once to the result dtype, as PyTorch computes one op on 16-bit tensors (in its
``float32`` "opmath" type: products and sums accumulate in ``float32``).

The semantics are PyTorch's (broadcasting binary ops, negative dims, ``keepdim``, ``linear`` as
``x @ w.T + b``, ``softmax`` with the max subtracted, ``rms_norm`` as
``x * rsqrt(mean(x^2) + eps) * w``). No torch import is needed: the interpreter is numpy only.
Ops are dispatched by name, so ops added to the dialect later only need a function here.

Symbolic programs run at the length their inputs have: a ``?`` extent is whatever the
operands give, and the ``index`` operands of ``reshape``, ``expand``, ``arange`` and ``slice``
arrive as integer scalars; each result is checked against its type (static extents exactly,
``?`` extents against the op's index operands where it has them).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from xdsl.ir import Operation

from llmopt.dialects._symbols import is_dynamic, shape_of_type, shape_text, with_extents
from llmopt.interp._core import InterpretError, Value, error, is_half, np_dtype
from llmopt.interp.host import HostInterpreter, host_impl

TorchImpl = Callable[[Operation, list[np.ndarray]], np.ndarray]


def _int(op: Operation, name: str) -> int:
    """An integer (or boolean) property."""
    return int(op.properties[name].value.data)  # type: ignore[attr-defined]


def _float(op: Operation, name: str) -> float:
    """A float property."""
    return float(op.properties[name].value.data)  # type: ignore[attr-defined]


def _ints(op: Operation, name: str) -> tuple[int, ...]:
    """An integer-list property."""
    return tuple(int(v) for v in op.properties[name].get_values())  # type: ignore[attr-defined]


def _dims(op: Operation, rank: int, name: str = "dims") -> tuple[int, ...]:
    """An integer-list property of dims, made non-negative."""
    return tuple(d % rank for d in _ints(op, name))


def torch_impl(*names: str) -> Callable[[TorchImpl], TorchImpl]:
    """Register ``fn(op, operands) -> array`` for torch ops; the result is checked against
    the op's declared result type (shape) and converted to its dtype."""

    def register(fn: TorchImpl) -> TorchImpl:
        """Register ``fn`` under ``names``."""
        def impl(interp: HostInterpreter, op: Operation, args: list[Value]) -> list[Value]:
            """Evaluate and check against the declared result type."""
            typ = op.results[0].type
            dtype = np_dtype(typ)
            arrays = [np.asarray(a) for a in args]
            arrays = [a.astype(np.float32) if is_half(a.dtype) else a for a in arrays]
            try:
                out = np.asarray(fn(op, arrays))
            except InterpretError:
                raise
            except Exception as exc:  # a numpy failure on this op's operands
                raise error(InterpretError, op, f"{type(exc).__name__}: {exc}") from exc
            if not _fits(out.shape, op, arrays):
                raise error(InterpretError, op, f"computed shape {list(out.shape)}, the op "
                            f"declares {typ}" + _expected(op, arrays))
            return [out.astype(dtype, copy=False)]

        for name in names:
            host_impl(name)(impl)
        return fn

    return register


_SIZED = frozenset({"torch.reshape", "torch.expand", "torch.arange"})
"""Ops whose index operands are the extents of the ``?`` dims of their result."""


def _result_shape(op: Operation, args: list[np.ndarray]) -> tuple[int, ...]:
    """The runtime shape of a sized op's result: its type with each ``?`` replaced by the
    matching index operand."""
    typ = op.results[0].type
    count = sum(is_dynamic(e) for e in shape_of_type(typ))
    sizes = [int(a) for a in args[len(args) - count:]] if count else []
    if any(n < 1 for n in sizes):
        raise error(InterpretError, op, f"extents {sizes} must be positive")
    return with_extents(typ, sizes)


def _fits(shape: tuple[int, ...], op: Operation, args: list[np.ndarray]) -> bool:
    """Whether a computed ``shape`` is the result type's (``?`` matching any extent, or the
    index operand of a sized op)."""
    want = _result_shape(op, args) if op.name in _SIZED else shape_of_type(op.results[0].type)
    return len(shape) == len(want) and all(
        is_dynamic(w) or g == w for g, w in zip(shape, want, strict=True))


def _expected(op: Operation, args: list[np.ndarray]) -> str:
    if op.name not in _SIZED or not any(is_dynamic(e)
                                        for e in shape_of_type(op.results[0].type)):
        return ""
    return f" (with its index operands: {shape_text(_result_shape(op, args))})"


def _binary(ufunc: np.ufunc) -> TorchImpl:
    """A broadcasting binary op."""
    return lambda op, args: ufunc(args[0], args[1])


for _name, _ufunc in {
    "torch.add": np.add, "torch.sub": np.subtract, "torch.mul": np.multiply,
    "torch.div": np.divide, "torch.maximum": np.maximum, "torch.minimum": np.minimum,
    "torch.eq": np.equal, "torch.ne": np.not_equal, "torch.lt": np.less,
    "torch.le": np.less_equal, "torch.gt": np.greater, "torch.ge": np.greater_equal,
    "torch.logical_and": np.logical_and, "torch.logical_or": np.logical_or,
}.items():
    torch_impl(_name)(_binary(_ufunc))


def _one(x: np.ndarray) -> np.generic:
    """One in ``x``'s dtype."""
    return x.dtype.type(1)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))``."""
    return _one(x) / (_one(x) + np.exp(-x))


for _name, _fn in {
    "torch.neg": np.negative,
    "torch.exp": np.exp,
    "torch.sqrt": np.sqrt,
    "torch.rsqrt": lambda x: _one(x) / np.sqrt(x),
    "torch.sigmoid": _sigmoid,
    "torch.silu": lambda x: x * _sigmoid(x),
    "torch.relu": lambda x: np.maximum(x, x.dtype.type(0)),
    "torch.tanh": np.tanh,
    "torch.cos": np.cos,
    "torch.sin": np.sin,
    "torch.logical_not": np.logical_not,
}.items():
    torch_impl(_name)(lambda op, args, fn=_fn: fn(args[0]))


@torch_impl("torch.where")
def _where(op: Operation, args: list[np.ndarray]) -> np.ndarray:
    """``cond ? a : b``, broadcasting."""
    return np.where(*args)


@torch_impl("torch.pow")
def _pow(op: Operation, args: list[np.ndarray]) -> np.ndarray:
    """``x ** exponent``."""
    (x,) = args
    return x ** x.dtype.type(_float(op, "exponent"))


@torch_impl("torch.linear")
def _linear(op: Operation, args: list[np.ndarray]) -> np.ndarray:
    """``x @ w.T (+ b)``."""
    x, w, *bias = args
    y = np.matmul(x, w.T)
    return y + bias[0] if bias else y


@torch_impl("torch.matmul", "torch.bmm")
def _matmul(op: Operation, args: list[np.ndarray]) -> np.ndarray:
    """Batched matrix product with broadcasting."""
    return np.matmul(args[0], args[1])


@torch_impl("torch.sdpa")
def _sdpa(op: Operation, args: list[np.ndarray]) -> np.ndarray:
    """``softmax(q @ k^T * scale + mask) @ v``, key/value heads shared under GQA."""
    q, k, v, *mask = args
    if _int(op, "enable_gqa"):
        group = q.shape[-3] // k.shape[-3]
        k = np.repeat(k, group, axis=-3)
        v = np.repeat(v, group, axis=-3)
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * q.dtype.type(_float(op, "scale"))
    length, keys = q.shape[-2], k.shape[-2]
    if _int(op, "is_causal"):
        keep = np.arange(keys)[None, :] <= np.arange(length)[:, None]
        scores = np.where(keep, scores, q.dtype.type(-np.inf))
    if mask:
        m = mask[0]
        scores = np.where(m, scores, q.dtype.type(-np.inf)) if m.dtype == np.bool_ else scores + m
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return np.matmul(e / e.sum(axis=-1, keepdims=True), v)


def _reduction(ufunc: np.ufunc, mean: bool = False) -> TorchImpl:
    """A reduction over ``dims`` (the mean divides by the count)."""
    def impl(op: Operation, args: list[np.ndarray]) -> np.ndarray:
        """Evaluate and check against the declared result type."""
        (x,) = args
        dims = _dims(op, x.ndim)
        out = ufunc.reduce(x, axis=dims, keepdims=bool(_int(op, "keepdim")))
        if mean:
            count = int(np.prod([x.shape[d] for d in dims]))
            out = out / x.dtype.type(count)
        return out

    return impl


torch_impl("torch.sum")(_reduction(np.add))
torch_impl("torch.mean")(_reduction(np.add, mean=True))
torch_impl("torch.amax")(_reduction(np.maximum))
torch_impl("torch.amin")(_reduction(np.minimum))


@torch_impl("torch.softmax")
def _softmax(op: Operation, args: list[np.ndarray]) -> np.ndarray:
    """Softmax with the maximum subtracted first."""
    (x,) = args
    dim = _int(op, "dim") % x.ndim
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


@torch_impl("torch.rms_norm")
def _rms_norm(op: Operation, args: list[np.ndarray]) -> np.ndarray:
    """``x * rsqrt(mean(x^2) + eps) (* weight)`` over the last dims."""
    x, *weight = args
    k = _int(op, "normalized_rank")
    dims = tuple(range(x.ndim - k, x.ndim))
    mean = np.mean(x * x, axis=dims, keepdims=True, dtype=x.dtype)
    y = x * (_one(x) / np.sqrt(mean + x.dtype.type(_float(op, "eps"))))
    return y * weight[0] if weight else y


@torch_impl("torch.transpose")
def _transpose(op: Operation, args: list[np.ndarray]) -> np.ndarray:
    """Swap two dims."""
    (x,) = args
    return np.swapaxes(x, _int(op, "dim0") % x.ndim, _int(op, "dim1") % x.ndim)


@torch_impl("torch.permute")
def _permute(op: Operation, args: list[np.ndarray]) -> np.ndarray:
    """Reorder dims."""
    (x,) = args
    return np.transpose(x, _dims(op, x.ndim))


@torch_impl("torch.reshape")
def _reshape(op: Operation, args: list[np.ndarray]) -> np.ndarray:
    """Row-major reshape."""
    shape = _result_shape(op, args)
    if int(np.prod(shape)) != args[0].size:
        raise error(InterpretError, op, f"cannot reshape {list(args[0].shape)} "
                    f"({args[0].size} elements) to {list(shape)}")
    return args[0].reshape(shape)


@torch_impl("torch.unsqueeze")
def _unsqueeze(op: Operation, args: list[np.ndarray]) -> np.ndarray:
    """Insert a unit dim."""
    (x,) = args
    return np.expand_dims(x, _int(op, "dim") % (x.ndim + 1))


@torch_impl("torch.expand")
def _expand(op: Operation, args: list[np.ndarray]) -> np.ndarray:
    """Broadcast to the result shape."""
    shape = _result_shape(op, args)
    try:
        return np.broadcast_to(args[0], shape)
    except ValueError:
        raise error(InterpretError, op, f"cannot expand {list(args[0].shape)} to "
                    f"{list(shape)}") from None


@torch_impl("torch.slice")
def _slice(op: Operation, args: list[np.ndarray]) -> np.ndarray:
    """A strided slice along one dim (bounds from the properties or the index operands,
    checked: ``0 <= start <= end <= extent``)."""
    x = args[0]
    dim = _int(op, "dim") % x.ndim
    if "start" in op.properties:
        start, end = _int(op, "start"), _int(op, "end")
    else:
        start, end = int(args[1]), int(args[2])
        if not 0 <= start <= end <= x.shape[dim] or start == end:
            raise error(InterpretError, op, f"slice bounds [{start}, {end}) must satisfy 0 <= "
                        f"start < end <= {x.shape[dim]} (the extent of dim {dim})")
    index = [slice(None)] * x.ndim
    index[dim] = slice(start, end, _int(op, "step"))
    return x[tuple(index)]


@torch_impl("torch.slice_scatter")
def _slice_scatter(op: Operation, args: list[np.ndarray]) -> np.ndarray:
    """A copy of the base with ``src`` written over ``start:end`` along ``dim`` (bounds from
    the properties or the index operands, checked against both extents)."""
    base, src = args[0], args[1]
    dim = _int(op, "dim") % base.ndim
    if "start" in op.properties:
        start, end = _int(op, "start"), _int(op, "end")
    else:
        start, end = int(args[2]), int(args[3])
    if not 0 <= start < end <= base.shape[dim] or end - start != src.shape[dim]:
        raise error(InterpretError, op, f"slice_scatter bounds [{start}, {end}) must satisfy "
                    f"0 <= start < end <= {base.shape[dim]} and hold the source's "
                    f"{src.shape[dim]} along dim {dim}")
    out = np.array(base, copy=True)
    index = [slice(None)] * base.ndim
    index[dim] = slice(start, end)
    out[tuple(index)] = src
    return out


@torch_impl("torch.cat")
def _cat(op: Operation, args: list[np.ndarray]) -> np.ndarray:
    """Concatenate along a dim."""
    return np.concatenate(args, axis=_int(op, "dim") % args[0].ndim)


@torch_impl("torch.embedding")
def _embedding(op: Operation, args: list[np.ndarray]) -> np.ndarray:
    """Rows of the weight picked by the indices (bounds-checked)."""
    weight, indices = args
    bad = (indices < 0) | (indices >= weight.shape[0])
    if bad.any():
        first = int(indices[np.unravel_index(int(np.argmax(bad)), bad.shape)])
        raise error(InterpretError, op, f"index {first} is out of range for an embedding of "
                    f"{weight.shape[0]} rows")
    return weight[indices.astype(np.int64)]


@torch_impl("torch.arange")
def _arange(op: Operation, args: list[np.ndarray]) -> np.ndarray:
    """``start, start + step, ...`` in the result dtype (as many as the index operand says
    when the extent is ``?``)."""
    start, step = _int(op, "start"), _int(op, "step")
    if "end" in op.properties:
        values = np.arange(start, _int(op, "end"), step, dtype=np.int64)
    else:
        values = start + step * np.arange(_result_shape(op, args)[0], dtype=np.int64)
    return values.astype(np_dtype(op.results[0].type))


@torch_impl("torch.to")
def _to(op: Operation, args: list[np.ndarray]) -> np.ndarray:
    """Cast to the result dtype."""
    return args[0].astype(np_dtype(op.results[0].type))


@torch_impl("torch.constant")
def _constant(op: Operation, args: list[np.ndarray]) -> np.ndarray:
    """A rank-0 tensor."""
    return np.asarray(_float(op, "value"), dtype=np_dtype(op.results[0].type))
