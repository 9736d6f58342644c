"""The builders ``torch-to-prim``'s patterns share: scalar bodies (:class:`ScalarBuilder`)
and Tensor-IR ops (:class:`Emitter`), and the result shapes and types of Torch-IR ops."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xdsl.dialects import arith
from xdsl.dialects import math as mathd
from xdsl.dialects.builtin import (
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.ir.affine import AffineMap
from xdsl.pattern_rewriter import PatternRewriter

from llmopt.dialects import torch as t
from llmopt.dialects._symbols import has_dynamic, is_dynamic
from llmopt.dialects.prim import (
    CoordOp,
    ElementwiseOp,
    IndexMapOp,
    ReduceOp,
    YieldOp,
)
from llmopt.lowering._extents import (
    Extent,
    ExtentError,
    dynamic_values,
    static_shape,
)
from llmopt.lowering._torch_shapes import (
    _CMPF,
    _CMPI,
    Shape,
    _element,
    _is_half,
    _is_integer,
    _same_shape,
    _shape,
    _width,
    accumulator_type,
    broadcast_extents,
    broadcast_map,
    reshape_map,
)
from llmopt.passes._rewrite import fail


class ScalarBuilder:
    """Appends scalar ``arith``/``math`` ops to an elementwise body block.

    Arithmetic dispatches on the operand type: floats use ``arith.*f``, integers (and
    ``index``) ``arith.*i``.
    """

    def __init__(self, block: Block) -> None:
        self.block = block

    def _emit(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0]

    def const(self, value: float, typ: Attribute) -> SSAValue:
        if _is_integer(typ):
            return self._emit(arith.ConstantOp(IntegerAttr(int(value), typ)))  # type: ignore[arg-type]
        return self._emit(arith.ConstantOp(FloatAttr(value, typ)))  # type: ignore[arg-type]

    def coord(self, dim: int) -> SSAValue:
        """The coordinate (``index``) of the computed point along result dim ``dim``."""
        return self._emit(CoordOp(dim))

    def add(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.AddiOp(a, b) if _is_integer(a.type) else arith.AddfOp(a, b))

    def sub(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.SubiOp(a, b) if _is_integer(a.type) else arith.SubfOp(a, b))

    def mul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.MuliOp(a, b) if _is_integer(a.type) else arith.MulfOp(a, b))

    def div(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.DivfOp(a, b))

    def maximum(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.MaxSIOp(a, b) if _is_integer(a.type) else arith.MaximumfOp(a, b))

    def minimum(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.MinSIOp(a, b) if _is_integer(a.type) else arith.MinimumfOp(a, b))

    def neg(self, a: SSAValue) -> SSAValue:
        if _is_integer(a.type):
            return self.sub(self.const(0, a.type), a)
        return self._emit(arith.NegfOp(a))

    def compare(self, predicate: str, a: SSAValue, b: SSAValue) -> SSAValue:
        """``a <predicate> b`` for ``eq/ne/lt/le/gt/ge`` as ``i1`` (signed for integers;
        ordered for floats except ``ne``, which is true on NaN like IEEE ``!=``)."""
        if _is_integer(a.type):
            return self._emit(arith.CmpiOp(a, b, _CMPI[predicate]))
        return self._emit(arith.CmpfOp(a, b, _CMPF[predicate]))

    def select(self, cond: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.SelectOp(cond, a, b))

    def logical_and(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.AndIOp(a, b))

    def logical_or(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.OrIOp(a, b))

    def logical_not(self, a: SSAValue) -> SSAValue:
        return self._emit(arith.XOrIOp(a, self.const(1, a.type)))

    def cos(self, a: SSAValue) -> SSAValue:
        return self._emit(mathd.CosOp(a))

    def sin(self, a: SSAValue) -> SSAValue:
        return self._emit(mathd.SinOp(a))

    def exp(self, a: SSAValue) -> SSAValue:
        return self._emit(mathd.ExpOp(a))

    def rsqrt(self, a: SSAValue) -> SSAValue:
        return self._emit(mathd.RsqrtOp(a))

    def sqrt(self, a: SSAValue) -> SSAValue:
        return self._emit(mathd.SqrtOp(a))

    def tanh(self, a: SSAValue) -> SSAValue:
        return self._emit(mathd.TanhOp(a))

    def powf(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(mathd.PowFOp(a, b))

    def cast(self, a: SSAValue, to: Attribute) -> SSAValue:
        """``a`` converted to ``to`` as PyTorch converts: ``arith.extf``/``truncf`` between
        floats (through ``f32`` between 16-bit types); ``sitofp``/``fptosi`` (toward zero)
        between integers and floats; ``extsi``/``trunci`` between integers; ``i1`` is 0/1
        (``extui``/``uitofp``); anything to ``i1`` is ``a != 0``; ``index`` through
        ``arith.index_cast`` to ``i64``."""
        src = a.type
        if src == to:
            return a
        if isinstance(src, IndexType):
            return self.cast(self._emit(arith.IndexCastOp(a, i64)), to)
        if isinstance(to, IndexType):
            return self._emit(arith.IndexCastOp(self.cast(a, i64), to))
        if isinstance(to, IntegerType) and to.width.data == 1:
            return self.compare("ne", a, self.const(0, src))
        if isinstance(src, IntegerType) and src.width.data == 1:
            if isinstance(to, IntegerType):
                return self._emit(arith.ExtUIOp(a, to))
            return self._emit(arith.UIToFPOp(a, to))  # type: ignore[arg-type]
        if isinstance(src, IntegerType) and isinstance(to, IntegerType):
            if src.width.data < to.width.data:
                return self._emit(arith.ExtSIOp(a, to))
            return self._emit(arith.TruncIOp(a, to))
        if isinstance(src, IntegerType):
            return self._emit(arith.SIToFPOp(a, to))  # type: ignore[arg-type]
        if isinstance(to, IntegerType):
            return self._emit(arith.FPToSIOp(a, to))
        if _width(src) < _width(to):
            return self._emit(arith.ExtFOp(a, to))
        if _width(src) > _width(to):
            return self._emit(arith.TruncFOp(a, to))
        return self.cast(self.cast(a, Float32Type()), to)

    def sigmoid(self, a: SSAValue) -> SSAValue:
        one = self.const(1.0, a.type)
        return self.div(one, self.add(one, self.exp(self.neg(a))))


Body = Callable[..., SSAValue]
"""Builds an elementwise body: ``body(builder, *scalars) -> scalar``."""


@dataclass
class Emitter:
    """Collects the prim ops of one decomposition, in order."""

    ops: list[Operation] = field(default_factory=list[Operation])

    def elementwise(self, inputs: Sequence[SSAValue], shape: Sequence[Extent],
                    element: Attribute, body: Body) -> SSAValue:
        """``prim.elementwise`` over ``inputs`` (all of ``shape``) with the scalar ``body``
        (a fill, without inputs, takes the ``?`` extents of ``shape`` as its sizes)."""
        sizes = [] if inputs else dynamic_values(shape)
        op, block = ElementwiseOp.build(list(inputs), TensorType(element, static_shape(shape)),
                                        sizes)
        builder = ScalarBuilder(block)
        # 16-bit floats are storage: compute in f32 (f64 for an f64 result), round once.
        wide = element if isinstance(element, Float64Type) else Float32Type()
        args = [builder.cast(a, wide) if _is_half(a.type) else a for a in block.args]
        result = body(builder, *args)
        if result.type != element and _is_half(element):
            result = builder.cast(result, element)
        block.add_op(YieldOp(result))
        self.ops.append(op)
        return op.result

    def fill(self, value: float, element: Attribute) -> SSAValue:
        """A rank-0 tensor holding ``value``."""
        return self.elementwise([], (), element, lambda b: b.const(value, element))

    def index_map(self, value: SSAValue, amap: AffineMap, shape: Sequence[Extent],
                  symbols: Sequence[SSAValue] = ()) -> SSAValue:
        """``prim.index_map`` of one input (``sizes``: the ``?`` extents of ``shape``)."""
        op = IndexMapOp([value], [amap], TensorType(_element(value), static_shape(shape)),
                        sizes=dynamic_values(shape), symbols=symbols)
        self.ops.append(op)
        return op.result

    def index(self, op: Operation) -> SSAValue:
        """Append an ``arith`` op computing an ``index`` value; return its result."""
        self.ops.append(op)
        return op.results[0]

    def append(self, op: Operation) -> SSAValue:
        """Append ``op``; return its (first) result."""
        self.ops.append(op)
        return op.results[0]

    def broadcast(self, value: SSAValue, shape: Sequence[Extent]) -> SSAValue:
        """``value`` broadcast to ``shape``; itself when it already has that shape."""
        shape = tuple(shape)
        if _same_shape(_shape(value), shape):
            return value
        return self.index_map(value, broadcast_map(_shape(value), shape), shape)

    def reshape(self, value: SSAValue, shape: Sequence[Extent]) -> SSAValue:
        """``value`` reshaped (row-major) to ``shape``; itself when the shape is unchanged."""
        shape = tuple(shape)
        if _same_shape(_shape(value), shape):
            return value
        return self.index_map(value, reshape_map(_shape(value), shape), shape)

    def reduce(self, value: SSAValue, kind: str, dims: Sequence[int]) -> SSAValue:
        """``prim.reduce`` of ``value`` along ``dims``; ``value`` itself when every one of
        them has extent 1 (the combination of one element is that element; reduced dims
        keep extent 1, so the types agree): a product over ``K = 1``, such as the outer
        product of positions and frequencies of rotary embeddings, stays elementwise and
        fuses with its neighbours instead of being a reduction kernel of its own."""
        shape = _shape(value)
        if all(shape[d] == 1 for d in dims):
            return value
        op = ReduceOp(value, kind, sorted(dims))
        self.ops.append(op)
        return op.result

    def cast(self, value: SSAValue, element: Attribute) -> SSAValue:
        """Elementwise cast; itself when the element type is already ``element``."""
        if _element(value) == element:
            return value
        return self.elementwise([value], _shape(value), element, lambda b, x: b.cast(x, element))

    def contract(self, a: SSAValue, a_map: AffineMap, b: SSAValue, b_map: AffineMap,
                 prod_shape: Sequence[Extent], out_shape: Sequence[Extent],
                 out_element: Attribute) -> SSAValue:
        """``out = sum_k A'[.., k] * B'[.., k]``: broadcast both operands to ``prod_shape``
        (whose last dim is ``k``) with the given maps, multiply, reduce the last dim with
        ``add`` and drop it (reshaping to ``out_shape``); the result is ``out_element``."""
        acc = accumulator_type(out_element)
        lhs = self.index_map(a, a_map, prod_shape)
        rhs = self.index_map(b, b_map, prod_shape)
        prod = self.elementwise(
            [lhs, rhs], prod_shape, acc,
            lambda bld, x, y: bld.mul(bld.cast(x, acc), bld.cast(y, acc)),
        )
        summed = self.reduce(prod, "add", [len(prod_shape) - 1])
        return self.cast(self.reshape(summed, out_shape), out_element)


def _result_shape(op: t.TorchOp) -> Shape:
    """The extents of ``op``'s result: its type's, with the ``index`` value of each ``?``
    derived from the operands' extents as the op computes its shape."""
    typ = op.results[0].type
    assert isinstance(typ, TensorType)
    if not has_dynamic(typ):
        return tuple(typ.get_shape())
    try:
        extents = _derived_extents(op)
    except ExtentError as err:
        raise fail(op, f"cannot find the runtime extents of the result: {err}") from None
    if extents is None:
        raise fail(op, "cannot find the runtime extents of the result (an op with ? extents "
                   "that torch-to-prim does not know)")
    return extents


def _derived_extents(op: t.TorchOp) -> Shape | None:
    """The result extents of a torch op from its operands' (``None`` for ops it cannot
    tell: ``slice`` and ``cat`` along a ``?`` dim compute theirs with ``arith`` ops)."""
    typ = op.results[0].type
    assert isinstance(typ, TensorType)
    static = tuple(typ.get_shape())
    operands = [_shape(v) for v in op.tensor_operands]
    if op.INDEX_OPERANDS and not isinstance(op, t.SliceOp):
        sizes = iter(op.index_operands)
        return tuple(next(sizes) if is_dynamic(e) else e for e in static)
    if isinstance(op, t.BinaryOp | t.CompareOp | t.LogicalOp | t.WhereOp):
        return broadcast_extents(*operands)
    if isinstance(op, t.UnaryOp | t.PowOp | t.ToOp | t.SoftmaxOp | t.RmsNormOp
                  | t.LogicalNotOp):
        return operands[0]
    if isinstance(op, t.ReductionOp):
        dims = op.reduced_dims
        if op.keeps_dims:
            return tuple(1 if k in dims else e for k, e in enumerate(operands[0]))
        return tuple(e for k, e in enumerate(operands[0]) if k not in dims)
    if isinstance(op, t.LinearOp):
        return (*operands[0][:-1], operands[1][0])
    if isinstance(op, t.MatmulOp | t.BmmOp):
        a, b = operands
        a2 = (1, *a) if len(a) == 1 else a
        b2 = (*b, 1) if len(b) == 1 else b
        batch = broadcast_extents(a2[:-2], b2[:-2])
        return (*batch, *(() if len(a) == 1 else (a2[-2],)), *(() if len(b) == 1 else (b2[-1],)))
    if isinstance(op, t.SdpaOp):
        q, k, v = operands[:3]
        lead = 3 if op.props.get_bool("enable_gqa") else 2
        heads = (q[-3],) if lead == 3 else ()
        return (*broadcast_extents(q[:-lead], k[:-lead], v[:-lead]), *heads, q[-2], v[-1])
    if isinstance(op, t.TransposeOp):
        out = list(operands[0])
        d0 = t.norm_dim(op.props.get_int("dim0"), len(out))
        d1 = t.norm_dim(op.props.get_int("dim1"), len(out))
        out[d0], out[d1] = out[d1], out[d0]
        return tuple(out)
    if isinstance(op, t.PermuteOp):
        perm = t.norm_dims(op.props.get_ints("dims"), len(static))
        return tuple(operands[0][d] for d in perm)
    if isinstance(op, t.UnsqueezeOp):
        d = t.norm_dim(op.props.get_int("dim"), len(static))
        return (*operands[0][:d], 1, *operands[0][d:])
    if isinstance(op, t.SliceOp) and op.props.has("start"):
        d = t.norm_dim(op.props.get_int("dim"), len(static))
        return tuple(static[k] if k == d else e for k, e in enumerate(operands[0]))
    if isinstance(op, t.SliceScatterOp):
        return operands[0]
    if isinstance(op, t.CatOp):
        d = t.norm_dim(op.props.get_int("dim"), len(static))
        if all(isinstance(s[d], int) for s in operands):
            return tuple(static[k] if k == d else e for k, e in enumerate(operands[0]))
        return None
    if isinstance(op, t.EmbeddingOp):
        return (*operands[1], operands[0][1])
    return None


def _result_element(op: t.TorchOp) -> Attribute:
    return _element(op.results[0])


def _finish(rewriter: PatternRewriter, op: Operation, emitter: Emitter, value: SSAValue) -> None:
    rewriter.replace(op, emitter.ops, [value])
