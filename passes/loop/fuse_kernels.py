"""``fuse-kernels``: producer→consumer fusion of ``loop.kernel`` ops.

**Matches** a kernel *P* that fills a temporary buffer *T* (a ``memref.alloc`` of the
function that is not returned) with one store per point of a perfect free nest, and the
kernels that read *T*.

**Produces** the consumers with *P*'s computation inlined at each ``loop.load`` of *T*
(its indices composed through the load's affine map), then loop-invariant code hoisted
and identical computations merged; *P* and *T* disappear.

**Why** each intermediate that never reaches memory saves a write and a read of the whole
tensor and a launch: RMSNorm, softmax and ``silu(a) * b`` each become one kernel, and a
matmul (a broadcast product reduced over K) becomes one kernel with its epilogue.

Fusion never multiplies work. A load site is accepted only if the loops around it that
its indices do not use are all *inside* the loops they do use — the inlined computation
can then be hoisted out of the unused ones and runs once per distinct value. A producer
that contains a reduction is inlined only when it has a single consumer kernel and no two of
its load sites share a block (as the two halves of a rotate-half ``cat`` would: each site
would run the reduction again for the same iteration). Sites in different loops are
accepted when the reduction is short (at most ``recompute_limit`` iterations per value, 256
by default): a softmax's max, sum and normalise loops each recompute the attention scores
they read, but a long projection (an MLP's down projection) is not computed twice.

A producer with several consumer kernels is copied into each, so it must read only buffers
that no kernel writes (the function's inputs and weights): copying a producer that reads an
intermediate would chain the copies — a residual stream recomputed from every earlier layer
in every later one. A producer that only moves values (its stored value is a load: a
reshape, transpose or broadcast) is the exception to both rules when no consumer reduces:
inlined, each consumer reads the moved buffer itself and nothing is computed twice — a
decode step's rotary ``cos``/``sin`` rows, unsqueezed in every layer for two kernels each,
then cost no kernel. The operands of products and reductions stay as they were: the Tile-IR
product schedules (register tiles, ``flash-attention``) match loads of plain buffers.

Loops of extent 1 count as used (running once, they multiply nothing). An index operand
that is not an induction variable (a data-dependent coordinate, e.g. a token id loaded and
``arith.index_cast``; or any value computed in the kernel) is taken to use every loop
around the op that defines it: the value may vary with any of them.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Iterator
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import IndexType, MemRefType, ModuleOp
from xdsl.ir import Block, Operation, SSAValue
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
from xdsl.traits import MemoryWriteEffect

from llmopt.dialects import loop
from llmopt.passes._ir import nested_ops

LoopOp = loop.ForOp | loop.ReduceOp


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
    if isinstance(expr, AffineDimExpr):
        return {expr.position}
    if isinstance(expr, AffineBinaryOpExpr):
        return used_dims(expr.lhs) | used_dims(expr.rhs)
    return set()


# --- analysis ---------------------------------------------------------------------------------

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


def stores_of(kernel: loop.KernelOp) -> list[loop.StoreOp]:
    return [op for op in nested_ops(kernel) if isinstance(op, loop.StoreOp)]


def written_args(kernel: loop.KernelOp) -> set[SSAValue]:
    return {st.buffer for st in stores_of(kernel)}


def analyse_producer(kernel: loop.KernelOp) -> Producer | None:
    """Recognise ``for i0 { for i1 { ...; store %v, %out[i0, 0, i1] } }``, else ``None``."""
    stores = stores_of(kernel)
    if len(stores) != 1:
        return None
    block = kernel.body.block
    ivs: list[SSAValue] = []
    while len(block.ops) == 1 and isinstance(block.first_op, loop.ForOp):
        ivs.append(block.first_op.iv)
        block = block.first_op.body.block
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
    body = list(block.ops)[:-1]
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
    """The suffix rule (see module docstring) and materialisable non-access uses of ivs.

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


# --- rewriting --------------------------------------------------------------------------------

def bind_buffer(kernel: loop.KernelOp, outer: SSAValue) -> SSAValue:
    """The block argument of ``kernel`` bound to function-level buffer (or runtime extent)
    ``outer`` (added if new)."""
    return kernel.bind(outer)


def inline_at(load: loop.LoadOp, consumer: loop.KernelOp, producer: Producer) -> None:
    """Replace ``load`` (of the producer's buffer) by the producer's computation."""
    site = list(load.indices)
    site_map = load.map.data
    value_map: dict[SSAValue, SSAValue] = {}
    for arg, outer in zip(producer.kernel.body.block.args, producer.kernel.buffers, strict=True):
        if arg is not producer.out_arg:
            value_map[arg] = bind_buffer(consumer, outer)
    clones: list[Operation] = []
    for op in producer.body:
        clone = op.clone(value_map)
        Rewriter.insert_op(clone, InsertPoint.before(load))
        clones.append(clone)
    constants: dict[int, SSAValue] = {}
    for clone in clones:
        for inner in list(clone.walk()):
            if isinstance(inner, loop.LoadOp | loop.StoreOp):
                _compose_access(inner, producer, site, site_map)
                continue
            for k, operand in enumerate(inner.operands):
                if operand not in producer.coord_of:
                    continue
                expr = site_map.results[producer.coord_of[operand]]
                if isinstance(expr, AffineDimExpr):
                    inner.operands[k] = site[expr.position]
                else:
                    assert isinstance(expr, AffineConstantExpr)
                    if expr.value not in constants:
                        const = arith.ConstantOp.from_int_and_width(expr.value, IndexType())
                        Rewriter.insert_op(const, InsertPoint.before(clones[0]))
                        constants[expr.value] = const.result
                    inner.operands[k] = constants[expr.value]
    stored = producer.store.value
    load.result.replace_all_uses_with(value_map.get(stored, stored))
    Rewriter.erase_op(load)


def _compose_access(access: loop.LoadOp | loop.StoreOp, producer: Producer,
                    site: list[SSAValue], site_map: AffineMap) -> None:
    operands = list(site)
    new_dims: list[AffineExpr] = []
    for value in access.indices:
        if value in producer.coord_of:
            new_dims.append(site_map.results[producer.coord_of[value]])
        else:
            if value not in operands:
                operands.append(value)
            new_dims.append(AffineDimExpr(operands.index(value)))
    old = access.map.data
    results = tuple(rebuild(e.replace_dims_and_symbols(new_dims, ())) for e in old.results)
    # Drop operands the new map no longer mentions.
    keep = sorted(set().union(set(), *(used_dims(e) for e in results)))
    renumber = [AffineDimExpr(keep.index(d)) if d in keep else AffineConstantExpr(0)
                for d in range(len(operands))]
    results = tuple(e.replace_dims_and_symbols(renumber, ()) for e in results)
    access.map = access.map.__class__(AffineMap(len(keep), 0, results))
    fixed = 2 if isinstance(access, loop.StoreOp) else 1
    access.operands = [*access.operands[:fixed], *(operands[d] for d in keep)]


def _defined_inside(op: Operation) -> set[SSAValue]:
    values: set[SSAValue] = set()
    for inner in nested_ops(op):
        values.update(inner.results)
        for region in inner.regions:
            for block in region.blocks:
                values.update(block.args)
    return values


def _external_uses(op: Operation) -> Iterator[SSAValue]:
    if not op.regions:  # nothing is defined inside but the results
        for operand in op.operands:
            if operand not in op.results:
                yield operand
        return
    inside = _defined_inside(op)
    for inner in nested_ops(op):
        for operand in inner.operands:
            if operand not in inside:
                yield operand


def _pinned(kernel: loop.KernelOp) -> set[Operation]:
    """The ops of ``kernel`` that neither hoisting nor merging may move: those that store
    (an op with ``MemoryWriteEffect``) or read a buffer the kernel writes, and every op
    around them. Moving or erasing an op that is not pinned never pins another, so one
    walk serves a :func:`hoist_invariants` and the :func:`merge_identical` after it."""
    ops = nested_ops(kernel)
    written = {op.buffer for op in ops if isinstance(op, loop.StoreOp)}
    pinned: set[Operation] = set()
    for inner in ops:
        if inner.has_trait(MemoryWriteEffect) or (isinstance(inner, loop.LoadOp)
                                                  and inner.buffer in written):
            op: Operation | None = inner
            while op is not None and op is not kernel and op not in pinned:
                pinned.add(op)
                op = op.parent_op()
    return pinned


def hoist_invariants(kernel: loop.KernelOp, pinned: set[Operation] | None = None) -> None:
    """Move side-effect-free ops that use nothing defined in their loop out of that loop.

    Each round looks at every loop once, against what the loop defined when the round
    reached it (an op whose operand was hoisted earlier in the same round waits for the
    next round); rounds repeat until nothing moves. ``pinned``: :func:`_pinned`, when the
    caller has it."""
    if pinned is None:
        pinned = _pinned(kernel)
    changed = True
    while changed:
        changed = False
        for lp in [op for op in nested_ops(kernel) if isinstance(op, LoopOp)]:
            # What ``lp`` defined when this round reached it: what it holds now, and the
            # results of the ops moved out of it since.
            moved: set[SSAValue] = set()
            for op in list(lp.body.block.ops):
                if isinstance(op, loop.YieldOp) or op in pinned:
                    continue
                if any(v in moved or lp.is_ancestor(v.owner) for v in _external_uses(op)):
                    continue
                op.detach()
                Rewriter.insert_op(op, InsertPoint.before(lp))
                moved.update(op.results)
                changed = True


def merge_identical(kernel: loop.KernelOp, pinned: set[Operation] | None = None) -> None:
    """Within each block, replace an op by an earlier structurally identical read-only op.

    Identical ops have the same name and the very same operands: the earlier ops are
    looked up by those, in the order they were met. ``pinned``: :func:`_pinned`, when the
    caller has it."""
    if pinned is None:
        pinned = _pinned(kernel)
    for block in list(_blocks(kernel)):
        seen: dict[tuple[object, ...], list[Operation]] = {}
        for op in list(block.ops):
            if isinstance(op, loop.YieldOp) or not op.results or op in pinned:
                continue
            candidates = seen.setdefault((op.name, *op.operands), [])
            twin = next((s for s in candidates
                         if op.is_structurally_equivalent(s, {block: block})), None)
            if twin is None:
                candidates.append(op)
                continue
            for new, old in zip(twin.results, op.results, strict=True):
                old.replace_all_uses_with(new)
            Rewriter.erase_op(op)


def _tidy(kernel: loop.KernelOp) -> None:
    """:func:`hoist_invariants`, then :func:`merge_identical`, sharing one :func:`_pinned`."""
    pinned = _pinned(kernel)
    hoist_invariants(kernel, pinned)
    merge_identical(kernel, pinned)


def _blocks(op: Operation) -> Iterator[Block]:
    for inner in nested_ops(op):
        for region in inner.regions:
            yield from region.blocks


def fuse_function(fn: func.FuncOp, recompute_limit: int = 256) -> None:
    """Fuse producers into consumers in ``fn`` until nothing changes.

    Each step fuses the last fusable producer in program order. A kernel found unfusable is
    not examined again until something it depends on changes: its own body, or the kernels
    bound to the buffers it writes (see :func:`_fuse_one`).
    """
    block = fn.body.block
    # Fusion only erases kernels, so the initial positions keep ordering the survivors.
    stale = _Stale([op for op in block.ops if isinstance(op, loop.KernelOp)])
    returned = {v for op in block.ops if isinstance(op, func.ReturnOp) for v in op.operands}
    # Inlining adds loads, never stores: what each kernel writes is fixed during the pass.
    written: dict[loop.KernelOp, set[SSAValue]] = {}
    while _fuse_one(stale, stale.position, returned, written, recompute_limit):
        pass
    for kernel in [op for op in block.ops if isinstance(op, loop.KernelOp)]:
        _tidy(kernel)


def _written_by(kernel: loop.KernelOp, written: dict[loop.KernelOp, set[SSAValue]]
                ) -> set[SSAValue]:
    """:func:`_bound_written`, cached in ``written``."""
    if kernel not in written:
        written[kernel] = _bound_written(kernel)
    return written[kernel]


def _writers_of(buffers: set[SSAValue], written: dict[loop.KernelOp, set[SSAValue]]
                ) -> set[loop.KernelOp]:
    """The kernels that store to any of ``buffers`` (function-level values)."""
    out: set[loop.KernelOp] = set()
    for buffer in buffers:
        if not isinstance(buffer.type, MemRefType):
            continue  # an index (the length every kernel binds) is never written
        for use in buffer.uses:
            user = use.operation
            if isinstance(user, loop.KernelOp) and buffer in _written_by(user, written):
                out.add(user)
    return out


class _Stale:
    """The kernels whose fusion decision may have changed, handed out last first (in their
    initial program order). A heap keeps the order: sorting every candidate again for
    each fusion made the pass quadratic in a whole model's kernels."""

    def __init__(self, kernels: list[loop.KernelOp]) -> None:
        self.kernels = kernels
        self.position = {k: i for i, k in enumerate(kernels)}
        self.members = set(kernels)
        self.heap = [-i for i in range(len(kernels))]
        heapq.heapify(self.heap)

    def add(self, kernels: set[loop.KernelOp]) -> None:
        """Mark ``kernels`` stale (again)."""
        for kernel in kernels:
            if kernel not in self.members:
                self.members.add(kernel)
                heapq.heappush(self.heap, -self.position[kernel])

    def pop(self) -> loop.KernelOp | None:
        """The last stale kernel in program order, no longer stale; ``None`` if none is."""
        while self.heap:
            kernel = self.kernels[-heapq.heappop(self.heap)]
            if kernel in self.members:
                self.members.discard(kernel)
                return kernel
        return None


def _fuse_one(stale: _Stale, position: dict[loop.KernelOp, int],
              returned: set[SSAValue], written: dict[loop.KernelOp, set[SSAValue]],
              recompute_limit: int = 256) -> bool:
    """Fuse the last fusable producer among the ``stale`` kernels (those whose decision may
    have changed); drop the ones found unfusable from ``stale`` and mark the kernels a
    fusion affects: the consumers (new bodies) and the writers of every buffer bound to the
    producer or the consumers (new consumer sites, or one consumer fewer)."""
    while (producer_kernel := stale.pop()) is not None:
        producer = analyse_producer(producer_kernel)
        if producer is None:
            continue
        buffer = temporary_output(producer_kernel, producer.out_arg, returned)
        if buffer is None:
            continue
        # The kernels bound to the buffer, in program order (found through its uses: walking
        # every kernel for every candidate would make the pass cubic in the kernel count).
        bound = {use.operation for use in buffer.uses if isinstance(use.operation, loop.KernelOp)}
        users = sorted(bound, key=position.__getitem__)
        writers = [k for k in users if buffer in _written_by(k, written)]
        if writers != [producer_kernel]:
            continue
        consumers = [k for k in users if k is not producer_kernel]
        if producer.has_reduce and len(consumers) > 1:
            continue
        sites = [(c, ld) for c in consumers for ld in loads_of(c, buffer)]
        copy = is_copy(producer) and not any(  # inlined, a load: nothing recomputed
            isinstance(op, loop.ReduceOp) for c in consumers for op in c.walk())
        if not copy and not all(site_is_legal(ld, c, producer) for c, ld in sites):
            continue
        if producer.has_reduce and len(sites) > 1 and (
            len({ld.parent for _, ld in sites}) < len(sites)
            or producer.reduce_work > recompute_limit
        ):
            continue
        inputs = {b for b in producer_kernel.buffers if b is not buffer}
        if len(consumers) > 1 and _writers_of(inputs, written) and not copy:
            continue  # copies of a producer reading intermediates would chain
        for consumer, load in sites:
            inline_at(load, consumer, producer)
            _tidy(consumer)
        for consumer in consumers:
            unbind(consumer, buffer)
        touched = set(producer_kernel.buffers) - {buffer}
        for consumer in consumers:
            touched |= set(consumer.buffers)
        Rewriter.erase_op(producer_kernel)
        if not buffer.uses:
            Rewriter.erase_op(buffer.owner)
        written.pop(producer_kernel, None)
        stale.add(set(consumers) | _writers_of(touched, written))
        return True
    return False


def temporary_output(kernel: loop.KernelOp, out_arg: SSAValue, returned: set[SSAValue]
                     ) -> SSAValue | None:
    """The function-level buffer bound to ``kernel``'s ``out_arg`` when it is a temporary
    (a ``memref.alloc`` of the function, not among the ``returned`` values), else ``None``."""
    buffer = kernel.buffers[list(kernel.body.block.args).index(out_arg)]
    if not isinstance(buffer.owner, memref.AllocOp) or buffer in returned:
        return None
    return buffer


def _bound_written(kernel: loop.KernelOp) -> set[SSAValue]:
    args = list(kernel.body.block.args)
    return {kernel.buffers[args.index(a)] for a in written_args(kernel)}


def loads_of(kernel: loop.KernelOp, outer: SSAValue) -> list[loop.LoadOp]:
    args = [a for a, b in zip(kernel.body.block.args, kernel.buffers, strict=True) if b is outer]
    return [op for op in nested_ops(kernel)
            if isinstance(op, loop.LoadOp) and op.buffer in args]


def unbind(kernel: loop.KernelOp, outer: SSAValue) -> None:
    """Drop the binding of ``outer`` from ``kernel`` once nothing inside uses it."""
    block = kernel.body.block
    pairs = list(zip(block.args, kernel.buffers, strict=True))
    keep = [(a, b) for a, b in pairs if not (b is outer and not a.uses)]
    if len(keep) == len(pairs):
        return
    kernel.operands = [b for _, b in keep]
    for arg, bound in pairs:
        if bound is outer and not arg.uses:
            block.erase_arg(arg)


@dataclass(frozen=True)
class FuseKernels(ModulePass):
    """Producer→consumer fusion at Loop IR (see the module docstring)."""

    name = "fuse-kernels"

    recompute_limit: int = 256
    """A producer with reductions is inlined at several load sites only if each value it
    stores costs at most this many reduction iterations (``fuse-kernels{recompute_limit=0}``
    never recomputes a reduction)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in list(op.walk()):
            if isinstance(fn, func.FuncOp) and not fn.is_declaration:
                fuse_function(fn, self.recompute_limit)
