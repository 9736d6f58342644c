"""``ex-to-prim``: lower ``ex.gelu_tanh`` into one ``prim.elementwise``.

The scalar body spells the formula with ``arith`` and ``math`` ops, in the tensor's element
type; from Tensor IR on, llmopt's own passes fuse it, schedule it and print it as CUDA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import FloatAttr, ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

import llmopt
from llmopt.dialects import prim
from llmopt_example.gelu import GeluTanhOp


class LowerGeluTanh(RewritePattern):
    """``ex.gelu_tanh`` → ``prim.elementwise`` whose body computes GELU on one scalar."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: GeluTanhOp, rewriter: PatternRewriter) -> None:
        typ = op.input.type
        assert isinstance(typ, TensorType)
        elementwise, block = prim.ElementwiseOp.build([op.input], typ)
        (x,) = block.args
        ops: list[Operation] = []

        def emit(new: Operation) -> SSAValue:
            ops.append(new)
            return new.results[0]

        def const(value: float) -> SSAValue:
            return emit(arith.ConstantOp(FloatAttr(value, typ.element_type)))

        x3 = emit(arith.MulfOp(emit(arith.MulfOp(x, x)), x))
        inner = emit(arith.AddfOp(x, emit(arith.MulfOp(const(0.044715), x3))))
        t = emit(xmath.TanhOp(emit(arith.MulfOp(const(math.sqrt(2 / math.pi)), inner))))
        half_x = emit(arith.MulfOp(const(0.5), x))
        y = emit(arith.MulfOp(half_x, emit(arith.AddfOp(const(1.0), t))))
        block.add_ops([*ops, prim.YieldOp(y)])
        rewriter.replace(op, elementwise)


@llmopt.register_pass
@dataclass(frozen=True)
class ExToPrim(ModulePass):
    """Lower every ``ex`` op into Tensor IR."""

    name = "ex-to-prim"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(LowerGeluTanh()).rewrite_module(op)


# A named pipeline: `-p ex-lower-to-cuda{arch=sm_80}` lowers the `ex` ops, then everything.
llmopt.register_pipeline(
    "ex-lower-to-cuda", "ex-to-prim,lower-to-cuda{{arch={arch}}}", {"arch": "sm_90"}
)
