"""Schedule knobs of the Tile-IR passes: where they come from and their default values.

A knob of a scheduling pass is taken, in this order, from the pass option when it is set
(``register-tile{bm=64}``: every kernel), from the kernel's ``llmopt.schedule`` dictionary
(``{bm = 64 : i64, ...}``, one kernel: what ``llmopt tune`` and the tuned-config table set),
or from the heuristics below, which look only at the shapes and the GPU's limits.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr
from xdsl.ir import Operation

SCHEDULE_ATTR = "llmopt.schedule"


@dataclass(frozen=True)
class GpuLimits:
    """What a schedule must fit: multiprocessors, static shared memory a block may declare,
    registers a thread may use."""

    sms: int
    static_smem: int = 48 * 1024
    max_threads: int = 1024


LIMITS = {"sm_80": GpuLimits(108), "sm_86": GpuLimits(84), "sm_89": GpuLimits(128),
          "sm_90": GpuLimits(132), "sm_100": GpuLimits(148), "sm_120": GpuLimits(170)}


def limits(arch: str) -> GpuLimits:
    """The limits of ``arch`` (an unknown arch gets those of sm_90)."""
    return LIMITS.get(arch, LIMITS["sm_90"])


def kernel_knobs(kernel: Operation) -> dict[str, int]:
    """The ``llmopt.schedule`` dictionary of a kernel (empty when it has none)."""
    attr = kernel.attributes.get(SCHEDULE_ATTR)
    if not isinstance(attr, DictionaryAttr):
        return {}
    return {k: v.value.data for k, v in attr.data.items() if isinstance(v, IntegerAttr)}


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

    def fits(self, m: int, n: int) -> bool:
        """Whether the tile divides the ``m × n`` output and makes a valid block."""
        return (self.bm % self.tm == 0 and self.bn % self.tn == 0 and m % self.bm == 0
                and n % self.bn == 0 and 32 <= self.threads <= 1024 and self.threads % 32 == 0)


TILE_CANDIDATES = ((128, 128, 8, 8), (64, 128, 4, 8), (128, 64, 8, 4), (64, 64, 4, 4),
                   (32, 64, 2, 4), (64, 32, 4, 2), (32, 32, 2, 2), (16, 64, 1, 4),
                   (32, 16, 2, 1), (16, 32, 1, 2), (16, 16, 1, 1))
"""Register tiles ``(bm, bn, tm, tn)``, most operand reuse first."""


def choose_register_tile(m: int, n: int, batch: int, gpu: GpuLimits, accumulators: int = 1
                         ) -> RegisterTile | None:
    """The tile with the most reuse whose blocks still cover every multiprocessor; when no
    tile with at least 8 outputs per thread does, the one of those that makes the most
    blocks (``split-k`` then multiplies them); ``None`` when no tile divides the output.

    A ``tm × tn`` micro-tile does ``tm·tn`` multiply-adds per ``tm + tn`` loads, so bigger
    is better, until the product has fewer blocks than multiprocessors and leaves the GPU
    idle: skinny products take smaller tiles, but not below 8 outputs a thread (there
    cutting K into slices is cheaper than losing the reuse). A kernel with several
    reductions (fused gate and up projections) keeps ``accumulators`` micro-tiles per
    thread, at most 64 registers of them together.
    """
    fitting = [RegisterTile(*c) for c in TILE_CANDIDATES if RegisterTile(*c).fits(m, n)
               and c[2] * c[3] * accumulators <= 64]
    if not fitting:
        return None

    def blocks(t: RegisterTile) -> int:
        return batch * (m // t.bm) * (n // t.bn)

    for t in fitting:
        if t.tm * t.tn >= 8 and blocks(t) >= gpu.sms:
            return t
    good = [t for t in fitting if t.tm * t.tn >= 8] or fitting
    return max(good, key=blocks)


def choose_bk(k: int) -> int:
    """The K chunk staged per step: 32 (one 128-byte row per warp) when it divides K."""
    for bk in (32, 16, 8, 4, 2, 1):
        if k % bk == 0:
            return bk
    return 1


def choose_split_k(m: int, n: int, k: int, batch: int, gpu: GpuLimits) -> int:
    """How many slices to cut K into so that a skinny product fills the GPU: the blocks of
    the register tile times the slices should reach one per multiprocessor, each slice
    keeping at least 128 of K (the partial sums cost an extra pass over ``S × m × n``)."""
    tile = choose_register_tile(m, n, batch, gpu)
    if tile is None:
        return 1
    blocks = batch * (m // tile.bm) * (n // tile.bn)
    split = 1
    while (blocks * split < gpu.sms and k % (split * 2 * 32) == 0
           and k // (split * 2) >= 128):
        split *= 2
    return split
