"""Split keys (flash-decoding): a flash kernel of few query blocks spreads its keys over blocks.

A decode step has one query a head: a flash kernel of one block per head leaves most of the
GPU idle while each block walks the whole cache. With ``S`` splits the grid gets a last
dimension ``split``; block ``(…, split)`` walks only its share of the key blocks::

    per   = ceildiv(n_kb, S)                       // n_kb: the key blocks (a runtime value)
    first = split · per
    count = minui(minui(per, n_kb - minui(first, n_kb)), ceildiv(N_kb, S))
    scf.for %kb = 0 to count { keys (first + kb) · bn … }

(the last ``minui`` against the largest share, ``N_kb`` the key blocks of the maximum
length, gives ``async-copy`` the static bound it pipelines to). Instead of the output
kernel's epilogue the block stores its unnormalised accumulators and its row statistics::

    acc_p[split, rows…, d] = Σ_j exp(s_j - m) · v_j,   m_p[split, rows…] = m,
    l_p[split, rows…] = Σ_j exp(s_j - m)

and a **merge** kernel, the output kernel with its sum over keys re-expressed over the
splits, combines them with their log-sum-exp weights::

    M = max_s m_p[s],  w_s = exp(m_p[s] - M),  Σ_j p·V → Σ_s w_s · acc_p[s],  l → Σ_s w_s · l_p[s]

A split without keys (short contexts) keeps ``m = -inf``, ``l = 0``, ``acc = 0`` and weighs
nothing. The merge is a ``loop.kernel`` (Loop IR), scheduled by ``loop-to-tile`` like any
other; its three sums over ``S`` splits are short.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.dialects import arith, memref
from xdsl.dialects.builtin import StringAttr
from xdsl.dialects.math import ExpOp
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.ir.affine import AffineConstantExpr, AffineDimExpr, AffineExpr, AffineMap
from xdsl.rewriter import InsertPoint, Rewriter

from llmopt.dialects import loop, tile
from llmopt.passes.tile._attention_chain import Chain
from llmopt.passes.tile._attention_scores import NEG_INF
from llmopt.passes.tile._online_softmax import const_float

MAX_BLOCKS_PER_SM = 4
"""Splits are added while the grid stays within this many blocks a multiprocessor."""
MIN_SHARE = 2
"""… and while every split keeps at least this many key blocks at the maximum length."""


def splits_keys(blocks: int, sms: int, causal: bool, static_queries: bool) -> bool:
    """Whether :func:`choose_splits`, left to itself, spreads the keys of a grid of
    ``blocks`` query blocks over more blocks: a static, non-causal chain whose grid leaves
    multiprocessors idle (a decode step)."""
    return not causal and static_queries and blocks < sms


def choose_splits(blocks: int, key_blocks: int, sms: int, causal: bool,
                  static_queries: bool, option: int = 0) -> int:
    """How many splits of the keys: 1 for a causal chain or a runtime number of queries
    (never split); else ``option`` when set; else 1 for a grid that already fills the GPU
    (``blocks ≥ sms``), and otherwise the largest power of two that keeps the grid within
    :data:`MAX_BLOCKS_PER_SM` blocks a multiprocessor and gives every split at least
    :data:`MIN_SHARE` of the ``key_blocks`` (those of the maximum length)."""
    if causal or not static_queries:
        return 1
    if option:
        return min(option, key_blocks)
    if not splits_keys(blocks, sms, causal, static_queries):
        return 1
    splits = 1
    while (splits * 2 * MIN_SHARE <= key_blocks
           and blocks * splits * 2 <= MAX_BLOCKS_PER_SM * sms):
        splits *= 2
    return splits


@dataclass
class Partials:
    """The function-level buffers of the split flash kernel's partial results."""

    acc: memref.AllocOp
    """``[S, rows…, D]``: the unnormalised output accumulators."""
    m: memref.AllocOp
    """``[S, rows…]``: the running maxima."""
    sums: memref.AllocOp
    """``[S, rows…]``: the running sums."""

    @staticmethod
    def allocate(splits: int, rows: Sequence[int], head_dim: int, typ: Attribute) -> Partials:
        def alloc(shape: list[int], name: str) -> memref.AllocOp:
            op = memref.AllocOp.get(typ, shape=shape)  # type: ignore[arg-type]
            op.memref.name_hint = name
            return op

        return Partials(alloc([splits, *rows, head_dim], "acc_part"),
                        alloc([splits, *rows], "m_part"), alloc([splits, *rows], "l_part"))

    @property
    def ops(self) -> list[Operation]:
        return [self.acc, self.m, self.sums]

    @property
    def values(self) -> list[SSAValue]:
        return [self.acc.memref, self.m.memref, self.sums.memref]


def split_range(body: Block, split: SSAValue, n_kb: SSAValue, splits: int, most: int
                ) -> tuple[SSAValue, SSAValue]:
    """``(first, count)`` of the key blocks of ``split`` (see the module docstring), the ops
    appended to ``body``; ``most`` is the largest share, ``ceildiv(N_kb, S)``."""
    ops: list[Operation] = []

    def push(op: Operation) -> SSAValue:
        ops.append(op)
        return op.results[0]

    def const(value: int) -> SSAValue:
        return push(arith.ConstantOp.from_int_and_width(value, split.type))

    per = push(arith.CeilDivUIOp(n_kb, const(splits)))
    first = push(arith.MuliOp(split, per))
    left = push(arith.SubiOp(n_kb, push(arith.MinUIOp(first, n_kb))))
    count = push(arith.MinUIOp(push(arith.MinUIOp(per, left)), const(most)))
    first.name_hint, count.name_hint = "first_kb", "n_kb_split"
    body.add_ops(ops)
    return first, count


def _access(parts: Sequence[tuple[AffineExpr, Sequence[SSAValue]]]
            ) -> tuple[AffineMap, list[SSAValue]]:
    """One map over the operands the expressions use, each expression given with the
    operands of the map it came from (a constant, or a dimension of a new value)."""
    operands: list[SSAValue] = []
    results: list[AffineExpr] = []
    for expr, indices in parts:
        used = sorted(expr.used_dims())
        dims: list[AffineExpr] = [AffineConstantExpr(0)] * len(indices)
        for k in used:
            if indices[k] not in operands:
                operands.append(indices[k])
            dims[k] = AffineDimExpr(operands.index(indices[k]))
        results.append(expr.replace_dims_and_symbols(dims, []))
    return AffineMap(len(operands), 0, tuple(results)), operands


def _split_load(buffer: SSAValue, split: SSAValue,
                coords: Sequence[tuple[AffineExpr, Sequence[SSAValue]]]) -> loop.LoadOp:
    amap, operands = _access([(AffineDimExpr(0), [split]), *coords])
    return loop.LoadOp(buffer, amap, operands)


def merge_kernel(chain: Chain, partials: Partials, splits: int) -> loop.KernelOp:
    """The chain's output kernel with its sum over the keys (and its loads of the row sums)
    re-expressed over the splits' partial results (see the module docstring)."""
    out = chain.output
    merged = out.kernel.clone()
    old_ops, new_ops = list(out.kernel.walk()), list(merged.walk())
    twin = {old: new_ops[k] for k, old in enumerate(old_ops)}
    red, p, v = twin[out.reduce], twin[out.p], twin[out.v]
    assert isinstance(red, loop.ReduceOp) and isinstance(p, loop.LoadOp)
    assert isinstance(v, loop.LoadOp)
    merged.properties["sym_name"] = StringAttr(f"{out.kernel.sym_name.data}_merge")
    acc, m, sums = (merged.bind(b) for b in partials.values)
    n = len(p.map.data.results) - 1
    rows = [(e, p.indices) for e in p.map.data.results[:n]]
    d = (v.map.data.results[-1], v.indices)
    typ = red.result.type

    def over_splits(kind: str, build: Callable[[Block, SSAValue], SSAValue]) -> loop.ReduceOp:
        r = loop.ReduceOp(kind, splits, typ)
        r.body.block.args[0].name_hint = "s"
        r.body.block.add_op(loop.YieldOp(build(r.body.block, r.body.block.args[0])))
        return r

    def stat(block: Block, s: SSAValue) -> SSAValue:
        load = _split_load(m, s, rows)
        block.add_op(load)
        return load.result

    top = over_splits("max", stat)
    ninf, zero = const_float(NEG_INF, typ), const_float(0.0, typ)
    empty = arith.CmpfOp(top.result, ninf.result, "oeq")
    shift = arith.SelectOp(empty.result, zero.result, top.result)

    def weighted(buffer: SSAValue, coords: list[tuple[AffineExpr, Sequence[SSAValue]]]
                 ) -> Callable[[Block, SSAValue], SSAValue]:
        def build(block: Block, s: SSAValue) -> SSAValue:
            mine = _split_load(m, s, rows)
            diff = arith.SubfOp(mine.result, shift.result)
            w = ExpOp(diff.result)
            x = _split_load(buffer, s, coords)
            term = arith.MulfOp(w.results[0], x.result)
            block.add_ops([mine, diff, w, x, term])
            return term.result
        return build

    total = over_splits("add", weighted(sums, rows))
    summed = over_splits("add", weighted(acc, [*rows, d]))
    new: list[Operation] = [top, ninf, zero, empty, shift, total, summed]
    value = summed.result
    if chain.exp.normalized:  # P·V summed normalised probabilities: divide here
        divided = arith.DivfOp(summed.result, total.result)
        new.append(divided)
        value = divided.result
    rewriter = Rewriter()
    rewriter.insert_op(new, InsertPoint.before(red))
    red.result.replace_all_uses_with(value)
    rewriter.erase_op(red)
    for old in out.sums:
        load = twin[old]
        load.results[0].replace_all_uses_with(total.result)
        rewriter.erase_op(load)
    unbind_unused(merged)
    return merged


def unbind_unused(kernel: loop.KernelOp) -> None:
    """Drop every binding of ``kernel`` whose block argument nothing uses."""
    block = kernel.body.block
    pairs = list(zip(block.args, kernel.buffers, strict=True))
    kernel.operands = [b for a, b in pairs if a.uses]
    for arg, _ in pairs:
        if not arg.uses:
            block.erase_arg(arg)


def without_unused_arguments(kernel: tile.KernelOp) -> tile.KernelOp:
    """``kernel`` rebuilt without the bindings its body does not use (the output kernel's
    buffers a split flash kernel leaves to the merge); ``kernel`` itself when it uses all."""
    block = kernel.body.block
    kept = [(a, b) for a, b in zip(block.args, kernel.buffers, strict=True) if a.uses]
    if len(kept) == len(block.args):
        return kernel
    new = tile.KernelOp(kernel.sym_name.data, kernel.grid_shape, kernel.block_shape,
                        [b for _, b in kept], grid_size=kernel.grid_size)
    new.attributes |= kernel.attributes
    target = new.body.block
    for (old, _), arg in zip(kept, target.args, strict=True):
        arg.name_hint = old.name_hint
        old.replace_all_uses_with(arg)
    for op in list(block.ops):
        op.detach()
        target.add_op(op)
    return new
