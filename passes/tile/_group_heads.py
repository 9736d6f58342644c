"""Grouped query heads: the query heads that share a key/value head become one block's rows.

In grouped-query attention ``G`` query heads read one key/value head: the scores kernel
reads ``K`` at ``h floordiv G`` (or a form equal to it), the output kernel ``V`` likewise.
A decode step has one query a head, so a flash kernel with a block per head fills one of
its ``bm`` (at least 16) query rows and each of the ``G`` blocks of a key/value head reads
that head's whole cache. With the heads grouped, block ``(…, kvh, …)`` takes the query
heads ``G·kvh + r`` as its rows ``r`` (rows from ``G`` on read clamped and store nothing):
every key block is read once for ``G`` heads, the score tile has ``G`` useful rows instead
of one, and the grid has ``H / G`` head blocks, which leaves room for more splits of the
keys.

:func:`match_groups` finds the head dimension and the largest ``G`` (dividing the heads, at
most ``most``) for which the loads of ``K`` and ``V`` provably do not depend on ``r``: each
is rewritten with the head as ``G·kvh + r`` over ranges ``kvh < H/G``, ``r < G`` and the
head-dimension index ``d < D``, and the divisions are simplified with those ranges
(:func:`~llmopt.passes.tile._access.simplified`); ``r`` must be gone from every coordinate.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.ir import SSAValue

from llmopt.dialects import loop, tile
from llmopt.passes.tile._access import Cloner, Linear, lin_sum
from llmopt.passes.tile._attention_chain import Chain


@dataclass(frozen=True)
class HeadGroups:
    """Query heads grouped into blocks: ``dim`` is the chain's batch dimension of the query
    heads, ``size`` the number of heads of one group (``G``)."""

    dim: int
    size: int


def _independent(load: loop.LoadOp, subst: dict[SSAValue, Linear], row: tile.ForallOp
                 ) -> bool:
    """Whether ``load`` with ``subst`` applied no longer reads the group row (the second
    iv of the scratch forall ``row``)."""
    amap, operands = Cloner(subst).access(load.map.data, load.indices)
    if row.ivs[1] not in operands:
        return True
    dim = operands.index(row.ivs[1])
    return all(dim not in expr.used_dims() for expr in amap.results)


def _invariant(chain: Chain, k: int, size: int) -> bool:
    """Whether ``K`` and ``V`` read the same data for the ``size`` heads of a group of the
    batch dimension ``k`` (see the module docstring)."""
    extents = [lp.trip_count for lp in chain.exp.ivs]
    # Scratch ivs with the ranges the proof needs: (kvh, r), and d for V's head dimension.
    heads = tile.ForallOp([extents[k] // size, size], "blocks")
    roles_of = tile.ForallOp([*extents, chain.output.head_dim], "blocks").ivs
    head = Linear.of((size, heads.ivs[0]), (1, heads.ivs[1]))
    sc, out = chain.scores, chain.output
    if not _independent(sc.k, {sc.ivs[k].iv: head}, heads):
        return False
    subst: dict[SSAValue, Linear] = {}
    for iv, roles in out.roles.items():  # role n is d, the others batch… and the query
        subst[iv] = lin_sum(*((c, head if role == k else Linear.of((1, roles_of[role])))
                              for c, role in roles))
    return _independent(out.v, subst, heads)


def match_groups(chain: Chain, most: int) -> HeadGroups | None:
    """The grouping of ``chain``'s query heads (see the module docstring): only for a chain
    without a causal mask whose queries are one static query (a decode step); ``None``
    when no batch dimension groups by at least 2."""
    queries = chain.exp.ivs[-1]
    if chain.exp.causal or queries.bound is not None or queries.trip_count != 1:
        return None
    extents = [lp.trip_count for lp in chain.exp.ivs[:-1]]
    for k, extent in enumerate(extents):
        if extent < 2:
            continue
        for size in range(min(most, extent), 1, -1):
            if extent % size == 0 and _invariant(chain, k, size):
                return HeadGroups(k, size)
    return None
