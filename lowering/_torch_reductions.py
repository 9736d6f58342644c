"""``torch-to-prim``'s reductions and normalisations: sums, means, extrema, softmax and
RMSNorm."""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)

from llmopt.dialects import torch as t
from llmopt.lowering._extents import Extent
from llmopt.lowering._torch_emit import (
    Emitter,
    ScalarBuilder,
    _finish,
    _result_element,
    _result_shape,
)
from llmopt.lowering._torch_shapes import _shape, accumulator_type
from llmopt.passes._rewrite import fail


class LowerReduction(RewritePattern):
    """``torch.sum/mean/amax/amin`` → ``prim.reduce add/add/max/min`` over the (non-negative)
    dims; ``mean`` then multiplies by ``1/N`` in an ``elementwise``; ``keepdim = false`` drops
    the kept unit dims with an ``index_map``. ``f16``/``bf16`` sums accumulate in ``f32``;
    ``amax``/``amin`` reduce the widened values (exact) and narrow."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.ReductionOp, rewriter: PatternRewriter) -> None:
        dims = op.reduced_dims
        element = _result_element(op)
        em = Emitter()
        if isinstance(op, t.AmaxOp | t.AminOp):
            kind = "max" if isinstance(op, t.AmaxOp) else "min"
            out = em.cast(em.reduce(em.cast(op.input, accumulator_type(element)), kind, dims),
                          element)
        else:
            acc = accumulator_type(element)
            out = em.reduce(em.cast(op.input, acc), "add", dims)
            if isinstance(op, t.MeanOp):
                scale = 1.0 / _static_count(op, [_shape(op.input)[d] for d in dims])
                out = em.elementwise(
                    [out], _shape(out), acc, lambda b, x: b.mul(x, b.const(scale, acc))
                )
            out = em.cast(out, element)
        _finish(rewriter, op, em, em.reshape(out, _result_shape(op)))


def _static_count(op: Operation, extents: Sequence[Extent]) -> int:
    """The number of elements a mean divides by; rejects ``op`` when it is symbolic."""
    if not all(isinstance(e, int) for e in extents):
        raise fail(op, "a mean over a symbolic (?) extent is not supported yet: its 1/N would "
                   "be a runtime value")
    return math.prod(extents)  # type: ignore[arg-type]


def softmax(em: Emitter, x: SSAValue, dim: int, element: Attribute) -> SSAValue:
    """The stable softmax chain of ``x`` along ``dim`` (see :class:`LowerSoftmax`); the
    exponentials are summed in the accumulator type, the result is ``element``."""
    shape = _shape(x)
    acc = accumulator_type(element)
    peak = em.broadcast(em.reduce(em.cast(x, acc), "max", [dim]), shape)
    exps = em.elementwise(
        [x, peak], shape, acc,
        lambda b, v, m: b.exp(b.sub(b.cast(v, acc), b.cast(m, acc))),
    )
    total = em.broadcast(em.reduce(exps, "add", [dim]), shape)
    return em.elementwise(
        [exps, total], shape, element, lambda b, e, s: b.cast(b.div(e, s), element)
    )


class LowerSoftmax(RewritePattern):
    """``torch.softmax`` → ``m = reduce max``, ``e = exp(x - broadcast(m))``,
    ``s = reduce add e``, ``e / broadcast(s)`` (numerically stable; ``f32`` for 16-bit)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.SoftmaxOp, rewriter: PatternRewriter) -> None:
        shape = _result_shape(op)
        dim = t.norm_dim(op.props.get_int("dim"), len(shape))
        em = Emitter()
        _finish(rewriter, op, em, softmax(em, op.input, dim, _result_element(op)))


class LowerRmsNorm(RewritePattern):
    """``torch.rms_norm`` → ``sq = x * x``, ``reduce add`` over the normalized dims,
    ``r = rsqrt(sum * (1/N) + eps)``, ``x * broadcast(r) (* broadcast(weight))``: the chain
    of the HF-style pow/mean/add/rsqrt/mul sequence (``f32`` for 16-bit inputs)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.RmsNormOp, rewriter: PatternRewriter) -> None:
        shape = _result_shape(op)
        element = _result_element(op)
        acc = accumulator_type(element)
        rank = op.props.get_int("normalized_rank")
        eps = op.props.get_float("eps")
        dims = list(range(len(shape) - rank, len(shape)))
        scale = 1.0 / _static_count(op, [shape[d] for d in dims])
        em = Emitter()

        def square(b: ScalarBuilder, x: SSAValue) -> SSAValue:
            wide = b.cast(x, acc)
            return b.mul(wide, wide)

        def inv_rms(b: ScalarBuilder, s: SSAValue) -> SSAValue:
            return b.rsqrt(b.add(b.mul(s, b.const(scale, acc)), b.const(eps, acc)))

        sq = em.elementwise([op.input], shape, acc, square)
        summed = em.reduce(sq, "add", dims)
        inv = em.broadcast(em.elementwise([summed], _shape(summed), acc, inv_rms), shape)
        inputs = [op.input, inv]
        if op.weight is not None:
            inputs.append(em.broadcast(op.weight, shape))

        def normalise(b: ScalarBuilder, x: SSAValue, r: SSAValue, *w: SSAValue) -> SSAValue:
            y = b.mul(b.cast(x, acc), r)
            if w:  # PyTorch scales by the weight in f32 too and rounds once
                y = b.mul(y, w[0])
            return b.cast(y, element)

        _finish(rewriter, op, em, em.elementwise(inputs, shape, element, normalise))
