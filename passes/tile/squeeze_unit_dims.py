"""``squeeze-unit-dims``: a kernel sees a buffer without its trailing dimensions of extent 1.

**Matches** an operand of a ``tile.kernel`` — a buffer whose type (identity layout, at
most one ``?`` extent: a host view of the length) ends in one or more dimensions of extent 1
after at least one other dimension, passed once —
whose every use in the kernel is a ``loop.load`` or ``loop.store`` indexing those
dimensions with the constant 0. A product whose reduced dimension was kept writes such a
buffer (``[1, seq, 2048, 1]`` of ``f32``: the query projection before its rotary
embedding), and the kernels after it read it.

**Produces** a ``memref.collapse_shape`` of the operand that folds the unit dimensions into
the last other one (``[[0], [1], [2, 3]]``: a view of the same memory), right after the
buffer's definition in the function's top block (so that a kernel inside a length bucket's
branch uses a view made outside it: the executor runs views there only; a buffer allocated
inside a branch is left alone) and shared by every kernel that squeezes that buffer, the
kernel's argument of that type, and every access without the unit coordinates::

    tile.kernel @k ... (%o = %q : memref<1x?x2048x1xf32>) { loop.store %x, %o[%i, %j, %k, 0] }
  →
    %view = memref.collapse_shape %q [[0], [1], [2, 3]] : ... into memref<1x?x2048xf32>
    tile.kernel @k ... (%o = %view : memref<1x?x2048xf32>) { loop.store %x, %o[%i, %j, %k] }

The same elements are read and written: nothing changes in value.

**Why** the passes that widen accesses (``vector-elementwise``, ``vector-epilogue``) look
for runs of consecutive elements along a buffer's innermost dimension. With a unit
dimension last, the innermost coordinate is always 0 and every access looks scattered, so
the query projection's epilogue, its split-K sum and the rotary map that reads it kept
one 4-byte access per element. Squeezed, their accesses run along the 2048 columns.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects import func, memref
from xdsl.dialects.builtin import (
    ArrayAttr,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    NoneAttr,
    i64,
)
from xdsl.ir import BlockArgument, SSAValue
from xdsl.ir.affine import AffineConstantExpr, AffineMap
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from llmopt.dialects import loop, tile
from llmopt.passes._rewrite import KeepLocation
from llmopt.passes.tile._chunks import Access


def _kept(typ: MemRefType) -> int:
    """The dimensions of ``typ`` left once its trailing extents of 1 go (its rank when
    there are none, or when nothing else would be left)."""
    shape = list(typ.get_shape())
    keep = len(shape)
    while keep > 1 and shape[keep - 1] == 1:
        keep -= 1
    return keep


def _squeezable(arg: BlockArgument, keep: int) -> list[Access] | None:
    """The accesses of ``arg``, when every use is a ``loop.load``/``loop.store`` of it
    whose coordinates past ``keep`` are the constant 0 (none when it has no use); else
    ``None``."""
    accesses: list[Access] = []
    for use in arg.uses:
        op = use.operation
        if not isinstance(op, Access) or op.buffer is not arg:
            return None
        if any(e != AffineConstantExpr(0) for e in op.map.data.results[keep:]):
            return None
        accesses.append(op)
    return accesses


class SqueezeKernelBuffers(RewritePattern):
    """Squeeze every qualifying operand of one ``tile.kernel`` (see the module docstring)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.KernelOp, rewriter: PatternRewriter) -> None:
        buffers = list(op.buffers)
        for k, (arg, outer) in enumerate(zip(op.body.block.args, buffers, strict=True)):
            typ = arg.type
            if not isinstance(typ, MemRefType) or not isinstance(typ.layout, NoneAttr):
                continue
            keep = _kept(typ)
            if (keep == typ.get_num_dims() or sum(b is outer for b in buffers) != 1
                    or sum(d < 0 for d in typ.get_shape()) > 1):
                continue
            accesses = _squeezable(arg, keep)
            if not accesses:
                continue
            view = _view(outer, keep, rewriter)
            if view is None:
                continue
            op.operands[k] = view
            new_arg = rewriter.replace_value_with_new_type(arg, view.type)
            for access in accesses:
                rewriter.replace_op(access, _without_units(access, new_arg, keep))


def _view(buffer: SSAValue, keep: int, rewriter: PatternRewriter) -> SSAValue | None:
    """``buffer`` collapsed to its first ``keep`` dimensions: a view made by an earlier
    kernel's squeeze when there is one, else a new one right after ``buffer``'s definition.
    ``None`` when ``buffer`` is not defined in its function's top block (an allocation
    inside a branch: the executor runs views only there)."""
    block = buffer.block if isinstance(buffer, BlockArgument) else buffer.owner.parent_block()
    if block is None or not isinstance(block.parent_op(), func.FuncOp):
        return None
    typ = buffer.type
    assert isinstance(typ, MemRefType)
    shape = list(typ.get_shape())
    squeezed = MemRefType(typ.element_type, shape[:keep], memory_space=typ.memory_space)
    for use in buffer.uses:
        view = use.operation
        if (isinstance(view, memref.CollapseShapeOp) and view.results[0].type == squeezed
                and view.parent_block() is block):
            return view.results[0]
    groups = [[d] for d in range(keep - 1)] + [list(range(keep - 1, len(shape)))]
    view = memref.CollapseShapeOp.build(
        operands=[buffer], result_types=[squeezed],
        properties={"reassociation": ArrayAttr([
            ArrayAttr([IntegerAttr(d, i64) for d in g]) for g in groups])})
    where = (InsertPoint.at_start(block) if isinstance(buffer, BlockArgument)
             else InsertPoint.after(buffer.owner))
    rewriter.insert_op(view, where)
    return view.results[0]


def _without_units(access: Access, buffer: SSAValue, keep: int) -> Access:
    """``access`` of ``buffer`` with the map's results past ``keep`` dropped."""
    amap = access.map.data
    squeezed = AffineMap(amap.num_dims, amap.num_symbols, amap.results[:keep])
    if isinstance(access, loop.LoadOp):
        new: Access = loop.LoadOp(buffer, squeezed, list(access.indices),
                                  access.clamp is not None)
        new.results[0].name_hint = access.results[0].name_hint
    else:
        new = loop.StoreOp(access.value, buffer, squeezed, list(access.indices))
    new.attributes |= access.attributes
    return new


class SqueezeUnitDims(ModulePass):
    """Give kernels their buffers without trailing unit dimensions (see the module
    docstring)."""

    name = "squeeze-unit-dims"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(KeepLocation(SqueezeKernelBuffers()),
                             apply_recursively=False).rewrite_module(op)


__all__ = ["SqueezeKernelBuffers", "SqueezeUnitDims"]
