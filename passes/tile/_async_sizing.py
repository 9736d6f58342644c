"""How wide ``async-copy``'s copies are and how much shared memory its slots take.

The width ``V`` of a fill's copies (4, 2 or 1 elements, as the tile and the global buffer
allow), the padding its slots ask ``pad-shared`` for so rows stay aligned to ``V``, the
bytes of ``S`` slots of every staged tile and of the block's other shared tiles, and the
static bound of a loop whose trip count is a value (see
:mod:`llmopt.passes.tile.async_copy`).
"""

from __future__ import annotations

import contextlib
import math

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IntegerAttr, MemRefType
from xdsl.ir import Operation, SSAValue
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
)

from llmopt.dialects import tile
from llmopt.passes.tile._schedule import padded_bytes
from llmopt.passes.tile.prefetch_stages import Fill
from llmopt.passes.tile.stage_inputs import addends


def vector_width(f: Fill) -> int:
    """The most elements one copy of the fill may move (see
    :mod:`llmopt.passes.tile.async_copy`): a copy moves 4, 8 or 16 bytes; 0 when not even a
    4-byte copy is possible."""
    tile_typ = f.store.buffer.type
    src_typ = f.load.buffer.type
    assert isinstance(tile_typ, MemRefType) and isinstance(src_typ, MemRefType)
    elem = tile_typ.element_type.bitwidth // 8 if hasattr(  # type: ignore[attr-defined]
        tile_typ.element_type, "bitwidth") else 0
    widths = [nbytes // elem for nbytes in (16, 8, 4) if elem and nbytes % elem == 0]
    if not widths:
        return 0
    if widths[-1] == 1:
        fallback = 1
    else:
        fallback = 0  # narrower elements need several per copy: only along a row
    shape = f.forall.shape
    last = f.forall.ivs[-1]
    smap = f.store.map.data
    spos = [i for i, v in enumerate(f.store.indices) if v is last]
    gpos = [i for i, v in enumerate(f.load.indices) if v is last]
    if len(spos) != 1 or len(gpos) != 1:
        return fallback
    if smap.results[-1] != AffineDimExpr(spos[0]) or tile_typ.get_shape()[-1] != shape[-1]:
        return fallback
    if any(spos[0] in r.used_dims() for r in smap.results[:-1]):
        return fallback
    gmap = f.load.map.data
    if any(gpos[0] in r.used_dims() for r in gmap.results[:-1]):
        return fallback
    ivs = {i for i, v in enumerate(f.load.indices) if v in f.forall.ivs}
    fastest = [t for t in addends(gmap.results[-1]) if gpos[0] in t.used_dims()]
    rest = [t for t in addends(gmap.results[-1]) if gpos[0] not in t.used_dims()]
    if fastest != [AffineDimExpr(gpos[0])] or any(ivs & t.used_dims() for t in rest):
        return fallback
    step = 0
    for term in rest:
        step = math.gcd(step, multiple_of(term))
    for width in widths:
        if (shape[-1] % width == 0 and src_typ.get_shape()[-1] % width == 0
                and step % width == 0):
            return width
    return fallback


def multiple_of(expr: AffineExpr) -> int:
    """A number every value of ``expr`` is a multiple of (0: ``expr`` is 0): the constant,
    products' factors, the gcd over sums; divisions and remainders count as 1."""
    if isinstance(expr, AffineConstantExpr):
        return abs(expr.value)
    if isinstance(expr, AffineBinaryOpExpr):
        if expr.kind is AffineBinaryOpKind.Add:
            return math.gcd(multiple_of(expr.lhs), multiple_of(expr.rhs))
        if expr.kind is AffineBinaryOpKind.Mul:
            return multiple_of(expr.lhs) * multiple_of(expr.rhs)
    return 1


def asked_pad(alloc: Operation) -> int | None:
    """The padding a tile asks ``pad-shared`` for (``llmopt.pad``), ``None`` when it asks
    none (``pad-shared`` then pads rows by its default, 1)."""
    pad = alloc.attributes.get("llmopt.pad")
    return pad.value.data if isinstance(pad, IntegerAttr) else None


def slot_pad(alloc: Operation, width: int) -> int | None:
    """The padding the slots of a tile filled ``width`` elements at a time ask for: the
    tile's own when it keeps the rows' alignment (a multiple of ``width``; attention's V
    tile asks for 8), else ``width``."""
    asked = asked_pad(alloc)
    if width > 1 and not (asked and asked % width == 0):
        return width
    return asked


def tile_bytes(fills: list[Fill], widths: list[int], stages: int) -> int:
    """Shared memory of ``stages`` slots of every tile, rows padded as ``pad-shared`` will."""
    total = 0
    for f, width in zip(fills, widths, strict=True):
        typ = f.store.buffer.type
        assert isinstance(typ, MemRefType)
        shape = list(typ.get_shape())
        pad = 0
        if len(shape) > 1 and shape[-1] % 2 == 0:
            asked = slot_pad(f.store.buffer.owner, width)  # type: ignore[arg-type]
            pad = 1 if asked is None else asked
        elem = typ.element_type.bitwidth // 8  # type: ignore[attr-defined]
        total += stages * padded_bytes(shape, pad, elem)
    return total


def other_tiles_bytes(op: scf.ForOp, tiles: set[SSAValue]) -> int:
    """Shared memory of the block's tiles besides ``tiles`` (the ones ``op`` fills), rows
    padded as ``pad-shared`` will: what the slots must leave room for."""
    blocks = op.parent_op()
    assert blocks is not None
    total = 0
    for alloc in blocks.body.block.ops:
        if (isinstance(alloc, tile.AllocOp) and alloc.space.data == "shared"
                and alloc.result not in tiles):
            typ = alloc.result.type
            assert isinstance(typ, MemRefType)
            shape = list(typ.get_shape())
            asked = asked_pad(alloc)
            pad = (1 if asked is None else asked) if len(shape) > 1 and shape[-1] % 2 == 0 else 0
            total += padded_bytes(shape, pad, typ.element_type.bitwidth // 8)  # type: ignore[attr-defined]
    return total


def static_bound(value: SSAValue) -> int | None:
    """A constant that a loop bound ``value`` never exceeds, else ``None``: the smaller
    bound of an ``arith.minui``'s operands (a causal attention's loop over key blocks stops
    at the diagonal's block, at most at the last), where an operand's bound is its largest
    value over the declared bounds of the symbols it is computed from
    (:func:`~llmopt.lowering._extents.maximum_of`: a constant, or the key blocks
    ``ceildivui(n, 64)`` of a symbolic length)."""
    from llmopt.lowering._extents import ExtentError, maximum_of

    owner = value.owner
    if not isinstance(owner, arith.MinUIOp):
        return None
    known = []
    for operand in (owner.lhs, owner.rhs):
        with contextlib.suppress(ExtentError):
            known.append(maximum_of(operand))
    return min(known) if known else None
