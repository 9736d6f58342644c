"""Kernels 1 to 3 of the attention chain ``flash-attention`` matches: scores, exp, row sums.

:func:`match_scores` (``S = Q·Kᵀ``, :class:`Scores`), :func:`match_exp` (the row maximum of
``g(S)`` and ``E = exp(g(S) - max)``, possibly divided by the row sums, :class:`Exp`) and
:func:`match_sums` (``l = Σ_j E``), as described in
:mod:`~llmopt.passes.tile._attention_chain`, which matches the whole chain. See
:mod:`llmopt.passes.tile.flash_attention` for the whole story.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects import arith
from xdsl.dialects.builtin import FloatAttr
from xdsl.ir import Operation, SSAValue

from llmopt.dialects import loop
from llmopt.passes.tile._attention_band import (
    band,
    bound,
    product_of,
    reads_at,
    same_ops,
    uses_any,
)

NEG_INF = float("-inf")
SLE, ULE = 3, 7
"""``arith.cmpi`` predicates ``sle`` and ``ule``."""


@dataclass
class Scores:
    """Kernel 1: ``S = Q·Kᵀ``."""

    kernel: loop.KernelOp
    ivs: list[loop.ForOp]
    reduce: loop.ReduceOp
    q: loop.LoadOp
    k: loop.LoadOp
    mul: arith.MulfOp
    out: SSAValue


def match_scores(kernel: loop.KernelOp) -> Scores | None:
    """Kernel 1 of the chain (see :mod:`~llmopt.passes.tile._attention_chain`), else
    ``None``."""
    loops, ops, _ = band(kernel)
    if len(loops) < 3 or len(ops) != 2:
        return None
    red, store = ops
    if not (isinstance(red, loop.ReduceOp) and red.kind.data == "add"
            and isinstance(store, loop.StoreOp) and store.value is red.result):
        return None
    found = product_of(red, kernel)
    out = bound(kernel, store.buffer)
    if found is None or out is None or not reads_at(store, loops, len(store.map.data.results)
                                                    - len(loops)):
        return None
    a, b, mul = found
    i, j = loops[-2].iv, loops[-1].iv
    for q, k in ((a, b), (b, a)):
        if (uses_any(q, [i]) and not uses_any(q, [j]) and uses_any(k, [j])
                and not uses_any(k, [i])):
            return Scores(kernel, loops, red, q, k, mul, out)
    return None


@dataclass
class Exp:
    """Kernel 2: the row maximum of ``g(S)`` and ``E = exp(g(S) - max)`` — or, when it also
    takes the row sums itself (``normalized``), ``E = exp(g(S) - max) / Σ exp(g(S) - max)``."""

    kernel: loop.KernelOp
    ivs: list[loop.ForOp]
    max: loop.ReduceOp
    load: loop.LoadOp
    body: list[Operation]
    """``g``: the ops of the max's body after the load of ``S``, without the yield."""
    out: SSAValue
    causal: bool
    normalized: bool


def is_causal(body: Sequence[Operation], value: SSAValue, key: SSAValue, query: SSAValue
              ) -> bool:
    """Whether ``value`` (yielded by ``body``) is ``select(key ≤ query, x, -inf)``."""
    sel = value.owner
    if not (isinstance(sel, arith.SelectOp) and sel in body):
        return False
    neg = sel.rhs.owner
    cond = sel.cond.owner
    return (isinstance(neg, arith.ConstantOp) and isinstance(neg.value, FloatAttr)
            and neg.value.value.data == NEG_INF and isinstance(cond, arith.CmpiOp)
            and cond.predicate.value.data in (SLE, ULE) and cond.lhs is key
            and cond.rhs is query)


def unmasked_score(exp: Exp) -> SSAValue:
    """``g``'s value without its causal mask: what the select keeps, else ``g`` itself."""
    last = exp.max.body.block.last_op
    assert last is not None
    value = last.operands[0]
    if exp.causal:
        select = value.owner
        assert isinstance(select, arith.SelectOp)
        value = select.lhs
    return value


def score_scale(exp: Exp) -> tuple[arith.MulfOp, float] | None:
    """The ``arith.mulf`` of ``S`` by a positive, finite constant that is the whole of ``g``
    besides its causal mask (``softmax(c · Q·Kᵀ)``, the scaled dot product), and ``c``;
    else ``None``."""
    mul = unmasked_score(exp).owner
    if not isinstance(mul, arith.MulfOp):
        return None
    for s, c in ((mul.lhs, mul.rhs), (mul.rhs, mul.lhs)):
        const = c.owner
        if (s is exp.load.result and isinstance(const, arith.ConstantOp)
                and isinstance(const.value, FloatAttr)
                and 0 < const.value.value.data < float("inf")):
            return mul, const.value.value.data
    return None


def exp_of_shifted(ops: Sequence[Operation], body: Sequence[Operation], iv: SSAValue,
                   red: loop.ReduceOp) -> tuple[Operation, list[Operation]] | None:
    """When ``ops`` start with ``body`` (the load of ``S`` and ``g``, the max's body without
    its yield) recomputed at ``iv`` instead of the max's index, then
    ``exp(g - max)``: the ``exp`` and the ops after it."""
    k = len(body)
    if len(ops) < k + 2:
        return None
    mapping: dict[SSAValue, SSAValue] = {red.iv: iv}
    if not same_ops(body, ops[:k], mapping):
        return None
    last = red.body.block.last_op
    assert last is not None
    gval = mapping.get(last.operands[0], last.operands[0])
    sub, exp = ops[k], ops[k + 1]
    if not (isinstance(sub, arith.SubfOp) and sub.lhs is gval and sub.rhs is red.result
            and exp.name == "math.exp" and exp.operands[0] is sub.result):
        return None
    return exp, list(ops[k + 2:])


def match_exp(kernel: loop.KernelOp, scores: SSAValue) -> Exp | None:
    """Kernel 2, reading ``scores``, else ``None``."""
    loops, ops, _ = band(kernel)
    if len(ops) not in (2, 3) or not isinstance(ops[0], loop.ReduceOp) or (
            ops[0].kind.data != "max"):
        return None
    red, row, total = ops[0], ops[-1], ops[1] if len(ops) == 3 else None
    if (isinstance(row, loop.ForOp) and row.trip_count == 1 and row.bound is None
            and isinstance(only := row.body.block.first_op, loop.ForOp)
            and only is row.body.block.last_op):
        # One query (a decode step): the maximum, which cannot depend on it, stands outside
        # its loop of extent 1; that loop is the band's query loop.
        loops, row = [*loops, row], only
    if not isinstance(row, loop.ForOp) or row.trip_count != red.trip_count:
        return None
    body = list(red.body.block.ops)
    last = body[-1]
    loads = [op for op in body if isinstance(op, loop.LoadOp)
             and bound(kernel, op.buffer) is scores]
    if len(loads) != 1:
        return None
    load = loads[0]
    if not (isinstance(last, loop.YieldOp)
            and reads_at(load, [*loops, red], len(load.map.data.results) - len(loops) - 1)):
        return None
    g = [op for op in body[:-1] if op is not load]  # a mask's load may come before S's
    if any(op.regions or isinstance(op, loop.StoreOp) for op in g):
        return None
    if total is not None:  # Σ_j exp(g - max), the row's sum, in the same kernel
        if not (isinstance(total, loop.ReduceOp) and total.kind.data == "add"
                and total.trip_count == red.trip_count):
            return None
        found = exp_of_shifted(list(total.body.block.ops), body[:-1], total.iv, red)
        if found is None or len(found[1]) != 1 or not (
                isinstance(found[1][0], loop.YieldOp)
                and found[1][0].operands[0] is found[0].results[0]):
            return None
    # The row loop: exp(g - max), divided by the sum when there is one, stored at (band…, j).
    found = exp_of_shifted(list(row.body.block.ops), body[:-1], row.iv, red)
    if found is None:
        return None
    value, rest = found[0].results[0], found[1]
    if total is not None:
        if not rest or not (isinstance(rest[0], arith.DivfOp) and rest[0].lhs is value
                            and rest[0].rhs is total.result):
            return None
        value, rest = rest[0].result, rest[1:]
    if len(rest) == 2 and isinstance(rest[0], arith.TruncFOp) and rest[0].input is value:
        value, rest = rest[0].result, rest[1:]  # P stored rounded to 16 bits
    if len(rest) != 1:
        return None
    store = rest[0]
    if not (isinstance(store, loop.StoreOp) and store.value is value
            and reads_at(store, [*loops, row])):
        return None
    out = bound(kernel, store.buffer)
    if out is None:
        return None
    causal = is_causal(g, last.values[0], red.iv, loops[-1].iv)
    return Exp(kernel, loops, red, load, g, out, causal, total is not None)


def match_sums(kernel: loop.KernelOp, probs: SSAValue) -> SSAValue | None:
    """Kernel 3: ``l = Σ_j E``; returns ``l``."""
    loops, ops, _ = band(kernel)
    if len(ops) != 2 or not isinstance(ops[0], loop.ReduceOp) or ops[0].kind.data != "add":
        return None
    red, store = ops
    body = list(red.body.block.ops)
    if not (isinstance(store, loop.StoreOp) and store.value is red.result and len(body) == 2
            and isinstance(body[0], loop.LoadOp) and list(body[1].operands) == [body[0].result]
            and bound(kernel, body[0].buffer) is probs and reads_at(body[0], [*loops, red])
            and reads_at(store, loops, len(store.map.data.results) - len(loops))):
        return None
    return bound(kernel, store.buffer)
