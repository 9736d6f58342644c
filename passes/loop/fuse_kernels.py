"""``fuse-kernels``: producer→consumer fusion of ``loop.kernel`` ops.

**Matches** a kernel *P* that fills a temporary buffer *T* (a ``memref.alloc`` of the
function that is not returned) with one store per point of a perfect free nest, and the
kernels that read *T*.

**Produces** the consumers with *P*'s computation inlined at each ``loop.load`` of *T*
(its indices composed through the load's affine map), then loop-invariant code hoisted
and identical computations merged; *P* and *T* disappear.

**Why** each intermediate that never reaches memory saves a write and a read of the whole
tensor and a launch: RMSNorm, softmax and ``silu(a) * b`` each become one kernel, and a
matmul (a broadcast product reduced over K) becomes one kernel with its epilogue.

Fusion never multiplies work. A load site is accepted only if the loops around it that
its indices do not use are all *inside* the loops they do use — the inlined computation
can then be hoisted out of the unused ones and runs once per distinct value. A producer
that contains a reduction is inlined only when it has a single consumer kernel.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import IndexType, ModuleOp
from xdsl.ir import Block, Operation, SSAValue
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
from xdsl.traits import MemoryWriteEffect

from llmopt.dialects import loop

LoopOp = loop.ForOp | loop.ReduceOp


# --- affine helpers ---------------------------------------------------------------------------

def rebuild(expr: AffineExpr) -> AffineExpr:
    """Rebuild ``expr`` through xDSL's operators, which fold constants and unit factors."""
    if isinstance(expr, AffineBinaryOpExpr):
        lhs, rhs = rebuild(expr.lhs), rebuild(expr.rhs)
        if expr.kind == AffineBinaryOpKind.Add:
            return lhs + rhs
        if expr.kind == AffineBinaryOpKind.Mul:
            return lhs * rhs
        if expr.kind == AffineBinaryOpKind.FloorDiv:
            return lhs // rhs
        if expr.kind == AffineBinaryOpKind.Mod:
            return lhs % rhs
        return AffineExpr.binary(expr.kind, lhs, rhs)
    return expr


def used_dims(expr: AffineExpr) -> set[int]:
    if isinstance(expr, AffineDimExpr):
        return {expr.position}
    if isinstance(expr, AffineBinaryOpExpr):
        return used_dims(expr.lhs) | used_dims(expr.rhs)
    return set()


# --- analysis ---------------------------------------------------------------------------------

@dataclass
class Producer:
    """A kernel that fills one buffer point by point from a perfect free nest."""

    kernel: loop.KernelOp
    out_arg: SSAValue
    #: nest induction variable -> the coordinate of the stored buffer it indexes
    coord_of: dict[SSAValue, int]
    #: the ops computing the stored value (the innermost nest body without its store)
    body: list[Operation]
    store: loop.StoreOp
    has_reduce: bool


def stores_of(kernel: loop.KernelOp) -> list[loop.StoreOp]:
    return [op for op in kernel.walk() if isinstance(op, loop.StoreOp)]


def written_args(kernel: loop.KernelOp) -> set[SSAValue]:
    return {st.buffer for st in stores_of(kernel)}


def analyse_producer(kernel: loop.KernelOp) -> Producer | None:
    """Recognise ``for i0 { for i1 { ...; store %v, %out[i0, 0, i1] } }``, else ``None``."""
    stores = stores_of(kernel)
    if len(stores) != 1:
        return None
    block = kernel.body.block
    ivs: list[SSAValue] = []
    while len(block.ops) == 1 and isinstance(block.first_op, loop.ForOp):
        ivs.append(block.first_op.iv)
        block = block.first_op.body.block
    store = block.last_op
    if store is not stores[0] or not isinstance(store, loop.StoreOp):
        return None
    coord_of: dict[SSAValue, int] = {}
    for j, expr in enumerate(store.map.data.results):
        if isinstance(expr, AffineDimExpr):
            iv = store.indices[expr.position]
            if iv not in ivs or iv in coord_of:
                return None
            coord_of[iv] = j
        elif not (isinstance(expr, AffineConstantExpr) and expr.value == 0
                  and store.buffer.type.get_shape()[j] == 1):  # type: ignore[attr-defined]
            return None
    if set(coord_of) != set(ivs):
        return None
    body = list(block.ops)[:-1]
    has_reduce = any(isinstance(op, loop.ReduceOp) for op in kernel.walk())
    return Producer(kernel, store.buffer, coord_of, body, store, has_reduce)


def enclosing_loops(op: Operation, kernel: loop.KernelOp) -> list[LoopOp]:
    """Loops around ``op`` inside ``kernel``, outermost first."""
    out: list[LoopOp] = []
    parent = op.parent_op()
    while parent is not None and parent is not kernel:
        if isinstance(parent, LoopOp):
            out.append(parent)
        parent = parent.parent_op()
    return out[::-1]


def site_is_legal(load: loop.LoadOp, kernel: loop.KernelOp, producer: Producer) -> bool:
    """The suffix rule (see module docstring) and materialisable non-access uses of ivs."""
    dims = set().union(*(used_dims(e) for e in load.map.data.results))
    used_values = {load.indices[d] for d in dims}
    loops = enclosing_loops(load, kernel)
    used = [lp.iv in used_values for lp in loops]
    last_used = max((k for k, u in enumerate(used) if u), default=-1)
    if not all(used[: last_used + 1]):
        return False
    # ivs used as plain values (e.g. compared by a concat select) need a dim or constant.
    for op in producer.body:
        for inner in op.walk():
            if isinstance(inner, loop.LoadOp | loop.StoreOp):
                continue
            for operand in inner.operands:
                if operand in producer.coord_of:
                    expr = load.map.data.results[producer.coord_of[operand]]
                    if not isinstance(expr, AffineDimExpr | AffineConstantExpr):
                        return False
    return True


# --- rewriting --------------------------------------------------------------------------------

def bind_buffer(kernel: loop.KernelOp, outer: SSAValue) -> SSAValue:
    """The block argument of ``kernel`` bound to function-level buffer ``outer`` (added if new)."""
    for arg, bound in zip(kernel.body.block.args, kernel.buffers, strict=True):
        if bound is outer:
            return arg
    kernel.operands = [*kernel.operands, outer]
    return kernel.body.block.insert_arg(outer.type, len(kernel.body.block.args))


def inline_at(load: loop.LoadOp, consumer: loop.KernelOp, producer: Producer) -> None:
    """Replace ``load`` (of the producer's buffer) by the producer's computation."""
    site = list(load.indices)
    site_map = load.map.data
    value_map: dict[SSAValue, SSAValue] = {}
    for arg, outer in zip(producer.kernel.body.block.args, producer.kernel.buffers, strict=True):
        if arg is not producer.out_arg:
            value_map[arg] = bind_buffer(consumer, outer)
    clones: list[Operation] = []
    for op in producer.body:
        clone = op.clone(value_map)
        Rewriter.insert_op(clone, InsertPoint.before(load))
        clones.append(clone)
    constants: dict[int, SSAValue] = {}
    for clone in clones:
        for inner in list(clone.walk()):
            if isinstance(inner, loop.LoadOp | loop.StoreOp):
                _compose_access(inner, producer, site, site_map)
                continue
            for k, operand in enumerate(inner.operands):
                if operand not in producer.coord_of:
                    continue
                expr = site_map.results[producer.coord_of[operand]]
                if isinstance(expr, AffineDimExpr):
                    inner.operands[k] = site[expr.position]
                else:
                    assert isinstance(expr, AffineConstantExpr)
                    if expr.value not in constants:
                        const = arith.ConstantOp.from_int_and_width(expr.value, IndexType())
                        Rewriter.insert_op(const, InsertPoint.before(clones[0]))
                        constants[expr.value] = const.result
                    inner.operands[k] = constants[expr.value]
    stored = producer.store.value
    load.result.replace_all_uses_with(value_map.get(stored, stored))
    Rewriter.erase_op(load)


def _compose_access(access: loop.LoadOp | loop.StoreOp, producer: Producer,
                    site: list[SSAValue], site_map: AffineMap) -> None:
    operands = list(site)
    new_dims: list[AffineExpr] = []
    for value in access.indices:
        if value in producer.coord_of:
            new_dims.append(site_map.results[producer.coord_of[value]])
        else:
            if value not in operands:
                operands.append(value)
            new_dims.append(AffineDimExpr(operands.index(value)))
    old = access.map.data
    results = tuple(rebuild(e.replace_dims_and_symbols(new_dims, ())) for e in old.results)
    # Drop operands the new map no longer mentions.
    keep = sorted(set().union(set(), *(used_dims(e) for e in results)))
    renumber = [AffineDimExpr(keep.index(d)) if d in keep else AffineConstantExpr(0)
                for d in range(len(operands))]
    results = tuple(e.replace_dims_and_symbols(renumber, ()) for e in results)
    access.map = access.map.__class__(AffineMap(len(keep), 0, results))
    fixed = 2 if isinstance(access, loop.StoreOp) else 1
    access.operands = [*access.operands[:fixed], *(operands[d] for d in keep)]


def _defined_inside(op: Operation) -> set[SSAValue]:
    values: set[SSAValue] = set()
    for inner in op.walk():
        values.update(inner.results)
        for region in inner.regions:
            for block in region.blocks:
                values.update(block.args)
    return values


def _external_uses(op: Operation) -> Iterator[SSAValue]:
    inside = _defined_inside(op)
    for inner in op.walk():
        for operand in inner.operands:
            if operand not in inside:
                yield operand


def _has_writes(op: Operation) -> bool:
    return any(inner.has_trait(MemoryWriteEffect) for inner in op.walk())


def hoist_invariants(kernel: loop.KernelOp) -> None:
    """Move side-effect-free ops that use nothing defined in their loop out of that loop."""
    written = written_args(kernel)
    changed = True
    while changed:
        changed = False
        for lp in [op for op in kernel.walk() if isinstance(op, LoopOp)]:
            inside = _defined_inside(lp)
            for op in list(lp.body.block.ops):
                if isinstance(op, loop.YieldOp):
                    continue
                if _has_writes(op):
                    continue
                if any(isinstance(i, loop.LoadOp) and i.buffer in written for i in op.walk()):
                    continue
                if any(v in inside and v not in _defined_inside(op) for v in _external_uses(op)):
                    continue
                op.detach()
                Rewriter.insert_op(op, InsertPoint.before(lp))
                changed = True


def merge_identical(kernel: loop.KernelOp) -> None:
    """Within each block, replace an op by an earlier structurally identical read-only op."""
    written = written_args(kernel)
    for block in list(_blocks(kernel)):
        seen: list[Operation] = []
        for op in list(block.ops):
            if _has_writes(op) or isinstance(op, loop.YieldOp) or not op.results:
                continue
            if any(isinstance(i, loop.LoadOp) and i.buffer in written for i in op.walk()):
                continue
            twin = next((s for s in seen if op.is_structurally_equivalent(s, {block: block})),
                        None)
            if twin is None:
                seen.append(op)
                continue
            for new, old in zip(twin.results, op.results, strict=True):
                old.replace_all_uses_with(new)
            Rewriter.erase_op(op)


def _blocks(op: Operation) -> Iterator[Block]:
    for inner in op.walk():
        for region in inner.regions:
            yield from region.blocks


def fuse_function(fn: func.FuncOp) -> None:
    """Fuse producers into consumers in ``fn`` until nothing changes."""
    block = fn.body.block
    while _fuse_one(block):
        pass
    for kernel in [op for op in block.ops if isinstance(op, loop.KernelOp)]:
        hoist_invariants(kernel)
        merge_identical(kernel)


def _fuse_one(block: Block) -> bool:
    kernels = [op for op in block.ops if isinstance(op, loop.KernelOp)]
    returned = {v for op in block.ops if isinstance(op, func.ReturnOp) for v in op.operands}
    for producer_kernel in reversed(kernels):
        producer = analyse_producer(producer_kernel)
        if producer is None:
            continue
        index = list(producer_kernel.body.block.args).index(producer.out_arg)
        buffer = producer_kernel.buffers[index]
        if not isinstance(buffer.owner, memref.AllocOp) or buffer in returned:
            continue
        writers = [k for k in kernels if buffer in _bound_written(k)]
        if writers != [producer_kernel]:
            continue
        consumers = [k for k in kernels if k is not producer_kernel and buffer in k.buffers]
        if producer.has_reduce and len(consumers) > 1:
            continue
        sites = [(c, ld) for c in consumers for ld in _loads_of(c, buffer)]
        if not all(site_is_legal(ld, c, producer) for c, ld in sites):
            continue
        for consumer, load in sites:
            inline_at(load, consumer, producer)
            hoist_invariants(consumer)
            merge_identical(consumer)
        for consumer in consumers:
            _unbind(consumer, buffer)
        Rewriter.erase_op(producer_kernel)
        if not buffer.uses:
            Rewriter.erase_op(buffer.owner)
        return True
    return False


def _bound_written(kernel: loop.KernelOp) -> set[SSAValue]:
    args = list(kernel.body.block.args)
    return {kernel.buffers[args.index(a)] for a in written_args(kernel)}


def _loads_of(kernel: loop.KernelOp, outer: SSAValue) -> list[loop.LoadOp]:
    args = [a for a, b in zip(kernel.body.block.args, kernel.buffers, strict=True) if b is outer]
    return [op for op in kernel.walk() if isinstance(op, loop.LoadOp) and op.buffer in args]


def _unbind(kernel: loop.KernelOp, outer: SSAValue) -> None:
    """Drop the binding of ``outer`` from ``kernel`` once nothing inside uses it."""
    block = kernel.body.block
    pairs = list(zip(block.args, kernel.buffers, strict=True))
    keep = [(a, b) for a, b in pairs if not (b is outer and not a.uses)]
    if len(keep) == len(pairs):
        return
    kernel.operands = [b for _, b in keep]
    for arg, bound in pairs:
        if bound is outer and not arg.uses:
            block.erase_arg(arg)


@dataclass(frozen=True)
class FuseKernels(ModulePass):
    """Producer→consumer fusion at Loop IR (see the module docstring)."""

    name = "fuse-kernels"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in list(op.walk()):
            if isinstance(fn, func.FuncOp) and not fn.is_declaration:
                fuse_function(fn)
