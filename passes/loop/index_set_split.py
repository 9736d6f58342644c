"""``index-set-split``: a loop whose iterations fall into a few pieces, told apart by
comparisons, becomes one loop over a piece with every piece's body in it.

**Matches** a static ``loop.for %i = 0 to E`` of a ``loop.kernel`` whose variable is used
only as an index of loads and stores and in ``arith.cmpi`` ops against one constant ``c``
(``0 < c < E``, ``c`` dividing ``E``), where some load reads, through ``%i mod c`` or
``%i floordiv c``, a buffer that a matrix-vector product fills: a kernel with a reduction
that computes at most ``max_rows`` rows (the buffer's elements over the extent of the
coordinate read through ``%i``). This is the rotate-half of rotary embeddings in a decode
step::

    loop.for %d = 0 to 64 {                        // q[h, d] from the projection p
      %a = loop.load %p[h * 64 + %d]
      %b = loop.load %p[h * 64 + (%d mod 32) + 32]
      %c = loop.load %p[h * 64 + (%d - 32) mod 32]
      %lo = arith.cmpi ult, %d, %c32
      ... select(%lo, -%b, %c) ...

**Produces** ``loop.for %j = 0 to c`` holding ``E / c`` copies of the body, copy ``k`` for
``%i = %j + k·c``: each access's map is composed with that and simplified over ``%j`` in
``[0, c)`` (``(%j + 32) mod 32`` is ``%j``; linear parts written one way, dims in order),
each comparison becomes the constant it is on the piece, a ``select`` on a constant
becomes its operand, the values no longer used go, and identical loads are one. The
rotary loop above reads ``p[h·64 + %j]`` and ``p[h·64 + %j + 32]`` in both copies and
stores ``q[h, %j]`` and ``q[h, %j + 32]``.

**Why** ``fuse-kernels`` inlines a product into the kernel that reads it only where each
value is computed once: three loads of one iteration reading overlapping halves would each
repeat the sum. Split, the two loads of an iteration read two disjoint halves of the
product, so ``fuse-kernels`` computes both rows in the consumer (two sums, as the fused
gate and up projections are), and the rotary embeddings of the queries and keys, with the
key cache append, become the projection's epilogue: one launch and one round trip through
memory fewer in every layer of a decode step. The products of a prompt (more rows than
``max_rows``, 1 by default) are tensor-core tiles whose epilogues read one column each;
they are left alone. Split, such a product would be one per head of ``c`` columns and two
sums (a 16-token prompt's query projection: 32 products of 16 × 32 in 128 × 64 tiles,
where it was one of 16 × 2048).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from xdsl.context import Context
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import IndexType, IntegerAttr, MemRefType, ModuleOp, i1
from xdsl.ir import Operation, SSAValue
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
)
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import is_side_effect_free

from llmopt.dialects import loop
from llmopt.dialects._syntax import constant_index
from llmopt.passes._ir import nested_ops
from llmopt.passes.loop._affine_ranges import canonical, simplify
from llmopt.passes.loop._fuse_analysis import analyse_producer, rebuild
from llmopt.passes.loop._fuse_rewrite import merge_identical

#: arith.cmpi predicates (their numbers) as functions of the two operands.
_PREDICATES = {
    0: lambda a, b: a == b, 1: lambda a, b: a != b,
    2: lambda a, b: a < b, 3: lambda a, b: a <= b, 4: lambda a, b: a > b, 5: lambda a, b: a >= b,
    6: lambda a, b: a < b, 7: lambda a, b: a <= b, 8: lambda a, b: a > b, 9: lambda a, b: a >= b,
}


def _divides_dim(expr: AffineExpr, position: int, c: int) -> bool:
    """Whether ``expr`` takes ``mod c`` or ``floordiv c`` of something that uses dim
    ``position``."""
    if not isinstance(expr, AffineBinaryOpExpr):
        return False
    if (expr.kind in (AffineBinaryOpKind.Mod, AffineBinaryOpKind.FloorDiv)
            and isinstance(expr.rhs, AffineConstantExpr) and expr.rhs.value == c
            and position in expr.lhs.used_dims()):
        return True
    return _divides_dim(expr.lhs, position, c) or _divides_dim(expr.rhs, position, c)


# --- matching ----------------------------------------------------------------------------------

def split_point(lp: loop.ForOp) -> int | None:
    """The constant ``c`` the variable of ``lp`` is compared with, when it is used only in
    accesses and in comparisons with ``c`` (``0 < c < E``, ``c`` dividing ``E``)."""
    if lp.is_dynamic:
        return None
    points: set[int] = set()
    for use in lp.iv.uses:
        user = use.operation
        if isinstance(user, loop.LoadOp | loop.StoreOp) and use.index >= (
                1 if isinstance(user, loop.LoadOp) else 2):
            continue
        if not isinstance(user, arith.CmpiOp):
            return None
        other = user.rhs if user.lhs is lp.iv else user.lhs
        value = constant_index(other)
        if value is None or other is lp.iv:
            return None
        points.add(value)
    if len(points) != 1:
        return None
    c = points.pop()
    return c if 0 < c < lp.trip_count and lp.trip_count % c == 0 else None


def _product_rows(buffer: SSAValue, coordinate: int, fn: func.FuncOp) -> int | None:
    """The rows of the matrix-vector product filling function-level ``buffer`` (its
    elements over the extent of ``coordinate``), or ``None`` when no single kernel with a
    reduction fills it or its shape is not static."""
    typ = buffer.type
    if not isinstance(typ, MemRefType) or any(d < 0 for d in typ.get_shape()):
        return None
    writers = [use.operation for use in buffer.uses if isinstance(use.operation, loop.KernelOp)
               and _stores_to(use.operation, buffer)]
    if len(writers) != 1 or writers[0].parent_op() is not fn:
        return None
    producer = analyse_producer(writers[0])
    if producer is None or not producer.has_reduce:
        return None
    shape = typ.get_shape()
    return prod(shape) // shape[coordinate]


def _stores_to(kernel: loop.KernelOp, outer: SSAValue) -> bool:
    args = {a for a, b in zip(kernel.body.block.args, kernel.buffers, strict=True) if b is outer}
    return any(isinstance(op, loop.StoreOp) and op.buffer in args for op in nested_ops(kernel))


def reads_product_halves(kernel: loop.KernelOp, lp: loop.ForOp, c: int, max_rows: int) -> bool:
    """Whether a load in ``lp`` reads through ``%i mod c`` (or ``floordiv``) a buffer that a
    product of at most ``max_rows`` rows fills."""
    fn = kernel.parent_op()
    if not isinstance(fn, func.FuncOp):
        return False
    bound = dict(zip(kernel.body.block.args, kernel.buffers, strict=True))
    for op in nested_ops(lp):
        if not isinstance(op, loop.LoadOp) or op.buffer not in bound:
            continue
        positions = [k for k, v in enumerate(op.indices) if v is lp.iv]
        for coordinate, expr in enumerate(op.map.data.results):
            if not any(_divides_dim(expr, p, c) for p in positions):
                continue
            rows = _product_rows(bound[op.buffer], coordinate, fn)
            if rows is not None and rows <= max_rows:
                return True
    return False


# --- rewriting ---------------------------------------------------------------------------------

def _shift_access(access: loop.LoadOp | loop.StoreOp, iv: SSAValue, offset: int, c: int) -> None:
    """Compose ``access``'s map with ``iv ↦ iv + offset`` and simplify it over ``iv`` in
    ``[0, c)``."""
    positions = [k for k, v in enumerate(access.indices) if v is iv]
    amap = access.map.data
    dims: list[AffineExpr] = [AffineDimExpr(k) + offset if k in positions else AffineDimExpr(k)
                              for k in range(amap.num_dims)]
    ranges = {k: (0, c - 1) for k in positions}
    results = tuple(canonical(simplify(rebuild(e.replace_dims_and_symbols(dims, ())), ranges))
                    for e in amap.results)
    access.map = access.map.__class__(AffineMap(amap.num_dims, 0, results))


def _fold(ops: list[Operation]) -> None:
    """Replace each ``arith.select`` of a constant condition by its operand, then erase the
    side-effect-free ops (and loads) of ``ops`` nothing uses, last first."""
    for op in ops:
        if isinstance(op, arith.SelectOp) and op.parent is not None:
            flag = op.cond.owner
            if isinstance(flag, arith.ConstantOp) and isinstance(flag.value, IntegerAttr):
                chosen = op.lhs if flag.value.value.data else op.rhs
                op.result.replace_all_uses_with(chosen)
                Rewriter.erase_op(op)
    for op in reversed(ops):
        if (op.parent is not None and not op.regions and all(not r.uses for r in op.results)
                and (isinstance(op, loop.LoadOp) or is_side_effect_free(op))):
            Rewriter.erase_op(op)


def split(kernel: loop.KernelOp, lp: loop.ForOp, c: int) -> loop.ForOp:
    """Replace ``lp`` (of ``kernel``) by one loop of ``c`` iterations holding a copy of its
    body for each piece (see the module docstring); returns the new loop."""
    pieces = lp.trip_count // c
    new = loop.ForOp(c)
    new.iv.name_hint = lp.iv.name_hint
    Rewriter.insert_op(new, InsertPoint.before(lp))
    body = new.body.block
    for k in range(pieces):
        copied: list[Operation] = []
        value_map: dict[SSAValue, SSAValue] = {lp.iv: new.iv}
        for op in lp.body.block.ops:
            clone = op.clone(value_map)
            body.add_op(clone)
            copied.append(clone)
        for clone in copied:
            for inner in clone.walk():
                if isinstance(inner, loop.LoadOp | loop.StoreOp) and new.iv in inner.indices:
                    _shift_access(inner, new.iv, k * c, c)
                elif isinstance(inner, arith.CmpiOp) and new.iv in inner.operands:
                    _fold_comparison(inner, new.iv, k * c, c)
    Rewriter.erase_op(lp)
    _fold([op for op in nested_ops(kernel) if op is not kernel and op is not new])
    return new


def _fold_comparison(cmp: arith.CmpiOp, iv: SSAValue, offset: int, c: int) -> None:
    """Replace ``cmp`` (the loop variable ``iv + offset`` against a constant, ``iv`` in
    ``[0, c)``) by the constant it is there; one that varies over the piece (``==`` or
    ``!=`` a value inside it) compares ``iv + offset`` instead."""
    flip = cmp.rhs is iv
    other = constant_index(cmp.lhs if flip else cmp.rhs)
    assert other is not None
    test = _PREDICATES[cmp.predicate.value.data]
    values = {test(other, x) if flip else test(x, other) for x in range(offset, offset + c)}
    if len(values) == 1:
        Rewriter.replace_op(cmp, arith.ConstantOp(IntegerAttr(int(values.pop()), i1)))
        return
    shift = arith.ConstantOp(IntegerAttr(offset, IndexType()))
    moved = arith.AddiOp(iv, shift.result)
    Rewriter.insert_op([shift, moved], InsertPoint.before(cmp))
    cmp.operands = [moved.result if v is iv else v for v in cmp.operands]


def split_kernel(kernel: loop.KernelOp, max_rows: int) -> bool:
    """Split every matching loop of ``kernel``; whether one was."""
    changed = False
    for lp in [op for op in nested_ops(kernel) if isinstance(op, loop.ForOp)]:
        c = split_point(lp)
        if c is not None and reads_product_halves(kernel, lp, c, max_rows):
            split(kernel, lp, c)
            changed = True
    if changed:
        merge_identical(kernel)
    return changed


@dataclass(frozen=True)
class IndexSetSplit(ModulePass):
    """Split loops into the pieces their comparisons tell apart (see the module docstring)."""

    name = "index-set-split"

    max_rows: int = 1
    """Split only loops that read a product of at most this many rows (a decode step's)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for kernel in [k for k in op.walk() if isinstance(k, loop.KernelOp)]:
            split_kernel(kernel, self.max_rows)
