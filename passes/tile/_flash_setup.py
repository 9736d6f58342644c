"""The set-up of the flash kernel ``flash-attention`` builds, and where its blocks lie.

:class:`FlashSetup` makes the ``tile.kernel`` of a matched chain — its grid and forall over
blocks, the matched kernels' top-level values cloned into it, the query block of each block,
the shared tiles, the register accumulators and the softmax state — and answers where a
block's rows, queries and outputs lie and when its loads are clamped;
:class:`~llmopt.passes.tile._flash_steps.FlashKernel` appends the kernel's steps to it. See
:mod:`llmopt.passes.tile.flash_attention` for the whole story.
"""

from __future__ import annotations

import math

from xdsl.dialects import arith
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Block, Operation, SSAValue

from llmopt.dialects import loop, tile
from llmopt.passes.tile._access import (
    ClampingCloner,
    Cloner,
    Linear,
    ceildiv_into,
    guard_inside,
    index_into,
    launch_grid,
    lin_sum,
    linear_into,
)
from llmopt.passes.tile._attention_band import bound
from llmopt.passes.tile._attention_chain import Chain
from llmopt.passes.tile._attention_scores import score_scale
from llmopt.passes.tile._flash_layout import ROW_PAD, V_PAD, Layout, half_operands
from llmopt.passes.tile._group_heads import HeadGroups
from llmopt.passes.tile._online_softmax import OnlineSoftmax, shared
from llmopt.passes.tile._register_softmax import RegisterSoftmax, fits
from llmopt.passes.tile._schedule_attention import AttentionBlocks
from llmopt.passes.tile._split_keys import Partials
from llmopt.target import WARP


class FlashSetup:
    """The flash kernel of a matched chain before its steps: the kernel, its blocks, their
    tiles and state, and where a block's rows lie (see
    :class:`~llmopt.passes.tile._flash_steps.FlashKernel`, which builds the steps on it)."""

    def __init__(self, chain: Chain, blocks: AttentionBlocks, name: str, mma: bool,
                 splits: int = 1, groups: HeadGroups | None = None,
                 register_stats: bool = False, row_warps: bool = False,
                 rescale_margin: int = -1) -> None:
        self.chain, self.bm, self.bn, self.splits = chain, blocks.bm, blocks.bn, splits
        self.groups = groups
        bm, bn = self.bm, self.bn
        sc, ex, out = chain.scores, chain.exp, chain.output
        self.extents = [lp.trip_count for lp in ex.ivs]
        self.dk, self.hd = sc.reduce.trip_count, out.head_dim
        self.typ = typ = sc.reduce.result.type
        self.threads = WARP * blocks.warps
        whole = register_stats and row_warps and bm % (16 * blocks.warps) == 0
        # row_warps: each warp owns whole rows of both products (a warp column)
        self.s_lay = Layout(bm, bn, blocks.warps, mma, (blocks.warps, 1) if whole else None)
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
        scaled = score_scale(ex) if self.in_registers and half is not None else None
        self.scale = None if scaled is None else scaled[0]
        """``g``'s scaling of the scores when the softmax applies it instead of the scores
        step (:class:`~llmopt.passes.tile._register_softmax.RegisterSoftmax`'s ``scale``),
        else ``None``."""
        self.softmax: OnlineSoftmax | RegisterSoftmax = (
            RegisterSoftmax(self.s_lay.lay, self.sacc, self.probs, bm, typ,
                            None if scaled is None else scaled[1], rescale_margin)
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

    def some_masked(self, kb_body: Block, key_base: Linear) -> SSAValue | None:
        """Whether the key block starting at ``key_base`` may have a masked score, appended
        to ``kb_body``: its last key after the block's first query (a causal mask) or not
        inside the keys (a last key block that may overhang them). ``None`` when no block
        is masked, when every block is (fewer keys than a block) or when the test is not
        known (grouped heads)."""
        if isinstance(self.key_count, int) and self.key_count < self.bn:
            return None
        tests: list[tuple[Linear | SSAValue | int, str]] = []
        if self.chain.exp.causal:
            if self.groups is not None:
                return None
            tests.append((self.q_base, "ult"))  # first query < last key
        if self.ragged[1]:
            tests.append((self.key_count, "ule"))  # keys ≤ last key
        if not tests:
            return None
        last_key = linear_into(kb_body, lin_sum((1, key_base),
                                                (1, Linear.of(const=self.bn - 1))))
        cond: SSAValue | None = None
        for lhs, predicate in tests:
            value = lhs if isinstance(lhs, SSAValue) else (
                index_into(kb_body, lhs) if isinstance(lhs, int) else linear_into(kb_body, lhs))
            test: Operation = arith.CmpiOp(value, last_key, predicate)
            kb_body.add_op(test)
            if cond is not None:
                test = arith.OrIOp(cond, test.results[0])
                kb_body.add_op(test)
            cond = test.results[0]
        return cond

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
