"""``torch-to-prim``'s contractions: ``matmul``, ``bmm``, ``linear`` and scaled dot-product
attention."""

from __future__ import annotations

import math

from xdsl.ir import Attribute, SSAValue
from xdsl.ir.affine import (
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
)
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)

from llmopt.dialects import torch as t
from llmopt.lowering._torch_emit import (
    Emitter,
    ScalarBuilder,
    _finish,
    _result_element,
    _result_shape,
)
from llmopt.lowering._torch_reductions import softmax
from llmopt.lowering._torch_shapes import (
    Shape,
    _dims,
    _element,
    _shape,
    accumulator_type,
    broadcast_extents,
    broadcast_map,
)


def _batch_exprs(src_batch: Shape, out_batch: Shape) -> list[AffineExpr]:
    """Coordinates of broadcast batch dims ``src_batch`` read at ``out_batch`` dims."""
    return list(broadcast_map(src_batch, out_batch).results)


def _matmul(em: Emitter, a: SSAValue, b: SSAValue, out_shape: Shape, element: Attribute
            ) -> SSAValue:
    """``torch.matmul`` semantics (1-D operands, broadcast batch dims) as a contraction."""
    sa, sb = _shape(a), _shape(b)
    a2 = (1, *sa) if len(sa) == 1 else sa
    b2 = (*sb, 1) if len(sb) == 1 else sb
    batch = broadcast_extents(a2[:-2], b2[:-2])
    nb = len(batch)
    m, n, k = AffineDimExpr(nb), AffineDimExpr(nb + 1), AffineDimExpr(nb + 2)
    prod_shape = (*batch, a2[-2], b2[-1], a2[-1])
    rank = len(prod_shape)
    a_exprs = [*_batch_exprs(a2[:-2], batch), m, k] if len(sa) > 1 else [k]
    b_exprs = [*_batch_exprs(b2[:-2], batch), k, n] if len(sb) > 1 else [k]
    if len(sa) > 1 and a2[-2] == 1:
        a_exprs[-2] = AffineConstantExpr(0)
    if len(sb) > 1 and b2[-1] == 1:
        b_exprs[-1] = AffineConstantExpr(0)
    return em.contract(
        a, AffineMap(rank, 0, tuple(a_exprs)), b, AffineMap(rank, 0, tuple(b_exprs)),
        prod_shape, out_shape, element,
    )


class LowerMatmul(RewritePattern):
    """``torch.matmul`` → ``prod[b.., m, n, k] = A'[b.., m, n, k] * B'[b.., m, n, k]``
    (``index_map`` broadcasts; batch dims broadcast NumPy-style), ``prim.reduce add`` over
    ``k``, then an ``index_map`` dropping the kept unit dim (and those of 1-D operands)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.MatmulOp, rewriter: PatternRewriter) -> None:
        em = Emitter()
        out = _matmul(em, op.lhs, op.rhs, _result_shape(op), _result_element(op))
        _finish(rewriter, op, em, out)


class LowerBmm(RewritePattern):
    """``torch.bmm`` → the same contraction as ``torch.matmul`` (batch dim ``b``)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.BmmOp, rewriter: PatternRewriter) -> None:
        em = Emitter()
        out = _matmul(em, op.lhs, op.rhs, _result_shape(op), _result_element(op))
        _finish(rewriter, op, em, out)


class LowerLinear(RewritePattern):
    """``torch.linear`` (``x: [.., K]``, ``w: [N, K]``) →
    ``prod[.., n, k] = x'[.., n, k] * w'[.., n, k]`` with ``x' = x[.., k]`` and
    ``w' = w[n, k]`` (the transposed weight, by index_map), ``prim.reduce add`` over ``k``,
    an ``index_map`` dropping the unit dim, then ``+ broadcast(bias)`` when there is one.
    Leading dims of ``x`` stay as they are (they play the role of ``b..``/``m``)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.LinearOp, rewriter: PatternRewriter) -> None:
        x_shape, w_shape = _shape(op.input), _shape(op.weight)
        out_shape = _result_shape(op)
        element = _result_element(op)
        lead = len(x_shape) - 1
        prod_shape = (*x_shape[:-1], w_shape[0], x_shape[-1])
        rank = len(prod_shape)
        dims = _dims(rank)
        x_map = AffineMap(rank, 0, (*dims[:lead], dims[-1]))
        w_map = AffineMap(rank, 0, (dims[-2], dims[-1]))
        em = Emitter()
        acc = accumulator_type(element) if op.bias is not None else element
        out = em.contract(op.input, x_map, op.weight, w_map, prod_shape, out_shape, acc)
        if op.bias is not None:  # added to the f32 sums of 16-bit inputs, rounded once
            bias = em.broadcast(op.bias, out_shape)
            out = em.elementwise([out, bias], out_shape, element, ScalarBuilder.add)
        _finish(rewriter, op, em, out)


class LowerSdpa(RewritePattern):
    """``torch.sdpa`` (``q: [B.., (H,) L, E]``, ``k: [B.., (Hkv,) S, E]``,
    ``v: [B.., (Hkv,) S, Ev]``) →

    1. ``scores[b.., h, l, s] = sum_e q'[b.., h, l, s, e] * k'[b.., h, l, s, e]``: the
       contraction of :meth:`Emitter.contract`, ``k' = k[b.., h floordiv G, s, e]`` (GQA
       with ``G = H / Hkv`` query heads per key/value head; batch dims broadcast);
    2. one ``prim.elementwise`` over the scores: ``x * scale``, then for ``is_causal``
       ``select(coord_s <= coord_l, x, -inf)`` (``prim.coord`` of the last two dims), for an
       ``i1`` mask ``select(mask, x, -inf)``, for a float mask ``x + mask`` (masks broadcast
       by ``index_map``);
    3. the softmax chain along ``s`` (:func:`softmax`);
    4. ``out[b.., h, l, f] = sum_s p'[b.., h, l, f, s] * v'[b.., h, l, f, s]`` with
       ``v' = v[b.., h floordiv G, s, f]``.

    Scores and probabilities are in the accumulator type (``f32`` for 16-bit inputs).
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.SdpaOp, rewriter: PatternRewriter) -> None:
        p = op.props
        gqa = p.get_bool("enable_gqa")
        causal = p.get_bool("is_causal")
        scale = p.get_float("scale")
        qs, ks, vs = _shape(op.query), _shape(op.key), _shape(op.value)
        lead = 3 if gqa else 2
        batch = broadcast_extents(qs[:-lead], ks[:-lead], vs[:-lead])
        nb = len(batch)
        heads = (qs[-3],) if gqa else ()
        group = qs[-3] // ks[-3] if gqa else 1
        length, keys, width = qs[-2], ks[-2], vs[-1]
        element = _result_element(op)
        acc = accumulator_type(element)
        em = Emitter()

        # 1. scores = q @ k^T over dims (b.., [h], l, s, e).
        rank = nb + len(heads) + 3
        d = _dims(rank)
        hd = d[nb:nb + len(heads)]
        kv_head = [hd[0] if group == 1 else hd[0] // group] if gqa else []
        l_, s_, e_ = d[-3], d[-2], d[-1]
        q_map = AffineMap(rank, 0, (*_batch_exprs(qs[:-lead], batch), *hd, l_, e_))
        k_map = AffineMap(rank, 0, (*_batch_exprs(ks[:-lead], batch), *kv_head, s_, e_))
        score_shape = (*batch, *heads, length, keys)
        scores = em.contract(op.query, q_map, op.key, k_map, (*score_shape, qs[-1]),
                             score_shape, acc)

        # 2. scale and mask.
        inputs = [scores]
        if op.mask is not None:
            inputs.append(em.broadcast(op.mask, score_shape))
        mask_is_bool = op.mask is not None and t.is_bool(_element(op.mask))
        sdim = len(score_shape) - 1

        def scale_and_mask(b: ScalarBuilder, x: SSAValue, *mask: SSAValue) -> SSAValue:
            x = b.mul(x, b.const(scale, acc))
            if causal:
                keep = b.compare("le", b.coord(sdim), b.coord(sdim - 1))
                x = b.select(keep, x, b.const(-math.inf, acc))
            if mask and mask_is_bool:
                x = b.select(mask[0], x, b.const(-math.inf, acc))
            elif mask:
                x = b.add(x, b.cast(mask[0], acc))
            return x

        masked = em.elementwise(inputs, score_shape, acc, scale_and_mask)

        # 3. softmax along the keys; 4. probs @ v over dims (b.., [h], l, f, s).
        probs = softmax(em, masked, sdim, acc)
        d = _dims(rank)
        hd = d[nb:nb + len(heads)]
        kv_head = [hd[0] if group == 1 else hd[0] // group] if gqa else []
        l_, f_, s_ = d[-3], d[-2], d[-1]
        p_map = AffineMap(rank, 0, (*d[:nb], *hd, l_, s_))
        v_map = AffineMap(rank, 0, (*_batch_exprs(vs[:-lead], batch), *kv_head, s_, f_))
        out_shape = (*batch, *heads, length, width)
        out = em.contract(probs, p_map, op.value, v_map, (*out_shape, keys), out_shape, element)
        _finish(rewriter, op, em, out)
