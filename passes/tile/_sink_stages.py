"""Synchronous fills moved behind a loop's ``cp.async`` prologue, so their loads overlap it.

``flash-attention`` stages the queries of a block (``qs ← Q``, a forall of plain loads and
shared stores, ``llmopt.role = "stage"``) before its loop over key blocks, and
``async-copy`` puts that loop's prologue — the first key and value blocks' ``cp.async`` —
after it. Each thread's loads of ``Q`` then complete before a single copy of ``K`` is
issued, and the loop waits for those: two global round trips before the first product. A
fill that shares no buffer with what runs between it and the loop (index arithmetic, the
prologue's barrier and copies) can as well run after the prologue, its loads in flight
beside the copies: one round trip. The loop's first step waits for its copies and then
passes a barrier, which orders the moved fill's shared stores before any read of them.
"""

from __future__ import annotations

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Operation, SSAValue

from llmopt.dialects import kernel, loop, tile


def _effects(op: Operation) -> tuple[set[SSAValue], set[SSAValue]]:
    """The buffers ``op`` and the ops in it read and write (an asynchronous copy's
    destination counted as written)."""
    reads: set[SSAValue] = set()
    writes: set[SSAValue] = set()
    for inner in op.walk():
        if isinstance(inner, loop.LoadOp):
            reads.add(inner.buffer)
        elif isinstance(inner, loop.StoreOp):
            writes.add(inner.buffer)
        elif isinstance(inner, tile.CopyBase):
            reads.add(inner.src)
            writes.add(inner.dst)
    return reads, writes


def _movable(fill: Operation) -> bool:
    """A synchronous fill: a forall over the block's threads of loads and stores only."""
    return (isinstance(fill, tile.ForallOp) and fill.mapping.data == "block_threads"
            and fill.attributes.get("llmopt.role") == StringAttr("stage")
            and not any(isinstance(inner, tile.CopyBase | tile.ForallOp | kernel.BarrierOp)
                        for inner in fill.body.block.walk()))


def sink_stages(loop_op: Operation) -> int:
    """Move the synchronous fills in front of ``loop_op`` (in its block, before its
    prologue) to just before it, where they share no buffer with the ops they pass (see the
    module docstring); how many moved."""
    block = loop_op.parent_block()
    if block is None:
        return 0
    ops = list(block.ops)
    at = ops.index(loop_op)
    moved = 0
    for k in range(at - 1, -1, -1):
        fill = ops[k]
        if not _movable(fill):
            continue
        reads, writes = _effects(fill)
        between = ops[k + 1:at]
        passed_reads: set[SSAValue] = set()
        passed_writes: set[SSAValue] = set()
        for op in between:
            r, w = _effects(op)
            passed_reads |= r
            passed_writes |= w
        if writes & (passed_reads | passed_writes) or reads & passed_writes:
            continue
        if (any(isinstance(op, tile.AsyncWaitOp) for op in between)
                or not any(isinstance(inner, tile.AsyncCopyOp)
                           for op in between for inner in op.walk())):
            continue  # nothing asynchronous to overlap with, or a wait it would pass
        fill.detach()
        block.insert_op_before(fill, loop_op)
        ops = list(block.ops)
        at = ops.index(loop_op)
        moved += 1
    return moved
