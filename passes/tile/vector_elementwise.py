"""``vector-elementwise``: each thread of an elementwise nest moves 16 bytes at a time.

**Matches** a ``tile.kernel`` whose body is side-effect-free scalar ops and one
``tile.forall over threads`` (``loop-to-tile``'s thread schedule: an elementwise map, an
index map such as a rotary embedding or a gather, a ``split-k`` sum) whose body is
straight-line — ``loop.load``, ``loop.store``, side-effect-free ``arith``/``math`` ops and
static ``loop.reduce`` ops of at most :data:`MAX_SLICES` iterations over loads and such ops
— with a static innermost extent ``E``.
An access is *contiguous* when it reads or writes a kernel buffer (global memory),
unclamped, whose elements are whole bytes and whose innermost extent is static, at
innermost coordinate ``f(%i) + rest``: ``%i`` the forall's innermost induction variable,
``f(%i)`` either ``%i`` or ``(%i + c) mod M`` (a rotation's other half), ``rest`` linear in
values that do not depend on ``%i`` (heads split out of a row: ``h·128 + %i``), no other
coordinate depending on ``%i``. The pass applies when every ``loop.store`` is contiguous,
no buffer is both loaded and stored (a point reading what it wrote stays in order), and
``V`` — the elements of the widest contiguous access that make :data:`VECTOR_BYTES` — is
at least 2 and divides ``E``, every store's innermost extent, ``rest``'s coefficients and
constant, ``c`` and ``M``: then ``V`` consecutive points touch ``V`` consecutive elements,
starting 16-byte aligned (kernel buffers are). A contiguous load for which that does not
hold, or whose ``V`` elements are not 4, 8 or 16 bytes, stays scalar (a store of that kind
leaves the kernel as it is).

**Produces**, for ``%i = V·%q + %v``::

    tile.forall (…, %q) in […, E/V] over threads {
      <the ops that do not depend on %i>
      %x = tile.alloc registers : memref<Vxbf16>            // one per contiguous load
      tile.copy %in[…, %q * V] to %x[0] count V
      %y = tile.alloc registers : memref<Vxbf16>            // one per store
      scf.for %v = 0 to V {                                  // unrolled
        %i = V·%q + %v
        <the other ops; a contiguous load reads %x[%v], a store writes %y[%v]>
      }
      tile.copy %y[0] to %out[…, %q * V] count V
    }

and the kernel's grid divided by ``V`` (a runtime grid through ``arith.ceildivui`` before
the kernel). A contiguous load inside a ``loop.reduce`` whose coordinates use the reduction's
variable ``%s`` (a ``split-k`` sum's slice) becomes one copy per slice, ``%s`` a constant in
each, into row ``%s`` of a ``[S, V]`` register buffer that the reduction, unrolled, reads
at ``[%s, %v]``. Each point computes what it computed before, with the same operations, so the
results are bit-identical; loads that are not contiguous (a broadcast row, a neighbour at
``%i + 1``) stay scalar loads inside the ``%v`` loop, their coordinates written in ``V·%q
+ %v`` so that ``tile-to-kernel`` knows their ranges.

**Why** one element a thread issues one 2-byte load per input and one 2-byte store, and its
flat index's division by each extent, per element: the kernel is bound by instructions
before it is bound by memory. With ``V`` elements a thread, each contiguous access is one
128-bit ``ld.global``/``st.global`` and the index arithmetic is shared by ``V`` elements.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, MemRefType, ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
)
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from llmopt.dialects import loop, tile
from llmopt.dialects._syntax import int_array
from llmopt.dialects.kernel import COPY_BYTES
from llmopt.passes._ir import element_bits
from llmopt.passes._rewrite import KeepLocation
from llmopt.passes.loop._fuse_analysis import used_dims
from llmopt.passes.tile._access import UNROLL, counted_for, linear_form

VECTOR_BYTES = 16
"""The widest access of a thread: one 128-bit global load or store."""

Access = loop.LoadOp | loop.StoreOp


def _bytes(buffer: SSAValue) -> int:
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


def _contiguous(access: Access, multiples: list[int], width: int) -> bool:
    """Whether ``access``, whose :func:`innermost_multiples` numbers are ``multiples``, reads or
    writes ``width`` consecutive elements a chunk, each chunk starting at a multiple of
    ``width``, in 4, 8 or 16 bytes (see the module docstring)."""
    typ = access.buffer.type
    assert isinstance(typ, MemRefType)
    return (typ.get_shape()[-1] % width == 0 and all(m % width == 0 for m in multiples)
            and width * _bytes(access.buffer) in COPY_BYTES)


def _varying(body: Block, iv: SSAValue) -> set[SSAValue]:
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


def _scalar(op: Operation) -> bool:
    """Whether ``op`` is a load or a side-effect-free scalar op."""
    return isinstance(op, loop.LoadOp) or (op.dialect_name() in ("arith", "math")
                                           and not op.regions)


def _straight_line(body: Block) -> bool:
    """Whether ``body`` holds only loads, stores, side-effect-free scalar ops and static
    ``loop.reduce`` ops of at most :data:`MAX_SLICES` iterations over loads and such ops
    (a ``split-k`` sum)."""
    return all(isinstance(op, loop.StoreOp) or _scalar(op) or (
        isinstance(op, loop.ReduceOp) and not op.is_dynamic
        and op.trip_count <= MAX_SLICES
        and all(_scalar(o) or isinstance(o, loop.YieldOp) for o in op.body.block.ops))
        for op in body.ops)


def _width(forall: tile.ForallOp, accesses: list[Access], limit: int) -> int:
    """``V``: the elements of the widest of ``accesses`` in ``limit`` bytes when that is at
    least 2 and divides the forall's innermost extent, else 0."""
    width = limit // max(_bytes(a.buffer) for a in accesses)
    return width if width >= 2 and forall.shape[-1] % width == 0 else 0


@dataclass
class VectorizeElementwise(RewritePattern):
    """Rewrite one qualifying kernel (see the module docstring)."""

    limit: int = VECTOR_BYTES

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.KernelOp, rewriter: PatternRewriter) -> None:
        foralls = [o for o in op.body.block.ops if isinstance(o, tile.ForallOp)]
        if len(foralls) != 1 or foralls[0].mapping.data != "threads" or any(
                o.regions or o.dialect_name() not in ("arith", "math")
                for o in op.body.block.ops if o is not foralls[0]):
            return
        forall = foralls[0]
        body = forall.body.block
        iv = forall.ivs[-1]
        if len(forall.ivs) - 1 in forall.runtime_sizes or not _straight_line(body):
            return
        varying = _varying(body, iv)
        stores = [o for o in body.ops if isinstance(o, loop.StoreOp)]
        loads = [o for o in body.walk() if isinstance(o, loop.LoadOp)]
        forms = {a: m for a in [*stores, *loads]
                 if (m := innermost_multiples(a, iv, varying)) is not None}
        if not stores or any(s not in forms for s in stores):
            return
        outer = dict(zip(op.body.block.args, op.buffers, strict=True))
        written = {outer.get(s.buffer, s.buffer) for s in stores}
        if any(outer.get(ld.buffer, ld.buffer) in written for ld in loads):
            return
        width = _width(forall, list(forms), self.limit)
        if not width or not all(_contiguous(s, forms[s], width) for s in stores):
            return
        contiguous = [ld for ld in loads if ld in forms and _contiguous(ld, forms[ld], width)]
        _rewrite(forall, iv, varying, contiguous, stores, width, rewriter)
        _divide_grid(op, width, rewriter)


def _rewrite(forall: tile.ForallOp, iv: SSAValue, varying: set[SSAValue],
             loads: list[loop.LoadOp], stores: list[loop.StoreOp], width: int,
             rewriter: PatternRewriter) -> None:
    """Build the chunk form of ``forall`` in place (see the module docstring)."""
    body = forall.body.block
    shape = list(forall.shape)
    shape[-1] //= width
    forall.properties["extents"] = int_array(shape)
    q = iv  # the forall's innermost variable now counts chunks
    q.name_hint = "q"
    moved = [o for o in body.ops if any(r in varying for r in o.results)
             or isinstance(o, loop.StoreOp)]
    bounds, chunk, v = counted_for(width, "v", dict(UNROLL))
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
        rewriter.replace(load, _split_point(load, point.result, q, v, width))
    terminator = body.last_op if isinstance(body.last_op, tile.YieldOp) else None
    for o in [*before, *bounds, chunk, *after]:
        if terminator is None:
            body.add_op(o)
        else:
            body.insert_op_before(o, terminator)


def _split_point(load: loop.LoadOp, point: SSAValue, q: SSAValue, v: SSAValue,
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


def _divide_grid(kernel: tile.KernelOp, width: int, rewriter: PatternRewriter) -> None:
    """The kernel's grid divided by ``width``, rounded up (its largest value likewise)."""
    grid = list(kernel.grid_shape)
    grid[0] = -(-grid[0] // width)
    kernel.properties["grid"] = int_array(grid)
    if kernel.grid_size is None:
        return
    factor = arith.ConstantOp(IntegerAttr(width, IndexType()))
    divided = arith.CeilDivUIOp(kernel.grid_size, factor.result)
    divided.result.name_hint = "grid"
    rewriter.insert([factor, divided], InsertPoint.before(kernel))
    kernel.operands[len(kernel.buffers)] = divided.result


@dataclass(frozen=True)
class VectorElementwise(ModulePass):
    """Give each thread of an elementwise nest 16 bytes of every contiguous access (see the
    module docstring)."""

    name = "vector-elementwise"

    bytes: int = VECTOR_BYTES
    """The widest access a thread makes (4, 8 or 16); 0 leaves every kernel as it is."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.bytes == 0:  # llmopt.options checks the range
            return
        PatternRewriteWalker(KeepLocation(VectorizeElementwise(self.bytes)),
                             apply_recursively=False).rewrite_module(op)


__all__ = ["VECTOR_BYTES", "VectorElementwise", "VectorizeElementwise", "innermost_multiples"]
