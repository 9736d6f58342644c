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

Kernels 1 to 3 are matched in :mod:`~llmopt.passes.tile._attention_scores`, kernel 4 here;
the primitives are :mod:`~llmopt.passes.tile._attention_band`'s. See
:mod:`llmopt.passes.tile.flash_attention` for the whole story.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects import arith, memref
from xdsl.ir import SSAValue
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
)

from llmopt.dialects import loop
from llmopt.passes.tile._attention_band import band, bound, coord, product_of, uses_any
from llmopt.passes.tile._attention_scores import (
    Exp,
    Scores,
    match_exp,
    match_scores,
    match_sums,
)


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
