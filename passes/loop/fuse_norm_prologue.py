"""``fuse-norm-prologue``: a normalisation's row scale moves out of the reductions reading it.

**Matches** a ``loop.kernel`` *P* whose single store fills a temporary buffer *T* (a
``memref.alloc`` of the function that is not returned and that no other kernel writes), one
point per iteration of a nest of ``loop.for`` (each coordinate of *T* one loop's iv over its
whole extent, or 0 of extent 1). The nest splits into *row* loops and, inside them, a perfect
nest of *column* loops (the innermost split that fits is taken) such that the stored value
is a product (``arith.mulf``; ``arith.divf`` counts its divisor as a factor of the inverse) of

* *row factors*: values computed outside the column loops, at least one of them from a
  ``loop.reduce`` (the ``rsqrt(mean(x²) + eps)`` of an RMSNorm), and
* an *elementwise part* (``x[.., c] * g[c]``, or ``(h + d)[.., c] * g[c]`` where a residual
  add was fused into the norm): constants and at most ``op_limit`` loads and side-effect-free
  scalar ops, using neither a row factor nor a reduction, whose loads index by the nest's ivs
  only (no gathered rows: the embedding lookup fused into a model's first norm does not
  match) and read buffers no kernel writes after *P*;

together with every kernel reading *T*, provided each of its loads of *T* sits directly in
the body of a ``loop.reduce add``, the loaded value reaches the yielded value only through
``arith.mulf``, ``arith.negf`` and the numerator of ``arith.divf`` (each value on the way used
once), and the load's row coordinates do not vary in that reduction. One consumer that does
not fit (a load outside a reduction, a ``max`` reduction, an addition on the way, a sum over
rows) leaves the producer and all its consumers unchanged. Not matched either: a LayerNorm
(its mean is subtracted, not a factor) and norms computed in a wider type (the
``arith.truncf`` is not a product).

**Produces** *P* storing only the row scale ``s = Π row factors / Π row divisors`` into a
new buffer shaped like *T* with the column coordinates of extent 1 (``memref<1x8x1xf32>``
for a ``1x8x64`` *T*); in each consumer the elementwise part recomputed at the load (as
``fuse-kernels`` inlines a producer) and the reduction's result multiplied by ``s`` loaded at
the load's row: ``Σ_r (x·s·g)[r]·W[n, r]`` becomes ``s · Σ_r (x·g)[r]·W[n, r]``. *T* and the
column loops of *P* disappear. The sum is mathematically the same; it rounds differently.

**Why** an RMSNorm in front of linear layers (Llama's q/k/v and gate/up projections) writes
and reads back the whole normalised activation although each row differs from its input
only by a scale the projections can apply to their results: now only one scalar per row
reaches memory, and the matrix products, still recognised by ``register-tile`` (the
elementwise factor is one more operand of the K loop, the scale an epilogue, as the softmax
denominator is in attention's ``P·V``), read the un-normalised input directly.
``fuse-kernels`` cannot do this itself: inlining the whole producer would recompute its row
reduction for every output column.

**Not in ``lower-to-cuda``** (name it in a pipeline to use it): on the H200 the decoder
layers ran slower with it — TinyLlama at seq 512 2.07 against 1.92 ms, Qwen2.5-7B 7.33
against 6.60 ms — because ``x·g`` is multiplied inside the K loop of every projection: one
more instruction for every ``tn`` multiply-adds of a micro-tile row, where the matrix
products are bound by instruction issue, while the write it saves is a few MB. It pays once
the factor is applied where a tile is staged (once per element instead of once per use),
which the ``cp.async`` staging cannot do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import FloatAttr, MemRefType, ModuleOp
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.ir.affine import AffineConstantExpr, AffineDimExpr, AffineExpr, AffineMap
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import MemoryWriteEffect, is_side_effect_free

from llmopt.dialects import loop
from llmopt.passes._ir import defined_inside
from llmopt.passes.loop.fuse_kernels import (
    Producer,
    bind_buffer,
    enclosing_loops,
    inline_at,
    loads_of,
    merge_identical,
    stores_of,
    unbind,
    used_dims,
)

# --- the producer's stored value, factored --------------------------------------------------


@dataclass(frozen=True)
class _Node:
    """A product or quotient of two factored values; ``None`` stands for 1."""

    op: type[arith.MulfOp] | type[arith.DivfOp]
    lhs: _Node | SSAValue | None
    rhs: _Node | SSAValue | None


_Expr = _Node | SSAValue | None


@dataclass
class _Factored:
    """``value = elementwise · Π nums / Π dens``; ``nums`` and ``dens`` are row values."""

    elementwise: _Expr
    nums: list[SSAValue] = field(default_factory=list)
    dens: list[SSAValue] = field(default_factory=list)


def _factor(value: SSAValue, columns: loop.ForOp, depth: int = 0) -> _Factored | None:
    """Split ``value`` (computed in the column loops ``columns``) into row factors and an
    elementwise part, descending through products and through quotients."""
    owner = value.owner
    if depth > 64:
        return None
    if isinstance(owner, arith.ConstantOp):
        return _Factored(value)
    if not defined_inside(value, columns):
        return _Factored(None, [value])
    if not isinstance(owner, arith.MulfOp | arith.DivfOp):
        return _Factored(value)
    lhs = _factor(owner.lhs, columns, depth + 1)
    rhs = _factor(owner.rhs, columns, depth + 1)
    if lhs is None or rhs is None:
        return None
    if isinstance(owner, arith.MulfOp):
        elementwise = (rhs.elementwise if lhs.elementwise is None
                       else lhs.elementwise if rhs.elementwise is None
                       else _Node(arith.MulfOp, lhs.elementwise, rhs.elementwise))
        return _Factored(elementwise, lhs.nums + rhs.nums, lhs.dens + rhs.dens)
    elementwise = (lhs.elementwise if rhs.elementwise is None
                   else _Node(arith.DivfOp, lhs.elementwise, rhs.elementwise))
    return _Factored(elementwise, lhs.nums + rhs.dens, lhs.dens + rhs.nums)


def _leaves(expr: _Expr) -> list[SSAValue]:
    if expr is None:
        return []
    if isinstance(expr, _Node):
        return _leaves(expr.lhs) + _leaves(expr.rhs)
    return [expr]


def _nodes(expr: _Expr) -> int:
    return 1 + _nodes(expr.lhs) + _nodes(expr.rhs) if isinstance(expr, _Node) else 0


def _from_reduction(value: SSAValue, kernel: loop.KernelOp) -> bool:
    """Whether ``value`` depends on the result of a ``loop.reduce`` of ``kernel``."""
    seen: set[SSAValue] = set()
    todo = [value]
    while todo:
        v = todo.pop()
        if v in seen or not isinstance(v.owner, Operation) or not kernel.is_ancestor(v.owner):
            continue
        seen.add(v)
        if isinstance(v.owner, loop.ReduceOp):
            return True
        todo.extend(v.owner.operands)
    return False


# --- analysis ---------------------------------------------------------------------------------


@dataclass
class NormProducer:
    """A kernel whose stored value is a row scale times an elementwise part."""

    kernel: loop.KernelOp
    store: loop.StoreOp
    #: the store's loops, outermost first: ``loops[:split]`` are the row loops
    loops: list[loop.ForOp]
    split: int
    #: loop iv -> the coordinate of the stored buffer it indexes
    coord_of: dict[SSAValue, int]
    factored: _Factored
    #: the ops computing the elementwise part's leaves, in program order
    slice_ops: list[Operation]

    @property
    def columns(self) -> loop.ForOp:
        return self.loops[self.split]

    @property
    def row_coords(self) -> set[int]:
        """The coordinates of the stored buffer indexed by row loops."""
        return {self.coord_of[lp.iv] for lp in self.loops[: self.split]}

    def scale_shape(self) -> list[int]:
        """The shape of the row-scale buffer: the stored one, column coordinates of extent 1."""
        shape = _shape(self.store.buffer)
        return [e if j in self.row_coords else 1 for j, e in enumerate(shape)]

    def loaded_args(self) -> set[SSAValue]:
        """The kernel arguments the elementwise part loads."""
        return {op.buffer for op in self.slice_ops if isinstance(op, loop.LoadOp)}


def _shape(buffer: SSAValue) -> tuple[int, ...]:
    assert isinstance(buffer.type, MemRefType)
    return tuple(buffer.type.get_shape())


def _store_coordinates(store: loop.StoreOp, loops: list[loop.ForOp]
                       ) -> dict[SSAValue, int] | None:
    """Map each loop iv to the coordinate it stores at; ``None`` unless every coordinate is
    one distinct iv over the whole extent, or 0 of extent 1."""
    shape = _shape(store.buffer)
    extents = {lp.iv: lp.trip_count for lp in loops}
    coord_of: dict[SSAValue, int] = {}
    for j, expr in enumerate(store.map.data.results):
        if isinstance(expr, AffineDimExpr):
            iv = store.indices[expr.position]
            if iv not in extents or iv in coord_of or extents[iv] != shape[j]:
                return None
            coord_of[iv] = j
        elif not (isinstance(expr, AffineConstantExpr) and expr.value == 0 and shape[j] == 1):
            return None
    return coord_of if set(coord_of) == set(extents) else None


def _elementwise_slice(leaves: list[SSAValue], kernel: loop.KernelOp, out_arg: SSAValue,
                       ivs: set[SSAValue]) -> set[Operation] | None:
    """The ops computing ``leaves``: constants, loads of the kernel's input buffers at
    coordinates of the nest's ivs and side-effect-free region-less scalar ops (in the column
    loops, or in the row loops when they depend on no reduction); ``None`` if they use
    anything else: a reduction's result or iv, or a data-dependent coordinate (a gathered
    embedding row, which ``stage-inputs`` could not stage in the consumers)."""
    args = set(kernel.body.block.args)
    ops: set[Operation] = set()
    todo = list(leaves)
    while todo:
        v = todo.pop()
        owner = v.owner
        if isinstance(owner, Block):
            if v in ivs or (v in args and v is not out_arg):
                continue
            return None
        if owner in ops:
            continue
        if isinstance(owner, arith.ConstantOp):
            ops.add(owner)
            continue
        if not kernel.is_ancestor(owner):
            return None
        if isinstance(owner, loop.LoadOp):
            if owner.buffer is out_arg or not all(i in ivs for i in owner.indices):
                return None
        elif owner.regions or not is_side_effect_free(owner):
            return None
        ops.add(owner)
        todo.extend(owner.operands)
    return ops


def analyse_norm_producer(kernel: loop.KernelOp, op_limit: int) -> NormProducer | None:
    """Recognise the producer described in the module docstring, else ``None``.

    The split between row and column loops is the innermost one that works.
    """
    stores = stores_of(kernel)
    if len(stores) != 1:
        return None
    store = stores[0]
    loops = enclosing_loops(store, kernel)
    if len(loops) < 2 or not all(isinstance(lp, loop.ForOp) for lp in loops):
        return None
    fors = [lp for lp in loops if isinstance(lp, loop.ForOp)]
    coord_of = _store_coordinates(store, fors)
    if coord_of is None:
        return None
    for split in range(len(fors) - 1, 0, -1):
        columns = fors[split]
        # The column loops form a perfect nest around the store's block.
        if not all(len(lp.body.block.ops) == 1 for lp in fors[split:-1]):
            continue
        factored = _factor(store.value, columns)
        if (factored is None or factored.elementwise is None
                or not (factored.nums or factored.dens)
                or not any(_from_reduction(v, kernel) for v in factored.nums + factored.dens)):
            continue
        ops = _elementwise_slice(_leaves(factored.elementwise), kernel, store.buffer,
                                 set(coord_of))
        if ops is None:
            continue
        cost = sum(not isinstance(op, arith.ConstantOp) for op in ops)
        if cost + _nodes(factored.elementwise) > op_limit:
            continue
        ordered = [op for op in kernel.walk() if op in ops]
        return NormProducer(kernel, store, fors, split, coord_of, factored, ordered)
    return None


@dataclass
class Site:
    """A consumer's load of the producer's buffer and the add-reduction it sits in."""

    kernel: loop.KernelOp
    load: loop.LoadOp
    reduce: loop.ReduceOp


def _multiplicative(load: loop.LoadOp, reduce: loop.ReduceOp) -> bool:
    """Whether the loaded value reaches ``reduce``'s yield only as a factor."""
    value: SSAValue = load.result
    while True:
        uses = list(value.uses)
        if len(uses) != 1:
            return False
        user, index = uses[0].operation, uses[0].index
        if user.parent is not reduce.body.block:
            return False
        if isinstance(user, loop.YieldOp):
            return True
        if isinstance(user, arith.MulfOp | arith.NegfOp) or (
            isinstance(user, arith.DivfOp) and index == 0
        ):
            value = user.results[0]
            continue
        return False


def analyse_site(load: loop.LoadOp, kernel: loop.KernelOp, producer: NormProducer
                 ) -> Site | None:
    """The site of a consumer's load of the producer's buffer, or ``None`` if it does not
    fit (see the module docstring)."""
    reduce = load.parent_op()
    if not isinstance(reduce, loop.ReduceOp) or reduce.kind.data != "add":
        return None
    if not _multiplicative(load, reduce):
        return None
    amap = load.map.data
    for j in producer.row_coords:
        for d in used_dims(amap.results[j]):
            if defined_inside(load.indices[d], reduce):
                return None  # the row varies in the reduction
    # ivs used as plain values in the recomputed part need a dim or a constant at the site
    for op in producer.slice_ops:
        if isinstance(op, loop.LoadOp):
            continue
        for operand in op.operands:
            if operand in producer.coord_of:
                expr = amap.results[producer.coord_of[operand]]
                if not isinstance(expr, AffineDimExpr | AffineConstantExpr):
                    return None
    return Site(kernel, load, reduce)


# --- rewriting --------------------------------------------------------------------------------


def _emit(expr: _Expr, value_map: dict[SSAValue, SSAValue], before: Operation,
          element: Attribute, emitted: list[Operation]) -> SSAValue:
    """Build ``expr`` (1 for ``None``) before ``before``, its leaves through ``value_map``."""
    if isinstance(expr, SSAValue):
        return value_map.get(expr, expr)
    if expr is None:
        new: Operation = arith.ConstantOp(FloatAttr(1.0, element))  # type: ignore[arg-type]
    else:
        lhs = _emit(expr.lhs, value_map, before, element, emitted)
        rhs = _emit(expr.rhs, value_map, before, element, emitted)
        new = expr.op(lhs, rhs)
    Rewriter.insert_op(new, InsertPoint.before(before))
    emitted.append(new)
    return new.results[0]


def _row_access(amap: AffineMap, indices: list[SSAValue], row_coords: set[int]
                ) -> tuple[AffineMap, list[SSAValue]]:
    """``amap`` with the non-row coordinates set to 0 and the unused indices dropped."""
    results = [e if j in row_coords else AffineConstantExpr(0)
               for j, e in enumerate(amap.results)]
    keep = sorted(set().union(set(), *(used_dims(e) for e in results)))
    renumber: list[AffineExpr] = [AffineDimExpr(keep.index(d)) if d in keep
                                  else AffineConstantExpr(0) for d in range(len(indices))]
    results = [e.replace_dims_and_symbols(renumber, ()) for e in results]
    return AffineMap(len(keep), 0, tuple(results)), [indices[d] for d in keep]


def _erase_dead(kernel: loop.KernelOp) -> None:
    """Erase the ops of ``kernel`` whose results are unused and that write nothing."""
    changed = True
    while changed:
        changed = False
        for op in reversed(list(kernel.walk())):
            if op is kernel or not op.results or any(r.uses for r in op.results):
                continue
            if any(inner.has_trait(MemoryWriteEffect) for inner in op.walk()):
                continue
            Rewriter.erase_op(op)
            changed = True


def rewrite(producer: NormProducer, buffer: SSAValue, sites: list[Site],
            consumers: list[loop.KernelOp]) -> None:
    """Store the row scale, recompute the elementwise part at the sites and scale their
    reductions' results (see the module docstring)."""
    kernel, store = producer.kernel, producer.store
    element = store.buffer.type
    assert isinstance(element, MemRefType)
    # The elementwise part, built before the store, which now stores it.
    value_map: dict[SSAValue, SSAValue] = {}
    emitted: list[Operation] = []
    for op in producer.slice_ops:
        clone = op.clone(value_map)
        Rewriter.insert_op(clone, InsertPoint.before(store))
        emitted.append(clone)
    elementwise = _emit(producer.factored.elementwise, value_map, store, element.element_type,
                        emitted)
    store.operands = [elementwise, *store.operands[1:]]
    # The row scale, stored before the column loops into a new buffer.
    alloc = memref.AllocOp.get(element.element_type, shape=producer.scale_shape())
    alloc.memref.name_hint = "scale"
    Rewriter.insert_op(alloc, InsertPoint.before(kernel))
    scale_arg = bind_buffer(kernel, alloc.memref)
    columns = producer.columns
    scale: SSAValue | None = None
    for factor in producer.factored.nums:
        if scale is None:
            scale = factor
            continue
        mul = arith.MulfOp(scale, factor)
        Rewriter.insert_op(mul, InsertPoint.before(columns))
        scale = mul.result
    for factor in producer.factored.dens:
        if scale is None:
            one = arith.ConstantOp(FloatAttr(1.0, element.element_type))  # type: ignore[arg-type]
            Rewriter.insert_op(one, InsertPoint.before(columns))
            scale = one.result
        div = arith.DivfOp(scale, factor)
        Rewriter.insert_op(div, InsertPoint.before(columns))
        scale = div.result
    assert scale is not None
    rows = [lp.iv for lp in producer.loops[: producer.split]]
    store_map, store_indices = _row_access(store.map.data, list(store.indices),
                                           producer.row_coords)
    Rewriter.insert_op(loop.StoreOp(scale, scale_arg, store_map, store_indices),
                       InsertPoint.before(columns))
    assert set(store_indices) <= set(rows)
    # Each site: the scale after the reduction, the elementwise part at the load.
    inlined = Producer(kernel, store.buffer, producer.coord_of, emitted, store, False)
    for site in sites:
        consumer_scale = bind_buffer(site.kernel, alloc.memref)
        amap, indices = _row_access(site.load.map.data, list(site.load.indices),
                                    producer.row_coords)
        load = loop.LoadOp(consumer_scale, amap, indices)
        result = site.reduce.result
        uses = list(result.uses)
        mul = arith.MulfOp(result, load.result)
        Rewriter.insert_op([load, mul], InsertPoint.after(site.reduce))
        for use in uses:
            use.operation.operands[use.index] = mul.result
        inline_at(site.load, site.kernel, inlined)
    for consumer in consumers:
        merge_identical(consumer)
        for outer in {buffer, *kernel.buffers}:  # inline_at binds every producer buffer
            unbind(consumer, outer)
    # The column loops (the elementwise part and the old store) go.
    Rewriter.erase_op(columns)
    _erase_dead(kernel)
    for outer in set(kernel.buffers):
        unbind(kernel, outer)
    if not buffer.uses:
        Rewriter.erase_op(buffer.owner)  # type: ignore[arg-type]


def _writes(kernel: loop.KernelOp, outer: SSAValue) -> bool:
    """Whether ``kernel`` stores to the function-level buffer ``outer``."""
    args = {a for a, b in zip(kernel.body.block.args, kernel.buffers, strict=True) if b is outer}
    return any(st.buffer in args for st in stores_of(kernel))


def fuse_function(fn: func.FuncOp, op_limit: int = 8) -> None:
    """Rewrite every matching producer of ``fn`` with its consumers."""
    block = fn.body.block
    position = {op: k for k, op in enumerate(block.ops)}
    returned = {v for op in block.ops if isinstance(op, func.ReturnOp) for v in op.operands}
    for kernel in [op for op in block.ops if isinstance(op, loop.KernelOp)]:
        producer = analyse_norm_producer(kernel, op_limit)
        if producer is None:
            continue
        args = list(kernel.body.block.args)
        buffer = kernel.buffers[args.index(producer.store.buffer)]
        if not isinstance(buffer.owner, memref.AllocOp) or buffer in returned:
            continue
        users = {use.operation for use in buffer.uses}
        if not all(isinstance(u, loop.KernelOp) for u in users):
            continue
        consumers = sorted((u for u in users if u is not kernel and isinstance(u, loop.KernelOp)),
                           key=position.__getitem__)
        if not consumers or any(position[c] < position[kernel] or _writes(c, buffer)
                                for c in consumers):
            continue
        # The recomputed part reads buffers nothing writes from the producer on.
        inputs = {kernel.buffers[args.index(a)] for a in producer.loaded_args()}
        if any(not isinstance(u, loop.KernelOp | func.ReturnOp)
               or (isinstance(u, loop.KernelOp) and u is not kernel
                   and position[u] > position[kernel] and _writes(u, b))
               for b in inputs for u in (use.operation for use in b.uses)):
            continue
        sites = [analyse_site(ld, c, producer) for c in consumers for ld in loads_of(c, buffer)]
        if not sites or any(s is None for s in sites):
            continue
        rewrite(producer, buffer, [s for s in sites if s is not None], consumers)


@dataclass(frozen=True)
class FuseNormPrologue(ModulePass):
    """Factor a normalisation's row scale out of the reductions that read it (see the
    module docstring)."""

    name = "fuse-norm-prologue"

    op_limit: int = 8
    """The most loads and scalar ops the elementwise part may have: it is recomputed at every
    load site, once per term of each consumer's reduction."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in list(op.walk()):
            if isinstance(fn, func.FuncOp) and not fn.is_declaration:
                fuse_function(fn, self.op_limit)
