"""``torch-to-prim``'s elementwise ops: arithmetic, comparisons, casts, constants, fills
and the embedding gather."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects.builtin import i64
from xdsl.ir import SSAValue
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)

from llmopt.dialects import torch as t
from llmopt.dialects.prim import GatherOp
from llmopt.lowering._torch_emit import (
    Emitter,
    ScalarBuilder,
    _finish,
    _result_element,
    _result_shape,
)

_BINARY: dict[type[t.BinaryOp], Callable[[ScalarBuilder, SSAValue, SSAValue], SSAValue]] = {
    t.AddOp: ScalarBuilder.add,
    t.SubOp: ScalarBuilder.sub,
    t.MulOp: ScalarBuilder.mul,
    t.DivOp: ScalarBuilder.div,
    t.MaximumOp: ScalarBuilder.maximum,
    t.MinimumOp: ScalarBuilder.minimum,
}


def _relu(b: ScalarBuilder, x: SSAValue) -> SSAValue:
    return b.maximum(x, b.const(0.0, x.type))


def _silu(b: ScalarBuilder, x: SSAValue) -> SSAValue:
    one = b.const(1.0, x.type)
    return b.mul(x, b.div(one, b.add(one, b.exp(b.neg(x)))))


_UNARY: dict[type[t.UnaryOp], Callable[[ScalarBuilder, SSAValue], SSAValue]] = {
    t.NegOp: ScalarBuilder.neg,
    t.ExpOp: ScalarBuilder.exp,
    t.RsqrtOp: ScalarBuilder.rsqrt,
    t.SqrtOp: ScalarBuilder.sqrt,
    t.TanhOp: ScalarBuilder.tanh,
    t.SigmoidOp: ScalarBuilder.sigmoid,
    t.ReluOp: _relu,
    t.SiluOp: _silu,
    t.CosOp: ScalarBuilder.cos,
    t.SinOp: ScalarBuilder.sin,
}


class LowerBinary(RewritePattern):
    """``torch.add/sub/mul/div/maximum/minimum`` → ``index_map`` broadcasts of the operands
    whose shape differs from the result's, then one ``prim.elementwise`` with ``arith.addf``,
    ``subf``, ``mulf``, ``divf``, ``maximumf`` or ``minimumf`` (NaN-propagating; integers:
    ``addi``, ``subi``, ``muli``, ``maxsi``, ``minsi``)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.BinaryOp, rewriter: PatternRewriter) -> None:
        scalar = _BINARY[type(op)]
        shape = _result_shape(op)
        em = Emitter()
        lhs, rhs = em.broadcast(op.lhs, shape), em.broadcast(op.rhs, shape)
        out = em.elementwise([lhs, rhs], shape, _result_element(op), scalar)
        _finish(rewriter, op, em, out)


class LowerUnary(RewritePattern):
    """``torch.neg/exp/rsqrt/sqrt/tanh/sigmoid/relu/silu/cos/sin`` → one ``prim.elementwise``:
    ``arith.negf`` (``0 - x`` with ``arith.subi`` for integers), ``math.exp/rsqrt/sqrt/tanh/
    cos/sin``, sigmoid ``1 / (1 + exp(-x))``, relu ``arith.maximumf(x, 0)``, silu
    ``x * (1 / (1 + exp(-x)))``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.UnaryOp, rewriter: PatternRewriter) -> None:
        em = Emitter()
        out = em.elementwise([op.input], _result_shape(op), _result_element(op), _UNARY[type(op)])
        _finish(rewriter, op, em, out)


class LowerCompare(RewritePattern):
    """``torch.eq/ne/lt/le/gt/ge`` → ``index_map`` broadcasts, then one ``prim.elementwise``
    yielding ``arith.cmpf`` (ordered; ``une`` for ``ne``) or ``arith.cmpi`` (signed) as
    ``i1``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.CompareOp, rewriter: PatternRewriter) -> None:
        predicate = op.name.removeprefix("torch.")
        shape = _result_shape(op)
        em = Emitter()
        lhs, rhs = em.broadcast(op.lhs, shape), em.broadcast(op.rhs, shape)
        out = em.elementwise([lhs, rhs], shape, _result_element(op),
                             lambda b, x, y: b.compare(predicate, x, y))
        _finish(rewriter, op, em, out)


class LowerLogical(RewritePattern):
    """``torch.logical_and/or`` → broadcasts, then ``arith.andi``/``ori`` on ``i1``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.LogicalOp, rewriter: PatternRewriter) -> None:
        scalar = (ScalarBuilder.logical_and if isinstance(op, t.LogicalAndOp)
                  else ScalarBuilder.logical_or)
        shape = _result_shape(op)
        em = Emitter()
        lhs, rhs = em.broadcast(op.lhs, shape), em.broadcast(op.rhs, shape)
        _finish(rewriter, op, em, em.elementwise([lhs, rhs], shape, _result_element(op), scalar))


class LowerLogicalNot(RewritePattern):
    """``torch.logical_not`` → ``prim.elementwise`` with ``arith.xori %x, true``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.LogicalNotOp, rewriter: PatternRewriter) -> None:
        em = Emitter()
        out = em.elementwise([op.input], _result_shape(op), _result_element(op),
                             ScalarBuilder.logical_not)
        _finish(rewriter, op, em, out)


class LowerWhere(RewritePattern):
    """``torch.where`` → broadcasts of the three operands, then ``arith.select``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.WhereOp, rewriter: PatternRewriter) -> None:
        shape = _result_shape(op)
        em = Emitter()
        inputs = [em.broadcast(v, shape) for v in (op.cond, op.lhs, op.rhs)]
        out = em.elementwise(inputs, shape, _result_element(op), ScalarBuilder.select)
        _finish(rewriter, op, em, out)


class LowerPow(RewritePattern):
    """``torch.pow`` → ``prim.elementwise``: exponent 2 is ``x * x``, 3 is ``x * x * x``,
    0.5 ``math.sqrt``, -0.5 ``math.rsqrt``, -1 ``1 / x``, 1 the input itself, anything else
    ``math.powf`` with a constant exponent."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.PowOp, rewriter: PatternRewriter) -> None:
        exponent = op.props.get_float("exponent")
        if exponent == 1.0:
            rewriter.replace(op, [], [op.input])
            return

        def body(b: ScalarBuilder, x: SSAValue) -> SSAValue:
            if exponent == 2.0:
                return b.mul(x, x)
            if exponent == 3.0:
                return b.mul(b.mul(x, x), x)
            if exponent == 0.5:
                return b.sqrt(x)
            if exponent == -0.5:
                return b.rsqrt(x)
            if exponent == -1.0:
                return b.div(b.const(1.0, x.type), x)
            return b.powf(x, b.const(exponent, x.type))

        em = Emitter()
        out = em.elementwise([op.input], _result_shape(op), _result_element(op), body)
        _finish(rewriter, op, em, out)


class LowerTo(RewritePattern):
    """``torch.to`` → ``prim.elementwise`` with the conversion of
    :meth:`ScalarBuilder.cast` (``arith.extf``/``truncf``/``sitofp``/``fptosi``/``extsi``/
    ``trunci``/``extui``/``uitofp``/``cmp* ne 0``; the input itself when the element type
    does not change)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.ToOp, rewriter: PatternRewriter) -> None:
        em = Emitter()
        _finish(rewriter, op, em, em.cast(op.input, _result_element(op)))


class LowerConstant(RewritePattern):
    """``torch.constant`` → a fill ``prim.elementwise () : () -> tensor<T>`` yielding an
    ``arith.constant`` of the element type ``T``; users broadcast it like any tensor."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.ConstantOp, rewriter: PatternRewriter) -> None:
        em = Emitter()
        _finish(rewriter, op, em, em.fill(op.scalar, _result_element(op)))


class LowerArange(RewritePattern):
    """``torch.arange`` → a fill ``prim.elementwise () : () -> tensor<NxT>`` whose body is
    ``start + step * index_cast(prim.coord 0)`` in ``i64``, converted to ``T``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.ArangeOp, rewriter: PatternRewriter) -> None:
        p = op.props
        start, step = p.get_int("start"), p.get_int("step")
        element = _result_element(op)

        def body(b: ScalarBuilder) -> SSAValue:
            value = b.cast(b.coord(0), i64)
            if step != 1:
                value = b.mul(value, b.const(step, i64))
            if start != 0:
                value = b.add(value, b.const(start, i64))
            return b.cast(value, element)

        em = Emitter()
        _finish(rewriter, op, em, em.elementwise([], _result_shape(op), element, body))


class LowerEmbedding(RewritePattern):
    """``torch.embedding`` → ``prim.gather %weight[%indices] axis 0``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.EmbeddingOp, rewriter: PatternRewriter) -> None:
        new = GatherOp(op.weight, op.indices, 0)
        rewriter.replace(op, [new], [new.result])
