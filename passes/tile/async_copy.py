"""``async-copy``: the shared tiles of a K loop are filled by ``cp.async``, several chunks ahead.

**Matches** the K loop that ``stage-inputs`` makes — ``scf.for %k0 = 0 to n`` directly in a
``tile.forall over blocks``, its body the forall(s) filling shared tiles (``llmopt.role =
"stage"``: a global load stored into the tile) followed by the chunk loop — and any loop of
that place whose fills are followed by other steps that read the tiles and write none of
them (``flash-attention``'s loop over key blocks: scores, softmax, ``P·V``), when its
``stages`` knob ``S`` is at least 2 (pass option, else the kernel's ``llmopt.schedule``,
else 3), ``n ≥ 2``, and ``S`` copies of the tiles (rows padded as ``pad-shared`` will) fit,
beside the block's other shared tiles, the shared-memory budget of a block (half of what one
may use, so two fit a multiprocessor: 113 KiB on sm_90; all of it when the block's tiles,
one slot each, already exceed that half, so the block runs alone either way, or with option
``alone``; ``kernel-to-cuda`` makes more than 48 KiB dynamic); ``S`` is lowered to what
fits, down to 2. The bound ``n`` may also be a value ``arith.minui(x, N)`` (a causal
attention's key blocks end at the diagonal's): ``S`` is then at most ``N + 1``, and the
counters are carried, the chunk fetched wrapping at the value. Such a loop's fills are
guarded by that value: the prologue's fill of chunk ``p`` by ``p < n`` and a step's by
``k0 + S-1-L < n`` (a uniform branch), so a loop shorter than its slots — a split of a decode
step's keys with one key block, or none — copies no chunk it will not read, and the last
steps fetch nothing. Why: unguarded, a block of a decode step whose split of the keys is
empty fills its slots with rows clamped into the cache, every one of them the cache's last
row, the same few lines for hundreds of blocks at once.

**Produces** ``S`` slots per tile (``tile.alloc shared`` ``[S, …]``, the chunk loop reading
slot ``k0 mod S``) and fills made of ``tile.async_copy``: each copy moves ``V`` consecutive
elements, ``V`` the widest of 4, 2, 1 that the tile allows (its innermost dimension is the
global buffer's innermost, walked by the fill's fastest index with coefficient 1, and every
row start is a multiple of ``V`` elements — 16-byte copies for ``f32`` with ``V = 4``; such
tiles ask ``pad-shared`` for ``V`` words of padding so their rows stay aligned, unless they
already ask for a multiple of ``V``). The loop becomes::

    kernel.barrier                      // the previous block point's readers are done
    scf.for %p = 0 to S-1 { fill(chunk p → slot p); tile.async_commit }
    scf.for %k0 = 0 to n iter_args(%slot = 0, %fill_slot = S-1, %fetch = (S-1) mod n) {
      tile.async_wait S-2               // this thread's copies of chunk k0 have landed
      kernel.barrier                    // everyone's have; slot (k0-1) mod S is free
      fill(chunk %fetch → slot %fill_slot); tile.async_commit
      <chunk loop (or the other steps) on slot %slot>
      scf.yield wrap(%slot + 1, S), wrap(%fill_slot + 1, S), wrap(%fetch + 1, n)
    }
    tile.async_wait 0

where ``wrap(x, m) = select(x < m, x, 0)``: the three counters are ``k0 mod S``, ``(k0+S-1)
mod S`` and ``(k0+S-1) mod n``, carried instead of computed from ``k0`` each chunk (knob
``carry``: 1 carried, 2 computed with ``mod`` and ``floordiv``; by default carried in
kernels with one accumulator tile, see ``_schedule.default_carry``). A 64-bit division by a
constant is a chain of wide multiplies on a GPU; carried, the K loop body (one chunk) of
TinyLlama's down projection (seq 512) shrinks from 1239 to 1211 instructions (1024 FFMA) in
NVRTC's SASS, 1187 with ``kernel-to-cuda{index_bitwidth=32}`` (whose range analysis bounds
the counters by their wrap). The last ``S-1`` iterations fetch chunks ``0 … S-2`` again into
slots nobody reads any more (in bounds, no branch in the loop). An async copy's write is not
seen by ``tile-to-kernel``'s barrier placement: this pass orders it with the waits and the
two barriers above, one barrier per chunk instead of two.

With ``sink`` (off by default: a decode step measured slower with it), a synchronous fill in
front of the loop that shares no buffer with what lies between it and the loop
(``flash-attention``'s queries) moves behind the prologue, so its loads are in flight
beside the prologue's copies (:mod:`~llmopt.passes.tile._sink_stages`).

With ``lag = L`` (option, 0 or 1) the loop fetches ``S-1-L`` chunks ahead instead (the
prologue fills ``S-1-L``, the wait keeps ``S-2-L`` groups, the fill goes to slot
``(k0+S-1-L) mod S``) and is marked ``{llmopt.lag = L}``: a slot is refilled only ``L``
chunks after the barrier that follows its last read, which is what a product still in
flight after that barrier needs (``wgmma-fragments{pending=1}``); with fewer than ``2 + L``
slots ``L`` is 0.

With ``roles = 2`` (option or the kernel's knob; by default a 16-bit tensor-core product on
sm_90a whose loop has a static count of at least eight chunks, of static or runtime rows:
:func:`~llmopt.passes.tile._schedule.default_roles`) the product is one whose copies a
producer warpgroup will issue (``warp-specialize`` splits every kernel so marked): one
block runs on a multiprocessor, so its slots may take all of the shared memory (four by
default), and the slots' counters are carried, the form ``warp-specialize`` takes. The
kernel's ``llmopt.schedule`` records ``roles = 2``.

**Why** a synchronous fill makes every thread wait for its global loads before it can
compute; register prefetching (``prefetch-stages``) hides one chunk but costs registers and a
second barrier. ``cp.async`` writes shared memory without passing through registers, so
``S-1`` chunks are in flight while the current one is computed, and 16-byte copies need a
quarter of the instructions of scalar loads.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.ir import Block, Region
from xdsl.ir.affine import AffineDimExpr, AffineExpr
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint
from xdsl.utils.exceptions import PassFailedException

from llmopt.dialects import kernel, tile
from llmopt.passes._ir import element_bits
from llmopt.passes._rewrite import KeepLocation
from llmopt.passes.tile._access import UNROLL
from llmopt.passes.tile._async_build import async_fill, carried, read_slots, slotted
from llmopt.passes.tile._async_sizing import (
    other_tiles_bytes,
    static_bound,
    tile_bytes,
    vector_width,
)
from llmopt.passes.tile._schedule import (
    DEFAULT_STAGES,
    PRODUCER_ROLES,
    PRODUCER_STAGES,
    default_carry,
    default_roles,
    knob,
    set_knob,
)
from llmopt.passes.tile._sink_stages import sink_stages
from llmopt.passes.tile.prefetch_stages import staged_fills
from llmopt.passes.tile.stage_inputs import block_level_loop, const_int
from llmopt.target import for_arch as limits
from llmopt.target import smem_budget

LAG_ATTR = "llmopt.lag"
"""On a pipelined K loop: the slots it keeps for chunks whose readers may still be in flight
(``async-copy{lag=1}``): the tiles a chunk's products read are refilled two chunks later."""


@dataclass
class AsyncKLoop(RewritePattern):
    """Pipeline one staged K loop with asynchronous copies (see the module docstring)."""

    stages: int
    arch: str
    carry: int
    lag: int = 0
    alone: int = 0
    sink: bool = False
    roles: int = 0

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: scf.ForOp, rewriter: PatternRewriter) -> None:
        kern = block_level_loop(op)
        if kern is None or "llmopt.prefetch" in op.attributes:
            return
        n = const_int(op.ub)
        dynamic = n is None
        if dynamic:
            n = static_bound(op.ub)
        found = staged_fills(op)
        roles = knob(self.roles, kern, "roles", default_roles(
            kern, self.arch, [element_bits(f.store.buffer) for f in found or []],
            not dynamic, n or 0))
        producer = roles == PRODUCER_ROLES
        stages = knob(self.stages, kern, "stages",
                      PRODUCER_STAGES if producer else DEFAULT_STAGES)
        if (stages < 2 or const_int(op.lb) != 0 or const_int(op.step) != 1 or not n or n < 2
                or (dynamic and op.iter_args)):
            return
        if found is None or any(f.store.buffer.owner.parent_op() is not op.parent_op()
                                for f in found):
            return
        if any(not op.is_ancestor(use.operation) for f in found for use in f.store.buffer.uses):
            return  # a tile another loop stages into too: its slots would leave that loop
        body = list(op.body.block.ops)
        k0 = op.body.block.args[0]
        widths = [vector_width(f) for f in found]
        if not all(widths):
            return
        stages = min(stages, n + 1)
        gpu = limits(self.arch)
        others = other_tiles_bytes(op, {f.store.buffer for f in found})
        budget = gpu.max_smem if self.alone or producer else smem_budget(gpu)
        if others + tile_bytes(found, widths, 1) > budget:
            budget = gpu.max_smem  # one block a multiprocessor already: all of it is ours
        while stages > 2 and others + tile_bytes(found, widths, stages) > budget:
            stages -= 1
        if others + tile_bytes(found, widths, stages) > budget:
            return
        lag = self.lag if stages >= 2 + self.lag else 0
        ahead_by = stages - 1 - lag  # chunks fetched ahead of the one computed
        slots = {f.store.buffer: slotted(f, width, stages, rewriter)
                 for f, width in zip(found, widths, strict=True)}
        first, computing = body[0], body[len(found)]
        # A loop that already carries values keeps the computed form (its yield is not ours);
        # a loop whose trip count is a value carries the counters (wrapped at that value).
        carry = knob(self.carry, kern, "carry", 1 if producer else default_carry(kern))
        if not op.iter_args and (dynamic or carry == 1):
            op, (k0, read, write, chunk) = carried(op, stages, ahead_by, n,
                                                   op.ub if dynamic else None, rewriter)
            slot_of, fetch_of = write, chunk
            read_slot: AffineExpr = AffineDimExpr(0)
            ahead: AffineExpr = AffineDimExpr(0)
            ahead_slot: AffineExpr = AffineDimExpr(0)
        else:
            read = slot_of = fetch_of = k0
            read_slot = AffineDimExpr(0) % stages
            ahead = (AffineDimExpr(0) + ahead_by) % n
            ahead_slot = (AffineDimExpr(0) + ahead_by) % stages
        read_slots(op, slots, read, read_slot, rewriter)

        # Prologue: chunks 0 … S-2-L into slots 0 … S-2-L.
        before = InsertPoint.before(op)
        c0 = arith.ConstantOp(IntegerAttr(0, k0.type))
        c1 = arith.ConstantOp(IntegerAttr(1, k0.type))
        cs = arith.ConstantOp(IntegerAttr(ahead_by, k0.type))
        rewriter.insert([c0, c1, cs], before)
        rewriter.insert(kernel.BarrierOp(), before)
        pro = Block(arg_types=[k0.type])
        p = pro.args[0]
        p.name_hint = "p"
        fills = [async_fill(f, width, slots[f.store.buffer], k0, p, AffineDimExpr(0), p,
                            AffineDimExpr(0)) for f, width in zip(found, widths, strict=True)]
        if dynamic:  # only the chunks the loop has: a short loop's others are never read
            has = arith.CmpiOp(p, op.ub, "slt")
            pro.add_ops([has, scf.IfOp(has.result, [], [*fills, scf.YieldOp()])])
        else:
            pro.add_ops(fills)
        pro.add_ops([tile.AsyncCommitOp(), scf.YieldOp()])
        prologue = scf.ForOp(c0.result, cs.result, c1.result, [], Region(pro))
        prologue.attributes |= UNROLL | {"llmopt.role": StringAttr("prologue")}
        rewriter.insert(prologue, before)
        if self.sink:  # a fill before the prologue (flash attention's queries) after it
            sink_stages(op)

        # Steady state: wait for chunk k0, then fetch chunk k0 + S-1-L.
        rewriter.insert([tile.AsyncWaitOp(ahead_by - 1), kernel.BarrierOp()],
                        InsertPoint.before(first))
        fills = [async_fill(f, width, slots[f.store.buffer], k0, fetch_of, ahead, slot_of,
                            ahead_slot) for f, width in zip(found, widths, strict=True)]
        if dynamic:  # the last S-1-L steps fetch nothing: their chunks were read already
            chunk = arith.AddiOp(k0, cs.result)
            fresh = arith.CmpiOp(chunk.result, op.ub, "slt")
            fills = [chunk, fresh, scf.IfOp(fresh.result, [], [*fills, scf.YieldOp()])]
        rewriter.insert(fills, InsertPoint.before(found[0].forall))
        for f in found:
            rewriter.erase(f.forall)
        rewriter.insert(tile.AsyncCommitOp(), InsertPoint.before(computing))
        rewriter.insert(tile.AsyncWaitOp(0), InsertPoint.after(op))
        for old in slots:
            rewriter.erase(old.owner)  # type: ignore[arg-type]
        op.attributes["llmopt.prefetch"] = StringAttr(f"async{stages}")
        if producer:
            set_knob(kern, "roles", PRODUCER_ROLES)
        if lag:
            op.attributes[LAG_ATTR] = IntegerAttr(lag, i64)


@dataclass(frozen=True)
class AsyncCopy(ModulePass):
    """Fill staged tiles with asynchronous copies, several chunks ahead (see the module
    docstring). Options: ``stages`` (slots per tile; 0 = the kernel's ``llmopt.schedule`` or
    3; 1 = off), ``arch`` (whose shared-memory limit the slots must fit), ``carry`` (1: the
    slots and the fetched chunk are loop-carried counters; 2: recomputed from ``k0`` with
    ``mod`` and ``floordiv`` every chunk; 0 = the kernel's ``llmopt.schedule``, else
    :func:`~llmopt.passes.tile._schedule.default_carry`), ``lag`` (slots kept for chunks
    whose readers may still be in flight: 1 fetches ``S-2`` chunks ahead instead of ``S-1``,
    with at least three slots, for ``wgmma-fragments{pending=1}``; 0, the default: none),
    ``alone`` (1: the slots may take all the shared memory a block may use, the block then
    running alone on its multiprocessor; 0, the default: half, so two blocks fit), ``sink``
    (``true``: a synchronous fill in front of the loop moves behind the prologue, see the
    module docstring; default ``false``), ``roles`` (2: a producer warpgroup will issue the
    copies — ``warp-specialize`` splits every kernel marked so — and the slots take all the
    shared memory, four of them unless ``stages`` says otherwise, their counters carried
    unless ``carry`` says otherwise (the form ``warp-specialize`` takes); 1: every thread copies and
    computes; 0 = the kernel's ``llmopt.schedule``, else
    :func:`~llmopt.passes.tile._schedule.default_roles`)."""

    name = "async-copy"

    stages: int = 0
    arch: str = "sm_90"
    carry: int = 0
    lag: int = 0
    alone: int = 0
    sink: bool = False
    roles: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.stages < 0:
            raise PassFailedException(f"async-copy: stages must be ≥ 0, got {self.stages}")
        PatternRewriteWalker(KeepLocation(AsyncKLoop(self.stages, self.arch, self.carry,
                                                     self.lag, self.alone, self.sink,
                                                     self.roles)),
                             apply_recursively=False).rewrite_module(op)
