"""How ``fuse-kernels`` changes the IR (see :mod:`llmopt.passes.loop.fuse_kernels`): a
producer's computation inlined at a load site (:func:`inline_at`), a consumer tidied after
it (:func:`hoist_invariants`, then :func:`merge_identical`) and a buffer binding dropped
once unused (:func:`unbind`).
"""

from __future__ import annotations

from collections.abc import Iterator

from xdsl.dialects import arith
from xdsl.dialects.builtin import IndexType
from xdsl.ir import Block, Operation, SSAValue
from xdsl.ir.affine import AffineConstantExpr, AffineDimExpr, AffineExpr, AffineMap
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import MemoryWriteEffect

from llmopt.dialects import loop
from llmopt.passes._ir import nested_ops
from llmopt.passes.loop._fuse_analysis import LoopOp, Producer, rebuild, used_dims

# --- inlining ---------------------------------------------------------------------------------

def bind_buffer(kernel: loop.KernelOp, outer: SSAValue) -> SSAValue:
    """The block argument of ``kernel`` bound to function-level buffer (or runtime extent)
    ``outer`` (added if new)."""
    return kernel.bind(outer)


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


# --- tidying ----------------------------------------------------------------------------------

def _defined_inside(op: Operation) -> set[SSAValue]:
    values: set[SSAValue] = set()
    for inner in nested_ops(op):
        values.update(inner.results)
        for region in inner.regions:
            for block in region.blocks:
                values.update(block.args)
    return values


def _external_uses(op: Operation) -> Iterator[SSAValue]:
    if not op.regions:  # nothing is defined inside but the results
        for operand in op.operands:
            if operand not in op.results:
                yield operand
        return
    inside = _defined_inside(op)
    for inner in nested_ops(op):
        for operand in inner.operands:
            if operand not in inside:
                yield operand


def _pinned(kernel: loop.KernelOp) -> set[Operation]:
    """The ops of ``kernel`` that neither hoisting nor merging may move: those that store
    (an op with ``MemoryWriteEffect``) or read a buffer the kernel writes, and every op
    around them. Moving or erasing an op that is not pinned never pins another, so one
    walk serves a :func:`hoist_invariants` and the :func:`merge_identical` after it."""
    ops = nested_ops(kernel)
    written = {op.buffer for op in ops if isinstance(op, loop.StoreOp)}
    pinned: set[Operation] = set()
    for inner in ops:
        if inner.has_trait(MemoryWriteEffect) or (isinstance(inner, loop.LoadOp)
                                                  and inner.buffer in written):
            op: Operation | None = inner
            while op is not None and op is not kernel and op not in pinned:
                pinned.add(op)
                op = op.parent_op()
    return pinned


def hoist_invariants(kernel: loop.KernelOp, pinned: set[Operation] | None = None) -> None:
    """Move side-effect-free ops that use nothing defined in their loop out of that loop.

    Each round looks at every loop once, against what the loop defined when the round
    reached it (an op whose operand was hoisted earlier in the same round waits for the
    next round); rounds repeat until nothing moves. ``pinned``: :func:`_pinned`, when the
    caller has it."""
    if pinned is None:
        pinned = _pinned(kernel)
    changed = True
    while changed:
        changed = False
        for lp in [op for op in nested_ops(kernel) if isinstance(op, LoopOp)]:
            # What ``lp`` defined when this round reached it: what it holds now, and the
            # results of the ops moved out of it since.
            moved: set[SSAValue] = set()
            for op in list(lp.body.block.ops):
                if isinstance(op, loop.YieldOp) or op in pinned:
                    continue
                if any(v in moved or lp.is_ancestor(v.owner) for v in _external_uses(op)):
                    continue
                op.detach()
                Rewriter.insert_op(op, InsertPoint.before(lp))
                moved.update(op.results)
                changed = True


def merge_identical(kernel: loop.KernelOp, pinned: set[Operation] | None = None) -> None:
    """Within each block, replace an op by an earlier structurally identical read-only op.

    Identical ops have the same name and the very same operands: the earlier ops are
    looked up by those, in the order they were met. ``pinned``: :func:`_pinned`, when the
    caller has it."""
    if pinned is None:
        pinned = _pinned(kernel)
    for block in list(_blocks(kernel)):
        seen: dict[tuple[object, ...], list[Operation]] = {}
        for op in list(block.ops):
            if isinstance(op, loop.YieldOp) or not op.results or op in pinned:
                continue
            candidates = seen.setdefault((op.name, *op.operands), [])
            twin = next((s for s in candidates
                         if op.is_structurally_equivalent(s, {block: block})), None)
            if twin is None:
                candidates.append(op)
                continue
            for new, old in zip(twin.results, op.results, strict=True):
                old.replace_all_uses_with(new)
            Rewriter.erase_op(op)


def tidy(kernel: loop.KernelOp) -> None:
    """:func:`hoist_invariants`, then :func:`merge_identical`, sharing one :func:`_pinned`."""
    pinned = _pinned(kernel)
    hoist_invariants(kernel, pinned)
    merge_identical(kernel, pinned)


def _blocks(op: Operation) -> Iterator[Block]:
    for inner in nested_ops(op):
        for region in inner.regions:
            yield from region.blocks


# --- bindings ---------------------------------------------------------------------------------

def unbind(kernel: loop.KernelOp, outer: SSAValue) -> None:
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
