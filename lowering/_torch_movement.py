"""``torch-to-prim``'s data movement: transposes, permutations, reshapes, expansions,
slices and concatenations, each one ``prim.index_map``."""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    IndexType,
    IntegerAttr,
    TensorType,
)
from xdsl.ir import SSAValue
from xdsl.ir.affine import (
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
    AffineSymExpr,
)
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)

from llmopt.dialects import torch as t
from llmopt.dialects.prim import (
    IndexMapOp,
    InsertOp,
)
from llmopt.lowering._extents import (
    Extent,
    dynamic_values,
    static_shape,
)
from llmopt.lowering._torch_emit import Emitter, _finish, _result_element, _result_shape
from llmopt.lowering._torch_shapes import _dims, _shape
from llmopt.passes._rewrite import fail


class LowerTranspose(RewritePattern):
    """``torch.transpose`` → ``prim.index_map`` swapping two coordinates."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.TransposeOp, rewriter: PatternRewriter) -> None:
        shape = _result_shape(op)
        d0 = t.norm_dim(op.props.get_int("dim0"), len(shape))
        d1 = t.norm_dim(op.props.get_int("dim1"), len(shape))
        if d0 == d1:
            rewriter.replace(op, [], [op.input])
            return
        exprs = _dims(len(shape))
        exprs[d0], exprs[d1] = exprs[d1], exprs[d0]
        em = Emitter()
        out = em.index_map(op.input, AffineMap(len(shape), 0, tuple(exprs)), shape)
        _finish(rewriter, op, em, out)


class LowerPermute(RewritePattern):
    """``torch.permute`` → ``prim.index_map``: input coordinate ``dims[i]`` is result
    coordinate ``i``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.PermuteOp, rewriter: PatternRewriter) -> None:
        shape = _result_shape(op)
        perm = t.norm_dims(op.props.get_ints("dims"), len(shape))
        if perm == tuple(range(len(shape))):
            rewriter.replace(op, [], [op.input])
            return
        exprs: list[AffineExpr] = [AffineConstantExpr(0)] * len(shape)
        for i, j in enumerate(perm):
            exprs[j] = AffineDimExpr(i)
        em = Emitter()
        out = em.index_map(op.input, AffineMap(len(shape), 0, tuple(exprs)), shape)
        _finish(rewriter, op, em, out)


class LowerReshape(RewritePattern):
    """``torch.reshape`` → ``prim.index_map`` with :func:`reshape_map` (the input itself
    when the shape is unchanged)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.ReshapeOp, rewriter: PatternRewriter) -> None:
        em = Emitter()
        try:
            out = em.reshape(op.input, _result_shape(op))
        except ValueError as err:  # a symbolic extent inside a merged group: not affine
            raise fail(op, str(err)) from None
        _finish(rewriter, op, em, out)


class LowerUnsqueeze(RewritePattern):
    """``torch.unsqueeze`` → ``prim.index_map`` ignoring the new unit coordinate."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.UnsqueezeOp, rewriter: PatternRewriter) -> None:
        shape = _result_shape(op)
        dim = t.norm_dim(op.props.get_int("dim"), len(shape))
        exprs = [e for i, e in enumerate(_dims(len(shape))) if i != dim]
        em = Emitter()
        out = em.index_map(op.input, AffineMap(len(shape), 0, tuple(exprs)), shape)
        _finish(rewriter, op, em, out)


class LowerExpand(RewritePattern):
    """``torch.expand`` → a broadcasting ``prim.index_map`` (stretched dims read 0)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.ExpandOp, rewriter: PatternRewriter) -> None:
        em = Emitter()
        _finish(rewriter, op, em, em.broadcast(op.input, _result_shape(op)))


class LowerSlice(RewritePattern):
    """``torch.slice`` → ``prim.index_map`` reading ``d * step + start`` along ``dim``
    (the input itself for a full slice). With ``index`` bounds the start is the map symbol
    ``s0`` (``symbols(%start)``) and the extent ``ceildiv(end - start, step)`` is computed by
    ``arith`` ops, the ``sizes`` operand of that dim."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.SliceOp, rewriter: PatternRewriter) -> None:
        if not op.props.has("start"):
            self.dynamic(op, rewriter)
            return
        shape = _result_shape(op)
        if shape == _shape(op.input):
            rewriter.replace(op, [], [op.input])
            return
        p = op.props
        dim = t.norm_dim(p.get_int("dim"), len(shape))
        exprs = _dims(len(shape))
        exprs[dim] = exprs[dim] * p.get_int("step") + p.get_int("start")
        em = Emitter()
        out = em.index_map(op.input, AffineMap(len(shape), 0, tuple(exprs)), shape)
        _finish(rewriter, op, em, out)

    @staticmethod
    def dynamic(op: t.SliceOp, rewriter: PatternRewriter) -> None:
        start, end = op.index_operands
        step = op.props.get_int("step")
        rank = len(_shape(op.input))
        dim = t.norm_dim(op.props.get_int("dim"), rank)
        em = Emitter()
        extent = em.index(arith.SubiOp(end, start))
        if step != 1:
            stride = em.index(arith.ConstantOp(IntegerAttr(step, IndexType())))
            extent = em.index(arith.CeilDivSIOp(extent, stride))
        shape = list(_shape(op.input))
        shape[dim] = extent
        exprs = _dims(rank)
        exprs[dim] = exprs[dim] * step + AffineSymExpr(0)
        out = em.index_map(op.input, AffineMap(rank, 1, tuple(exprs)), shape, [start])
        _finish(rewriter, op, em, out)


class LowerCat(RewritePattern):
    """``torch.cat`` → ``prim.index_map (%a, %b, ..) concat AXIS [...]``: input ``i`` owns
    the next segment of the axis and reads ``d_axis - offset_i`` there. Along a ``?`` axis
    the offsets that are not constants are map symbols (running sums by ``arith.addi``) and
    the result's extent there is the total."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.CatOp, rewriter: PatternRewriter) -> None:
        if len(op.inputs) == 1:
            rewriter.replace(op, [], [op.inputs[0]])
            return
        rank = len(_shape(op.inputs[0]))
        axis = t.norm_dim(op.props.get_int("dim"), rank)
        em = Emitter()
        offsets: list[Extent] = [0]
        for value in op.inputs:
            offsets.append(_add(em, offsets[-1], _shape(value)[axis]))
        symbols = dynamic_values(offsets[1:-1])
        maps: list[AffineMap] = []
        for offset in offsets[:-1]:
            exprs = _dims(rank)
            if isinstance(offset, int):
                exprs[axis] = exprs[axis] - offset
            else:
                exprs[axis] = exprs[axis] - AffineSymExpr(symbols.index(offset))
            maps.append(AffineMap(rank, len(symbols), tuple(exprs)))
        shape = list(_shape(op.inputs[0]))
        shape[axis] = offsets[-1]
        new = IndexMapOp(list(op.inputs), maps,
                         TensorType(_result_element(op), static_shape(shape)), concat=axis,
                         sizes=dynamic_values(shape), symbols=symbols)
        _finish(rewriter, op, em, em.append(new))


class LowerSliceScatter(RewritePattern):
    """``torch.slice_scatter`` → ``prim.insert %src into %base axis D at start`` (the start
    an ``index`` operand when the bounds are; the extent is the source's)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.SliceScatterOp, rewriter: PatternRewriter) -> None:
        dim = t.norm_dim(op.props.get_int("dim"), len(_shape(op.input)))
        start: int | SSAValue = (op.props.get_int("start") if op.props.has("start")
                                 else op.index_operands[0])
        new = InsertOp(op.src, op.input, dim, start)
        rewriter.replace(op, [new], [new.result])


def _add(em: Emitter, a: Extent, b: Extent) -> Extent:
    """``a + b``: an int when both are, else an ``index`` value (constants materialised)."""
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    lhs = a if not isinstance(a, int) else em.index(arith.ConstantOp(IntegerAttr(a, IndexType())))
    rhs = b if not isinstance(b, int) else em.index(arith.ConstantOp(IntegerAttr(b, IndexType())))
    if isinstance(a, int) and a == 0:
        return rhs
    return em.index(arith.AddiOp(lhs, rhs))
