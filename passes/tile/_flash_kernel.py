"""The flash kernel ``flash-attention`` builds for a matched attention chain.

:class:`FlashKernel` builds the ``tile.kernel`` step by step — the loads of ``Q``, the loop
over key blocks with the fills of ``K`` and ``V``, the score product, the online softmax
(:mod:`~llmopt.passes.tile._online_softmax`), the output product and the epilogue — in the
tensor-core thread layout of :class:`Layout`; see :mod:`llmopt.passes.tile.flash_attention`
for what the kernel computes, its options and why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import (
    IndexType,
    IntegerAttr,
    MemRefType,
    StringAttr,
    bf16,
    f16,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.ir.affine import AffineMap

from llmopt.dialects import loop, tile
from llmopt.passes.tile._access import (
    UNROLL,
    ClampingCloner,
    Cloner,
    Linear,
    at,
    block_threads,
    ceildiv_into,
    close_guards,
    counted_for,
    guard_inside,
    index_into,
    launch_grid,
    lin_sum,
    load_at,
    loop_nest,
    store_at,
)
from llmopt.passes.tile._attention import NEG_INF, Chain, bound, factor
from llmopt.passes.tile._group_heads import HeadGroups
from llmopt.passes.tile._online_softmax import OnlineSoftmax, const_float, shared
from llmopt.passes.tile._register_softmax import RegisterSoftmax, fits
from llmopt.passes.tile._schedule import AttentionBlocks, RegisterTile, warp_grid
from llmopt.passes.tile._split_keys import Partials, split_range, without_unused_arguments
from llmopt.passes.tile.register_tile import MMA_LAYOUT, thread_layout
from llmopt.target import WARP

ROW_PAD = 4
"""Padding of ``qs``, ``ks`` and ``ps``: rows ≡ 4 (mod 32) words put a fragment's 8 rows ×
4 columns in distinct banks and keep rows 16-byte aligned for ``cp.async``."""
V_PAD = 8
"""Padding of ``vs``, whose fragments read 4 rows × 8 columns: rows ≡ 8 (mod 32) words."""
UNROLL_K = 8
"""How far CUDA unrolls the chunk loops of the two products (their loads overlap)."""
INDEX = IndexType()


def const_index(value: int) -> arith.ConstantOp:
    return arith.ConstantOp(IntegerAttr(value, INDEX))


def ident(rank: int) -> AffineMap:
    return AffineMap.identity(rank)


class Layout:
    """The threads of one product's ``m × n`` tile in the tensor-core layout (warps ``(wi,
    wj)``, lanes ``(g, t)``, each thread's outputs ``(i, rh, j, rl)``: see
    :func:`~llmopt.passes.tile.register_tile.thread_layout`): foralls over them, the
    registers they accumulate in, and where an output lies in the tile."""

    def __init__(self, m: int, n: int, warps: int, mma: bool,
                 grid: tuple[int, int] | None = None) -> None:
        """``grid``: the warps ``(wm, wn)``, by default :func:`warp_grid`'s."""
        grid = grid or warp_grid(m, n, warps)
        assert grid is not None
        self.grid = grid
        self.tile = RegisterTile(m, n, m // (8 * grid[0]), n // (4 * grid[1]))
        self.lay = thread_layout(self.tile, MMA_LAYOUT)
        self.mma = mma

    def forall(self, role: str) -> tuple[tile.ForallOp, Block, list[SSAValue]]:
        """A forall of the block's threads, each over its outputs: the forall, the body of
        the nest and the ivs (the forall's, then the nest's)."""
        forall, tivs = block_threads(list(self.lay.forall), list(self.lay.forall_names))
        nest, inner, nivs = loop_nest(list(self.lay.nest), list(self.lay.nest_names), UNROLL)
        forall.body.block.add_op(nest)
        forall.attributes["llmopt.role"] = StringAttr(role)
        if self.mma:
            forall.attributes["llmopt.layout"] = StringAttr("mma")
        return forall, inner, [*tivs, *nivs]

    def registers(self, typ: Attribute, name: str) -> tile.AllocOp:
        alloc = tile.AllocOp("registers", MemRefType(typ, [*self.lay.forall,  # type: ignore[arg-type]
                                                           *self.lay.nest]))
        alloc.result.name_hint = name
        return alloc

    def row(self, ivs: Sequence[SSAValue]) -> Linear:
        return Linear.of(*((c, ivs[k]) for c, k in self.lay.m))

    def col(self, ivs: Sequence[SSAValue]) -> Linear:
        return Linear.of(*((c, ivs[k]) for c, k in self.lay.n))


class FlashKernel:
    """The flash kernel of a matched chain (see :mod:`llmopt.passes.tile.flash_attention`),
    built step by step: :meth:`build` appends the steps to the block's body and to the loop
    over key blocks."""

    def __init__(self, chain: Chain, blocks: AttentionBlocks, name: str, mma: bool,
                 splits: int = 1, groups: HeadGroups | None = None,
                 register_stats: bool = False) -> None:
        self.chain, self.bm, self.bn, self.splits = chain, blocks.bm, blocks.bn, splits
        self.groups = groups
        bm, bn = self.bm, self.bn
        sc, ex, out = chain.scores, chain.exp, chain.output
        self.extents = [lp.trip_count for lp in ex.ivs]
        self.dk, self.hd = sc.reduce.trip_count, out.head_dim
        self.typ = typ = sc.reduce.result.type
        self.threads = WARP * blocks.warps
        self.s_lay = Layout(bm, bn, blocks.warps, mma)
        wm, wn = self.s_lay.grid
        if register_stats and bm % (16 * wm) == 0 and self.hd % (8 * wn) == 0:
            # the score product's warps, so that a thread holds the same rows in both
            self.o_lay = Layout(bm, self.hd, blocks.warps, mma, (wm, wn))
        else:
            self.o_lay = Layout(bm, self.hd, blocks.warps, mma)
        self.kernels = chain.kernels
        buffers: list[SSAValue] = []
        for k in self.kernels:
            buffers += [b for b in k.buffers if b not in chain.internal and b not in buffers]
        n_qb = -(-self.extents[-1] // bm)
        self.keys = ex.max.trip_count
        query_bound, key_bound = ex.ivs[-1].bound, ex.max.bound
        self.ragged = (self.extents[-1] % bm != 0 or query_bound is not None,
                       self.keys % bn != 0 or key_bound is not None)
        self.heavy_first = ex.causal and n_qb > 1
        outer = list(self.extents[:-1])  # the batch… extents of the blocks
        if groups is not None:  # a block's rows are the query heads of one group
            outer[groups.dim] //= groups.size
            self.ragged = (groups.size < bm, self.ragged[1])
        grid = [n_qb, *outer] if self.heavy_first else [*outer, n_qb]
        self.host_ops: list[Operation] = []
        """Ops before the launch: the runtime grid, from the function's length; the
        partial results' buffers when the keys are split."""
        self.partials: Partials | None = None
        if splits > 1:  # flash-decoding: a last grid dimension over the splits of the keys
            self.partials = Partials.allocate(splits, self.extents, self.hd, typ)
            self.host_ops += self.partials.ops
            buffers += self.partials.values
            grid.append(splits)
        grid_size = None
        if query_bound is not None:
            length = bound(ex.kernel, query_bound)
            assert length is not None
            self.host_ops, grid_size = launch_grid(length, bm, math.prod(outer))
        self.kernel = tile.KernelOp(name, [min(math.prod(grid), 2**31 - 1), 1, 1],
                                    [self.threads, 1, 1], buffers, grid_size=grid_size)
        self.kernel.attributes["llmopt.flash"] = StringAttr(f"{bm}x{bn}")
        self.values = self._kernel_level_ops(buffers)
        top = self.kernel.body.block
        self.queries: SSAValue | int = self.extents[-1]
        """The number of queries: the static extent, or the kernel's length."""
        self.key_count: SSAValue | int = self.keys
        self.n_qb: SSAValue | int = n_qb
        sizes: dict[int, SSAValue] = {}
        if query_bound is not None:
            self.queries = self.values[ex.kernel][query_bound]
            self.n_qb = ceildiv_into(top, self.queries, bm)
            sizes[0 if self.heavy_first else len(grid) - 1] = self.n_qb
        if key_bound is not None:
            self.key_count = self.values[ex.kernel][key_bound]
        forall = tile.ForallOp(grid, "blocks", sizes=sizes)
        self.kernel.body.block.add_op(forall)
        self.body = forall.body.block
        self.qb, batch_ivs = self._query_block(list(forall.ivs), n_qb)
        self.role = [Linear.of() if e == 1 else Linear.of((1, b))
                     for e, b in zip(outer, batch_ivs, strict=True)]
        if groups is not None:  # block b of the heads starts at head G·b
            self.role[groups.dim] = lin_sum((groups.size, self.role[groups.dim]))
        self.q_base = Linear.of((bm, self.qb))
        half = half_operands(chain) if mma else None
        staged = typ if half is None else half
        self.qs = shared([bm, self.dk], staged, "qs", ROW_PAD)
        self.ks = shared([bn, self.dk], staged, "ks", ROW_PAD)
        self.vs = shared([bn, self.hd], staged, "vs", V_PAD)
        self.sacc = self.s_lay.registers(typ, "s")
        self.oacc = self.o_lay.registers(typ, "acc")
        self.in_registers = register_stats and fits(self.s_lay.lay, self.o_lay.lay)
        """Whether the row statistics stay in the registers of the score tile's threads
        (:mod:`~llmopt.passes.tile._register_softmax`), else they go through ``ps``."""
        self.ps = shared([bm, bn], typ, "ps", ROW_PAD)
        tiles = [self.qs, self.ks, self.vs]
        if half is None or not self.in_registers:
            tiles.append(self.ps)  # the scores (shared statistics), or P in f32
        self.probs = self.ps
        """``P·V``'s ``P``: the scores' tile, or a 16-bit tile of ``P`` rounded."""
        if half is not None:
            self.probs = shared([bm, bn], half, "pb", ROW_PAD)
            tiles.append(self.probs)
        self.softmax: OnlineSoftmax | RegisterSoftmax = (
            RegisterSoftmax(self.s_lay.lay, self.sacc, self.probs, bm, typ)
            if self.in_registers else OnlineSoftmax(self.ps, self.threads, typ, self.probs))
        self.body.add_ops([*tiles, *self.softmax.allocs(), self.sacc, self.oacc])

    def _kernel_level_ops(self, buffers: list[SSAValue]
                          ) -> dict[loop.KernelOp, dict[SSAValue, SSAValue]]:
        """Name the new kernel's arguments and clone every matched kernel's ops outside its
        loops (constants) into it; per matched kernel, its values → the new kernel's."""
        top = self.kernel.body.block
        for arg, buf in zip(top.args, buffers, strict=True):
            arg.name_hint = next((a.name_hint for k in self.kernels
                                  for a, b in zip(k.body.block.args, k.buffers, strict=True)
                                  if b is buf), buf.name_hint)  # a partial result's
        values: dict[loop.KernelOp, dict[SSAValue, SSAValue]] = {}
        for k in self.kernels:
            vals = {a: top.args[buffers.index(b)]
                    for a, b in zip(k.body.block.args, k.buffers, strict=True) if b in buffers}
            for op in k.body.block.ops:
                if not isinstance(op, loop.ForOp):
                    copy = op.clone(value_mapper=vals)
                    top.add_op(copy)
                    vals.update(zip(op.results, copy.results, strict=True))
            values[k] = vals
        return values

    def _query_block(self, ivs: list[SSAValue], n_qb: int) -> tuple[SSAValue, list[SSAValue]]:
        """The query block's index and the batch ivs of the blocks' forall (the split of
        the keys, the last, is ``self.split``)."""
        self.split: SSAValue | None = None
        if self.splits > 1:
            self.split = ivs.pop()
            self.split.name_hint = "split"
        if not self.heavy_first:
            qb, batch = ivs[-1], ivs[:-1]
        else:
            # Causal: query block qb visits qb + 1 key blocks. The blocks are dealt out in
            # the order of the forall's points, so the heaviest go first (qb = n_qb - 1 -
            # qr): the light ones fill in around them, and the last to start are short.
            qr, batch = ivs[0], ivs[1:]
            qr.name_hint = "qr"
            if isinstance(self.n_qb, int):
                last = index_into(self.body, self.n_qb - 1)
            else:
                last_op = arith.SubiOp(self.n_qb, index_into(self.body, 1))
                self.body.add_op(last_op)
                last = last_op.result
            qb_op = arith.SubiOp(last, qr)
            self.body.add_op(qb_op)
            qb = qb_op.result
        for k, arg in enumerate(batch):
            arg.name_hint = f"b{k}"
        qb.name_hint = "qb"
        return qb, batch

    # --- pieces -----------------------------------------------------------------------------------

    def at_row(self, row: Linear) -> tuple[list[Linear], Linear]:
        """The batch… coordinates and the query of the block's row ``row``: the block's
        batch and its query ``q_base + row``, or with grouped heads the head of the row's
        group (``G·b + row``) and the one query."""
        if self.groups is None:
            return self.role, lin_sum((1, self.q_base), (1, row))
        roles = list(self.role)
        roles[self.groups.dim] = lin_sum((1, roles[self.groups.dim]), (1, row))
        return roles, self.q_base

    def edge_cloner(self, subst: dict[SSAValue, Linear], values: dict[SSAValue, SSAValue]
                    ) -> Cloner:
        """A cloner whose loads of the kernel's arguments are clamped when a block overhangs
        the queries or keys: the fills of ``Q``, ``K`` and ``V``, and the loads of ``g`` (a
        mask tensor, read at the tile's query and key), which then read the edge in the
        extra rows and keys — rows stored nowhere, keys masked to -inf after ``g``."""
        if any(self.ragged):
            return ClampingCloner(subst, values,
                                  global_buffers=set(self.kernel.body.block.args))
        return Cloner(subst, values)

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

    def out_subst(self, row: Linear, d: Linear) -> dict[SSAValue, Linear]:
        """The output band's ivs from the roles at the block's ``row`` (:meth:`at_row`) and
        ``d``."""
        roles, query = self.at_row(row)
        by_role = [*roles, query, d]
        out = self.chain.output
        subst = {lp.iv: Linear.of() for lp in out.ivs}  # extent 1: no role
        subst.update({iv: lin_sum(*((c, by_role[k]) for c, k in rs))
                      for iv, rs in out.roles.items()})
        return subst

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
        applied, into ``ps``."""
        sc, ex = self.chain.scores, self.chain.exp
        kb_body.add_op(self.zeroed(self.s_lay, self.sacc))
        kb_body.add_ops(self.product(self.s_lay, self.sacc, self.dk, "kk", (self.qs, False),
                                     (self.ks, False), (sc.q, sc.k, sc.mul), sc.kernel))
        s_done, inner, ivs = self.s_lay.forall("scores")
        s = loop.LoadOp(self.sacc.result, ident(len(ivs)), ivs)
        inner.add_op(s)
        row, col = self.s_lay.row(ivs), self.s_lay.col(ivs)
        roles, query = self.at_row(row)
        subst = {lp.iv: roles[k] for k, lp in enumerate(ex.ivs[:-1])}
        subst[ex.ivs[-1].iv] = query
        subst[ex.max.iv] = lin_sum((1, key_base), (1, col))
        g = self.edge_cloner(subst, {**self.values[ex.kernel], ex.load.result: s.result})
        for op in ex.body:
            g.clone_into(op, inner)
        last = ex.max.body.block.last_op
        assert last is not None
        score = g.value(last.operands[0], inner)
        if self.ragged[1]:  # the keys past the end of the last block count as masked
            limit = self.key_count
            if isinstance(limit, int):
                limit = index_into(inner, limit)
            ninf = const_float(NEG_INF, self.typ)
            inner.add_op(ninf)
            inside = arith.CmpiOp(g.value(ex.max.iv, inner), limit, "ult")
            masked = arith.SelectOp(inside.result, score, ninf.result)
            inner.add_ops([inside, masked])
            score = masked.result
        if self.in_registers:  # the statistics read it where it is
            inner.add_op(loop.StoreOp(score, self.sacc.result, ident(len(ivs)), ivs))
        else:
            inner.add_op(store_at(score, self.ps, row, col))
        kb_body.add_op(s_done)

    def accumulate(self, kb_body: Block) -> None:
        """The output accumulators: rescaled, then ``+= Σ_j p·V`` over the key block."""
        out = self.chain.output
        rescale, inner, ivs = self.o_lay.forall("rescale")
        f = (self.softmax.stat(self.softmax.c_reg, ivs)
             if isinstance(self.softmax, RegisterSoftmax)
             else load_at(self.softmax.corr, self.o_lay.row(ivs)))
        o = loop.LoadOp(self.oacc.result, ident(len(ivs)), ivs)
        o2 = arith.MulfOp(o.result, f.result)
        inner.add_ops([f, o, o2, loop.StoreOp(o2.result, self.oacc.result, ident(len(ivs)),
                                              ivs)])
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

    def values_of(self, outer: SSAValue) -> SSAValue:
        """The new kernel's argument bound to the function-level ``outer``."""
        return self.kernel.body.block.args[list(self.kernel.buffers).index(outer)]

    def inside_rows(self, inner: Block, row: Linear) -> Block:
        """``inner``, or a guard in it when the block's rows overhang the queries (the last
        query block) or the group of heads."""
        if not self.ragged[0]:
            return inner
        row_iv = self.chain.exp.ivs[-1].iv
        if self.groups is not None:
            return guard_inside(inner, [(Cloner({row_iv: row}).value(row_iv, inner),
                                         self.groups.size)])
        query = lin_sum((1, self.q_base), (1, row))
        return guard_inside(inner, [(Cloner({row_iv: query}).value(row_iv, inner),
                                     self.queries)])

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


def half_operands(chain: Chain) -> Attribute | None:
    """The 16-bit type ``Q``, ``K`` and ``V`` are all loaded as, else ``None``: then their
    tiles stay 16-bit (``mma-fragments`` reads them with ``ldmatrix`` into ``m16n8k16``
    products, ``V`` transposed), and ``P`` is rounded to it for ``P·V``."""
    types = {load.result.type for load in (chain.scores.q, chain.scores.k, chain.output.v)}
    if len(types) != 1:
        return None
    (typ,) = types
    return typ if typ in (bf16, f16) else None
