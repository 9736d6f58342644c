"""The online softmax of a flash kernel, its row statistics in the registers of the threads
that hold the scores.

The flash kernel's score tile ``s`` is a register tile in the tensor-core layout: thread
``(wi, wj, g, t)`` holds, for each of its rows ``(i, rh)``, the scores of its columns
``(j, rl)`` (see :func:`~llmopt.passes.tile.register_tile.thread_layout`). After the mask
and scale are applied to ``s`` in place, :meth:`RegisterSoftmax.steps` are, per key block:

1. each thread's maximum of each of its rows over its columns, into the shared
   ``pmax[row, 4·wj + t]`` (the ``4·WJ`` threads that share a row: 4 lanes of each of the
   ``WJ`` warps across the columns);
2. after a barrier, every thread combines its rows' ``4·WJ`` partials (all of them in the same
   order, so the threads of a row hold the same bits) into the running maximum ``m`` and
   the factor ``corr = exp(m_old - m)``, both kept in registers; turns its scores into
   ``p = exp(s - m)`` — rounded once into the 16-bit ``pb`` when ``P·V`` is 16-bit (computed
   as ``exp2(s · log2 e - m · log2 e)``, :func:`~llmopt.passes.tile._online_softmax.probability`),
   into the ``f32`` ``P`` tile otherwise, and in ``s`` before any rounding; and puts its
   rows' partial sums of ``p`` into the shared ``psum``;
3. after a barrier, every thread adds its rows' partial sums to the running sum ``l ← l ·
   corr + Σ p``, in registers.

The row sums add ``p`` in ``f32``, before the rounding that makes ``P·V``'s 16-bit operand,
as PyTorch's flash kernels do: the conversion back to ``f32`` of every rounded ``p`` goes,
and with the operand taken from registers (:mod:`~llmopt.passes.tile._mma_forward`) pairs
of ``p`` are rounded in one instruction.

When each warp owns whole rows (``WJ = 1``: ``flash-attention{row_warps}``), a row's
partials are the 4 lanes of one quad: the three steps are one forall, each partial combined
by ``tile.lane_reduce … lanes 4`` (two shuffles), with no shared partials and no barrier
(:attr:`RegisterSoftmax.shuffled`).

**Rescaling only where it pays** (``flash-attention{rescale_margin=N}``, off by default).
The output accumulators of a row are rescaled only when its ``corr`` is not 1 (a branch a
row, :meth:`RegisterSoftmax.unless_one`), and the running maximum moves only when a key
block's exceeds it by more than ``N`` powers of two, so that after a row's first
blocks most blocks leave it, and its factor 1, alone: ``p`` is then at most
``2^margin`` instead of 1, which ``f32`` sums and a 16-bit ``P`` (``bf16``'s range; ``f16``
to 65504) hold with the same relative rounding, and the output, divided by the same
``l``, is the same softmax.

A row whose scores are all ``-inf`` so far counts its maximum as 0 in the exponents, as in
:mod:`~llmopt.passes.tile._online_softmax`. The output accumulators are rescaled by the
``corr`` of the same thread's registers, so the output product's layout must give every
thread the rows it has in the score product (:func:`same_rows`), and it is used for at most
:data:`MAX_ROW_PARTIALS` partials a row (:func:`fits`). After the loop over key
blocks, :meth:`RegisterSoftmax.finish` stores ``m`` and ``l`` of each row (from its threads
with ``wj = t = 0``) into the shared ``m`` and ``l`` the epilogue reads.

**Why** the shared-memory statistics write the whole score tile, read it three times and
wait at five barriers per key block; here the scores stay in registers, each thread writes
and reads a few partials per row, and a key block has two barriers besides its fills'
(none with whole rows a warp).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import MemRefType, StringAttr
from xdsl.dialects.math import ExpOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.ir.affine import AffineDimExpr, AffineMap

from llmopt.dialects import loop, tile
from llmopt.passes.tile._access import (
    UNROLL,
    Linear,
    block_threads,
    close_guards,
    guard_inside,
    load_at,
    loop_nest,
    store_at,
)
from llmopt.passes.tile._online_softmax import (
    NEG_INF,
    const_float,
    exponent_shift,
    probability,
    shared,
)
from llmopt.passes.tile.register_tile import ThreadLayout

MAX_ROW_PARTIALS = 16
"""The most partials a row may have (``4·WJ``, the threads across its columns): every thread
reads all of them twice a key block, so with many warps across the columns (a decode
step's 16 rows over 8 warps: 32 partials) the shared-memory statistics, whose threads each
read a few, take fewer loads."""


def fits(scores: ThreadLayout, output: ThreadLayout) -> bool:
    """Whether the statistics can stay in registers: :func:`same_rows`, and at most
    :data:`MAX_ROW_PARTIALS` partials a row."""
    return same_rows(scores, output) and 4 * scores.forall[1] <= MAX_ROW_PARTIALS


def same_rows(scores: ThreadLayout, output: ThreadLayout) -> bool:
    """Whether every thread holds the same rows in both layouts: the same threads and the
    same rows a thread (``(wi, g, i, rh)`` mapped alike)."""
    return (tuple(scores.forall) == tuple(output.forall)
            and scores.nest[:2] == output.nest[:2] and scores.m == output.m)


class RegisterSoftmax:
    """The row statistics of the register score tile ``s`` (see the module docstring) for
    a flash kernel of ``bm`` rows whose ``P`` goes to the shared tile ``probs``."""

    def __init__(self, lay: ThreadLayout, sacc: tile.AllocOp, probs: tile.AllocOp,
                 bm: int, typ: Attribute, scale: float | None = None, margin: int = -1
                 ) -> None:
        self.lay, self.sacc, self.probs, self.typ = lay, sacc, probs, typ
        self.margin = margin
        """With ``margin ≥ 0`` a row's output is rescaled only when its factor is not 1, and
        its running maximum moves only when the key block's exceeds it by more than
        ``margin · ln 2`` (``p`` then stays below ``2^margin``); -1: every row is rescaled
        each key block, its maximum the largest score so far."""
        self.scale = scale
        """The statistics are of ``scale · s`` (the scores step left them unscaled), else
        of ``s``."""
        self.rows, self.cols = lay.nest[0], lay.nest[2]  # I, J
        self.parts = 4 * lay.forall[1]  # 4 lanes of each of the WJ warps share a row
        self.shuffled = self.parts == 4
        """Whether a row's partials are the 4 lanes of a quad of one warp (``WJ = 1``: warps
        own whole rows), combined by shuffles instead of through ``pmax`` and ``psum``."""
        stats = [*lay.forall, self.rows, 2]
        self.m_reg, self.l_reg, self.c_reg = (self._registers(stats, name)
                                              for name in ("m_run", "l_run", "corr"))
        self.pmax = shared([bm, self.parts], typ, "pmax", 1)
        self.psum = shared([bm, self.parts], typ, "psum", 1)
        self.m = shared([bm], typ, "m", None)
        self.l = shared([bm], typ, "l", None)

    def _registers(self, shape: Sequence[int], name: str) -> tile.AllocOp:
        alloc = tile.AllocOp("registers", MemRefType(self.typ, list(shape)))  # type: ignore[arg-type]
        alloc.result.name_hint = name
        return alloc

    def allocs(self) -> list[Operation]:
        """The buffers, for the block's body."""
        partials = [] if self.shuffled else [self.pmax, self.psum]
        return [self.m_reg, self.l_reg, self.c_reg, *partials, self.m, self.l]

    # --- pieces -----------------------------------------------------------------------------

    def _rows(self, role: str) -> tuple[tile.ForallOp, Block, list[SSAValue]]:
        """A forall of the block's threads over their rows ``(i, rh)``: the forall, the
        body of the nest and the ivs ``(wi, wj, g, t, i, rh)``."""
        forall, tivs = block_threads(list(self.lay.forall), list(self.lay.forall_names))
        nest, inner, nivs = loop_nest([self.rows, 2], ["i", "rh"], UNROLL)
        forall.body.block.add_op(nest)
        forall.attributes["llmopt.role"] = StringAttr(role)
        return forall, inner, [*tivs, *nivs]

    def row(self, ivs: Sequence[SSAValue]) -> Linear:
        """The row of the tile at ``(wi, wj, g, t, i, rh, …)``."""
        return Linear.of(*((c, ivs[k]) for c, k in self.lay.m))

    def part(self, ivs: Sequence[SSAValue]) -> Linear:
        """The thread's partial of a row, ``4·wj + t``."""
        return Linear.of((4, ivs[1]), (1, ivs[3]))

    def stat(self, reg: tile.AllocOp, ivs: Sequence[SSAValue]) -> loop.LoadOp:
        """``reg[wi, wj, g, t, i, rh]``."""
        return loop.LoadOp(reg.result, AffineMap.identity(6), list(ivs[:6]))

    def _put(self, value: SSAValue, reg: tile.AllocOp, ivs: Sequence[SSAValue]
             ) -> loop.StoreOp:
        return loop.StoreOp(value, reg.result, AffineMap.identity(6), list(ivs[:6]))

    def _over_columns(self, kind: str, ivs: Sequence[SSAValue]) -> loop.ReduceOp:
        """``kind`` over the thread's columns ``(j, rl)`` of ``s`` in row ``(i, rh)``."""
        red = loop.ReduceOp(kind, 2 * self.cols, self.typ)
        red.attributes |= UNROLL
        q = AffineDimExpr(6)
        amap = AffineMap(7, 0, (*(AffineDimExpr(k) for k in range(6)), q // 2, q % 2))
        x = loop.LoadOp(self.sacc.result, amap, [*ivs[:6], red.iv])
        red.body.block.add_ops([x, loop.YieldOp(x.result)])
        return red

    def _over_parts(self, kind: str, buffer: tile.AllocOp, row: Linear) -> loop.ReduceOp:
        """``kind`` over the ``parts`` partials of ``row`` in ``buffer``."""
        red = loop.ReduceOp(kind, self.parts, self.typ)
        red.attributes |= UNROLL
        x = load_at(buffer, row, Linear.of((1, red.iv)))
        red.body.block.add_ops([x, loop.YieldOp(x.result)])
        return red

    # --- steps ------------------------------------------------------------------------------

    def init(self) -> tile.ForallOp:
        """Running maximum -inf, running sum 0."""
        forall, inner, ivs = self._rows("init")
        ninf, zero = const_float(NEG_INF, self.typ), const_float(0.0, self.typ)
        inner.add_ops([ninf, zero, self._put(ninf.result, self.m_reg, ivs),
                       self._put(zero.result, self.l_reg, ivs)])
        return forall

    def steps(self) -> list[Operation]:
        """The statistics of one key block, once its masked and scaled scores are in ``s``."""
        if self.shuffled:
            return [self._shuffled()]
        partial, inner, ivs = self._rows("row_max")
        red = self._over_columns("max", ivs)
        inner.add_ops([red, store_at(red.result, self.pmax, self.row(ivs), self.part(ivs))])
        return [partial, self._exp(), self._sums()]

    def _shuffled(self) -> tile.ForallOp:
        """Steps 1-3 of the module docstring in one forall, each row's four partials
        combined by the lanes of its quad (``tile.lane_reduce … lanes 4``)."""
        forall, inner, ivs = self._rows("softmax")
        part_max = self._over_columns("max", ivs)
        row_max = tile.LaneReduceOp("max", part_max.result, 4)
        inner.add_ops([part_max, row_max])
        corr = self._rescale(inner, ivs, row_max.result)
        part_sum = self._over_columns("add", ivs)
        row_sum = tile.LaneReduceOp("add", part_sum.result, 4)
        inner.add_ops([part_sum, row_sum])
        self._add_sum(inner, ivs, row_sum.result, corr)
        return forall

    def _rescale(self, inner: Block, ivs: Sequence[SSAValue], row_max: SSAValue) -> SSAValue:
        """The running maximum ``m`` and the factor ``corr`` from the key block's
        ``row_max``, kept in registers; ``p = exp(s - m)`` into ``P`` and ``s`` (the
        exponentials of the thread's columns of its row). Returns ``corr``."""
        if self.scale is not None:  # max(c·s) = c·max(s) for c > 0, roundings alike
            c = const_float(self.scale, self.typ)
            scaled_max = arith.MulfOp(row_max, c.result)
            inner.add_ops([c, scaled_max])
            row_max = scaled_max.result
        m_old = self.stat(self.m_reg, ivs)
        m_max = arith.MaximumfOp(m_old.result, row_max)
        inner.add_ops([m_old, m_max])
        m_new = m_max.result
        if self.margin > 0:  # -inf + margin is -inf: a row's first scores always move it
            margin = const_float(self.margin * math.log(2.0), self.typ)
            bar = arith.AddfOp(m_old.result, margin.result)
            grows = arith.CmpfOp(m_max.result, bar.result, "ogt")
            kept = arith.SelectOp(grows.result, m_max.result, m_old.result)
            inner.add_ops([margin, bar, grows, kept])
            m_new = kept.result
        ninf, zero = const_float(NEG_INF, self.typ), const_float(0.0, self.typ)
        empty = arith.CmpfOp(m_new, ninf.result, "oeq")
        m_safe = arith.SelectOp(empty.result, zero.result, m_new)
        shift = arith.SubfOp(m_old.result, m_safe.result)
        corr = ExpOp(shift.result)
        inner.add_ops([ninf, zero, empty, m_safe, shift, corr,
                       self._put(corr.results[0], self.c_reg, ivs),
                       self._put(m_new, self.m_reg, ivs)])
        shifting, exp_shift = exponent_shift(m_safe.result, self.probs)
        inner.add_ops(shifting)
        cols, body, (j, rl) = loop_nest([self.cols, 2], ["j", "rl"], UNROLL)
        inner.add_op(cols)
        at = AffineMap.identity(8)
        cell = [*ivs, j, rl]
        s = loop.LoadOp(self.sacc.result, at, cell)
        making, stored = probability(s.result, exp_shift, self.probs, self.scale)
        body.add_ops([s, *making])
        rounding = stored.owner
        value = rounding.input if isinstance(rounding, arith.TruncFOp) else stored
        # the row sums add p before its rounding to 16 bits
        col = Linear.of(*((c, cell[k]) for c, k in self.lay.n))
        body.add_ops([store_at(stored, self.probs, self.row(ivs), col),
                      loop.StoreOp(value, self.sacc.result, at, cell)])
        return corr.results[0]

    def unless_one(self, rows: Block, ivs: Sequence[SSAValue]) -> tuple[Block, SSAValue]:
        """In ``rows`` (a thread's rows of the output, ``ivs`` to ``rh``): load the row's
        ``corr`` and branch on it differing from 1; returns the branch's body and ``corr``.
        A row whose maximum stayed (``corr`` is exactly 1) skips rescaling its output
        accumulators."""
        corr = self.stat(self.c_reg, ivs)
        one = const_float(1.0, self.typ)
        moved = arith.CmpfOp(corr.result, one.result, "une")
        then = Block()
        rows.add_ops([corr, one, moved, scf.IfOp(moved.result, [], Region(then))])
        return then, corr.result

    def _add_sum(self, inner: Block, ivs: Sequence[SSAValue], row_sum: SSAValue,
                 corr: SSAValue) -> None:
        """``l ← l · corr + row_sum``, in registers."""
        l_old = self.stat(self.l_reg, ivs)
        scaled = arith.MulfOp(l_old.result, corr)
        l_new = arith.AddfOp(scaled.result, row_sum)
        inner.add_ops([l_old, scaled, l_new, self._put(l_new.result, self.l_reg, ivs)])

    def _exp(self) -> tile.ForallOp:
        """Step 2 of the module docstring."""
        forall, inner, ivs = self._rows("exp")
        row_max = self._over_parts("max", self.pmax, self.row(ivs))
        inner.add_op(row_max)
        self._rescale(inner, ivs, row_max.result)
        total = self._over_columns("add", ivs)
        inner.add_ops([total, store_at(total.result, self.psum, self.row(ivs),
                                       self.part(ivs))])
        return forall

    def _sums(self) -> tile.ForallOp:
        """Step 3 of the module docstring."""
        forall, inner, ivs = self._rows("row_sum")
        row_sum = self._over_parts("add", self.psum, self.row(ivs))
        corr = self.stat(self.c_reg, ivs)
        inner.add_ops([row_sum, corr])
        self._add_sum(inner, ivs, row_sum.result, corr.result)
        return forall

    def finish(self) -> tile.ForallOp:
        """``m`` and ``l`` of every row into the shared ``m`` and ``l``, from the threads
        with ``wj = t = 0``."""
        forall, inner, ivs = self._rows("row_stats")
        row = self.row(ivs)
        first = guard_inside(inner, [(ivs[1], 1), (ivs[3], 1)])  # wj = t = 0
        m, l_run = self.stat(self.m_reg, ivs), self.stat(self.l_reg, ivs)
        first.add_ops([m, l_run, store_at(m.result, self.m, row),
                       store_at(l_run.result, self.l, row)])
        close_guards(forall.body.block)
        return forall
