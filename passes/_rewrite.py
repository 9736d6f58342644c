"""Rewrite helpers that passes of every level share: diagnostics that point at an op, and
patterns that keep source locations.

A pass that cannot handle an op raises :class:`OpFailure` (``fail(op, message)``), which
``llm-opt`` prints like a verifier error with the source line marked; a pass that builds new
ops wraps its pattern in :class:`KeepLocation`, so that those ops carry the location of the op
they replace and the diagnostics of later passes still point at the source.
:func:`widen_half_arithmetic` spells arithmetic on 16-bit floats as ``f32`` arithmetic
between explicit casts.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    UNKNOWN_LOC,
    BFloat16Type,
    FileLineColLoc,
    Float16Type,
    Float32Type,
)
from xdsl.ir import Attribute, Operation
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.utils.exceptions import PassFailedException

__all__ = ["KeepLocation", "OpFailure", "fail", "is_half", "widen_half_arithmetic"]


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


def is_half(typ: Attribute) -> bool:
    """``f16`` or ``bf16``: the 16-bit storage floats."""
    return isinstance(typ, Float16Type | BFloat16Type)


_NOT_ARITHMETIC = frozenset({
    "arith.extf", "arith.truncf", "arith.fptosi", "arith.fptoui", "arith.sitofp",
    "arith.uitofp", "arith.bitcast", "arith.select", "arith.constant",
})  # fmt: skip


def widen_half_arithmetic(root: Operation) -> int:
    """Rewrite every ``arith``/``math`` op under ``root`` that computes on 16-bit floats
    (``arith.addf %a, %b : bf16``) into the same op on ``f32`` between explicit casts
    (``extf`` of each 16-bit operand, ``truncf`` of each 16-bit result): one rounding, to
    nearest even, per op — the meaning the interpreters give such an op, and what PyTorch
    computes for one op on 16-bit tensors. Moves (``select``), casts and constants are kept.
    Returns the number of ops rewritten."""
    f32 = Float32Type()
    todo = [op for op in root.walk()
            if op.name.startswith(("arith.", "math.")) and op.name not in _NOT_ARITHMETIC
            and not op.regions
            and any(is_half(v.type) for v in (*op.operands, *op.results))]
    for op in todo:
        block = op.parent_block()
        assert block is not None
        operands = []
        for value in op.operands:
            if is_half(value.type):
                ext = arith.ExtFOp(value, f32)
                block.insert_op_before(ext, op)
                value = ext.result
            operands.append(value)
        wide = type(op).create(
            operands=operands, result_types=[f32 if is_half(r.type) else r.type
                                             for r in op.results],
            properties=dict(op.properties), attributes=dict(op.attributes))
        wide.location = op.location
        block.insert_op_before(wide, op)
        for old, new in zip(op.results, wide.results, strict=True):
            if is_half(old.type):
                trunc = arith.TruncFOp(new, old.type)  # type: ignore[arg-type]
                block.insert_op_before(trunc, op)
                new = trunc.result
            old.replace_all_uses_with(new)
        op.detach()
        op.erase()
    return len(todo)
