"""The schedule heuristics of a matrix product: its register tile
(:func:`choose_register_tile`), K chunk (:func:`choose_bk`) and K slices
(:func:`split_for`), and the time model that weighs tiles and slices together
(:func:`product_time`, :func:`choose_product_schedule`). The tiles and their efficiencies
are in :mod:`llmopt.passes.tile._schedule_tiles`.
"""

from __future__ import annotations

from typing import NamedTuple

from llmopt.passes.tile._schedule import PRODUCER_MIN_CHUNKS, PRODUCER_ROLES, RegisterTile
from llmopt.passes.tile._schedule_tiles import (
    WGMMA_BK,
    WGMMA_WAVE_TILES,
    fitting_tiles,
    is_wgmma_tile,
    mma_accumulators,
    mma_tiles,
    tile_cost,
    tile_efficiency,
)
from llmopt.target import Target as GpuLimits


class ProductSchedule(NamedTuple):
    """What the heuristics pick for a matrix product: the register tile, the K slices, and
    whether the tile takes the tensor-core layout (``register-tile{blocked=3}``)."""

    tile: RegisterTile
    split: int
    tensor_cores: bool = False


def choose_register_tile(m: int, n: int, batch: int, gpu: GpuLimits, accumulators: int = 1,
                         periods: tuple[int, int] = (0, 0)) -> RegisterTile | None:
    """The tile of least :func:`tile_cost` among those with at least 8 outputs a thread;
    when none divides the output, the one of the others that makes the most blocks
    (``split-k`` then multiplies them); ``None`` when no tile divides the output.

    A ``tm × tn`` micro-tile does ``tm·tn`` multiply-adds per ``tm + tn`` loads, so bigger
    is better per block, until the blocks no longer spread evenly over the multiprocessors:
    the cost counts the blocks of the busiest one (a wave that is 12% full costs a whole
    wave). Skinny products take smaller tiles, but not below 8 outputs a thread (there
    cutting K into slices is cheaper than losing the reuse). A kernel with several
    reductions (fused gate and up projections) keeps ``accumulators`` micro-tiles per
    thread, at most 64 registers of them together.
    """
    fitting = fitting_tiles(m, n, accumulators, periods)
    if not fitting:
        return None

    def blocks(t: RegisterTile) -> int:
        return batch * t.blocks(m, n)

    good = [t for t in fitting if t.tm * t.tn >= 8]
    if good:
        return min(good, key=lambda t: tile_cost(t, blocks(t), gpu))
    return max(fitting, key=blocks)


def choose_bk(k: int) -> int:
    """The K chunk staged per step: 32 (one 128-byte row per warp) or the largest power of
    two below that divides K."""
    for bk in (32, 16, 8, 4, 2, 1):
        if k % bk == 0:
            return bk
    return 1


LONG_SLICES = 4
"""Slices ``split-k`` cuts a long K into (each at least :data:`LONG_SLICE` long)."""

LONG_SLICE = 896
"""On the H200, products whose blocks share a multiprocessor, with K ≥ 4 × 896 (3584, 5632,
18944) and 1–3 waves of blocks, ran faster in four slices even when their blocks already
filled the GPU; at K = 2048 slicing did not pay. Timings:
``bench/results/schedule-constants.md`` (``LONG_SLICE``)."""

LONG_WAVES = 3
"""Blocks per multiprocessor below which a long K is sliced (more waves even out the
blocks that share a multiprocessor)."""

ONE_BLOCK_ACCUMULATORS = 56
"""Accumulators a thread (over all reductions) from which NVRTC gives a thread 168–255
registers, so that a block of 256 threads runs alone on its multiprocessor (8×7 and 8×8
micro-tiles, the fused gate/up's two 8×4). :func:`split_for` looks at the accumulators
only: a 128-thread block of 8×7 counts as alone too, though two fit."""

WAVE_FILL = 7 / 8
"""For blocks that run alone on a multiprocessor: the share of the multiprocessors a wave
must reach before ``split-k`` stops doubling the slices, and no long-K slicing. On the H200
a wave of 128 such blocks on 132 multiprocessors needed no slicing (the tuned table). With
:data:`TILE_EFFICIENCY` and the long-K slicing kept for smaller blocks (:data:`LONG_SLICE`)
this makes the model pick the tuner's schedule for 36 of the table's 47 kernels, against 11
before. Timings: ``bench/results/schedule-constants.md`` (``WAVE_FILL``)."""


MMA_WAVE_FILL = 3 / 4
""":data:`WAVE_FILL` of tensor-core blocks: on the H200 112 blocks of 128×128 ran best
whole, 28 of them in four slices. Timings: ``bench/results/schedule-constants.md``
(``MMA_WAVE_FILL``)."""


def split_for(tile: RegisterTile, m: int, n: int, k: int, batch: int, gpu: GpuLimits,
              accumulators: int = 1, tensor_cores: bool = False) -> int:
    """Slices of K for ``tile`` (each at least 128 long, a whole multiple of 32). A block
    that runs alone on its multiprocessor (:data:`ONE_BLOCK_ACCUMULATORS`): doubled while
    the blocks fill less than :data:`WAVE_FILL` of the multiprocessors. Smaller blocks,
    which share one: doubled while they do not reach one per multiprocessor, and at least
    :data:`LONG_SLICES` when each of those is still :data:`LONG_SLICE` long and the blocks
    make fewer than :data:`LONG_WAVES` waves. A tensor-core block (partial sums and
    fragments beside its accumulators) counts as alone, its wave full at
    :data:`MMA_WAVE_FILL`."""
    blocks = batch * tile.blocks(m, n)
    alone = tensor_cores or tile.tm * tile.tn * accumulators >= ONE_BLOCK_ACCUMULATORS
    fill = (MMA_WAVE_FILL if tensor_cores else WAVE_FILL) * gpu.sms if alone else gpu.sms
    split = 1
    while blocks * split < fill and k % (split * 2 * 32) == 0 and k // (split * 2) >= 128:
        split *= 2
    if (not alone and blocks < LONG_WAVES * gpu.sms and k // LONG_SLICES >= LONG_SLICE
            and k % (LONG_SLICES * 32) == 0):
        split = max(split, LONG_SLICES)
    return split


BLOCK_RATE = 129e9
"""Multiply-adds a second of one 128×64 block with 8×4 micro-tiles alone on an H200
multiprocessor. Timings: ``bench/results/schedule-constants.md`` (``BLOCK_RATE``)."""

WAVE_OVERHEAD = 1.5e-6
"""Seconds a wave of blocks spends outside its K loop (the first chunks' latency, the
epilogue)."""

PARTIALS_BANDWIDTH = 3e12
"""Bytes a second the partial sums of ``split-k`` move at (written once, read once)."""

LAUNCH = 2e-6
"""Seconds of the extra kernel that sums ``split-k``'s partials, beside its traffic."""


def product_time(t: RegisterTile, m: int, n: int, k: int, batch: int, split: int,
                 gpu: GpuLimits, accumulators: int = 1, tensor_cores: bool = False,
                 halves: bool = False, roles: int = 1) -> float:
    """Modelled seconds of a ``batch × m × n × k`` product with tile ``t`` and ``split``
    slices: the waves of the busiest multiprocessor, each ``bm·bn·k/split`` multiply-adds
    at :data:`BLOCK_RATE` × the micro-tile's efficiency (:func:`tile_efficiency`; 16-bit
    factors: ``halves``) plus :data:`WAVE_OVERHEAD`, plus, when split, the partial sums'
    traffic (of each of the ``accumulators`` reductions) and one launch. ``roles``: 2 for a
    product whose copies a producer warpgroup will issue (its tiles' efficiency then
    differs; its blocks run one a multiprocessor, so when the unsplit grid fills the GPU,
    each wave of slices also waits for its blocks' ``f32`` partial tiles to be stored, at
    a multiprocessor's share of :data:`PARTIALS_BANDWIDTH`)."""
    blocks = batch * t.blocks(m, n) * split
    waves = -(-blocks // gpu.sms)
    rate = BLOCK_RATE * tile_efficiency(t, tensor_cores, halves, blocks, gpu, roles,
                                         accumulators)
    time = waves * (t.bm * t.bn * (k / split) / rate + WAVE_OVERHEAD)
    if split > 1:
        time += accumulators * (split + 1) * batch * m * n * 4 / PARTIALS_BANDWIDTH + LAUNCH
        if roles == PRODUCER_ROLES and blocks >= split * gpu.sms:  # see the docstring
            tile_bytes = accumulators * min(t.bm, m) * min(t.bn, n) * 4
            time += waves * tile_bytes * gpu.sms / PARTIALS_BANDWIDTH
    return time


def choose_product_schedule(m: int, n: int, k: int, batch: int, gpu: GpuLimits,
                            accumulators: int = 1, periods: tuple[int, int] = (0, 0),
                            tensor_cores: bool = False, halves: bool = False, roles: int = 1
                            ) -> ProductSchedule | None:
    """The register tile and K slices of least :func:`product_time`: for each tile with at
    least 8 outputs a thread (dividing the accesses' ``periods``, see
    :meth:`RegisterTile.fits`), its :func:`split_for` slices — for a kernel with several
    reductions (the fused gate and up projections, which write partial sums for each) also
    1, 2, 4 or 8 slices of at least 128, whichever the model finds fastest; ``None`` when
    no tile fits.

    Tiles that divide the output are preferred; only when none with 8 outputs a thread
    does (a prompt of 17, 100 or 1000 tokens), *ragged* tiles compete, whose edge blocks
    overhang the output (:meth:`RegisterTile.fits`): the model counts their blocks whole,
    so the padding is paid for. Ragged tiles compete too for any product of at most
    :data:`FEW_ROWS` rows: there a dividing tile is one of 32 rows on the CUDA cores
    (which for 16-bit factors have a sixteenth of the tensor cores' rate), and the model
    prefers a ragged one once it may (two slices of 32 × 112 for the fused gate and up
    projections instead of four of 32 × 64; the tensor cores' 64 × 128 for TinyLlama's
    square and down projections). An output of fewer than :data:`MIN_RAGGED_OUTPUTS`
    points gets no ragged tile: one thread per output
    is then as fast as a block mostly padding.

    For the fused gate/up kernel (``silu(x·Wgᵀ)·(x·Wuᵀ)``) its picks at 128 rows (four
    slices of 128×64) were the fastest on the H200, and at 512 rows the whole product
    (timings: ``bench/results/schedule-constants.md``, ``choose_product_schedule``).

    With ``tensor_cores`` (``f32`` sums on sm_80 or newer) the :data:`MMA_TILES` that fit
    the output, with at most 64 accumulators a thread, compete at :data:`MMA_EFFICIENCY`
    where K is a multiple of 32 (each slice too); of a product of 16-bit factors
    (``halves``) the :data:`MMA_HALF_TILES`, at most :data:`MMA_HALF_ACCUMULATORS` a
    thread for one reduction, at :data:`MMA_HALF_EFFICIENCY`; with ``roles = 2`` (a
    product whose copies a producer warpgroup will issue) the warpgroup tiles at
    :data:`~llmopt.passes.tile._schedule_tiles.WGMMA_PRODUCER_EFFICIENCY`."""
    chosen = _product_schedule(m, n, k, batch, gpu, accumulators, periods, tensor_cores,
                               ragged=False, halves=halves, roles=roles)
    few_rows = m <= FEW_ROWS
    if chosen is None or chosen.tile.tm * chosen.tile.tn < 8 or few_rows:
        if m * n >= MIN_RAGGED_OUTPUTS:
            ragged = _product_schedule(m, n, k, batch, gpu, accumulators, periods,
                                       tensor_cores, ragged=True, halves=halves, roles=roles)
            return ragged or chosen
    return chosen


FEW_ROWS = 32
"""Rows up to which a product lets ragged tiles compete with the
dividing ones (:func:`choose_product_schedule`): one 32-row tile then holds every row, and
a ragged edge costs only the last column of blocks, or a 64-row tensor-core tile pads the
rows it lacks. A length bucket's variant is chosen for its bound, which the lengths it runs
at rarely equal, so its bound is scheduled as the lengths below it are. Measured on the
H200: the TinyLlama layer of 24 tokens with the ragged gate/up tiles against 32 tokens with
the dividing ones (``bench/results/symbolic-final-h200.md``), and the symbolic layer's
32-row bucket with the tensor-core tiles (``bench/results/symbolic-short-lengths-h200.md``)."""

MIN_RAGGED_OUTPUTS = 1024
"""Outputs from which a product without a dividing tile gets a ragged one (four blocks of
the smallest tile, 16 × 16)."""


def _product_schedule(m: int, n: int, k: int, batch: int, gpu: GpuLimits, accumulators: int,
                      periods: tuple[int, int], tensor_cores: bool, ragged: bool,
                      halves: bool = False, roles: int = 1) -> ProductSchedule | None:
    """:func:`choose_product_schedule` among the dividing tiles, or among all (``ragged``);
    without a tile of 8 outputs a thread, :func:`choose_register_tile`'s (dividing)."""
    good = [t for t in fitting_tiles(m, n, accumulators, periods, ragged)
            if t.tm * t.tn >= 8]
    cores_tiles = [t for t in mma_tiles(halves, gpu.arch) if tensor_cores and k % 32 == 0
                   and t.fits(m, n, periods, ragged or _overhangs(t, halves, roles))
                   and _accumulators_fit(t, accumulators, halves, roles)
                   and (not is_wgmma_tile(t) or k % WGMMA_BK == 0)
                   and (t not in WGMMA_WAVE_TILES
                        or (accumulators == 1 and roles == PRODUCER_ROLES))]
    if not good and not cores_tiles:
        if ragged:
            return None
        tile = choose_register_tile(m, n, batch, gpu, accumulators, periods)
        if tile is None:
            return None
        return ProductSchedule(tile, split_for(tile, m, n, k, batch, gpu, accumulators))
    options = []
    for cores, tiles in ((False, good), (True, cores_tiles)):
        for t in tiles:
            splits = {split_for(t, m, n, k, batch, gpu, accumulators, cores)}
            if accumulators > 1 or (cores and roles == 2):
                # no fitted rule for these yet: the model weighs each split
                splits |= {s for s in (1, 2, 4, 8) if k % (s * 32) == 0 and k // s >= 128}
            for split in sorted(splits):
                split_roles = _roles_of(roles, k // split)
                if cores and ((k // split) % 32
                              or not _accumulators_fit(t, accumulators, halves, split_roles)):
                    continue
                time = product_time(t, m, n, k, batch, split, gpu, accumulators, cores,
                                    halves, split_roles)
                options.append((time, ProductSchedule(t, split, cores)))
    return min(options, key=lambda o: o[0])[1]


def _overhangs(t: RegisterTile, halves: bool, roles: int) -> bool:
    """Whether tile ``t`` competes even where it does not divide the output: a warpgroup
    tile of a two-role product of 16-bit factors, whose bulk tensor copies read the rows
    and columns past the operands' ends as zeros, so that only its stores are guarded (a
    192-column tile makes three whole waves of Qwen2.5-7B's 18944 columns at 512 rows,
    where the dividing 256 makes 2.2)."""
    return halves and roles == PRODUCER_ROLES and is_wgmma_tile(t)


def _accumulators_fit(t: RegisterTile, accumulators: int, halves: bool, roles: int) -> bool:
    """Whether tensor-core tile ``t`` of ``accumulators`` reductions stays within
    :func:`mma_accumulators` a thread, as a product of ``roles``."""
    warpgroup = roles == PRODUCER_ROLES and is_wgmma_tile(t)
    return t.tm * t.tn * accumulators <= mma_accumulators(halves, accumulators, warpgroup)


def _roles_of(roles: int, k: int) -> int:
    """The roles a product scheduled as one of ``roles`` gets for a K loop of ``k``: two
    only with at least :data:`~llmopt.passes.tile._schedule.PRODUCER_MIN_CHUNKS` chunks of
    :data:`WGMMA_BK` (what ``async-copy`` gives it)."""
    return roles if roles != PRODUCER_ROLES or k // WGMMA_BK >= PRODUCER_MIN_CHUNKS else 1


def choose_split_k(m: int, n: int, k: int, batch: int, gpu: GpuLimits) -> int:
    """How many slices to cut K into: those of :func:`choose_product_schedule` (a skinny
    product gets enough blocks to fill the GPU, a long K shorter slices). The partial sums
    cost an extra pass over ``S × m × n``."""
    chosen = choose_product_schedule(m, n, k, batch, gpu)
    return 1 if chosen is None else chosen.split
