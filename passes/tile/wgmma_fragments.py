"""``wgmma-fragments``: a 16-bit register-tiled chunk loop runs as warpgroup products (sm_90a).

**Matches** what ``mma-fragments`` matches for ``bf16``/``f16`` factors — a chunk loop
``scf.for %kk = 0 to K`` around a ``tile.forall (%wi, %wj, %g, %t) over block_threads`` in
the tensor-core layout whose ``i, rh, j, rl`` nest holds updates ``acc[…] += a · b`` of
shared tiles — when the layout is a warpgroup's accumulator layout and the tiles are what
a descriptor can read:

* the forall is ``[WI, 1, 8, 4]`` with ``WI`` a multiple of 4 and the nest ``[1, 2, J, 2]``
  with ``8·J`` at most 256 (``register-tile{tm=2 tn=4·J blocked=3}``, ``bn = 8·J``): warp
  ``wi`` owns rows ``16·wi + g + 8·rh`` and every warp all ``8·J`` columns ``8·j + 2·t +
  rl``, so warps ``4·w`` to ``4·w + 3`` hold exactly one ``m64n(8J)`` accumulator;
* ``K`` (the chunk) is 64: each tile row is 128 bytes (``stage-inputs{bk=64}``);
* ``a`` reads its tile at ``[…, 16·wi + g + 8·rh + r0, kk]`` and ``b`` at ``[…, 8·j + 2·t +
  rl + n0, kk]`` (``r0``, ``n0`` and the leading indices — a pipeline slot — not varying with
  the threads), of a tile ``[…, R, 64]`` with ``R`` a multiple of 8, not clamped.

**Produces**, in place of the chunk loop, the forall with (for each update ``u``, ``v`` the
accumulator values ``i = 4·j + 2·rh + rl``)::

    tile.forall (%wi, %wj, %g, %t) … over block_threads {
      %c_u… = loop.load acc_u[wi, wj, g, t, 0, rh, j, rl]       // N/2 values a thread
      wgmma.fence
      %c_u… = wgmma.mma a[…, 64·(wi floordiv 4) + r0, 16·q], b[…, n0, 16·q] + (%c_u…)
                                                                 // q = 0 … 3, for each u
      wgmma.commit
      %e… = wgmma.wait 0 (%c_u…, …)
      loop.store %e…, acc_u[…]
    }

and marks both tiles ``llmopt.swizzle = 128`` (``pad-shared`` leaves them unpadded;
``kernel-to-cuda`` lays them out for the descriptors).

Nothing else changes: the copies that fill the tiles, their waits and barriers stay as
``stage-inputs``, ``async-copy`` and ``prefetch-stages`` made them. The pass does nothing
unless ``arch`` is sm_90a.

With ``pending = 1`` (option) the wait leaves the newest group in flight — ``wgmma.wait 1``,
so a chunk's products run while the next chunk's copies are waited for and its barrier
passes — when the K loop around the chunk loop refills a slot only one chunk after the
barrier that follows its last read (``async-copy{lag=1}``, ``{llmopt.lag = 1}`` on the
loop); after the K loop a forall of the same shape then waits for the last group
(``wgmma.wait 0``) before anything reads the accumulators. Without that mark the wait stays
``0``: a refill one barrier after the read would race with the products in flight.

**Why** a warpgroup's product reads its operands from shared memory itself: no
``ldmatrix`` fills registers first, and one instruction does the ``m64nNk16`` work of
``N / 2`` ``m16n8k16`` ``mma.sync`` of a warp, which on the H200 is what lets a 16-bit
product approach the tensor cores' peak.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import scf
from xdsl.dialects.builtin import IntegerAttr, MemRefType, ModuleOp, StringAttr, i64
from xdsl.ir import SSAValue
from xdsl.ir.affine import AffineConstantExpr, AffineDimExpr, AffineExpr, AffineMap
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from llmopt.dialects import loop, mma, tile, wgmma
from llmopt.passes._rewrite import KeepLocation
from llmopt.passes.tile._mma_halves import IndexEmitter, substituted_indices
from llmopt.passes.tile._mma_match import Operand, Update, coefficients, match_chunk_loop
from llmopt.passes.tile.async_copy import LAG_ATTR
from llmopt.target import WGMMA_ARCH

CHUNK = wgmma.SWIZZLE_BYTES // 2
"""The chunk loop's ``K``: one 128-byte row of 16-bit values."""
WARPS = wgmma.WARPGROUP // 32
"""Warps of a warpgroup."""

__all__ = ["WgmmaChunkLoop", "WgmmaFragments"]


def _layout_fits(forall: tile.ForallOp, nest: list[loop.ForOp]) -> int | None:
    """``N`` when the forall and its nest are a warpgroup's accumulator layout (see the
    module docstring), else ``None``."""
    wi, wj = forall.shape[0], forall.shape[1]
    rows, cols = nest[0].trip_count, nest[2].trip_count
    n = 8 * cols
    if wj != 1 or wi % WARPS or rows != 1 or not 8 <= n <= wgmma.MAX_N:
        return None
    return n


def _operand_fits(operand: Operand, kk: SSAValue, ivs: dict[str, SSAValue]) -> bool:
    """Whether a descriptor can read ``operand``'s tile: rows of 128 bytes, ``kk`` its
    innermost index, the row index the layout's (see the module docstring)."""
    load = operand.load
    typ = load.buffer.type
    assert isinstance(typ, MemRefType)
    shape = typ.get_shape()
    if (load.clamped or len(shape) < 2 or shape[-1] != CHUNK
            or shape[-2] % wgmma.SWIZZLE_ROWS):
        return False
    thread = set(ivs.values())
    coefs = coefficients(load, thread | {kk})
    if coefs is None or coefs[-1] != {kk: 1}:
        return False
    if any(v in thread or v is kk for c in coefs[:-2] for v in c):
        return False
    row = {v: c for v, c in coefs[-2].items() if v in thread}
    if operand.role == "a":
        want = {ivs["wi"]: 16, ivs["g"]: 1, ivs["rh"]: 8}
        row.pop(ivs["i"], None)  # one 16-row piece a warp: i is 0
    else:
        want = {ivs["t"]: 2, ivs["rl"]: 1, ivs["j"]: 8}
        row.pop(ivs["wj"], None)  # one warp column: wj is 0
    return row == want


def _value_spots(n: int) -> list[tuple[int, int, int]]:
    """Where a thread's accumulator values of an ``m64nN`` product live in the layout:
    value ``i`` is ``(rh, j, rl) = ((i / 2) mod 2, i / 4, i mod 2)``."""
    return [(i // 2 % 2, i // 4, i % 2) for i in range(n // 2)]


def in_flight(chunk: scf.ForOp, asked: int) -> scf.ForOp | None:
    """The K loop around ``chunk`` when ``asked`` groups may stay in flight across its
    barriers (its ``llmopt.lag`` is at least ``asked``), else ``None``."""
    k_loop = chunk.parent_op()
    if not asked or not isinstance(k_loop, scf.ForOp):
        return None
    lag = k_loop.attributes.get(LAG_ATTR)
    return k_loop if isinstance(lag, IntegerAttr) and lag.value.data >= asked else None


def wait_after(k_loop: scf.ForOp, forall: tile.ForallOp, spots: list[AffineMap],
               accumulators: Sequence[SSAValue], rewriter: PatternRewriter) -> None:
    """After ``k_loop``: a forall shaped as ``forall`` whose threads wait for their last
    group (``wgmma.wait 0``) on the accumulators before anything reads them."""
    tail = tile.ForallOp(forall.shape, "block_threads")
    tail.attributes |= forall.attributes | {"llmopt.role": StringAttr("wgmma_wait")}
    for iv, old in zip(tail.ivs, forall.ivs, strict=True):
        iv.name_hint = old.name_hint
    body = tail.body.block
    emit = IndexEmitter(body, body.last_op if isinstance(body.last_op, tile.YieldOp) else None)
    thread = list(tail.ivs)
    loaded = [emit.add(loop.LoadOp(acc, amap, thread))
              for acc in accumulators for amap in spots]
    waited = wgmma.WaitOp(0, loaded)
    emit.op(waited)
    for value, (acc, amap) in zip(waited.results_, ((a, m) for a in accumulators
                                                    for m in spots), strict=True):
        emit.op(loop.StoreOp(value, acc, amap, thread))
    rewriter.insert_op(tail, InsertPoint.after(k_loop))


def rewrite(chunk: scf.ForOp, forall: tile.ForallOp, nest: list[loop.ForOp],
            ivs: dict[str, SSAValue], updates: Sequence[Update],
            operands: dict[tuple[object, ...], Operand], n: int,
            rewriter: PatternRewriter, pending: int = 0) -> None:
    """Replace ``chunk`` by its forall running the warpgroup products, leaving ``pending``
    groups in flight at its wait (module docstring)."""
    k_loop = in_flight(chunk, pending)
    kk = chunk.body.block.args[0]
    old_nest = nest[0]
    old_nest.detach()
    forall.detach()
    rewriter.insert_op(forall, InsertPoint.before(chunk))
    fbody = forall.body.block
    terminator = fbody.last_op if isinstance(fbody.last_op, tile.YieldOp) else None
    emit = IndexEmitter(fbody, terminator)
    c = AffineConstantExpr
    d_wi = AffineDimExpr(0)
    zero = c(0)
    for operand in operands.values():
        alloc = operand.load.buffer.owner
        assert isinstance(alloc, tile.AllocOp)
        alloc.attributes[wgmma.SWIZZLE_ATTR] = IntegerAttr(wgmma.SWIZZLE_BYTES, i64)
    starts: dict[tuple[tuple[object, ...], int], list[SSAValue]] = {}
    for key, operand in operands.items():
        for q in range(CHUNK // wgmma.K):
            if operand.role == "a":
                subst: dict[SSAValue, AffineExpr] = {
                    kk: c(wgmma.K * q), ivs["g"]: zero, ivs["rh"]: zero, ivs["i"]: zero,
                    ivs["wi"]: (d_wi // WARPS) * WARPS}
            else:
                subst = {kk: c(wgmma.K * q), ivs["t"]: zero, ivs["rl"]: zero,
                         ivs["j"]: zero, ivs["wj"]: zero}
            starts[key, q] = substituted_indices(emit, operand.load, subst, [ivs["wi"]])
    thread = list(forall.ivs)
    arity = len(thread)
    spots = [AffineMap(arity, 0, (*(AffineDimExpr(d) for d in range(arity)), zero, c(rh),
                                  c(jj), c(rl)))
             for rh, jj, rl in _value_spots(n)]
    values: list[list[SSAValue]] = []
    for update in updates:
        acc = update.store.buffer
        values.append([emit.add(loop.LoadOp(acc, amap, thread)) for amap in spots])
    emit.op(wgmma.FenceOp())  # after the accumulators are read: the products use them
    for q in range(CHUNK // wgmma.K):
        for u, update in enumerate(updates):
            a, b = operands[update.a], operands[update.b]
            product = wgmma.MmaOp(a.load.buffer, starts[update.a, q], b.load.buffer,
                                  starts[update.b, q], values[u])
            emit.op(product)
            values[u] = list(product.d)
    emit.op(wgmma.CommitOp())
    waited = wgmma.WaitOp(pending if k_loop else 0, [v for vs in values for v in vs])
    emit.op(waited)
    done = list(waited.results_)
    for u, update in enumerate(updates):
        acc = update.store.buffer
        for k, amap in enumerate(spots):
            emit.op(loop.StoreOp(done[u * len(spots) + k], acc, amap, thread))
    chunk.body.block.insert_op_before(old_nest, chunk.body.block.first_op)  # erased with it
    rewriter.erase(chunk, safe_erase=False)
    if k_loop is not None:
        wait_after(k_loop, forall, spots, [u.store.buffer for u in updates], rewriter)


@dataclass
class WgmmaChunkLoop(RewritePattern):
    """Rewrite one chunk loop (see the module docstring), leaving ``pending`` groups in
    flight where its K loop allows."""

    pending: int = 0

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: scf.ForOp, rewriter: PatternRewriter) -> None:
        chunk = match_chunk_loop(op)
        if chunk is None or chunk.extent != CHUNK or not mma.is_half(chunk.loaded):
            return
        n = _layout_fits(chunk.forall, chunk.nest)
        if n is None or not all(_operand_fits(o, chunk.kk, chunk.ivs)
                                for o in chunk.operands.values()):
            return
        rewrite(op, chunk.forall, chunk.nest, chunk.ivs, chunk.updates, chunk.operands, n,
                rewriter, self.pending)


@dataclass(frozen=True)
class WgmmaFragments(ModulePass):
    """Warpgroup products for 16-bit chunk loops in a warpgroup's layout (see the module
    docstring). Options: ``arch`` (the pass runs only for sm_90a); ``pending`` (groups left
    in flight at each chunk's wait where the K loop's ``llmopt.lag`` allows: 0 or 1)."""

    name = "wgmma-fragments"

    arch: str = "sm_90"
    pending: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.arch != WGMMA_ARCH:
            return
        PatternRewriteWalker(KeepLocation(WgmmaChunkLoop(self.pending)),
                             apply_recursively=False).rewrite_module(op)
