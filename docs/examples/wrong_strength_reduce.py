"""``ex-strength-reduce`` with a bug, for the tutorial: ``x * 2.0`` becomes ``x``."""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import FloatAttr, ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern
from xdsl.pattern_rewriter import op_type_rewrite_pattern as matches

import llmopt
from llmopt.dialects import loop


class MulByTwoToX(RewritePattern):
    """``mulf(x, 2.0)`` → ``x``: wrong, and --check-numerics says so."""

    @matches
    def match_and_rewrite(self, op: arith.MulfOp, rewriter: PatternRewriter) -> None:
        for two, x in ((op.rhs, op.lhs), (op.lhs, op.rhs)):
            c = two.owner
            if isinstance(c, arith.ConstantOp) and c.value == FloatAttr(2.0, two.type):
                rewriter.replace(op, [], [x])  # the bug: x instead of x + x
                return


@llmopt.register_pass
@dataclass(frozen=True)
class WrongStrengthReduce(ModulePass):
    """Apply :class:`MulByTwoToX` inside every ``loop.kernel``."""

    name = "wrong-strength-reduce"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for kernel in [k for k in op.walk() if isinstance(k, loop.KernelOp)]:
            PatternRewriteWalker(MulByTwoToX()).rewrite_region(kernel.body)
