"""``warp-specialize``: a pipelined product's copies move to a producer warpgroup of their own,
which hands the shared slots to the computing threads through ``mbarrier`` phases (sm_90a).

**Matches** a ``kernel.func`` of ``C`` threads (a multiple of 128) as ``tile-to-kernel``
leaves a product that ``stage-inputs``, ``async-copy`` and ``wgmma-fragments`` scheduled: in
one block (the kernel's body, or the body of the grid-stride loop over its tiles)

* a ``kernel.barrier``, then the prologue (``scf.for`` marked ``llmopt.role = "prologue"``)
  that fills the first ``D`` slots;
* the K loop (``llmopt.role = "k_loop"``, constant bounds ``0 … K``) carrying ``(slot,
  fill_slot, fetch)`` from ``(0, D, D)``, whose body is ``kernel.async_wait D - 1``,
  ``kernel.barrier``, the copies of chunk ``fetch`` into slot ``fill_slot`` closed by
  ``kernel.async_commit``, then the products of slot ``slot`` (``wgmma`` ops, their last
  ``wgmma.wait 0``) and the ring's update;
* a ``kernel.async_wait 0`` after it.

A K loop that leaves warpgroup products in flight across its barrier (``llmopt.lag``) is
left alone, as is anything else.

**Produces** a block of ``C + 128`` threads. Threads ``C …`` (the producer warpgroup) issue
every chunk's copies — the copies the K loop's ``C`` threads issued, the producer's thread
``C + p`` doing those of threads ``p, p + 128, …`` — and the first ``C`` threads compute, in
one loop of ``K + D`` steps with no block barrier::

    %bars = kernel.shared : memref<2xSxi64>          // [0, s]: slot s full; [1, s]: empty
    (thread 0) mbarrier.init %bars[0, s] count 128, mbarrier.init %bars[1, s] count C
    kernel.barrier
    …
    scf.for %it = 0 to K + D {
      scf.if %tid < C {                               // consumers
        scf.if %it >= D {   c = it - D, n = tile·K + c, s = n mod S
          mbarrier.wait %bars[0, s] parity (n / S) mod 2
          <the products of slot s>
          mbarrier.arrive %bars[1, s]
        }
      } else {                                        // the producer
        scf.if %it < K {    n = tile·K + it, s = n mod S
          mbarrier.wait %bars[1, s] parity (n / S + 1) mod 2
          <the copies of chunk it into slot s, thread ids tid − C (+ 128·h)>
          mbarrier.arrive_copies %bars[0, s]
        }
      }
    }

``tile`` counts the tiles a block did before (the grid-stride loop's iterations), so the
phases run on across tiles. Every op of the block that touches memory besides the
barrier, the loops and the final wait (the accumulators' initialisation, the epilogue) is
the consumers' alone (``scf.if %tid < C``). Each ``kernel.launch`` of the kernel gets the
new block shape.

**Why**: in the K loop every thread both issues copies and computes, so each chunk goes
wait → barrier → copies → products → ``wgmma.wait 0``, and the tensor cores idle at every
barrier; Nsight Compute shows the warps stalled on the barrier and on their copies, not on
the tensor cores. With a producer the consumers wait only for the slot they read, and the
producer runs up to ``S`` chunks ahead, gated only by the slot it refills.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import (
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    StringAttr,
)
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import is_side_effect_free

from llmopt.dialects import kernel, mbarrier, wgmma
from llmopt.dialects._syntax import int_array
from llmopt.passes.tile.async_copy import LAG_ATTR

PRODUCERS = wgmma.WARPGROUP
"""Threads of the producer: one warpgroup."""

__all__ = ["WarpSpecialize"]


@dataclass
class _Loop:
    """A matched K loop and what the rewrite needs of it."""

    func: kernel.FuncOp
    k_loop: scf.ForOp
    prologue: scf.ForOp
    trips: int  # K
    ahead: int  # D
    copies: list[Operation]  # the K loop body's ops between its barrier and its commit
    compute: list[Operation]  # the ops after the commit, the yield excluded


def _constant(value: SSAValue) -> int | None:
    op = value.owner
    if isinstance(op, arith.ConstantOp) and isinstance(op.value, IntegerAttr):
        return op.value.value.data
    return None


def _role(op: Operation) -> str | None:
    attr = op.attributes.get("llmopt.role")
    return attr.data if isinstance(attr, StringAttr) else None


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
                    if isinstance(parent, scf.ForOp) and _role(parent) == "k_loop":
                        return True
                    block = parent.parent_block()
    return False


def _match(func: kernel.FuncOp, k_loop: scf.ForOp) -> _Loop | None:
    """``k_loop`` in the form the module docstring describes, else ``None``."""
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
            or _role(prologue) != "prologue" or not isinstance(prologue.prev_op,
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
    return _Loop(func, k_loop, prologue, upper, ahead, copies, compute)


def _without_ring(ops: list[Operation]) -> list[Operation]:
    """``ops`` (ending in the K loop's yield) without the yield and the pure ops that only
    compute the ring's next ``(slot, fill_slot, fetch)``."""
    ring: set[Operation] = {ops[-1]}
    for op in reversed(ops[:-1]):
        if _pure(op) and op.results and all(use.operation in ring for r in op.results
                                            for use in r.uses):
            ring.add(op)
    return [op for op in ops if op not in ring]


def _index(value: int) -> arith.ConstantOp:
    return arith.ConstantOp(IntegerAttr(value, IndexType()))


class _Builder:
    """Appends ops to a block and hands back their results."""

    def __init__(self, block: Block) -> None:
        self.block = block

    def op(self, op: Operation) -> Operation:
        self.block.add_op(op)
        return op

    def const(self, value: int) -> SSAValue:
        return self.op(_index(value)).results[0]

    def bin(self, cls: type, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(cls(a, b)).results[0]

    def slot(self, tile: SSAValue, chunk: SSAValue, trips: int, slots: int
             ) -> tuple[SSAValue, SSAValue]:
        """The slot of global chunk ``tile · trips + chunk`` and its use count."""
        n = self.bin(arith.AddiOp, self.bin(arith.MuliOp, tile, self.const(trips)), chunk)
        return (self.bin(arith.RemUIOp, n, self.const(slots)),
                self.bin(arith.DivUIOp, n, self.const(slots)))


def _clone_into(ops: list[Operation], mapping: dict[SSAValue, SSAValue], block: Block,
                thread: SSAValue | None) -> None:
    """Clone ``ops`` into ``block`` under ``mapping``; with ``thread``, every
    ``kernel.thread_id x`` among them (nested too) stands for ``thread`` instead."""
    for op in ops:
        if thread is not None and isinstance(op, kernel.ThreadIdOp):
            mapping[op.result] = thread
            continue
        clone = op.clone(value_mapper=mapping)
        block.add_op(clone)
        if thread is not None:
            for new in clone.walk():
                if isinstance(new, kernel.ThreadIdOp) and new.dim.data == "x":
                    new.result.replace_all_uses_with(thread)
        for old, new in zip(op.results, clone.results, strict=True):
            mapping[old] = new


def _tile_index(loop: _Loop, before: Operation) -> SSAValue:
    """How many tiles the block did before this one: ``(p - lb) / step`` of the grid-stride
    loop around the K loop, or 0."""
    parent = loop.k_loop.parent_op()
    if isinstance(parent, scf.ForOp):
        ops = [arith.SubiOp(parent.body.block.args[0], parent.lb)]
        ops.append(arith.DivUIOp(ops[0].result, parent.step))
        Rewriter.insert_op(ops, InsertPoint.before(before))
        return ops[-1].results[0]
    zero = _index(0)
    Rewriter.insert_op(zero, InsertPoint.before(before))
    return zero.result


def _barriers(func: kernel.FuncOp, slots: int, consumers: int) -> SSAValue:
    """The ``2 × slots`` barriers, declared after the kernel's buffers and initialised by
    thread 0 before a ``kernel.barrier`` at the start of the kernel."""
    body = func.body.block
    decl = kernel.SharedOp(MemRefType(IntegerType(64), [2, slots]))
    decl.result.name_hint = "bars"
    decls = [op for op in body.ops if isinstance(op, kernel.BufferDeclOp)]
    Rewriter.insert_op(decl, InsertPoint.after(decls[-1]) if decls
                       else InsertPoint.at_start(body))
    init = Block()
    build = _Builder(init)
    for role, count in ((0, PRODUCERS), (1, consumers)):
        for s in range(slots):
            build.op(mbarrier.InitOp(decl.result, [build.const(role), build.const(s)], count))
    init.add_op(scf.YieldOp())
    tid = kernel.ThreadIdOp("x")
    zero = _index(0)
    first = arith.CmpiOp(tid.result, zero.result, "eq")
    Rewriter.insert_op([tid, zero, first, scf.IfOp(first.result, [], Region(init)),
                        kernel.BarrierOp()], InsertPoint.after(decl))
    return decl.result


def _guard_consumers(block: Block, keep: set[Operation], is_consumer: SSAValue) -> bool:
    """Put every op of ``block`` that touches memory (outside ``keep``) under ``scf.if
    is_consumer``, runs of them together; ``False`` (nothing changed) when such an op has
    results."""
    effectful = [op for op in block.ops if op not in keep and not isinstance(
        op, scf.YieldOp | kernel.ReturnOp | kernel.BufferDeclOp) and not _pure(op)]
    if any(op.results or any(isinstance(o, kernel.BarrierOp) for o in op.walk())
           for op in effectful):
        return False
    runs: list[list[Operation]] = []
    for op in effectful:
        if runs and runs[-1][-1].next_op is op:
            runs[-1].append(op)
        else:
            runs.append([op])
    for run in runs:
        guarded = Block()
        branch = scf.IfOp(is_consumer, [], Region(guarded))
        Rewriter.insert_op(branch, InsertPoint.before(run[0]))
        for op in run:
            op.detach()
            guarded.add_op(op)
        guarded.add_op(scf.YieldOp())
    return True


def _pure(op: Operation) -> bool:
    """Whether ``op`` only computes a value (``arith`` division included: its undefined
    results for a zero divisor do not touch memory)."""
    return not op.regions and (is_side_effect_free(op) or op.name.startswith("arith."))


def _rewrite(loop: _Loop) -> bool:
    func, k_loop = loop.func, loop.k_loop
    consumers = func.block_shape[0]
    slots = loop.ahead + 1
    block = k_loop.parent_block()
    assert block is not None
    tid = kernel.ThreadIdOp("x")
    bound = _index(consumers)
    is_consumer = arith.CmpiOp(tid.result, bound.result, "ult")
    Rewriter.insert_op([tid, bound, is_consumer], InsertPoint.at_start(block))
    keep = {loop.prologue, k_loop, k_loop.next_op, loop.prologue.prev_op, tid, bound,
            is_consumer}
    if not _guard_consumers(block, keep, is_consumer.result):
        return False
    bars = _barriers(func, slots, consumers)
    tile = _tile_index(loop, loop.prologue)
    k0, slot, fill_slot, fetch = k_loop.body.block.args

    steps = Block(arg_types=[IndexType()])
    it = steps.args[0]
    it.name_hint = "it"
    # consumers: the products of chunk it - D
    consume = Block()
    build = _Builder(consume)
    chunk = build.bin(arith.SubiOp, it, build.const(loop.ahead))
    s, use = build.slot(tile, chunk, loop.trips, slots)
    parity = build.bin(arith.RemUIOp, use, build.const(2))
    full, empty = build.const(0), build.const(1)
    build.op(mbarrier.WaitOp(bars, [full, s], parity))
    _clone_into(loop.compute, {slot: s, k0: chunk}, consume, None)
    build.op(mbarrier.ArriveOp(bars, [empty, s]))
    consume.add_op(scf.YieldOp())
    outer = Block()
    build = _Builder(outer)
    ready = build.op(arith.CmpiOp(it, build.const(loop.ahead), "uge")).results[0]
    build.op(scf.IfOp(ready, [], Region(consume)))
    outer.add_op(scf.YieldOp())
    # the producer: the copies of chunk it
    produce = Block()
    build = _Builder(produce)
    s, use = build.slot(tile, it, loop.trips, slots)
    parity = build.bin(arith.RemUIOp, build.bin(arith.AddiOp, use, build.const(1)),
                       build.const(2))
    full, empty = build.const(0), build.const(1)
    build.op(mbarrier.WaitOp(bars, [empty, s], parity))
    rounds = consumers // PRODUCERS
    base = build.bin(arith.SubiOp, build.op(kernel.ThreadIdOp("x")).results[0],
                     build.const(consumers))
    if rounds == 1:
        _clone_into(loop.copies, {fill_slot: s, fetch: it}, produce, base)
    else:
        body = Block(arg_types=[IndexType()])
        inner = _Builder(body)
        thread = inner.bin(arith.AddiOp, base, inner.bin(arith.MuliOp, body.args[0],
                                                         inner.const(PRODUCERS)))
        _clone_into(loop.copies, {fill_slot: s, fetch: it}, body, thread)
        body.add_op(scf.YieldOp())
        build.op(scf.ForOp(build.const(0), build.const(rounds), build.const(1), [], body))
    build.op(mbarrier.ArriveCopiesOp(bars, [full, s]))
    produce.add_op(scf.YieldOp())
    other = Block()
    build = _Builder(other)
    more = build.op(arith.CmpiOp(it, build.const(loop.trips), "ult")).results[0]
    build.op(scf.IfOp(more, [], Region(produce)))
    other.add_op(scf.YieldOp())

    steps.add_op(scf.IfOp(is_consumer.result, [], Region(outer), Region(other)))
    steps.add_op(scf.YieldOp())
    zero, total, one = _index(0), _index(loop.trips + loop.ahead), _index(1)
    skewed = scf.ForOp(zero.result, total.result, one.result, [], Region(steps))
    skewed.attributes["llmopt.role"] = StringAttr("ws_loop")
    Rewriter.insert_op([zero, total, one, skewed], InsertPoint.before(loop.prologue))
    for old in (k_loop, loop.prologue):
        old.detach()
        old.erase()
    return True


def _launches(module: ModuleOp, name: str) -> Iterator[kernel.LaunchOp]:
    for op in module.walk():
        if isinstance(op, kernel.LaunchOp) and op.kernel.root_reference.data == name:
            yield op


@dataclass(frozen=True)
class WarpSpecialize(ModulePass):
    """Producer/consumer products through ``mbarrier`` slots (see the module docstring).
    Option ``enabled`` (default true): ``false`` leaves the module alone, as
    ``lower-to-cuda`` runs it until it is the faster form."""

    name = "warp-specialize"

    enabled: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not self.enabled:
            return
        for func in [f for f in op.ops if isinstance(f, kernel.FuncOp)]:
            loops = [o for o in func.walk() if isinstance(o, scf.ForOp)
                     and _role(o) == "k_loop"]
            matched = [m for m in (_match(func, o) for o in loops) if m is not None]
            if len(loops) != 1 or len(matched) != 1 or not _rewrite(matched[0]):
                continue
            shape = [func.block_shape[0] + PRODUCERS, 1, 1]
            func.properties["block"] = int_array(shape)
            for launch in _launches(op, func.sym_name.data):
                launch.properties["block"] = int_array(shape)
