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
* ``K`` (the chunk) is 64: each tile row is 128 bytes (``stage-inputs{bk=64}``); or, up to
  ``atoms`` swizzle atoms (option, 2 by default; 1: chunks of 64 only), 128: a tile row of
  two atoms (the chunk of a flash kernel's ``Q·Kᵀ`` for heads of 128: ``kernel-to-cuda``
  lays such a tile out atom after atom, and each product's 16 values of ``k`` lie in one of
  them);
* ``a`` reads its tile at ``[…, 16·wi + g + 8·rh + r0, kk]`` and ``b`` at ``[…, 8·j + 2·t +
  rl + n0, kk]`` (``r0``, ``n0`` and the leading indices — a pipeline slot — not varying with
  the threads), of a tile ``[…, R, 64]`` with ``R`` a multiple of 8, not clamped; or, with
  ``n_major`` (option, on by default), ``b`` at ``[…, kk, 8·j + 2·t + rl + n0]`` of a tile
  ``[…, K, W]`` (``W`` a multiple of 64): ``x @ W`` with ``W`` stored ``[K, N]``, or the
  ``V`` of a flash kernel's ``P·V``, which the product reads N-major (``transposed``);
* no ``a`` is one ``mma-fragments`` takes from the registers of the threads that wrote it
  (:func:`~llmopt.passes.tile._mma_forward.register_source`: the flash kernel's ``P`` with
  whole rows a warp), which keeps that product on ``mma.sync``: through shared memory
  to a warpgroup product it measured slower for heads of 128. With ``register_a``
  (option, off by default: not yet timed) such an ``a`` is taken too, from those registers:
  the writer also keeps its values in a register tile, each product reads four
  ``mma.pack`` pairs of it a thread (its warp's 16 rows, as ``mma.sync``'s ``A``
  fragment), and the shared tile and its store go.

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

When the forall in front of the chunk loop only zeroes the accumulators (``llmopt.role =
"init"``: a flash kernel's scores, computed afresh for each key block), the first product
of each update starts from zero instead (``+ zeros(n)``, no loads of ``acc_u``) and that
forall goes: ``N / 2`` zeros a thread no longer written into registers each key block.

The pass also marks both tiles ``llmopt.swizzle = 128`` (``pad-shared`` leaves them unpadded;
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

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, MemRefType, ModuleOp, StringAttr, i64
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
from xdsl.traits import is_side_effect_free

from llmopt.dialects import loop, mma, tile, wgmma
from llmopt.passes._rewrite import KeepLocation
from llmopt.passes.tile._mma_forward import (
    Source,
    drop_shared,
    forward,
    register_fragments,
    register_source,
)
from llmopt.passes.tile._mma_halves import IndexEmitter, substituted_indices
from llmopt.passes.tile._mma_match import Operand, Update, coefficients, match_chunk_loop
from llmopt.passes.tile.async_copy import LAG_ATTR
from llmopt.target import WGMMA_ARCH

CHUNK = wgmma.ATOM_COLUMNS
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


def _n_major(operand: Operand, kk: SSAValue) -> bool:
    """Whether ``operand`` is a ``b`` whose tile keeps ``k`` in its rows (``[…, K, N]``,
    ``kk`` the row index: ``x @ W`` reads ``W[k, n]`` so), to be read N-major."""
    coefs = coefficients(operand.load, {kk})
    return operand.role == "b" and coefs is not None and len(coefs) >= 2 and coefs[-2] == {
        kk: 1}


def _operand_fits(operand: Operand, kk: SSAValue, ivs: dict[str, SSAValue],
                  extent: int = CHUNK, n_major: bool = False) -> bool:
    """Whether a descriptor can read ``operand``'s tile: rows of ``extent`` values (the
    chunk), ``kk`` its innermost index, the row index the layout's (see the module
    docstring); or, a ``b`` read N-major (``n_major``), ``extent`` rows indexed by ``kk``
    and rows of atoms of 64 columns indexed as the layout's columns."""
    load = operand.load
    typ = load.buffer.type
    assert isinstance(typ, MemRefType)
    shape = typ.get_shape()
    transposed = n_major and _n_major(operand, kk)
    rows, width = (extent, CHUNK) if transposed else (wgmma.SWIZZLE_ROWS, extent)
    if (load.clamped or len(shape) < 2 or shape[-2] % rows or shape[-1] % width
            or (not transposed and shape[-1] != extent)
            or (transposed and shape[-2] != extent)):
        return False
    thread = set(ivs.values())
    coefs = coefficients(load, thread | {kk})
    k_at, n_at = (-2, -1) if transposed else (-1, -2)
    if coefs is None or coefs[k_at] != {kk: 1}:
        return False
    if any(v in thread or v is kk for c in coefs[:-2] for v in c):
        return False
    row = {v: c for v, c in coefs[n_at].items() if v in thread}
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
    rewriter.insert(tail, InsertPoint.after(k_loop))


def zero_init(chunk: scf.ForOp, forall: tile.ForallOp, accumulators: set[SSAValue]
              ) -> tile.ForallOp | None:
    """The forall in front of ``chunk`` (side-effect-free ops between them aside) that
    writes ``0.0`` into the ``accumulators``, in ``forall``'s shape, and does nothing else
    (``llmopt.role = "init"``: a flash kernel's scores, zeroed for each key block), or
    ``None``. The chunk's products may then start from zero and the forall go."""
    op = chunk.prev_op
    while op is not None and not op.regions and is_side_effect_free(op):
        op = op.prev_op
    role = op.attributes.get("llmopt.role") if op is not None else None
    if not (isinstance(op, tile.ForallOp) and op.shape == forall.shape
            and isinstance(role, StringAttr) and role.data == "init"):
        return None
    stored: set[SSAValue] = set()
    for inner in op.walk():
        if isinstance(inner, loop.StoreOp):
            value = inner.value.owner
            if not (isinstance(value, arith.ConstantOp) and isinstance(value.value, FloatAttr)
                    and value.value.value.data == 0.0
                    and math.copysign(1.0, value.value.value.data) > 0):
                return None
            stored.add(inner.buffer)
        elif inner is not op and not isinstance(inner, loop.ForOp | tile.YieldOp) and not (
                not inner.regions and is_side_effect_free(inner)):
            return None
    return op if stored == accumulators else None


def rewrite(chunk: scf.ForOp, forall: tile.ForallOp, nest: list[loop.ForOp],
            ivs: dict[str, SSAValue], updates: Sequence[Update],
            operands: dict[tuple[object, ...], Operand], n: int,
            rewriter: PatternRewriter, pending: int = 0, extent: int = CHUNK,
            n_major: bool = False, sources: dict[tuple[object, ...], Source] | None = None
            ) -> None:
    """Replace ``chunk`` (of ``extent`` values of ``k``) by its forall running the
    warpgroup products, leaving ``pending`` groups in flight at its wait (module
    docstring); ``n_major``: a ``b`` whose tile keeps ``k`` in its rows is read N-major;
    ``sources``: the ``a`` operands taken from their writers' registers."""
    sources = sources or {}
    k_loop = in_flight(chunk, pending)
    init = zero_init(chunk, forall, {u.store.buffer for u in updates})
    kk = chunk.body.block.args[0]
    old_nest = nest[0]
    old_nest.detach()
    forall.detach()
    rewriter.insert(forall, InsertPoint.before(chunk))
    fbody = forall.body.block
    terminator = fbody.last_op if isinstance(fbody.last_op, tile.YieldOp) else None
    emit = IndexEmitter(fbody, terminator)
    c = AffineConstantExpr
    d_wi = AffineDimExpr(0)
    zero = c(0)
    for key, operand in operands.items():
        alloc = operand.load.buffer.owner
        assert isinstance(alloc, tile.AllocOp)
        if key not in sources:
            alloc.attributes[wgmma.SWIZZLE_ATTR] = IntegerAttr(wgmma.SWIZZLE_BYTES, i64)
    starts: dict[tuple[tuple[object, ...], int], list[SSAValue]] = {}
    for key, operand in operands.items():
        for q in range(extent // wgmma.K if key not in sources else 0):
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
    for update in updates:  # none to read where the products start from zero
        acc = update.store.buffer
        values.append([] if init is not None
                      else [emit.add(loop.LoadOp(acc, amap, thread)) for amap in spots])
    pairs: dict[tuple[tuple[object, ...], int], list[SSAValue]] = {}
    for key, source in sources.items():  # written before the fence: the products read them
        half = source.store.buffer.type.element_type  # type: ignore[attr-defined]
        registers = forward(source, rewriter)
        for q in range(extent // wgmma.K):
            ops, pairs[key, q] = register_fragments(registers, thread, emit.constant(q), 0,
                                                    half)
            for op in ops:
                emit.op(op)
    emit.op(wgmma.FenceOp())  # after the accumulators are read: the products use them
    transposed = {key for key, o in operands.items() if n_major and _n_major(o, kk)}
    for q in range(extent // wgmma.K):
        for u, update in enumerate(updates):
            a, b = operands[update.a], operands[update.b]
            a_from: SSAValue | list[SSAValue] = pairs.get((update.a, q)) or a.load.buffer
            product = wgmma.MmaOp(a_from, starts.get((update.a, q), []), b.load.buffer,
                                  starts[update.b, q], values[u], update.b in transposed,
                                  zeros=0 if values[u] else len(spots))
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
    if init is not None:
        rewriter.erase(init)
    for source in sources.values():
        drop_shared(source, rewriter)
    if k_loop is not None:
        wait_after(k_loop, forall, spots, [u.store.buffer for u in updates], rewriter)


@dataclass
class WgmmaChunkLoop(RewritePattern):
    """Rewrite one chunk loop (see the module docstring), leaving ``pending`` groups in
    flight where its K loop allows, for chunks of up to ``atoms`` swizzle atoms."""

    pending: int = 0
    atoms: int = 2
    n_major: bool = True
    register_a: bool = False

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: scf.ForOp, rewriter: PatternRewriter) -> None:
        chunk = match_chunk_loop(op)
        if (chunk is None or chunk.extent % CHUNK or not 0 < chunk.extent <= self.atoms * CHUNK
                or not mma.is_half(chunk.loaded)):
            return
        n = _layout_fits(chunk.forall, chunk.nest)
        if n is None or not all(_operand_fits(o, chunk.kk, chunk.ivs, chunk.extent,
                                              self.n_major)
                                for o in chunk.operands.values()):
            return
        rows = chunk.nest[0].trip_count
        sources = {key: source for key, o in chunk.operands.items()
                   if (source := register_source(op, chunk.forall, o, chunk.ivs, rows,
                                                 chunk.extent))}
        if sources and not self.register_a:
            return  # mma-fragments reads that a from its writers' registers
        rewrite(op, chunk.forall, chunk.nest, chunk.ivs, chunk.updates, chunk.operands, n,
                rewriter, self.pending, chunk.extent, self.n_major, sources)


@dataclass(frozen=True)
class WgmmaFragments(ModulePass):
    """Warpgroup products for 16-bit chunk loops in a warpgroup's layout (see the module
    docstring). Options: ``arch`` (the pass runs only for sm_90a); ``pending`` (groups left
    in flight at each chunk's wait where the K loop's ``llmopt.lag`` allows: 0 or 1);
    ``atoms`` (the longest chunk taken, in swizzle atoms of 64 values: 1 or 2);
    ``n_major`` (take a ``b`` whose tile keeps ``k`` in its rows, read N-major);
    ``register_a`` (take a chunk whose ``a`` its writers hold in registers, that ``a`` from
    them)."""

    name = "wgmma-fragments"

    arch: str = "sm_90"
    pending: int = 0
    atoms: int = 2
    n_major: bool = True
    register_a: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.arch != WGMMA_ARCH:
            return
        PatternRewriteWalker(KeepLocation(WgmmaChunkLoop(self.pending, self.atoms,
                                                         self.n_major, self.register_a)),
                             apply_recursively=False).rewrite_module(op)
