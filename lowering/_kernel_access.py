"""``tile-to-kernel``'s memory accesses: loads, stores, copies, prefetches and the
``cp.async`` group ops, their affine indices computed by ``arith`` ops."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import arith
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import SSAValue
from xdsl.ir.affine import AffineMap
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from llmopt.dialects import kernel, loop, tile
from llmopt.lowering._kernel_emit import AffineEmitter, Emitter, clamp_shape


@dataclass
class LowerLoad(RewritePattern):
    """``loop.load %b[map(ivs)]`` → index arithmetic + ``kernel.load %b[...]``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: loop.LoadOp, rewriter: PatternRewriter) -> None:
        emit = Emitter(rewriter, InsertPoint.before(op))
        affine = AffineEmitter(emit, op.indices)
        if op.clamped:
            indices = affine.clamped(op.map.data, clamp_shape(op, op.buffer))
        else:
            indices = affine.results(op.map.data)
        new = kernel.LoadOp(op.buffer, indices)
        new.attributes |= op.attributes
        rewriter.replace(op, new)


def _source(op: tile.CopyBase | tile.PrefetchOp, affine: AffineEmitter, buffer: SSAValue,
            amap: AffineMap, clamps: list[tuple[SSAValue, SSAValue]] | None = None
            ) -> list[SSAValue]:
    """The indices of the first of the ``count`` elements ``op`` takes from ``buffer``,
    clamped into it for a ``clamp`` op (the innermost to ``extent - count``; each clamp's
    coordinate and limit appended to ``clamps``)."""
    if op.clamped:
        return affine.clamped(amap, clamp_shape(op, buffer), op.elements, clamps)
    return affine.results(amap)


def _in_bounds(emit: Emitter, clamps: list[tuple[SSAValue, SSAValue]]) -> SSAValue:
    """``coordinate ≤ limit`` for every clamp, and-ed: the copy reads what it was asked."""
    conditions = [emit(arith.CmpiOp(value, limit, "sle")) for value, limit in clamps]
    ok = conditions[0]
    for other in conditions[1:]:
        ok = emit(arith.AndIOp(ok, other))
    return ok


def _whole_copies(op: tile.CopyBase) -> bool:
    """Whether the source's innermost extent is static and a multiple of the copy's count,
    so that a copy past the clamp's limit is past the buffer with all its elements."""
    typ = op.src.type
    assert isinstance(typ, MemRefType)
    inner = typ.get_shape()[-1]
    return inner >= 0 and inner % op.elements == 0


@dataclass
class LowerCopy(RewritePattern):
    """``tile.copy``/``tile.async_copy %s[map_s(ivs)] to %d[map_d(ivs)]`` → index arithmetic
    + ``kernel.copy``/``kernel.async_copy %s[...] to %d[...]``. With ``zero_fill`` a clamped
    asynchronous copy is ``kernel.async_copy … if %ok``, ``%ok`` true where no coordinate
    was clamped: the copies of rows past a ragged edge then read nothing (zeros) instead of
    the buffer's last row again."""

    zero_fill: bool = False

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.CopyBase, rewriter: PatternRewriter) -> None:
        emit = Emitter(rewriter, InsertPoint.before(op))
        affine = AffineEmitter(emit, op.indices)
        clamps: list[tuple[SSAValue, SSAValue]] = []
        src = _source(op, affine, op.src, op.src_map.data, clamps)
        dst = affine.results(op.dst_map.data)
        new: kernel.CopyOp | kernel.AsyncCopyOp
        if isinstance(op, tile.AsyncCopyOp):
            ok = (_in_bounds(emit, clamps) if self.zero_fill and clamps and _whole_copies(op)
                  else None)
            new = kernel.AsyncCopyOp(op.src, src, op.dst, dst, op.elements, ok)
        else:
            new = kernel.CopyOp(op.src, src, op.dst, dst, op.elements)
        new.attributes |= op.attributes
        rewriter.replace(op, new)


@dataclass
class LowerPrefetch(RewritePattern):
    """``tile.prefetch %b[map(ivs)]`` → index arithmetic (clamped as a copy's source, with
    ``clamp``) + ``kernel.prefetch %b[...]``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.PrefetchOp, rewriter: PatternRewriter) -> None:
        affine = AffineEmitter(Emitter(rewriter, InsertPoint.before(op)), op.indices)
        new = kernel.PrefetchOp(op.buffer, _source(op, affine, op.buffer, op.map.data),
                                op.elements)
        new.attributes |= op.attributes
        rewriter.replace(op, new)


@dataclass
class LowerAsyncCommit(RewritePattern):
    """``tile.async_commit`` → ``kernel.async_commit``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.AsyncCommitOp, rewriter: PatternRewriter) -> None:
        new = kernel.AsyncCommitOp()
        new.attributes |= op.attributes
        rewriter.replace(op, new)


@dataclass
class LowerAsyncWait(RewritePattern):
    """``tile.async_wait n`` → ``kernel.async_wait n``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.AsyncWaitOp, rewriter: PatternRewriter) -> None:
        new = kernel.AsyncWaitOp(op.groups)
        new.attributes |= op.attributes
        rewriter.replace(op, new)


@dataclass
class LowerStore(RewritePattern):
    """``loop.store %v, %b[map(ivs)]`` → index arithmetic + ``kernel.store %v, %b[...]``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: loop.StoreOp, rewriter: PatternRewriter) -> None:
        emit = Emitter(rewriter, InsertPoint.before(op))
        indices = AffineEmitter(emit, op.indices).results(op.map.data)
        new = kernel.StoreOp(op.value, op.buffer, indices)
        new.attributes |= op.attributes
        rewriter.replace(op, new)
