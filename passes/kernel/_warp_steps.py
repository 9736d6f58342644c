"""The pieces ``warp-specialize`` builds (see :mod:`llmopt.passes.kernel.warp_specialize`):
the barriers and their initialisation, the consumers' guard, and the two roles' step of the
loop that replaces the K loop."""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, IntegerType, MemRefType, i64
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from llmopt.dialects import kernel, mbarrier, tma, wgmma
from llmopt.passes.kernel._box_copies import BoxCopy, corner
from llmopt.passes.kernel._warp_roles import PRODUCERS, KLoop, pure

FULL, EMPTY = 0, 1
"""The rows of the barrier buffer: a slot's copies landed; its products are done."""


def index(value: int) -> arith.ConstantOp:
    """An ``index`` constant."""
    return arith.ConstantOp(IntegerAttr(value, IndexType()))


class Builder:
    """Appends ops to a block and hands back their results."""

    def __init__(self, block: Block) -> None:
        self.block = block

    def op(self, op: Operation) -> Operation:
        self.block.add_op(op)
        return op

    def const(self, value: int) -> SSAValue:
        return self.op(index(value)).results[0]

    def bin(self, cls: type, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(cls(a, b)).results[0]

    def slot(self, tile: SSAValue, chunk: SSAValue, trips: int, slots: int
             ) -> tuple[SSAValue, SSAValue]:
        """The slot of global chunk ``tile · trips + chunk`` and how many times it was
        filled before."""
        n = self.bin(arith.AddiOp, self.bin(arith.MuliOp, tile, self.const(trips)), chunk)
        return (self.bin(arith.RemUIOp, n, self.const(slots)),
                self.bin(arith.DivUIOp, n, self.const(slots)))

    def parity(self, use: SSAValue, shift: int = 0) -> SSAValue:
        """``(use + shift) mod 2``."""
        if shift:
            use = self.bin(arith.AddiOp, use, self.const(shift))
        return self.bin(arith.RemUIOp, use, self.const(2))


def clone_into(ops: list[Operation], mapping: dict[SSAValue, SSAValue], block: Block,
               thread: SSAValue | None = None) -> None:
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


def barriers(func: kernel.FuncOp, slots: int, consumers: int, fillers: int = PRODUCERS,
             cluster: bool = False) -> SSAValue:
    """The ``2 × slots`` barriers, declared after the kernel's buffers and initialised by
    thread 0 before a ``kernel.barrier`` at the start of the kernel (a
    ``kernel.cluster_barrier`` with ``cluster``: the other blocks of the cluster arrive on
    them too): a slot is full after ``fillers`` arrivals, empty after ``consumers``."""
    body = func.body.block
    decl = kernel.SharedOp(MemRefType(IntegerType(64), [2, slots]))
    decl.result.name_hint = "bars"
    decls = [op for op in body.ops if isinstance(op, kernel.BufferDeclOp)]
    Rewriter.insert_op(decl, InsertPoint.after(decls[-1]) if decls
                       else InsertPoint.at_start(body))
    init = Block()
    build = Builder(init)
    for row, count in ((FULL, fillers), (EMPTY, consumers)):
        for s in range(slots):
            build.op(mbarrier.InitOp(decl.result, [build.const(row), build.const(s)], count))
    init.add_op(scf.YieldOp())
    tid = kernel.ThreadIdOp("x")
    zero = index(0)
    first = arith.CmpiOp(tid.result, zero.result, "eq")
    sync = kernel.ClusterBarrierOp() if cluster else kernel.BarrierOp()
    Rewriter.insert_op([tid, zero, first, scf.IfOp(first.result, [], Region(init)), sync],
                       InsertPoint.after(decl))
    return decl.result


def guard_consumers(block: Block, keep: set[Operation], is_consumer: SSAValue) -> bool:
    """Put every op of ``block`` that touches memory (outside ``keep``) under ``scf.if
    is_consumer``, runs of them together; ``False`` (nothing changed) when such an op has
    results or holds a block barrier."""
    effectful = [op for op in block.ops if op not in keep and not isinstance(
        op, scf.YieldOp | kernel.ReturnOp | kernel.BufferDeclOp) and not pure(op)]
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
        Rewriter.insert_op(scf.IfOp(is_consumer, [], Region(guarded)),
                           InsertPoint.before(run[0]))
        for op in run:
            op.detach()
            guarded.add_op(op)
        guarded.add_op(scf.YieldOp())
    return True


def tile_index(loop: KLoop, before: Operation) -> SSAValue:
    """How many tiles the block did before this one: ``(p - lb) / step`` of the grid-stride
    loop around the K loop, or 0."""
    parent = loop.k_loop.parent_op()
    if isinstance(parent, scf.ForOp):
        ops = [arith.SubiOp(parent.body.block.args[0], parent.lb)]
        ops.append(arith.DivUIOp(ops[0].result, parent.step))
        Rewriter.insert_op(ops, InsertPoint.before(before))
        return ops[-1].results[0]
    zero = index(0)
    Rewriter.insert_op(zero, InsertPoint.before(before))
    return zero.result


def accumulator_stores(wait: wgmma.WaitOp) -> list[kernel.StoreOp] | None:
    """The stores that put ``wait``'s results back into the accumulators, one a result,
    into a ``kernel.local`` at constant indices; ``None`` when they are not so."""
    stores: list[kernel.StoreOp] = []
    for result in wait.results:
        users = [use.operation for use in result.uses]
        if len(users) != 1 or not isinstance(users[0], kernel.StoreOp):
            return None
        store = users[0]
        if (store.value is not result or not isinstance(store.buffer.owner, kernel.LocalOp)
                or not all(isinstance(i.owner, arith.ConstantOp) for i in store.indices)):
            return None
        stores.append(store)
    return stores


def drain(stores: list[kernel.StoreOp], block: Block) -> None:
    """In ``block``: the accumulators that ``stores`` write, through ``wgmma.wait 0`` and
    back (the products left in flight by the step that holds ``block`` complete)."""
    build = Builder(block)
    places = [(s.buffer, [build.op(i.owner.clone()).results[0] for i in s.indices])
              for s in stores]
    values = [build.op(kernel.LoadOp(buf, at)).results[0] for buf, at in places]
    done = build.op(wgmma.WaitOp(0, values))
    for value, (buf, at) in zip(done.results, places, strict=True):
        build.op(kernel.StoreOp(value, buf, at))


def _when(value: SSAValue, predicate: str, bound: int, body: Block) -> Block:
    """A block that runs ``body`` when ``value <predicate> bound`` (``arith.cmpi``)."""
    outer = Block()
    build = Builder(outer)
    holds = build.op(arith.CmpiOp(value, build.const(bound), predicate)).results[0]
    build.op(scf.IfOp(holds, [], Region(body)))
    outer.add_op(scf.YieldOp())
    return outer


def release(bars: SSAValue, slot: SSAValue, size: int, block: Block) -> None:
    """In ``block`` (a consumer step, after its products' wait): the slot's release — each
    thread's arrival, or in a cluster of ``size > 1`` blocks one arrival a warpgroup on
    every block of it: thread ``r`` of each warpgroup arrives on block ``r``'s barrier (the
    warpgroup's wait completed all its products, so none of its threads reads the slot any
    more)."""
    build = Builder(block)
    if size == 1:
        build.op(mbarrier.ArriveOp(bars, [build.const(EMPTY), slot]))
        return
    lane = build.bin(arith.RemUIOp, build.op(kernel.ThreadIdOp("x")).results[0],
                     build.const(wgmma.WARPGROUP))
    arrive = Block()
    inner = Builder(arrive)
    inner.op(mbarrier.ArriveClusterOp(bars, [inner.const(EMPTY), slot], lane))
    arrive.add_op(scf.YieldOp())
    signals = build.op(arith.CmpiOp(lane, build.const(size), "ult")).results[0]
    build.op(scf.IfOp(signals, [], Region(arrive)))


def consumer_step(loop: KLoop, bars: SSAValue, tile: SSAValue, it: SSAValue,
                  pending: bool, stores: list[kernel.StoreOp], cluster: int = 1) -> Block:
    """The consumers' step ``it``: chunk ``c = it - D`` (when ``it >= D``) — wait for its
    slot, its products, and the release of its slot; with ``pending`` the products' last
    wait leaves their group in flight and the step releases the previous chunk's slot,
    whose products that wait completed, and the last chunk's step then waits for its own
    group too (:func:`drain` of the accumulators' ``stores``, inside the loop: the module
    docstring of :mod:`llmopt.passes.kernel.warp_specialize` says why not after it). In a
    cluster of ``cluster`` blocks a release goes to every block of it
    (:func:`release`)."""
    k0, slot = loop.k_loop.body.block.args[:2]
    slots = loop.ahead + 1
    step = Block()
    build = Builder(step)
    chunk = build.bin(arith.SubiOp, it, build.const(loop.ahead))
    s, use = build.slot(tile, chunk, loop.trips, slots)
    build.op(mbarrier.WaitOp(bars, [build.const(FULL), s], build.parity(use)))
    mapping: dict[SSAValue, SSAValue] = {slot: s, k0: chunk}
    clone_into(loop.compute, mapping, step)
    if not pending:
        release(bars, s, cluster, step)
    else:
        waited = mapping[loop.wait.results[0]].owner
        assert isinstance(waited, wgmma.WaitOp)
        waited.properties["pending"] = IntegerAttr(1, i64)
        earlier = Block()
        inner = Builder(earlier)
        before, _ = inner.slot(tile, inner.bin(arith.SubiOp, chunk, inner.const(1)),
                               loop.trips, slots)
        release(bars, before, cluster, earlier)
        earlier.add_op(scf.YieldOp())
        started = build.op(arith.CmpiOp(chunk, build.const(1), "uge")).results[0]
        build.op(scf.IfOp(started, [], Region(earlier)))
        last = Block()
        drain(stores, last)
        last.add_op(scf.YieldOp())
        final = build.op(arith.CmpiOp(chunk, build.const(loop.trips - 1), "eq")).results[0]
        build.op(scf.IfOp(final, [], Region(last)))
    step.add_op(scf.YieldOp())
    return _when(it, "uge", loop.ahead, step)


def producer_step(loop: KLoop, bars: SSAValue, tile: SSAValue, it: SSAValue,
                  boxes: list[BoxCopy] | None = None, shared: tuple[int, ...] = (),
                  cluster: int = 1) -> Block:
    """The producer's step ``it``: chunk ``it`` (when ``it < K``) — wait for its slot's
    release (the phase of its previous use; at once for a first use), the K loop's copies
    of it with the producer's thread ids, and the arrival once they land. With ``boxes``
    the producer's first thread instead announces their bytes on the slot's barrier and
    issues one ``tma.load`` a box; the boxes whose indices are in ``shared`` are multicast
    copies to the ``cluster`` blocks of the cluster (each block then receives every box
    whole)."""
    fill_slot, fetch = loop.k_loop.body.block.args[2:]
    consumers = loop.func.block_shape[0]
    step = Block()
    build = Builder(step)
    s, use = build.slot(tile, it, loop.trips, loop.ahead + 1)
    build.op(mbarrier.WaitOp(bars, [build.const(EMPTY), s], build.parity(use, 1)))
    if boxes is not None:
        issue = Block()
        inner = Builder(issue)
        full = [inner.const(FULL), s]
        inner.op(mbarrier.ExpectBytesOp(bars, full, sum(b.bytes for b in boxes)))
        outer = {fill_slot: s, fetch: it}
        for k, box in enumerate(boxes):
            at = corner(box, outer, issue)
            inner.op(tma.LoadOp(box.copy.src, at, box.copy.dst,
                                [outer.get(v, v) for v in box.slot], bars, full,
                                cluster if k in shared else None))
        issue.add_op(scf.YieldOp())
        tid = build.op(kernel.ThreadIdOp("x")).results[0]
        first = build.op(arith.CmpiOp(tid, build.const(consumers), "eq")).results[0]
        build.op(scf.IfOp(first, [], Region(issue)))
        step.add_op(scf.YieldOp())
        return _when(it, "ult", loop.trips, step)
    base = build.bin(arith.SubiOp, build.op(kernel.ThreadIdOp("x")).results[0],
                     build.const(consumers))
    rounds = consumers // PRODUCERS
    if rounds == 1:
        clone_into(loop.copies, {fill_slot: s, fetch: it}, step, base)
    else:  # each producer thread issues the copies of rounds consumer threads
        body = Block(arg_types=[IndexType()])
        inner = Builder(body)
        thread = inner.bin(arith.AddiOp, base, inner.bin(arith.MuliOp, body.args[0],
                                                         inner.const(PRODUCERS)))
        clone_into(loop.copies, {fill_slot: s, fetch: it}, body, thread)
        body.add_op(scf.YieldOp())
        build.op(scf.ForOp(build.const(0), build.const(rounds), build.const(1), [], body))
    build.op(mbarrier.ArriveCopiesOp(bars, [build.const(FULL), s]))
    step.add_op(scf.YieldOp())
    return _when(it, "ult", loop.trips, step)
