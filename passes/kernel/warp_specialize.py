"""``warp-specialize``: a pipelined product's copies move to a producer warpgroup of their own,
which hands the shared slots to the computing threads through ``mbarrier`` phases (sm_90a).

**Matches** a ``kernel.func`` of ``C`` threads (a multiple of 128) as ``tile-to-kernel``
leaves a product that ``stage-inputs``, ``async-copy`` and ``wgmma-fragments`` scheduled: in
one block (the kernel's body, or the body of the grid-stride loop over its tiles)

* a ``kernel.barrier``, then the prologue (``scf.for`` marked ``llmopt.role = "prologue"``)
  that fills the first ``D`` slots;
* the K loop (``llmopt.role = "k_loop"``, constant bounds ``0 … K``) carrying ``(slot,
  fill_slot, fetch)`` from ``(0, D, D mod K)``, whose body is ``kernel.async_wait D - 1``,
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
phases run on across tiles, and the block barrier in front of each tile's prologue goes: the
slots' barriers order their reuse, so the producer starts the next tile's copies while the
consumers finish the last one. Every op of the block that touches memory besides the loops
and the final wait (the accumulators' initialisation, the epilogue) is the consumers' alone
(``scf.if %tid < C``). Each ``kernel.launch`` of the kernel gets the new block shape.

``pending = 0`` (the default) waits for every chunk's products in its step. With
``pending = 1`` (option) a step's products stay in flight: their wait becomes ``wgmma.wait
1``, so chunk ``c``'s products run while the consumers wait for chunk ``c + 1``'s slot, and
the step releases chunk ``c - 1``'s slot instead of its own (that wait completed its
products). The last chunk's step then also waits for its own products (``wgmma.wait 0`` on
the accumulators, in an ``scf.if`` inside the loop), and after the loop the consumers
release its slot. The products' last wait must put its results straight back into the
accumulators (a ``kernel.local`` at constant indices); else the K loop is left alone.

**Why the final wait is inside the loop**: with it after the loop, bare products (``x @
Wᵀ``, the result stored with nothing added) came out wrong on an H100 by about one K
chunk's share of the sum (``bench/results/ops-bfloat16-h100.md``) while the same kernel with
a residual or a bias in its epilogue was right. The SASS that NVRTC 13.0 makes of it shows
why: the epilogue's ``F2FP`` conversions of the accumulators are scheduled after the loop's
last ``WARPGROUP.DEPBAR.LE gsb0, 0x1`` and before the ``WARPGROUP.DEPBAR.LE gsb0, 0x0`` of
the final wait, so they read the last group's registers while its products still write
them (the PTX has the ``cvt`` after the ``wgmma.wait_group 0``; the inline ``asm``'s ``+f``
operands are not registers the instruction names, so ptxas does not see the dependence).
With the wait inside the loop ptxas adds its own ``WARPGROUP.DEPBAR`` at the loop's exit
(``warpgroup.wait is injected … to allow use of registers defined by GMMA``) and the
conversions follow it, and the bare products come out right on an H100. ``bench/
sass_hazards.py`` finds such reads in a kernel's SASS on the CPU. ``pending = 0`` stays the
default: neither is the faster on every product
(``bench/results/gemm-bf16-wave-tiles-h100.md``).

With ``tensor_copies`` (option, off by default) a K loop whose copies are all whole boxes
(each stage fill a tile of a kernel argument: :mod:`llmopt.passes.kernel._box_copies`) is
filled by the tensor memory accelerator instead: the producer's first thread announces the
step's bytes on the slot's ``full`` barrier and issues one ``tma.load`` a box; the barrier
expects that one arrival and the bytes::

    scf.if %tid == C {
      mbarrier.expect_bytes %bars[0, s] bytes <the boxes' bytes>
      tma.load %x[<corner>] to %stage[s] on %bars[0, s]
      tma.load %w[<corner>] to %stage_1[s] on %bars[0, s]
    }

The producer's other threads only follow the slots. **Why**: ``cp.async`` makes the
producer issue a 16-byte copy, with its address arithmetic, for every 16 bytes of a slot
(3,072 a slot of a ``128 × 256`` tile's two operands); a bulk copy is one instruction a box,
its addresses computed by the copy engine from a tensor map. Copies that are not boxes keep
``cp.async``.

With ``cluster = n`` (option; by default the kernel's knob ``multicast``, which
``register-tile`` sets to 2 for wide products) a kernel of boxes runs in clusters of ``n``
blocks along ``x`` whose tiles share a box — the weight tile of ``n`` row bands of a
product, when its tiles are numbered row band fastest (:mod:`llmopt.passes.kernel.
_warp_cluster`). Each block's producer copies ``1 / n`` of a shared box to every block of
the cluster (``tma.load … multicast n``), so that the cluster reads each weight tile from
L2 once instead of ``n`` times; a slot is then refilled by every block's producer, so its
``empty`` barrier counts one release a consumer warpgroup of every block
(``mbarrier.arrive_cluster``, thread ``r`` of each warpgroup arriving on block ``r``), the
barriers' initialisation is followed by a ``kernel.cluster_barrier`` (no block may signal
a barrier of another before it is set up), and after its last tile a block's producer waits
for the release of every slot, after which no block of the cluster touches its shared
memory and it may end. The kernel becomes ``kernel.func … cluster n``. A kernel whose
tiles, grid or boxes do not allow it is specialised without clusters.

A specialised kernel whose grid-stride loop has more tiles than the target's
multiprocessors, one block a tile, is launched on as many blocks as there are
multiprocessors (option ``persistent``, default true; ``arch`` names the target,
``max_blocks`` overrides the count): its blocks run alone on a multiprocessor, and each
then takes several tiles, its producer filling the next tile's slots while its consumers
store the last one, instead of a new block starting with empty slots.

With ``producer_registers`` and ``consumer_registers`` (options, 0 = off; both or
neither; multiples of 8 from 24 to 256) the roles also get registers of their own (sm_90a):
the kernel's body from the first op that differs by role on — the ops after the
barriers' initialisation and its ``kernel.barrier``, the grid-stride loop included —
becomes one branch per role that runs to the end of the kernel::

    scf.if %tid < C {
      kernel.set_max_registers inc consumer_registers
      <the body, the consumers' part: the loop's steps D … K + D>
    } else {
      kernel.set_max_registers dec producer_registers
      <the body, the producer's part: the loop's steps 0 … K>
    }

Each branch is the body with the role test known (every ``scf.if`` on it replaced by the
branch it takes; see :mod:`llmopt.passes.kernel._warp_split`), and the kernel gets the
knob ``min_blocks = 1`` (``__launch_bounds__(C + 128, 1)``). Where the roles would hold
more registers than a block of ``C + 128`` threads starts with (``producer_registers · 128
+ consumer_registers · C`` above the multiprocessor's 65 536 registers shared evenly and
rounded down to 8 a thread: 64 512 for ``C = 256``) the consumers get the most that fits
instead (:func:`~llmopt.passes.kernel._warp_split.consumer_share`: 152 each for the three
warpgroups of a 192-row tile), and a kernel where even that is no more than their even
share is left alone; one whose body holds a block barrier after the initialisation (which
every thread must reach) is specialised without the split.

**Why**: in the K loop every thread both issues copies and computes, so each chunk goes
wait → barrier → copies → products → ``wgmma.wait 0``, and the tensor cores idle at every
barrier; Nsight Compute shows the warps stalled on the barrier and on their copies, not on
the tensor cores. With a producer the consumers wait only for the slot they read, and the
producer runs up to ``S`` chunks ahead, gated only by the slot it refills. A block of
``C + 128`` threads caps every thread at its even share of the registers (168 for ``C =
256``), little for two consumer warpgroups' 64 × 256 accumulators; the producer needs
fewer, so ``setmaxnreg`` hands part of its share to the consumers. ptxas gives a register
budget only to code that runs after it to the end of the kernel, hence the split; it also
takes the products out of a branch inside the loop, where ptxas serialises ``wgmma``
(its warning C7518, "compiler-inserted WG.DP in divergent path").
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.ir import Block, Operation, Region
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import PassFailedException

from llmopt.dialects import kernel
from llmopt.dialects._syntax import int_array
from llmopt.dialects.wgmma import WARPGROUP
from llmopt.passes.kernel._box_copies import box_copies
from llmopt.passes.kernel._warp_cluster import persist, plan, producer_tail
from llmopt.passes.kernel._warp_roles import PRODUCERS, KLoop, match, role
from llmopt.passes.kernel._warp_split import consumer_share, split_roles
from llmopt.passes.kernel._warp_steps import (
    Builder,
    accumulator_stores,
    barriers,
    consumer_step,
    guard_consumers,
    index,
    producer_step,
    release,
    tile_index,
)
from llmopt.passes.tile._schedule import PRODUCER_ROLES, kernel_knobs, knob
from llmopt.target import DEFAULT_ARCH, MAX_CLUSTER, for_arch

__all__ = ["WarpSpecialize"]


def _rewrite(loop: KLoop, pending: int, tensor_copies: bool, cluster: int = 1,
             blocks: int = 0) -> bool:
    """Replace ``loop``'s prologue and K loop by the producer/consumer loop (see the
    module docstring), in clusters of ``cluster`` blocks where the kernel allows
    (:func:`~llmopt.passes.kernel._warp_cluster.plan`), on at most ``blocks`` blocks (0:
    the grid as it is; :func:`~llmopt.passes.kernel._warp_cluster.persist`); ``False``
    (nothing changed) when the block cannot be guarded."""
    func, k_loop = loop.func, loop.k_loop
    consumers = func.block_shape[0]
    block = k_loop.parent_block()
    assert block is not None
    stores = accumulator_stores(loop.wait)
    if stores is None:
        return False
    tid = kernel.ThreadIdOp("x")
    bound = index(consumers)
    is_consumer = arith.CmpiOp(tid.result, bound.result, "ult")
    Rewriter.insert_op([tid, bound, is_consumer], InsertPoint.at_start(block))
    barrier = loop.prologue.prev_op
    assert barrier is not None
    keep = {loop.prologue, k_loop, k_loop.next_op, barrier, tid, bound, is_consumer}
    if not guard_consumers(block, keep, is_consumer.result):
        return False
    if blocks:
        persist(loop, blocks - blocks % max(cluster, 1))
    boxes = box_copies(loop.copies, consumers) if tensor_copies else None
    shared = plan(loop, boxes, cluster) if boxes is not None and cluster > 1 else None
    size = 1 if shared is None else shared.size
    releases = consumers if size == 1 else consumers // WARPGROUP * size
    bars = barriers(func, loop.ahead + 1, releases, PRODUCERS if boxes is None else 1,
                    cluster=size > 1)
    tile = tile_index(loop, loop.prologue)

    steps = Block(arg_types=[IndexType()])
    it = steps.args[0]
    it.name_hint = "it"
    steps.add_op(scf.IfOp(
        is_consumer.result, [],
        Region(consumer_step(loop, bars, tile, it, pending == 1, stores, size)),
        Region(producer_step(loop, bars, tile, it, boxes,
                             () if shared is None else shared.shared, size))))
    steps.add_op(scf.YieldOp())
    zero, total, one = index(0), index(loop.trips + loop.ahead), index(1)
    skewed = scf.ForOp(zero.result, total.result, one.result, [], Region(steps))
    skewed.attributes["llmopt.role"] = StringAttr("ws_loop")
    after: list[Operation] = [zero, total, one, skewed]
    if pending == 1:  # the release of the last chunk's slot (its step waited for it)
        last = Block()
        build = Builder(last)
        s, _ = build.slot(tile, build.const(loop.trips - 1), loop.trips, loop.ahead + 1)
        release(bars, s, size, last)
        last.add_op(scf.YieldOp())
        after.append(scf.IfOp(is_consumer.result, [], Region(last)))
    if size > 1:
        after += producer_tail(loop, bars, tile, is_consumer.result)
        func.properties["cluster"] = IntegerAttr(size, i64)
    Rewriter.insert_op(after, InsertPoint.before(loop.prologue))
    for old in (k_loop, loop.prologue, barrier):
        old.detach()
        old.erase()
    return True


def _fix_block_dim(func: kernel.FuncOp, consumers: int) -> bool:
    """Every ``kernel.block_dim x`` of ``func`` becomes the constant ``consumers``: the
    kernel's code was written for a block of that many threads (a copy loop strided by
    the block, ``for p = tid; p < n; p += blockDim``, when a tile's chunks are not a whole
    number of rounds of it), and those loops must keep that stride in the larger block
    this pass makes, where the producer issues the consumers' copies in their place.
    ``True`` when there was one (the K loop's matched ops then changed)."""
    found = [o for o in func.walk() if isinstance(o, kernel.BlockDimOp) and o.dim.data == "x"]
    for op in found:
        Rewriter.replace_op(op, index(consumers))
    return bool(found)


@dataclass(frozen=True)
class WarpSpecialize(ModulePass):
    """Producer/consumer products through ``mbarrier`` slots (see the module docstring).
    Options: ``enabled`` (default true: every kernel of the form; ``false``: only those whose
    ``llmopt.schedule`` asks for two roles, ``roles = 2``, as ``async-copy`` marks a 16-bit
    product on sm_90a — ``lower-to-cuda`` runs it so unless its ``warp_specialize`` option
    is given); ``pending`` (products left in flight across a step: 0 or 1, default 0, see
    the module docstring); ``producer_registers`` and ``consumer_registers`` (each role's
    registers a thread, ``setmaxnreg``, with the body split by role: both or neither, 0 =
    off); ``tensor_copies`` (fill the slots with ``tma.load`` where every copy is a box;
    default false); ``cluster`` (blocks of a cluster sharing a box, see the module
    docstring: 0, the default, takes the kernel's knob ``multicast``; 1 none); ``arch``,
    ``persistent`` and ``max_blocks`` (at most one block a multiprocessor of ``arch``, or
    ``max_blocks``, each taking several tiles; default on)."""

    name = "warp-specialize"

    enabled: bool = True
    pending: int = 0
    producer_registers: int = 0
    consumer_registers: int = 0
    tensor_copies: bool = False
    cluster: int = 0
    arch: str = DEFAULT_ARCH
    persistent: bool = True
    max_blocks: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not 0 <= self.cluster <= MAX_CLUSTER:
            raise PassFailedException(f"warp-specialize: cluster must be 0 (the kernel's "
                                      f"knob) to {MAX_CLUSTER} blocks (got {self.cluster})")
        registers = self.producer_registers, self.consumer_registers
        if (registers[0] == 0) != (registers[1] == 0):
            raise PassFailedException("warp-specialize: producer_registers and "
                                      "consumer_registers are given together (got "
                                      f"{registers[0]} and {registers[1]})")
        blocks = (self.max_blocks or for_arch(self.arch).sms) if self.persistent else 0
        shapes: dict[str, list[int]] = {}  # kernels specialised: their new block
        for func in [f for f in op.ops if isinstance(f, kernel.FuncOp)]:
            if not (self.enabled or kernel_knobs(func).get("roles") == PRODUCER_ROLES):
                continue
            loops = [o for o in func.walk() if isinstance(o, scf.ForOp)
                     and role(o) == "k_loop"]
            consumers = func.block_shape[0]
            share = consumer_share(consumers, *registers) if registers[0] else 0
            matched = [m for m in (match(func, o) for o in loops) if m is not None]
            if len(loops) == len(matched) == 1 and _fix_block_dim(func, consumers):
                matched = [m for m in (match(func, o) for o in loops) if m is not None]
            if (len(loops) != 1 or len(matched) != 1
                    or (registers[0] and not share)
                    or not _rewrite(matched[0], self.pending, self.tensor_copies,
                                    knob(self.cluster, func, "multicast", 1), blocks)):
                continue
            if registers[0]:
                split_roles(func, consumers, registers[0], share)
            shapes[func.sym_name.data] = [consumers + PRODUCERS, 1, 1]
            func.properties["block"] = int_array(shapes[func.sym_name.data])
        for launch in op.walk():
            if isinstance(launch, kernel.LaunchOp):
                shape = shapes.get(launch.kernel.root_reference.data)
                if shape is not None:
                    launch.properties["block"] = int_array(shape)
