"""The matcher of ``vector-fragments`` (:mod:`llmopt.passes.tile.vector_fragments`): which
``loop.load`` of a shared tile in a chunk loop can be read through a register
:class:`Fragment`, ``V`` aligned consecutive elements at a time, and the loops its indices
use."""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.dialects import scf
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Operation, SSAValue
from xdsl.ir.affine import AffineConstantExpr, AffineDimExpr, AffineExpr

from llmopt.dialects import loop, tile
from llmopt.passes._ir import defined_inside


def _uses(expr: AffineExpr, position: int) -> bool:
    """Whether ``expr`` mentions dimension ``position``."""
    if isinstance(expr, AffineDimExpr):
        return expr.position == position
    if isinstance(expr, AffineConstantExpr):
        return False
    return any(_uses(e, position) for e in (expr.lhs, expr.rhs))  # type: ignore[attr-defined]


def _shared(buffer: SSAValue) -> MemRefType | None:
    """The type of a ``tile.alloc shared`` buffer (``None`` for any other buffer)."""
    owner = buffer.owner
    if isinstance(owner, tile.AllocOp) and owner.space.data == "shared":
        typ = owner.result.type
        assert isinstance(typ, MemRefType)
        return typ
    return None


@dataclass
class Fragment:
    """The registers of one vectorizable load: its tile, indices and the loops they use."""

    load: loop.LoadOp
    loops: list[loop.ForOp]
    """The ``loop.for`` ops of the forall whose induction variables the indices use,
    outermost first."""
    loads: list[loop.LoadOp] = field(default_factory=list)
    """Every load reading these registers (identical accesses share them)."""

    def key(self) -> tuple[object, ...]:
        """Identical loads (same tile, map and indices) share one fragment."""
        return (self.load.buffer, self.load.map.data, tuple(self.load.indices))


def vectorizable(load: loop.LoadOp, chunk: scf.ForOp, forall: tile.ForallOp, width: int
                  ) -> Fragment | None:
    """The fragment of ``load`` if it reads ``width`` aligned consecutive elements of a shared
    tile along the ``chunk`` loop's index (see
    :mod:`llmopt.passes.tile.vector_fragments`), else ``None``. Its copy runs
    before the chunk loop's own index arithmetic, so an index computed in the chunk loop
    (other than the loops around the load) disqualifies it."""
    kk = chunk.body.block.args[0]
    typ = _shared(load.buffer)
    if typ is None:
        return None
    amap = load.map.data
    positions = [p for p, v in enumerate(load.indices) if v is kk]
    last = amap.results[-1]
    if not (isinstance(last, AffineDimExpr) and last.position in positions):
        return None
    if any(_uses(e, p) for e in amap.results[:-1] for p in positions):
        return None
    strides, offset = typ.get_strides(), typ.get_offset()
    if strides is None or not isinstance(offset, int) or strides[-1] != 1:
        return None
    if offset % width or any(s is None or s % width for s in strides[:-1]):
        return None
    ancestors: dict[SSAValue, loop.ForOp] = {}
    parent = load.parent_op()
    while parent is not None and parent is not forall:
        if isinstance(parent, loop.ForOp):
            ancestors[parent.body.block.args[0]] = parent
        elif not isinstance(parent, loop.ReduceOp):
            return None
        parent = parent.parent_op()
    loops: list[loop.ForOp] = []
    for value in load.indices:
        if value is kk or any(value is iv for iv in forall.ivs):
            continue
        if value in ancestors:
            if ancestors[value] not in loops:
                loops.append(ancestors[value])
        elif defined_inside(value, chunk):
            return None  # computed in the chunk loop: not a plain loop index
    depth = {op: _depth(op) for op in loops}
    loops.sort(key=lambda op: depth[op])
    return Fragment(load, loops)


def _depth(op: Operation) -> int:
    """How many ops enclose ``op``."""
    n = 0
    parent = op.parent_op()
    while parent is not None:
        n += 1
        parent = parent.parent_op()
    return n
