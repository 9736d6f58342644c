"""``pad-shared``: pad shared tiles whose rows would put a column in one memory bank.

**Matches** every ``tile.alloc shared`` of rank ≥ 2 whose innermost extent is a multiple of
the 32 four-byte banks of shared memory.

**Produces** the same buffer with its innermost extent increased by ``pad`` (default 1);
every access keeps its indices (the padding elements are never touched).

**Why** with rows of a multiple of 32 words, element ``[r, c]`` lives in bank ``c mod 32``
whatever ``r`` is: when the threads of a warp read one column of different rows (a register
tile reading ``tile[mi·16 + tj, kk]``), they all hit one bank and the accesses serialise
(up to 32-way). A row of ``32·q + 1`` words moves each row one bank over, so a column
spreads over all banks, at the cost of one unused word per row.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import MemRefType, ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.utils.exceptions import PassFailedException

from llmopt.dialects import tile

BANKS = 32


@dataclass
class PadAlloc(RewritePattern):
    """Pad one shared tile (see the module docstring)."""

    pad: int

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.AllocOp, rewriter: PatternRewriter) -> None:
        typ = op.result.type
        assert isinstance(typ, MemRefType)
        shape = list(typ.get_shape())
        if op.space.data != "shared" or len(shape) < 2 or shape[-1] % BANKS:
            return
        new = tile.AllocOp("shared", MemRefType(typ.element_type, [*shape[:-1],
                                                                   shape[-1] + self.pad]))
        new.attributes |= op.attributes
        new.result.name_hint = op.result.name_hint
        rewriter.replace(op, new)


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
