"""A plugin pass that changes a program's meaning: every float constant grows by 1%."""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import FloatAttr, ModuleOp
from xdsl.passes import ModulePass

import llmopt


@llmopt.register_pass
@dataclass(frozen=True)
class PerturbConstants(ModulePass):
    name = "perturb-constants"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for inner in op.walk():
            if isinstance(inner, arith.ConstantOp) and isinstance(inner.value, FloatAttr):
                value = inner.value
                inner.value = FloatAttr(value.value.data * 1.01, value.type)
