"""The K loop that ``warp-specialize`` takes, found and taken apart: see
:mod:`llmopt.passes.kernel.warp_specialize` for the form it matches."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import scf
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Operation, SSAValue

from llmopt.dialects import kernel, wgmma
from llmopt.dialects._syntax import constant_index
from llmopt.passes._ir import allocates_at_most, defined_inside
from llmopt.passes.tile.async_copy import LAG_ATTR

PRODUCERS = wgmma.WARPGROUP
"""Threads of the producer: one warpgroup."""


@dataclass
class KLoop:
    """A matched K loop and what the rewrite needs of it."""

    func: kernel.FuncOp
    k_loop: scf.ForOp
    prologue: scf.ForOp
    trips: int  # K
    ahead: int  # D
    copies: list[Operation]  # the K loop body's ops between its barrier and its commit
    compute: list[Operation]  # the ops after the commit, the yield excluded
    wait: wgmma.WaitOp  # the products' last wait (``wgmma.wait 0``), among ``compute``


def _defined_in(value: SSAValue, ops: list[Operation]) -> bool:
    """Whether ``value`` is a result of one of ``ops`` or defined inside one."""
    return any(value.owner is op or defined_inside(value, op) for op in ops)


def _reads_loop_values(ops: list[Operation], k_loop: scf.ForOp,
                       allowed: set[SSAValue]) -> bool:
    """Whether an op of ``ops`` (or nested in one) reads a value that ``k_loop``'s body
    defines (its arguments included) outside ``ops``, other than those ``allowed``."""
    return any(operand not in allowed and defined_inside(operand, k_loop)
               and not _defined_in(operand, ops)
               for op in ops for nested in op.walk() for operand in nested.operands)


def match(func: kernel.FuncOp, k_loop: scf.ForOp) -> KLoop | None:
    """``k_loop`` in the form ``warp-specialize`` takes, else ``None``."""
    block = k_loop.parent_block()
    threads = func.block_shape
    parent = k_loop.parent_op()
    if (block is None or threads[1:] != (1, 1) or threads[0] % PRODUCERS
            or LAG_ATTR in k_loop.attributes or len(k_loop.iter_args) != 3
            or any(r.uses for r in k_loop.results)
            or not (parent is func or (isinstance(parent, scf.ForOp)
                                       and parent.parent_op() is func))):
        return None
    lower, upper, step = (constant_index(v) for v in (k_loop.lb, k_loop.ub, k_loop.step))
    inits = [constant_index(v) for v in k_loop.iter_args]
    prologue = k_loop.prev_op
    if (lower != 0 or step != 1 or upper is None or not isinstance(prologue, scf.ForOp)
            or role(prologue) != "prologue" or not isinstance(prologue.prev_op,
                                                               kernel.BarrierOp)
            or not isinstance(k_loop.next_op, kernel.AsyncWaitOp)
            or k_loop.next_op.groups != 0):
        return None
    ahead = inits[1]
    if inits[0] != 0 or ahead is None or ahead < 1 or inits[2] != ahead % upper:
        return None
    ops = list(k_loop.body.block.ops)
    if (len(ops) < 4 or not isinstance(ops[0], kernel.AsyncWaitOp)
            or ops[0].groups != ahead - 1 or not isinstance(ops[1], kernel.BarrierOp)):
        return None
    commits = [i for i, op in enumerate(ops) if isinstance(op, kernel.AsyncCommitOp)]
    if len(commits) != 1:
        return None
    copies, compute = ops[2:commits[0]], _without_ring(ops[commits[0] + 1:])
    k0, slot, fill_slot, fetch = k_loop.body.block.args
    if any(isinstance(o, kernel.BarrierOp | kernel.AsyncWaitOp | kernel.AsyncCommitOp)
           for op in copies + compute for o in op.walk()):
        return None
    if not any(isinstance(o, wgmma.MmaOp) for op in compute for o in op.walk()):
        return None
    waits = [o for op in compute for o in op.walk() if isinstance(o, wgmma.WaitOp)]
    if not waits or waits[-1].pending.value.data != 0:
        return None
    if (_reads_loop_values(copies, k_loop, {fill_slot, fetch})
            or _reads_loop_values(compute, k_loop, {slot})):
        return None
    return KLoop(func, k_loop, prologue, upper, ahead, copies, compute, waits[-1])


def _without_ring(ops: list[Operation]) -> list[Operation]:
    """``ops`` (ending in the K loop's yield) without the yield and the pure ops that only
    compute the ring's next ``(slot, fill_slot, fetch)``."""
    ring: set[Operation] = {ops[-1]}
    for op in reversed(ops[:-1]):
        if pure(op) and op.results and all(use.operation in ring for r in op.results
                                            for use in r.uses):
            ring.add(op)
    return [op for op in ops if op not in ring]


def pure(op: Operation) -> bool:
    """Whether ``op`` only computes a value (``arith`` division included: its undefined
    results for a zero divisor do not touch memory)."""
    return allocates_at_most(op) or (not op.regions and op.name.startswith("arith."))


def role(op: Operation) -> str | None:
    """The op's ``llmopt.role``, if any."""
    attr = op.attributes.get("llmopt.role")
    return attr.data if isinstance(attr, StringAttr) else None
