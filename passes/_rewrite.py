"""Rewrite helpers that passes of every level share: diagnostics that point at an op, and
patterns that keep source locations.

A pass that cannot handle an op raises :class:`OpFailure` (``fail(op, message)``), which
``llm-opt`` prints like a verifier error with the source line marked; a pass that builds new
ops wraps its pattern in :class:`KeepLocation`, so that those ops carry the location of the op
they replace and the diagnostics of later passes still point at the source.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import UNKNOWN_LOC, FileLineColLoc
from xdsl.ir import Operation
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.utils.exceptions import PassFailedException

__all__ = ["KeepLocation", "OpFailure", "fail"]


class OpFailure(PassFailedException):
    """A pass cannot handle ``op``: the message names the op and, when known, its source
    position; ``llm-opt`` prints it like a verifier error, with the source line marked."""

    def __init__(self, op: Operation, message: str) -> None:
        where = ""
        if isinstance(op.location, FileLineColLoc):
            loc = op.location
            where = f"{loc.filename.data}:{loc.line.data}:{loc.column.data}: "
        super().__init__(f"{where}'{op.name}' op: {message}")
        self.op = op
        self.detail = message


def fail(op: Operation, message: str) -> PassFailedException:
    """A diagnostic naming ``op`` (and its source position when known)."""
    return OpFailure(op, message)


@dataclass
class KeepLocation(RewritePattern):
    """Applies ``pattern``; every op it inserts without a location (and every such op nested
    in it) gets the location of the op the pattern matched, so that diagnostics of later
    passes still point at the source."""

    pattern: RewritePattern

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        location = op.location
        if location == UNKNOWN_LOC:
            self.pattern.match_and_rewrite(op, rewriter)
            return

        def stamp(new: Operation) -> None:
            for inner in new.walk():
                if inner.location == UNKNOWN_LOC:
                    inner.location = location

        rewriter.operation_insertion_handler.append(stamp)
        try:
            self.pattern.match_and_rewrite(op, rewriter)
        finally:
            rewriter.operation_insertion_handler.remove(stamp)
