"""The K loop that ``warp-specialize`` takes, found and taken apart: see
:mod:`llmopt.passes.kernel.warp_specialize` for the form it matches."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IntegerAttr, StringAttr
from xdsl.ir import Block, Operation, SSAValue
from xdsl.traits import is_side_effect_free

from llmopt.dialects import kernel, wgmma
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


def _constant(value: SSAValue) -> int | None:
    op = value.owner
    if isinstance(op, arith.ConstantOp) and isinstance(op.value, IntegerAttr):
        return op.value.value.data
    return None


def _defined_in(value: SSAValue, ops: list[Operation]) -> bool:
    """Whether ``value`` is a result of one of ``ops`` or defined inside one."""
    owner = value.owner
    node = owner.parent_op() if isinstance(owner, Block) else owner
    return node is not None and any(node is op or op.is_ancestor(node) for op in ops)


def _uses_outside(ops: list[Operation], inside: list[Operation],
                  allowed: set[SSAValue]) -> bool:
    """Whether an op of ``ops`` (or nested in one) reads a value defined in the K loop's
    body outside ``inside`` other than those ``allowed``."""
    for op in ops:
        for nested in op.walk():
            for operand in nested.operands:
                if operand in allowed or _defined_in(operand, inside):
                    continue
                owner = operand.owner
                block = owner.parent_block() if isinstance(owner, Operation) else owner
                while block is not None:
                    parent = block.parent_op()
                    if parent is None or isinstance(parent, kernel.FuncOp):
                        break
                    if isinstance(parent, scf.ForOp) and role(parent) == "k_loop":
                        return True
                    block = parent.parent_block()
    return False


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
    lower, upper, step = (_constant(v) for v in (k_loop.lb, k_loop.ub, k_loop.step))
    inits = [_constant(v) for v in k_loop.iter_args]
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
    if (_uses_outside(copies, copies, {fill_slot, fetch})
            or _uses_outside(compute, compute, {slot})):
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
    return not op.regions and (is_side_effect_free(op) or op.name.startswith("arith."))


def role(op: Operation) -> str | None:
    """The op's ``llmopt.role``, if any."""
    attr = op.attributes.get("llmopt.role")
    return attr.data if isinstance(attr, StringAttr) else None
