"""``inline-repeated-kernels``: the callees of ``outline-repeated-kernels`` go back inline.

**Matches** every ``func.call`` of a private ``func.func`` marked ``llmopt.repeated`` (the
callees ``outline-repeated-kernels`` made), at any level; by Kernel IR such a callee's
body is the host code of its one kernel (allocations, the launch-size arithmetic, the
``scf.if`` between length buckets, the ``kernel.launch`` ops) ending in ``func.return``.

**Produces** at each call a copy of the callee's body with its arguments replaced by the
call's operands; the callees are then erased. The ``kernel.func`` ops their launches name
were lowered once and stay shared by every copy; they are put back in the order of their
first launch, ahead of the host function, where ``tile-to-kernel`` puts kernels that were
never outlined (so the CUDA source lists the kernels in program order whatever was
outlined).

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

from llmopt.dialects import kernel
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
        program_order(op)


def program_order(module: ModuleOp) -> None:
    """Move the ``kernel.func`` ops of ``module`` before the first function that launches
    one, in the order of their first launch (kernels never launched keep their places)."""
    kernels = {k.sym_name.data: k for k in module.ops if isinstance(k, kernel.FuncOp)}
    order: list[kernel.FuncOp] = []
    anchor = None
    for top in module.ops:
        if isinstance(top, kernel.FuncOp):
            continue
        for launch in top.walk():
            if isinstance(launch, kernel.LaunchOp):
                found = kernels.pop(launch.kernel.root_reference.data, None)
                if found is not None:
                    order.append(found)
                    anchor = anchor or top
    if anchor is None:
        return
    for fn in order:
        fn.detach()
        Rewriter.insert_op(fn, InsertPoint.before(anchor))
