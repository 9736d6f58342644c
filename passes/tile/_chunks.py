"""Chunks of consecutive elements a thread: the analysis and rewrite that
``vector-elementwise`` (a map over threads) and ``vector-rows`` (a row's cooperative
reductions and its map over the block's threads) share.

A loop variable ``%i`` (a forall's innermost, or a ``tile.coop_reduce``'s) is written
``%i = V·%q + %v``: ``%q`` counts chunks of ``V`` elements and ``%v`` runs over a chunk in an
unrolled loop. An access is *contiguous* along ``%i`` when it reads or writes a kernel
buffer (global memory), unclamped, whose elements are whole bytes and whose innermost
extent is static, at innermost coordinate ``f(%i) + rest`` (:func:`innermost_multiples`);
then, when ``V`` divides the numbers that function returns, the ``V`` elements of a chunk
are consecutive and start ``V``-aligned (kernel buffers are 16-byte aligned), so one copy
of ``V·bytes`` moves them (:func:`contiguous`). :func:`chunk_body` builds the chunk form:
one ``tile.copy`` into registers per contiguous load before the ``%v`` loop, the old body
inside it reading the registers, one ``tile.copy`` out per store after it. Each element is
computed by the same operations as before; loads that are not contiguous stay scalar loads
inside the ``%v`` loop, their coordinates written in ``V·%q + %v`` (:func:`split_point`).
"""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, MemRefType
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
)
from xdsl.pattern_rewriter import PatternRewriter

from llmopt.dialects import loop, tile
from llmopt.dialects._syntax import int_array
from llmopt.dialects.kernel import COPY_BYTES
from llmopt.passes._ir import element_bits
from llmopt.passes.loop._fuse_analysis import used_dims
from llmopt.passes.tile._access import UNROLL, counted_for, linear_form

VECTOR_BYTES = 16
"""The widest access of a thread: one 128-bit global load or store."""

Access = loop.LoadOp | loop.StoreOp


def chunk_bytes(buffer: SSAValue) -> int:
    """Bytes of an element of ``buffer``."""
    return element_bits(buffer) // 8


def _terms(expr: AffineExpr) -> list[AffineExpr]:
    """The summands of ``expr``."""
    if isinstance(expr, AffineBinaryOpExpr) and expr.kind is AffineBinaryOpKind.Add:
        return [*_terms(expr.lhs), *_terms(expr.rhs)]
    return [expr]


def innermost_multiples(access: Access, iv: SSAValue, varying: set[SSAValue]) -> list[int] | None:
    """For an access to a kernel buffer with a static innermost extent and whole-byte
    elements, unclamped, whose innermost coordinate is ``f(iv) + rest`` — ``f(iv)`` either
    ``iv`` or ``(iv + c) mod M`` (the other half of a rotation), ``rest`` linear in values
    that do not depend on ``iv`` — and whose other coordinates do not depend on ``iv``: the
    numbers a chunk's width must divide for each chunk to be consecutive elements starting
    at a multiple of it (``rest``'s coefficients and constant, ``c`` and ``M``). ``None``
    for any other access."""
    if isinstance(access, loop.LoadOp) and access.clamp is not None:
        return None
    buffer = access.buffer
    if not (isinstance(buffer, BlockArgument)
            and isinstance(buffer.owner.parent_op(), tile.KernelOp)):
        return None
    typ = buffer.type
    assert isinstance(typ, MemRefType)
    bits = getattr(typ.element_type, "bitwidth", None)
    shape = typ.get_shape()
    if not shape or shape[-1] < 0 or not isinstance(bits, int) or bits % 8 or not bits:
        return None
    amap = access.map.data
    positions = {k for k, v in enumerate(access.indices) if v in varying}
    if any(used_dims(e) & positions for e in amap.results[:-1]):
        return None
    multiples: list[int] = []
    along: list[AffineExpr] = []
    for term in _terms(amap.results[-1]):
        if used_dims(term) & positions:
            along.append(term)
            continue
        form = linear_form(term)
        if form is None:
            return None
        multiples += [*form[0].values(), form[1]]
    if len(along) != 1:
        return None
    (term,) = along
    modulus: int | None = None
    if isinstance(term, AffineBinaryOpExpr) and term.kind is AffineBinaryOpKind.Mod and (
            isinstance(term.rhs, AffineConstantExpr)):
        modulus = term.rhs.value
        term = term.lhs
    form = linear_form(term)
    if form is None or len(form[0]) != 1:
        return None
    ((k, coef),) = form[0].items()
    if coef != 1 or access.indices[k] is not iv or (modulus is None and form[1]):
        return None
    if modulus is not None:
        multiples += [form[1], modulus]
    return multiples


def contiguous(access: Access, multiples: list[int], width: int) -> bool:
    """Whether ``access``, whose :func:`innermost_multiples` numbers are ``multiples``, reads or
    writes ``width`` consecutive elements a chunk, each chunk starting at a multiple of
    ``width``, in 4, 8 or 16 bytes (see the module docstring)."""
    typ = access.buffer.type
    assert isinstance(typ, MemRefType)
    return (typ.get_shape()[-1] % width == 0 and all(m % width == 0 for m in multiples)
            and width * chunk_bytes(access.buffer) in COPY_BYTES)


def varying_values(body: Block, iv: SSAValue) -> set[SSAValue]:
    """``iv`` and every value of ``body`` computed from it (a ``loop.reduce`` whose body
    reads it among them)."""
    varying = {iv}
    for op in body.ops:
        if any(v in varying for o in op.walk() for v in o.operands):
            varying.update(r for o in op.walk() for r in o.results)
    return varying


MAX_SLICES = 16
"""The longest ``loop.reduce`` a chunk's body may hold (a ``split-k`` sum over its slices):
each contiguous load inside it takes that many chunks of registers."""


def scalar_op(op: Operation) -> bool:
    """Whether ``op`` is a load or a side-effect-free scalar op."""
    return isinstance(op, loop.LoadOp) or (op.dialect_name() in ("arith", "math")
                                           and not op.regions)


def straight_line(body: Block) -> bool:
    """Whether ``body`` holds only loads, stores, side-effect-free scalar ops and static
    ``loop.reduce`` ops of at most :data:`MAX_SLICES` iterations over loads and such ops
    (a ``split-k`` sum)."""
    return all(isinstance(op, loop.StoreOp) or scalar_op(op) or (
        isinstance(op, loop.ReduceOp) and not op.is_dynamic
        and op.trip_count <= MAX_SLICES
        and all(scalar_op(o) or isinstance(o, loop.YieldOp) for o in op.body.block.ops))
        for op in body.ops)


def chunk_width(extent: int, accesses: list[Access], limit: int) -> int:
    """``V``: the elements of the widest of ``accesses`` in ``limit`` bytes when that is at
    least 2 and divides ``extent`` (the chunked variable's), else 0."""
    width = limit // max(chunk_bytes(a.buffer) for a in accesses)
    return width if width >= 2 and extent % width == 0 else 0


def chunk_body(body: Block, iv: SSAValue, varying: set[SSAValue], loads: list[loop.LoadOp],
               stores: list[loop.StoreOp], width: int, rewriter: PatternRewriter,
               fold: str | None = None) -> None:
    """Build the chunk form of ``body`` in place (see the module docstring): ``iv`` now
    counts chunks of ``width`` elements (the caller divides its extent), the ops that depend
    on it move into an unrolled loop ``%v`` over the chunk's elements, each of ``loads``
    becomes one copy into registers before that loop and each of ``stores`` one copy out
    after it. Without ``fold`` the loop is an ``scf.for``; with a reduction kind ``fold``,
    ``body`` is a ``tile.coop_reduce``'s and the loop is a ``loop.reduce fold`` of the value
    its ``tile.yield`` yielded, which now yields the loop's result."""
    q = iv  # the variable now counts chunks
    q.name_hint = "q"
    moved = [o for o in body.ops if any(r in varying for r in o.results)
             or isinstance(o, loop.StoreOp)]
    terminator = body.last_op if isinstance(body.last_op, tile.YieldOp) else None
    chunk: scf.ForOp | loop.ReduceOp
    if fold is None:
        bounds, chunk, v = counted_for(width, "v", dict(UNROLL))
    else:
        assert terminator is not None
        bounds, chunk = [], loop.ReduceOp(fold, width, terminator.operands[0].type)
        chunk.attributes |= UNROLL
        v = chunk.body.block.args[0]
        v.name_hint = "v"
    inner = chunk.body.block
    scale = arith.ConstantOp(IntegerAttr(width, IndexType()))
    first = arith.MuliOp(q, scale.result)
    point = arith.AddiOp(first.result, v)
    point.result.name_hint = "i"
    inner.add_ops([scale, first, point])
    for o in moved:
        o.detach()
        inner.add_op(o)
        for nested in o.walk():
            for k, operand in enumerate(nested.operands):
                if operand is q:
                    nested.operands[k] = point.result
    if terminator is not None and fold is not None:
        inner.add_op(loop.YieldOp(terminator.operands[0]))
        terminator.operands[0] = chunk.results[0]
    else:
        inner.add_op(scf.YieldOp())

    def registers(access: Access, rows: int = 0) -> tile.AllocOp:
        """A chunk of ``access``'s elements in registers, or ``rows`` of them."""
        typ = access.buffer.type
        assert isinstance(typ, MemRefType)
        alloc = tile.AllocOp("registers", MemRefType(typ.element_type,
                                                     [rows, width] if rows else [width]))
        alloc.result.name_hint = "vec"
        return alloc

    def chunk_map(access: Access, indices: list[SSAValue]) -> AffineMap:
        """The access's map with ``iv`` (now ``q``) scaled by ``width``."""
        amap = access.map.data
        scaled = [AffineDimExpr(d) * width if indices[d] is q else AffineDimExpr(d)
                  for d in range(amap.num_dims)]
        return AffineMap(amap.num_dims, amap.num_symbols,
                         (*amap.results[:-1], amap.results[-1].replace_dims_and_symbols(
                             scaled, [])))

    def start(indices: list[SSAValue]) -> AffineMap:
        return AffineMap(len(indices), 0, (AffineConstantExpr(0),))

    one = AffineMap(1, 0, (AffineDimExpr(0),))
    before: list[Operation] = []
    copies: dict[tuple[object, ...], tile.AllocOp] = {}
    for load in loads:
        indices = [q if i is point.result else i for i in load.indices]
        reduce = load.parent_op()
        sliced = isinstance(reduce, loop.ReduceOp) and reduce.iv in indices
        key = (load.buffer, load.map.data, *indices)
        alloc = copies.get(key)
        if alloc is None and not sliced:
            alloc = copies[key] = registers(load)
            before += [alloc, tile.CopyOp(load.buffer, chunk_map(load, indices), alloc.result,
                                          start(indices), indices, width)]
        elif alloc is None:  # one chunk a slice, the slice's index a constant
            assert isinstance(reduce, loop.ReduceOp)
            alloc = copies[key] = registers(load, reduce.trip_count)
            before.append(alloc)
            for k in range(reduce.trip_count):
                at = arith.ConstantOp(IntegerAttr(k, IndexType()))
                fixed = [at.result if i is reduce.iv else i for i in indices]
                row = AffineMap(len(fixed), 0, (AffineConstantExpr(k), AffineConstantExpr(0)))
                before += [at, tile.CopyOp(load.buffer, chunk_map(load, indices),
                                           alloc.result, row, fixed, width)]
        if sliced:
            assert isinstance(reduce, loop.ReduceOp)
            reduce.attributes |= UNROLL  # its registers are indexed by the slice
            new = loop.LoadOp(alloc.result, AffineMap(2, 0, (AffineDimExpr(0),
                                                             AffineDimExpr(1))),
                              [reduce.iv, v])
        else:
            new = loop.LoadOp(alloc.result, one, [v])
        new.results[0].name_hint = load.results[0].name_hint
        rewriter.replace(load, new)
    after: list[Operation] = []
    for store in stores:
        alloc = registers(store)
        indices = [q if i is point.result else i for i in store.indices]
        before.append(alloc)
        after.append(tile.CopyOp(alloc.result, start(indices), store.buffer,
                                 chunk_map(store, indices), indices, width))
        rewriter.replace(store, loop.StoreOp(store.value, alloc.result, one, [v]))
    vectorized = set(loads)
    for load in [o for o in inner.walk() if isinstance(o, loop.LoadOp)
                 and o not in vectorized and point.result in o.indices]:
        rewriter.replace(load, split_point(load, point.result, q, v, width))
    for o in [*before, *bounds, chunk, *after]:
        if terminator is None:
            body.add_op(o)
        else:
            body.insert_op_before(o, terminator)


def chunk_forall(forall: tile.ForallOp, outer: dict[SSAValue, SSAValue], limit: int,
                 rewriter: PatternRewriter) -> int:
    """Rewrite ``forall`` (a map over threads or a block's threads) into its chunk form when
    its innermost extent is static, its body straight-line (:func:`straight_line`), every
    store contiguous along its innermost variable, no load reading a buffer it writes
    (``outer``: the kernel's arguments → its operands, so that two arguments of one buffer
    count as one) and the width ``V`` of at most ``limit`` bytes divides what it must; its
    innermost extent is then divided by ``V``. Returns ``V``, or 0 when ``forall`` stays as
    it was."""
    body, iv = forall.body.block, forall.ivs[-1]
    if len(forall.ivs) - 1 in forall.runtime_sizes or not straight_line(body):
        return 0
    varying = varying_values(body, iv)
    stores = [o for o in body.ops if isinstance(o, loop.StoreOp)]
    loads = [o for o in body.walk() if isinstance(o, loop.LoadOp)]
    forms = {a: m for a in [*stores, *loads]
             if (m := innermost_multiples(a, iv, varying)) is not None}
    if not stores or any(s not in forms for s in stores):
        return 0
    written = {outer.get(s.buffer, s.buffer) for s in stores}
    if any(outer.get(ld.buffer, ld.buffer) in written for ld in loads):
        return 0
    width = chunk_width(forall.shape[-1], list(forms), limit)
    if not width or not all(contiguous(s, forms[s], width) for s in stores):
        return 0
    chunked = [ld for ld in loads if ld in forms and contiguous(ld, forms[ld], width)]
    shape = list(forall.shape)
    shape[-1] //= width
    forall.properties["extents"] = int_array(shape)
    chunk_body(body, iv, varying, chunked, stores, width, rewriter)
    return width


def split_point(load: loop.LoadOp, point: SSAValue, q: SSAValue, v: SSAValue,
                 width: int) -> loop.LoadOp:
    """``load`` (a scalar load in the element loop) with ``point`` written ``width·q + v``
    in its map: its coordinates then stay within the ranges ``tile-to-kernel`` derives from
    ``q``'s and ``v``'s extents (a rotation's ``(i + 64) mod 128`` needs no sign fix-up)."""
    amap = load.map.data
    n = amap.num_dims
    dims = [AffineDimExpr(d) * width + AffineDimExpr(n) if load.indices[d] is point
            else AffineDimExpr(d) for d in range(n)]
    indices = [q if i is point else i for i in load.indices]
    new = loop.LoadOp(load.buffer, AffineMap(n + 1, amap.num_symbols, tuple(
        e.replace_dims_and_symbols(dims, []) for e in amap.results)), [*indices, v],
        load.clamp is not None)
    new.results[0].name_hint = load.results[0].name_hint
    return new


__all__ = ["MAX_SLICES", "VECTOR_BYTES", "Access", "chunk_body", "chunk_bytes", "chunk_forall",
           "chunk_width",
           "contiguous", "innermost_multiples", "scalar_op", "split_point", "straight_line",
           "varying_values"]
