"""``plan-buffers``: temporaries whose lifetimes do not overlap share one allocation.

**Matches** the ``memref.alloc`` ops at the top level of every ``func.func`` with a body
(the host function: allocations, ``kernel.launch`` ops, views, copies, ``func.return``).
A buffer's *lifetime* runs from the first op that uses it (normally the launch that writes
it) to the last op that uses it, counting uses through views (``memref.collapse_shape``,
``expand_shape``, ``cast`` …) and uses nested in an op's regions as uses by that top-level
op. ``memref.dealloc`` is not a use.

**Produces** fewer allocations. Buffers are visited in order of first use; a buffer whose
lifetime starts strictly after the last use of an earlier buffer *of the same size class*
takes that buffer over (the most recently freed one first), instead of allocating its own:
its uses are rewritten to the earlier ``memref.alloc`` (directly when the types are equal,
else through a ``memref.collapse_shape`` to 1-D and a ``memref.expand_shape`` to its own
shape, inserted before its first use) and its own ``memref.alloc`` is erased. The size
class is exact: the same element type, the same number of elements and the same memory
space. This is deliberately simple — no byte pool, no offsets into a larger buffer — so
every reuse is a plain view that the executor, the interpreters and ``kernel-to-cuda``'s
aliasing analysis already understand; the buffers of identical decoder layers come in
identical size classes, so one layer's set of buffers serves the whole model. Deallocs of
merged buffers are replaced by one ``memref.dealloc`` after the merged lifetime ends.

Never reused, in either direction: buffers that reach ``func.return`` (directly or through
a view), function arguments, buffers with dynamic sizes, a non-identity layout or rank 0,
``memref.alloca``, zeroed allocations (``{llmopt.zeroed}``: their kernels need them at zero
before the first launch, and a buffer taken over holds what its last user left there, one
handed on what its new user writes), and buffers passed to an op that returns a memref
other than a known view (the result might alias them). Two buffers used by the same op
never share memory: lifetimes that touch at one op overlap.

**Why** a lowered model allocates a fresh buffer for every intermediate of every layer;
with N layers the sum of those allocations grows with N although only a layer's worth is
live at any time. Planning the reuse in the IR makes the footprint of the program visible
and static (the executor and CUDA graph capture allocate exactly the planned buffers), and
the interpreters run with the same footprint.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from dataclasses import dataclass, field
from math import prod

from xdsl.context import Context
from xdsl.dialects import func, memref
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    NoneAttr,
    i64,
)
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from llmopt.codegen.plan import ZEROED_ATTR

__all__ = ["PlanBuffers", "allocated_bytes", "plan_function"]

#: ops whose memref result aliases their first operand
VIEW_OPS = frozenset({
    "memref.cast", "memref.collapse_shape", "memref.expand_shape", "memref.reshape",
    "memref.subview", "memref.reinterpret_cast", "memref.view",
})  # fmt: skip


@dataclass
class _Buffer:
    """One ``memref.alloc`` and what the analysis learned about it."""

    alloc: memref.AllocOp
    first: int | None = None
    last: int = -1
    pinned: bool = False
    deallocs: list[Operation] = field(default_factory=list)

    @property
    def value(self) -> SSAValue:
        return self.alloc.memref

    @property
    def type(self) -> MemRefType:
        return self.alloc.memref.type  # type: ignore[return-value]


def _plannable(typ: MemRefType) -> bool:
    """Static shape, identity layout, rank ≥ 1."""
    layout = typ.layout
    identity = isinstance(layout, NoneAttr) or str(layout) == "affine_map<(d0) -> (d0)>"
    return typ.get_num_dims() > 0 and all(d >= 0 for d in typ.get_shape()) and identity


def _size_class(typ: MemRefType) -> Hashable:
    return (typ.element_type, prod(typ.get_shape()), typ.memory_space)


def _element_bytes(typ: MemRefType) -> int:
    element = typ.element_type
    width = getattr(element, "bitwidth", None)
    if width is None:
        width = 64  # index
    return max(1, (int(width) + 7) // 8)


def allocated_bytes(fn: func.FuncOp) -> int:
    """Bytes allocated by the static ``memref.alloc`` ops at the top level of ``fn``."""
    total = 0
    for op in fn.body.block.ops:
        if isinstance(op, memref.AllocOp):
            typ = op.memref.type
            if isinstance(typ, MemRefType) and all(d >= 0 for d in typ.get_shape()):
                total += prod(typ.get_shape()) * _element_bytes(typ)
    return total


def _analyse(block: Block) -> tuple[list[Operation], dict[SSAValue, _Buffer]]:
    """Number the top-level ops and find each plannable allocation's lifetime."""
    ops = list(block.ops)
    buffers: dict[SSAValue, _Buffer] = {}
    root: dict[SSAValue, SSAValue] = {}  # memref value -> the alloc result it views
    for op in ops:
        if isinstance(op, memref.AllocOp) and not op.operands and ZEROED_ATTR not in op.attributes:
            typ = op.memref.type
            if isinstance(typ, MemRefType) and _plannable(typ):
                buffers[op.memref] = _Buffer(op)
                root[op.memref] = op.memref
    for position, op in enumerate(ops):
        if isinstance(op, memref.AllocOp):
            continue
        if isinstance(op, memref.DeallocOp):
            owner = root.get(op.memref)
            if owner is not None:
                buffers[owner].deallocs.append(op)
            continue
        used: set[SSAValue] = set()
        for inner in op.walk():
            for operand in inner.operands:
                owner = root.get(operand)
                if owner is not None:
                    used.add(owner)
        for owner in used:
            buf = buffers[owner]
            if buf.first is None:
                buf.first = position
            buf.last = position
        if op.name in VIEW_OPS and op.operands and op.operands[0] in root:
            for result in op.results:
                root[result] = root[op.operands[0]]
        elif isinstance(op, func.ReturnOp) or any(
            isinstance(r.type, MemRefType) for r in op.results
        ):
            for owner in used:
                buffers[owner].pinned = True
    return ops, buffers


def _reshape(value: SSAValue, typ: MemRefType, before: Operation) -> SSAValue:
    """``value`` viewed with the type ``typ`` (same element type and count), through a
    collapse to 1-D and an expansion, inserted before ``before``."""
    source: MemRefType = value.type  # type: ignore[assignment]
    flat = MemRefType(source.element_type, [prod(source.get_shape())],
                      memory_space=source.memory_space)
    block = before.parent_block()
    assert block is not None

    def group(rank: int) -> ArrayAttr:
        return ArrayAttr([ArrayAttr([IntegerAttr(i, i64) for i in range(rank)])])

    if source.get_num_dims() > 1:
        collapse = memref.CollapseShapeOp.build(
            operands=[value], result_types=[flat],
            properties={"reassociation": group(source.get_num_dims())},
        )
        block.insert_op_before(collapse, before)
        value = collapse.results[0]
    if typ.get_num_dims() > 1:
        expand = memref.ExpandShapeOp.build(
            operands=[value, []], result_types=[typ],
            properties={
                "reassociation": group(typ.get_num_dims()),
                "static_output_shape": DenseArrayBase.from_list(i64, list(typ.get_shape())),
            },
        )
        block.insert_op_before(expand, before)
        value = expand.results[0]
    return value


def _take(pool: list[_Buffer] | None, buf: _Buffer) -> _Buffer:
    """The free buffer ``buf`` reuses: the most recently freed one of exactly its type, else
    the most recently freed one of its size class, else ``buf`` itself."""
    if not pool:
        return buf
    for k in range(len(pool) - 1, -1, -1):
        if pool[k].type == buf.type:
            return pool.pop(k)
    return pool.pop()


def plan_function(fn: func.FuncOp) -> int:
    """Plan the buffers of one function in place; returns the number of allocations removed."""
    block = fn.body.block
    ops, buffers = _analyse(block)
    order = sorted(
        (b for b in buffers.values() if b.first is not None and not b.pinned),
        key=lambda b: b.first,  # type: ignore[arg-type,return-value]
    )
    free: dict[Hashable, list[_Buffer]] = {}
    live: list[tuple[int, int, _Buffer]] = []  # (last use, tie-break, physical buffer)
    group_last: dict[int, int] = {}  # id(physical) -> last use of everything it holds
    members: dict[int, list[_Buffer]] = {}
    assigned: list[tuple[_Buffer, _Buffer]] = []  # (buffer, physical buffer it reuses)
    for k, buf in enumerate(order):
        assert buf.first is not None
        while live and live[0][0] < buf.first:
            _, _, physical = heapq.heappop(live)
            free.setdefault(_size_class(physical.type), []).append(physical)
        physical = _take(free.get(_size_class(buf.type)), buf)
        if physical is not buf:
            assigned.append((buf, physical))
        group = members.setdefault(id(physical), [physical])
        if physical is not buf:
            group.append(buf)
        group_last[id(physical)] = buf.last
        heapq.heappush(live, (buf.last, k, physical))
    if not assigned:
        return 0
    for buf, physical in assigned:
        first_use = ops[buf.first]  # type: ignore[index]
        replacement = (physical.value if buf.type == physical.type
                       else _reshape(physical.value, buf.type, first_use))
        buf.value.replace_all_uses_with(replacement)
    # One dealloc per physical buffer that had any, after the last use of what it holds.
    for key, group in members.items():
        if len(group) == 1:
            continue
        deallocs = [d for b in group for d in b.deallocs]
        if not deallocs:
            continue
        for d in deallocs:
            d.detach()
            d.erase()
        after = ops[group_last[key]]
        block.insert_op_after(memref.DeallocOp.get(group[0].value), after)
    for buf, _ in assigned:
        buf.alloc.detach()
        buf.alloc.erase()
    return len(assigned)


@dataclass(frozen=True)
class PlanBuffers(ModulePass):
    """Reuse dead temporaries' allocations (see the module docstring)."""

    name = "plan-buffers"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        """Rewrite every host function of ``op`` in place."""
        for fn in op.ops:
            if isinstance(fn, func.FuncOp) and fn.body.blocks:
                plan_function(fn)
