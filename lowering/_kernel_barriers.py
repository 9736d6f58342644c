"""``tile-to-kernel``'s barriers between the steps of a block: where one step writes a
buffer another reads or writes across threads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects import scf
from xdsl.ir import Block, Operation, SSAValue
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from llmopt.dialects import kernel, loop, mma, tile, wgmma
from llmopt.dialects.kernel import enclosing_func
from llmopt.target import WARP


def is_private(buffer: SSAValue) -> bool:
    """Whether ``buffer`` is a register buffer: each thread touches only its own slice."""
    owner = buffer.owner
    return isinstance(owner, tile.AllocOp) and owner.space.data == "registers"


def buffer_effects(op: Operation, asynchronous: bool = False
                   ) -> tuple[set[SSAValue], set[SSAValue]]:
    """The buffers that ``op`` and the ops nested in it read and write (register buffers
    are private to each thread and never shared, so they are left out).

    A ``mma.ldmatrix`` reads its (shared) buffer like a load, a ``wgmma.mma`` both of its
    tiles. A copy
    (``tile.copy``/``kernel.copy``) reads its source and writes its destination.
    An asynchronous copy (``tile.async_copy``/``kernel.async_copy``) reads its source like a
    load, but its write to the shared destination is *not* counted as an access of the step
    that issues it: the data arrive later, at a ``tile.async_wait`` of the issuing thread, so
    no barrier placed around the issuing step would order them. Whoever emits asynchronous
    copies also emits the waits and the ``kernel.barrier`` ops (after a wait, before the
    destination is read by other threads; before a destination that others still read is
    overwritten) that make them safe. With ``asynchronous`` that write is counted too (for
    reordering steps rather than placing barriers)."""
    reads: set[SSAValue] = set()
    writes: set[SSAValue] = set()
    for inner in op.walk():
        if isinstance(inner, loop.LoadOp | kernel.LoadOp | mma.LdMatrixOp):
            if not is_private(inner.buffer):
                reads.add(inner.buffer)
        elif isinstance(inner, loop.StoreOp | kernel.StoreOp):
            if not is_private(inner.buffer):
                writes.add(inner.buffer)
        elif isinstance(inner, wgmma.MmaOp):  # reads its shared tiles
            reads.update(t for t in (inner.a, inner.b) if t is not None)
        elif isinstance(inner, tile.CopyBase | kernel.CopyBase):
            if not is_private(inner.src):
                reads.add(inner.src)
            synchronous = isinstance(inner, tile.CopyOp | kernel.CopyOp)
            if (synchronous or asynchronous) and not is_private(inner.dst):
                writes.add(inner.dst)
    return reads, writes


def spreads_over_threads(op: Operation) -> bool:
    """Whether ``op`` hands work to different threads of the block (so its accesses are not
    repeated identically by every thread)."""
    return any(isinstance(inner, tile.ForallOp | tile.CoopReduceOp) for inner in op.walk())


class Pending:
    """Accesses since the last barrier: buffer → whether some were spread over threads."""

    def __init__(self) -> None:
        self.reads: dict[SSAValue, bool] = {}
        self.writes: dict[SSAValue, bool] = {}

    def clear(self) -> None:
        """A barrier: every pending access is complete and visible."""
        self.reads.clear()
        self.writes.clear()

    def races(self, op: Operation) -> bool:
        """Whether ``op`` may conflict with a pending access made by another thread."""
        reads, writes = buffer_effects(op)
        spread = spreads_over_threads(op)
        for buf in writes:
            for pending in (self.writes, self.reads):
                if buf in pending and (spread or pending[buf]):
                    return True
        for buf in reads:
            if buf in self.writes and (spread or self.writes[buf]):
                return True
        return False

    def add(self, op: Operation) -> None:
        """Record the accesses of ``op``."""
        reads, writes = buffer_effects(op)
        spread = spreads_over_threads(op)
        for buf in reads:
            self.reads[buf] = self.reads.get(buf, False) or spread
        for buf in writes:
            self.writes[buf] = self.writes.get(buf, False) or spread

    def copy(self) -> Pending:
        """An independent copy."""
        other = Pending()
        other.reads = dict(self.reads)
        other.writes = dict(self.writes)
        return other

    def only(self, keep: Callable[[SSAValue], bool]) -> Pending:
        """A copy restricted to the buffers ``keep`` accepts."""
        other = Pending()
        other.reads = {b: v for b, v in self.reads.items() if keep(b)}
        other.writes = {b: v for b, v in self.writes.items() if keep(b)}
        return other


@dataclass
class InsertRowBarriers(RewritePattern):
    """Barriers inside a ``tile.forall over blocks``, so that its steps run in order.

    A sequential ``scf.for`` among the steps (the K loop of a tiled matrix product) is
    followed inside: its body's steps are ordered the same way, and when the start of the
    next iteration would conflict with accesses at the end of the previous one (a shared
    tile overwritten while other threads still read it), a barrier ends the body. The same
    wrap-around check on the block-local buffers of the forall body covers a block moving on
    to its next point.
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.ForallOp, rewriter: PatternRewriter) -> None:
        if op.mapping.data != "blocks":
            return
        fn = enclosing_func(op)
        threads = fn.block_shape[0] if fn is not None else WARP

        def syncs(step: Operation) -> bool:
            return isinstance(step, kernel.BarrierOp) or (
                isinstance(step, tile.CoopReduceOp) and threads > WARP
            )

        def order(block: Block, pending: Pending) -> Pending:
            """Insert barriers between the steps of ``block``; the accesses left pending."""
            for step in list(block.ops):
                if isinstance(step, kernel.BarrierOp):
                    pending.clear()
                    continue
                if isinstance(step, scf.YieldOp):
                    continue
                if pending.races(step):
                    rewriter.insert(kernel.BarrierOp(), InsertPoint.before(step))
                    pending.clear()
                if isinstance(step, scf.ForOp) and spreads_over_threads(step):
                    if wrap(step.body.block, order(step.body.block, pending.copy()),
                            lambda _: True):
                        pending.clear()
                    else:
                        pending.add(step)
                    continue
                pending.add(step)
                if syncs(step):
                    pending.clear()
            return pending

        def wrap(block: Block, end: Pending, keep: Callable[[SSAValue], bool]) -> bool:
            """End ``block`` with a barrier if its next run would race with ``end``."""
            pending = end.only(keep)
            for step in block.ops:
                if isinstance(step, kernel.BarrierOp) or syncs(step):
                    return False
                if isinstance(step, scf.YieldOp):
                    break
                if pending.races(step):
                    last = block.last_op
                    point = (InsertPoint.before(last) if isinstance(last, scf.YieldOp)
                             else InsertPoint.at_end(block))
                    rewriter.insert(kernel.BarrierOp(), point)
                    return True
            return False

        body = op.body.block
        wrap(body, order(body, Pending()), lambda b: isinstance(b.owner, tile.AllocOp))
