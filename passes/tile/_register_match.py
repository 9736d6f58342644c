"""The matcher of ``register-tile`` (:mod:`llmopt.passes.tile.register_tile`): the
:class:`Contraction` a matrix-product kernel holds (its forall, its reductions, their
prologue, the ``m`` and ``n`` band dimensions, a runtime ``m``), the schedule the heuristics
choose for it, the types of its factors and the periods its block tile must divide."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TypeGuard

from xdsl.dialects import arith
from xdsl.dialects.builtin import AnyFloat
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineExpr,
)
from xdsl.traits import is_side_effect_free

from llmopt.dialects import loop, tile
from llmopt.passes.tile._schedule import PRODUCER_ROLES
from llmopt.passes.tile._schedule_product import ProductSchedule, choose_product_schedule
from llmopt.passes.tile._schedule_tiles import HALF_KINDS, tensor_core_kind
from llmopt.target import WGMMA_ARCH
from llmopt.target import for_arch as limits


@dataclass(frozen=True)
class Contraction:
    """A matched kernel: its forall, its reductions (one or more over the same K, e.g. the
    gate and up projections of a fused ``silu(x·Wg) · (x·Wu)``), the forall-body ops the
    reductions read (the *prologue*, recomputed per K step) and the roles of the band
    dimensions."""

    forall: tile.ForallOp
    reduces: tuple[loop.ReduceOp, ...]
    prologue: tuple[Operation, ...]
    m: int
    n: int
    length: BlockArgument | None = None
    """The kernel's length parameter when ``m`` is that runtime extent."""

    @property
    def reduce(self) -> loop.ReduceOp:
        """The first reduction (all share the trip count and the type)."""
        return self.reduces[0]

    @property
    def extents(self) -> tuple[int, ...]:
        """The extents of the forall over threads."""
        return self.forall.shape

    @property
    def batch(self) -> list[int]:
        """The batch dimensions: those that are neither ``m`` nor ``n``."""
        return [d for d in range(len(self.extents)) if d not in (self.m, self.n)]


def _plain(op: Operation) -> bool:
    """A region-less load, store or side-effect-free op."""
    return not op.regions and (isinstance(op, loop.LoadOp | loop.StoreOp)
                               or is_side_effect_free(op))


def match_contraction(kernel: tile.KernelOp) -> Contraction | None:
    """The contraction in ``kernel`` (see :mod:`llmopt.passes.tile.register_tile`), or
    ``None``."""
    foralls = [op for op in kernel.body.block.ops if isinstance(op, tile.ForallOp)]
    others = [op for op in kernel.body.block.ops if not isinstance(op, tile.ForallOp)]
    if len(foralls) != 1 or foralls[0].mapping.data != "threads":
        return None
    if not all(is_side_effect_free(op) and not op.regions for op in others):
        return None
    forall = foralls[0]
    body = list(forall.body.block.ops)
    reduces = [op for op in body if isinstance(op, loop.ReduceOp)]
    if not reduces:
        return None
    first = reduces[0]
    for red in reduces:
        if (red.kind.data != "add" or not isinstance(red.result.type, AnyFloat)
                or red.trip_count != first.trip_count or red.result.type != first.result.type):
            return None
    if not all(_plain(op) for op in body if not isinstance(op, loop.ReduceOp)):
        return None
    written = {op.buffer for op in body if isinstance(op, loop.StoreOp)}
    outside: set[SSAValue] = set()
    for red in reduces:
        body_ops = list(red.body.block.ops)
        if not all(_plain(op) and not isinstance(op, loop.StoreOp) for op in body_ops[:-1]):
            return None
        k = red.body.block.args[0]
        k_loads: set[SSAValue] = set()
        for op in body_ops:
            if isinstance(op, loop.LoadOp):
                if op.buffer in written:
                    return None
                if k in op.indices:
                    k_loads.add(op.buffer)
        if len(k_loads) < 2:
            return None  # a plain sum (no operand reuse to gain from a register tile)
        inside = {r for op in body_ops for r in op.results} | {k}
        outside |= {v for op in body_ops for v in op.operands if v not in inside}
    # Values from outside the reductions: ivs, kernel values, or a prologue of plain
    # forall-body ops that depend on no reduction.
    kernel_values = set(kernel.body.block.args) | {r for op in others for r in op.results}
    prologue: set[Operation] = set()
    todo = list(outside)
    while todo:
        v = todo.pop()
        if v in kernel_values or v in forall.ivs:
            continue
        owner = v.owner
        if not isinstance(owner, Operation) or owner.parent is not forall.body.block:
            return None
        if isinstance(owner, loop.ReduceOp | loop.StoreOp):
            return None
        if isinstance(owner, loop.LoadOp) and owner.buffer in written:
            return None  # recomputed in the K loop, it would run before the store
        if owner not in prologue:
            prologue.add(owner)
            todo.extend(owner.operands)
    extents = forall.shape
    big = [d for d, e in enumerate(extents) if e > 1]
    if len(big) < 2:
        return None
    ordered = tuple(op for op in body if op in prologue)
    found = Contraction(forall, tuple(reduces), ordered, big[-2], big[-1])
    if not kernel.has_runtime_extents:
        return found
    return _with_runtime_rows(kernel, found)


def _with_runtime_rows(kernel: tile.KernelOp, found: Contraction) -> Contraction | None:
    """``found`` with its runtime ``m`` extent, when that is the kernel's only runtime
    extent and a parameter of the kernel (see *Runtime rows*); else ``None``."""
    sizes = found.forall.runtime_sizes
    length = sizes.get(found.m)
    if (set(sizes) != {found.m} or not isinstance(length, BlockArgument)
            or length.block is not kernel.body.block):
        return None
    if any(red.is_dynamic for red in found.reduces):
        return None  # a reduction over the length
    return replace(found, length=length)


def contraction_schedule(found: Contraction, arch: str, rows: int = 0, roles: int = 0
                         ) -> ProductSchedule | None:
    """What the heuristics choose for ``found`` on ``arch``
    (:func:`~llmopt.passes.tile._schedule.choose_product_schedule` of its shape, its
    accesses' periods and whether its sums may use the tensor cores), for at most ``rows``
    rows (0: its ``m`` extent, the maximum of runtime rows), as a product of ``roles`` roles
    (0: by default a 16-bit product on sm_90a is scheduled as one of two,
    since ``async-copy`` gives it a producer warpgroup:
    :func:`~llmopt.passes.tile._schedule.default_roles`)."""
    ext = found.extents
    kind = tensor_core_kind(arch, found.reduce.result.type, factor_types(found))
    halves = kind in HALF_KINDS
    if not roles:
        roles = PRODUCER_ROLES if halves and arch == WGMMA_ARCH else 1
    return choose_product_schedule(rows or ext[found.m], ext[found.n],
                                   found.reduce.trip_count,
                                   math.prod(ext[d] for d in found.batch), limits(arch),
                                   len(found.reduces), tile_periods(found),
                                   kind is not None, halves, roles)


def factor_types(found: Contraction) -> list[Attribute]:
    """The types the factors of ``found``'s products are loaded as: a load's element type,
    seen through an ``arith.extf`` (a ``bf16`` weight widened to ``f32``)."""
    types: list[Attribute] = []
    for red in found.reduces:
        for op in red.body.walk():
            if isinstance(op, arith.MulfOp):
                for factor in (op.lhs, op.rhs):
                    owner = factor.owner
                    if isinstance(owner, arith.ExtFOp):
                        factor = owner.input
                    types.append(factor.type)
    return types


def tile_periods(found: Contraction) -> tuple[int, int]:
    """What the block tile's ``bm`` and ``bn`` must divide (0: anything): the greatest common
    divisor of every ``c`` in an ``e floordiv c`` or ``e mod c`` of the kernel's accesses
    whose ``e`` holds the ``m`` (``n``) index. Attention's ``P·V`` written as ``[seq, heads ·
    head_dim]`` reads ``V[j floordiv 128, k, j mod 128]``: a block 112 wide would straddle
    two heads, its accesses would no longer be linear in the block's indices, and
    ``stage-inputs`` could not stage them."""
    ivs = {found.forall.ivs[found.m]: 0, found.forall.ivs[found.n]: 1}
    periods = [0, 0]
    for op in found.forall.walk():
        if not isinstance(op, loop.LoadOp | loop.StoreOp):
            continue
        for result in op.map.data.results:
            for expr in result.dfs():
                # only the innermost: ``(j floordiv 64) floordiv 8`` is constant in a block
                # wherever ``j floordiv 64`` is
                if _div_or_mod(expr) and not any(_div_or_mod(e) for e in expr.lhs.dfs()):
                    for d in expr.lhs.used_dims():
                        which = ivs.get(op.indices[d])
                        if which is not None:
                            periods[which] = math.gcd(periods[which], expr.rhs.value)
    return periods[0], periods[1]


def _div_or_mod(expr: AffineExpr) -> TypeGuard[AffineBinaryOpExpr]:
    """Whether ``expr`` is ``e floordiv c``, ``e ceildiv c`` or ``e mod c`` (``c``
    constant)."""
    return (isinstance(expr, AffineBinaryOpExpr)
            and expr.kind in (AffineBinaryOpKind.FloorDiv, AffineBinaryOpKind.Mod,
                              AffineBinaryOpKind.CeilDiv)
            and isinstance(expr.rhs, AffineConstantExpr))
