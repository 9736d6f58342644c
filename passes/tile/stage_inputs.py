"""``stage-inputs``: the operands of a K loop are staged chunk by chunk in shared memory.

**Matches** a sequential ``scf.for %k = 0 to K step 1`` directly in a ``tile.forall over
blocks`` whose body is one ``tile.forall over block_threads`` (what ``register-tile`` makes).
In it, every load from a kernel argument (global memory) is *staged* when its indices are
sums of a *block part* (terms over block-level values only — the forall over blocks' ivs,
kernel constants — of any affine form, e.g. a KV head ``h floordiv 4``) and a *thread part*
(linear, non-negative coefficients on the forall's and inner ``loop.for``'s ivs), and ``%k``
appears in exactly one of them, with coefficient 1 and no thread-level term.

**Produces** ``scf.for %k0 = 0 to K/bk``: per staged load a ``tile.alloc shared`` tile holding
the box the block reads in that chunk (its dimensions in the order of the global buffer's,
the K dimension ``bk`` long, dimensions the threads do not vary dropped), filled by a
``tile.forall over block_threads`` that walks the box with the global buffer's innermost
dimension fastest (coalesced); then ``scf.for %kk = 0 to bk`` (``unroll``) around the old
body, with ``%k = %k0·bk + %kk`` and each staged load reading its tile. ``tile-to-kernel``
places the barriers (after the copies, and at the end of the chunk before the tiles are
overwritten). Knob ``kmajor`` (2, the default: tiles in the global buffer's dimension order,
which ``async-copy`` fills with 16-byte copies; 1, the default when the kernel's schedule
sets ``stages = 1``: each tile is stored K-major, ``[bk, rows]``, still filled with the
global buffer's innermost dimension fastest; a register tile with ``blocked`` outputs then
reads each thread's operands from adjacent words, and every K-major tile asks ``pad-shared``
for 4 words of padding, ``llmopt.pad``, so rows stay 16-byte aligned) and knob ``bk`` (0 =
32, or the largest power of two dividing K below that, halved until the tiles, rows padded,
fit a block's shared-memory budget (half of what a block may use: 113 KiB on sm_90) — twice
over for tiles ``async-copy`` will fill ahead, so it can keep at least two chunks in
flight; on sm_90a a chunk of 64 that the schedule names for a warpgroup tile is kept, since
``wgmma-fragments`` reads rows of exactly 64 halves). Option ``chunk_unroll`` (0, the
default: the chunk loop is unrolled whole, as every loop of the K step inside it; ``n``:
``#pragma unroll n``) bounds the K loop's code: a block of a one-wave kernel fetches the
loop's code cold once, and a whole 32-long chunk of a large register tile is tens of
kilobytes of it.

**Why** in a ``bm × bn`` block tile every operand element is read by ``bn`` (or ``bm``)
threads; staged, it is read from global memory once per block and then from shared memory,
and the loads of consecutive threads are consecutive addresses.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, MemRefType, ModuleOp, StringAttr, i64
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
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

from llmopt.dialects import loop, tile
from llmopt.passes._rewrite import KeepLocation
from llmopt.passes.tile._access import block_threads, linear_form, simplified
from llmopt.passes.tile._schedule import (
    DEFAULT_STAGES,
    default_kmajor,
    kernel_knobs,
    knob,
    padded_bytes,
)
from llmopt.passes.tile._schedule_product import choose_bk
from llmopt.passes.tile._schedule_tiles import WGMMA_BK
from llmopt.target import WGMMA_ARCH, smem_budget
from llmopt.target import for_arch as limits

INDEX = IndexType()
VECTOR_PAD = 4
"""Words a K-major tile's rows are padded by: keeps every row 16-byte aligned."""


def const_int(value: SSAValue) -> int | None:
    """The value of an ``index`` constant, else ``None``."""
    owner = value.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
        return owner.value.value.data
    return None


def block_level_loop(op: scf.ForOp) -> tile.KernelOp | None:
    """The kernel of a sequential loop without loop-carried values that sits directly in
    the kernel's ``tile.forall over blocks`` (a K loop), else ``None``."""
    blocks = op.parent_op()
    if not (isinstance(blocks, tile.ForallOp) and blocks.mapping.data == "blocks"):
        return None
    kernel = blocks.parent_op()
    if not isinstance(kernel, tile.KernelOp) or op.iter_args:
        return None
    return kernel


@dataclass(frozen=True)
class Staged:
    """One load to stage: per index of the global buffer, its block part (an affine
    expression over block-level operands, any form), its thread part (linear, non-negative
    coefficients), and which index holds k."""

    load: loop.LoadOp
    block_exprs: list[AffineExpr]
    thread_terms: list[dict[int, int]]
    k_dim: int
    box: list[int]  # extent of each buffer dimension in the tile (0: dropped)


def thread_extent(value: SSAValue, region_root: Operation) -> int | None:
    """The trip count of a thread-level induction variable inside ``region_root``."""
    if not isinstance(value, BlockArgument):
        return None
    parent = value.block.parent_op()
    if parent is None or not region_root.is_ancestor(parent):
        return None
    if isinstance(parent, tile.ForallOp):
        return parent.shape[value.index]
    if isinstance(parent, loop.ForOp):
        return parent.trip_count
    return None


def addends(expr: AffineExpr) -> list[AffineExpr]:
    """The terms of a (nested) sum."""
    if isinstance(expr, AffineBinaryOpExpr) and expr.kind is AffineBinaryOpKind.Add:
        return addends(expr.lhs) + addends(expr.rhs)
    return [expr]


def analyse(load: loop.LoadOp, k: SSAValue, k_loop: scf.ForOp, body: tile.ForallOp,
            kernel_args: set[SSAValue]) -> Staged | None:
    """The staging plan of ``load``, or ``None`` if it cannot be staged."""
    if load.buffer not in kernel_args or k not in load.indices:
        return None
    amap = load.map.data
    kinds: list[str] = []
    for v in load.indices:
        if v is k:
            kinds.append("k")
        elif thread_extent(v, body) is not None:
            kinds.append("thread")
        elif not k_loop.is_ancestor(v.owner if isinstance(v.owner, Operation)
                                    else v.block.parent_op()):  # type: ignore[union-attr]
            kinds.append("block")
        else:
            return None
    block_exprs: list[AffineExpr] = []
    thread_terms: list[dict[int, int]] = []
    box: list[int] = []
    k_dim = -1
    for r, expr in enumerate(amap.results):
        block: AffineExpr = AffineConstantExpr(0)
        coefs: dict[int, int] = {}
        for term in addends(expr):
            if all(kinds[d] == "block" for d in term.used_dims()):
                block = block + term
                continue
            form = linear_form(term)
            if form is None or form[1]:
                return None
            for d, c in form[0].items():
                if kinds[d] == "block":
                    block = block + AffineDimExpr(d) * c
                else:
                    coefs[d] = coefs.get(d, 0) + c
        tt = {d: c for d, c in coefs.items() if kinds[d] == "thread" and c}
        kc = sum(c for d, c in coefs.items() if kinds[d] == "k")
        if kc:
            if kc != 1 or tt or k_dim >= 0:
                return None
            k_dim = r
            box.append(-1)
        else:
            if any(c < 0 for c in tt.values()):
                return None
            span = sum(c * (thread_extent(load.indices[d], body) - 1)  # type: ignore[operator]
                       for d, c in tt.items())
            box.append(span + 1 if tt else 0)
        block_exprs.append(block)
        thread_terms.append(tt)
    if k_dim < 0:
        return None
    return Staged(load, block_exprs, thread_terms, k_dim, box)


def _expr(terms: dict[int, int], dims: dict[int, int]) -> AffineExpr:
    """``sum(c * d)`` with old operand positions renumbered by ``dims``."""
    expr: AffineExpr = AffineConstantExpr(0)
    for d, c in terms.items():
        expr = expr + AffineDimExpr(dims[d]) * c
    return expr


def build_stage(s: Staged, bk: int, k0: SSAValue, kmajor: bool = False
                ) -> tuple[tile.AllocOp, tile.ForallOp, list[int]]:
    """The shared tile of ``s`` and the forall that fills it for chunk ``k0``; returns the
    buffer dimensions the tile keeps, in the tile's order (``kmajor``: K first)."""
    typ = s.load.buffer.type
    assert isinstance(typ, MemRefType)
    kept = [r for r, e in enumerate(s.box) if e != 0]
    shape = [bk if r == s.k_dim else s.box[r] for r in kept]
    order = ([s.k_dim] + [r for r in kept if r != s.k_dim]) if kmajor else kept
    alloc = tile.AllocOp("shared", MemRefType(typ.element_type,
                                              [shape[kept.index(r)] for r in order]))
    alloc.result.name_hint = "stage"
    if kmajor and len(order) > 1:  # rows of K-major tiles stay 16-byte aligned
        alloc.attributes["llmopt.pad"] = IntegerAttr(VECTOR_PAD, i64)
    forall, ivs = block_threads(shape, [f"s{i}" for i in range(len(shape))])
    block_ops = sorted({d for e in s.block_exprs for d in e.used_dims()})
    operands = [s.load.indices[d] for d in block_ops] + [k0, *ivs]
    n = len(operands)
    renumber = [AffineDimExpr(block_ops.index(d)) if d in block_ops else AffineConstantExpr(0)
                for d in range(len(s.load.indices))]
    k0_dim = len(block_ops)
    results = []
    for r in range(len(s.box)):
        expr = s.block_exprs[r].replace_dims_and_symbols(renumber, [])
        if r in kept:
            iv = AffineDimExpr(k0_dim + 1 + kept.index(r))
            expr = expr + (AffineDimExpr(k0_dim) * bk + iv if r == s.k_dim else iv)
        results.append(expr)
    gmap = AffineMap(n, 0, tuple(simplified(e, n, [None] * n) for e in results))
    value = loop.LoadOp(s.load.buffer, gmap, operands, s.load.clamped)
    smap = AffineMap(len(ivs), 0, tuple(AffineDimExpr(kept.index(r)) for r in order))
    forall.body.block.add_ops([value, loop.StoreOp(value.result, alloc.result, smap, ivs)])
    forall.attributes["llmopt.role"] = StringAttr("stage")
    return alloc, forall, order


def tile_load(s: Staged, alloc: tile.AllocOp, kept: list[int], kk: SSAValue) -> loop.LoadOp:
    """The load of the tile that replaces ``s.load`` inside the chunk loop."""
    thread_ops = sorted({d for tt in s.thread_terms for d in tt})
    operands = [s.load.indices[d] for d in thread_ops] + [kk]
    dims = {d: i for i, d in enumerate(thread_ops)}
    results = []
    for r in kept:
        if r == s.k_dim:
            results.append(AffineDimExpr(len(thread_ops)))
        else:
            results.append(_expr(s.thread_terms[r], dims))
    n = len(operands)
    amap = AffineMap(n, 0, tuple(simplified(e, n, [None] * n) for e in results))
    return loop.LoadOp(alloc.result, amap, operands)


@dataclass
class StageKLoop(RewritePattern):
    """Stage the operands of one K loop (see the module docstring)."""

    bk: int
    kmajor: int
    arch: str
    chunk_unroll: int = 0

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: scf.ForOp, rewriter: PatternRewriter) -> None:
        kernel = block_level_loop(op)
        if kernel is None:
            return
        blocks = op.parent_op()
        assert isinstance(blocks, tile.ForallOp)
        lb, ub, step = const_int(op.lb), const_int(op.ub), const_int(op.step)
        body_ops = list(op.body.block.ops)
        if lb != 0 or step != 1 or ub is None or len(body_ops) != 2:
            return
        inner = body_ops[0]
        if not (isinstance(inner, tile.ForallOp) and inner.mapping.data == "block_threads"):
            return
        k = op.body.block.args[0]
        args = set(kernel.body.block.args)
        staged = [s for load in inner.walk() if isinstance(load, loop.LoadOp)
                  if (s := analyse(load, k, op, inner, args)) is not None]
        if not staged:
            return
        kmajor = knob(self.kmajor, kernel, "kmajor", default_kmajor(kernel)) != 2
        bk = knob(self.bk, kernel, "bk", choose_bk(ub))
        if bk < 2 or ub % bk:
            return
        budget = smem_budget(limits(self.arch))

        distinct = {(s.load.buffer, s.load.map.data, tuple(s.load.indices)): s
                    for s in staged}

        def tile_bytes(b: int) -> int:
            """Shared memory of the tiles for chunk ``b``, rows padded as ``pad-shared``
            will (4 words for K-major tiles and for those ``async-copy`` fills 16 bytes at
            a time: the widest padding)."""
            total = 0
            for s in distinct.values():
                dims = [r for r, e in enumerate(s.box) if e]
                if kmajor:
                    dims = [s.k_dim] + [r for r in dims if r != s.k_dim]
                pad = VECTOR_PAD if len(dims) > 1 else 1
                rows = [b if r == s.k_dim else s.box[r] for r in dims]
                total += padded_bytes(rows, pad)
            return total

        # Tiles async-copy will double-buffer get a chunk whose two slots fit.
        slots = 2 if not kmajor and knob(0, kernel, "stages", DEFAULT_STAGES) >= 2 else 1
        # a warpgroup tile's chunk is one 128-byte row of halves, whatever the budget says
        kept = self.bk or (self.arch == WGMMA_ARCH
                           and kernel_knobs(kernel).get("bk") == WGMMA_BK)
        while tile_bytes(bk) * slots > budget and bk > 2 and not kept:
            bk //= 2
        if tile_bytes(bk) > budget:
            if self.bk:  # asked for: a product left unstaged would be slower many times over
                raise PassFailedException(
                    f"stage-inputs: bk={self.bk} needs {tile_bytes(bk)} bytes of shared "
                    f"tiles in kernel '{kernel.sym_name.data}', more than a block's budget "
                    f"of {budget} on {self.arch}; a smaller bk (or none) fits")
            return

        c0 = arith.ConstantOp(IntegerAttr(0, INDEX))
        chunks = arith.ConstantOp(IntegerAttr(ub // bk, INDEX))
        c1 = arith.ConstantOp(IntegerAttr(1, INDEX))
        cbk = arith.ConstantOp(IntegerAttr(bk, INDEX))
        outer = Block(arg_types=[INDEX])
        k0 = outer.args[0]
        k0.name_hint = "k0"
        chunk = Block(arg_types=[INDEX])
        kk = chunk.args[0]
        kk.name_hint = "kk"
        scaled = arith.MuliOp(k0, cbk.result)
        k_new = arith.AddiOp(scaled.result, kk)
        k_new.result.name_hint = "k"
        chunk.add_ops([scaled, k_new])
        tiles: dict[tuple[object, ...], tuple[tile.AllocOp, list[int]]] = {}
        for s in staged:
            key = (s.load.buffer, s.load.map.data, tuple(s.load.indices))
            if key not in tiles:  # identical loads (x of a fused gate/up) share one tile
                alloc, fill, kept = build_stage(s, bk, k0, kmajor)
                blocks.body.block.insert_op_before(alloc, op)
                outer.add_op(fill)
                tiles[key] = (alloc, kept)
            alloc, kept = tiles[key]
            rewriter.replace(s.load, tile_load(s, alloc, kept, kk))
        k.replace_all_uses_with(k_new.result)
        inner.detach()
        chunk.add_ops([inner, scf.YieldOp()])
        chunk_loop = scf.ForOp(c0.result, cbk.result, c1.result, [], Region(chunk))
        chunk_loop.attributes["unroll"] = IntegerAttr(self.chunk_unroll, i64)
        outer.add_ops([chunk_loop, scf.YieldOp()])
        new = scf.ForOp(c0.result, chunks.result, c1.result, [], Region(outer))
        new.attributes |= op.attributes
        rewriter.insert([c0, chunks, c1, cbk], InsertPoint.before(op))
        rewriter.replace(op, new)


@dataclass(frozen=True)
class StageInputs(ModulePass):
    """Stage K-loop operands in shared memory (see the module docstring).

    Options: ``bk`` (K elements per chunk; 0 = the kernel's ``llmopt.schedule`` or the
    heuristic; one whose tiles do not fit a block's shared-memory budget is an error),
    ``kmajor`` (1: tiles K-major, 2: not; 0 = the schedule's or the default),
    ``arch`` (whose shared-memory limit the tiles
    must fit), ``chunk_unroll`` (the chunk loop's unroll factor; 0: whole).
    """

    name = "stage-inputs"

    bk: int = 0
    kmajor: int = 0
    arch: str = "sm_90"
    chunk_unroll: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.chunk_unroll < 0:
            raise PassFailedException(f"stage-inputs: chunk_unroll must be at least 0, got "
                                      f"{self.chunk_unroll}")
        pattern = StageKLoop(self.bk, self.kmajor, self.arch, self.chunk_unroll)
        PatternRewriteWalker(KeepLocation(pattern),
                             apply_recursively=False).rewrite_module(op)
