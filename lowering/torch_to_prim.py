"""``torch-to-prim``: decompose every Torch-IR op into the three Tensor-IR primitives.

Matches each ``torch.*`` op (one pattern per op or op family) and replaces it with
``prim.elementwise`` (a scalar ``arith``/``math`` body), ``prim.reduce`` and ``prim.index_map``
ops computing the same tensor. The function signature is kept; tensors stay tensors.

* Elementwise ops broadcast their operands with ``prim.index_map`` (NumPy rules) and apply
  the scalar op in an ``elementwise`` body; ``torch.constant`` becomes a fill
  (``prim.elementwise () : () -> tensor<f32>`` yielding an ``arith.constant``).
* Reductions reduce with ``prim.reduce`` (kept unit dims), ``mean`` multiplies by ``1/N``;
  ``keepdim = false`` drops the unit dims with an ``index_map``.
* Contractions (``linear``, ``matmul``, ``bmm``) become the product
  ``prod[b.., m, n, k] = A'[b.., m, n, k] * B'[b.., m, n, k]`` of two ``index_map``
  broadcasts, ``prim.reduce add`` over ``k`` and an ``index_map`` dropping the kept unit dim:
  the Loop-IR fusion pass turns the three into one matmul kernel.
* ``softmax`` is the numerically stable max / sub-exp / sum / div chain, ``rms_norm`` the
  square / mean / add-eps-rsqrt / scale chain that Hugging Face models spell out.
* Data movement (``transpose``, ``permute``, ``reshape``, ``unsqueeze``, ``expand``,
  ``slice``, ``cat``) is one ``prim.index_map`` each; reshape maps group the dims whose
  extents multiply to the same product, so a dim that maps straight through stays ``dN``.
* ``embedding`` is a ``prim.gather`` along axis 0 of the weight; ``arange`` a fill whose
  body computes ``start + step * prim.coord 0``.
* ``sdpa`` is ``scores = q @ k^T`` as a contraction (under GQA the key/value operand's map
  reads head ``h floordiv (Hq / Hkv)``: the head broadcast costs nothing), one elementwise
  op that scales and masks (causal: ``select(coord_s <= coord_l, x, -inf)`` with
  ``prim.coord``; an ``i1`` mask selects, a float mask adds), the softmax chain along the keys,
  and ``probs @ v`` as a second contraction.
* Integer arithmetic uses ``arith.addi/subi/muli/maxsi``; comparisons ``arith.cmpf``
  (ordered; ``ne`` unordered, as IEEE ``!=``) or ``arith.cmpi`` (signed); ``logical_*`` are
  ``arith.andi/ori/xori`` on ``i1``; ``where`` is ``arith.select``; casts follow PyTorch
  (``sitofp``, ``fptosi``, ``extsi``/``trunci``, ``extui``/``uitofp`` from ``i1``, ``x != 0``
  to ``i1``).

**16-bit floats are storage.** ``f16``/``bf16`` values are only loaded, stored and converted:
every ``prim.elementwise`` body widens its 16-bit inputs to ``f32`` (``arith.extf``), computes
in ``f32`` and rounds its result once (``arith.truncf``, to nearest even) — what PyTorch does
for one op on 16-bit tensors, so a torch op rounds exactly where PyTorch rounds it (``linear``
adds its bias to the ``f32`` sums, ``rms_norm`` scales by its weight in ``f32``, as PyTorch's
fused kernels do). Reductions and
contractions accumulate in ``f32`` (the product/cast feeding the ``prim.reduce`` widens, the
last elementwise step narrows); ``amax`` reduces the widened values (exact) and narrows.

**Symbolic extents.** A program with ``?`` extents lowers the same way; every op whose result
extent does not follow from its inputs gets the ``index`` value of that extent, found by
:func:`llmopt.lowering._extents.extent_of` (a symbol argument, or a ``sizes`` operand):
broadcasts to a ``?`` dim are ``prim.index_map ... sizes(%seq)``, a ``slice`` with ``index``
bounds reads ``d * step + s0`` with ``symbols(%start)`` and the extent ``ceildiv(end - start,
step)`` computed by ``arith`` ops, ``cat`` along a ``?`` axis offsets its segments by map
symbols, a dynamic ``arange`` is a fill with ``sizes``. Reshape maps group a ``?`` extent with
static ones (``[?, 64] -> [?, 4, 16]``, ``[1, ?, 8] -> [?]``) as long as it stays the
outermost extent of its group. ``mean`` and ``rms_norm`` over a ``?`` dim (whose ``1/N`` would
be a runtime value) are rejected, naming the op.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects import math as mathd
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.ir.affine import (
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
    AffineSymExpr,
)
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.utils.exceptions import PassFailedException

from llmopt.dialects import torch as t
from llmopt.dialects._symbols import has_dynamic, is_dynamic
from llmopt.dialects.prim import (
    CoordOp,
    ElementwiseOp,
    GatherOp,
    IndexMapOp,
    InsertOp,
    ReduceOp,
    YieldOp,
)
from llmopt.lowering._extents import (
    Extent,
    ExtentError,
    Polynomial,
    dynamic_values,
    extents_of,
    multiply,
    polynomial,
    static_shape,
)
from llmopt.lowering.loop_to_tile import fail

Shape = tuple[Extent, ...]
"""A shape as the lowering sees it: static extents are ints, ``?`` extents the ``index``
values that hold them (see :mod:`llmopt.lowering._extents`)."""

_WIDTH = {Float16Type: 16, BFloat16Type: 16, Float32Type: 32, Float64Type: 64}


def _width(typ: Attribute) -> int:
    return _WIDTH[type(typ)]


def _is_half(typ: Attribute) -> bool:
    """``f16`` or ``bf16``."""
    return isinstance(typ, Float16Type | BFloat16Type)


def accumulator_type(element: Attribute) -> Attribute:
    """The element type reductions accumulate in: ``f32`` for ``f16``/``bf16``, else itself."""
    return Float32Type() if _width(element) < 32 else element


def _shape(value: SSAValue) -> Shape:
    """The extents of ``value``: ints, with the ``index`` value of each ``?``."""
    typ = value.type
    assert isinstance(typ, TensorType)
    if not has_dynamic(typ):
        return tuple(typ.get_shape())
    return extents_of(value)


def _same(a: Extent, b: Extent) -> bool:
    """Whether two extents are equal: equal ints, or the same polynomial of ``index``
    values."""
    return a == b if isinstance(a, int) and isinstance(b, int) else polynomial(a) == polynomial(b)


def _same_shape(a: Sequence[Extent], b: Sequence[Extent]) -> bool:
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))


def broadcast_extents(*shapes: Shape) -> Shape:
    """NumPy broadcasting of verified shapes: per dim the extent that is not 1 (the first
    ``?`` where several operands have one: the verifier accepted them as equal)."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[Extent] = []
    for k in range(rank):
        extents = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
        big = [e for e in extents if not (isinstance(e, int) and e == 1)]
        dynamic = [e for e in big if not isinstance(e, int)]
        out.append(dynamic[0] if dynamic else (big[0] if big else 1))
    return tuple(out)


def _element(value: SSAValue) -> Attribute:
    typ = value.type
    assert isinstance(typ, TensorType)
    return typ.element_type


def _dims(rank: int) -> list[AffineExpr]:
    return [AffineDimExpr(i) for i in range(rank)]


def broadcast_map(src: Sequence[Extent], dst: Sequence[Extent]) -> AffineMap:
    """NumPy broadcast of ``src`` to ``dst`` (right-aligned; stretched unit dims read 0)."""
    offset = len(dst) - len(src)
    exprs: list[AffineExpr] = []
    for j, extent in enumerate(src):
        i = j + offset
        stretched = isinstance(extent, int) and extent == 1 and not _same(dst[i], 1)
        exprs.append(AffineConstantExpr(0) if stretched else AffineDimExpr(i))
    return AffineMap(len(dst), 0, tuple(exprs))


def _product(extents: Sequence[Extent]) -> Polynomial:
    """The product of ``extents`` as a :func:`~llmopt.lowering._extents.polynomial`."""
    out = polynomial(1)
    for e in extents:
        out = multiply(out, polynomial(e))
    return out


def _smaller(a: Polynomial, b: Polynomial) -> bool:
    """Whether the (unequal) product ``a`` divides ``b`` properly: both single terms, the
    atoms of ``a`` a sub-multiset of ``b``'s (the coefficient smaller when they are the
    same); raises ``ValueError`` when the two cannot be related."""
    if len(a) != 1 or len(b) != 1:
        raise ValueError("the symbolic extents of the two shapes do not match up")
    (atoms_a, coef_a), (atoms_b, coef_b) = a[0], b[0]
    rest = list(atoms_b)
    for atom in atoms_a:
        if atom not in rest:
            break
        rest.remove(atom)
    else:
        if rest or coef_a < coef_b:
            return True
    rest = list(atoms_a)
    for atom in atoms_b:
        if atom not in rest:
            raise ValueError("the symbolic extents of the two shapes do not match up")
        rest.remove(atom)
    return False


def reshape_map(src: Sequence[Extent], dst: Sequence[Extent]) -> AffineMap:
    """Row-major reshape of ``src`` into ``dst`` as a map from ``dst`` to ``src`` coordinates.

    Unit dims of ``src`` read 0; the other dims are grouped into runs whose extents multiply
    to the same product on both sides. A run of one dim on each side maps straight through;
    otherwise the ``dst`` coordinates of the run are linearised and delinearised into ``src``
    with ``floordiv``/``mod`` by its strides. A symbolic extent (an ``index`` value) may only
    be the outermost extent of its run on each side: strides stay constants.
    """
    if _product(src) != _product(dst):
        raise ValueError(f"cannot reshape {_text(src)} to {_text(dst)}")
    exprs: list[AffineExpr] = [AffineConstantExpr(0) for _ in src]
    src_nz = [j for j, e in enumerate(src) if not _same(e, 1)]
    dst_nz = [i for i, e in enumerate(dst) if not _same(e, 1)]
    p = q = 0
    while p < len(src_nz) and q < len(dst_nz):
        group_src, group_dst = [src_nz[p]], [dst_nz[q]]
        size_src, size_dst = _product([src[src_nz[p]]]), _product([dst[dst_nz[q]]])
        p, q = p + 1, q + 1
        while size_src != size_dst:
            if _smaller(size_src, size_dst):
                if p == len(src_nz):
                    raise ValueError(f"cannot reshape {_text(src)} to {_text(dst)}")
                group_src.append(src_nz[p])
                size_src = _product([src[j] for j in group_src])
                p += 1
            else:
                if q == len(dst_nz):
                    raise ValueError(f"cannot reshape {_text(src)} to {_text(dst)}")
                group_dst.append(dst_nz[q])
                size_dst = _product([dst[i] for i in group_dst])
                q += 1
        if len(group_src) == 1 and len(group_dst) == 1:
            exprs[group_src[0]] = AffineDimExpr(group_dst[0])
            continue
        inner = [dst[i] for i in group_dst[1:]] + [src[j] for j in group_src[1:]]
        if not all(isinstance(e, int) for e in inner):
            raise ValueError(f"reshape {_text(src)} to {_text(dst)} merges or splits a symbolic "
                             "extent that is not the outermost of its group")
        linear: AffineExpr = AffineConstantExpr(0)
        stride = 1
        for i in reversed(group_dst):
            linear = AffineDimExpr(i) * stride + linear
            if i != group_dst[0]:
                stride *= dst[i]  # type: ignore[assignment]
        stride = 1
        for pos, j in reversed(list(enumerate(group_src))):
            expr = linear if stride == 1 else linear // stride
            if pos > 0:
                expr = expr % src[j]  # type: ignore[operator]
                stride *= src[j]  # type: ignore[assignment]
            exprs[j] = expr
    return AffineMap(len(dst), 0, tuple(exprs))


def _text(shape: Sequence[Extent]) -> str:
    return "[" + ", ".join(str(e) if isinstance(e, int) else "?" for e in shape) + "]"


def _is_integer(typ: Attribute) -> bool:
    """Integer and ``index`` scalars (``arith.*i`` ops), as opposed to floats."""
    return isinstance(typ, IntegerType | IndexType)


_CMPF = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}
_CMPI = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}


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


# --- elementwise --------------------------------------------------------------------------------

_BINARY: dict[type[t.BinaryOp], Callable[[ScalarBuilder, SSAValue, SSAValue], SSAValue]] = {
    t.AddOp: ScalarBuilder.add,
    t.SubOp: ScalarBuilder.sub,
    t.MulOp: ScalarBuilder.mul,
    t.DivOp: ScalarBuilder.div,
    t.MaximumOp: ScalarBuilder.maximum,
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
    """``torch.add/sub/mul/div/maximum`` → ``index_map`` broadcasts of the operands whose
    shape differs from the result's, then one ``prim.elementwise`` with ``arith.addf``,
    ``subf``, ``mulf``, ``divf`` or ``maximumf``."""

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


# --- reductions and normalisations --------------------------------------------------------------


class LowerReduction(RewritePattern):
    """``torch.sum/mean/amax`` → ``prim.reduce add/add/max`` over the (non-negative) dims;
    ``mean`` then multiplies by ``1/N`` in an ``elementwise``; ``keepdim = false`` drops the
    kept unit dims with an ``index_map``. ``f16``/``bf16`` sums accumulate in ``f32``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: t.ReductionOp, rewriter: PatternRewriter) -> None:
        dims = op.reduced_dims
        element = _result_element(op)
        em = Emitter()
        if isinstance(op, t.AmaxOp):
            out = em.cast(em.reduce(em.cast(op.input, accumulator_type(element)), "max", dims),
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


# --- contractions -------------------------------------------------------------------------------


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


# --- data movement ------------------------------------------------------------------------------


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


PATTERNS: tuple[type[RewritePattern], ...] = (
    LowerBinary, LowerUnary, LowerCompare, LowerLogical, LowerLogicalNot, LowerWhere, LowerPow,
    LowerTo, LowerConstant, LowerArange,
    LowerReduction, LowerSoftmax, LowerRmsNorm,
    LowerMatmul, LowerBmm, LowerLinear, LowerSdpa,
    LowerTranspose, LowerPermute, LowerReshape, LowerUnsqueeze, LowerExpand, LowerSlice, LowerCat,
    LowerSliceScatter, LowerEmbedding,
)  # fmt: skip
"""The patterns of ``torch-to-prim``, one per torch op (families share one)."""


@dataclass(frozen=True)
class TorchToPrim(ModulePass):
    """Lower Torch IR to Tensor IR: every ``torch.*`` op becomes ``prim.elementwise``,
    ``prim.reduce`` and ``prim.index_map`` ops (see the module docstring)."""

    name = "torch-to-prim"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        walker = PatternRewriteWalker(
            GreedyRewritePatternApplier([p() for p in PATTERNS]),
            apply_recursively=False,
        )
        walker.rewrite_module(op)
        left = sorted({o.name for o in op.walk() if isinstance(o, t.TorchOp)})
        if left:
            raise PassFailedException(f"torch-to-prim left ops it cannot lower: {left}")
