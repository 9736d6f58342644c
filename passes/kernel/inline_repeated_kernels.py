"""``inline-repeated-kernels``: the callees of ``outline-repeated-kernels`` go back inline.

**Matches** every ``func.call`` of a private ``func.func`` marked ``llmopt.repeated`` (the
callees ``outline-repeated-kernels`` made), at any level; by Kernel IR such a callee's
body is the host code of its one kernel (allocations, the launch-size arithmetic, the
``scf.if`` between length buckets, the ``kernel.launch`` ops) ending in ``func.return``.

**Produces** at each call a copy of the callee's body with its arguments replaced by the
call's operands; the callees are then erased. The ``kernel.func`` ops their launches name
were lowered once and stay shared by every copy.

**Why** the executor and ``plan-buffers`` see one host function: buffers of every layer
are planned together and the launches run in program order, as if the kernels had never
been outlined.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from llmopt.passes._rewrite import fail
from llmopt.passes.loop.outline_repeated_kernels import REPEATED_ATTR

__all__ = ["InlineRepeatedKernels"]


def inline_call(call: func.CallOp, callee: func.FuncOp) -> None:
    """Replace ``call`` by a copy of ``callee``'s body (which returns nothing)."""
    block = callee.body.block
    if len(call.arguments) != len(block.args) or call.results:
        raise fail(call, f"does not match @{callee.sym_name.data}'s signature")
    mapping: dict[SSAValue, SSAValue] = dict(zip(block.args, call.arguments, strict=True))
    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            if op.operands:
                raise fail(op, "a repeated kernel's callee returns nothing")
            break
        Rewriter.insert_op(op.clone(value_mapper=mapping), InsertPoint.before(call))
    Rewriter.erase_op(call)


@dataclass(frozen=True)
class InlineRepeatedKernels(ModulePass):
    """Inline the callees of ``outline-repeated-kernels`` (see the module docstring)."""

    name = "inline-repeated-kernels"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        callees = {fn.sym_name.data: fn for fn in op.ops
                   if isinstance(fn, func.FuncOp) and REPEATED_ATTR in fn.attributes}
        if not callees:
            return
        calls = [c for c in op.walk() if isinstance(c, func.CallOp)
                 and c.callee.root_reference.data in callees]
        for call in calls:
            inline_call(call, callees[call.callee.root_reference.data])
        for fn in callees.values():
            fn.detach()
            fn.erase()
