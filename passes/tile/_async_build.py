"""The IR ``async-copy`` builds for a pipelined loop: slotted tiles, carried counters, fills.

``S``-slot ``tile.alloc shared`` buffers replacing the staged tiles, the loop rebuilt with
its three wrapped counters (slot read, slot filled, chunk fetched), the chunk loop's reads
pointed at a slot, and the foralls of ``tile.async_copy`` that fill a slot (see
:mod:`llmopt.passes.tile.async_copy`).
"""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IntegerAttr, MemRefType, StringAttr, i64
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.ir.affine import AffineDimExpr, AffineExpr, AffineMap
from xdsl.pattern_rewriter import PatternRewriter
from xdsl.rewriter import InsertPoint

from llmopt.dialects import loop, tile
from llmopt.passes.tile._access import block_threads
from llmopt.passes.tile._async_sizing import slot_pad
from llmopt.passes.tile.prefetch_stages import Fill, remap


def slotted(f: Fill, width: int, stages: int, rewriter: PatternRewriter) -> SSAValue:
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


def carried(op: scf.ForOp, stages: int, ahead_by: int, n: int, trips: SSAValue | None,
            rewriter: PatternRewriter
            ) -> tuple[scf.ForOp, tuple[SSAValue, SSAValue, SSAValue, SSAValue]]:
    """``op`` rebuilt with three index ``iter_args`` — the slot read (``k0 mod S``), the
    slot filled (``(k0+A) mod S``) and the chunk fetched (``(k0+A) mod n``), ``A`` =
    ``ahead_by`` — each stepped by one and wrapped with a compare and select at the end of the
    body. A loop whose trip count is a value ``trips`` (at most ``n``) wraps the chunk fetched at
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


def read_slots(op: scf.ForOp, slots: dict[SSAValue, SSAValue], slot_of: SSAValue,
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


def async_fill(f: Fill, width: int, dst: SSAValue, k0: SSAValue, chunk_of: SSAValue,
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
