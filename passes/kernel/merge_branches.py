"""``merge-branches``: adjacent host ``scf.if`` ops on one condition become one.

**Matches**, in every block of a host function (a ``func.func`` with a body, and the
branches inside it), an ``scf.if`` without results followed by another on the *same
condition*: the same value, or ``arith.cmpi`` with one predicate whose operands are the same
values or equal ``arith.constant`` ops. Between the two there may only be ops without
regions that touch no memory or only allocate (constants, ``index`` arithmetic,
``memref.alloc``, views).

**Produces** one ``scf.if``: the ops between move before the first, in order, and the
second's then-branch and else-branch are appended to the first's (an else-branch only the
second has becomes the first's). The merged branches are visited in turn, so the nested
chains ``length-buckets`` writes (``%seq <= 1``, else ``%seq <= 2``, else ``%seq <= 32``
…) merge one level after another::

    scf.if %le1 { launch @q_coop1 } else { …  scf.if %le32 { launch @q_le32 } … }
    %k = memref.alloc(%seq) : …
    scf.if %le1 { launch @k_coop1 } else { …  scf.if %le32 { launch @k_le32 } … }

becomes::

    %k = memref.alloc(%seq) : …
    scf.if %le1 { launch @q_coop1  launch @k_coop1 }
    else { …  scf.if %le32 { launch @q_le32  launch @k_le32 } … }

Launches keep their order; a branch runs what both ran under the same condition, so the
program computes what it did.

**Why** ``length-buckets`` gives each product a chain of its own, so the variants of one
bucket of sibling products (a layer's query, key and value projections) sit in different
branches, and ``fuse-launches``, which fuses the launches of one block, cannot put them
together as it does in a static program.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from llmopt.passes._ir import allocates_at_most

__all__ = ["MergeBranches", "merge_branches", "same_condition"]


def same_condition(a: SSAValue, b: SSAValue) -> bool:
    """Whether ``a`` and ``b`` are one condition: the same value, or ``arith.cmpi`` ops of
    one predicate whose operands are the same values or equal constants."""
    if a is b:
        return True
    left, right = a.owner, b.owner
    if not (isinstance(left, arith.CmpiOp) and isinstance(right, arith.CmpiOp)):
        return False
    if left.predicate != right.predicate:
        return False
    return all(_same_operand(x, y) for x, y in zip(left.operands, right.operands, strict=True))


def _same_operand(a: SSAValue, b: SSAValue) -> bool:
    if a is b:
        return True
    left, right = a.owner, b.owner
    return (isinstance(left, arith.ConstantOp) and isinstance(right, arith.ConstantOp)
            and left.value == right.value and a.type == b.type)


def _append(into: Block, source: Block) -> None:
    """Move ``source``'s ops (its ``scf.yield`` last) to the end of ``into``, in place of
    ``into``'s ``scf.yield``."""
    last = into.last_op
    if isinstance(last, scf.YieldOp):
        last.detach()
        last.erase()
    for op in list(source.ops):
        op.detach()
        into.add_op(op)


def _merge(first: scf.IfOp, second: scf.IfOp) -> None:
    """Append ``second``'s branches to ``first``'s and erase ``second``."""
    _append(first.true_region.block, second.true_region.block)
    if second.false_region.blocks:
        if first.false_region.blocks:
            _append(first.false_region.block, second.false_region.block)
        else:
            block = Block()
            first.false_region.add_block(block)
            _append(block, second.false_region.block)
    second.detach()
    second.erase()


def merge_block(block: Block) -> int:
    """Merge the adjacent ``scf.if`` ops on one condition in ``block`` and, then, inside
    the branches of every ``scf.if`` left in it; how many were merged away."""
    merged = 0
    op = block.first_op
    while op is not None:
        if isinstance(op, scf.IfOp) and not op.results:
            between: list[Operation] = []
            nxt = op.next_op
            while nxt is not None and not isinstance(nxt, scf.IfOp) and allocates_at_most(nxt):
                between.append(nxt)
                nxt = nxt.next_op
            if (isinstance(nxt, scf.IfOp) and not nxt.results
                    and same_condition(op.cond, nxt.cond)):
                for moved in between:
                    moved.detach()
                    block.insert_op_before(moved, op)
                _merge(op, nxt)
                merged += 1
                continue  # the merged if may meet another on its condition
        op = op.next_op
    for inner in list(block.ops):
        if isinstance(inner, scf.IfOp):
            for region in inner.regions:
                for branch in region.blocks:
                    merged += merge_block(branch)
    return merged


def merge_branches(module: ModuleOp) -> int:
    """Merge the adjacent ``scf.if`` ops on one condition of every host function of
    ``module`` (see the module docstring); how many were merged away."""
    merged = 0
    for op in module.ops:
        if isinstance(op, func.FuncOp) and op.body.blocks:
            merged += merge_block(op.body.block)
    return merged


@dataclass(frozen=True)
class MergeBranches(ModulePass):
    """Adjacent host ``scf.if`` ops on one condition as one (see the module docstring)."""

    name = "merge-branches"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        merge_branches(op)
