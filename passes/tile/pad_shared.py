"""``pad-shared``: pad shared tiles whose rows would put a column in one memory bank.

**Matches** every ``tile.alloc shared`` of rank ≥ 2 whose innermost extent is even, but a
swizzled one (``llmopt.swizzle``, which ``wgmma-fragments`` lays out for the tensor core's
descriptors: its 16-byte chunks are permuted per row instead, and a descriptor reads rows of
exactly 128 bytes).

**Produces** the same buffer with its innermost extent increased by ``pad`` (default 1; a
tile that asks for more with an ``llmopt.pad`` attribute, e.g. 4 to keep K-major rows
16-byte aligned for vector reads, gets that); every access keeps its indices (the padding
elements are never touched). An odd row of ``s + 4`` words still spreads a column over all
banks when ``s`` is a multiple of 8 only up to ``32 / gcd(s + 4, 32)`` banks — the price of
alignment.

A tile of 16-bit elements that a product in the tensor-core layout reads (a ``loop.load``
in a ``tile.forall`` marked ``llmopt.layout = "mma"``, which ``mma-fragments`` turns into
``ldmatrix``) gets rows of an odd multiple of 16 bytes instead (``s ≡ 8 mod 16`` elements:
rows of 32 become 40): the asked padding when it gives that, else the least that does.
Padding never breaks a vector copy: a tile that ``tile.copy``/``tile.async_copy`` move
``n`` elements at a time to or from keeps rows of a multiple of ``n`` (the padding is
raised to the next that does; a tile padded already, run through the pass again, gets
rows of a multiple of ``n`` again, not ``+ 1``).

**Why** shared memory has 32 banks of four bytes: element ``[r, c]`` of rows ``s`` words
long lives in bank ``(r·s + c) mod 32``. When the threads of a warp read one column of
consecutive rows (a register tile reading ``tile[mi·16 + tj, kk]``), they hit
``32 / gcd(s, 32)`` distinct banks, so an even ``s`` serialises the read (a row of 32 words:
all 32 threads on one bank; of 16: 16 threads per bank pair). An odd row length spreads a
column over all 32 banks, at the cost of one unused word per row. ``ldmatrix`` reads
8 rows of 16 bytes at once: they are conflict-free when their starts fall in the 8
distinct 16-byte quarters of the 128 bytes the banks span, which rows an odd multiple of
16 bytes long guarantee (and which 16-byte alignment of every row requires anyway).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, MemRefType, ModuleOp, StringAttr
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.utils.exceptions import PassFailedException

from llmopt.dialects import loop, tile
from llmopt.dialects.wgmma import SWIZZLE_ATTR


@dataclass
class PadAlloc(RewritePattern):
    """Pad one shared tile (see the module docstring)."""

    pad: int

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.AllocOp, rewriter: PatternRewriter) -> None:
        typ = op.result.type
        assert isinstance(typ, MemRefType)
        shape = list(typ.get_shape())
        if (op.space.data != "shared" or len(shape) < 2 or shape[-1] % 2
                or SWIZZLE_ATTR in op.attributes):  # a swizzled tile has no bank conflicts
            return
        asked = op.attributes.get("llmopt.pad")
        pad = asked.value.data if isinstance(asked, IntegerAttr) else self.pad
        if typ.element_type.bitwidth == 16 and _read_by_mma(op):  # type: ignore[attr-defined]
            pad = ldmatrix_pad(shape[-1], pad)
        width = _copy_width(op)
        if pad > 0 and (shape[-1] + pad) % width:  # keep every vector copy's rows aligned
            pad += (width - (shape[-1] + pad) % width) % width
        if pad <= 0:
            return
        new = tile.AllocOp("shared", MemRefType(typ.element_type, [*shape[:-1],
                                                                   shape[-1] + pad]))
        new.attributes |= {k: v for k, v in op.attributes.items() if k != "llmopt.pad"}
        new.result.name_hint = op.result.name_hint
        rewriter.replace(op, new)


LDMATRIX_ROW = 8
"""16-bit elements of one ``ldmatrix`` row (16 bytes)."""


def ldmatrix_pad(row: int, asked: int) -> int:
    """The padding that makes rows of ``row`` 16-bit elements an odd multiple of 16 bytes:
    ``asked`` when it does, else the least that does."""
    if asked >= 0 and (row + asked) % (2 * LDMATRIX_ROW) == LDMATRIX_ROW:
        return asked
    return (LDMATRIX_ROW - row) % (2 * LDMATRIX_ROW)


def _copy_width(alloc: tile.AllocOp) -> int:
    """The most elements a ``tile.copy``/``tile.async_copy`` moves at once to or from
    ``alloc`` (1 if none does): each copy's offsets must stay multiples of it."""
    widths = [use.operation.elements for use in alloc.result.uses
              if isinstance(use.operation, tile.CopyBase)]
    return max(widths, default=1)


def _read_by_mma(alloc: tile.AllocOp) -> bool:
    """Whether a product in the tensor-core layout reads ``alloc`` (a ``loop.load`` inside a
    ``tile.forall`` marked ``llmopt.layout = "mma"``)."""
    for use in alloc.result.uses:
        if not isinstance(use.operation, loop.LoadOp):
            continue
        parent = use.operation.parent_op()
        while parent is not None and not isinstance(parent, tile.ForallOp):
            parent = parent.parent_op()
        if parent is not None and parent.attributes.get("llmopt.layout") == StringAttr("mma"):
            return True
    return False


@dataclass(frozen=True)
class PadShared(ModulePass):
    """Pad shared tiles against bank conflicts (see the module docstring). Option: ``pad``
    (words added to each row, default 1; 0 disables the pass)."""

    name = "pad-shared"

    pad: int = 1

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.pad < 0:
            raise PassFailedException(f"pad-shared: pad must be ≥ 0, got {self.pad}")
        if self.pad:
            PatternRewriteWalker(PadAlloc(self.pad), apply_recursively=False).rewrite_module(op)
