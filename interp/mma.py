"""Interpretation of the ``mma`` dialect (tensor-core instructions) at Tile and Kernel IR.

``mma.sync`` and ``mma.ldmatrix`` are warp-collective: each thread's values are pieces of
the warp's matrices (:mod:`llmopt.dialects.mma` gives the layouts). In the SIMT evaluator
the threads of a block are the frame's last axis, so an op gathers every warp's values from
32 consecutive lanes and scatters the results back. A warp runs such an op with all of its
lanes or none (a block whose loop ended before another block's skips it whole); any other
mask is a divergence error.

A *pair* (``vector<2xbf16>``, ``vector<2xf16>``) is held as what the GPU register holds: a
``uint32`` whose low 16 bits are the first element's and high 16 bits the second's.

The model of the tensor core: TF32 ``a`` and ``b`` are read with the 13 low mantissa bits of
each ``f32`` dropped, ``bf16``/``f16`` ones as they are; products are exact and the sum of
the products and ``C`` is rounded once to ``f32`` — the GPU accumulates in ``f32`` in an
order it does not document, so its results may differ from this model in the last bits.
``ldmatrix`` reads each row the way a load of its level does (bounds-checked; at Kernel IR
race-checked too), from the threads that supply rows only, and rejects a row start that is
not 16-byte aligned (a multiple of 8 elements from the start of the buffer).
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Attribute, Operation

from llmopt.dialects.mma import ROW_ELEMENTS, pair_element
from llmopt.interp._core import DivergenceError, InterpretError, Value, error, np_dtype
from llmopt.interp.kernel import KernelEvaluator, read
from llmopt.interp.scalar import scalar_impl
from llmopt.interp.simt import SimtEvaluator, and_masks, buffer_of, simt_impl
from llmopt.target import WARP

LOW_BITS = np.uint32(0x1FFF)
"""The mantissa bits of an ``f32`` that TF32 does not keep."""


def truncate_tf32(x: np.ndarray) -> np.ndarray:
    """``x`` with the mantissa bits TF32 drops cleared (how the tensor core reads it)."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return (bits & ~LOW_BITS).view(np.float32)


@scalar_impl("mma.to_tf32")
def _to_tf32(op: Operation, x: Value) -> Value:
    """``cvt.rna.tf32.f32``: round to the nearest TF32 value, ties away from zero (adding
    half a unit of the kept mantissa to the magnitude, then truncating); infinities and
    NaNs pass unchanged."""
    arr = np.asarray(x, np.float32)
    bits = np.ascontiguousarray(arr).view(np.uint32)
    rounded = ((bits + np.uint32(0x1000)) & ~LOW_BITS).view(np.float32)
    out = np.where(np.isfinite(arr), rounded, arr).astype(np.float32)
    return out if out.ndim else np.float32(out)


def pack_pairs(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Two arrays of 16-bit floats as pairs: ``uint32`` words, ``first`` in the low half."""
    lo = np.ascontiguousarray(first).view(np.uint16).astype(np.uint32)
    hi = np.ascontiguousarray(second).view(np.uint16).astype(np.uint32)
    return lo | (hi << np.uint32(16))


@scalar_impl("mma.pack")
def _pack(op: Operation, low: Value, high: Value) -> Value:
    """The pair of two 16-bit values, ``low`` in the low half."""
    dtype = np_dtype(op.operands[0].type)
    lo, hi = np.broadcast_arrays(np.asarray(low, dtype), np.asarray(high, dtype))
    words = pack_pairs(lo, hi)
    return words if words.ndim else np.uint32(words)


def unpack_pairs(words: np.ndarray, element: Attribute) -> tuple[np.ndarray, np.ndarray]:
    """The two elements (as ``float64``) of pairs of ``element`` held as ``uint32`` words."""
    words = np.ascontiguousarray(words, np.uint32)
    dtype = np_dtype(element)
    lo = (words & np.uint32(0xFFFF)).astype(np.uint16).view(dtype)
    hi = (words >> np.uint32(16)).astype(np.uint16).view(dtype)
    return lo.astype(np.float64), hi.astype(np.float64)


def half_a_fragment(pairs: list[np.ndarray], element: Attribute) -> np.ndarray:
    """The ``16 × 16`` ``A`` of ``m16n8k16`` (``float64``, shape ``[..., 16, 16]``) from the
    four pair operands of a warp's lanes, each shaped ``[..., g, t]`` (``[..., 8, 4]``):
    ``a_q = A[g + 8·(q mod 2)][2t + 8·(q / 2) + {0, 1}]``, the first in the low half."""
    mat_a = np.empty(pairs[0].shape[:-2] + (16, 16))
    for q, words in enumerate(pairs):
        lo, hi = unpack_pairs(words, element)
        rows = slice(8 * (q % 2), 8 * (q % 2) + 8)
        col = 8 * (q // 2)
        mat_a[..., rows, col:col + 8:2] = lo
        mat_a[..., rows, col + 1:col + 8:2] = hi
    return mat_a


def _warps(ev: SimtEvaluator, op: Operation) -> tuple[int, ...]:
    """The frame with its thread axis split into warps, ``lead + (32,)`` (``lead`` =
    ``frame[:-1] + (warps,)``), once the op is known to run whole warps."""
    if ev.threads is None:
        raise error(InterpretError, op, "is warp-level: it must sit in a kernel")
    frame = ev.frame
    threads = frame[-1]
    if threads % WARP:
        raise error(InterpretError, op, f"needs whole warps, the block has {threads} threads")
    lead = frame[:-1] + (threads // WARP,)
    if ev.mask is not None:  # a whole warp may skip it (its block left a loop earlier)
        mask = np.broadcast_to(ev.mask, frame).reshape(lead + (WARP,))
        if not (mask.all(-1) | ~mask.any(-1)).all():
            raise error(DivergenceError, op, "every thread of a warp must execute it (it "
                        "sits in divergent control flow)")
    return lead


@simt_impl("mma.sync")
def _mma_sync(ev: SimtEvaluator, op: Operation) -> None:
    """``D = A·B + C`` for every warp of every block (see the module docstring)."""
    lead = _warps(ev, op)
    frame = ev.frame

    def lanes(k: int, dtype: type = np.float32) -> np.ndarray:
        """Operand ``k`` as ``[..., warp, g, t]``."""
        value = np.broadcast_to(np.asarray(ev.env[op.operands[k]], dtype), frame)
        return value.reshape(lead + (8, 4))

    c = [lanes(k).astype(np.float64) for k in range(6, 10)]
    element = pair_element(op.operands[0].type)
    if element is None:  # m16n8k8, tf32
        a = [truncate_tf32(lanes(k)).astype(np.float64) for k in range(4)]
        b = [truncate_tf32(lanes(k)).astype(np.float64) for k in (4, 5)]
        mat_a = np.empty(lead + (16, 8))
        mat_a[..., :8, :4], mat_a[..., 8:, :4], mat_a[..., :8, 4:], mat_a[..., 8:, 4:] = a
        mat_b = np.empty(lead + (8, 8))  # [k, n]: b0 holds B[t][g], b1 B[t + 4][g]
        mat_b[..., :4, :] = np.swapaxes(b[0], -1, -2)
        mat_b[..., 4:, :] = np.swapaxes(b[1], -1, -2)
    else:  # m16n8k16: a_q = A[g + 8·(q%2)][2t + 8·(q//2) + {0,1}], b_q = B[2t + 8q + {0,1}][g]
        mat_a = half_a_fragment([lanes(q, np.uint32) for q in range(4)], element)
        mat_b = np.empty(lead + (16, 8))
        for q in range(2):
            lo, hi = unpack_pairs(lanes(4 + q, np.uint32), element)
            mat_b[..., 8 * q:8 * q + 8:2, :] = np.swapaxes(lo, -1, -2)
            mat_b[..., 8 * q + 1:8 * q + 8:2, :] = np.swapaxes(hi, -1, -2)
    mat_c = np.empty(lead + (16, 8))
    mat_c[..., :8, 0::2], mat_c[..., :8, 1::2], mat_c[..., 8:, 0::2], mat_c[..., 8:, 1::2] = c
    mat_d = (mat_a @ mat_b + mat_c).astype(np.float32)
    pieces = (mat_d[..., :8, 0::2], mat_d[..., :8, 1::2], mat_d[..., 8:, 0::2],
              mat_d[..., 8:, 1::2])
    for result, piece in zip(op.results, pieces, strict=True):
        ev.env[result] = np.ascontiguousarray(piece).reshape(frame)


@simt_impl("mma.ldmatrix")
def _ldmatrix(ev: SimtEvaluator, op: Operation) -> None:
    """Each warp's ``count`` 8×8 matrices, row ``r`` of matrix ``m`` from the indices of lane
    ``8m + r``, handed out as pairs (see the module docstring)."""
    lead = _warps(ev, op)
    frame = ev.frame
    count = len(op.results)
    buffer = op.operands[0]
    typ = buffer.type
    assert isinstance(typ, MemRefType)
    indices = [np.asarray(ev.env[v]) for v in op.operands[1:]]
    # the lanes that supply rows (the other lanes' indices are not read)
    supplies = np.arange(frame[-1]) % WARP < ROW_ELEMENTS * count
    saved = ev.mask
    ev.mask = and_masks(saved, supplies)
    try:
        start = np.broadcast_to(indices[-1], frame)
        offset = sum((np.asarray(i) * s for i, s in zip(indices, typ.get_strides(),
                                                         strict=True)), np.int64(0))
        misaligned = np.broadcast_to((offset + typ.get_offset()) % ROW_ELEMENTS != 0, frame)
        active = np.broadcast_to(ev.mask, frame)
        if (misaligned & active).any():
            point = np.unravel_index(int(np.argmax(misaligned & active)), frame)
            raise error(InterpretError, op, f"a row starts at element offset "
                        f"{int(np.broadcast_to(offset, frame)[point])}, not 16-byte aligned "
                        f"(a multiple of {ROW_ELEMENTS}) at {ev.describe_point(point)}")
        columns = []
        for c in range(ROW_ELEMENTS):
            at = [*indices[:-1], start + c]
            if isinstance(ev, KernelEvaluator):
                value = read(ev, op, buffer, at)
            else:
                value = ev.gather(op, buffer_of(ev, op, buffer), at)
            columns.append(np.broadcast_to(value, frame).reshape(lead + (WARP,)))
    finally:
        ev.mask = saved
    rows = np.stack(columns, -1)  # [..., warp, lane giving the row, column]
    lane = np.arange(WARP)
    trans = "trans" in op.properties
    for m, result in enumerate(op.results):
        if trans:  # elements (2·(l%4) + {0,1}, l/4) of matrix m
            src, col = 8 * m + 2 * (lane % 4), lane // 4
            first, second = rows[..., src, col], rows[..., src + 1, col]
        else:  # elements (l/4, 2·(l%4) + {0,1})
            src, col = 8 * m + lane // 4, 2 * (lane % 4)
            first, second = rows[..., src, col], rows[..., src, col + 1]
        ev.env[result] = pack_pairs(first, second).reshape(frame)
