"""``ex-strength-reduce``: ``x * 2.0`` becomes ``x + x`` inside Loop-IR kernels.

Exact for every input (both round the same exact value once); an add is never slower.
"""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import FloatAttr, ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern
from xdsl.pattern_rewriter import op_type_rewrite_pattern as matches

import llmopt
from llmopt.dialects import loop


class MulByTwoToAdd(RewritePattern):
    """``mulf(x, 2.0)`` and ``mulf(2.0, x)`` → ``addf(x, x)``."""

    @matches
    def match_and_rewrite(self, op: arith.MulfOp, rewriter: PatternRewriter) -> None:
        for two, x in ((op.rhs, op.lhs), (op.lhs, op.rhs)):
            c = two.owner
            if isinstance(c, arith.ConstantOp) and c.value == FloatAttr(2.0, two.type):
                rewriter.replace(op, arith.AddfOp(x, x, op.fastmath))
                return


@llmopt.register_pass
@dataclass(frozen=True)
class StrengthReduce(ModulePass):
    """Apply :class:`MulByTwoToAdd` inside every ``loop.kernel``."""

    name = "ex-strength-reduce"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for kernel in [k for k in op.walk() if isinstance(k, loop.KernelOp)]:
            PatternRewriteWalker(MulByTwoToAdd()).rewrite_region(kernel.body)
