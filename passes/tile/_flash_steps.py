"""The steps of the flash kernel ``flash-attention`` builds for a matched attention chain.

:class:`FlashKernel` appends to :class:`~llmopt.passes.tile._flash_setup.FlashSetup`'s kernel,
step by step, the loads of ``Q``, the loop over key blocks with the fills of ``K`` and ``V``,
the score product, the online softmax (:mod:`~llmopt.passes.tile._online_softmax`), the
output product and the epilogue, in the tensor-core thread layout of
:class:`~llmopt.passes.tile._flash_layout.Layout`. See
:mod:`llmopt.passes.tile.flash_attention` for what the kernel computes, its options and why.
"""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IntegerAttr, MemRefType, StringAttr, i64
from xdsl.ir import Block, Operation, Region, SSAValue

from llmopt.dialects import loop, tile
from llmopt.passes.tile._access import (
    Cloner,
    Linear,
    at,
    block_threads,
    ceildiv_into,
    close_guards,
    counted_for,
    index_into,
    lin_sum,
    load_at,
    slice_of,
    store_at,
)
from llmopt.passes.tile._attention_band import factor
from llmopt.passes.tile._attention_scores import NEG_INF, unmasked_score
from llmopt.passes.tile._flash_layout import INDEX, UNROLL_K, Layout, const_index, ident
from llmopt.passes.tile._flash_setup import FlashSetup
from llmopt.passes.tile._online_softmax import const_float
from llmopt.passes.tile._register_softmax import RegisterSoftmax
from llmopt.passes.tile._split_keys import split_range, without_unused_arguments


class FlashKernel(FlashSetup):
    """The flash kernel of a matched chain (see :mod:`llmopt.passes.tile.flash_attention`),
    built step by step: :meth:`build` appends the steps to the block's body and to the loop
    over key blocks."""

    # --- pieces -----------------------------------------------------------------------------------

    def stage(self, load: loop.LoadOp, subst: dict[SSAValue, Linear], kernel: loop.KernelOp,
              dst: tile.AllocOp, names: tuple[str, str], fill: dict[SSAValue, int]
              ) -> tile.ForallOp:
        """A forall filling ``dst[a, b]`` with ``load`` (of ``kernel``) at ``subst``, plus
        ``a`` or ``b`` (``fill``: old iv → 0 or 1) on the given ivs; the loads are clamped
        when a block overhangs the queries or keys."""
        typ = dst.result.type
        assert isinstance(typ, MemRefType)
        forall, ab = block_threads(list(typ.get_shape()), list(names))
        forall.attributes["llmopt.role"] = StringAttr("stage")
        full = dict(subst)
        for iv, which in fill.items():
            full[iv] = lin_sum((1, subst.get(iv, Linear.of())), (1, Linear.of((1, ab[which]))))
        copy = self.edge_cloner(full, dict(self.values[kernel])).clone_into(load,
                                                                           forall.body.block)
        value = copy.results[0]
        if value.type != typ.element_type:  # a 16-bit operand, staged widened to the sum's f32
            wide = arith.ExtFOp(value, typ.element_type)
            forall.body.block.add_op(wide)
            value = wide.result
        forall.body.block.add_op(loop.StoreOp(value, dst.result, ident(2), ab))
        return forall

    def product(self, lay: Layout, acc: tile.AllocOp, extent: int, name: str,
                a: tuple[tile.AllocOp, bool], b: tuple[tile.AllocOp, bool],
                old: tuple[loop.LoadOp, loop.LoadOp, Operation], kernel: loop.KernelOp
                ) -> list[Operation]:
        """The chunk loop ``scf.for %name = 0 to extent`` around the update ``acc[…] +=
        a[row, k] · b[col, k]`` of every output of ``lay`` (an operand's ``True``: read
        transposed, ``b[k, col]``), the product ``old``'s multiplication (of ``kernel``)
        cloned onto the two loads."""
        bounds, chunk, k = counted_for(extent, name, {"llmopt.role": StringAttr("k_loop"),
                                                      "unroll": IntegerAttr(UNROLL_K, i64)})
        forall, inner, ivs = lay.forall("update")
        kl = Linear.of((1, k))
        factors: list[SSAValue] = []
        for (tile_, transposed), coord in ((a, lay.row(ivs)), (b, lay.col(ivs))):
            load = load_at(tile_, *((kl, coord) if transposed else (coord, kl)))
            inner.add_op(load)
            value = load.result
            if value.type != self.typ:  # a 16-bit tile: widened where it is read
                wide = arith.ExtFOp(value, self.typ)
                inner.add_op(wide)
                value = wide.result
            factors.append(value)
        vals = {**self.values[kernel], factor(old[2], old[0]): factors[0],
                factor(old[2], old[1]): factors[1]}
        term = Cloner({}, vals).clone_into(old[2], inner)
        prev = loop.LoadOp(acc.result, ident(len(ivs)), ivs)
        total = arith.AddfOp(prev.result, term.results[0])
        inner.add_ops([prev, total, loop.StoreOp(total.result, acc.result, ident(len(ivs)),
                                                 ivs)])
        chunk.body.block.add_ops([forall, scf.YieldOp()])
        return [*bounds, chunk]

    def zeroed(self, lay: Layout, acc: tile.AllocOp) -> tile.ForallOp:
        """``acc = 0``."""
        forall, inner, ivs = lay.forall("init")
        z = const_float(0.0, self.typ)
        inner.add_ops([z, loop.StoreOp(z.result, acc.result, ident(len(ivs)), ivs)])
        return forall

    # --- steps ------------------------------------------------------------------------------------

    def init_state(self) -> None:
        """Running maximum -inf, running sum 0, output accumulators 0."""
        self.body.add_ops([self.softmax.init(), self.zeroed(self.o_lay, self.oacc)])

    def key_loop(self) -> tuple[Block, Linear]:
        """The loop over key blocks (up to the diagonal's when the mask is causal): its body
        and the first key of its block."""
        bm, bn = self.bm, self.bn
        if isinstance(self.key_count, int):
            n_kb = index_into(self.body, -(-self.keys // bn))
        else:
            n_kb = ceildiv_into(self.body, self.key_count, bn)
        ops: list[Operation] = []
        ub = n_kb
        if self.chain.exp.causal:
            # ub = min(n_kb, (qb·bm + bm - 1) floordiv bn + 1)
            c_bm, c_last, c_bn = (const_index(v) for v in (bm, bm - 1 + bn, bn))
            first_row = arith.MuliOp(self.qb, c_bm.result)
            end = arith.AddiOp(first_row.result, c_last.result)
            blocks_to = arith.DivUIOp(end.result, c_bn.result)
            ub_op = arith.MinUIOp(blocks_to.result, n_kb)
            ops = [c_bm, c_last, c_bn, first_row, end, blocks_to, ub_op]
            ub = ub_op.result
        self.body.add_ops(ops)
        first: Linear = Linear.of()
        if self.split is not None:
            max_kb = -(-self.keys // bn)  # at the maximum length
            start, ub = split_range(self.body, self.split, n_kb, self.splits,
                                    -(-max_kb // self.splits))
            first = Linear.of((bn, start))
        lb, one = const_index(0), const_index(1)
        kb_body = Block(arg_types=[INDEX])
        kb_body.args[0].name_hint = "kb"
        kb_loop = scf.ForOp(lb.result, ub, one.result, [], Region(kb_body))
        kb_loop.attributes["llmopt.role"] = StringAttr("key_blocks")
        self.body.add_ops([lb, one, kb_loop])
        return kb_body, lin_sum((1, first), (1, Linear.of((bn, kb_body.args[0]))))

    def scores(self, kb_body: Block, key_base: Linear) -> None:
        """The score tile (on the tensor cores, once ``mma-fragments`` has run), ``g``
        applied, into ``ps``. A key block no mask reaches (:meth:`FlashSetup.some_masked`)
        takes ``g`` without the causal mask and without the keys' bound: an ``scf.if`` on a
        value the whole block shares, so only the diagonal's and the last key blocks pay
        for the comparisons and selects of every score."""
        sc = self.chain.scores
        kb_body.add_op(self.zeroed(self.s_lay, self.sacc))
        kb_body.add_ops(self.product(self.s_lay, self.sacc, self.dk, "kk", (self.qs, False),
                                     (self.ks, False), (sc.q, sc.k, sc.mul), sc.kernel))
        some = self.some_masked(kb_body, key_base)
        if some is None:
            kb_body.add_op(self.scored(key_base, masked=True))
            return
        masked = Region(Block([self.scored(key_base, masked=True), scf.YieldOp()]))
        if unmasked_score(self.chain.exp) in (
                self.chain.exp.load.result, None if self.scale is None else self.scale.result):
            # g is the scores themselves there (the softmax scales them): nothing to do
            kb_body.add_op(scf.IfOp(some, [], masked))
            return
        kb_body.add_op(scf.IfOp(some, [], masked, Region(Block(
            [self.scored(key_base, masked=False), scf.YieldOp()]))))

    def scored(self, key_base: Linear, *, masked: bool) -> tile.ForallOp:
        """The forall applying ``g`` to the score tile; without the causal mask and the
        keys' bound unless ``masked``, without the scale when the softmax applies it
        (``self.scale``)."""
        ex = self.chain.exp
        s_done, inner, ivs = self.s_lay.forall("scores")
        s = loop.LoadOp(self.sacc.result, ident(len(ivs)), ivs)
        inner.add_op(s)
        row, col = self.s_lay.row(ivs), self.s_lay.col(ivs)
        roles, query = self.at_row(row)
        subst = {lp.iv: roles[k] for k, lp in enumerate(ex.ivs[:-1])}
        subst[ex.ivs[-1].iv] = query
        subst[ex.max.iv] = lin_sum((1, key_base), (1, col))
        g = self.edge_cloner(subst, {**self.values[ex.kernel], ex.load.result: s.result})
        if self.scale is not None:  # the softmax scales the scores
            g.values[self.scale.result] = s.result
        last = ex.max.body.block.last_op
        assert last is not None
        value = last.operands[0] if masked else unmasked_score(ex)
        for op in slice_of(ex.body, value):
            if op is not self.scale:
                g.clone_into(op, inner)
        score = g.value(value, inner)
        if self.ragged[1] and masked:  # the keys past the end of the last block count as masked
            limit = self.key_count
            if isinstance(limit, int):
                limit = index_into(inner, limit)
            ninf = const_float(NEG_INF, self.typ)
            inner.add_op(ninf)
            inside = arith.CmpiOp(g.value(ex.max.iv, inner), limit, "ult")
            select = arith.SelectOp(inside.result, score, ninf.result)
            inner.add_ops([inside, select])
            score = select.result
        if self.in_registers:  # the statistics read it where it is
            inner.add_op(loop.StoreOp(score, self.sacc.result, ident(len(ivs)), ivs))
        else:
            inner.add_op(store_at(score, self.ps, row, col))
        return s_done

    def accumulate(self, kb_body: Block) -> None:
        """The output accumulators: rescaled, then ``+= Σ_j p·V`` over the key block."""
        out = self.chain.output
        softmax = self.softmax
        if isinstance(softmax, RegisterSoftmax) and softmax.margin >= 0:  # rows whose
            # factor is 1 are skipped
            rescale, inner, ivs, f = self.o_lay.forall_by_rows("rescale", softmax.unless_one)
        else:
            rescale, inner, ivs = self.o_lay.forall("rescale")
            factor_load = (softmax.stat(softmax.c_reg, ivs)
                           if isinstance(softmax, RegisterSoftmax)
                           else load_at(softmax.corr, self.o_lay.row(ivs)))
            inner.add_op(factor_load)
            f = factor_load.result
        o = loop.LoadOp(self.oacc.result, ident(len(ivs)), ivs)
        o2 = arith.MulfOp(o.result, f)
        inner.add_ops([o, o2, loop.StoreOp(o2.result, self.oacc.result, ident(len(ivs)), ivs)])
        close_guards(rescale.body.block)
        kb_body.add_op(rescale)
        kb_body.add_ops(self.product(self.o_lay, self.oacc, self.bn, "jj", (self.probs, False),
                                     (self.vs, True), (out.p, out.v, out.mul), out.kernel))

    def partial_epilogue(self) -> None:
        """With split keys: the accumulators and the row statistics, unnormalised, into
        the partial buffers at ``[split, rows…]`` (rows inside the queries only)."""
        assert self.partials is not None and self.split is not None
        acc_p, m_p, l_p = (self.values_of(b) for b in self.partials.values)
        split = Linear.of((1, self.split))
        epi, inner, ivs = self.o_lay.forall("epilogue")
        row = self.o_lay.row(ivs)
        roles, query = self.at_row(row)
        value = loop.LoadOp(self.oacc.result, ident(len(ivs)), ivs)
        inner.add_op(value)
        inner = self.inside_rows(inner, row)
        inner.add_op(loop.StoreOp(value.result, acc_p, *at([split, *roles, query,
                                                              self.o_lay.col(ivs)])))
        close_guards(epi.body.block)
        stats, (r,) = block_threads([self.bm], ["r"])
        stats.attributes["llmopt.role"] = StringAttr("epilogue")
        r_lin = Linear.of((1, r))
        loads = [load_at(self.softmax.m, r_lin), load_at(self.softmax.l, r_lin)]
        inner = stats.body.block
        inner.add_ops(loads)
        roles, query = self.at_row(r_lin)
        inner = self.inside_rows(inner, r_lin)
        for load, buffer in zip(loads, (m_p, l_p), strict=True):
            inner.add_op(loop.StoreOp(load.result, buffer, *at([split, *roles, query])))
        close_guards(stats.body.block)
        self.body.add_ops([epi, stats])

    def epilogue(self) -> None:
        """The output kernel's epilogue, once per output, on the accumulators."""
        if self.partials is not None:
            self.partial_epilogue()
            return
        out = self.chain.output
        epi, inner, ivs = self.o_lay.forall("epilogue")
        row = self.o_lay.row(ivs)
        acc = loop.LoadOp(self.oacc.result, ident(len(ivs)), ivs)
        acc.result.name_hint = "sum"
        inner.add_op(acc)
        total: SSAValue = acc.result
        if self.chain.exp.normalized:  # P·V summed the normalized E: divide by l here
            total_l = load_at(self.softmax.l, row)
            divided = arith.DivfOp(acc.result, total_l.result)
            inner.add_ops([total_l, divided])
            total = divided.result
        inner = self.inside_rows(inner, row)  # rows past the last: nothing stored
        cloner = Cloner(self.out_subst(row, self.o_lay.col(ivs)),
                        {**self.values[out.kernel], out.reduce.result: total})
        for op in out.sums:
            total_l = load_at(self.softmax.l, row)
            inner.add_op(total_l)
            cloner.values[op.result] = total_l.result
        for op in list(out.ivs[-1].body.block.ops):
            if op is not out.reduce and op not in out.sums:
                cloner.clone_into(op, inner)
        close_guards(epi.body.block)
        self.body.add_op(epi)

    def build(self) -> tile.KernelOp:
        """Every step, in order; the new kernel."""
        sc, out = self.chain.scores, self.chain.output
        self.init_state()
        batch = {lp.iv: self.role[k] for k, lp in enumerate(sc.ivs[:-2])}
        query_iv, key_iv = sc.ivs[-2].iv, sc.ivs[-1].iv
        rows_iv = query_iv if self.groups is None else sc.ivs[self.groups.dim].iv
        self.body.add_op(self.stage(sc.q, {**batch, query_iv: self.q_base}, sc.kernel,
                                    self.qs, ("ii", "dd"), {rows_iv: 0, sc.reduce.iv: 1}))
        kb_body, key_base = self.key_loop()
        kb_body.add_op(self.stage(sc.k, {**batch, key_iv: key_base}, sc.kernel, self.ks,
                                  ("jj", "dd"), {key_iv: 0, sc.reduce.iv: 1}))
        d_ivs = {iv: 1 for iv, rs in out.roles.items() if any(r == len(self.role) + 1
                                                               for _, r in rs)}
        kb_body.add_op(self.stage(out.v, {**self.out_subst(Linear.of(), Linear.of()),
                                          out.reduce.iv: key_base}, out.kernel, self.vs,
                                  ("jj", "dd"), {out.reduce.iv: 0, **d_ivs}))
        self.scores(kb_body, key_base)
        kb_body.add_ops(self.softmax.steps())
        self.accumulate(kb_body)
        kb_body.add_op(scf.YieldOp())
        if isinstance(self.softmax, RegisterSoftmax):
            self.body.add_op(self.softmax.finish())
        self.epilogue()
        return without_unused_arguments(self.kernel)
