"""Register tiles the Tile-IR heuristics and ``llmopt tune`` consider, and their modelled
speed: the CUDA-core candidates (:data:`TILE_CANDIDATES`), the tensor-core ones of ``f32``
and 16-bit products (``mma.sync``, and ``wgmma`` on sm_90a), what the tensor cores multiply
for a product's types (:func:`tensor_core_kind`), and a tile's efficiency and cost
(:func:`tile_efficiency`, :func:`tile_cost`). The choice among them is in
:mod:`llmopt.passes.tile._schedule_product`.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type
from xdsl.ir import Attribute

from llmopt.passes.tile._schedule import RegisterTile
from llmopt.target import MMA_SHAPES, WGMMA_ARCH
from llmopt.target import Target as GpuLimits
from llmopt.target import for_arch as limits

TILE_CANDIDATES = ((128, 64, 8, 4), (128, 112, 8, 7), (64, 112, 8, 7), (64, 128, 4, 8),
                   (64, 176, 4, 11), (64, 64, 4, 4), (128, 128, 8, 8), (32, 64, 2, 4),
                   (64, 32, 4, 2), (32, 32, 2, 2), (16, 64, 1, 4), (32, 112, 4, 7),
                   (32, 16, 2, 1), (16, 32, 1, 2), (16, 16, 1, 1))
"""Register tiles ``(bm, bn, tm, tn)``, the preferred first among equals. The ``tn = 7``
tiles fit outputs whose width is a multiple of 112 (Qwen2.5's 3584), ``tn = 11`` those of
176 (TinyLlama's 5632): blocks of powers of two make 11·2ⁱ blocks of such a width, a third
of a wave too many or too few on 132 multiprocessors."""

TILE_EFFICIENCY = {(8, 7): 1.1, (8, 8): 1.1, (8, 4): 1.0, (4, 11): 0.95, (4, 4): 0.89,
                   (4, 7): 0.86, (4, 8): 0.86, (2, 4): 0.63, (4, 2): 0.6, (2, 2): 0.45,
                   (1, 4): 0.4, (2, 1): 0.25, (1, 2): 0.25, (1, 1): 0.15}
"""Speed of a block's arithmetic per micro-tile ``(tm, tn)``, relative to 8×4: fitted on the
H200 on projections whose blocks fill the GPU equally; 4×8 is slower than 8×4, 8×7 (56
accumulators) faster on the 3584-wide products, 4×11 on the 5632-wide ones in one wave. 8×8
needs more registers than two blocks a multiprocessor leave (forcing two blocks spilled),
yet one 128×128 block a multiprocessor of it beat 128×64 blocks of 8×4 wherever the tuner
timed both on the H200 (the committed table, ``passes/tile/tuned/sm_90.json``), hence 1.1,
as 8×7. Timings: ``bench/results/schedule-constants.md`` (``TILE_EFFICIENCY``)."""

SMALL_BLOCK_EFFICIENCY = 0.9
"""Factor on :data:`TILE_EFFICIENCY` for blocks of fewer than 256 threads: in a wave of one
block a multiprocessor, four warps hide less latency than eight. For every kernel of
Qwen2.5-7B's 128×3584×3584 and 128×3584×18944 products the tuner picked 128×112 blocks (256
threads of 8×7) in four slices over 64×112 blocks (128 threads); without this factor the
model takes two slices of 64×112 and never the tuner's pick. Timings:
``bench/results/schedule-constants.md`` (``SMALL_BLOCK_EFFICIENCY``)."""


MMA_TILES = (RegisterTile(128, 128, 8, 8), RegisterTile(128, 64, 8, 4),
             RegisterTile(64, 128, 4, 8))
"""Register tiles of the tensor-core layout (``register-tile{blocked=3}``, then
``mma-fragments``) that the heuristics and ``llmopt tune`` consider: warp tiles of 64 × 32,
64 × 16 and 32 × 32, 256 threads a block."""

MMA_EFFICIENCY = {(8, 8): 1.5, (8, 4): 1.4, (4, 8): 1.25}
"""Speed of a tensor-core block (:data:`MMA_TILES`, three TF32 ``mma.sync`` per ``f32``
product) on the scale of :data:`TILE_EFFICIENCY`, fitted on the H200 against the FMA
schedules of the same products: 128×128 blocks of 8×8 1.49–1.52, 128×64 blocks of 8×4
1.35–1.44; 64×128 of 4×8 won only the tuner's 128-row products. Timings:
``bench/results/schedule-constants.md`` (``MMA_EFFICIENCY``)."""

MMA_HALF_TILES = (RegisterTile(128, 256, 8, 16), RegisterTile(256, 128, 8, 16),
                  RegisterTile(128, 128, 8, 16), *MMA_TILES)
"""Tensor-core tiles of ``bf16``/``f16`` products (one ``m16n8k16`` ``mma.sync`` per
16 steps of K, fragments read by ``ldmatrix``): those of :data:`MMA_TILES` and warp tiles
of 64 × 64 (``tm = 8``, ``tn = 16``: 128 accumulators a thread), eight warps in 128 × 256
or 256 × 128 blocks, four in 128 × 128 ones. A warp of a 64 × 64 tile reads four ``A`` and
four ``B`` ``ldmatrix.x4`` per 32 products of a K step, one of 64 × 16 (the 128 × 64 block)
four and one per 8: the shared-memory reads and the index arithmetic per product shrink
with the warp tile. NVRTC's SASS of Qwen2.5-7B's 512 × 18944 × 3584 product on sm_90: 108
instructions a warp per K chunk of 32 for 16 ``HMMA`` (64 × 16), 146 for 32 (64 × 32), 216
for 64 (64 × 64, 224 registers, no spills: one block of eight warps a multiprocessor)."""

MMA_HALF_EFFICIENCY = {(8, 16): 7.5, (8, 8): 5.5, (8, 4): 4.5, (4, 8): 3.5}
"""Speed of a 16-bit tensor-core block (:data:`MMA_HALF_TILES`) on the scale of
:data:`TILE_EFFICIENCY`. 8×4 and 8×8 are fitted to the op suite's ``bf16`` products on the
H200 (4.5–4.9 and 5.3–6.3); 8×16 is 8×8 scaled by the instructions a K chunk issues per
``HMMA`` (:data:`MMA_HALF_TILES`: 4.6 for 64 × 32 warp tiles, 3.4 for 64 × 64), not yet
measured; 4×8 is a guess below 8×4. Timings: ``bench/results/schedule-constants.md``
(``MMA_HALF_EFFICIENCY``)."""

WGMMA_TILES = (RegisterTile(128, 256, 2, 64), RegisterTile(128, 224, 2, 56),
               RegisterTile(128, 192, 2, 48), RegisterTile(128, 176, 2, 44),
               RegisterTile(128, 128, 2, 32), RegisterTile(128, 112, 2, 28),
               RegisterTile(64, 256, 2, 64), RegisterTile(64, 128, 2, 32),
               RegisterTile(128, 64, 2, 16))
"""Tensor-core tiles of ``bf16``/``f16`` products on sm_90a, in a warpgroup's accumulator
layout (:func:`is_wgmma_tile`), which ``wgmma-fragments`` turns into ``wgmma.mma``: two
warpgroups (``bm = 128``) or one, each ``64 × bn``. The 64-column tile keeps a fused
gate/up product (two reductions: 64 accumulators a thread) on them. The 224-column tile
(``m64n224k16``) divides Qwen2.5's 3584 into 16 columns of blocks where 256 makes 14: at
1000 rows 128 blocks instead of 112 on 132 multiprocessors, at 2047 rows 256 (two waves
of smaller blocks) instead of 224 (two waves of larger ones), the wave quantisation
cuBLAS avoids with its 232- and 112-column tiles."""

WGMMA_WAVE_TILES = (RegisterTile(128, 192, 2, 48), RegisterTile(128, 176, 2, 44),
                    RegisterTile(128, 112, 2, 28))
"""The :data:`WGMMA_TILES` whose widths exist to fill the waves of one model's widths, as
224 does for 3584: 176 divides TinyLlama's 5632 into 32 columns of blocks (128 blocks at
512 rows, where 256 makes 88), 112 Qwen2.5-7B's 3584 into 32 (128 where 128 makes 112),
and 192 overhangs its 18944 by 64 columns in three whole waves at 512 rows (396 blocks,
where 256 makes 296). Each ran faster on an H100 than the tile it replaced
(``bench/results/gemm-bf16-wave-tiles-h100.md``); their efficiencies are interpolated by
width between 128 and 256 columns. Two-role products of one reduction only: the fused
gate/up's tiles are fitted on its own timings (:data:`WGMMA_PRODUCER_FUSED_EFFICIENCY`),
and one role's on the 128- and 256-column tiles (:data:`WGMMA_EFFICIENCY`)."""

CLUSTER_ROWS = 128
"""Rows of the two-warpgroup tiles whose products may run in clusters (see
:data:`CLUSTER_MIN_COLUMNS`)."""

CLUSTER_MIN_COLUMNS = 64
"""Column blocks of a two-warpgroup product (two or more row blocks) from which
``register-tile`` asks for clusters of two blocks that share the weight tile (the knob
``multicast = 2``, which ``warp-specialize`` follows when it gives the product a producer):
on an H100 Qwen2.5-7B's 18944-column products (99 column blocks of 192) ran 2.4-6.8%
faster at 200, 500, 512 and 1000 rows and its fused gate/up 1.4-4.9%; at 2047 rows they
were even, and products of at most 32 column blocks (TinyLlama's, Qwen2.5-7B's
3584-column ones) 1-5% slower (``bench/results/gemm-bf16-clusters-h100.md``)."""

def wide_enough(t: RegisterTile, m: int, n: int) -> bool:
    """Whether a two-warpgroup product of ``m × n`` outputs in tiles ``t`` has the column
    blocks (:data:`CLUSTER_MIN_COLUMNS`) and row bands (two) to run in clusters of two."""
    return (t.bm == CLUSTER_ROWS and -(-m // t.bm) >= 2
            and -(-n // t.bn) >= CLUSTER_MIN_COLUMNS)


WGMMA_EFFICIENCY = {(2, 64): 10.0, (2, 56): 10.0, (2, 48): 10.0, (2, 44): 10.0,
                    (2, 32): 12.5, (2, 28): 12.5, (2, 16): 8.0}
"""Speed of a :data:`WGMMA_TILES` block on the scale of :data:`MMA_HALF_EFFICIENCY`, above
the best ``mma.sync`` tile's (a warpgroup's product reads its operands from shared memory
itself, no ``ldmatrix``). 128 columns (``tn = 32``) rank before 256: on the H200 the
products of Qwen2.5-7B and TinyLlama at 512 rows ran faster in 64 × 128 or 128 × 128 blocks
than in 64 × 256 or 128 × 256 ones (``bench/results/gemm-bf16-h200.md``); 64 columns (two
reductions' accumulators, the fused gate/up) an estimate."""

WGMMA_PRODUCER_EFFICIENCY = {(128, 256): 15.0, (128, 224): 14.4, (128, 192): 13.75,
                             (128, 176): 13.45, (128, 128): 12.5, (128, 112): 12.2,
                             (64, 256): 10.0, (64, 128): 9.7, (128, 64): 8.0}
"""Speed of a :data:`WGMMA_TILES` block whose copies a producer warpgroup issues with bulk
tensor copies (a two-role product, ``async-copy``'s ``roles = 2``), by its ``bm × bn``: one
block a multiprocessor, so the tiles of two computing warpgroups rank first and the widest
most. Fitted on the H100 (``bench/results/gemm-bf16-tma-h100.md``); the 64-row, 64-column
and 224-column tiles are estimates (224: between 128 and 256 by its columns; for a fused
product of several reductions see :data:`WGMMA_PRODUCER_FUSED_EFFICIENCY`). Timings:
``bench/results/schedule-constants.md`` (``WGMMA_PRODUCER_EFFICIENCY``)."""

WGMMA_PRODUCER_FUSED_EFFICIENCY = {(128, 64): 10.0}
""":data:`WGMMA_PRODUCER_EFFICIENCY` of the tiles of a two-role product of several reductions
(the fused gate/up projections), where they differ: the 64-column tile, two warpgroups of
64 × 64 for each reduction, ran faster on the H200 than one warpgroup of 64 × 128 at 100
rows, and than 128 × 128 where it took one wave fewer (TinyLlama's at 500 rows). Timings:
``bench/results/schedule-constants.md`` (``WGMMA_PRODUCER_FUSED_EFFICIENCY``)."""

WGMMA_BK = 64
"""The K chunk of a :data:`WGMMA_TILES` block: one 128-byte row of 16-bit values, what a
swizzled tile holds."""


def is_wgmma_tile(t: RegisterTile) -> bool:
    """Whether ``t``'s tensor-core layout is a warpgroup's accumulator layout: ``tm = 2``
    (a warp's 16 rows), one warp column (``bn = 4·tn``), warps in fours, ``bn`` at most
    256."""
    return (t.tm == 2 and t.bn == 4 * t.tn and t.bm % (16 * 4) == 0
            and 8 <= t.bn <= 256)


def warpgroup_chunk(t: RegisterTile, halves: bool, arch: str) -> int | None:
    """The K chunk of tile ``t`` of a product of 16-bit factors (``halves``) on ``arch`` when
    ``wgmma-fragments`` will run it (:data:`WGMMA_BK`), else ``None``."""
    return WGMMA_BK if halves and arch == WGMMA_ARCH and is_wgmma_tile(t) else None


MMA_HALF_ACCUMULATORS = 128
"""Accumulators a thread a 16-bit tensor-core tile of one reduction may have, or a two-role
warpgroup tile of several (any other tile of several reductions keeps the limit of 64 of
the others: its fragments or copies take registers too)."""

LONE_WARPS = 8
"""Warps a multiprocessor needs to hide the latency of a 16-bit tensor-core block's
``ldmatrix``, barriers and copies: a block of fewer that runs alone on its multiprocessor
(fewer blocks than two a multiprocessor) counts at :data:`LONE_BLOCK_EFFICIENCY`."""

LONE_BLOCK_EFFICIENCY = 0.7
"""Factor on :data:`MMA_HALF_EFFICIENCY` for a block of fewer than :data:`LONE_WARPS` warps
that runs alone on its multiprocessor (an estimate: one warp a scheduler has nothing to
issue while it waits on a barrier or an ``ldmatrix``)."""


_FACTOR_KINDS: dict[type, str] = {Float32Type: "tf32", BFloat16Type: "bf16", Float16Type: "f16"}
"""What the tensor cores multiply for factors loaded as each type."""

HALF_KINDS = ("bf16", "f16")
"""The 16-bit :func:`tensor_core_kind` values (one ``m16n8k16`` per product)."""


def tensor_core_kind(arch: str, sum_type: Attribute,
                     factors: Sequence[Attribute] = ()) -> str | None:
    """What ``arch``'s tensor cores multiply for a product summing ``sum_type``: ``"tf32"``
    for ``f32`` factors (three TF32 ``mma.sync``, sm_80 or newer), ``"bf16"`` or ``"f16"``
    for factors all of that type (widened to ``f32``: one ``m16n8k16`` ``mma.sync``);
    ``None`` where they do not apply (sums that are not ``f32``, mixed factors, an older
    GPU). ``factors``: the types the product's factors are loaded as (none given: ``f32``)."""
    if not isinstance(sum_type, Float32Type):
        return None
    kinds = {_FACTOR_KINDS.get(type(t)) for t in factors} or {"tf32"}
    if len(kinds) != 1 or None in kinds:
        return None
    kind = kinds.pop()
    assert kind is not None
    shape = next(s for s in MMA_SHAPES if s.operands == kind)
    return kind if limits(arch).has_mma(shape) else None


def has_tensor_cores(arch: str, sum_type: Attribute,
                     factors: Sequence[Attribute] = ()) -> bool:
    """Whether a product may run on ``arch``'s tensor cores (:func:`tensor_core_kind`)."""
    return tensor_core_kind(arch, sum_type, factors) is not None


def mma_tiles(halves: bool, arch: str = "") -> tuple[RegisterTile, ...]:
    """The tensor-core tiles the heuristics and ``llmopt tune`` consider: of 16-bit factors
    (``halves``) :data:`MMA_HALF_TILES` (and on sm_90a :data:`WGMMA_TILES` first), of
    ``f32`` ones :data:`MMA_TILES`."""
    if halves and arch == WGMMA_ARCH:
        return WGMMA_TILES + MMA_HALF_TILES
    return MMA_HALF_TILES if halves else MMA_TILES


def mma_accumulators(halves: bool, accumulators: int, warpgroup: bool = False) -> int:
    """Accumulators a thread a tensor-core tile of ``accumulators`` reductions may hold: a
    warpgroup tile (:func:`is_wgmma_tile`) of 16-bit factors whose copies a producer
    warpgroup issues (``warpgroup``) reads its operands from shared memory, not registers,
    and its computing warpgroups get the producer's registers, so it keeps
    :data:`MMA_HALF_ACCUMULATORS` over all its reductions."""
    if halves and (accumulators == 1 or warpgroup):
        return MMA_HALF_ACCUMULATORS
    return 64


def tile_efficiency(t: RegisterTile, tensor_cores: bool = False, halves: bool = False,
                    blocks: int = 0, gpu: GpuLimits | None = None, roles: int = 1,
                    accumulators: int = 1) -> float:
    """:data:`TILE_EFFICIENCY` of ``t``'s micro-tile (0.15 for one not in the table), times
    :data:`SMALL_BLOCK_EFFICIENCY` for a block of fewer than 256 threads; on the tensor
    cores :data:`MMA_EFFICIENCY`, or with 16-bit factors (``halves``)
    :data:`MMA_HALF_EFFICIENCY`, times :data:`LONE_BLOCK_EFFICIENCY` for a block of fewer
    than :data:`LONE_WARPS` warps when its ``blocks`` leave some of ``gpu``'s
    multiprocessors a single one; a warpgroup tile of a two-role product (``roles = 2``)
    at :data:`WGMMA_PRODUCER_EFFICIENCY`, or of one of several reductions (``accumulators``)
    at :data:`WGMMA_PRODUCER_FUSED_EFFICIENCY` where that has the tile."""
    if tensor_cores and halves and roles == 2 and is_wgmma_tile(t):
        if accumulators > 1 and (t.bm, t.bn) in WGMMA_PRODUCER_FUSED_EFFICIENCY:
            return WGMMA_PRODUCER_FUSED_EFFICIENCY[t.bm, t.bn]
        return WGMMA_PRODUCER_EFFICIENCY.get((t.bm, t.bn), WGMMA_EFFICIENCY[t.tm, t.tn])
    if tensor_cores and halves:
        lone = (gpu is not None and t.threads < 32 * LONE_WARPS
                and blocks < 2 * gpu.sms)
        table = WGMMA_EFFICIENCY if is_wgmma_tile(t) else MMA_HALF_EFFICIENCY
        return table[t.tm, t.tn] * (LONE_BLOCK_EFFICIENCY if lone else 1.0)
    if tensor_cores:
        return MMA_EFFICIENCY[t.tm, t.tn]
    return (TILE_EFFICIENCY.get((t.tm, t.tn), 0.15)
            * (SMALL_BLOCK_EFFICIENCY if t.threads < 256 else 1.0))


def tile_cost(t: RegisterTile, blocks: int, gpu: GpuLimits) -> float:
    """Time of the product in units of one multiply-add row, up to a constant: the busiest
    multiprocessor runs ``ceil(blocks / SMs)`` blocks of ``bm·bn`` outputs each."""
    return -(-blocks // gpu.sms) * t.bm * t.bn / tile_efficiency(t)


def fitting_tiles(m: int, n: int, accumulators: int = 1, periods: tuple[int, int] = (0, 0),
                  ragged: bool = False) -> list[RegisterTile]:
    """The :data:`TILE_CANDIDATES` that divide an ``m × n`` output (any, with ``ragged``)
    and the ``periods`` of its accesses (see :meth:`RegisterTile.fits`), with at most 64
    accumulator registers a thread over ``accumulators`` reductions."""
    return [t for t in (RegisterTile(*c) for c in TILE_CANDIDATES)
            if t.fits(m, n, periods, ragged) and t.tm * t.tn * accumulators <= 64]
