"""Stage fills that are whole boxes: what ``warp-specialize{tensor_copies=1}`` turns into one
``tma.load`` each (see :mod:`llmopt.passes.kernel.warp_specialize`).

A K loop's copies, as ``tile-to-kernel`` leaves a stage fill, are loop nests in which each of
the block's threads issues ``kernel.async_copy`` ops of ``count`` elements::

    scf.for %round = 0 to 4 {
      %flat = %round * 256 + %tid
      %c1 = %flat mod 8
      %c0 = %flat / 8
      kernel.async_copy %x[0, min(%c0 + %bm * 128, 199), %fetch * 64 + %c1 * 8]
          to %stage[%fill_slot, %c0, %c1 * 8] count 8
    } {llmopt.role = "stage"}

A tile whose chunks are not a whole number of rounds of the block is copied in a loop
strided by it instead (``scf.for %p = %tid to 1408 step 256``); its lower bound is
evaluated for each thread.

Such a nest is a box copy when

* the ``dst`` indices are the slot (values from outside the nest) followed by one index per
  dimension of the tile ``T`` (``dst``'s trailing dimensions), and over every thread and
  iteration of the nest those indices take each position of ``T`` (the last one in steps of
  ``count``) exactly once — checked by evaluating them;
* each ``src`` index is, as a sum of multiples of values, the tile index of one dimension
  of ``T`` plus terms from outside the nest (the box's corner), or terms from outside only
  (a dimension the box has extent 1 in); the dimensions of ``T`` appear in order, in the
  last dimensions of ``src``. An index may be clamped into the source (``minsi(i, extent -
  1)``, the rows of a ragged edge; for a runtime extent ``minsi(i, n - 1)`` with ``n`` a
  length parameter of the kernel): the box's elements past the source's end are then read
  as zeros instead of the last row again, which only rows of outputs the kernel never
  stores read;
* the copy is one the tensor memory accelerator can make: ``src`` a contiguous kernel
  argument of rank at most 5 whose rows are multiples of 16 bytes, ``dst`` unpadded, swizzled
  only with 128-byte rows (:class:`llmopt.dialects.tma.LoadOp`).

Anything else keeps its ``cp.async`` copies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from math import prod

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, MemRefType, NoneAttr
from xdsl.ir import Block, BlockArgument, Operation, SSAValue

from llmopt.dialects import kernel, tma
from llmopt.dialects._syntax import constant_index
from llmopt.dialects.wgmma import swizzle
from llmopt.passes._ir import LinearIndex, defined_inside, linear_index
from llmopt.passes.kernel._warp_roles import pure

Linear = LinearIndex
"""An ``index`` value as ``constant + Σ coefficient · leaf``."""


@dataclass
class BoxCopy:
    """One stage fill as a box: the copy that issued it, the box's corner and the ``dst``
    indices of the slot it fills."""

    copy: kernel.AsyncCopyOp
    corner: list[Linear]
    """Per dimension of ``src``: the box's corner, the index less its tile index."""
    slot: list[SSAValue]
    threads: set[SSAValue]
    """The ``kernel.thread_id x`` values among the copies."""
    local: set[SSAValue]
    """Every value defined among the copies (nested ones included)."""

    @property
    def tile(self) -> tuple[int, ...]:
        """The extents of the tile the box fills (``dst``'s dimensions after the slot)."""
        typ = self.copy.dst.type
        assert isinstance(typ, MemRefType)
        return tuple(typ.get_shape()[len(self.slot):])

    @property
    def bytes(self) -> int:
        """The bytes the box moves."""
        return prod(self.tile) * tma.element_bytes(self.copy.dst.type)


_EVAL: dict[type[Operation], Callable[[int, int], int]] = {
    arith.AddiOp: lambda a, b: a + b, arith.SubiOp: lambda a, b: a - b,
    arith.MuliOp: lambda a, b: a * b, arith.DivUIOp: lambda a, b: a // b,
    arith.RemUIOp: lambda a, b: a % b, arith.MinSIOp: min, arith.MaxSIOp: max,
}


def evaluate(value: SSAValue, env: dict[SSAValue, int]) -> int | None:
    """``value`` for the given values of the nest's varying leaves; ``None`` when it
    depends on anything else."""
    if value in env:
        return env[value]
    known = constant_index(value)
    if known is not None:
        return known
    op = value.owner
    fn = _EVAL.get(type(op))
    if fn is None or not isinstance(op, Operation):
        return None
    a, b = (evaluate(v, env) for v in op.operands[:2])
    if a is None or b is None or (b == 0 and isinstance(op, arith.DivUIOp | arith.RemUIOp)):
        return None
    return fn(a, b)


def _loops(copy: Operation, top: Operation) -> list[scf.ForOp] | None:
    """The ``scf.for`` ops from ``top`` down to ``copy`` (constant upper bounds and steps;
    a lower bound may depend on the thread, as in a loop strided by the block, ``for p =
    tid; p < n; p += blockDim``), or ``None`` when something else encloses it."""
    chain: list[scf.ForOp] = []
    node = copy.parent_op()
    while node is not None:
        if not isinstance(node, scf.ForOp) or any(
                constant_index(v) is None for v in (node.ub, node.step)):
            return None
        chain.append(node)
        if node is top:
            return chain[::-1]
        node = node.parent_op()
    return None


def _src_ok(typ: MemRefType) -> bool:
    """Whether a tensor map can describe a kernel argument of type ``typ``: contiguous,
    rank at most 5, every row a multiple of 16 bytes."""
    shape = typ.get_shape()
    if not isinstance(typ.layout, NoneAttr) or len(shape) > tma.MAX_RANK:
        return False
    return shape[-1] * tma.element_bytes(typ) % 16 == 0


def _dst_ok(dst: SSAValue, tile: tuple[int, ...]) -> bool:
    """Whether a box may be written into ``dst``'s tiles of shape ``tile``."""
    owner = dst.owner
    if not isinstance(owner, kernel.SharedOp) or "llmopt.pad" in owner.attributes:
        return False
    row = tile[-1] * tma.element_bytes(dst.type)
    swz = swizzle(dst)
    return (all(t <= tma.MAX_BOX for t in tile) and row % 16 == 0
            and (swz is None or (swz == tma.SWIZZLE_ROW_BYTES and row == swz)))


def _places(loops: list[scf.ForOp], env: dict[SSAValue, int], index: list[SSAValue]
            ) -> Iterator[tuple[int, ...] | None]:
    """The ``index`` values over every iteration of ``loops`` (outermost first) for the
    leaves in ``env``, a loop's bounds evaluated there; ``None`` for a place or a loop's
    bounds that cannot be evaluated."""
    if not loops:
        at = tuple(v for v in (evaluate(i, env) for i in index) if v is not None)
        yield at if len(at) == len(index) else None
        return
    loop, *inner = loops
    lb, ub, step = (evaluate(v, env) for v in (loop.lb, loop.ub, loop.step))
    if lb is None or ub is None or not step:
        yield None
        return
    for iv in range(lb, ub, step):
        yield from _places(inner, env | {loop.body.block.args[0]: iv}, index)


def _covers(copy: kernel.AsyncCopyOp, loops: list[scf.ForOp], tid: set[SSAValue],
            threads: int, tile: tuple[int, ...]) -> bool:
    """Whether the nest's copies, over ``threads`` threads, write each place of the tile
    once (the innermost dimension in steps of ``count``)."""
    count = copy.elements
    index = list(copy.dst_indices)[-len(tile):]
    seen: set[tuple[int, ...]] = set()
    for thread in range(threads):
        for place in _places(loops, dict.fromkeys(tid, thread), index):
            if (place is None or place in seen or place[-1] % count
                    or any(not 0 <= a < t for a, t in zip(place, tile, strict=True))):
                return False
            seen.add(place)
    return len(seen) * count == prod(tile)


def _length_less_one(value: SSAValue) -> bool:
    """Whether ``value`` is ``n - 1`` for an ``index`` parameter ``n`` of the kernel (a
    runtime length)."""
    op = value.owner
    if not isinstance(op, arith.SubiOp) or constant_index(op.rhs) != 1:
        return False
    n = op.lhs
    return (isinstance(n, BlockArgument) and isinstance(n.type, IndexType)
            and isinstance(n.block.parent_op(), kernel.FuncOp))


def _clamp(value: SSAValue, extent: int) -> SSAValue:
    """``i`` for ``minsi(i, extent - 1)`` — for a runtime extent (``extent < 0``),
    ``minsi(i, n - 1)`` with ``n`` a length the kernel is passed, the clamp symbolic
    lowering gives the ragged edge of a runtime dimension, whose extent is that length —
    else ``value``."""
    op = value.owner
    if isinstance(op, arith.MinSIOp) and (
            constant_index(op.rhs) == extent - 1
            or (extent < 0 and _length_less_one(op.rhs))):
        return op.lhs
    return value


def box_copy(copy: kernel.AsyncCopyOp, top: Operation, threads: int,
             varying: Callable[[SSAValue], bool], tid: set[SSAValue]) -> BoxCopy | None:
    """``copy`` (issued in the nest ``top`` by ``threads`` threads) as a box, or ``None``."""
    src, dst = copy.src.type, copy.dst.type
    assert isinstance(src, MemRefType) and isinstance(dst, MemRefType)
    loops = _loops(copy, top)
    if (loops is None or not isinstance(copy.src, BlockArgument) or not _src_ok(src)
            or src.element_type != dst.element_type):
        return None
    dst_index = list(copy.dst_indices)
    slot = [v for v in dst_index if not varying(v)]
    if dst_index[:len(slot)] != slot or len(slot) == len(dst_index):
        return None
    tile = tuple(dst.get_shape()[len(slot):])
    if len(tile) > len(src.get_shape()) or not _dst_ok(copy.dst, tile):
        return None
    tile_index = [linear_index(v) for v in dst_index[len(slot):]]
    first = len(src.get_shape()) - len(tile)
    forms: list[Linear] = []
    for d, (value, extent) in enumerate(zip(copy.src_indices, src.get_shape(), strict=True)):
        c, terms = linear_index(_clamp(value, extent))
        k = d - first if d >= first else None
        if k is not None:
            tc, tt = tile_index[k]
            c -= tc
            for leaf, coeff in tt.items():
                terms[leaf] = terms.get(leaf, 0) - coeff
        if any(coeff and varying(leaf) for leaf, coeff in terms.items()):
            return None
        forms.append((c, {leaf: coeff for leaf, coeff in terms.items() if coeff}))
    if not _covers(copy, loops, tid, threads, tile):
        return None
    return BoxCopy(copy, forms, slot, tid, set())


def box_copies(copies: list[Operation], threads: int) -> list[BoxCopy] | None:
    """The K loop's ``copies`` (issued by ``threads`` threads) as boxes, one per
    ``kernel.async_copy``; ``None`` unless every one of them is a box and nothing else
    among them touches memory."""
    tid = {op.results[0] for c in copies for op in c.walk()
           if isinstance(op, kernel.ThreadIdOp) and op.dim.data == "x"}

    def varying(value: SSAValue) -> bool:
        """Whether ``value`` differs between the nest's threads or iterations."""
        if value in tid or any(defined_inside(value, c) for c in copies):
            return True
        owner = value.owner
        return owner in copies and any(varying(v) for v in owner.operands)

    local = {v for c in copies for op in c.walk() for v in op.results} | {
        a for c in copies for op in c.walk() for r in op.regions for b in r.blocks
        for a in b.args}
    boxes: list[BoxCopy] = []
    for top in copies:
        for op in top.walk():
            if isinstance(op, kernel.AsyncCopyOp):
                found = box_copy(op, top, threads, varying, tid)
                if found is None:
                    return None
                found.local = local
                boxes.append(found)
            elif not (pure(op) or isinstance(op, scf.ForOp | scf.YieldOp | kernel.ThreadIdOp)):
                return None
    return boxes or None


def corner(box: BoxCopy, outer: dict[SSAValue, SSAValue], block: Block) -> list[SSAValue]:
    """Ops appended to ``block`` computing the box's corner, the values from outside the
    copies mapped by ``outer`` (those defined among them, which do not vary, cloned)."""
    built: dict[SSAValue, SSAValue] = {}

    def build(value: SSAValue) -> SSAValue:
        if value not in built:
            op = value.owner
            if value in box.local and isinstance(op, Operation):
                clone = op.clone(value_mapper={v: build(v) for v in op.operands})
                block.add_op(clone)
                built[value] = clone.results[list(op.results).index(value)]
            else:
                built[value] = outer.get(value, value)
        return built[value]

    def add(op: Operation) -> SSAValue:
        block.add_op(op)
        return op.results[0]

    def const(c: int) -> SSAValue:
        return add(arith.ConstantOp(IntegerAttr(c, IndexType())))

    result: list[SSAValue] = []
    for c, terms in box.corner:
        total: SSAValue | None = const(c) if c or not terms else None
        for leaf, k in terms.items():
            term = build(leaf) if k == 1 else add(arith.MuliOp(build(leaf), const(k)))
            total = term if total is None else add(arith.AddiOp(total, term))
        assert total is not None
        result.append(total)
    return result
