"""What ``fuse-kernels`` asks of the IR before it fuses (see
:mod:`llmopt.passes.loop.fuse_kernels`): a kernel taken apart as a :class:`Producer`, whether
a load site may take its computation (:func:`site_is_legal`), and which buffers and loads a
kernel binds, writes and reads. Nothing here changes the IR.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from xdsl.dialects import memref
from xdsl.dialects.builtin import IndexType
from xdsl.ir import Block, Operation, SSAValue
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
)

from llmopt.dialects import loop
from llmopt.passes._ir import nested_ops

LoopOp = loop.ForOp | loop.ReduceOp
"""The loops of a kernel body: free and reduction loops."""


# --- affine helpers ---------------------------------------------------------------------------

def rebuild(expr: AffineExpr) -> AffineExpr:
    """Rebuild ``expr`` through xDSL's operators, which fold constants and unit factors."""
    if isinstance(expr, AffineBinaryOpExpr):
        lhs, rhs = rebuild(expr.lhs), rebuild(expr.rhs)
        if expr.kind == AffineBinaryOpKind.Add:
            return lhs + rhs
        if expr.kind == AffineBinaryOpKind.Mul:
            return lhs * rhs
        if expr.kind == AffineBinaryOpKind.FloorDiv:
            return lhs // rhs
        if expr.kind == AffineBinaryOpKind.Mod:
            return lhs % rhs
        return AffineExpr.binary(expr.kind, lhs, rhs)
    return expr


def used_dims(expr: AffineExpr) -> set[int]:
    """The positions of the dims ``expr`` mentions."""
    if isinstance(expr, AffineDimExpr):
        return {expr.position}
    if isinstance(expr, AffineBinaryOpExpr):
        return used_dims(expr.lhs) | used_dims(expr.rhs)
    return set()


# --- producers --------------------------------------------------------------------------------

@dataclass
class Producer:
    """A kernel that fills one buffer point by point from a perfect free nest."""

    kernel: loop.KernelOp
    out_arg: SSAValue
    #: nest induction variable -> the coordinate of the stored buffer it indexes
    coord_of: dict[SSAValue, int]
    #: the ops computing the stored value (the innermost nest body without its store)
    body: list[Operation]
    store: loop.StoreOp
    has_reduce: bool
    #: reduction iterations per stored value (the largest product of nested reduce extents)
    reduce_work: int = 0


def is_copy(producer: Producer) -> bool:
    """Whether ``producer`` only moves values: its stored value is one load (a reshape,
    transpose or broadcast of another buffer). Inlined into several consumers it makes
    them read that buffer, and nothing is computed twice."""
    return (len(producer.body) >= 1 and isinstance(producer.body[-1], loop.LoadOp)
            and producer.store.value is producer.body[-1].result
            and all(isinstance(op, loop.LoadOp) or op.name.startswith("arith.")
                    and all(isinstance(r.type, IndexType) for r in op.results)
                    for op in producer.body))


def is_permutation(producer: Producer) -> bool:
    """Whether ``producer`` is a copy whose one load reads each point of its nest once, at
    the nest's coordinates in another order (a transpose, or a reshape that only adds or
    drops dims of extent 1): each index of the load is one induction variable of the nest,
    each used once, or a constant. Inlined at a load site, the site stays one load of a
    plain buffer, its indices loop variables: what a product's schedule matches."""
    if not is_copy(producer) or len(producer.body) != 1:
        return False
    load = producer.body[0]
    assert isinstance(load, loop.LoadOp)
    seen: list[SSAValue] = []
    for expr in load.map.data.results:
        if isinstance(expr, AffineDimExpr):
            iv = load.indices[expr.position]
            if iv not in producer.coord_of or iv in seen:
                return False
            seen.append(iv)
        elif not isinstance(expr, AffineConstantExpr):
            return False
    return len(seen) == len(producer.coord_of)


def stores_of(kernel: loop.KernelOp) -> list[loop.StoreOp]:
    """The ``loop.store`` ops in ``kernel``, in walk order."""
    return [op for op in nested_ops(kernel) if isinstance(op, loop.StoreOp)]


def written_args(kernel: loop.KernelOp) -> set[SSAValue]:
    """The block arguments of ``kernel`` that it stores to."""
    return {st.buffer for st in stores_of(kernel)}


def _scalar_prefix(block: Block) -> list[Operation]:
    """The ``arith`` ops in front of the loop nest that is ``block``'s last op (a kernel's
    scalars: a position cast to ``f32``, a constant), which the nest's body may use; empty
    when anything else is there."""
    ops = list(block.ops)
    if len(ops) < 2 or not isinstance(ops[-1], loop.ForOp):
        return []
    head = ops[:-1]
    return head if all(op.name.startswith("arith.") and not op.regions for op in head) else []


def analyse_producer(kernel: loop.KernelOp) -> Producer | None:
    """Recognise ``for i0 { for i1 { ...; store %v, %out[i0, 0, i1] } }``, else ``None``.
    Scalar ``arith`` ops in front of the nest (:func:`_scalar_prefix`) count as the first ops
    of the body: fused, they are recomputed where the value is used."""
    stores = stores_of(kernel)
    if len(stores) != 1:
        return None
    block = kernel.body.block
    prefix = _scalar_prefix(block)
    ivs: list[SSAValue] = []
    while (prefix and block is kernel.body.block
           or len(block.ops) == 1 and isinstance(block.first_op, loop.ForOp)):
        nest = block.last_op
        assert isinstance(nest, loop.ForOp)
        ivs.append(nest.iv)
        block = nest.body.block
    store = block.last_op
    if store is not stores[0] or not isinstance(store, loop.StoreOp):
        return None
    coord_of: dict[SSAValue, int] = {}
    for j, expr in enumerate(store.map.data.results):
        if isinstance(expr, AffineDimExpr):
            iv = store.indices[expr.position]
            if iv not in ivs or iv in coord_of:
                return None
            coord_of[iv] = j
        elif not (isinstance(expr, AffineConstantExpr) and expr.value == 0
                  and store.buffer.type.get_shape()[j] == 1):  # type: ignore[attr-defined]
            return None
    if set(coord_of) != set(ivs):
        return None
    body = [*prefix, *list(block.ops)[:-1]]
    work = 0
    for op in nested_ops(kernel):
        if isinstance(op, loop.ReduceOp):
            nest, parent = 1, op
            while isinstance(parent, Operation) and parent is not kernel:
                if isinstance(parent, loop.ReduceOp):
                    nest *= parent.trip_count
                parent = parent.parent_op()
            work = max(work, nest)
    return Producer(kernel, store.buffer, coord_of, body, store, work > 0, work)


# --- load sites -------------------------------------------------------------------------------

def enclosing_loops(op: Operation, kernel: loop.KernelOp) -> list[LoopOp]:
    """Loops around ``op`` inside ``kernel``, outermost first."""
    out: list[LoopOp] = []
    parent = op.parent_op()
    while parent is not None and parent is not kernel:
        if isinstance(parent, LoopOp):
            out.append(parent)
        parent = parent.parent_op()
    return out[::-1]


def index_dependencies(value: SSAValue, kernel: loop.KernelOp) -> set[SSAValue]:
    """The loop ivs an index operand may vary with: itself for an iv, else the ivs of every
    loop around the op defining it (conservative: the value may depend on any of them)."""
    owner = value.owner
    if isinstance(owner, Block):
        parent = owner.parent_op()
        if isinstance(parent, LoopOp) and value is parent.iv:
            return {value}
        return set()
    return {lp.iv for lp in enclosing_loops(owner, kernel)}


INJECTIVITY_PROBE = 64
"""How many consecutive values of a loop's iv :func:`distinguishes` tries."""


def distinguishes(load: loop.LoadOp, iv: SSAValue, extent: int) -> bool:
    """Whether the load's coordinates differ for consecutive values of ``iv`` (the other
    index operands held at 0, over the first :data:`INJECTIVITY_PROBE` values): an iv read
    only through ``floordiv`` (a flattened ``head * 16 + f`` read as ``head``) does not."""
    positions = tuple(k for k, v in enumerate(load.indices) if v is iv)
    return _distinguishes(load.map.data, positions, len(load.indices),
                          min(extent, INJECTIVITY_PROBE))


@functools.lru_cache(maxsize=4096)
def _distinguishes(amap: AffineMap, positions: tuple[int, ...], arity: int, probe: int
                   ) -> bool:
    """:func:`distinguishes` for a map, the operand positions the iv fills, the operand
    count and the number of values tried. The answer depends on nothing else, and a model's
    layers ask the same question of the same maps over and over: it is cached."""
    seen: set[tuple[int, ...]] = set()
    for value in range(probe):
        operands = [value if k in positions else 0 for k in range(arity)]
        point = amap.eval(operands, [])
        if point in seen:
            return False
        seen.add(point)
    return True


def site_is_legal(load: loop.LoadOp, kernel: loop.KernelOp, producer: Producer) -> bool:
    """The suffix rule (see :mod:`llmopt.passes.loop.fuse_kernels`) and materialisable
    non-access uses of ivs.

    A loop counts as used by the site when its iv reaches the load's coordinates, or an
    index operand computed in the kernel may depend on it (:func:`index_dependencies`), or
    it runs once. A producer with reductions must moreover see every used loop's iterations
    as distinct points (:func:`distinguishes`): read through ``h = c floordiv 16`` it would
    be recomputed for each of the 16 values of ``c`` sharing one ``h``.
    """
    dims = set().union(*(used_dims(e) for e in load.map.data.results))
    used_values: set[SSAValue] = set()
    for d in dims:
        used_values |= index_dependencies(load.indices[d], kernel)
    loops = enclosing_loops(load, kernel)
    if producer.has_reduce and any(
        lp.trip_count > 1 and lp.iv in load.indices and not distinguishes(load, lp.iv,
                                                                           lp.trip_count)
        for lp in loops
    ):
        return False
    used = [lp.iv in used_values or lp.trip_count == 1 for lp in loops]
    last_used = max((k for k, u in enumerate(used) if u), default=-1)
    if not all(used[: last_used + 1]):
        return False
    # ivs used as plain values (e.g. compared by a concat select) need a dim or constant.
    for op in producer.body:
        for inner in op.walk():
            if isinstance(inner, loop.LoadOp | loop.StoreOp):
                continue
            for operand in inner.operands:
                if operand in producer.coord_of:
                    expr = load.map.data.results[producer.coord_of[operand]]
                    if not isinstance(expr, AffineDimExpr | AffineConstantExpr):
                        return False
    return True


DISJOINT_PROBE = 1 << 16
"""The most iterations :func:`reads_disjoint` enumerates for one load site."""


def _points(load: loop.LoadOp, kernel: loop.KernelOp) -> list[tuple[int, ...]] | None:
    """The coordinates ``load`` reads over the loops its indices use, one per iteration of
    them; ``None`` when an index is not the variable of a static loop around it, or there
    are more than :data:`DISJOINT_PROBE` iterations."""
    loops = {lp.iv: lp for lp in enclosing_loops(load, kernel)}
    ivs = list(dict.fromkeys(load.indices))
    if any(v not in loops or loops[v].is_dynamic for v in ivs):
        return None
    extents = [loops[v].trip_count for v in ivs]
    total = math.prod(extents)
    if total > DISJOINT_PROBE:
        return None
    amap = load.map.data
    points: list[tuple[int, ...]] = []
    for flat in range(total):
        values: dict[SSAValue, int] = {}
        for v, e in zip(ivs, extents, strict=True):
            values[v] = flat % e
            flat //= e
        points.append(amap.eval([values[v] for v in load.indices], []))
    return points


def reads_disjoint(loads: list[loop.LoadOp], kernel: loop.KernelOp) -> bool:
    """Whether the ``loads`` of one producer's buffer in ``kernel`` read every point at most
    once, loads that are one access (the same map and indices in one block, which
    :func:`~llmopt.passes.loop._fuse_rewrite.merge_identical` makes one computation)
    counted once: inlined at each, the producer computes no value twice. The two halves of
    a rotary embedding split by ``index-set-split`` read so."""
    seen: set[tuple[int, ...]] = set()
    accesses: set[tuple[object, ...]] = set()
    for load in loads:
        key = (load.parent, load.map.data, tuple(load.indices))
        if key in accesses:
            continue
        accesses.add(key)
        points = _points(load, kernel)
        if points is None or len(set(points)) < len(points) or seen.intersection(points):
            return False
        seen.update(points)
    return True


# --- buffer bindings --------------------------------------------------------------------------

def temporary_output(kernel: loop.KernelOp, out_arg: SSAValue, returned: set[SSAValue]
                     ) -> SSAValue | None:
    """The function-level buffer bound to ``kernel``'s ``out_arg`` when it is a temporary
    (a ``memref.alloc`` of the function, not among the ``returned`` values), else ``None``."""
    buffer = kernel.buffers[list(kernel.body.block.args).index(out_arg)]
    if not isinstance(buffer.owner, memref.AllocOp) or buffer in returned:
        return None
    return buffer


def loads_of(kernel: loop.KernelOp, outer: SSAValue) -> list[loop.LoadOp]:
    """The ``loop.load`` ops of ``kernel`` reading function-level buffer ``outer``."""
    args = [a for a, b in zip(kernel.body.block.args, kernel.buffers, strict=True) if b is outer]
    return [op for op in nested_ops(kernel)
            if isinstance(op, loop.LoadOp) and op.buffer in args]
