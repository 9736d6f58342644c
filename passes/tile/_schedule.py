"""Schedule knobs of the Tile-IR passes: where they come from and their default values.

A knob of a scheduling pass is taken, in this order, from the pass option when it is set
(``register-tile{bm=64}``: every kernel), from the kernel's ``llmopt.schedule`` dictionary
(``{bm = 64 : i64, ...}``, one kernel: what ``llmopt tune`` and the tuned-config table set),
or from the heuristics below, which look only at the shapes and the GPU's limits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from xdsl.dialects.builtin import (
    BFloat16Type,
    DictionaryAttr,
    Float16Type,
    Float32Type,
    IntegerAttr,
    MemRefType,
    i64,
)
from xdsl.ir import Attribute, Operation

from llmopt.dialects import tile
from llmopt.target import MMA_SHAPES, WGMMA_ARCH
from llmopt.target import Target as GpuLimits
from llmopt.target import for_arch as limits
from llmopt.target import smem_budget as smem_budget

SCHEDULE_ATTR = "llmopt.schedule"


def padded_bytes(shape: Sequence[int], pad: int, elem_bytes: int = 4) -> int:
    """Bytes of a shared tile of ``shape`` whose rows (innermost dimension) ``pad-shared``
    pads by ``pad`` elements."""
    return math.prod(shape[:-1]) * (shape[-1] + pad) * elem_bytes


def kernel_knobs(kernel: Operation) -> dict[str, int]:
    """The ``llmopt.schedule`` dictionary of a kernel (empty when it has none)."""
    attr = kernel.attributes.get(SCHEDULE_ATTR)
    if not isinstance(attr, DictionaryAttr):
        return {}
    return {k: v.value.data for k, v in attr.data.items() if isinstance(v, IntegerAttr)}


def set_knob(kernel: Operation, name: str, value: int) -> None:
    """Record knob ``name`` in ``kernel``'s ``llmopt.schedule`` (the later passes read it)."""
    knobs = {k: IntegerAttr(v, i64) for k, v in kernel_knobs(kernel).items()}
    kernel.attributes[SCHEDULE_ATTR] = DictionaryAttr({**knobs, name: IntegerAttr(value, i64)})


def knob(option: int, kernel: Operation, name: str, default: int) -> int:
    """A knob: the pass option when set (non-zero), else the kernel's, else ``default``."""
    if option:
        return option
    return kernel_knobs(kernel).get(name, default)


@dataclass(frozen=True)
class RegisterTile:
    """A block computes ``bm × bn`` outputs; each of its threads ``tm × tn`` of them."""

    bm: int
    bn: int
    tm: int
    tn: int

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    def fits(self, m: int, n: int, periods: tuple[int, int] = (0, 0),
             ragged: bool = False) -> bool:
        """Whether the tile makes a valid block, divides the ``m × n`` output (unless
        ``ragged``: then the edge blocks overhang it, their extra rows and columns clamped on
        loads and guarded on stores), and ``bm``, ``bn`` divide the ``periods`` of the
        kernel's accesses (0: any; see
        :func:`~llmopt.passes.tile.register_tile.tile_periods`)."""
        return (self.bm % self.tm == 0 and self.bn % self.tn == 0
                and (ragged or (m % self.bm == 0 and n % self.bn == 0))
                and 32 <= self.threads <= 1024 and self.threads % 32 == 0
                and periods[0] % self.bm == 0 and periods[1] % self.bn == 0)

    def blocks(self, m: int, n: int) -> int:
        """Blocks covering an ``m × n`` output (the edge ones overhanging a ragged one)."""
        return -(-m // self.bm) * -(-n // self.bn)


TILE_CANDIDATES = ((128, 64, 8, 4), (128, 112, 8, 7), (64, 112, 8, 7), (64, 128, 4, 8),
                   (64, 176, 4, 11), (64, 64, 4, 4), (128, 128, 8, 8), (32, 64, 2, 4),
                   (64, 32, 4, 2), (32, 32, 2, 2), (16, 64, 1, 4), (32, 112, 4, 7),
                   (32, 16, 2, 1), (16, 32, 1, 2), (16, 16, 1, 1))
"""Register tiles ``(bm, bn, tm, tn)``, the preferred first among equals. The ``tn = 7``
tiles fit outputs whose width is a multiple of 112 (Qwen2.5's 3584), ``tn = 11`` those of
176 (TinyLlama's 5632): blocks of powers of two make 11·2ⁱ blocks of such a width, a third
of a wave too many or too few on 132 multiprocessors."""

DEFAULT_STAGES = 3
"""Shared-memory slots per staged tile that ``async-copy`` fills ahead (1: synchronous fills)."""


def default_kmajor(kernel: Operation) -> int:
    """``stage-inputs``' ``kmajor`` when nothing sets it: 2 (tiles in the global buffer's
    order, which ``async-copy`` fills with 16-byte copies) unless the kernel's schedule turns
    the asynchronous copies off (``stages = 1``), then 1 (K-major)."""
    return 1 if knob(0, kernel, "stages", DEFAULT_STAGES) == 1 else 2


def default_carry(kernel: Operation) -> int:
    """``async-copy``'s ``carry`` when nothing sets it: 1 (the slots and the fetched chunk are
    counters the K loop carries) for a kernel with one register accumulator, else 2 (computed
    from ``k0``). Measured on the H200 (``bench/sweep_gemm.py``, 0ef29fd): carried, single
    products ran 1.4–4.4% faster (TinyLlama's and Qwen2.5-7B's projections at 128 and 512
    rows, bar one even), the fused gate/up kernels — two accumulator tiles, 250+ registers —
    0.6–1.9% slower at three of four shapes."""
    accumulators = sum(1 for op in kernel.walk()
                       if isinstance(op, tile.AllocOp) and op.space.data == "registers")
    return 1 if accumulators <= 1 else 2


def default_blocked(kernel: Operation) -> int:
    """``register-tile``'s ``blocked`` when nothing sets it: 1 (a thread's outputs adjacent)
    for K-major tiles, whose rows a thread then reads as vectors; else 2 (cyclic), so that
    the threads of a warp read rows of a tile in the global buffer's order that lie in
    different banks."""
    return 1 if knob(0, kernel, "kmajor", default_kmajor(kernel)) == 1 else 2


TILE_EFFICIENCY = {(8, 7): 1.1, (8, 8): 1.1, (8, 4): 1.0, (4, 11): 0.95, (4, 4): 0.89,
                   (4, 7): 0.86, (4, 8): 0.86, (2, 4): 0.63, (4, 2): 0.6, (2, 2): 0.45,
                   (1, 4): 0.4, (2, 1): 0.25, (1, 2): 0.25, (1, 1): 0.15}
"""Speed of a block's arithmetic per micro-tile ``(tm, tn)``, relative to 8×4: fitted on the
H200 on projections whose blocks fill the GPU equally (128×64 blocks with 8×4 threads take
0.133 ms for 128×5632×2048 in one wave, 64×64 with 4×4 0.149 ms in two); 4×8 is slower than
8×4. 8×7 (56 accumulators): 512×3584×3584 took 0.338 ms in 128×112 or 64×112 blocks against
0.370 in 128×64 blocks of 8×4, 512×3584×18944 1.67 ms (two slices) against 1.83; 4×11 in
64×176 blocks (256 blocks, one wave of two a multiprocessor) took 512×5632×2048 in 0.321 ms
against 0.350 in 352 blocks of 128×64 with 8×4 (a wave and a third). 8×8 needs more
registers than two blocks a multiprocessor leave (forcing two blocks spilled and ran 12–40%
slower), yet one 128×128 block a multiprocessor of it beat 128×64 blocks of 8×4 wherever the
tuner timed both on the H200 (the committed table, ``passes/tile/tuned/sm_90.json``):
512×2048×5632 0.287 against 0.325 ms, 512×2048×2048 0.115 against 0.122–0.127, 128×2048×5632
0.082 against 0.086, the 32000-wide LM head 1.607 against 1.676 — hence 1.1, as 8×7 (which
keeps winning the 3584-wide products: 0.332 against 0.379 ms for 512×3584×3584)."""

SMALL_BLOCK_EFFICIENCY = 0.9
"""Factor on :data:`TILE_EFFICIENCY` for blocks of fewer than 256 threads: in a wave of one
block a multiprocessor, four warps hide less latency than eight. Measured on the H200 (the
tuned table): for every kernel of Qwen2.5-7B's 128×3584×3584 and 128×3584×18944 products
the tuner picked 128×112 blocks (256 threads of 8×7) in four slices, 0.092–0.096 ms for the
former against 0.094–0.100 in four slices of 64×112 blocks (128 threads); without this
factor the model takes two slices of 64×112, as many blocks as four of 128×112 and never
the tuner's pick."""


MMA_TILES = (RegisterTile(128, 128, 8, 8), RegisterTile(128, 64, 8, 4),
             RegisterTile(64, 128, 4, 8))
"""Register tiles of the tensor-core layout (``register-tile{blocked=3}``, then
``mma-fragments``) that the heuristics and ``llmopt tune`` consider: warp tiles of 64 × 32,
64 × 16 and 32 × 32, 256 threads a block."""

MMA_EFFICIENCY = {(8, 8): 1.5, (8, 4): 1.4, (4, 8): 1.25}
"""Speed of a tensor-core block (:data:`MMA_TILES`, three TF32 ``mma.sync`` per ``f32``
product) on the scale of :data:`TILE_EFFICIENCY`. Measured on the H200 (``llmopt tune``
and ``bench/sweep_gemm.py`` at a121268, ``mma-fragments{split=3}``), against the FMA
schedules of the same products: 128×128 blocks of 8×8 took 512×2048×5632 in 0.208 ms (two
slices; FMA 8×8 0.287), 512×3584×18944 in 1.203 and 512×3584×3584 in 0.246 (FMA 8×7:
1.631, 0.332) — 1.49–1.52; 128×64 blocks of 8×4 the fused gate/up 512×5632×2048 in 0.463
(four slices; FMA 8×4 0.626) and 512×18944×3584 in 2.198 (FMA 3.155) — 1.35–1.44; 64×128
of 4×8 won only the tuner's 128-row products (128×2048×5632: 0.068 against 0.082 in FMA
128×128 blocks of 8×8)."""

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
H200 (``bench/results/ops-bfloat16-h200.md``: 512×18944×3584 in 1184 blocks of 128×64,
0.454 ms, and 512×5632×2048 in 352, 0.079 ms, give 4.5–4.9; 512×3584×3584 and
512×3584×18944 in 112 blocks of 128×128, 0.086 and 0.382 ms, 5.3–6.3); 8×16 is 8×8 scaled
by the instructions a K chunk issues per ``HMMA`` (:data:`MMA_HALF_TILES`: 4.6 for 64 × 32
warp tiles, 3.4 for 64 × 64), not yet measured; 4×8 is a guess below 8×4."""

WGMMA_TILES = (RegisterTile(128, 256, 2, 64), RegisterTile(128, 128, 2, 32),
               RegisterTile(64, 256, 2, 64), RegisterTile(64, 128, 2, 32),
               RegisterTile(128, 64, 2, 16))
"""Tensor-core tiles of ``bf16``/``f16`` products on sm_90a, in a warpgroup's accumulator
layout (:func:`is_wgmma_tile`), which ``wgmma-fragments`` turns into ``wgmma.mma``: two
warpgroups (``bm = 128``) or one, each ``64 × bn``. The 64-column tile keeps a fused
gate/up product (two reductions: 64 accumulators a thread) on them."""

WGMMA_EFFICIENCY = {(2, 64): 10.0, (2, 32): 12.5, (2, 16): 8.0}
"""Speed of a :data:`WGMMA_TILES` block on the scale of :data:`MMA_HALF_EFFICIENCY`, above
the best ``mma.sync`` tile's (a warpgroup's product reads its operands from shared memory
itself, no ``ldmatrix``). 128 columns (``tn = 32``) rank before 256: on the H200 the
products of Qwen2.5-7B and TinyLlama at 512 rows ran faster in 64 × 128 or 128 × 128 blocks
than in 64 × 256 or 128 × 256 ones (``bench/results/gemm-bf16-h200.md``); 64 columns (two
reductions' accumulators, the fused gate/up) an estimate."""

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
"""Accumulators a thread a 16-bit tensor-core tile of one reduction may have (a tile of
several reductions keeps the limit of 64 of the others)."""

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


def mma_accumulators(halves: bool, accumulators: int) -> int:
    """Accumulators a thread a tensor-core tile of ``accumulators`` reductions may hold."""
    return MMA_HALF_ACCUMULATORS if halves and accumulators == 1 else 64


class ProductSchedule(NamedTuple):
    """What the heuristics pick for a matrix product: the register tile, the K slices, and
    whether the tile takes the tensor-core layout (``register-tile{blocked=3}``)."""

    tile: RegisterTile
    split: int
    tensor_cores: bool = False


def tile_efficiency(t: RegisterTile, tensor_cores: bool = False, halves: bool = False,
                    blocks: int = 0, gpu: GpuLimits | None = None) -> float:
    """:data:`TILE_EFFICIENCY` of ``t``'s micro-tile (0.15 for one not in the table), times
    :data:`SMALL_BLOCK_EFFICIENCY` for a block of fewer than 256 threads; on the tensor
    cores :data:`MMA_EFFICIENCY`, or with 16-bit factors (``halves``)
    :data:`MMA_HALF_EFFICIENCY`, times :data:`LONE_BLOCK_EFFICIENCY` for a block of fewer
    than :data:`LONE_WARPS` warps when its ``blocks`` leave some of ``gpu``'s
    multiprocessors a single one."""
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
filled the GPU (128×18944×3584: 0.444 ms in four slices of 128×64 blocks of 8×4, 0.563
whole in 64×64 blocks; 32×18944×3584 in 32×64 blocks: 0.260 whole, 0.207 in four); at
K = 2048 slicing did not pay."""

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
a wave of 128 such blocks on 132 multiprocessors needed no slicing (the tuned table: for
five of six kernels of Qwen2.5-7B's 512×3584×3584 product, 128 blocks of 128×112, the tuner
picked one slice, 0.315–0.340 ms, where four slices took 0.338–0.352; for the sixth two,
0.343; 512×3584×18944: 1.630 ms whole against 1.678 in four; 512×2048×5632 in 128×128
blocks: 0.297 in two slices against 0.328 in four of 128×64). With :data:`TILE_EFFICIENCY`
and the long-K slicing kept for smaller blocks (:data:`LONG_SLICE`) this makes the model
pick the tuner's schedule for 36 of the table's 47 kernels, against 11 before."""


MMA_WAVE_FILL = 3 / 4
""":data:`WAVE_FILL` of tensor-core blocks. On the H200 (``llmopt tune`` at a121268) 112
blocks of 128×128 (512×3584×3584) ran best whole (0.242–0.246 ms, two slices 0.269), and
28 of them (128×3584×3584, 128×3584×18944) in four slices (0.076–0.078 and 0.320 ms)."""


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
multiprocessor (128×2048×2048 in 64 such blocks: 0.131 ms)."""

WAVE_OVERHEAD = 1.5e-6
"""Seconds a wave of blocks spends outside its K loop (the first chunks' latency, the
epilogue)."""

PARTIALS_BANDWIDTH = 3e12
"""Bytes a second the partial sums of ``split-k`` move at (written once, read once)."""

LAUNCH = 2e-6
"""Seconds of the extra kernel that sums ``split-k``'s partials, beside its traffic."""


def product_time(t: RegisterTile, m: int, n: int, k: int, batch: int, split: int,
                 gpu: GpuLimits, accumulators: int = 1, tensor_cores: bool = False,
                 halves: bool = False) -> float:
    """Modelled seconds of a ``batch × m × n × k`` product with tile ``t`` and ``split``
    slices: the waves of the busiest multiprocessor, each ``bm·bn·k/split`` multiply-adds
    at :data:`BLOCK_RATE` × the micro-tile's efficiency (:func:`tile_efficiency`; 16-bit
    factors: ``halves``) plus :data:`WAVE_OVERHEAD`, plus, when split, the partial sums'
    traffic (of each of the ``accumulators`` reductions) and one launch."""
    blocks = batch * t.blocks(m, n) * split
    waves = -(-blocks // gpu.sms)
    rate = BLOCK_RATE * tile_efficiency(t, tensor_cores, halves, blocks, gpu)
    time = waves * (t.bm * t.bn * (k / split) / rate + WAVE_OVERHEAD)
    if split > 1:
        time += accumulators * (split + 1) * batch * m * n * 4 / PARTIALS_BANDWIDTH + LAUNCH
    return time


def choose_product_schedule(m: int, n: int, k: int, batch: int, gpu: GpuLimits,
                            accumulators: int = 1, periods: tuple[int, int] = (0, 0),
                            tensor_cores: bool = False, halves: bool = False
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

    Measured on the H200 for the fused gate/up kernel (``silu(x·Wgᵀ)·(x·Wuᵀ)``, median of
    CUDA-event-timed graph replays, ``bench/sweep_gemm.py --gate-up``): 128×5632×2048 took
    0.216 ms whole in 88 blocks of 128×64, 0.178 ms in two slices of 64×64 blocks and
    0.171–0.174 ms in four slices of 128×64 (this model's pick); 128×18944×3584 0.961 ms
    whole in 64×64 blocks and 0.830–0.834 ms in four slices of 128×64 (its pick); at 512
    rows the whole product stays fastest (512×18944×3584: 3.12 ms whole against 3.21 in
    two slices).

    With ``tensor_cores`` (``f32`` sums on sm_80 or newer) the :data:`MMA_TILES` that fit
    the output, with at most 64 accumulators a thread, compete at :data:`MMA_EFFICIENCY`
    where K is a multiple of 32 (each slice too); of a product of 16-bit factors
    (``halves``) the :data:`MMA_HALF_TILES`, at most :data:`MMA_HALF_ACCUMULATORS` a
    thread for one reduction, at :data:`MMA_HALF_EFFICIENCY`."""
    chosen = _product_schedule(m, n, k, batch, gpu, accumulators, periods, tensor_cores,
                               ragged=False, halves=halves)
    few_rows = m <= FEW_ROWS
    if chosen is None or chosen.tile.tm * chosen.tile.tn < 8 or few_rows:
        if m * n >= MIN_RAGGED_OUTPUTS:
            ragged = _product_schedule(m, n, k, batch, gpu, accumulators, periods,
                                       tensor_cores, ragged=True, halves=halves)
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
                      halves: bool = False) -> ProductSchedule | None:
    """:func:`choose_product_schedule` among the dividing tiles, or among all (``ragged``);
    without a tile of 8 outputs a thread, :func:`choose_register_tile`'s (dividing)."""
    good = [t for t in fitting_tiles(m, n, accumulators, periods, ragged)
            if t.tm * t.tn >= 8]
    most = mma_accumulators(halves, accumulators)
    cores_tiles = [t for t in mma_tiles(halves, gpu.arch) if tensor_cores and k % 32 == 0
                   and t.fits(m, n, periods, ragged) and t.tm * t.tn * accumulators <= most
                   and (not is_wgmma_tile(t) or k % WGMMA_BK == 0)]
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
            if accumulators > 1:  # no fitted rule for these yet: the model weighs each split
                splits |= {s for s in (1, 2, 4, 8) if k % (s * 32) == 0 and k // s >= 128}
            for split in sorted(splits):
                if cores and (k // split) % 32:
                    continue
                time = product_time(t, m, n, k, batch, split, gpu, accumulators, cores,
                                    halves)
                options.append((time, ProductSchedule(t, split, cores)))
    return min(options, key=lambda o: o[0])[1]


def choose_split_k(m: int, n: int, k: int, batch: int, gpu: GpuLimits) -> int:
    """How many slices to cut K into: those of :func:`choose_product_schedule` (a skinny
    product gets enough blocks to fill the GPU, a long K shorter slices). The partial sums
    cost an extra pass over ``S × m × n``."""
    chosen = choose_product_schedule(m, n, k, batch, gpu)
    return 1 if chosen is None else chosen.split


ATTENTION_WARPS = 8
"""Warps of a ``flash-attention`` block whose tiles allow it (256 threads)."""


def warp_grid(m: int, n: int, warps: int) -> tuple[int, int] | None:
    """``(wm, wn)``, ``wm · wn = warps``, whose warp tiles ``m/wm × n/wn`` are whole
    ``m16n8`` fragments of an even number of columns a thread (``m`` a multiple of ``16·wm``,
    ``n`` of ``8·wn``), the one whose warps load the fewest operands (``m/wm + n/wn`` per
    step, ties: fewer warps along ``n``); ``None`` when there is none."""
    grids = [(wm, warps // wm) for wm in range(1, warps + 1)
             if warps % wm == 0 and m % (16 * wm) == 0 and n % (8 * (warps // wm)) == 0]
    return min(grids, key=lambda g: (m // g[0] + n // g[1], g[1]), default=None)


@dataclass(frozen=True)
class AttentionBlocks:
    """A ``flash-attention`` block: ``bm`` query rows, key blocks of ``bn``, ``warps``
    warps."""

    bm: int
    bn: int
    warps: int


def choose_attention_blocks(rows: int, queries: int, keys: int, head_dim: int, sms: int,
                            bm: int = 0, bn: int = 0, warps: int = 0,
                            runtime_keys: bool = False) -> AttentionBlocks | None:
    """The options when set, else: the largest ``bm`` of 64, 32, 16 that divides the queries
    and still makes ``sms`` blocks over ``rows`` (batch × heads) rows of query blocks (else
    the smallest that divides; when none divides, the same choice among all three, the last
    query block overhanging the queries); the largest ``bn`` of 64, 32, 16 that divides the
    keys (when none does, the smallest that covers them, at most 64: the last key block
    overhangs the keys and its extra keys are masked; longer key blocks mean fewer rounds of
    row statistics and barriers per key, see ``docs/performance.md``) — 64 whenever the keys
    are a runtime length (``runtime_keys``: any length is ragged, and what divides the
    maximum says nothing of it); the most warps, at most 8, that both products tile
    (:func:`warp_grid`). ``None`` when the head dimension is no multiple of 16 or the sizes
    tile nothing."""
    if head_dim % 16:
        return None
    if not bm:
        fitting = [b for b in (64, 32, 16) if queries % b == 0] or [64, 32, 16]
        bm = next((b for b in fitting if rows * -(-queries // b) >= sms), fitting[-1])
    if not bn and runtime_keys:
        bn = 64
    if not bn:
        dividing = [b for b in (64, 32, 16) if keys % b == 0]
        bn = dividing[0] if dividing else next(b for b in (16, 32, 64) if keys <= b or b == 64)
    if bm % 16 or bn % 16:
        return None
    for w in [warps] if warps else [ATTENTION_WARPS >> k for k in range(4)]:
        if warp_grid(bm, bn, w) and warp_grid(bm, head_dim, w):
            return AttentionBlocks(bm, bn, w)
    return None


def shared_bytes(kernel: Operation) -> int:
    """Shared memory of ``kernel``'s tiles once ``pad-shared`` has padded them (by their
    ``llmopt.pad``)."""
    total = 0
    for op in kernel.walk():
        if isinstance(op, tile.AllocOp) and op.space.data == "shared":
            typ = op.result.type
            assert isinstance(typ, MemRefType)
            pad = op.attributes.get("llmopt.pad")
            total += padded_bytes(typ.get_shape(), pad.value.data
                                  if isinstance(pad, IntegerAttr) else 0,
                                  typ.element_type.bitwidth // 8)  # type: ignore[attr-defined]
    return total
