"""The body of a tail that ``fuse-tails`` puts in a ``kernel.last_block``: a kernel's work
for all the blocks of its grid, done by the one block that is last.

With the block shape of the kernel it joins, the tail's blocks run one after another in a
loop (``kernel.block_id x`` is the loop variable), a barrier between two of them when its
threads share memory. With another block shape its threads must be independent
(:func:`independent_threads`); the block's threads then stride over all the tail's
threads, each computing its ``kernel.block_id x`` and ``kernel.thread_id x`` from the loop
variable (see :mod:`llmopt.passes.kernel.fuse_tails`). Where the tail's threads are
independent its rounds are too, so their loop is unrolled (fully over blocks, a constant
trip count; :data:`STRIDED_UNROLL` times over threads): the loads of several rounds may
then be in flight together instead of a memory latency a round.
"""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, i64
from xdsl.ir import Block, Operation, Region, SSAValue

from llmopt.dialects import kernel

__all__ = ["STRIDED_UNROLL", "independent_threads", "tail_body"]

STRIDED_UNROLL = 4
"""How many rounds of a tail's threads strided over a block one step of their loop holds."""

_TALKING = (kernel.BarrierOp, kernel.ShuffleXorOp, kernel.SharedOp, kernel.CopyBase,
            kernel.AsyncCommitOp, kernel.AsyncWaitBase)
"""Ops through which a block's threads exchange data or wait for each other."""


def independent_threads(callee: kernel.FuncOp) -> bool:
    """Whether no thread of ``callee`` depends on another of its block: no barrier, shuffle,
    shared buffer, copy, or tensor-core op (whose warps act together)."""
    for op in callee.walk():
        if isinstance(op, _TALKING) or op.name.startswith(("mma.", "wgmma.")):
            return False
    return True


def _const(value: int, into: Block) -> SSAValue:
    op = arith.ConstantOp(IntegerAttr(value, IndexType()))
    into.add_op(op)
    return op.result


def tail_body(callee: kernel.FuncOp, values: dict[SSAValue, SSAValue], region: Block,
              grid: int, threads: int) -> None:
    """Append to ``region`` the work of ``callee`` (its parameters and buffers mapped by
    ``values``) for each of ``grid`` blocks, run by a block of ``threads`` threads."""
    own = callee.block_shape[0]
    zero, one = _const(0, region), _const(1, region)
    fixed: dict[tuple[type[Operation], str], SSAValue] = {
        (kernel.GridDimOp, "x"): _const(grid, region)}
    for dim in ("y", "z"):
        fixed[(kernel.BlockIdOp, dim)] = zero
        fixed[(kernel.GridDimOp, dim)] = one
    if own == threads:
        if grid == 1:
            fixed[(kernel.BlockIdOp, "x")] = zero
            _clone_body(callee, values, region, fixed)
            return
        body = Block(arg_types=[IndexType()])
        body.args[0].name_hint = "tail_block"
        fixed[(kernel.BlockIdOp, "x")] = body.args[0]
        _clone_body(callee, values, body, fixed)
        independent = independent_threads(callee)
        if not independent:
            body.add_op(kernel.BarrierOp())  # its shared buffers serve the next block
        body.add_op(scf.YieldOp())
        blocks = scf.ForOp(zero, fixed[(kernel.GridDimOp, "x")], one, [], Region(body))
        if independent:
            blocks.attributes["unroll"] = IntegerAttr(0, i64)
        region.add_op(blocks)
        return
    for dim in ("y", "z"):
        fixed[(kernel.ThreadIdOp, dim)] = zero
        fixed[(kernel.BlockDimOp, dim)] = one
    tid = kernel.ThreadIdOp("x")
    region.add_op(tid)
    size = _const(own, region)
    fixed[(kernel.BlockDimOp, "x")] = size
    body = Block(arg_types=[IndexType()])
    body.args[0].name_hint = "tail_thread"
    block_id = arith.DivUIOp(body.args[0], size)
    thread_id = arith.RemUIOp(body.args[0], size)
    body.add_ops([block_id, thread_id])
    fixed[(kernel.BlockIdOp, "x")] = block_id.result
    fixed[(kernel.ThreadIdOp, "x")] = thread_id.result
    _clone_body(callee, values, body, fixed)
    body.add_op(scf.YieldOp())
    strided = scf.ForOp(tid.result, _const(grid * own, region), _const(threads, region), [],
                        Region(body))
    strided.attributes["unroll"] = IntegerAttr(STRIDED_UNROLL, i64)
    region.add_op(strided)


def _clone_body(callee: kernel.FuncOp, values: dict[SSAValue, SSAValue], into: Block,
                fixed: dict[tuple[type[Operation], str], SSAValue]) -> None:
    """``callee``'s ops but its buffer declarations and ``kernel.return``, cloned into
    ``into`` with the ids and dimensions in ``fixed`` replaced by those values."""
    start = len(list(into.ops))
    for op in callee.body.block.ops:
        if not isinstance(op, kernel.BufferDeclOp | kernel.ReturnOp):
            into.add_op(op.clone(value_mapper=values))
    added = list(into.ops)[start:]
    special = [inner for op in added for inner in op.walk()
               if isinstance(inner, kernel.ThreadIdOp | kernel.BlockIdOp | kernel.BlockDimOp
                             | kernel.GridDimOp)]
    for op in special:
        value = fixed.get((type(op), op.dim.data))
        if value is not None:
            op.result.replace_all_uses_with(value)
            op.detach()
            op.erase()
