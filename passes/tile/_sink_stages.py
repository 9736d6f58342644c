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

from llmopt.dialects import kernel, tile
from llmopt.lowering._kernel_barriers import buffer_effects


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
    passed_reads: set[SSAValue] = set()  # what the ops from the candidate to the loop access
    passed_writes: set[SSAValue] = set()
    copies = waits = False
    moved = 0
    for fill in reversed(ops[:ops.index(loop_op)]):
        reads, writes = buffer_effects(fill, asynchronous=True)
        if (_movable(fill) and copies and not waits
                and not writes & (passed_reads | passed_writes) and not reads & passed_writes):
            fill.detach()  # behind the prologue: nothing it passes touches its buffers
            block.insert_op_before(fill, loop_op)
            moved += 1
        passed_reads |= reads
        passed_writes |= writes
        copies = copies or any(isinstance(inner, tile.AsyncCopyOp) for inner in fill.walk())
        waits = waits or isinstance(fill, tile.AsyncWaitOp)
    return moved
