"""The rewrite of ``vector-fragments`` (:mod:`llmopt.passes.tile.vector_fragments`): the
fragments' registers, the ``%kq`` loop around the forall, the unrolled ``%kv`` loop inside it
and the copies that fill the fragments (:func:`rewrite_chunk_loop`); the move of the ``%kv``
loop inside the micro-tile's loops (:func:`sink_kv_loop`, knob ``kv_order=2``); and
:func:`outer_chunk_loop`, shared with ``mma-fragments``."""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, MemRefType
from xdsl.ir import Block, Operation, SSAValue
from xdsl.ir.affine import AffineConstantExpr, AffineDimExpr, AffineMap
from xdsl.pattern_rewriter import PatternRewriter
from xdsl.rewriter import InsertPoint

from llmopt.dialects import loop, tile
from llmopt.passes.tile._access import UNROLL, counted_for
from llmopt.passes.tile._vector_match import Fragment


def _index(value: int) -> arith.ConstantOp:
    """An ``index`` constant."""
    return arith.ConstantOp(IntegerAttr(value, IndexType()))


def rewrite_chunk_loop(chunk: scf.ForOp, forall: tile.ForallOp, pre: list[Operation],
                       fragments: list[Fragment], extent: int, width: int,
                       rewriter: PatternRewriter) -> scf.ForOp:
    """Build ``scf.for %kq { forall { copies; scf.for %kv { body } } }`` in place of
    ``chunk``; returns the ``%kv`` loop."""
    kk = chunk.body.block.args[0]
    allocs = _fragment_registers(chunk, forall, fragments, width, rewriter)
    kq = outer_chunk_loop(chunk, forall, extent // width, "kq", rewriter)
    kv_loop, mapping = _inner_loop(forall, kk, kq, pre, width)
    kv = kv_loop.body.block.args[0]
    first = kv_loop.lb.owner  # the copies go before the kv loop's bounds
    assert isinstance(first, Operation)
    for fragment, alloc in zip(fragments, allocs, strict=True):
        _copy_nest(fragment, alloc.result, forall, kk, kq, width, first)
        for load in fragment.loads:
            indices = [*forall.ivs, *(f.body.block.args[0] for f in fragment.loops), kv]
            rewriter.replace(load, loop.LoadOp(alloc.result, AffineMap.identity(len(indices)),
                                               indices))
    for old, new in mapping.items():
        old.replace_uses_with_if(new, lambda use: kv_loop.is_ancestor(use.operation))
    rewriter.erase(chunk)
    return kv_loop


def _perfect_nest(op: Operation) -> list[loop.ForOp]:
    """The ``loop.for`` ops of the perfect nest rooted at ``op`` (each body holds nothing but
    the next loop; ``loop.for`` has no terminator), outermost first; empty when ``op`` is not
    a ``loop.for``."""
    nest: list[loop.ForOp] = []
    while isinstance(op, loop.ForOp):
        nest.append(op)
        inner = list(op.body.block.ops)
        if len(inner) != 1:
            break
        op = inner[0]
    return nest


def _owns_its_elements(body: Block, ivs: list[SSAValue]) -> bool:
    """Whether every iteration of a nest with induction variables ``ivs`` touches its own
    elements of what ``body`` writes: only loads, stores and pure arithmetic, every store into
    a ``tile.alloc registers`` buffer at indices that include every ``iv``, and every load of a
    stored buffer at the indices of its stores. Then the nest's iterations commute with a loop
    around them."""
    stored: dict[SSAValue, tuple[SSAValue, ...]] = {}
    for inner in body.walk():
        if isinstance(inner, loop.StoreOp):
            owner = inner.buffer.owner
            if not (isinstance(owner, tile.AllocOp) and owner.space.data == "registers"):
                return False
            indices = tuple(inner.indices)
            if not all(any(iv is v for v in indices) for iv in ivs):
                return False
            if stored.setdefault(inner.buffer, indices) != indices:
                return False
        elif not (isinstance(inner, loop.LoadOp)
                  or (inner.dialect_name() in ("arith", "math") and not inner.regions)):
            return False
    return all(tuple(load.indices) == stored[load.buffer] for load in body.walk()
               if isinstance(load, loop.LoadOp) and load.buffer in stored)


def sink_kv_loop(kv_loop: scf.ForOp) -> None:
    """Move ``kv_loop`` inside the micro-tile's perfect ``loop.for`` nest that its body ends
    with (``for mi { for nj { for kv { … } } }`` instead of ``for kv { for mi { for nj {
    … } } }``) when each ``(mi, nj)`` iteration owns the accumulators it updates
    (:func:`_owns_its_elements`); each accumulator then takes its ``V`` multiply-adds in
    the same order, so the results are bit-identical; otherwise nothing changes.

    Everything is unrolled either way; the order is what NVRTC's scheduler and register
    allocator start from, and neither order wins everywhere (see
    :class:`~llmopt.passes.tile.vector_fragments.VectorFragments`)."""
    kv_body = kv_loop.body.block
    yield_op = kv_body.last_op
    assert isinstance(yield_op, scf.YieldOp)
    ops = list(kv_body.ops)[:-1]
    nest = _perfect_nest(ops[-1]) if ops else []
    if not nest or any(not isinstance(o, arith.ConstantOp | arith.AddiOp | arith.MuliOp)
                       for o in ops[:-1]):
        return
    innermost = nest[-1].body.block
    if not _owns_its_elements(innermost, [f.body.block.args[0] for f in nest]):
        return
    block = kv_loop.parent_block()
    assert block is not None
    moved = list(innermost.ops)
    nest[0].detach()
    block.insert_op_before(nest[0], kv_loop)
    kv_loop.detach()
    innermost.add_op(kv_loop)
    for o in moved:
        o.detach()
        kv_body.insert_op_before(o, yield_op)


def _fragment_registers(chunk: scf.ForOp, forall: tile.ForallOp, fragments: list[Fragment],
                        width: int, rewriter: PatternRewriter) -> list[tile.AllocOp]:
    """One ``tile.alloc registers`` per fragment — ``[forall extents…, extents of its
    loops…, width]`` — in the forall over blocks, before the op holding ``chunk``."""
    anchor: Operation = chunk
    while not (isinstance(owner := anchor.parent_op(), tile.ForallOp)
               and owner.mapping.data == "blocks"):
        assert owner is not None
        anchor = owner
    allocs = []
    for fragment in fragments:
        typ = fragment.load.buffer.type
        assert isinstance(typ, MemRefType)
        shape = [*forall.shape, *(f.extent.value.data for f in fragment.loops), width]
        alloc = tile.AllocOp("registers", MemRefType(typ.element_type, shape))
        alloc.result.name_hint = "frag"
        rewriter.insert(alloc, InsertPoint.before(anchor))
        allocs.append(alloc)
    return allocs


def outer_chunk_loop(chunk: scf.ForOp, forall: tile.ForallOp, steps: int, name: str,
                     rewriter: PatternRewriter) -> SSAValue:
    """``scf.for %name = 0 to steps`` (with the chunk loop's attributes) before ``chunk``,
    ``forall`` moved into it; returns the induction variable."""
    bounds, outer, iv = counted_for(steps, name, dict(chunk.attributes))
    for op in [*bounds, outer]:
        rewriter.insert(op, InsertPoint.before(chunk))
    forall.detach()
    outer.body.block.add_ops([forall, scf.YieldOp()])
    return iv


def _inner_loop(forall: tile.ForallOp, kk: SSAValue, kq: SSAValue, pre: list[Operation],
                width: int) -> tuple[scf.ForOp, dict[SSAValue, SSAValue]]:
    """Move ``forall``'s body into an unrolled ``scf.for %kv = 0 to width`` (sequential:
    its iterations update the same accumulators) that starts by computing ``kk = width·kq +
    kv`` and a copy of the chunk loop's index arithmetic ``pre``. Returns the loop and the
    map from the old ``kk`` and ``pre`` results to their new values."""
    fbody = forall.body.block
    terminator = fbody.last_op if isinstance(fbody.last_op, tile.YieldOp) else None
    moved = [inner for inner in fbody.ops if inner is not terminator]
    bounds, kv_loop, kv = counted_for(width, "kv", UNROLL)
    body = kv_loop.body.block
    for inner in [*bounds, kv_loop]:
        if terminator is None:
            fbody.add_op(inner)
        else:
            fbody.insert_op_before(inner, terminator)
    cw = _index(width)
    scaled = arith.MuliOp(kq, cw.result)
    new_kk = arith.AddiOp(scaled.result, kv)
    new_kk.result.name_hint = kk.name_hint
    body.add_ops([cw, scaled, new_kk])
    mapping: dict[SSAValue, SSAValue] = {kk: new_kk.result}
    for p in pre:
        clone = p.clone()
        for k, operand in enumerate(clone.operands):
            if operand in mapping:
                clone.operands[k] = mapping[operand]
        for old, new in zip(p.results, clone.results, strict=True):
            mapping[old] = new
            new.name_hint = old.name_hint
        body.add_op(clone)
    for inner in moved:
        inner.detach()
        body.add_op(inner)
    body.add_op(scf.YieldOp())
    return kv_loop, mapping


def _copy_nest(fragment: Fragment, registers: SSAValue, forall: tile.ForallOp, kk: SSAValue,
               kq: SSAValue, width: int, before: Operation) -> None:
    """``loop.for`` over the fragment's loops around ``tile.copy tile[…, V·kq] to
    registers[ivs…, 0] count V``, inserted before ``before``."""
    block = before.parent_block()
    assert block is not None
    loops = [loop.ForOp(f.extent.value.data) for f in fragment.loops]
    for new, old in zip(loops, fragment.loops, strict=True):
        new.attributes |= UNROLL
        new.body.block.args[0].name_hint = old.body.block.args[0].name_hint
    iv_of = {old.body.block.args[0]: new.body.block.args[0]
             for old, new in zip(fragment.loops, loops, strict=True)}
    load = fragment.load
    src_indices = [kq if v is kk else iv_of.get(v, v) for v in load.indices]
    dst_indices = [*forall.ivs, *(new.body.block.args[0] for new in loops)]
    merged: list[SSAValue] = []
    for value in (*src_indices, *dst_indices):
        if not any(value is m for m in merged):
            merged.append(value)

    def position(value: SSAValue) -> int:
        return next(k for k, m in enumerate(merged) if m is value)

    amap = load.map.data
    src_dims = [AffineDimExpr(position(v)) for v in src_indices]
    results = [e.replace_dims_and_symbols(src_dims, []) for e in amap.results]
    results[-1] = results[-1] * width
    src_map = AffineMap(len(merged), 0, tuple(results))
    dst_map = AffineMap(len(merged), 0, (*(AffineDimExpr(position(v)) for v in dst_indices),
                                         AffineConstantExpr(0)))
    copy = tile.CopyOp(load.buffer, src_map, registers, dst_map, merged, width)
    target = block
    anchor: Operation | None = before
    for new in loops:
        target.insert_op_before(new, anchor) if anchor is not None else target.add_op(new)
        target, anchor = new.body.block, None
    if anchor is None:
        target.add_op(copy)
    else:
        target.insert_op_before(copy, anchor)
