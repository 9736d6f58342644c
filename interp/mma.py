"""Interpretation of the ``mma`` dialect (tensor-core instructions) at Tile and Kernel IR.

``mma.sync`` is warp-collective: each thread's values are pieces of the warp's matrices
(:mod:`llmopt.dialects.mma` gives the layout). In the SIMT evaluator the threads of a block
are the frame's last axis, so the op gathers every warp's ``A``, ``B`` and ``C`` from 32
consecutive lanes, multiplies, and scatters ``D`` back. The model of the tensor core: ``a``
and ``b`` are read as TF32 (the 13 low mantissa bits of each ``f32`` dropped), products are
exact and the sum of the eight products and ``C`` is rounded once to ``f32`` — the GPU
accumulates in ``f32`` in an order it does not document, so its results may differ from
this model in the last bits. A warp runs it with all of its lanes or none (a block whose
loop ended before another block's skips it whole); any other mask is a divergence error.
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Operation

from llmopt.interp._core import DivergenceError, InterpretError, Value, error
from llmopt.interp.scalar import scalar_impl
from llmopt.interp.simt import SimtEvaluator, simt_impl
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


@simt_impl("mma.sync")
def _mma_sync(ev: SimtEvaluator, op: Operation) -> None:
    """``D = A·B + C`` for every warp of every block (see the module docstring)."""
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

    def lanes(k: int) -> np.ndarray:
        """Operand ``k`` as ``[..., warp, g, t]``."""
        value = np.broadcast_to(np.asarray(ev.env[op.operands[k]], np.float32), frame)
        return value.reshape(lead + (8, 4))

    a = [truncate_tf32(lanes(k)).astype(np.float64) for k in range(4)]
    b = [truncate_tf32(lanes(k)).astype(np.float64) for k in (4, 5)]
    c = [lanes(k).astype(np.float64) for k in range(6, 10)]
    mat_a = np.empty(lead + (16, 8))
    mat_a[..., :8, :4], mat_a[..., 8:, :4], mat_a[..., :8, 4:], mat_a[..., 8:, 4:] = a
    mat_b = np.empty(lead + (8, 8))  # [k, n]: b0 holds B[t][g], b1 B[t + 4][g]
    mat_b[..., :4, :] = np.swapaxes(b[0], -1, -2)
    mat_b[..., 4:, :] = np.swapaxes(b[1], -1, -2)
    mat_c = np.empty(lead + (16, 8))
    mat_c[..., :8, 0::2], mat_c[..., :8, 1::2], mat_c[..., 8:, 0::2], mat_c[..., 8:, 1::2] = c
    mat_d = (mat_a @ mat_b + mat_c).astype(np.float32)
    pieces = (mat_d[..., :8, 0::2], mat_d[..., :8, 1::2], mat_d[..., 8:, 0::2],
              mat_d[..., 8:, 1::2])
    for result, piece in zip(op.results, pieces, strict=True):
        ev.env[result] = np.ascontiguousarray(piece).reshape(frame)
