"""What ``flash-attention`` matches: attention's kernels as ``fuse-kernels`` leaves them.

Four ``loop.kernel`` ops (three without a mask), one dimension list ``(batch…, i, j)`` for
the scores, ``i`` the query and ``j`` the key:

1. *scores*: ``S[batch…, i, j] = Σ_r Q[…, i, r] · K[…, j, r]`` — a band over ``(batch…, i, j)``
   holding one ``loop.reduce add`` of the product of a load that reads ``i`` (not ``j``) and
   one that reads ``j`` (not ``i``);
2. *exp*: per ``(batch…, i)`` the row maximum ``m = max_j g(S[…, i, j])`` of a scalar body
   ``g`` (scale, mask, roundings …; a mask's load may come before that of ``S``), then
   ``E[…, i, j] = exp(g(S[…, i, j]) - m)`` with ``g`` computed again by the same ops, stored
   as it is or rounded to a 16-bit ``E`` (``arith.truncf``, as a 16-bit softmax stores it);
3. *sums*: ``l[batch…, i] = Σ_j E[…, i, j]`` — or, as ``fuse-kernels`` leaves attention
   without a mask, taken in the *exp* kernel itself, which then stores ``E / l``;
4. *output*: ``O[f(batch…, i, d)] = h(Σ_j E[…, i, j] · V[…, j, d], l[…, i])`` — the sum of
   ``P·V`` with whatever epilogue ``h`` follows it (after ``hoist-reduce-factors``: the
   division by ``l``), stored in any layout whose coordinates are the roles themselves or
   a head and a head-dimension index merged as ``head · D + d`` (attention's output with its
   heads concatenated, ``[seq, heads · D]``).

``S``, ``E`` and ``l`` must be buffers of the function that nothing else reads.
:func:`match_chain` returns the matched kernels and the pieces the flash kernel is built
from (:class:`Chain`); it changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects import arith, memref
from xdsl.dialects.builtin import FloatAttr
from xdsl.ir import Block, Operation, SSAValue
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
)
from xdsl.traits import is_side_effect_free

from llmopt.dialects import loop

NEG_INF = float("-inf")
SLE, ULE = 3, 7
"""``arith.cmpi`` predicates ``sle`` and ``ule``."""



def bound(kernel: loop.KernelOp, value: SSAValue) -> SSAValue | None:
    """The function value a block argument of ``kernel`` is bound to, else ``None``."""
    for arg, buf in zip(kernel.body.block.args, kernel.buffers, strict=True):
        if arg is value:
            return buf
    return None


def band(kernel: loop.KernelOp) -> tuple[list[loop.ForOp], list[Operation], list[Operation]]:
    """The kernel's perfect ``loop.for`` band, the ops of its innermost body, and the
    kernel's ops outside the band (which must be region-less and side-effect free); an
    empty band when the kernel is not one band."""
    top = [op for op in kernel.body.block.ops if not isinstance(op, loop.ForOp)]
    fors = [op for op in kernel.body.block.ops if isinstance(op, loop.ForOp)]
    if len(fors) != 1 or any(op.regions or not is_side_effect_free(op) for op in top):
        return [], [], []
    loops = [fors[0]]
    while True:
        ops = list(loops[-1].body.block.ops)
        if len(ops) == 1 and isinstance(ops[0], loop.ForOp):
            loops.append(ops[0])
        else:
            return loops, ops, top


def coord(access: loop.LoadOp | loop.StoreOp, k: int) -> SSAValue | int | None:
    """Coordinate ``k`` of an access when it is an index operand (returned) or a constant
    (its value); ``None`` for any other expression."""
    expr = access.map.data.results[k]
    if isinstance(expr, AffineDimExpr):
        return access.indices[expr.position]
    if isinstance(expr, AffineConstantExpr):
        return expr.value
    return None


def reads_at(access: loop.LoadOp | loop.StoreOp, ivs: Sequence[loop.ForOp | loop.ReduceOp],
             trailing: int = 0) -> bool:
    """Whether ``access`` touches exactly ``[iv₀, iv₁, …, 0 × trailing]``; a loop of extent
    1 may also stand as the constant 0."""
    rank = len(access.map.data.results)
    if rank != len(ivs) + trailing:
        return False
    for k in range(rank):
        c = coord(access, k)
        if k >= len(ivs):
            if c != 0:
                return False
        elif not (c is ivs[k].iv or (c == 0 and ivs[k].trip_count == 1)):
            return False
    return True


def uses_any(access: loop.LoadOp, values: Sequence[SSAValue]) -> bool:
    """Whether an index operand of ``access`` is one of ``values``."""
    return any(v is w for v in access.indices for w in values)


def same_ops(first: Sequence[Operation], second: Sequence[Operation],
             mapping: dict[SSAValue, SSAValue]) -> bool:
    """Whether two op lists compute the same thing: same ops, properties and attributes,
    operands equal through ``mapping`` (extended with the results)."""
    if len(first) != len(second):
        return False
    for a, b in zip(first, second, strict=True):
        if (a.name != b.name or a.regions or b.regions or a.properties != b.properties
                or a.attributes != b.attributes or len(a.operands) != len(b.operands)):
            return False
        if any(mapping.get(x, x) is not y for x, y in zip(a.operands, b.operands, strict=True)):
            return False
        mapping.update(zip(a.results, b.results, strict=True))
    return True


def loop_indexed(access: loop.LoadOp, kernel: loop.KernelOp) -> bool:
    """Whether every index of ``access`` is a loop variable or defined at the top of
    ``kernel``: the rebuilt kernel substitutes the former and clones the latter, and has
    nothing else (a gathered index, say) to offer."""
    for index in access.indices:
        owner = index.owner
        if isinstance(owner, Block):
            if not isinstance(owner.parent_op(), loop.ForOp | loop.ReduceOp):
                return False
        elif owner.parent is not kernel.body.block:
            return False
    return True


def product_of(red: loop.ReduceOp, kernel: loop.KernelOp
               ) -> tuple[loop.LoadOp, loop.LoadOp, arith.MulfOp] | None:
    """A reduce body of ``kernel`` that is exactly two loads indexed by loop variables and
    the product it yields, each factor a load or its ``arith.extf`` (a 16-bit operand
    widened to the ``f32`` of the sum)."""
    ops = list(red.body.block.ops)
    last = ops.pop() if ops else None
    loads = [op for op in ops if isinstance(op, loop.LoadOp)]
    muls = [op for op in ops if isinstance(op, arith.MulfOp)]
    widened = [op for op in ops if isinstance(op, arith.ExtFOp)]
    if (len(loads) != 2 or len(muls) != 1 or len(ops) != 3 + len(widened)
            or not isinstance(last, loop.YieldOp) or last.values[0] is not muls[0].result):
        return None
    a, b = loads
    mul = muls[0]
    if not all(ext.input in (a.result, b.result) for ext in widened):
        return None
    factors = {factor(mul, a), factor(mul, b)}
    if (factors != {mul.lhs, mul.rhs} or len(factors) != 2
            or not (loop_indexed(a, kernel) and loop_indexed(b, kernel))):
        return None
    return a, b, mul


def factor(mul: arith.MulfOp, load: loop.LoadOp) -> SSAValue:
    """The operand of ``mul`` that ``load`` gives: its result, or that widened by an
    ``arith.extf``."""
    for operand in (mul.lhs, mul.rhs):
        if operand is load.result or (isinstance(operand.owner, arith.ExtFOp)
                                      and operand.owner.input is load.result):
            return operand
    return load.result


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
    """Kernel 1 of the chain (see the module docstring), else ``None``."""
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


@dataclass
class Output:
    """Kernel 4: ``O = h(Σ_j E·V, l)``, the roles of its band's loops."""

    kernel: loop.KernelOp
    ivs: list[loop.ForOp]
    reduce: loop.ReduceOp
    p: loop.LoadOp
    v: loop.LoadOp
    mul: arith.MulfOp
    sums: list[loop.LoadOp]
    """The epilogue's loads of ``l``."""
    roles: dict[SSAValue, list[tuple[int, int]]]
    """band iv → ``(coefficient, role)``: role ``k < n`` is the scores' dimension ``k``
    (batch…, query), role ``n`` is ``d``, the head-dimension index."""
    head_dim: int


def merged(expr: AffineExpr, kind: AffineBinaryOpKind) -> tuple[int, int] | None:
    """``(dim position, c)`` when ``expr`` is ``dim floordiv c`` / ``dim mod c``."""
    if (isinstance(expr, AffineBinaryOpExpr) and expr.kind == kind
            and isinstance(expr.lhs, AffineDimExpr) and isinstance(expr.rhs, AffineConstantExpr)
            and expr.rhs.value > 0):
        return expr.lhs.position, expr.rhs.value
    return None


Roles = dict[SSAValue, list[tuple[int, int]]]


def output_roles(p: loop.LoadOp, v: loop.LoadOp, loops: Sequence[loop.ForOp], n: int,
                 extents: Sequence[int]) -> tuple[Roles, int] | None:
    """The roles of the output band's loops (see :class:`Output`) and the head dimension,
    read from the loads of ``E`` (coordinates ``roles…, j``) and ``V`` (last coordinate
    ``d``); ``None`` unless every loop is one role or ``head · D + d``."""
    ivs = [lp.iv for lp in loops]
    trip = {lp.iv: lp.trip_count for lp in loops}
    roles: Roles = {}
    d_expr = v.map.data.results[-1]
    d_plain = coord(v, len(v.map.data.results) - 1)
    d_split = merged(d_expr, AffineBinaryOpKind.Mod)
    head_dim = None
    for k in range(n):
        expr = p.map.data.results[k]
        c = coord(p, k)
        if isinstance(c, int):
            if c != 0 or extents[k] != 1:
                return None
            continue
        if c is not None:
            if c not in ivs or trip[c] != extents[k] or c in roles:
                return None
            roles[c] = [(1, k)]
            continue
        div = merged(expr, AffineBinaryOpKind.FloorDiv)
        if div is None or d_split is None or div[1] != d_split[1]:
            return None
        iv = p.indices[div[0]]
        if (iv is not v.indices[d_split[0]] or iv not in ivs or iv in roles
                or trip[iv] != extents[k] * div[1]):
            return None
        roles[iv] = [(div[1], k), (1, n)]
        head_dim = div[1]
    if d_split is None:
        if not isinstance(d_plain, SSAValue) or d_plain not in ivs or d_plain in roles:
            return None
        roles[d_plain] = [(1, n)]
        head_dim = trip[d_plain]
    if head_dim is None or any(iv not in roles for iv in ivs if trip[iv] > 1):
        return None
    return roles, head_dim


def match_output(kernel: loop.KernelOp, probs: SSAValue, sums: SSAValue | None, n: int,
                 extents: Sequence[int]) -> Output | None:
    """Kernel 4, reading ``probs`` (``E``) and ``sums`` (``l``) of ``n`` roles of the given
    extents, else ``None``."""
    loops, ops, _ = band(kernel)
    reds = [op for op in ops if isinstance(op, loop.ReduceOp)]
    if len(reds) != 1 or reds[0].kind.data != "add" or any(
            op.regions for op in ops if op is not reds[0]):
        return None
    red = reds[0]
    found = product_of(red, kernel)
    if found is None:
        return None
    a, b, mul = found
    p, v = (a, b) if bound(kernel, a.buffer) is probs else (b, a)
    if bound(kernel, p.buffer) is not probs or bound(kernel, v.buffer) in (probs, sums):
        return None
    rank_p = len(p.map.data.results)
    if rank_p != n + 1 or coord(p, n) is not red.iv:
        return None
    v_keys = [k for k in range(len(v.map.data.results)) if coord(v, k) is red.iv]
    if len(v_keys) != 1 or v_keys[0] == len(v.map.data.results) - 1:
        return None
    found_roles = output_roles(p, v, loops, n, extents)
    if found_roles is None:
        return None
    roles, head_dim = found_roles
    if uses_any(v, [iv for iv, rs in roles.items() if any(r == n - 1 for _, r in rs)]):
        return None  # V must not depend on the query
    # The epilogue reads l only at the row of the sum, and nothing else of the chain.
    loads = [op for op in ops if isinstance(op, loop.LoadOp)]
    if any(bound(kernel, op.buffer) is probs for op in loads):
        return None
    sum_loads = [op for op in loads if bound(kernel, op.buffer) is sums]
    ids: dict[SSAValue, int] = {}
    row = canonical(p, ids)[:n]
    for op in sum_loads:
        if canonical(op, ids) != (*row, AffineConstantExpr(0)):
            return None
    return Output(kernel, loops, red, p, v, mul, sum_loads, roles, head_dim)


def canonical(access: loop.LoadOp, ids: dict[SSAValue, int]) -> tuple[AffineExpr, ...]:
    """The coordinates of ``access`` as expressions over its index values themselves (value
    ``v`` is dimension ``ids[v]``, numbered as met), so accesses through different maps of
    the same values compare equal."""
    dims = [AffineDimExpr(ids.setdefault(v, len(ids))) for v in access.indices]
    return tuple(e.replace_dims_and_symbols(dims, []) for e in access.map.data.results)


@dataclass
class Chain:
    """The matched kernels (no sums kernel when the *exp* kernel normalizes)."""

    scores: Scores
    exp: Exp
    sums_kernel: loop.KernelOp | None
    sums: SSAValue | None
    output: Output

    @property
    def kernels(self) -> list[loop.KernelOp]:
        """The matched kernels, in program order."""
        return [k for k in (self.scores.kernel, self.exp.kernel, self.sums_kernel,
                            self.output.kernel) if k is not None]

    @property
    def internal(self) -> list[SSAValue]:
        """The buffers only the chain uses (``S``, ``E``, ``l``), which the flash kernel
        keeps on chip."""
        return [b for b in (self.scores.out, self.exp.out, self.sums) if b is not None]

    @property
    def dims(self) -> tuple[int, int, int, int]:
        """``(rows, queries, keys, head_dim)``: the batch × heads rows of query blocks, the
        queries and keys of each, and the output's head dimension."""
        extents = [lp.trip_count for lp in self.exp.ivs]
        return (math.prod(extents[:-1]), extents[-1], self.exp.max.trip_count,
                self.output.head_dim)


def private(value: SSAValue, *kernels: loop.KernelOp) -> bool:
    """Whether ``value`` is a ``memref.alloc`` of the function bound to exactly ``kernels``."""
    return (isinstance(value.owner, memref.AllocOp)
            and {use.operation for use in value.uses} == set(kernels))


def match_chain(first: loop.KernelOp) -> Chain | None:
    """The attention chain starting at the scores kernel ``first``, else ``None``."""
    scores = match_scores(first)
    if scores is None:
        return None
    users = [u.operation for u in scores.out.uses if u.operation is not first]
    if len(users) != 1 or not isinstance(users[0], loop.KernelOp):
        return None
    exp = match_exp(users[0], scores.out)
    if exp is None:
        return None
    n = len(exp.ivs)  # batch… and the query
    extents = [lp.trip_count for lp in exp.ivs]
    if [lp.trip_count for lp in scores.ivs] != [*extents, exp.max.trip_count]:
        return None
    readers = {u.operation for u in exp.out.uses} - {exp.kernel}
    sums_kernel: loop.KernelOp | None = None
    sums: SSAValue | None = None
    if not exp.normalized:
        for reader in readers:
            if isinstance(reader, loop.KernelOp):
                sums = match_sums(reader, exp.out)
                if sums is not None:
                    sums_kernel = reader
                    break
        if sums_kernel is None or sums is None:
            return None
    rest = readers - {sums_kernel}
    if len(rest) != 1:
        return None
    output_kernel = rest.pop()
    if not isinstance(output_kernel, loop.KernelOp):
        return None
    output = match_output(output_kernel, exp.out, sums, n, extents)
    if output is None:
        return None
    kernels = [k for k in (first, exp.kernel, sums_kernel, output_kernel) if k is not None]
    if not (private(scores.out, first, exp.kernel) and private(exp.out, *kernels[1:])
            and (sums is None or sums_kernel is None
                 or private(sums, sums_kernel, output_kernel))):
        return None
    stores = [op for op in output_kernel.walk() if isinstance(op, loop.StoreOp)]
    if len(stores) != 1 or stores[0].parent_op() is not output.ivs[-1]:
        return None
    for k in kernels[:-1]:
        if sum(isinstance(op, loop.StoreOp) for op in k.walk()) != 1:
            return None
    return Chain(scores, exp, sums_kernel, sums, output)
