"""``flash-attention``: attention's kernels become one, with an online softmax.

**Matches** the four ``loop.kernel`` ops (three without a mask) that ``fuse-kernels`` and
``hoist-reduce-factors`` leave of ``softmax(mask(scale · Q·Kᵀ)) · V`` (one dimension list
``(batch…, i, j)`` for the scores, ``i`` the query and ``j`` the key):

1. *scores*: ``S[batch…, i, j] = Σ_r Q[…, i, r] · K[…, j, r]`` — a band over ``(batch…, i, j)``
   holding one ``loop.reduce add`` of the product of a load that reads ``i`` (not ``j``) and
   one that reads ``j`` (not ``i``);
2. *exp*: per ``(batch…, i)`` the row maximum ``m = max_j g(S[…, i, j])`` of a scalar body
   ``g`` (scale, mask …), then ``E[…, i, j] = exp(g(S[…, i, j]) - m)`` with ``g`` computed
   again by the same ops;
3. *sums*: ``l[batch…, i] = Σ_j E[…, i, j]`` — or, as ``fuse-kernels`` leaves attention
   without a mask, taken in the *exp* kernel itself, which then stores ``E / l``;
4. *output*: ``O[f(batch…, i, d)] = h(Σ_j E[…, i, j] · V[…, j, d], l[…, i])`` — the sum of
   ``P·V`` with whatever epilogue ``h`` follows it (after ``hoist-reduce-factors``: the
   division by ``l``), stored in any layout whose coordinates are the roles themselves or
   a head and a head-dimension index merged as ``head · D + d`` (attention's output with its
   heads concatenated, ``[seq, heads · D]``).

``S``, ``E`` and ``l`` must be buffers of the function that nothing else reads. Head-dimension
extents must be multiples of 16; anything else is left to the unfused kernels. Query and key
extents may be anything: a last query block that overhangs the queries reads ``Q`` through
clamped loads and stores only its rows inside (an ``scf.if``); a last key block that
overhangs the keys reads ``K`` and ``V`` clamped and masks its extra keys to ``-inf`` (an
``arith.select`` after ``g``), so they add nothing.

**Produces** one ``tile.kernel`` of 256 threads whose ``tile.forall over blocks`` takes
``(batch…, query block)`` — causal: ``(query block, batch…)`` with the last query blocks,
which visit the most key blocks, dealt out first: a block owns ``bm`` query rows. It stages
its rows of ``Q`` in shared memory once, then loops over blocks of ``bn`` keys — with a
causal mask (``g`` ends in ``select(j ≤ i, x, -inf)``) only up to the block holding the
diagonal, because later blocks are masked entirely. Per key block: the ``K`` and ``V`` rows
are staged; the ``bm × bn`` score tile is computed by 16 × 16 threads with a register
micro-tile each and ``g`` is applied (its ops cloned from the *exp* kernel, with ``i`` and
``j`` the tile's coordinates); 256 / ``bm`` threads a row take the row's maximum and sum in
slices (combined through shared memory), update the running maximum ``m``, turn the scores
into ``p = exp(s - m)`` and rescale the running sum ``l ← l·exp(m_old - m) + Σ p``; the
output accumulators (a register micro-tile of ``bm × D`` per block) are rescaled by the same
factor and take ``Σ_j p·V``. After the last key block the *output* kernel's epilogue runs on
the accumulators, with ``l`` read from shared memory (when the *exp* kernel normalized, the
accumulators are divided by ``l`` first: that is the sum the *output* kernel took). The row
maximum of a row whose scores are all ``-inf`` so far counts as 0 in the exponents, so a
fully masked block adds nothing instead of making ``NaN``.

**Why** the four kernels write and read the ``heads × seq × seq`` scores and probabilities
through global memory twice and launch four times; here they stay in shared memory, and the
causal half of the key blocks is skipped rather than computed and masked. Sums are taken
in a different order (per key block, rescaled), so results round differently: within the
same tolerance as the unfused kernels, not bit for bit.

Options: ``bm`` (query rows per block, a multiple of 16; 0 = the largest of 64, 32, 16
that still gives every multiprocessor a block), ``bn`` (keys per block; 0 = the largest of
64, 32, 16 that divides the keys), ``arch`` (whose multiprocessor count the heuristic
reads).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import (
    FloatAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    i64,
)
from xdsl.dialects.math import ExpOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
)
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import is_side_effect_free

from llmopt.dialects import loop, tile
from llmopt.passes.tile._access import (
    UNROLL,
    ClampingCloner,
    Cloner,
    Linear,
    block_threads,
    close_guards,
    guard_inside,
    loop_nest,
)
from llmopt.passes.tile._schedule import limits, padded_bytes

THREADS = 16
"""Threads along each side of a score or output tile (16 × 16 = 256 a block)."""
PAD = 4
"""Padding of the tiles read along their rows (Q, K, the scores): rows of a multiple of 4
words stay 16-byte aligned, so ``vector-fragments`` reads them as ``float4``, and 8
consecutive rows start in distinct banks."""
UNROLL_K = 8
"""How far CUDA unrolls the sequential loops of the two products (their loads overlap)."""
INDEX = IndexType()
NEG_INF = float("-inf")
SLE, ULE = 3, 7
"""``arith.cmpi`` predicates ``sle`` and ``ule``."""


# --- matching -------------------------------------------------------------------------------------


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
    the product it yields."""
    ops = list(red.body.block.ops)
    if len(ops) != 4 or not isinstance(ops[2], arith.MulfOp):
        return None
    a, b, mul, last = ops
    if not (isinstance(a, loop.LoadOp) and isinstance(b, loop.LoadOp)
            and isinstance(last, loop.YieldOp) and last.values[0] is mul.result
            and {mul.lhs, mul.rhs} == {a.result, b.result}
            and loop_indexed(a, kernel) and loop_indexed(b, kernel)):
        return None
    return a, b, mul


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
    if not isinstance(row, loop.ForOp) or row.trip_count != red.trip_count:
        return None
    body = list(red.body.block.ops)
    load, last = body[0], body[-1]
    if not (isinstance(load, loop.LoadOp) and bound(kernel, load.buffer) is scores
            and isinstance(last, loop.YieldOp)
            and reads_at(load, [*loops, red], len(load.map.data.results) - len(loops) - 1)):
        return None
    g = body[1:-1]
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


# --- building -------------------------------------------------------------------------------------


def choose_blocks(rows: int, queries: int, keys: int, head_dim: int, sms: int, bm: int,
                  bn: int) -> tuple[int, int] | None:
    """``(bm, bn)``: the options when set, else the largest ``bm`` of 64, 32, 16 that divides
    the queries and still makes ``sms`` blocks over ``rows`` (batch × heads) rows of query
    blocks (else the smallest that divides; when none divides, the same choice among all
    three, the last query block overhanging the queries), and the largest ``bn`` of 64, 32,
    16 that divides the keys (when none does, the smallest that covers them, at most 64: the
    last key block overhangs the keys and its extra keys are masked). (On the H200,
    Qwen2.5-7B's attention at seq 512, head dimension 128, took 0.141 ms with ``bn = 64``
    and 0.169 ms with 32.) ``None`` when the head dimension is not a multiple of the 16
    threads along it."""
    if head_dim % THREADS:
        return None
    if not bm:
        fitting = [b for b in (64, 32, 16) if queries % b == 0] or [64, 32, 16]
        bm = next((b for b in fitting if rows * -(-queries // b) >= sms), fitting[-1])
    if not bn:
        dividing = [b for b in (64, 32, 16) if keys % b == 0]
        bn = dividing[0] if dividing else next(b for b in (16, 32, 64) if keys <= b or b == 64)
    if bm % THREADS or bn % THREADS:
        return None
    return bm, bn


def lin_sum(*parts: tuple[int, Linear]) -> Linear:
    """``Σ coef · linear``."""
    terms: list[tuple[int, SSAValue]] = []
    const = 0
    for coef, lin in parts:
        terms += [(coef * c, v) for c, v in lin.terms]
        const += coef * lin.const
    return Linear.of(*terms, const=const)


def const_index(value: int) -> arith.ConstantOp:
    return arith.ConstantOp(IntegerAttr(value, INDEX))


def const_float(value: float, typ: Attribute) -> arith.ConstantOp:
    return arith.ConstantOp(FloatAttr(value, typ))  # type: ignore[arg-type]


def shared(shape: Sequence[int], typ: Attribute, name: str, pad: int | None) -> tile.AllocOp:
    """A shared buffer (``pad``: the padding ``pad-shared`` gives it)."""
    alloc = tile.AllocOp("shared", MemRefType(typ, list(shape)))  # type: ignore[arg-type]
    alloc.result.name_hint = name
    if pad is not None:
        alloc.attributes["llmopt.pad"] = IntegerAttr(pad, i64)
    return alloc


def ident(rank: int) -> AffineMap:
    return AffineMap.identity(rank)


def seq_loop(extent: int, name: str, role: str, ub: SSAValue | None = None, unroll: int = 0
             ) -> tuple[list[Operation], scf.ForOp, Block]:
    """An ``scf.for %name = 0 to extent`` (or ``0 to ub``), its iterations unrolled by
    ``unroll`` in CUDA (0: not): the ops to insert and its body."""
    block = Block(arg_types=[INDEX])
    block.args[0].name_hint = name
    zero = const_index(0)
    consts: list[Operation] = [zero]
    if ub is None:
        c = const_index(extent)
        consts.append(c)
        ub = c.result
    one = const_index(1)
    consts.append(one)
    for_op = scf.ForOp(zero.result, ub, one.result, [], Region(block))
    for_op.attributes["llmopt.role"] = StringAttr(role)
    if unroll:
        for_op.attributes["unroll"] = IntegerAttr(unroll, i64)
    return consts, for_op, block


ROW = AffineMap(2, 0, (AffineDimExpr(1) * THREADS + AffineDimExpr(0),))
"""``(ti, mi) → mi·16 + ti``: a thread's row of a tile."""
TILE = AffineMap(4, 0, (AffineDimExpr(2) * THREADS + AffineDimExpr(0),
                        AffineDimExpr(3) * THREADS + AffineDimExpr(1)))
"""``(ti, tj, mi, nj) → (mi·16 + ti, nj·16 + tj)``: a thread's element of a tile."""
ROW_K = AffineMap(3, 0, (AffineDimExpr(1) * THREADS + AffineDimExpr(0), AffineDimExpr(2)))
"""``(t, i, k) → (i·16 + t, k)``: a thread's row of a tile at column ``k``."""
K_COL = AffineMap(3, 0, (AffineDimExpr(2), AffineDimExpr(1) * THREADS + AffineDimExpr(0)))
"""``(t, i, k) → (k, i·16 + t)``: a thread's column of a tile at row ``k``."""


class FlashKernel:
    """The flash kernel of a matched chain (see the module docstring), built step by step:
    :meth:`build` appends the steps to the block's body and to the loop over key blocks."""

    def __init__(self, chain: Chain, bm: int, bn: int, name: str) -> None:
        self.chain, self.bm, self.bn = chain, bm, bn
        sc, ex, out = chain.scores, chain.exp, chain.output
        self.extents = [lp.trip_count for lp in ex.ivs]
        self.dk, self.hd = sc.reduce.trip_count, out.head_dim
        self.typ = sc.reduce.result.type
        self.wm, self.wn, self.wd = bm // THREADS, bn // THREADS, self.hd // THREADS
        self.kernels = [k for k in (sc.kernel, ex.kernel, chain.sums_kernel, out.kernel)
                        if k is not None]
        dropped = {sc.out, ex.out, chain.sums}
        buffers: list[SSAValue] = []
        for k in self.kernels:
            buffers += [b for b in k.buffers if b not in dropped and b not in buffers]
        n_qb = -(-self.extents[-1] // bm)
        self.keys = ex.max.trip_count
        self.ragged_q = self.extents[-1] % bm != 0
        self.ragged_k = self.keys % bn != 0
        self.heavy_first = ex.causal and n_qb > 1
        grid = [n_qb, *self.extents[:-1]] if self.heavy_first else [*self.extents[:-1], n_qb]
        self.kernel = tile.KernelOp(name, [min(math.prod(grid), 2**31 - 1), 1, 1],
                                    [THREADS * THREADS, 1, 1], buffers)
        self.kernel.attributes["llmopt.flash"] = StringAttr(f"{bm}x{bn}")
        self.values = self._kernel_level_ops(buffers)
        blocks = tile.ForallOp(grid, "blocks")
        self.kernel.body.block.add_op(blocks)
        self.body = blocks.body.block
        self.qb, batch_ivs = self._query_block(list(blocks.ivs), n_qb)
        self.role = [Linear.of() if e == 1 else Linear.of((1, b))
                     for e, b in zip(self.extents[:-1], batch_ivs, strict=True)]
        self.q_base = Linear.of((bm, self.qb))
        typ, dk, hd = self.typ, self.dk, self.hd
        self.qs = shared([bm, dk], typ, "qs", PAD)
        self.ks = shared([bn, dk], typ, "ks", PAD)
        self.vs = shared([bn, hd], typ, "vs", 0)
        self.ps = shared([bm, bn], typ, "ps", PAD)
        self.m_run = shared([bm], typ, "m", None)
        self.l_run = shared([bm], typ, "l", None)
        self.corr = shared([bm], typ, "corr", None)
        self.shift = shared([bm], typ, "shift", None)
        self.parts = THREADS * THREADS // bm
        self.part = shared([bm, self.parts], typ, "part", 1)
        self.sacc = tile.AllocOp("registers", MemRefType(typ, [THREADS, THREADS, self.wm,
                                                                self.wn]))
        self.sacc.result.name_hint = "s"
        self.oacc = tile.AllocOp("registers", MemRefType(typ, [THREADS, THREADS, self.wm,
                                                                self.wd]))
        self.oacc.result.name_hint = "acc"
        self.body.add_ops([self.qs, self.ks, self.vs, self.ps, self.m_run, self.l_run,
                           self.corr, self.shift, self.part, self.sacc, self.oacc])

    def _kernel_level_ops(self, buffers: list[SSAValue]
                          ) -> dict[loop.KernelOp, dict[SSAValue, SSAValue]]:
        """Name the new kernel's arguments and clone every matched kernel's ops outside its
        loops (constants) into it; per matched kernel, its values → the new kernel's."""
        top = self.kernel.body.block
        for arg, buf in zip(top.args, buffers, strict=True):
            arg.name_hint = next(a.name_hint for k in self.kernels
                                 for a, b in zip(k.body.block.args, k.buffers, strict=True)
                                 if b is buf)
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
        """The query block's index and the batch ivs of the blocks' forall."""
        if not self.heavy_first:
            qb, batch = ivs[-1], ivs[:-1]
        else:
            # Causal: query block qb visits qb + 1 key blocks. The blocks are dealt out in
            # the order of the forall's points, so the heaviest go first (qb = n_qb - 1 -
            # qr): the light ones fill in around them, and the last to start are short.
            qr, batch = ivs[0], ivs[1:]
            qr.name_hint = "qr"
            last = const_index(n_qb - 1)
            qb_op = arith.SubiOp(last.result, qr)
            self.body.add_ops([last, qb_op])
            qb = qb_op.result
        for k, arg in enumerate(batch):
            arg.name_hint = f"b{k}"
        qb.name_hint = "qb"
        return qb, batch

    # --- pieces -----------------------------------------------------------------------------------

    def micro(self, inner_extent: int, inner_name: str, role: str
              ) -> tuple[tile.ForallOp, Block, list[SSAValue]]:
        """A forall of the 16 × 16 threads, each over its ``wm × inner_extent`` micro-tile."""
        forall, (ti, tj) = block_threads([THREADS, THREADS], ["ti", "tj"])
        nest, inner, (mi, nj) = loop_nest([self.wm, inner_extent], ["mi", inner_name], UNROLL)
        forall.body.block.add_op(nest)
        forall.attributes["llmopt.role"] = StringAttr(role)
        return forall, inner, [ti, tj, mi, nj]

    def rows(self, role: str) -> tuple[tile.ForallOp, Block, SSAValue]:
        """A forall with one thread per query row of the block."""
        forall, (r,) = block_threads([self.bm], ["r"])
        forall.attributes["llmopt.role"] = StringAttr(role)
        return forall, forall.body.block, r

    def stage(self, load: loop.LoadOp, subst: dict[SSAValue, Linear], kernel: loop.KernelOp,
              dst: tile.AllocOp, names: tuple[str, str], fill: dict[SSAValue, int]
              ) -> tile.ForallOp:
        """A forall filling ``dst[a, b]`` with ``load`` (of ``kernel``) at ``subst``, plus
        ``a`` or ``b`` (``fill``: old iv → 0 or 1) on the given ivs."""
        typ = dst.result.type
        assert isinstance(typ, MemRefType)
        forall, ab = block_threads(list(typ.get_shape()), list(names))
        forall.attributes["llmopt.role"] = StringAttr("stage")
        full = dict(subst)
        for iv, which in fill.items():
            full[iv] = lin_sum((1, subst.get(iv, Linear.of())), (1, Linear.of((1, ab[which]))))
        values = dict(self.values[kernel])
        cloner = (ClampingCloner(full, values, global_buffers=set(self.kernel.body.block.args))
                  if self.ragged_q or self.ragged_k else Cloner(full, values))
        copy = cloner.clone_into(load, forall.body.block)
        forall.body.block.add_op(loop.StoreOp(copy.results[0], dst.result, ident(2), ab))
        return forall

    def out_subst(self, query: Linear, d: Linear) -> dict[SSAValue, Linear]:
        """The output band's ivs from the roles (batch from the block, ``query``, ``d``)."""
        by_role = [*self.role, query, d]
        out = self.chain.output
        subst = {lp.iv: Linear.of() for lp in out.ivs}  # extent 1: no role
        subst.update({iv: lin_sum(*((c, by_role[k]) for c, k in rs))
                      for iv, rs in out.roles.items()})
        return subst

    def product(self, acc: tile.AllocOp, extent: int, inner: tuple[int, str],
                a: tuple[tile.AllocOp, AffineMap], b: tuple[tile.AllocOp, AffineMap],
                old: tuple[loop.LoadOp, loop.LoadOp, Operation], kernel: loop.KernelOp
                ) -> list[Operation]:
        """``acc[ti, tj, mi, x] += a[..] · b[..]`` over ``k < extent`` (an ``scf.for`` around
        the threads' forall): ``a`` is read at ``(ti, mi, k)``, ``b`` at ``(tj, x, k)``, and
        the product is ``old``'s multiplication (of ``kernel``) cloned onto them."""
        consts, k_loop, k_body = seq_loop(extent, "kk" if acc is self.sacc else "jj",
                                          "k_loop", unroll=UNROLL_K)
        step, body, (ti, tj, mi, x) = self.micro(*inner, "update")
        k = k_body.args[0]
        la = loop.LoadOp(a[0].result, a[1], [ti, mi, k])
        lb = loop.LoadOp(b[0].result, b[1], [tj, x, k])
        body.add_ops([la, lb])
        vals = {**self.values[kernel], old[0].result: la.result, old[1].result: lb.result}
        term = Cloner({}, vals).clone_into(old[2], body)
        ivs = [ti, tj, mi, x]
        prev = loop.LoadOp(acc.result, ident(4), ivs)
        total = arith.AddfOp(prev.result, term.results[0])
        body.add_ops([prev, total, loop.StoreOp(total.result, acc.result, ident(4), ivs)])
        k_body.add_ops([step, scf.YieldOp()])
        return [*consts, k_loop]

    # --- steps ------------------------------------------------------------------------------------

    def init_state(self) -> None:
        """Running maximum -inf, running sum 0, output accumulators 0."""
        init_rows, blk, r = self.rows("init")
        ninf, zero = const_float(NEG_INF, self.typ), const_float(0.0, self.typ)
        blk.add_ops([ninf, zero, loop.StoreOp(ninf.result, self.m_run.result, ident(1), [r]),
                     loop.StoreOp(zero.result, self.l_run.result, ident(1), [r])])
        init_acc, inner, ivs = self.micro(self.wd, "dj", "init")
        z = const_float(0.0, self.typ)
        inner.add_ops([z, loop.StoreOp(z.result, self.oacc.result, ident(4), ivs)])
        self.body.add_ops([init_rows, init_acc])

    def key_loop(self) -> tuple[Block, Linear]:
        """The loop over key blocks (up to the diagonal's when the mask is causal): its body
        and the first key of its block."""
        bm, bn = self.bm, self.bn
        n_kb = -(-self.keys // bn)
        pre: list[Operation] = []
        ub: SSAValue | None = None
        if self.chain.exp.causal:
            # ub = min(n_kb, (qb·bm + bm - 1) floordiv bn + 1)
            c_bm, c_last, c_bn, c_n = (const_index(bm), const_index(bm - 1 + bn),
                                       const_index(bn), const_index(n_kb))
            first_row = arith.MuliOp(self.qb, c_bm.result)
            end = arith.AddiOp(first_row.result, c_last.result)
            blocks_to = arith.DivUIOp(end.result, c_bn.result)
            ub_op = arith.MinUIOp(blocks_to.result, c_n.result)
            pre = [c_bm, c_last, c_bn, c_n, first_row, end, blocks_to, ub_op]
            ub = ub_op.result
        consts, kb_loop, kb_body = seq_loop(n_kb, "kb", "key_blocks", ub=ub)
        self.body.add_ops([*pre, *consts, kb_loop])
        return kb_body, Linear.of((bn, kb_body.args[0]))

    def scores(self, kb_body: Block, key_base: Linear) -> None:
        """The score tile (a register micro-tile a thread), ``g`` applied, into ``ps``."""
        sc, ex = self.chain.scores, self.chain.exp
        s_init, inner, ivs = self.micro(self.wn, "nj", "init")
        z = const_float(0.0, self.typ)
        inner.add_ops([z, loop.StoreOp(z.result, self.sacc.result, ident(4), ivs)])
        kb_body.add_op(s_init)
        kb_body.add_ops(self.product(self.sacc, self.dk, (self.wn, "nj"), (self.qs, ROW_K),
                                     (self.ks, ROW_K), (sc.q, sc.k, sc.mul), sc.kernel))
        s_done, inner, (ti, tj, mi, nj) = self.micro(self.wn, "nj", "scores")
        s = loop.LoadOp(self.sacc.result, ident(4), [ti, tj, mi, nj])
        inner.add_op(s)
        subst = {lp.iv: self.role[k] for k, lp in enumerate(ex.ivs[:-1])}
        subst[ex.ivs[-1].iv] = lin_sum((1, self.q_base), (1, Linear.of((THREADS, mi), (1, ti))))
        subst[ex.max.iv] = lin_sum((1, key_base), (1, Linear.of((THREADS, nj), (1, tj))))
        g = Cloner(subst, {**self.values[ex.kernel], ex.load.result: s.result})
        for op in ex.body:
            g.clone_into(op, inner)
        last = ex.max.body.block.last_op
        assert last is not None
        score = g.value(last.operands[0], inner)
        if self.ragged_k:  # the keys past the end of the last block count as masked
            limit, ninf = const_index(self.keys), const_float(NEG_INF, self.typ)
            inside = arith.CmpiOp(g.value(ex.max.iv, inner), limit.result, "ult")
            masked = arith.SelectOp(inside.result, score, ninf.result)
            inner.add_ops([limit, ninf, inside, masked])
            score = masked.result
        inner.add_op(loop.StoreOp(score, self.ps.result, TILE, [ti, tj, mi, nj]))
        kb_body.add_op(s_done)

    def partial(self, kind: str, role: str) -> tile.ForallOp:
        """``part[r, q] = kind`` over the q-th slice of row ``r`` of the score tile."""
        forall, (r, q) = block_threads([self.bm, self.parts], ["r", "q"])
        forall.attributes["llmopt.role"] = StringAttr(role)
        width = self.bn // self.parts
        red = loop.ReduceOp(kind, width, self.typ)
        x = loop.LoadOp(self.ps.result, AffineMap(3, 0, (
            AffineDimExpr(0), AffineDimExpr(1) * width + AffineDimExpr(2))), [r, q, red.iv])
        red.body.block.add_ops([x, loop.YieldOp(x.result)])
        forall.body.block.add_ops([red, loop.StoreOp(red.result, self.part.result, ident(2),
                                                     [r, q])])
        return forall

    def combined(self, kind: str, r: SSAValue) -> loop.ReduceOp:
        """``kind`` over the parts of row ``r``."""
        red = loop.ReduceOp(kind, self.parts, self.typ)
        x = loop.LoadOp(self.part.result, ident(2), [r, red.iv])
        red.body.block.add_ops([x, loop.YieldOp(x.result)])
        return red

    def statistics(self, kb_body: Block) -> None:
        """Per row, over ``parts`` threads a row: the running maximum, ``p = exp(s - m)``
        in place of the scores, the rescale factor and the running sum."""
        typ = self.typ
        kb_body.add_op(self.partial("max", "row_max"))
        stats, blk, r = self.rows("row_max")
        m_old = loop.LoadOp(self.m_run.result, ident(1), [r])
        row_max = self.combined("max", r)
        m_new = arith.MaximumfOp(m_old.result, row_max.result)
        ninf, zero = const_float(NEG_INF, typ), const_float(0.0, typ)
        empty = arith.CmpfOp(m_new.result, ninf.result, "oeq")
        m_safe = arith.SelectOp(empty.result, zero.result, m_new.result)
        shift = arith.SubfOp(m_old.result, m_safe.result)
        factor = ExpOp(shift.result)
        blk.add_ops([m_old, row_max, m_new, ninf, zero, empty, m_safe, shift, factor,
                     loop.StoreOp(factor.results[0], self.corr.result, ident(1), [r]),
                     loop.StoreOp(m_new.result, self.m_run.result, ident(1), [r]),
                     loop.StoreOp(m_safe.result, self.shift.result, ident(1), [r])])
        kb_body.add_op(stats)
        to_p, (r, c) = block_threads([self.bm, self.bn], ["r", "c"])
        to_p.attributes["llmopt.role"] = StringAttr("exp")
        x = loop.LoadOp(self.ps.result, ident(2), [r, c])
        mr = loop.LoadOp(self.shift.result, ident(1), [r])
        diff = arith.SubfOp(x.result, mr.result)
        p = ExpOp(diff.result)
        to_p.body.block.add_ops([x, mr, diff, p,
                                 loop.StoreOp(p.results[0], self.ps.result, ident(2), [r, c])])
        kb_body.add_ops([to_p, self.partial("add", "row_sum")])
        sums, blk, r = self.rows("row_sum")
        row_sum = self.combined("add", r)
        l_old = loop.LoadOp(self.l_run.result, ident(1), [r])
        f = loop.LoadOp(self.corr.result, ident(1), [r])
        scaled = arith.MulfOp(l_old.result, f.result)
        l_new = arith.AddfOp(scaled.result, row_sum.result)
        blk.add_ops([row_sum, l_old, f, scaled, l_new,
                     loop.StoreOp(l_new.result, self.l_run.result, ident(1), [r])])
        kb_body.add_op(sums)

    def accumulate(self, kb_body: Block) -> None:
        """The output accumulators: rescaled, then ``+= Σ_j p·V`` over the key block."""
        out = self.chain.output
        rescale, inner, (ti, tj, mi, dj) = self.micro(self.wd, "dj", "rescale")
        f = loop.LoadOp(self.corr.result, ROW, [ti, mi])
        o = loop.LoadOp(self.oacc.result, ident(4), [ti, tj, mi, dj])
        o2 = arith.MulfOp(o.result, f.result)
        inner.add_ops([f, o, o2, loop.StoreOp(o2.result, self.oacc.result, ident(4),
                                              [ti, tj, mi, dj])])
        kb_body.add_op(rescale)
        kb_body.add_ops(self.product(self.oacc, self.bn, (self.wd, "dj"), (self.ps, ROW_K),
                                     (self.vs, K_COL), (out.p, out.v, out.mul), out.kernel))

    def epilogue(self) -> None:
        """The output kernel's epilogue, once per output, on the accumulators."""
        out = self.chain.output
        epi, inner, (ti, tj, mi, dj) = self.micro(self.wd, "dj", "epilogue")
        acc = loop.LoadOp(self.oacc.result, ident(4), [ti, tj, mi, dj])
        acc.result.name_hint = "sum"
        inner.add_op(acc)
        total: SSAValue = acc.result
        if self.chain.exp.normalized:  # P·V summed the normalized E: divide by l here
            total_l = loop.LoadOp(self.l_run.result, ROW, [ti, mi])
            divided = arith.DivfOp(acc.result, total_l.result)
            inner.add_ops([total_l, divided])
            total = divided.result
        query = lin_sum((1, self.q_base), (1, Linear.of((THREADS, mi), (1, ti))))
        if self.ragged_q:  # rows past the last query compute, but store nothing
            row_iv = self.chain.exp.ivs[-1].iv
            row = Cloner({row_iv: query}).value(row_iv, inner)
            inner = guard_inside(inner, [(row, self.extents[-1])])
        cloner = Cloner(self.out_subst(query, Linear.of((THREADS, dj), (1, tj))),
                        {**self.values[out.kernel], out.reduce.result: total})
        for op in out.sums:
            total_l = loop.LoadOp(self.l_run.result, ROW, [ti, mi])
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
        self.body.add_op(self.stage(sc.q, {**batch, query_iv: self.q_base}, sc.kernel,
                                    self.qs, ("ii", "dd"), {query_iv: 0, sc.reduce.iv: 1}))
        kb_body, key_base = self.key_loop()
        kb_body.add_op(self.stage(sc.k, {**batch, key_iv: key_base}, sc.kernel, self.ks,
                                  ("jj", "dd"), {key_iv: 0, sc.reduce.iv: 1}))
        d_ivs = {iv: 1 for iv, rs in out.roles.items() if any(r == len(self.role) + 1
                                                               for _, r in rs)}
        kb_body.add_op(self.stage(out.v, {**self.out_subst(Linear.of(), Linear.of()),
                                          out.reduce.iv: key_base}, out.kernel, self.vs,
                                  ("jj", "dd"), {out.reduce.iv: 0, **d_ivs}))
        self.scores(kb_body, key_base)
        self.statistics(kb_body)
        self.accumulate(kb_body)
        kb_body.add_op(scf.YieldOp())
        self.epilogue()
        return self.kernel


def shared_bytes(kernel: tile.KernelOp) -> int:
    """Shared memory of ``kernel``'s tiles once ``pad-shared`` has padded them (by their
    ``llmopt.pad``)."""
    total = 0
    for op in kernel.walk():
        if isinstance(op, tile.AllocOp) and op.space.data == "shared":
            typ = op.result.type
            assert isinstance(typ, MemRefType)
            pad = op.attributes.get("llmopt.pad")
            total += padded_bytes(typ.get_shape(), pad.value.data
                                  if isinstance(pad, IntegerAttr) else 0,
                                  typ.element_type.bitwidth // 8)  # type: ignore[attr-defined]
    return total


def fuse(chain: Chain, bm: int, bn: int, sms: int, max_smem: int) -> bool:
    """Replace ``chain`` by its flash kernel; ``False`` (nothing changed) when no block
    sizes fit."""
    extents = [lp.trip_count for lp in chain.exp.ivs]
    sizes = choose_blocks(math.prod(extents[:-1]), extents[-1], chain.exp.max.trip_count,
                          chain.output.head_dim, sms, bm, bn)
    if sizes is None:
        return False
    anchor = chain.output.kernel
    new = FlashKernel(chain, *sizes, anchor.sym_name.data).build()
    if shared_bytes(new) > max_smem:
        return False
    for inner in new.walk():
        inner.location = anchor.location
    rewriter = Rewriter()
    rewriter.insert_op(new, InsertPoint.before(anchor))
    for k in (anchor, chain.sums_kernel, chain.exp.kernel, chain.scores.kernel):
        if k is not None:
            rewriter.erase_op(k)
    for buf in (chain.sums, chain.exp.out, chain.scores.out):
        if buf is not None and not buf.uses:
            rewriter.erase_op(buf.owner)  # type: ignore[arg-type]
    return True


@dataclass(frozen=True)
class FlashAttention(ModulePass):
    """Fuse attention into one flash kernel with an online softmax (see the module
    docstring). Options: ``bm``, ``bn`` (0 = chosen from the shape), ``arch``."""

    name = "flash-attention"

    bm: int = 0
    bn: int = 0
    arch: str = "sm_90"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        gpu = limits(self.arch)
        for first in [k for k in op.walk() if isinstance(k, loop.KernelOp)]:
            if first.parent is None:
                continue  # erased with an earlier chain
            chain = match_chain(first)
            if chain is not None:
                fuse(chain, self.bm, self.bn, gpu.sms, gpu.max_smem)
