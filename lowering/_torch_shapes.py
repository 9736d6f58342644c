"""Shapes, broadcasts and reshapes as ``torch-to-prim`` computes them (see
:mod:`llmopt.lowering.torch_to_prim`)."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerType,
    TensorType,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.ir.affine import (
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
)

from llmopt.dialects._symbols import has_dynamic
from llmopt.lowering._extents import (
    Extent,
    Polynomial,
    extents_of,
    multiply,
    polynomial,
)

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
    """The element type reductions accumulate in: ``f32`` for ``f16``/``bf16``, else itself
    (``f32``, ``f64`` and the integers)."""
    return Float32Type() if _is_half(element) else element


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
