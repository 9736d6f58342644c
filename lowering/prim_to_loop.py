"""``prim-to-loop``: Tensor IR → Loop IR.

Each ``prim`` op becomes a buffer (``memref.alloc``) and one ``loop.kernel`` that fills it:

* ``prim.elementwise`` → a free nest over the result, loads of every input at the same
  coordinates, the scalar body (each ``prim.coord d`` replaced by the iv of loop ``d``),
  one store;
* ``prim.reduce`` → a free nest over the kept dims around a ``loop.reduce`` per reduced dim;
* ``prim.index_map`` → a free nest that loads through the op's affine map and stores. The
  concat form loads every segment through a map wrapped in ``mod extent`` (always in bounds,
  exact inside the segment) and selects by comparing the axis coordinate with the segment
  starts;
* ``prim.gather`` → a free nest over the result that loads the index from the indices
  buffer, converts it with ``arith.index_cast`` and loads the table with that value as the
  coordinate along the axis (a ``loop.load`` index operand that is not an iv: the map is the
  identity over the operands ``[ivs before, index, ivs after]``).

Tensor values become buffers; the function's signature follows (tensor arguments and results
become memrefs).

**Symbolic extents.** A ``?`` extent of a tensor (a sequence length bound at function entry)
stays a ``?`` of its buffer, allocated with the function-level ``index`` value that holds it
(``memref.alloc(%seq) : memref<1x?x64xf32>``, the value found by
:func:`~llmopt.lowering._extents.extent_of` before anything is rewritten). Each kernel that
iterates over such an extent takes the value as an ``index`` argument, and its loop over
that dim runs to it: ``loop.for %i = 0 to %n max 2048`` (``max``: the extent at the
symbols' bounds, :func:`~llmopt.lowering._extents.maximum_of`). Reductions over a ``?`` dim
(attention's sums over keys) are ``loop.reduce`` loops with the same runtime bound. A concat
along a ``?`` dim has no affine form yet and is a located diagnostic.

The patterns bridge types with ``builtin.unrealized_conversion_cast``, which the pass
reconciles at the end. Every kernel starts unfused: ``fuse-kernels`` merges them.

Its building blocks (runtime extents, buffers, new kernels and their loop nests) live in
``_prim_kernels``, the function signature's conversion (buffers, in-place updates) in
``_prim_signature``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import (
    IndexType,
    MemRefType,
    ModuleOp,
    UnrealizedConversionCastOp,
)
from xdsl.ir import SSAValue
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
)
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.transforms.reconcile_unrealized_casts import reconcile_unrealized_casts

from llmopt.dialects import loop, prim
from llmopt.lowering._extents import dynamic_values
from llmopt.lowering._prim_kernels import (
    Extents,
    LoopExtent,
    Runtime,
    _as_buffer,
    _identity,
    _inline_scalar_body,
    _Names,
    _new_kernel,
    free_nest,
    in_kernel,
)
from llmopt.lowering._prim_signature import convert_signature, store_updates
from llmopt.passes._rewrite import fail


@dataclass
class ElementwiseToLoop(RewritePattern):
    """``prim.elementwise`` → free nest, loads at the result coordinates, body, store."""

    names: _Names
    extents: Extents

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: prim.ElementwiseOp, rewriter: PatternRewriter) -> None:
        shape = self.extents.results[op]
        kernel, ins, out = _new_kernel(rewriter, op, self.names("elementwise"), op.inputs, shape)
        inner, ivs = free_nest(kernel.body.block, in_kernel(kernel, shape))
        ident = _identity(len(shape))
        loads = [loop.LoadOp(buf, ident, ivs) for buf in ins]
        for load in loads:
            inner.add_op(load)
        value = _inline_scalar_body(op.body.block, inner, [ld.result for ld in loads], ivs)
        inner.add_op(loop.StoreOp(value, out, ident, ivs))


@dataclass
class ReduceToLoop(RewritePattern):
    """``prim.reduce`` → free nest over kept dims around one ``loop.reduce`` per reduced dim."""

    names: _Names
    extents: Extents

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: prim.ReduceOp, rewriter: PatternRewriter) -> None:
        kernel, (src,), out = _new_kernel(rewriter, op, self.names("reduce"), [op.input],
                                          self.extents.results[op])
        in_shape = in_kernel(kernel, self.extents.inputs[op][0])
        reduced = set(op.reduced_dims)
        kept = [d for d in range(len(in_shape)) if d not in reduced]
        inner, free_ivs = free_nest(kernel.body.block, [in_shape[d] for d in kept])
        element = op.result.type.element_type  # type: ignore[union-attr]
        # Nested reduce loops, outermost = lowest reduced dim; the innermost loads.
        coords: dict[int, SSAValue] = dict(zip(kept, free_ivs, strict=True))
        reduces: list[loop.ReduceOp] = []
        for d in sorted(reduced):
            extent = in_shape[d]
            red = (loop.ReduceOp(op.kind.data, extent, element) if isinstance(extent, int)
                   else loop.ReduceOp(op.kind.data, extent.max, element, bound=extent.value))
            red.iv.name_hint = "r"
            coords[d] = red.iv
            reduces.append(red)
        if not reduces:  # reducing no dims copies the input
            value_block = inner
        else:
            inner.add_op(reduces[0])
            for outer, nested in zip(reduces, reduces[1:], strict=False):
                outer.body.block.add_ops([nested, loop.YieldOp(nested.result)])
            value_block = reduces[-1].body.block
        load = loop.LoadOp(src, _identity(len(in_shape)), [coords[d] for d in range(len(in_shape))])
        value_block.add_op(load)
        if reduces:
            value_block.add_op(loop.YieldOp(load.result))
            value: SSAValue = reduces[0].result
        else:
            value = load.result
        out_exprs = tuple(
            AffineConstantExpr(0) if d in reduced else AffineDimExpr(kept.index(d))
            for d in range(len(in_shape))
        )
        inner.add_op(loop.StoreOp(value, out, AffineMap(len(kept), 0, out_exprs), free_ivs))


def uses_dim(expr: AffineExpr, dim: int) -> bool:
    """Whether ``expr`` mentions ``d<dim>``."""
    if isinstance(expr, AffineDimExpr):
        return expr.position == dim
    if isinstance(expr, AffineBinaryOpExpr):
        return uses_dim(expr.lhs, dim) or uses_dim(expr.rhs, dim)
    return False


def _wrap_in_bounds(amap: AffineMap, shape: Sequence[int], axis: int) -> AffineMap:
    """Wrap each result that depends on ``axis`` in ``mod extent``: in bounds everywhere."""
    results: list[AffineExpr] = []
    for expr, extent in zip(amap.results, shape, strict=True):
        if uses_dim(expr, axis):
            results.append(expr % extent)
        else:
            results.append(expr)
    return AffineMap(amap.num_dims, 0, tuple(results))


def _concat_is_static(op: prim.IndexMapOp, shape: Sequence[LoopExtent],
                      inputs: Sequence[Sequence[LoopExtent]]) -> bool:
    """Whether the concat's segments and the extents its loads wrap around are static (a
    rotate-half ``cat`` of ``1x4x?x16`` tensors along the last dim is)."""
    axis = op.concat_axis
    assert axis is not None
    if not isinstance(shape[axis], int):
        return False
    for extents, amap in zip(inputs, op.affine_maps, strict=True):
        if not isinstance(extents[axis] if axis < len(extents) else 0, int):
            return False
        for expr, extent in zip(amap.results, extents, strict=True):
            if uses_dim(expr, axis) and not isinstance(extent, int):
                return False
    return True


@dataclass
class IndexMapToLoop(RewritePattern):
    """``prim.index_map`` → a free nest that loads through the map(s) and stores."""

    names: _Names
    extents: Extents

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: prim.IndexMapOp, rewriter: PatternRewriter) -> None:
        shape = self.extents.results[op]
        axis = op.concat_axis
        if axis is not None and not _concat_is_static(op, shape, self.extents.inputs[op]):
            raise fail(op, "a concat along a ? extent is not lowered to Loop IR yet")
        segments = op.segments() if axis is not None else []
        symbols = list(op.symbols)
        maps = op.affine_maps
        kernel, ins, out = _new_kernel(rewriter, op, self.names("index_map"), op.inputs, shape)
        inner, ivs = free_nest(kernel.body.block, in_kernel(kernel, shape))
        # The maps' symbols (a slice's runtime start) become trailing map dims, bound to the
        # kernel's index arguments.
        operands = [*ivs, *(kernel.bind(v) for v in symbols)]
        maps = [_symbols_as_dims(m) for m in maps]
        if axis is None:
            load = loop.LoadOp(ins[0], maps[0], operands)
            inner.add_op(load)
            inner.add_op(loop.StoreOp(load.result, out, _identity(len(shape)), ivs))
            return
        values: list[SSAValue] = []
        for buf, amap in zip(ins, maps, strict=True):
            in_shape = buf.type.get_shape()  # type: ignore[attr-defined]
            load = loop.LoadOp(buf, _wrap_in_bounds(amap, in_shape, axis), operands)
            inner.add_op(load)
            values.append(load.result)
        # Select from the last segment backwards: v = (c < start_i) ? earlier : segment_i.
        value = values[-1]
        for (start, _), earlier in reversed(list(zip(segments[1:], values[:-1],
                                                     strict=True))):
            bound = arith.ConstantOp.from_int_and_width(start, IndexType())
            cmp = arith.CmpiOp(ivs[axis], bound, "ult")
            sel = arith.SelectOp(cmp, earlier, value)
            inner.add_ops([bound, cmp, sel])
            value = sel.result
        inner.add_op(loop.StoreOp(value, out, _identity(len(shape)), ivs))


@dataclass
class InsertToLoop(RewritePattern):
    """``prim.insert`` → a free nest over ``src`` that loads it and stores it into the
    dest's buffer at the offset (an ``index`` kernel argument when it is one). When
    ``dest`` has no other use the buffer is ``dest``'s own (the update is in place: a
    one-row write into a cache costs one row); otherwise a copy kernel first copies ``dest``
    into a new buffer."""

    names: _Names
    extents: Extents

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: prim.InsertOp, rewriter: PatternRewriter) -> None:
        src_shape, dest_shape = self.extents.inputs[op]
        in_place = sum(1 for _ in op.dest.uses) == 1
        dest = _as_buffer(rewriter, op.dest)
        if not in_place:
            dest = _copy_buffer(rewriter, self.names("copy"), dest, dest_shape)
        kernel = loop.KernelOp(self.names("insert"), [_as_buffer(rewriter, op.src), dest])
        rewriter.insert(kernel)
        back = UnrealizedConversionCastOp.get([dest], [op.result.type])
        rewriter.insert(back)
        rewriter.replace(op, [], [back.results[0]])
        src, out = kernel.body.block.args
        inner, ivs = free_nest(kernel.body.block, in_kernel(kernel, src_shape))
        rank, axis = len(src_shape), op.insert_axis
        exprs: list[AffineExpr] = [AffineDimExpr(d) for d in range(rank)]
        operands = list(ivs)
        if op.static_offset is not None:
            exprs[axis] = exprs[axis] + op.static_offset
        else:
            exprs[axis] = exprs[axis] + AffineDimExpr(rank)
            operands.append(kernel.bind(op.offsets[0]))
        load = loop.LoadOp(src, _identity(rank), ivs)
        inner.add_ops([load, loop.StoreOp(load.result, out,
                                          AffineMap(len(operands), 0, tuple(exprs)), operands)])


def _copy_buffer(rewriter: PatternRewriter, name: str, source: SSAValue,
                 extents: Sequence[LoopExtent]) -> SSAValue:
    """Insert an ``alloc`` like ``source`` and a kernel copying ``source`` into it."""
    typ = source.type
    assert isinstance(typ, MemRefType)
    sizes = dynamic_values([e.value if isinstance(e, Runtime) else e for e in extents])
    alloc = memref.AllocOp.get(typ.element_type, shape=typ.get_shape(), dynamic_sizes=sizes)
    kernel = loop.KernelOp(name, [source, alloc.memref])
    rewriter.insert(alloc)
    rewriter.insert(kernel)
    src, out = kernel.body.block.args
    inner, ivs = free_nest(kernel.body.block, in_kernel(kernel, extents))
    load = loop.LoadOp(src, _identity(len(extents)), ivs)
    inner.add_ops([load, loop.StoreOp(load.result, out, _identity(len(extents)), ivs)])
    return alloc.memref


def _symbols_as_dims(amap: AffineMap) -> AffineMap:
    """``(d0, d1)[s0] -> (d0 + s0, d1)`` as ``(d0, d1, d2) -> (d0 + d2, d1)``."""
    if not amap.num_symbols:
        return amap
    dims = [AffineDimExpr(k) for k in range(amap.num_dims)]
    syms = [AffineDimExpr(amap.num_dims + k) for k in range(amap.num_symbols)]
    return AffineMap(amap.num_dims + amap.num_symbols, 0, tuple(
        e.replace_dims_and_symbols(dims, syms) for e in amap.results))


@dataclass
class GatherToLoop(RewritePattern):
    """``prim.gather`` → free nest; ``%i = loop.load %indices[ivs of the index dims]``,
    ``%x = arith.index_cast %i``, ``loop.load %table[ivs before, %x, ivs after]``, store."""

    names: _Names
    extents: Extents

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: prim.GatherOp, rewriter: PatternRewriter) -> None:
        shape = self.extents.results[op]
        kernel, (table, indices), out = _new_kernel(rewriter, op, self.names("gather"),
                                                    [op.table, op.indices], shape)
        inner, ivs = free_nest(kernel.body.block, in_kernel(kernel, shape))
        axis = op.gather_axis
        rank = len(indices.type.get_shape())  # type: ignore[attr-defined]
        index = loop.LoadOp(indices, _identity(rank), ivs[axis:axis + rank])
        cast = arith.IndexCastOp(index.result, IndexType())
        coords = [*ivs[:axis], cast.result, *ivs[axis + rank:]]
        row = loop.LoadOp(table, _identity(len(coords)), coords)
        inner.add_ops([index, cast, row, loop.StoreOp(row.result, out, _identity(len(shape)),
                                                      ivs)])


@dataclass(frozen=True)
class PrimToLoop(ModulePass):
    """Lower Tensor IR to Loop IR: one unfused ``loop.kernel`` per ``prim`` op."""

    name = "prim-to-loop"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        names = _Names()
        extents = Extents.of(op)
        PatternRewriteWalker(
            GreedyRewritePatternApplier(
                [ElementwiseToLoop(names, extents), ReduceToLoop(names, extents),
                 IndexMapToLoop(names, extents), GatherToLoop(names, extents),
                 InsertToLoop(names, extents)]
            ),
            apply_recursively=False,
        ).rewrite_module(op)
        for fn in list(op.walk()):
            if isinstance(fn, func.FuncOp) and not fn.is_declaration:
                convert_signature(fn)
        reconcile_unrealized_casts(op)
        for fn in list(op.walk()):
            if isinstance(fn, func.FuncOp) and not fn.is_declaration:
                store_updates(fn)
