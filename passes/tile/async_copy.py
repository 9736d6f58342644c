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
counters are carried, the chunk fetched wrapping at the value.

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

A synchronous fill in front of the loop that shares no buffer with what lies between it
and the loop (``flash-attention``'s queries) moves behind the prologue, so its loads are in
flight beside the prologue's copies (:mod:`~llmopt.passes.tile._sink_stages`).

With ``lag = L`` (option, 0 or 1) the loop fetches ``S-1-L`` chunks ahead instead (the
prologue fills ``S-1-L``, the wait keeps ``S-2-L`` groups, the fill goes to slot
``(k0+S-1-L) mod S``) and is marked ``{llmopt.lag = L}``: a slot is refilled only ``L``
chunks after the barrier that follows its last read, which is what a product still in
flight after that barrier needs (``wgmma-fragments{pending=1}``); with fewer than ``2 + L``
slots ``L`` is 0.

**Why** a synchronous fill makes every thread wait for its global loads before it can
compute; register prefetching (``prefetch-stages``) hides one chunk but costs registers and a
second barrier. ``cp.async`` writes shared memory without passing through registers, so
``S-1`` chunks are in flight while the current one is computed, and 16-byte copies need a
quarter of the instructions of scalar loads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IntegerAttr, MemRefType, ModuleOp, StringAttr, i64
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
)
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint
from xdsl.utils.exceptions import PassFailedException

from llmopt.dialects import kernel, loop, tile
from llmopt.passes._rewrite import KeepLocation
from llmopt.passes.tile._access import UNROLL, block_threads
from llmopt.passes.tile._schedule import (
    DEFAULT_STAGES,
    default_carry,
    knob,
    limits,
    padded_bytes,
    smem_budget,
)
from llmopt.passes.tile._sink_stages import sink_stages
from llmopt.passes.tile.prefetch_stages import Fill, remap, staged_fills
from llmopt.passes.tile.stage_inputs import addends, block_level_loop, const_int

LAG_ATTR = "llmopt.lag"
"""On a pipelined K loop: the slots it keeps for chunks whose readers may still be in flight
(``async-copy{lag=1}``): the tiles a chunk's products read are refilled two chunks later."""


def vector_width(f: Fill) -> int:
    """The most elements one copy of the fill may move (see the module docstring): a copy
    moves 4, 8 or 16 bytes; 0 when not even a 4-byte copy is possible."""
    tile_typ = f.store.buffer.type
    src_typ = f.load.buffer.type
    assert isinstance(tile_typ, MemRefType) and isinstance(src_typ, MemRefType)
    elem = tile_typ.element_type.bitwidth // 8 if hasattr(  # type: ignore[attr-defined]
        tile_typ.element_type, "bitwidth") else 0
    widths = [nbytes // elem for nbytes in (16, 8, 4) if elem and nbytes % elem == 0]
    if not widths:
        return 0
    if widths[-1] == 1:
        fallback = 1
    else:
        fallback = 0  # narrower elements need several per copy: only along a row
    shape = f.forall.shape
    last = f.forall.ivs[-1]
    smap = f.store.map.data
    spos = [i for i, v in enumerate(f.store.indices) if v is last]
    gpos = [i for i, v in enumerate(f.load.indices) if v is last]
    if len(spos) != 1 or len(gpos) != 1:
        return fallback
    if smap.results[-1] != AffineDimExpr(spos[0]) or tile_typ.get_shape()[-1] != shape[-1]:
        return fallback
    if any(spos[0] in r.used_dims() for r in smap.results[:-1]):
        return fallback
    gmap = f.load.map.data
    if any(gpos[0] in r.used_dims() for r in gmap.results[:-1]):
        return fallback
    ivs = {i for i, v in enumerate(f.load.indices) if v in f.forall.ivs}
    fastest = [t for t in addends(gmap.results[-1]) if gpos[0] in t.used_dims()]
    rest = [t for t in addends(gmap.results[-1]) if gpos[0] not in t.used_dims()]
    if fastest != [AffineDimExpr(gpos[0])] or any(ivs & t.used_dims() for t in rest):
        return fallback
    step = 0
    for term in rest:
        step = math.gcd(step, multiple_of(term))
    for width in widths:
        if (shape[-1] % width == 0 and src_typ.get_shape()[-1] % width == 0
                and step % width == 0):
            return width
    return fallback


def multiple_of(expr: AffineExpr) -> int:
    """A number every value of ``expr`` is a multiple of (0: ``expr`` is 0): the constant,
    products' factors, the gcd over sums; divisions and remainders count as 1."""
    if isinstance(expr, AffineConstantExpr):
        return abs(expr.value)
    if isinstance(expr, AffineBinaryOpExpr):
        if expr.kind is AffineBinaryOpKind.Add:
            return math.gcd(multiple_of(expr.lhs), multiple_of(expr.rhs))
        if expr.kind is AffineBinaryOpKind.Mul:
            return multiple_of(expr.lhs) * multiple_of(expr.rhs)
    return 1


def asked_pad(alloc: Operation) -> int | None:
    """The padding a tile asks ``pad-shared`` for (``llmopt.pad``), ``None`` when it asks
    none (``pad-shared`` then pads rows by its default, 1)."""
    pad = alloc.attributes.get("llmopt.pad")
    return pad.value.data if isinstance(pad, IntegerAttr) else None


def slot_pad(alloc: Operation, width: int) -> int | None:
    """The padding the slots of a tile filled ``width`` elements at a time ask for: the
    tile's own when it keeps the rows' alignment (a multiple of ``width``; attention's V
    tile asks for 8), else ``width``."""
    asked = asked_pad(alloc)
    if width > 1 and not (asked and asked % width == 0):
        return width
    return asked


def tile_bytes(fills: list[Fill], widths: list[int], stages: int) -> int:
    """Shared memory of ``stages`` slots of every tile, rows padded as ``pad-shared`` will."""
    total = 0
    for f, width in zip(fills, widths, strict=True):
        typ = f.store.buffer.type
        assert isinstance(typ, MemRefType)
        shape = list(typ.get_shape())
        pad = 0
        if len(shape) > 1 and shape[-1] % 2 == 0:
            asked = slot_pad(f.store.buffer.owner, width)  # type: ignore[arg-type]
            pad = 1 if asked is None else asked
        elem = typ.element_type.bitwidth // 8  # type: ignore[attr-defined]
        total += stages * padded_bytes(shape, pad, elem)
    return total


def other_tiles_bytes(op: scf.ForOp, tiles: set[SSAValue]) -> int:
    """Shared memory of the block's tiles besides ``tiles`` (the ones ``op`` fills), rows
    padded as ``pad-shared`` will: what the slots must leave room for."""
    blocks = op.parent_op()
    assert blocks is not None
    total = 0
    for alloc in blocks.body.block.ops:
        if (isinstance(alloc, tile.AllocOp) and alloc.space.data == "shared"
                and alloc.result not in tiles):
            typ = alloc.result.type
            assert isinstance(typ, MemRefType)
            shape = list(typ.get_shape())
            asked = asked_pad(alloc)
            pad = (1 if asked is None else asked) if len(shape) > 1 and shape[-1] % 2 == 0 else 0
            total += padded_bytes(shape, pad, typ.element_type.bitwidth // 8)  # type: ignore[attr-defined]
    return total


def static_bound(value: SSAValue) -> int | None:
    """A constant that a loop bound ``value`` never exceeds: the constant operand of an
    ``arith.minui`` (a causal attention's loop over key blocks stops at the diagonal's, at
    most at the last), else ``None``."""
    owner = value.owner
    if isinstance(owner, arith.MinUIOp):
        known = [c for c in (const_int(owner.lhs), const_int(owner.rhs)) if c is not None]
        return min(known) if known else None
    return None


@dataclass
class AsyncKLoop(RewritePattern):
    """Pipeline one staged K loop with asynchronous copies (see the module docstring)."""

    stages: int
    arch: str
    carry: int
    lag: int = 0
    alone: int = 0
    sink: bool = True

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: scf.ForOp, rewriter: PatternRewriter) -> None:
        kern = block_level_loop(op)
        if kern is None or "llmopt.prefetch" in op.attributes:
            return
        stages = knob(self.stages, kern, "stages", DEFAULT_STAGES)
        n = const_int(op.ub)
        dynamic = n is None
        if dynamic:
            n = static_bound(op.ub)
        if (stages < 2 or const_int(op.lb) != 0 or const_int(op.step) != 1 or not n or n < 2
                or (dynamic and op.iter_args)):
            return
        found = staged_fills(op)
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
        budget = gpu.max_smem if self.alone else smem_budget(gpu)
        if others + tile_bytes(found, widths, 1) > budget:
            budget = gpu.max_smem  # one block a multiprocessor already: all of it is ours
        while stages > 2 and others + tile_bytes(found, widths, stages) > budget:
            stages -= 1
        if others + tile_bytes(found, widths, stages) > budget:
            return
        lag = self.lag if stages >= 2 + self.lag else 0
        ahead_by = stages - 1 - lag  # chunks fetched ahead of the one computed
        slots = {f.store.buffer: self._slotted(f, width, stages, rewriter)
                 for f, width in zip(found, widths, strict=True)}
        first, computing = body[0], body[len(found)]
        # A loop that already carries values keeps the computed form (its yield is not ours);
        # a loop whose trip count is a value carries the counters (wrapped at that value).
        if not op.iter_args and (dynamic or knob(self.carry, kern, "carry",
                                                 default_carry(kern)) == 1):
            op, (k0, read, write, chunk) = self._carried(op, stages, ahead_by, n,
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
        self._read_slots(op, slots, read, read_slot, rewriter)

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
        for f, width in zip(found, widths, strict=True):
            pro.add_op(self._fill(f, width, slots[f.store.buffer], k0, p, AffineDimExpr(0),
                                  p, AffineDimExpr(0)))
        pro.add_ops([tile.AsyncCommitOp(), scf.YieldOp()])
        prologue = scf.ForOp(c0.result, cs.result, c1.result, [], Region(pro))
        prologue.attributes |= UNROLL | {"llmopt.role": StringAttr("prologue")}
        rewriter.insert(prologue, before)
        if self.sink:  # a fill before the prologue (flash attention's queries) after it
            sink_stages(op)

        # Steady state: wait for chunk k0, then fetch chunk k0 + S-1-L.
        rewriter.insert([tile.AsyncWaitOp(ahead_by - 1), kernel.BarrierOp()],
                        InsertPoint.before(first))
        for f, width in zip(found, widths, strict=True):
            rewriter.insert(self._fill(f, width, slots[f.store.buffer], k0, fetch_of, ahead,
                                       slot_of, ahead_slot), InsertPoint.before(f.forall))
            rewriter.erase(f.forall)
        rewriter.insert(tile.AsyncCommitOp(), InsertPoint.before(computing))
        rewriter.insert(tile.AsyncWaitOp(0), InsertPoint.after(op))
        for old in slots:
            rewriter.erase(old.owner)  # type: ignore[arg-type]
        op.attributes["llmopt.prefetch"] = StringAttr(f"async{stages}")
        if lag:
            op.attributes[LAG_ATTR] = IntegerAttr(lag, i64)

    @staticmethod
    def _slotted(f: Fill, width: int, stages: int, rewriter: PatternRewriter) -> SSAValue:
        """The ``[S, …]`` buffer replacing the fill's tile, inserted beside it."""
        old = f.store.buffer.owner
        assert isinstance(old, tile.AllocOp)
        typ = old.result.type
        assert isinstance(typ, MemRefType)
        new = tile.AllocOp("shared", MemRefType(typ.element_type,
                                                [stages, *typ.get_shape()]))
        new.attributes |= old.attributes
        pad = slot_pad(old, width)
        if pad is not None:  # rows keep their alignment
            new.attributes["llmopt.pad"] = IntegerAttr(pad, i64)
        new.result.name_hint = old.result.name_hint
        rewriter.insert(new, InsertPoint.before(old))
        return new.result

    @staticmethod
    def _carried(op: scf.ForOp, stages: int, ahead_by: int, n: int, trips: SSAValue | None,
                 rewriter: PatternRewriter
                 ) -> tuple[scf.ForOp, tuple[SSAValue, SSAValue, SSAValue, SSAValue]]:
        """``op`` rebuilt with three index ``iter_args`` — the slot read (``k0 mod S``), the
        slot filled (``(k0+A) mod S``) and the chunk fetched (``(k0+A) mod n``), ``A`` =
        ``ahead_by`` — each
        stepped by one and wrapped with a compare and select at the end of the body. A loop
        whose trip count is a value ``trips`` (at most ``n``) wraps the chunk fetched at
        ``trips`` instead: it fetches only chunks it has, and again those it read first."""
        old = op.body.block
        k0 = old.args[0]
        typ = k0.type
        inits = [arith.ConstantOp(IntegerAttr(v, typ))
                 for v in (0, ahead_by, ahead_by % n)]
        rewriter.insert(inits, InsertPoint.before(op))
        block = Block(arg_types=[typ] * 4)
        for arg, name in zip(block.args, (k0.name_hint, "slot", "fill_slot", "fetch"),
                             strict=True):
            arg.name_hint = name
        k0.replace_all_uses_with(block.args[0])
        yield_op = old.last_op
        assert isinstance(yield_op, scf.YieldOp)
        for moved in list(old.ops):
            if moved is not yield_op:
                moved.detach()
                block.add_op(moved)
        zero, one = (arith.ConstantOp(IntegerAttr(v, typ)) for v in (0, 1))
        block.add_ops([zero, one])
        stepped: list[SSAValue] = []
        fetched = n if trips is None else trips
        for arg, bound in zip(block.args[1:], (stages, stages, fetched), strict=True):
            ops: list[Operation] = []
            limit = bound
            if isinstance(bound, int):
                ops.append(arith.ConstantOp(IntegerAttr(bound, typ)))
                limit = ops[-1].results[0]
            nxt = arith.AddiOp(arg, one)
            inside = arith.CmpiOp(nxt, limit, "slt")
            wrapped = arith.SelectOp(inside, nxt, zero)
            block.add_ops([*ops, nxt, inside, wrapped])
            stepped.append(wrapped.result)
        block.add_op(scf.YieldOp(*stepped))
        new = scf.ForOp(op.lb, op.ub, op.step, [i.result for i in inits], Region(block))
        new.attributes |= op.attributes
        rewriter.replace(op, new, [])
        return new, (block.args[0], block.args[1], block.args[2], block.args[3])

    @staticmethod
    def _read_slots(op: scf.ForOp, slots: dict[SSAValue, SSAValue], slot_of: SSAValue,
                    slot: AffineExpr, rewriter: PatternRewriter) -> None:
        """Point the chunk loop's reads of each tile at slot ``slot`` (over ``slot_of``)."""
        for load in list(op.walk()):
            if not isinstance(load, loop.LoadOp) or load.buffer not in slots:
                continue
            operands = [*load.indices, slot_of]
            amap = load.map.data
            shifted = slot.replace_dims_and_symbols([AffineDimExpr(len(operands) - 1)], [])
            new_map = AffineMap(len(operands), 0, (shifted, *amap.results))
            rewriter.replace(load, loop.LoadOp(slots[load.buffer], new_map, operands))

    @staticmethod
    def _fill(f: Fill, width: int, dst: SSAValue, k0: SSAValue, chunk_of: SSAValue,
              chunk: AffineExpr, slot_of: SSAValue, slot: AffineExpr) -> tile.ForallOp:
        """A forall of async copies moving chunk ``chunk`` (over ``chunk_of``) into slot
        ``slot`` (over ``slot_of``); ``k0`` is the chunk index the old fill used."""
        shape = [*f.forall.shape[:-1], f.forall.shape[-1] // width]
        forall, ivs = block_threads(shape, [f"c{i}" for i in range(len(shape))])
        new_operands: list[SSAValue] = [chunk_of, *ivs]
        if slot_of is not chunk_of:
            new_operands.append(slot_of)
            slot = slot.replace_dims_and_symbols([AffineDimExpr(len(new_operands) - 1)], [])
        replace: dict[SSAValue, AffineExpr] = {
            old: AffineDimExpr(1 + i) for i, old in enumerate(f.forall.ivs)}
        replace[f.forall.ivs[-1]] = AffineDimExpr(len(shape)) * width
        replace[k0] = chunk
        gmap = remap(f.load.map.data, list(f.load.indices), replace, new_operands)
        inner = remap(f.store.map.data, list(f.store.indices), replace, new_operands)
        assert gmap.num_dims == inner.num_dims == len(new_operands)
        dst_map = AffineMap(inner.num_dims, 0, (slot, *inner.results))
        forall.body.block.add_op(tile.AsyncCopyOp(f.load.buffer, gmap, dst, dst_map,
                                                  new_operands, width, f.load.clamped))
        forall.attributes["llmopt.role"] = StringAttr("stage")
        return forall


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
    (default ``true``: a synchronous fill in front of the loop moves behind the prologue,
    see the module docstring)."""

    name = "async-copy"

    stages: int = 0
    arch: str = "sm_90"
    carry: int = 0
    lag: int = 0
    alone: int = 0
    sink: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.stages < 0:
            raise PassFailedException(f"async-copy: stages must be ≥ 0, got {self.stages}")
        PatternRewriteWalker(KeepLocation(AsyncKLoop(self.stages, self.arch, self.carry,
                                                     self.lag, self.alone, self.sink)),
                             apply_recursively=False).rewrite_module(op)
