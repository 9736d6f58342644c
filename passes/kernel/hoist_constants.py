"""``hoist-constants``: constants in loops move out of every loop around them at once.

**Matches** each constant (an op with xDSL's ``ConstantLike`` trait, such as
``arith.constant``) directly in the body of an ``scf.for``.

**Produces** the constant moved in front of the outermost ``scf.for`` of the chain of loops
it is nested in (each loop directly in the body of the next), where ``canonicalize``
would put it; constants bound for the same loop keep their order. A constant inside an
``scf.if`` or any other region stays in that region, as with ``canonicalize``.

**Why** ``canonicalize`` rehoists constants too, but one loop per sweep over the whole
module, and it sweeps the module again for as long as anything changed: ``tile-to-kernel``
leaves constants in loop nests several deep, so canonicalizing a whole model's kernels took
a sweep per level of nesting. Hoisted first, ``canonicalize`` has only its folds and dead
code left. Where the constants end up in their block does not change the CUDA source (they
are literals at every use).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import ConstantLike

from llmopt.passes._ir import nested_ops

__all__ = ["HoistConstants", "hoist_constants"]


def hoist_constants(root: ModuleOp) -> int:
    """Move every constant of an ``scf.for`` body under ``root`` in front of the outermost
    loop of its chain of loops (see the module docstring). Returns how many moved."""
    moved = 0
    for op in nested_ops(root):  # pre-order: outer loops' constants first
        loop = op.parent_op()
        if not isinstance(loop, scf.ForOp) or not op.has_trait(ConstantLike):
            continue
        outer = loop.parent_op()
        while isinstance(outer, scf.ForOp):
            loop, outer = outer, outer.parent_op()
        op.detach()
        Rewriter.insert_op(op, InsertPoint.before(loop))
        moved += 1
    return moved


@dataclass(frozen=True)
class HoistConstants(ModulePass):
    """Constants out of loop nests in one step (see the module docstring)."""

    name = "hoist-constants"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hoist_constants(op)
