"""What ``warp-gemv`` matches: a matrix-vector product in the row schedule (see
:mod:`llmopt.passes.tile.warp_gemv`), and the width its lanes can read it at."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects import arith
from xdsl.dialects.builtin import AnyFloat, MemRefType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.ir.affine import AffineDimExpr, AffineExpr

from llmopt.dialects import loop, tile
from llmopt.passes._ir import defined_inside

VECTOR_BYTES = 16
"""The width of one copy of a lane: a 128-bit global load."""
GEMV_ATTR = "llmopt.gemv"
"""Marks a kernel ``warp-gemv`` scheduled: ``{rows, vector}`` (it is not matched again)."""


@dataclass(frozen=True)
class Gemv:
    """A matched kernel: its forall over blocks, the row dimension and the reductions."""

    forall: tile.ForallOp
    row: int
    """The position of the row dimension among the forall's extents."""
    reduces: tuple[tile.CoopReduceOp, ...]
    once: tile.ForallOp
    """The last op of the forall: the store of the output by one thread."""
    vector: int
    """``V``: the elements a lane takes at once."""
    k: int
    prologue: tuple[Operation, ...] = ()
    """The leading ops the same for every output (a row's statistics): computed once a
    block, ahead of the lanes."""


def element_bytes(typ: Attribute) -> int:
    width = getattr(typ, "bitwidth", 0)
    return width // 8 if isinstance(width, int) else 0


def _innermost_is(load: loop.LoadOp, iv: SSAValue) -> bool:
    """Whether ``load``'s innermost index is exactly ``iv`` and no other index uses it."""
    amap = load.map.data
    uses = [k for k, v in enumerate(load.indices) if v is iv]
    last = amap.results[-1]
    if len(uses) != 1 or not (isinstance(last, AffineDimExpr) and last.position == uses[0]):
        return False
    return not any(uses[0] in _dims(e) for e in amap.results[:-1])


def _dims(expr: AffineExpr) -> set[int]:
    return set(expr.used_dims())


def _rows_of(load: loop.LoadOp, ivs: Sequence[SSAValue]) -> set[int]:
    """The positions among ``ivs`` (the forall's) that ``load``'s indices use."""
    amap = load.map.data
    used: set[int] = set()
    for expr in amap.results:
        used |= {k for k, v in enumerate(ivs) for d in _dims(expr) if load.indices[d] is v}
    return used


def _vector_fits(typ: Attribute, vector: int) -> bool:
    """Whether every row of the buffer ``typ`` starts at a multiple of ``vector`` elements
    (a contiguous layout with static rows of a multiple of it)."""
    if not isinstance(typ, MemRefType):
        return False
    shape = typ.get_shape()
    strides = typ.get_strides()
    return (bool(shape) and shape[-1] > 0 and shape[-1] % vector == 0
            and (strides is None or strides[-1] == 1))


def match_gemv(kernel: tile.KernelOp) -> Gemv | None:
    """The matrix-vector product in ``kernel`` (see the module docstring), or ``None``."""
    if GEMV_ATTR in kernel.attributes or kernel.grid_size is not None:
        return None
    if kernel.block_shape[1:] != (1, 1):
        return None
    top = [op for op in kernel.body.block.ops if not isinstance(op, arith.ConstantOp)]
    if len(top) != 1 or not isinstance(forall := top[0], tile.ForallOp):
        return None
    if forall.mapping.data != "blocks" or forall.runtime_sizes:
        return None
    ops = list(forall.body.block.ops)
    once = ops[-1] if ops else None
    if not (isinstance(once, tile.ForallOp) and once.mapping.data == "block_threads"
            and once.shape == (1,)):
        return None
    coops = [op for op in ops if isinstance(op, tile.CoopReduceOp)]
    if not coops or any(op.regions and op not in coops for op in ops[:-1]):
        return None
    ivs = forall.ivs
    prologue = _prologue(forall, ops)
    reduces = [op for op in coops if op not in prologue]
    if not reduces:
        return None
    rows: set[int] = set()
    widths: list[int] = []
    k = reduces[0].trip_count
    for red in reduces:
        if (red.kind.data != "add" or red.bound is not None or red.trip_count != k
                or not isinstance(red.result.type, AnyFloat)):
            return None  # warp-gemv sums floats (its partial sums start at 0.0)
        loads_rows: set[int] = set()
        for inner in red.body.block.ops:
            if inner.regions:
                return None
            for operand in inner.operands:
                if (not defined_inside(operand, red) and defined_inside(operand, forall)
                        and operand not in ivs and operand.owner not in prologue):
                    return None  # a value computed per output first: not a plain product
            if isinstance(inner, loop.LoadOp):
                if not _innermost_is(inner, red.iv):
                    return None
                widths.append(element_bytes(inner.result.type))
                loads_rows |= _rows_of(inner, ivs)
        row_dims = [d for d in loads_rows if forall.shape[d] > 1]
        if not row_dims:
            return None
        rows.add(max(row_dims))
    if len(rows) != 1 or not widths or min(widths) <= 0:
        return None
    vector = VECTOR_BYTES // min(widths)
    if k % vector:
        return None
    for red in reduces:
        for inner in red.body.block.ops:
            if isinstance(inner, loop.LoadOp) and not _vector_fits(inner.buffer.type, vector):
                return None
    return Gemv(forall, rows.pop(), tuple(reduces), once, vector, k, tuple(prologue))


def _prologue(forall: tile.ForallOp, ops: Sequence[Operation]) -> list[Operation]:
    """The leading ops of ``forall``'s body that are the same for every output, when they
    hold a cooperative reduction: reductions and region-less ops that use no forall
    variable and nothing computed per output (a row's statistics, which
    ``recompute-into-products`` puts beside a product). Empty when there is none."""
    ivs = set(forall.ivs)
    out: list[Operation] = []
    for op in ops:
        if op.regions and not isinstance(op, tile.CoopReduceOp):
            break
        if any(_varies(v, op, forall, ivs, out) for o in op.walk() for v in o.operands):
            break
        out.append(op)
    return out if any(isinstance(op, tile.CoopReduceOp) for op in out) else []


def _varies(value: SSAValue, op: Operation, forall: tile.ForallOp, ivs: set[SSAValue],
            uniform: list[Operation]) -> bool:
    """Whether ``value``, an operand in ``op``, may differ between the outputs of
    ``forall``: a forall variable, or computed in the forall (outside ``op``) by an op not
    in ``uniform``."""
    if value in ivs:
        return True
    if op.regions and defined_inside(value, op):
        return False
    return defined_inside(value, forall) and value.owner not in uniform
