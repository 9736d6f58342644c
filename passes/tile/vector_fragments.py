"""``vector-fragments``: a register-tiled chunk loop reads its shared tiles 16 bytes at a time.

**Matches** a chunk loop ``scf.for %kk = 0 to K step 1`` (the one ``register-tile`` and
``stage-inputs`` make inside the K loop) whose body is index arithmetic followed by one
``tile.forall over block_threads`` with one point per thread that stores only into
``tile.alloc registers`` buffers (the accumulators: several chunk steps then run in one
forall with no barrier lost), in which some ``loop.load`` of
a ``tile.alloc shared`` tile has ``%kk`` as its innermost index (and nowhere else) — a tile
kept in the global buffer's order, whose rows run along K. Such a load is *vectorizable*
when ``V`` consecutive elements (``V`` = 16 bytes, 4 for ``f32``) start at a multiple of
``V``: ``K`` and the tile's row pitch (after ``pad-shared``: 36 words for rows of 32) are
multiples of ``V``. Its other indices may use the forall's induction variables, the
``loop.for`` around it in the forall (the micro-tile's ``mi``/``nj``) and values defined
before the chunk loop.

**Produces**, for ``kk = V·kq + kv``::

    scf.for %kq = 0 to K/V {
      tile.forall (%ti, %tj) over block_threads {
        loop.for %mi { tile.copy %a[.., mi·16 + ti, V·kq] to %fa[ti, tj, mi, 0] count V }
        loop.for %nj { tile.copy %b[.., nj·16 + tj, V·kq] to %fb[ti, tj, nj, 0] count V }
        scf.for %kv = 0 to V {             // unrolled; %kk = V·kq + kv
          <the old body, the vectorizable loads reading %fa[ti, tj, mi, kv] …>
        }
      }
    }

with one ``tile.alloc registers`` fragment per distinct vectorizable load (same tile, same
indices), ``[forall extents…, extents of the loops its indices use…, V]``. Every other use
of ``%kk`` (scalar loads of other tiles, masks) sees ``V·kq + kv``. The multiply-adds run
in the same order, so the results are bit-identical.

**Why** a thread of a 8×4 micro-tile reads, per ``kk``, 8 elements of one tile and 4 of the
other: 12 shared-memory loads for 32 multiply-adds, which keeps the shared-memory pipe as
busy as the FMA units. NVRTC merges some consecutive scalar loads into vector loads, but
only where it can prove alignment, and mixes 16-, 8- and 4-byte loads. With fragments every
read is one 16-byte ``ld.shared.v4`` (``kernel-to-cuda`` prints a ``float4`` access), a
quarter of the load instructions. Rows padded to 36 words put 8 consecutive rows' 16-byte
pieces in distinct banks, so a warp reading 16 rows needs the minimum of two wavefronts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, MemRefType, ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.ir.affine import AffineConstantExpr, AffineDimExpr, AffineExpr, AffineMap
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint
from xdsl.utils.exceptions import PassFailedException

from llmopt.dialects import loop, tile
from llmopt.passes._ir import defined_inside
from llmopt.passes._rewrite import KeepLocation
from llmopt.passes.tile._access import UNROLL, counted_for
from llmopt.passes.tile._schedule import knob
from llmopt.passes.tile.stage_inputs import const_int

VECTOR_BYTES = 16
"""The size of one fragment read: a 128-bit shared-memory load."""


def _uses(expr: AffineExpr, position: int) -> bool:
    """Whether ``expr`` mentions dimension ``position``."""
    if isinstance(expr, AffineDimExpr):
        return expr.position == position
    if isinstance(expr, AffineConstantExpr):
        return False
    return any(_uses(e, position) for e in (expr.lhs, expr.rhs))  # type: ignore[attr-defined]


def _shared(buffer: SSAValue) -> MemRefType | None:
    """The type of a ``tile.alloc shared`` buffer (``None`` for any other buffer)."""
    owner = buffer.owner
    if isinstance(owner, tile.AllocOp) and owner.space.data == "shared":
        typ = owner.result.type
        assert isinstance(typ, MemRefType)
        return typ
    return None


@dataclass
class Fragment:
    """The registers of one vectorizable load: its tile, indices and the loops they use."""

    load: loop.LoadOp
    loops: list[loop.ForOp]
    """The ``loop.for`` ops of the forall whose induction variables the indices use,
    outermost first."""
    loads: list[loop.LoadOp] = field(default_factory=list)
    """Every load reading these registers (identical accesses share them)."""

    def key(self) -> tuple[object, ...]:
        """Identical loads (same tile, map and indices) share one fragment."""
        return (self.load.buffer, self.load.map.data, tuple(self.load.indices))


def _vectorizable(load: loop.LoadOp, chunk: scf.ForOp, forall: tile.ForallOp, width: int
                  ) -> Fragment | None:
    """The fragment of ``load`` if it reads ``width`` aligned consecutive elements of a shared
    tile along the ``chunk`` loop's index (module docstring), else ``None``. Its copy runs
    before the chunk loop's own index arithmetic, so an index computed in the chunk loop
    (other than the loops around the load) disqualifies it."""
    kk = chunk.body.block.args[0]
    typ = _shared(load.buffer)
    if typ is None:
        return None
    amap = load.map.data
    positions = [p for p, v in enumerate(load.indices) if v is kk]
    last = amap.results[-1]
    if not (isinstance(last, AffineDimExpr) and last.position in positions):
        return None
    if any(_uses(e, p) for e in amap.results[:-1] for p in positions):
        return None
    strides, offset = typ.get_strides(), typ.get_offset()
    if strides is None or not isinstance(offset, int) or strides[-1] != 1:
        return None
    if offset % width or any(s is None or s % width for s in strides[:-1]):
        return None
    ancestors: dict[SSAValue, loop.ForOp] = {}
    parent = load.parent_op()
    while parent is not None and parent is not forall:
        if isinstance(parent, loop.ForOp):
            ancestors[parent.body.block.args[0]] = parent
        elif not isinstance(parent, loop.ReduceOp):
            return None
        parent = parent.parent_op()
    loops: list[loop.ForOp] = []
    for value in load.indices:
        if value is kk or any(value is iv for iv in forall.ivs):
            continue
        if value in ancestors:
            if ancestors[value] not in loops:
                loops.append(ancestors[value])
        elif defined_inside(value, chunk):
            return None  # computed in the chunk loop: not a plain loop index
    depth = {op: _depth(op) for op in loops}
    loops.sort(key=lambda op: depth[op])
    return Fragment(load, loops)


def _depth(op: Operation) -> int:
    """How many ops enclose ``op``."""
    n = 0
    parent = op.parent_op()
    while parent is not None:
        n += 1
        parent = parent.parent_op()
    return n


def _index(value: int) -> arith.ConstantOp:
    """An ``index`` constant."""
    return arith.ConstantOp(IntegerAttr(value, IndexType()))


@dataclass
class VectorizeChunkLoop(RewritePattern):
    """Rewrite one chunk loop (see the module docstring)."""

    kv_order: int = 0
    """The pass option (0: each kernel's ``kv_order`` knob, default 1; see
    :class:`VectorFragments`)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: scf.ForOp, rewriter: PatternRewriter) -> None:
        if op.iter_args or const_int(op.lb) != 0 or const_int(op.step) != 1:
            return
        extent = const_int(op.ub)
        body = op.body.block
        ops = list(body.ops)
        if extent is None or len(ops) < 2 or not isinstance(ops[-1], scf.YieldOp):
            return
        forall = ops[-2]
        pre = ops[:-2]
        if not (isinstance(forall, tile.ForallOp) and forall.mapping.data == "block_threads"
                and forall.points == _block_size(op) and _in_blocks(op)
                and all(isinstance(p, arith.ConstantOp | arith.AddiOp | arith.MuliOp)
                        for p in pre)):
            return
        if not _private_updates(forall):
            return
        fragments: dict[tuple[object, ...], Fragment] = {}
        for inner in forall.walk():
            if not isinstance(inner, loop.LoadOp):
                continue
            width = _width(inner)
            if width < 2 or extent % width:
                continue
            fragment = _vectorizable(inner, op, forall, width)
            if fragment is not None:
                fragments.setdefault(fragment.key(), fragment).loads.append(inner)
        widths = {_width(f.load) for f in fragments.values()}
        if len(widths) != 1:
            return  # nothing to read in fragments, or elements of several sizes
        (width,) = widths
        kernel = tile.enclosing(op, tile.KernelOp)
        order = knob(self.kv_order, kernel, "kv_order", 1) if kernel is not None else 1
        kv_loop = _rewrite(op, forall, pre, list(fragments.values()), extent, width, rewriter)
        if order == 2:
            sink_kv_loop(kv_loop)


def _width(load: loop.LoadOp) -> int:
    """Elements of ``load``'s type in :data:`VECTOR_BYTES`."""
    typ = load.buffer.type
    assert isinstance(typ, MemRefType)
    return VECTOR_BYTES * 8 // typ.element_type.bitwidth  # type: ignore[attr-defined]


def _private_updates(forall: tile.ForallOp) -> bool:
    """Whether ``forall`` only stores into ``tile.alloc registers`` buffers and hands no work
    on to other threads: then running several chunk steps in one forall, with no barrier
    between them, orders every access as the chunk loop did."""
    for inner in forall.walk():
        if isinstance(inner, tile.ForallOp | tile.CoopReduceOp) and inner is not forall:
            return False
        if isinstance(inner, loop.StoreOp | tile.CopyBase):
            target = inner.buffer if isinstance(inner, loop.StoreOp) else inner.dst
            owner = target.owner
            if not (isinstance(owner, tile.AllocOp) and owner.space.data == "registers"):
                return False
    return True


def _in_blocks(op: Operation) -> bool:
    """Whether ``op`` is nested in a ``tile.forall over blocks`` (where registers live)."""
    parent = op.parent_op()
    while parent is not None:
        if isinstance(parent, tile.ForallOp) and parent.mapping.data == "blocks":
            return True
        parent = parent.parent_op()
    return False


def _block_size(op: Operation) -> int | None:
    """The threads per block of the ``tile.kernel`` around ``op``."""
    kernel = tile.enclosing(op, tile.KernelOp)
    return None if not isinstance(kernel, tile.KernelOp) else math.prod(kernel.block_shape)


def _rewrite(chunk: scf.ForOp, forall: tile.ForallOp, pre: list[Operation],
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
    allocator start from, and neither order wins everywhere (see :class:`VectorFragments`)."""
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


@dataclass(frozen=True)
class VectorFragments(ModulePass):
    """Read register-tiled shared tiles 16 bytes at a time (see the module docstring)."""

    name = "vector-fragments"

    kv_order: int = 0
    """Where the loop over a fragment's ``V`` elements goes: 1 around the micro-tile's
    loops (``for kv { for mi { for nj }}}``), 2 inside them (``for mi { for nj { for kv
    }}}``, :func:`sink_kv_loop`, where legal); 0 (the default): each kernel's ``kv_order``
    knob, else 1. Measured on the H200 (``bench/sweep_gemm.py``): order 2 was within 1.3%
    on TinyLlama's products and the fused gate/up projections, and made Qwen2.5-7B's
    112-wide 8 × 7 tiles of its down and o projections 7–35% slower (512 × 3584 × 18944:
    1.79 against 1.63 ms; 128 rows: 0.588 against 0.435); ``llmopt tune`` kept it for five
    of TinyLlama's layer kernels, 1–3% faster each; and the CUDA of a 128 × 128 block of
    8 × 8 micro-tiles (512 × 33792 × 3584), its loops reordered by hand the same way, ran
    6.5% faster (2.83 against 3.03 ms). A choice per kernel, which ``llmopt tune``
    measures."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.kv_order not in (0, 1, 2):
            raise PassFailedException(f"vector-fragments: kv_order must be 0 (the kernel's "
                                      f"knob), 1 or 2, got {self.kv_order}")
        PatternRewriteWalker(KeepLocation(VectorizeChunkLoop(self.kv_order)),
                             apply_recursively=False).rewrite_module(op)
