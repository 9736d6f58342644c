"""Schedule knobs of the Tile-IR passes: where they come from and their default values.

A knob of a scheduling pass is taken, in this order, from the pass option when it is set
(``register-tile{bm=64}``: every kernel), from the kernel's ``llmopt.schedule`` dictionary
(``{bm = 64 : i64, ...}``, one kernel: what ``llmopt tune`` and the tuned-config table set),
or from the heuristics, which look only at the shapes and the GPU's limits: the register
tiles and their modelled speed in :mod:`llmopt.passes.tile._schedule_tiles`, the choice of
a product's tile and K slices in :mod:`llmopt.passes.tile._schedule_product`, the blocks of
``flash-attention`` in :mod:`llmopt.passes.tile._schedule_attention`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, StringAttr, i64
from xdsl.ir import Operation

from llmopt.dialects import tile

SCHEDULE_ATTR = "llmopt.schedule"


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


DEFAULT_STAGES = 3
"""Shared-memory slots per staged tile that ``async-copy`` fills ahead (1: synchronous fills)."""

PRODUCER_ROLES = 2
"""The ``roles`` knob of a product whose copies a producer warpgroup issues (``async-copy``
gives its slots all of the shared memory, ``warp-specialize`` splits the block); 1: every
thread copies and computes."""
PRODUCER_STAGES = 4
"""The slots a staged tile of a two-role product gets by default."""


PRODUCER_MIN_CHUNKS = 8
"""The fewest K chunks a block's loop has for a product to get two roles by default: a
producer's set-up (its barriers, one block a multiprocessor) is paid back over the loop. On
the H100 a product of eight slices of four chunks was slower with a producer, one of four
slices of eight faster. Timings: ``bench/results/schedule-constants.md``
(``PRODUCER_MIN_CHUNKS``)."""


def default_roles(kernel: Operation, arch: str, element_bits: Sequence[int],
                  static: bool, chunks: int = PRODUCER_MIN_CHUNKS) -> int:
    """Two roles (a producer warpgroup, the rest computing) for a tensor-core product (its
    accumulators in the ``mma`` layout; not an attention kernel) on the one architecture
    with warpgroup products and bulk tensor copies (sm_90a), whose staged tiles are 16-bit
    and whose chunk count is ``static``, at least :data:`PRODUCER_MIN_CHUNKS` of them; else
    one. Its copies are then whole boxes, one bulk copy a tile: a ragged edge of static or
    runtime rows is clamped to the source's extent, which the copy engine's zero fill
    replaces."""
    from llmopt.target import WGMMA_ARCH

    product = "llmopt.flash" not in kernel.attributes and any(
        op.attributes.get("llmopt.layout") == StringAttr("mma") for op in kernel.walk())
    if (arch == WGMMA_ARCH and static and product and chunks >= PRODUCER_MIN_CHUNKS
            and element_bits and all(bits == 16 for bits in element_bits)):
        return PRODUCER_ROLES
    return 1


def default_kmajor(kernel: Operation) -> int:
    """``stage-inputs``' ``kmajor`` when nothing sets it: 2 (tiles in the global buffer's
    order, which ``async-copy`` fills with 16-byte copies) unless the kernel's schedule turns
    the asynchronous copies off (``stages = 1``), then 1 (K-major)."""
    return 1 if knob(0, kernel, "stages", DEFAULT_STAGES) == 1 else 2


def default_carry(kernel: Operation) -> int:
    """``async-copy``'s ``carry`` when nothing sets it: 1 (the slots and the fetched chunk are
    counters the K loop carries) for a kernel with one register accumulator, else 2 (computed
    from ``k0``): carried counters paid for single products, not for the fused gate/up
    kernels (two accumulator tiles, 250+ registers). Timings:
    ``bench/results/schedule-constants.md`` (``default_carry``)."""
    accumulators = sum(1 for op in kernel.walk()
                       if isinstance(op, tile.AllocOp) and op.space.data == "registers")
    return 1 if accumulators <= 1 else 2


def default_blocked(kernel: Operation) -> int:
    """``register-tile``'s ``blocked`` when nothing sets it: 1 (a thread's outputs adjacent)
    for K-major tiles, whose rows a thread then reads as vectors; else 2 (cyclic), so that
    the threads of a warp read rows of a tile in the global buffer's order that lie in
    different banks."""
    return 1 if knob(0, kernel, "kmajor", default_kmajor(kernel)) == 1 else 2


def padded_bytes(shape: Sequence[int], pad: int, elem_bytes: int = 4) -> int:
    """Bytes of a shared tile of ``shape`` whose rows (innermost dimension) ``pad-shared``
    pads by ``pad`` elements."""
    return math.prod(shape[:-1]) * (shape[-1] + pad) * elem_bytes
