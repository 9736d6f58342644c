"""The online softmax of a flash kernel: row statistics of a score tile in shared memory.

A block owns ``bm`` query rows and sees the keys block by block. After each key block's
scores ``g(Q·Kᵀ)`` are in the shared tile ``ps[bm, bn]``, :meth:`OnlineSoftmax.steps` are
the foralls that, ``parts`` threads a row (each over a slice of ``bn / parts`` keys, the
slices combined through the shared ``part[bm, parts]``):

1. take the row maximum and the running maximum ``m ← max(m, max_j ps)``; the factor
   ``corr = exp(m_old - m)`` that rescales what the earlier key blocks summed;
2. turn the scores into ``p = exp(s - m)`` in place (``ps`` is then ``P·V``'s ``P``) —
   or, given a 16-bit tile ``pb[bm, bn]`` (``probs``), into ``p`` rounded to 16 bits
   there, as the ``P`` of a 16-bit ``P·V`` (``ps`` keeps the ``f32`` scores), computed as
   ``exp2(s · log2 e - m · log2 e)`` (:func:`probability`);
3. take the row sum and the running sum ``l ← l · corr + Σ_j p`` (of the ``p`` that
   ``P·V`` reads, rounded or not, so the weights it normalises are the ones it sums).

A row whose scores are all ``-inf`` so far (masked) counts its maximum as 0 in the
exponents, so its ``p`` are 0 rather than ``NaN``. :meth:`OnlineSoftmax.init` sets
``m = -inf`` and ``l = 0`` before the first key block; the flash kernel reads ``corr`` (to
rescale its output accumulators) and ``l`` (the softmax denominator of its epilogue).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith
from xdsl.dialects.arith import FastMathFlag, FastMathFlagsAttr
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, MemRefType, StringAttr, i64
from xdsl.dialects.math import Exp2Op, ExpOp, FmaOp
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.ir.affine import AffineDimExpr, AffineMap

from llmopt.dialects import loop, tile
from llmopt.passes.tile._access import block_threads

NEG_INF = float("-inf")
LOG2_E = 1.4426950408889634


def exponent_shift(m: SSAValue, probs: tile.AllocOp) -> tuple[list[Operation], SSAValue]:
    """What :func:`probability` takes for a row whose maximum is ``m``, and the ops that make
    it (once a row, not once a score): ``m`` itself for an ``f32`` ``P``, ``-m · log2 e``
    for a 16-bit one."""
    if probs.result.type.element_type == m.type:  # type: ignore[attr-defined]
        return [], m
    log2e = const_float(LOG2_E, m.type)
    scaled = arith.MulfOp(m, log2e.result)
    neg = arith.NegfOp(scaled.result)
    return [log2e, scaled, neg], neg.result


def probability(s: SSAValue, shift: SSAValue, probs: tile.AllocOp, scale: float | None = None
                ) -> tuple[list[Operation], SSAValue]:
    """``p = exp(s - m)`` (at most 1) as the tile ``probs`` holds it, and the ops that make
    it, ``shift`` being :func:`exponent_shift`'s. An ``f32`` ``P`` takes ``exp(s - m)``.
    Given a 16-bit ``P`` and a ``scale`` ``c``, ``s`` is a score not yet scaled: ``p =
    exp(c · s - m)``, whose multiply-add takes ``c · log2 e`` for ``log2 e``.

    A 16-bit ``P`` takes ``exp2(fma(s, log2 e, -m · log2 e))``, rounded once to 16 bits:
    one multiply-add and one hardware exponential a score, where ``expf`` is about ten
    instructions of range reduction around it. The exponent differs from ``(s - m) · log2
    e`` by the rounding of ``m · log2 e`` and of the sum: a relative ``2⁻²³ · |m| · log2 e``
    of ``p`` at most, far below the ``2⁻⁹`` of the rounding to 16 bits that follows (scores
    would need ``|m|`` near ``2¹³`` to matter). The ``exp2`` may approximate (fastmath
    ``afn``): ``kernel-to-cuda`` writes it as the bare ``ex2.approx.ftz``, whose results
    below ``2⁻¹²⁶`` are flushed to 0; such a ``p`` adds nothing visible to a row whose
    largest ``p`` is 1."""
    if probs.result.type.element_type == s.type:  # type: ignore[attr-defined]
        assert scale is None, "an f32 P takes scaled scores"
        diff = arith.SubfOp(s, shift)
        p: Operation = ExpOp(diff.result)
        return [diff, p], p.results[0]
    log2e = const_float(LOG2_E * (1.0 if scale is None else scale), s.type)
    exponent = FmaOp(s, log2e.result, shift)
    p = Exp2Op(exponent.result, FastMathFlagsAttr((FastMathFlag.APPROX_FUNC,)))
    rounded = arith.TruncFOp(p.results[0], probs.result.type.element_type)  # type: ignore[attr-defined]
    return [log2e, exponent, p, rounded], rounded.result


def const_float(value: float, typ: Attribute) -> arith.ConstantOp:
    return arith.ConstantOp(FloatAttr(value, typ))  # type: ignore[arg-type]


def shared(shape: Sequence[int], typ: Attribute, name: str, pad: int | None) -> tile.AllocOp:
    """A shared buffer (``pad``: the padding ``pad-shared`` gives it)."""
    alloc = tile.AllocOp("shared", MemRefType(typ, list(shape)))  # type: ignore[arg-type]
    alloc.result.name_hint = name
    if pad is not None:
        alloc.attributes["llmopt.pad"] = IntegerAttr(pad, i64)
    return alloc


def _ident(rank: int) -> AffineMap:
    return AffineMap.identity(rank)


class OnlineSoftmax:
    """The softmax statistics of the score tile ``ps`` (``bm × bn``) over ``threads``
    threads (see the module docstring)."""

    def __init__(self, ps: tile.AllocOp, threads: int, typ: Attribute,
                 probs: tile.AllocOp | None = None) -> None:
        shape = ps.result.type.get_shape()  # type: ignore[attr-defined]
        self.ps, self.bm, self.bn, self.typ = ps, shape[0], shape[1], typ
        self.probs = ps if probs is None else probs
        """The tile ``p`` is written to: ``ps`` itself, or a 16-bit tile."""
        self.m, self.l, self.corr, self.shift = (
            shared([self.bm], typ, name, None) for name in ("m", "l", "corr", "shift"))
        parts = min(self.bn, max(1, threads // self.bm))
        while self.bn % parts:
            parts //= 2
        self.parts = parts
        self.part = shared([self.bm, parts], typ, "part", 1)

    def allocs(self) -> list[Operation]:
        """The shared buffers, for the block's body."""
        return [self.m, self.l, self.corr, self.shift, self.part]

    def _rows(self, role: str) -> tuple[tile.ForallOp, Block, SSAValue]:
        """A forall with one point per query row of the block."""
        forall, (r,) = block_threads([self.bm], ["r"])
        forall.attributes["llmopt.role"] = StringAttr(role)
        return forall, forall.body.block, r

    def init(self) -> tile.ForallOp:
        """Running maximum -inf, running sum 0."""
        forall, blk, r = self._rows("init")
        ninf, zero = const_float(NEG_INF, self.typ), const_float(0.0, self.typ)
        blk.add_ops([ninf, zero, loop.StoreOp(ninf.result, self.m.result, _ident(1), [r]),
                     loop.StoreOp(zero.result, self.l.result, _ident(1), [r])])
        return forall

    def _partial(self, kind: str, role: str, tile_: tile.AllocOp) -> tile.ForallOp:
        """``part[r, q] = kind`` over the q-th slice of row ``r`` of ``tile_`` (widened
        to the statistics' type when it is a 16-bit tile)."""
        forall, (r, q) = block_threads([self.bm, self.parts], ["r", "q"])
        forall.attributes["llmopt.role"] = StringAttr(role)
        width = self.bn // self.parts
        red = loop.ReduceOp(kind, width, self.typ)
        x = loop.LoadOp(tile_.result, AffineMap(3, 0, (
            AffineDimExpr(0), AffineDimExpr(1) * width + AffineDimExpr(2))), [r, q, red.iv])
        ops: list[Operation] = [x]
        if x.result.type != self.typ:
            ops.append(arith.ExtFOp(x.result, self.typ))
        red.body.block.add_ops([*ops, loop.YieldOp(ops[-1].results[0])])
        forall.body.block.add_ops([red, loop.StoreOp(red.result, self.part.result,
                                                     _ident(2), [r, q])])
        return forall

    def _combined(self, kind: str, r: SSAValue) -> loop.ReduceOp:
        """``kind`` over the parts of row ``r``."""
        red = loop.ReduceOp(kind, self.parts, self.typ)
        x = loop.LoadOp(self.part.result, _ident(2), [r, red.iv])
        red.body.block.add_ops([x, loop.YieldOp(x.result)])
        return red

    def steps(self) -> list[Operation]:
        """The statistics of one key block, once its scores are in ``ps``."""
        typ, one = self.typ, _ident(1)
        stats, blk, r = self._rows("row_max")
        m_old = loop.LoadOp(self.m.result, one, [r])
        row_max = self._combined("max", r)
        m_new = arith.MaximumfOp(m_old.result, row_max.result)
        ninf, zero = const_float(NEG_INF, typ), const_float(0.0, typ)
        empty = arith.CmpfOp(m_new.result, ninf.result, "oeq")
        m_safe = arith.SelectOp(empty.result, zero.result, m_new.result)
        shift = arith.SubfOp(m_old.result, m_safe.result)
        factor = ExpOp(shift.result)
        shifting, exp_shift = exponent_shift(m_safe.result, self.probs)
        blk.add_ops([m_old, row_max, m_new, ninf, zero, empty, m_safe, shift, factor,
                     *shifting,
                     loop.StoreOp(factor.results[0], self.corr.result, one, [r]),
                     loop.StoreOp(m_new.result, self.m.result, one, [r]),
                     loop.StoreOp(exp_shift, self.shift.result, one, [r])])
        to_p, (r, c) = block_threads([self.bm, self.bn], ["r", "c"])
        to_p.attributes["llmopt.role"] = StringAttr("exp")
        x = loop.LoadOp(self.ps.result, _ident(2), [r, c])
        mr = loop.LoadOp(self.shift.result, one, [r])
        making, value = probability(x.result, mr.result, self.probs)
        to_p.body.block.add_ops([x, mr, *making,
                                 loop.StoreOp(value, self.probs.result, _ident(2), [r, c])])
        sums, blk, r = self._rows("row_sum")
        row_sum = self._combined("add", r)
        l_old = loop.LoadOp(self.l.result, one, [r])
        f = loop.LoadOp(self.corr.result, one, [r])
        scaled = arith.MulfOp(l_old.result, f.result)
        l_new = arith.AddfOp(scaled.result, row_sum.result)
        blk.add_ops([row_sum, l_old, f, scaled, l_new,
                     loop.StoreOp(l_new.result, self.l.result, one, [r])])
        return [self._partial("max", "row_max", self.ps), stats, to_p,
                self._partial("add", "row_sum", self.probs), sums]
