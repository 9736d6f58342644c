"""``fuse-kernels``: producer→consumer fusion of ``loop.kernel`` ops.

**Matches** a kernel *P* that fills a temporary buffer *T* (a ``memref.alloc`` of the
function that is not returned) with one store per point of a perfect free nest, and the
kernels that read *T*.

**Produces** the consumers with *P*'s computation inlined at each ``loop.load`` of *T*
(its indices composed through the load's affine map), then loop-invariant code hoisted
and identical computations merged; *P* and *T* disappear.

**Why** each intermediate that never reaches memory saves a write and a read of the whole
tensor and a launch: RMSNorm, softmax and ``silu(a) * b`` each become one kernel, and a
matmul (a broadcast product reduced over K) becomes one kernel with its epilogue.

Fusion never multiplies work. A load site is accepted only if the loops around it that
its indices do not use are all *inside* the loops they do use — the inlined computation
can then be hoisted out of the unused ones and runs once per distinct value. A producer
that contains a reduction is inlined only when it has a single consumer kernel and no two of
its load sites share a block (as the two halves of a rotate-half ``cat`` would: each site
would run the reduction again for the same iteration), unless the sites read disjoint
points, each once (:func:`~llmopt.passes.loop._fuse_analysis.reads_disjoint`: the two
halves of a rotary embedding after ``index-set-split``). Sites in different loops are
accepted when the reduction is short (at most ``recompute_limit`` iterations per value, 256
by default): a softmax's max, sum and normalise loops each recompute the attention scores
they read, but a long projection (an MLP's down projection) is not computed twice.

A producer with several consumer kernels is copied into each, so it must read only buffers
that no kernel writes (the function's inputs and weights): copying a producer that reads an
intermediate would chain the copies — a residual stream recomputed from every earlier layer
in every later one. A producer that only moves values (its stored value is a load: a
reshape, transpose or broadcast) is the exception to both rules when no consumer reduces:
inlined, each consumer reads the moved buffer itself and nothing is computed twice — a
decode step's rotary ``cos``/``sin`` rows, unsqueezed in every layer for two kernels each,
then cost no kernel. The operands of products and reductions stay as they were (the Tile-IR
product schedules, register tiles and ``flash-attention``, match loads of plain buffers),
except a permutation (:func:`is_permutation`: a transpose, or dims of extent 1 added or
dropped) of a buffer no kernel writes: inlined, a product's operand is still one load of a
plain buffer, so ``x @ w.t()`` reads the weight as ``F.linear`` does instead of a transposed
copy written first. A permutation of an intermediate (the value projection's heads moved
in front of its rows) stays a consumer of its producer, which then writes the permuted
layout itself, the form the attention schedules expect.

Loops of extent 1 count as used (running once, they multiply nothing). An index operand
that is not an induction variable (a data-dependent coordinate, e.g. a token id loaded and
``arith.index_cast``; or any value computed in the kernel) is taken to use every loop
around the op that defines it: the value may vary with any of them.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import MemRefType, ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from llmopt.dialects import loop
from llmopt.passes.loop._fuse_analysis import (
    analyse_producer,
    is_copy,
    is_permutation,
    loads_of,
    reads_disjoint,
    site_is_legal,
    temporary_output,
    written_args,
)
from llmopt.passes.loop._fuse_rewrite import inline_at, tidy, unbind

# The names other modules took from here before the helpers were split out stay importable.
__all__ = ["FuseKernels", "fuse_function"]


def fuse_function(fn: func.FuncOp, recompute_limit: int = 256,
                  permuted_operands: bool = True) -> None:
    """Fuse producers into consumers in ``fn`` until nothing changes.

    Each step fuses the last fusable producer in program order. A kernel found unfusable is
    not examined again until something it depends on changes: its own body, or the kernels
    bound to the buffers it writes (see :func:`_fuse_one`).
    """
    block = fn.body.block
    # Fusion only erases kernels, so the initial positions keep ordering the survivors.
    stale = _Stale([op for op in block.ops if isinstance(op, loop.KernelOp)])
    returned = {v for op in block.ops if isinstance(op, func.ReturnOp) for v in op.operands}
    # Inlining adds loads, never stores: what each kernel writes is fixed during the pass.
    written: dict[loop.KernelOp, set[SSAValue]] = {}
    while _fuse_one(stale, stale.position, returned, written, recompute_limit,
                    permuted_operands):
        pass
    for kernel in [op for op in block.ops if isinstance(op, loop.KernelOp)]:
        tidy(kernel)


def _written_by(kernel: loop.KernelOp, written: dict[loop.KernelOp, set[SSAValue]]
                ) -> set[SSAValue]:
    """:func:`_bound_written`, cached in ``written``."""
    if kernel not in written:
        written[kernel] = _bound_written(kernel)
    return written[kernel]


def _writers_of(buffers: set[SSAValue], written: dict[loop.KernelOp, set[SSAValue]]
                ) -> set[loop.KernelOp]:
    """The kernels that store to any of ``buffers`` (function-level values)."""
    out: set[loop.KernelOp] = set()
    for buffer in buffers:
        if not isinstance(buffer.type, MemRefType):
            continue  # an index (the length every kernel binds) is never written
        for use in buffer.uses:
            user = use.operation
            if isinstance(user, loop.KernelOp) and buffer in _written_by(user, written):
                out.add(user)
    return out


class _Stale:
    """The kernels whose fusion decision may have changed, handed out last first (in their
    initial program order). A heap keeps the order: sorting every candidate again for
    each fusion made the pass quadratic in a whole model's kernels."""

    def __init__(self, kernels: list[loop.KernelOp]) -> None:
        self.kernels = kernels
        self.position = {k: i for i, k in enumerate(kernels)}
        self.members = set(kernels)
        self.heap = [-i for i in range(len(kernels))]
        heapq.heapify(self.heap)

    def add(self, kernels: set[loop.KernelOp]) -> None:
        """Mark ``kernels`` stale (again)."""
        for kernel in kernels:
            if kernel not in self.members:
                self.members.add(kernel)
                heapq.heappush(self.heap, -self.position[kernel])

    def pop(self) -> loop.KernelOp | None:
        """The last stale kernel in program order, no longer stale; ``None`` if none is."""
        while self.heap:
            kernel = self.kernels[-heapq.heappop(self.heap)]
            if kernel in self.members:
                self.members.discard(kernel)
                return kernel
        return None


def _fuse_one(stale: _Stale, position: dict[loop.KernelOp, int],
              returned: set[SSAValue], written: dict[loop.KernelOp, set[SSAValue]],
              recompute_limit: int = 256, permuted_operands: bool = True) -> bool:
    """Fuse the last fusable producer among the ``stale`` kernels (those whose decision may
    have changed); drop the ones found unfusable from ``stale`` and mark the kernels a
    fusion affects: the consumers (new bodies) and the writers of every buffer bound to the
    producer or the consumers (new consumer sites, or one consumer fewer)."""
    while (producer_kernel := stale.pop()) is not None:
        producer = analyse_producer(producer_kernel)
        if producer is None:
            continue
        buffer = temporary_output(producer_kernel, producer.out_arg, returned)
        if buffer is None:
            continue
        # The kernels bound to the buffer, in program order (found through its uses: walking
        # every kernel for every candidate would make the pass cubic in the kernel count).
        bound = {use.operation for use in buffer.uses if isinstance(use.operation, loop.KernelOp)}
        users = sorted(bound, key=position.__getitem__)
        writers = [k for k in users if buffer in _written_by(k, written)]
        if writers != [producer_kernel]:
            continue
        consumers = [k for k in users if k is not producer_kernel]
        if producer.has_reduce and len(consumers) > 1:
            continue
        sites = [(c, ld) for c in consumers for ld in loads_of(c, buffer)]
        inputs = {b for b in producer_kernel.buffers if b is not buffer}
        copy = is_copy(producer) and (not any(  # inlined, a load: nothing recomputed
            isinstance(op, loop.ReduceOp) for c in consumers for op in c.walk())
            or permuted_operands and is_permutation(producer)
            and not _writers_of(inputs, written))
        if not copy and not all(site_is_legal(ld, c, producer) for c, ld in sites):
            continue
        if producer.has_reduce and len(sites) > 1 and (
            len({ld.parent for _, ld in sites}) < len(sites)
            or producer.reduce_work > recompute_limit
        ) and not reads_disjoint([ld for _, ld in sites], consumers[0]):
            continue
        if len(consumers) > 1 and _writers_of(inputs, written) and not copy:
            continue  # copies of a producer reading intermediates would chain
        for consumer, load in sites:
            inline_at(load, consumer, producer)
            tidy(consumer)
        for consumer in consumers:
            unbind(consumer, buffer)
        touched = set(producer_kernel.buffers) - {buffer}
        for consumer in consumers:
            touched |= set(consumer.buffers)
        Rewriter.erase_op(producer_kernel)
        if not buffer.uses:
            Rewriter.erase_op(buffer.owner)
        written.pop(producer_kernel, None)
        stale.add(set(consumers) | _writers_of(touched, written))
        return True
    return False


def _bound_written(kernel: loop.KernelOp) -> set[SSAValue]:
    """The function-level buffers bound to the block arguments ``kernel`` stores to."""
    args = list(kernel.body.block.args)
    return {kernel.buffers[args.index(a)] for a in written_args(kernel)}


@dataclass(frozen=True)
class FuseKernels(ModulePass):
    """Producer→consumer fusion at Loop IR (see the module docstring)."""

    name = "fuse-kernels"

    recompute_limit: int = 256
    """A producer with reductions is inlined at several load sites only if each value it
    stores costs at most this many reduction iterations (``fuse-kernels{recompute_limit=0}``
    never recomputes a reduction)."""

    permuted_operands: bool = True
    """Inline a permutation of a buffer no kernel writes into the products and reductions
    that read it (``false``: such a permutation is a kernel of its own, writing the permuted
    copy, as every copy read by a reduction is)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in list(op.walk()):
            if isinstance(fn, func.FuncOp) and not fn.is_declaration:
                fuse_function(fn, self.recompute_limit, self.permuted_operands)
