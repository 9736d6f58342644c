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
:mod:`llmopt.passes.tile._schedule`; 0 = chosen from the shape). The matcher is in
:mod:`~llmopt.passes.tile._register_match`, the tiled kernel's layouts and builder in
:mod:`~llmopt.passes.tile._register_build`.

**Why** one thread per output with a sequential K loop loads two operands per multiply-add;
a ``tm × tn`` micro-tile loads ``tm + tn`` per ``tm·tn`` multiply-adds. The sum over K keeps
its order (k = 0, 1, …), so results round exactly as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
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

from llmopt.dialects import tile
from llmopt.passes._rewrite import KeepLocation
from llmopt.passes.tile._access import launch_grid
from llmopt.passes.tile._register_build import (
    COLUMNS_FASTEST,
    MMA_LAYOUT,
    ROWS_FASTEST,
    ThreadLayout,
    build_tiled_kernel,
    mma_fits,
    thread_layout,
)
from llmopt.passes.tile._register_match import (
    Contraction,
    contraction_schedule,
    factor_types,
    match_contraction,
    tile_periods,
)
from llmopt.passes.tile._schedule import (
    RegisterTile,
    default_blocked,
    kernel_knobs,
    knob,
    set_knob,
)
from llmopt.passes.tile._schedule_tiles import (
    HALF_KINDS,
    tensor_core_kind,
    warpgroup_chunk,
    wide_enough,
)


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
    roles: int = 0

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
        auto = contraction_schedule(found, self.arch, roles=knob(self.roles, op, "roles", 0))
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
        if chunk is not None and found.length is None and wide_enough(tile_, m_ext, n_ext):
            set_knob(tiled, "multicast", 2)  # warp-specialize may pair its blocks
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


@dataclass(frozen=True)
class RegisterTilePass(ModulePass):
    """Tile matrix-product kernels into register micro-tiles (see the module docstring).

    Options: ``bm``, ``bn`` (the block's output tile), ``tm``, ``tn`` (each thread's),
    ``blocked`` (1: a thread's outputs are consecutive; 2: cyclic; 3: the tensor-core
    layout of ``mma-fragments``; 0: the schedule's, else cyclic unless the tiles are
    K-major), ``raster`` (the order of the blocks' tiles, :data:`COLUMNS_FASTEST` or
    :data:`ROWS_FASTEST`; 0: the schedule's, else rows fastest for 16-bit products in the
    tensor-core layout), ``arch`` (whose
    limits the heuristic reads), ``roles`` (2: schedule the products as ones whose copies a
    producer warpgroup issues, 1: as ones whose every thread copies and computes; see
    ``async-copy``); 0 = the kernel's ``llmopt.schedule`` or the heuristic.
    """

    name = "register-tile"

    bm: int = 0
    bn: int = 0
    tm: int = 0
    tn: int = 0
    blocked: int = 0
    raster: int = 0
    arch: str = "sm_90"
    roles: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            KeepLocation(TileContraction(self.bm, self.bn, self.tm, self.tn, self.blocked,
                                         self.arch, self.raster, self.roles)),
            apply_recursively=False,
        ).rewrite_module(op)


__all__ = [
    "COLUMNS_FASTEST",
    "MMA_LAYOUT",
    "ROWS_FASTEST",
    "Contraction",
    "RegisterTilePass",
    "ThreadLayout",
    "TileContraction",
    "build_tiled_kernel",
    "contraction_schedule",
    "erase_if_unused",
    "factor_types",
    "match_contraction",
    "mma_fits",
    "runtime_grid",
    "thread_layout",
    "tile_periods",
]
