"""A ``warp-gemv`` product's computed operand, staged in shared memory once a block.

A product whose vector operand is computed rather than loaded — a decode step's RMSNorm put
into its projections by ``recompute-into-products``, ``(x · rsqrt(…)) · g`` rounded to the
weights' type — would compute it for every weight element, that is once for each of the
block's ``R`` rows. Here the part of the reduction's body that does not depend on the row
(the *slice*: loads of ``x`` and ``g`` and the arithmetic on them, ending in the values the
row-dependent ops use, the *frontier*) runs once a block, ahead of the lanes::

    %xs = tile.alloc shared : memref<K×T>
    tile.forall (%k) in [K] over block_threads {
      <the slice at %k>
      loop.store %f, %xs[%k]                    // each frontier value
    }
    tile.forall (%w, %l) … { … tile.copy %xs[chunk] to %frag …   // 16 bytes, as a load's

and the lanes read ``%xs`` as they read a loaded operand. A frontier value that is a
16-bit value widened (``arith.extf`` of a ``truncf``) is staged 16-bit and widened again in
the lanes: half the shared memory, the same values. Reductions whose slices are the same
(a gate and an up projection of one normalised row) share one staged tile. A body whose
slice is only loads (and widenings of them) — an ordinary product — is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.dialects import arith
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Attribute, Block, Operation, SSAValue

from llmopt.dialects import loop, tile
from llmopt.passes.tile._access import Cloner, Linear, at, block_threads
from llmopt.passes.tile._gemv_match import Gemv, element_bytes

MAX_STAGED_BYTES = 48 * 1024
"""The most shared memory a block's staged operands may take together."""


@dataclass
class Staged:
    """A reduction's frontier values and where the lanes read them."""

    slice: set[Operation] = field(default_factory=set)
    """The body's ops that the staging forall runs instead of the lanes."""
    tiles: dict[SSAValue, tuple[SSAValue, bool]] = field(default_factory=dict)
    """Each frontier value → its shared tile and whether the lanes widen it to ``f32``."""


def _row_dependent(found: Gemv, red: tile.CoopReduceOp) -> set[Operation]:
    row_iv = found.forall.ivs[found.row]
    dep: set[Operation] = set()
    for op in red.body.block.ops:
        if ((isinstance(op, loop.LoadOp) and any(v is row_iv for v in op.indices))
                or any(operand.owner in dep for operand in op.operands)):
            dep.add(op)
    return dep


def _frontier(red: tile.CoopReduceOp, dep: set[Operation]) -> list[SSAValue]:
    """The values of the body's row-independent ops that row-dependent ops use and that
    vary with ``k`` (a constant left in the body is no operand to stage)."""
    body = red.body.block
    varying: set[Operation] = set()
    for op in body.ops:
        if any(v is red.iv or v.owner in varying for v in op.operands):
            varying.add(op)
    seen: list[SSAValue] = []
    for op in body.ops:
        if op not in dep:
            continue
        for operand in op.operands:
            owner = operand.owner
            if (owner in varying and owner not in dep and operand not in seen):
                seen.append(operand)
    return seen


def _slice(values: list[SSAValue], body: Block) -> list[Operation]:
    """The body's ops that compute ``values``, in body order."""
    needed: set[Operation] = set()
    stack = [v.owner for v in values if isinstance(v.owner, Operation)]
    while stack:
        op = stack.pop()
        if op in needed or op.parent_block() is not body:
            continue
        needed.add(op)
        stack += [v.owner for v in op.operands if isinstance(v.owner, Operation)]
    return [op for op in body.ops if op in needed]


def _signature(ops: list[Operation], frontier: list[SSAValue], iv: SSAValue) -> tuple:
    """A structural key of a slice: equal for two reductions' slices that compute the same
    values from the same buffers (their own induction variables aside)."""
    where = {res: (k, j) for k, op in enumerate(ops) for j, res in enumerate(op.results)}

    def ref(value: SSAValue) -> object:
        return "iv" if value is iv else where.get(value, ("outer", id(value)))

    return (tuple((op.name, str(op.properties), tuple(ref(v) for v in op.operands))
                  for op in ops), tuple(ref(v) for v in frontier))


def _tile_value(value: SSAValue, cut: set[Operation]) -> tuple[SSAValue, bool]:
    """What to stage for the frontier value ``value``: its 16-bit source when it is a
    widening of a value the slice computes (not a plain load), else itself."""
    owner = value.owner
    if isinstance(owner, arith.ExtFOp) and owner.input.owner in cut and not isinstance(
            owner.input.owner, loop.LoadOp):
        return owner.input, True
    return value, False


def stage_operands(found: Gemv, values: dict[SSAValue, SSAValue], body: Block
                   ) -> dict[tile.CoopReduceOp, Staged]:
    """Stage the computed operands of ``found``'s reductions (see the module docstring):
    the shared tiles and the forall that fills them are appended to ``body`` (the block's
    body, after its prologue); returns what each reduction's lanes read instead."""
    plans: list[tuple[tile.CoopReduceOp, list[Operation], dict[SSAValue, tuple[SSAValue, bool]],
                      tuple]] = []
    for red in found.reduces:
        dep = _row_dependent(found, red)
        frontier = _frontier(red, dep)
        ops = _slice(frontier, red.body.block)
        if not frontier or all(isinstance(op, loop.LoadOp | arith.ExtFOp) for op in ops):
            continue
        cut = set(ops)
        sources = {value: _tile_value(value, cut) for value in frontier}
        plans.append((red, ops, sources, _signature(ops, frontier, red.iv)))
    if not plans:
        return {}
    total = sum(found.k * element_bytes(source.type)
                for _, _, sources, _ in plans for source, _ in sources.values())
    if total > MAX_STAGED_BYTES:
        return {}
    fill, (k,) = block_threads([found.k], ["k"])
    result: dict[tile.CoopReduceOp, Staged] = {}
    done: dict[tuple, Staged] = {}
    for red, ops, sources, key in plans:
        if key in done:  # the same slice as an earlier reduction: its tiles, by position
            first = done[key]
            result[red] = Staged(set(ops), dict(zip(sources, first.tiles.values(),
                                                    strict=True)))
            continue
        staged = Staged(set(ops))
        cloner = Cloner({red.iv: Linear.of((1, k))}, dict(values))
        for op in ops:
            cloner.clone_into(op, fill.body.block)
        for value, (source, widen) in sources.items():
            typ: Attribute = source.type
            xs = tile.AllocOp("shared", MemRefType(typ, [found.k]))
            xs.result.name_hint = "xs"
            body.add_op(xs)
            fill.body.block.add_op(loop.StoreOp(cloner.value(source, fill.body.block),
                                                xs.result, *at([Linear.of((1, k))])))
            staged.tiles[value] = (xs.result, widen)
        done[key] = result[red] = staged
    body.add_op(fill)
    return result
