"""The blocks of ``flash-attention`` (query rows, key block and warps:
:func:`choose_attention_blocks`) and the warp grids that tile them (:func:`warp_grid`); the
shared memory of a kernel's tiles once ``pad-shared`` pads them (:func:`shared_bytes`, from
each tile's :func:`~llmopt.passes.tile._schedule.padded_bytes`), which ``flash-attention``
checks its blocks against.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import IntegerAttr, MemRefType
from xdsl.ir import Operation

from llmopt.dialects import tile
from llmopt.passes.tile._schedule import padded_bytes

DECODE_KEY_BLOCK = 32
"""Keys a block of a split-key (decode) attention takes at once: faster than 64 on a decode
step (``bench/results/decode-ab-nopf-h200.md``)."""

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
                            runtime_keys: bool = False,
                            split_keys: bool = False) -> AttentionBlocks | None:
    """The options when set, else: the largest ``bm`` of 64, 32, 16 that divides the queries
    and still makes ``sms`` blocks over ``rows`` (batch × heads) rows of query blocks (else
    the smallest that divides; when none divides, the same choice among all three, the last
    query block overhanging the queries); the largest ``bn`` of 64, 32, 16 that divides the
    keys (when none does, the smallest that covers them, at most 64: the last key block
    overhangs the keys and its extra keys are masked; longer key blocks mean fewer rounds of
    row statistics and barriers per key, see ``docs/performance.md``) — 64 whenever the keys
    are a runtime length (``runtime_keys``: any length is ragged, and what divides the
    maximum says nothing of it), 32 when those keys are also split over blocks
    (``split_keys``, a decode step: shorter key blocks give twice the splits, so twice the
    blocks share a short cache); the most warps, at most 8, that both products tile
    (:func:`warp_grid`). ``None`` when the head dimension is no multiple of 16 or the sizes
    tile nothing."""
    if head_dim % 16:
        return None
    if not bm:
        fitting = [b for b in (64, 32, 16) if queries % b == 0] or [64, 32, 16]
        bm = next((b for b in fitting if rows * -(-queries // b) >= sms), fitting[-1])
    if not bn and runtime_keys:
        bn = DECODE_KEY_BLOCK if split_keys else 64
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
