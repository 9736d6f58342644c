"""``register-tile``: a matrix-product kernel computes a register micro-tile per thread.

**Matches** a ``tile.kernel`` whose body is one ``tile.forall over threads`` (the default
thread schedule) holding one or more ``loop.reduce add`` over floats with the same trip
count (two for a fused ``silu(x·Wg) · (x·Wu)``), beside region-less loads, stores and
scalar ops (the epilogue: bias, residual, scaling …; and a *prologue* the reductions read,
e.g. a softmax denominator, which depends on no reduction). The reduce bodies are
region-less, read at least two buffers at the reduce index (a product, not a plain sum)
and read nothing the forall writes. Two band dimensions are tiled: ``n``, the
innermost one with extent > 1 (consecutive outputs), and ``m``, the nearest one before it
with extent > 1; the others are batch dimensions. Both extents must be divisible by the
block tile, otherwise the kernel is left alone.

**Runtime rows** (a symbolic length): ``m`` may be a runtime extent (``in [%n max 2048,
512]``), the kernel's length parameter ``%n``; ``n``, the batch dimensions and K must be
static. The schedule is chosen for the maximum; every ``m`` tile is treated as ragged (loads
clamped along the length, stores guarded by ``< %n``); the forall over blocks runs
``ceildiv(%n, bm)`` blocks along ``m`` and the grid is computed before the launch from the
length (``grid [%g max G, 1, 1]``). Any other runtime extent leaves the kernel alone.
``split-k``'s partial kernel of such a product (``in [S, %n max 2048, 512]``, the slice a
static batch dimension) is tiled the same way.

**Produces** the same kernel with a ``tile.forall over blocks`` over (batch…, m / bm,
n / bn) — or, with knob ``raster=2`` (the default of 16-bit products in the tensor-core
layout), over (batch…, n / bn, m / bm), so that consecutive blocks share the weight's rows
instead of the activations' (see :data:`ROWS_FASTEST`). Each block owns a ``bm × bn``
output tile and runs ``(bm/tm)·(bn/tn)`` threads ``(ti, tj)``, each owning ``tm × tn``
outputs (``mi < tm``, ``nj < tn``): *cyclic* (knob ``blocked=2``, the default),
``m = bm·b_m + mi·(bm/tm) + ti`` — consecutive threads on consecutive outputs, so a warp
reading its operands from tiles in the global buffer's order (what ``stage-inputs`` makes
by default) hits rows in different banks, and a thread's K steps are adjacent words, read
as 128-bit vectors; or *blocked* (``blocked=1``, the default
when the kernel's schedule asks for K-major tiles, ``kmajor = 1``), ``m = bm·b_m + ti·tm +
mi`` and ``n = bn·b_n + tj·tn + nj`` — a thread's operands are then adjacent in the K-major
tiles; or the *tensor-core layout* (``blocked=3``: ``f32`` sums, ``tm`` and ``tn`` even; the
default where neither the options nor the kernel's schedule name a tile and the heuristics
pick one of their tensor-core tiles, on sm_80 or newer), which ``mma-fragments`` turns into
``mma.sync``: threads ``(wi, wj, g, t)`` —
warps ``(wi, wj)`` owning ``8·tm × 4·tn`` outputs, lane ``4·g + t`` — and outputs
``(i, rh, j, rl)`` with ``m = bm·b_m + 8·tm·wi + 16·i + 8·rh + g`` and ``n = bn·b_n +
4·tn·wj + 8·j + 2·t + rl``: each 16 × 8 piece of a warp's outputs is one ``mma.sync``
accumulator fragment. The
accumulators are a ``tile.alloc registers`` buffer ``[bm/tm, bn/tn, tm, tn]`` per reduction
(``[wm, wn, 8, 4, tm/2, 2, tn/2, 2]`` in the tensor-core layout);
the reductions become one sequential ``scf.for`` over K around a forall over the block's
threads whose ``mi``/``nj`` loops (marked ``unroll``) update every accumulator of the thread
from the same K step, so each loaded operand is used ``tm`` or ``tn`` times from a register.
The epilogue runs once per output after the loop; the prologue is recomputed in the K loop.
Knobs ``bm``, ``bn``, ``tm``, ``tn``, ``blocked``, ``raster`` (see
:mod:`llmopt.passes.tile._schedule`; 0 = chosen from the shape).

**Why** one thread per output with a sequential K loop loads two operands per multiply-add;
a ``tm × tn`` micro-tile loads ``tm + tn`` per ``tm·tn`` multiply-adds. The sum over K keeps
its order (k = 0, 1, …), so results round exactly as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TypeGuard

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import (
    AnyFloat,
    Float32Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, Region, SSAValue
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
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
from xdsl.traits import is_side_effect_free
from xdsl.utils.exceptions import PassFailedException

from llmopt.dialects import loop, tile
from llmopt.passes._rewrite import KeepLocation
from llmopt.passes.tile._access import (
    UNROLL,
    ClampingCloner,
    Cloner,
    Linear,
    block_threads,
    ceildiv_into,
    close_guards,
    guard_inside,
    launch_grid,
    loop_nest,
)
from llmopt.passes.tile._schedule import (
    HALF_KINDS,
    ProductSchedule,
    RegisterTile,
    choose_product_schedule,
    default_blocked,
    kernel_knobs,
    knob,
    limits,
    set_knob,
    tensor_core_kind,
    warpgroup_chunk,
)


@dataclass(frozen=True)
class Contraction:
    """A matched kernel: its forall, its reductions (one or more over the same K, e.g. the
    gate and up projections of a fused ``silu(x·Wg) · (x·Wu)``), the forall-body ops the
    reductions read (the *prologue*, recomputed per K step) and the roles of the band
    dimensions."""

    forall: tile.ForallOp
    reduces: tuple[loop.ReduceOp, ...]
    prologue: tuple[Operation, ...]
    m: int
    n: int
    length: BlockArgument | None = None
    """The kernel's length parameter when ``m`` is that runtime extent."""

    @property
    def reduce(self) -> loop.ReduceOp:
        """The first reduction (all share the trip count and the type)."""
        return self.reduces[0]

    @property
    def extents(self) -> tuple[int, ...]:
        return self.forall.shape

    @property
    def batch(self) -> list[int]:
        return [d for d in range(len(self.extents)) if d not in (self.m, self.n)]


def _plain(op: Operation) -> bool:
    """A region-less load, store or side-effect-free op."""
    return not op.regions and (isinstance(op, loop.LoadOp | loop.StoreOp)
                               or is_side_effect_free(op))


def match_contraction(kernel: tile.KernelOp) -> Contraction | None:
    """The contraction in ``kernel`` (see the module docstring), or ``None``."""
    foralls = [op for op in kernel.body.block.ops if isinstance(op, tile.ForallOp)]
    others = [op for op in kernel.body.block.ops if not isinstance(op, tile.ForallOp)]
    if len(foralls) != 1 or foralls[0].mapping.data != "threads":
        return None
    if not all(is_side_effect_free(op) and not op.regions for op in others):
        return None
    forall = foralls[0]
    body = list(forall.body.block.ops)
    reduces = [op for op in body if isinstance(op, loop.ReduceOp)]
    if not reduces:
        return None
    first = reduces[0]
    for red in reduces:
        if (red.kind.data != "add" or not isinstance(red.result.type, AnyFloat)
                or red.trip_count != first.trip_count or red.result.type != first.result.type):
            return None
    if not all(_plain(op) for op in body if not isinstance(op, loop.ReduceOp)):
        return None
    written = {op.buffer for op in body if isinstance(op, loop.StoreOp)}
    outside: set[SSAValue] = set()
    for red in reduces:
        body_ops = list(red.body.block.ops)
        if not all(_plain(op) and not isinstance(op, loop.StoreOp) for op in body_ops[:-1]):
            return None
        k = red.body.block.args[0]
        k_loads: set[SSAValue] = set()
        for op in body_ops:
            if isinstance(op, loop.LoadOp):
                if op.buffer in written:
                    return None
                if k in op.indices:
                    k_loads.add(op.buffer)
        if len(k_loads) < 2:
            return None  # a plain sum (no operand reuse to gain from a register tile)
        inside = {r for op in body_ops for r in op.results} | {k}
        outside |= {v for op in body_ops for v in op.operands if v not in inside}
    # Values from outside the reductions: ivs, kernel values, or a prologue of plain
    # forall-body ops that depend on no reduction.
    kernel_values = set(kernel.body.block.args) | {r for op in others for r in op.results}
    prologue: set[Operation] = set()
    todo = list(outside)
    while todo:
        v = todo.pop()
        if v in kernel_values or v in forall.ivs:
            continue
        owner = v.owner
        if not isinstance(owner, Operation) or owner.parent is not forall.body.block:
            return None
        if isinstance(owner, loop.ReduceOp | loop.StoreOp):
            return None
        if isinstance(owner, loop.LoadOp) and owner.buffer in written:
            return None  # recomputed in the K loop, it would run before the store
        if owner not in prologue:
            prologue.add(owner)
            todo.extend(owner.operands)
    extents = forall.shape
    big = [d for d, e in enumerate(extents) if e > 1]
    if len(big) < 2:
        return None
    ordered = tuple(op for op in body if op in prologue)
    found = Contraction(forall, tuple(reduces), ordered, big[-2], big[-1])
    if not kernel.has_runtime_extents:
        return found
    return _with_runtime_rows(kernel, found)


def _with_runtime_rows(kernel: tile.KernelOp, found: Contraction) -> Contraction | None:
    """``found`` with its runtime ``m`` extent, when that is the kernel's only runtime
    extent and a parameter of the kernel (see *Runtime rows*); else ``None``."""
    sizes = found.forall.runtime_sizes
    length = sizes.get(found.m)
    if (set(sizes) != {found.m} or not isinstance(length, BlockArgument)
            or length.block is not kernel.body.block):
        return None
    if any(red.is_dynamic for red in found.reduces):
        return None  # a reduction over the length
    return replace(found, length=length)


def contraction_schedule(found: Contraction, arch: str, rows: int = 0
                         ) -> ProductSchedule | None:
    """What the heuristics choose for ``found`` on ``arch``
    (:func:`~llmopt.passes.tile._schedule.choose_product_schedule` of its shape, its
    accesses' periods and whether its sums may use the tensor cores), for at most ``rows``
    rows (0: its ``m`` extent, the maximum of runtime rows)."""
    ext = found.extents
    kind = tensor_core_kind(arch, found.reduce.result.type, factor_types(found))
    return choose_product_schedule(rows or ext[found.m], ext[found.n],
                                   found.reduce.trip_count,
                                   math.prod(ext[d] for d in found.batch), limits(arch),
                                   len(found.reduces), tile_periods(found),
                                   kind is not None, kind in HALF_KINDS)


def factor_types(found: Contraction) -> list[Attribute]:
    """The types the factors of ``found``'s products are loaded as: a load's element type,
    seen through an ``arith.extf`` (a ``bf16`` weight widened to ``f32``)."""
    types: list[Attribute] = []
    for red in found.reduces:
        for op in red.body.walk():
            if isinstance(op, arith.MulfOp):
                for factor in (op.lhs, op.rhs):
                    owner = factor.owner
                    if isinstance(owner, arith.ExtFOp):
                        factor = owner.input
                    types.append(factor.type)
    return types


def tile_periods(found: Contraction) -> tuple[int, int]:
    """What the block tile's ``bm`` and ``bn`` must divide (0: anything): the greatest common
    divisor of every ``c`` in an ``e floordiv c`` or ``e mod c`` of the kernel's accesses
    whose ``e`` holds the ``m`` (``n``) index. Attention's ``P·V`` written as ``[seq, heads ·
    head_dim]`` reads ``V[j floordiv 128, k, j mod 128]``: a block 112 wide would straddle
    two heads, its accesses would no longer be linear in the block's indices, and
    ``stage-inputs`` could not stage them."""
    ivs = {found.forall.ivs[found.m]: 0, found.forall.ivs[found.n]: 1}
    periods = [0, 0]
    for op in found.forall.walk():
        if not isinstance(op, loop.LoadOp | loop.StoreOp):
            continue
        for result in op.map.data.results:
            for expr in result.dfs():
                # only the innermost: ``(j floordiv 64) floordiv 8`` is constant in a block
                # wherever ``j floordiv 64`` is
                if _div_or_mod(expr) and not any(_div_or_mod(e) for e in expr.lhs.dfs()):
                    for d in expr.lhs.used_dims():
                        which = ivs.get(op.indices[d])
                        if which is not None:
                            periods[which] = math.gcd(periods[which], expr.rhs.value)
    return periods[0], periods[1]


def _div_or_mod(expr: AffineExpr) -> TypeGuard[AffineBinaryOpExpr]:
    """Whether ``expr`` is ``e floordiv c``, ``e ceildiv c`` or ``e mod c`` (``c``
    constant)."""
    return (isinstance(expr, AffineBinaryOpExpr)
            and expr.kind in (AffineBinaryOpKind.FloorDiv, AffineBinaryOpKind.Mod,
                              AffineBinaryOpKind.CeilDiv)
            and isinstance(expr.rhs, AffineConstantExpr))


@dataclass
class TileContraction(RewritePattern):
    """Rewrite one matched kernel (see the module docstring)."""

    bm: int
    bn: int
    tm: int
    tn: int
    blocked: int
    arch: str
    raster: int = 0

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.KernelOp, rewriter: PatternRewriter) -> None:
        found = match_contraction(op)
        if found is None:
            return
        ext = found.extents
        m_ext, n_ext = ext[found.m], ext[found.n]
        if found.length is not None and op.grid_size is None:
            return  # runtime rows need a launch whose grid follows the length
        typ = found.reduce.result.type
        auto = contraction_schedule(found, self.arch)
        default = auto.tile if auto is not None else RegisterTile(0, 0, 1, 1)
        tile_ = RegisterTile(knob(self.bm, op, "bm", default.bm),
                             knob(self.bn, op, "bn", default.bn),
                             knob(self.tm, op, "tm", default.tm),
                             knob(self.tn, op, "tn", default.tn))
        if not tile_.bm or not tile_.fits(m_ext, n_ext, ragged=True):
            return
        named = {"bm", "bn", "tm", "tn"} & kernel_knobs(op).keys()
        heuristic = not (named or self.bm or self.bn or self.tm or self.tn)
        tensor_cores = heuristic and auto is not None and auto.tensor_cores
        layout = knob(self.blocked, op, "blocked",
                      MMA_LAYOUT if tensor_cores else default_blocked(op))
        if layout == MMA_LAYOUT and not mma_fits(tile_, typ):
            raise PassFailedException(
                f"register-tile: blocked=3 (tensor-core fragments) needs f32 sums, even tm "
                f"and tn, and bm, bn multiples of 8·tm and 4·tn; kernel "
                f"'{op.sym_name.data}' has {typ} and {tile_}")
        halves = tensor_core_kind(self.arch, typ, factor_types(found)) in HALF_KINDS
        raster = knob(self.raster, op, "raster",
                      ROWS_FASTEST if layout == MMA_LAYOUT and halves else COLUMNS_FASTEST)
        grid = None
        if found.length is not None:
            grid = runtime_grid(op, found, tile_, rewriter)
        old_grid = op.grid_size
        tiled = build_tiled_kernel(op, found, tile_, layout, grid, raster == ROWS_FASTEST)
        chunk = warpgroup_chunk(tile_, halves, self.arch) if layout == MMA_LAYOUT else None
        if (chunk is not None and found.reduce.trip_count % chunk == 0
                and "bk" not in kernel_knobs(tiled)):
            set_knob(tiled, "bk", chunk)  # wgmma-fragments reads rows of 128 bytes
        rewriter.replace(op, tiled)
        if old_grid is not None:
            erase_if_unused(old_grid, rewriter)


def runtime_grid(op: tile.KernelOp, found: Contraction, t: RegisterTile,
                 rewriter: PatternRewriter) -> SSAValue:
    """The grid of the tiled kernel with runtime rows, computed before ``op`` from the
    function-level length: ``batch · ceildiv(length, bm) · ceildiv(n, bn)`` blocks."""
    assert found.length is not None
    ext = found.extents
    per_row_block = math.prod(ext[d] for d in found.batch) * -(-ext[found.n] // t.bn)
    ops, grid = launch_grid(op.buffers[found.length.index], t.bm, per_row_block)
    rewriter.insert(ops, InsertPoint.before(op))
    return grid


def erase_if_unused(value: SSAValue, rewriter: PatternRewriter) -> None:
    """Erase the side-effect-free ops that computed ``value`` once nothing uses them."""
    todo = [value]
    while todo:
        v = todo.pop()
        owner = v.owner
        if (v.uses or not isinstance(owner, Operation) or owner.regions
                or not is_side_effect_free(owner) or any(r.uses for r in owner.results)):
            continue
        operands = list(owner.operands)
        rewriter.erase(owner)
        todo.extend(operands)


MMA_LAYOUT = 3
"""``blocked`` value of the tensor-core layout (``mma-fragments``)."""

COLUMNS_FASTEST, ROWS_FASTEST = 1, 2
"""Values of the ``raster`` knob: the order in which consecutive blocks take the output
tiles — along a row of tiles (``n`` fastest), or down a column (``m`` fastest: the blocks
that read the same ``bn`` rows of the weight run together, so the weight is read from
memory about once and the activations, a few MB, stay in L2; the default of 16-bit
tensor-core products, whose weights of tens to hundreds of MB do not fit in L2 and were
otherwise read once per row of tiles)."""


def mma_fits(t: RegisterTile, typ: Attribute) -> bool:
    """Whether ``t`` can take the tensor-core layout: ``f32`` sums, each thread's outputs
    whole ``m16n8`` fragments (``tm``, ``tn`` even), whole warp tiles in the block."""
    return (isinstance(typ, Float32Type) and t.tm % 2 == 0 and t.tn % 2 == 0
            and t.bm % (8 * t.tm) == 0 and t.bn % (4 * t.tn) == 0)


@dataclass(frozen=True)
class ThreadLayout:
    """Which outputs a block's threads own: the ``tile.forall over block_threads`` (extents,
    names), the ``loop.for`` nest of a thread's outputs, and ``m``/``n`` of an output as
    ``(coefficient, position)`` pairs over the forall's ivs then the nest's (the block's
    ``bm·b_m`` / ``bn·b_n`` added separately)."""

    forall: tuple[int, ...]
    forall_names: tuple[str, ...]
    nest: tuple[int, ...]
    nest_names: tuple[str, ...]
    m: tuple[tuple[int, int], ...]
    n: tuple[tuple[int, int], ...]


def thread_layout(t: RegisterTile, layout: int) -> ThreadLayout:
    """The :class:`ThreadLayout` of ``register-tile``'s ``blocked`` knob: 1 blocked, 2
    cyclic, 3 the tensor-core layout — warps ``(wi, wj)`` own ``8·tm × 4·tn`` warp tiles;
    lane ``4·g + t`` owns, of each 16 × 8 fragment ``(i, j)``, rows ``g`` and ``g + 8``
    (``rh``) and columns ``2·t`` and ``2·t + 1`` (``rl``): what ``mma.sync`` reads and writes
    as ``C`` and ``D``."""
    wm, wn = t.bm // t.tm, t.bn // t.tn
    if layout == MMA_LAYOUT:
        wtm, wtn = 8 * t.tm, 4 * t.tn
        return ThreadLayout((t.bm // wtm, t.bn // wtn, 8, 4), ("wi", "wj", "g", "t"),
                            (t.tm // 2, 2, t.tn // 2, 2), ("i", "rh", "j", "rl"),
                            ((wtm, 0), (1, 2), (16, 4), (8, 5)),
                            ((wtn, 1), (2, 3), (8, 6), (1, 7)))
    if layout == 1:
        return ThreadLayout((wm, wn), ("ti", "tj"), (t.tm, t.tn), ("mi", "nj"),
                            ((t.tm, 0), (1, 2)), ((t.tn, 1), (1, 3)))
    return ThreadLayout((wm, wn), ("ti", "tj"), (t.tm, t.tn), ("mi", "nj"),
                        ((wm, 2), (1, 0)), ((wn, 3), (1, 1)))


def build_tiled_kernel(op: tile.KernelOp, found: Contraction, t: RegisterTile,
                       layout: int = 2, grid: SSAValue | None = None,
                       rows_fastest: bool = False) -> tile.KernelOp:
    """The register-tiled version of ``op``, its threads' outputs placed by ``layout``
    (:func:`thread_layout`); with runtime rows, ``grid`` is the launch's runtime grid. The
    forall over blocks is over (batch…, ``m`` tiles, ``n`` tiles), or with
    ``rows_fastest`` over (batch…, ``n`` tiles, ``m`` tiles) (:data:`ROWS_FASTEST`)."""
    ext = found.extents
    lay = thread_layout(t, layout)
    m_ext, n_ext = ext[found.m], ext[found.n]
    tiles = [-(-m_ext // t.bm), -(-n_ext // t.bn)]
    m_at = 1 if rows_fastest else 0  # where the m tiles are, after the batch dimensions
    block_ext = [ext[d] for d in found.batch] + (tiles[::-1] if rows_fastest else tiles)
    ragged = {found.m: m_ext % t.bm != 0 or found.length is not None,
              found.n: n_ext % t.bn != 0}
    kernel_args = set(op.body.block.args)
    points = math.prod(block_ext)
    new = tile.KernelOp(op.sym_name.data, [min(points, 2**31 - 1), 1, 1], [t.threads, 1, 1],
                        list(op.buffers), grid_size=grid)
    new.attributes |= op.attributes
    body = new.body.block
    kernel_values: dict[SSAValue, SSAValue] = dict(zip(op.body.block.args, body.args,
                                                       strict=True))
    for other in op.body.block.ops:
        if other is found.forall:
            continue
        copy = other.clone(value_mapper=kernel_values)
        body.add_op(copy)
        kernel_values.update(zip(other.results, copy.results, strict=True))

    sizes: dict[int, SSAValue] = {}
    m_bound: SSAValue | int = m_ext
    batches = len(found.batch)
    if found.length is not None:
        m_bound = kernel_values[found.length]
        sizes[batches + m_at] = ceildiv_into(body, m_bound, t.bm)
    blocks = tile.ForallOp(block_ext, "blocks", sizes=sizes)
    body.add_op(blocks)
    bivs = list(blocks.ivs)
    b_m, b_n = bivs[batches + m_at], bivs[batches + 1 - m_at]
    for arg, name in zip(bivs, [f"b{d}" for d in found.batch], strict=False):
        arg.name_hint = name
    b_m.name_hint, b_n.name_hint = "bm", "bn"
    batch_ivs = dict(zip(found.batch, bivs, strict=False))
    typ = found.reduce.result.type
    accs = []
    for i, _ in enumerate(found.reduces):
        acc = tile.AllocOp("registers", MemRefType(typ, [*lay.forall, *lay.nest]))
        acc.result.name_hint = "acc" if len(found.reduces) == 1 else f"acc{i}"
        blocks.body.block.add_op(acc)
        accs.append(acc.result)
    acc_map = AffineMap.identity(len(lay.forall) + len(lay.nest))

    def point_cloner(*ivs: SSAValue, clamp: bool = True) -> Cloner:
        cloner_cls = ClampingCloner if clamp and any(ragged.values()) else Cloner
        subst: dict[SSAValue, Linear] = {}
        for d, iv in enumerate(found.forall.ivs):
            if d == found.m:
                subst[iv] = Linear.of((t.bm, b_m), *((c, ivs[k]) for c, k in lay.m))
            elif d == found.n:
                subst[iv] = Linear.of((t.bn, b_n), *((c, ivs[k]) for c, k in lay.n))
            elif ext[d] == 1:
                subst[iv] = Linear.of()
            else:
                subst[iv] = Linear.of((1, batch_ivs[d]))
        cloner = cloner_cls(subst, dict(kernel_values))
        if isinstance(cloner, ClampingCloner):
            cloner.global_buffers = {kernel_values[a] for a in kernel_args}
        return cloner

    def micro(name: str) -> tuple[tile.ForallOp, Block, list[SSAValue]]:
        forall, tivs = block_threads(list(lay.forall), list(lay.forall_names))
        nest, inner, nivs = loop_nest(list(lay.nest), list(lay.nest_names), UNROLL)
        forall.body.block.add_op(nest)
        forall.attributes["llmopt.role"] = StringAttr(name)
        if layout == MMA_LAYOUT:
            forall.attributes["llmopt.layout"] = StringAttr("mma")
        return forall, inner, [*tivs, *nivs]

    # Zero the accumulators.
    init, inner, ivs = micro("init")
    zero = arith.ConstantOp(FloatAttr(0.0, typ))
    inner.add_op(zero)
    for acc in accs:
        inner.add_op(loop.StoreOp(zero.result, acc, acc_map, ivs))
    blocks.body.block.add_op(init)

    # The K loop: every accumulator of the thread takes the same step.
    c0 = arith.ConstantOp(IntegerAttr(0, IndexType()))
    ck = arith.ConstantOp(IntegerAttr(found.reduce.trip_count, IndexType()))
    c1 = arith.ConstantOp(IntegerAttr(1, IndexType()))
    k_block = Block(arg_types=[IndexType()])
    k_iv = k_block.args[0]
    k_iv.name_hint = "k"
    step, inner, ivs = micro("update")
    cloner = point_cloner(*ivs)
    for op_ in found.prologue:
        cloner.clone_into(op_, inner)
    for red, acc in zip(found.reduces, accs, strict=True):
        cloner.values[red.body.block.args[0]] = k_iv
        red_ops = list(red.body.block.ops)
        for red_op in red_ops[:-1]:
            cloner.clone_into(red_op, inner)
        yielded = red_ops[-1].operands[0]
        old = loop.LoadOp(acc, acc_map, ivs)
        total = arith.AddfOp(old.result, cloner.value(yielded, inner))
        inner.add_ops([old, total, loop.StoreOp(total.result, acc, acc_map, ivs)])
    k_block.add_ops([step, scf.YieldOp()])
    k_loop = scf.ForOp(c0.result, ck.result, c1.result, [], Region(k_block))
    k_loop.attributes["llmopt.role"] = StringAttr("k_loop")
    blocks.body.block.add_ops([c0, ck, c1, k_loop])

    # The epilogue, once per output (of a ragged tile: once per output inside the output).
    epi, inner, ivs = micro("epilogue")
    cloner = point_cloner(*ivs, clamp=False)
    bounds: dict[int, SSAValue | int] = {found.m: m_bound, found.n: n_ext}
    edges = [(found.forall.ivs[d], bounds[d]) for d, cut in ragged.items() if cut]
    if edges:
        inner = guard_inside(inner, [(cloner.value(iv, inner), e) for iv, e in edges])
    for red, acc in zip(found.reduces, accs, strict=True):
        result = loop.LoadOp(acc, acc_map, ivs)
        result.result.name_hint = "sum"
        inner.add_op(result)
        cloner.values[red.result] = result.result
    for other in found.forall.body.block.ops:
        if not isinstance(other, loop.ReduceOp):
            cloner.clone_into(other, inner)
    close_guards(epi.body.block)
    blocks.body.block.add_op(epi)
    return new


@dataclass(frozen=True)
class RegisterTilePass(ModulePass):
    """Tile matrix-product kernels into register micro-tiles (see the module docstring).

    Options: ``bm``, ``bn`` (the block's output tile), ``tm``, ``tn`` (each thread's),
    ``blocked`` (1: a thread's outputs are consecutive; 2: cyclic; 3: the tensor-core
    layout of ``mma-fragments``; 0: the schedule's, else cyclic unless the tiles are
    K-major), ``raster`` (the order of the blocks' tiles, :data:`COLUMNS_FASTEST` or
    :data:`ROWS_FASTEST`; 0: the schedule's, else rows fastest for 16-bit products in the
    tensor-core layout), ``arch`` (whose
    limits the heuristic reads); 0 = the kernel's ``llmopt.schedule`` or the heuristic.
    """

    name = "register-tile"

    bm: int = 0
    bn: int = 0
    tm: int = 0
    tn: int = 0
    blocked: int = 0
    raster: int = 0
    arch: str = "sm_90"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            KeepLocation(TileContraction(self.bm, self.bn, self.tm, self.tn, self.blocked,
                                         self.arch, self.raster)),
            apply_recursively=False,
        ).rewrite_module(op)
