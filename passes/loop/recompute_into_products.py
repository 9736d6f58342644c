"""``recompute-into-products``: a one-row normalisation is recomputed inside the products
that read it.

**Matches** a ``loop.kernel`` *P* that fills a temporary buffer *T* holding a single row
(every dimension but the last of extent 1, the function's own ``memref.alloc``, not
returned, written by *P* alone) in the shape RMSNorm has in a decode step::

    loop.for %i0 = 0 to 1 { …                           // outer loops of extent 1
      %s = loop.reduce add %r = 0 to N { … }             // the row's statistics
      %f = <scalar ops on %s>
      loop.for %j = 0 to N { <the map: loads at %j, %f> ; loop.store %v, %T[0, …, %j] }
    }

where the statistics are reductions and scalar ops of the outer level, and the map is at
most :data:`MAX_MAP_OPS` region-less ops whose loads read along ``%j`` in their innermost
coordinate alone (or not at all), so that inside a product they stay contiguous along its
sum. Every other kernel bound to *T* must read it only
as a product's operand: inside a ``loop.reduce`` whose induction variable is the load's
last coordinate (the other coordinates zero), writing nothing to *T*.

**Produces** each consumer with *P*'s statistics computed beside each product that reads
*T* (first in the loop body holding the product's ``loop.reduce``: once per output) and
*P*'s map inlined at each of its loads of *T* (the map's ``%j`` is the reduction's
variable); *P* and *T* disappear. The statistics do not depend on the output: the default
schedule turns them into a cooperative reduction of each block, and ``warp-gemv`` keeps
them so, ahead of its lanes (one computation a block of outputs).

**Why** a decode step normalises one row of a few thousand values between products that
read megabytes of weights. As a kernel of its own the norm is a launch and a dependency
(a one-block kernel that the next product waits for) in every layer, twice. Inside the
product it costs each block a pass over the row (a few kilobytes, read from the cache)
and each weight element a few scalar ops, which the weight stream hides. ``fuse-kernels``
never does this: inlined at a product's load, the map runs once per output, not once per
value. Rows longer than one (a prompt) are left alone: there the products are tiled
matrix products whose operands must be plain loads.

The pass is not part of ``lower-to-cuda``. Measured with the products as ``warp-gemv``
scheduled them then, it made a decode step slower: what it saves, a kernel that the
products wait for, programmatic launches had mostly hidden already, while each product
block computed the statistics before its first product and, in 16 bits, each weight
element paid the map's roundings again (``bench/results/decode-recompute-norm-h200.md``).
``warp-gemv`` now computes the map once a block into shared memory (its ``stage`` option),
and ``fuse-launches`` lets the query, key and value projections share that staged row, so
the layer keeps one launch for them. Measured in that form it made TinyLlama's decode step
faster in FP32 and slower in BF16 (``bench/results/decode-ab-nopf-h200.md``); once the
norm kernel's loads were all in flight at once and the long products had several warps a
row, slower in both (``bench/results/decode-norm-h100.md``), so it stays out of
``lower-to-cuda``. ``min_bits`` restricts it to rows of wider elements, for such A/Bs.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import IndexType, ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.ir.affine import AffineConstantExpr, AffineDimExpr
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from llmopt.dialects import loop
from llmopt.passes._ir import element_bits
from llmopt.passes.loop._fuse_analysis import loads_of, temporary_output, written_args
from llmopt.passes.loop._fuse_rewrite import unbind

MAX_MAP_OPS = 16
"""The longest per-element map (loads and scalar ops) recomputed at each load site."""


@dataclass
class RowNorm:
    """A kernel of the matched shape, taken apart."""

    kernel: loop.KernelOp
    out_arg: SSAValue
    #: the outer loops (extent 1) and the row loop
    outer: list[loop.ForOp]
    row: loop.ForOp
    #: ops before the outer loops (constants) and the statistics between them and the row
    prologue: list[Operation]
    #: the map: the row loop's body without its store
    body: list[Operation]
    store: loop.StoreOp


def analyse(kernel: loop.KernelOp) -> RowNorm | None:
    """Take ``kernel`` apart as a :class:`RowNorm`, or ``None`` if it has another shape."""
    prologue: list[Operation] = []
    outer: list[loop.ForOp] = []
    block = kernel.body.block
    while True:
        loops = [op for op in block.ops if isinstance(op, loop.ForOp)]
        if len(loops) != 1 or block.last_op is not loops[0] or loops[0].is_dynamic:
            return None
        prologue.extend(op for op in block.ops if op is not loops[0])
        if loops[0].trip_count > 1:
            row = loops[0]
            break
        outer.append(loops[0])
        block = loops[0].body.block
    if not any(isinstance(op, loop.ReduceOp) for op in prologue):
        return None  # a plain map: fuse-kernels' business
    if any(isinstance(op, loop.StoreOp | loop.ForOp) for p in prologue for op in p.walk()):
        return None
    body = list(row.body.block.ops)
    store = body.pop()
    if (not isinstance(store, loop.StoreOp) or len(body) > MAX_MAP_OPS
            or any(op.regions or isinstance(op, loop.StoreOp) for op in body)):
        return None
    if not all(_row_innermost(op, row.iv) for op in body if isinstance(op, loop.LoadOp)):
        return None
    ivs = [lp.iv for lp in outer]
    for k, expr in enumerate(store.map.data.results):
        last = k == len(store.map.data.results) - 1
        if last and not (isinstance(expr, AffineDimExpr)
                         and store.indices[expr.position] is row.iv):
            return None
        if not last and not (isinstance(expr, AffineConstantExpr) and expr.value == 0
                             or isinstance(expr, AffineDimExpr)
                             and store.indices[expr.position] in ivs):
            return None
    shape = store.buffer.type.get_shape()  # type: ignore[attr-defined]
    if any(e != 1 for e in shape[:-1]) or shape[-1] != row.trip_count:
        return None
    return RowNorm(kernel, store.buffer, outer, row, prologue, body, store)


def _row_innermost(load: loop.LoadOp, iv: SSAValue) -> bool:
    """Whether ``load`` reads along ``iv`` in its innermost coordinate alone, or not at all:
    in a product the map's loads then stay contiguous along the product's sum (the
    16-byte loads of ``warp-gemv``)."""
    results = load.map.data.results
    positions = [k for k, v in enumerate(load.indices) if v is iv]
    if not positions:
        return True
    last = results[-1]
    return (len(positions) == 1 and isinstance(last, AffineDimExpr)
            and last.position == positions[0]
            and not any(positions[0] in e.used_dims() for e in results[:-1]))


def product_site(ld: loop.LoadOp, extent: int) -> SSAValue | None:
    """The reduction variable at which ``ld`` reads a row of ``extent`` values as a
    product's operand (last coordinate the variable of an enclosing ``loop.reduce`` of that
    extent, every other coordinate 0), else ``None``."""
    results = ld.map.data.results
    if not all(isinstance(e, AffineConstantExpr) and e.value == 0
               or isinstance(e, AffineDimExpr) and _runs_once(ld.indices[e.position])
               for e in results[:-1]):
        return None
    last = results[-1]
    if not isinstance(last, AffineDimExpr):
        return None
    iv = ld.indices[last.position]
    parent = ld.parent_op()
    while parent is not None and not isinstance(parent, loop.KernelOp):
        if isinstance(parent, loop.ReduceOp) and parent.iv is iv:
            return iv if parent.trip_count == extent and not parent.is_dynamic else None
        parent = parent.parent_op()
    return None


def _runs_once(value: SSAValue) -> bool:
    """Whether ``value`` is the variable of a loop of extent 1 (always 0)."""
    owner = value.owner
    parent = owner.parent_op() if isinstance(owner, Block) else None
    return (isinstance(parent, loop.ForOp | loop.ReduceOp) and parent.iv is value
            and parent.trip_count == 1 and not parent.is_dynamic)


def recompute(norm: RowNorm, consumer: loop.KernelOp, buffer: SSAValue,
              sites: list[tuple[loop.LoadOp, SSAValue]]) -> None:
    """Put ``norm``'s statistics at the top of the block holding each product of
    ``consumer`` that reads ``buffer`` (once a block) and its map at each of the ``sites``
    (a load and the product's reduction variable); unbind ``buffer``."""
    bound: dict[SSAValue, SSAValue] = {}
    for inner, outer in zip(norm.kernel.body.block.args, norm.kernel.buffers, strict=True):
        if inner is not norm.out_arg:
            bound[inner] = consumer.bind(outer)
            bound[inner].name_hint = bound[inner].name_hint or inner.name_hint
    statistics: dict[Block, dict[SSAValue, SSAValue]] = {}
    for ld, iv in sites:
        product = iv.owner.parent_op()  # type: ignore[union-attr]
        assert isinstance(product, loop.ReduceOp)
        block = product.parent_block()
        assert block is not None
        if block not in statistics:
            mapping = dict(bound)
            zero = arith.ConstantOp.from_int_and_width(0, IndexType())
            Rewriter.insert_op(zero, InsertPoint.at_start(block))
            mapping.update((lp.iv, zero.result) for lp in norm.outer)
            anchor = InsertPoint.after(zero)
            for op in norm.prologue:
                clone = op.clone(mapping)
                Rewriter.insert_op(clone, anchor)
                anchor = InsertPoint.after(clone)
            statistics[block] = mapping
        site = dict(statistics[block])
        site[norm.row.iv] = iv
        for op in norm.body:
            Rewriter.insert_op(op.clone(site), InsertPoint.before(ld))
        stored = norm.store.value
        ld.result.replace_all_uses_with(site.get(stored, stored))
        Rewriter.erase_op(ld)
    unbind(consumer, buffer)


def product_sites(norm: RowNorm, consumer: loop.KernelOp, buffer: SSAValue
                  ) -> list[tuple[loop.LoadOp, SSAValue]] | None:
    """Each load of ``buffer`` in ``consumer`` with the reduction variable of the product
    it feeds (:func:`product_site`); ``None`` if one is not a product's operand, if there
    is none, or if ``consumer`` writes ``buffer``."""
    loads = loads_of(consumer, buffer)
    if not loads or written_args(consumer) & {ld.buffer for ld in loads}:
        return None
    sites = [(ld, product_site(ld, norm.row.trip_count)) for ld in loads]
    if any(iv is None for _, iv in sites):
        return None
    return sites  # type: ignore[return-value]


def recompute_function(fn: func.FuncOp, min_bits: int = 0) -> None:
    """Recompute every matched norm whose row has elements of at least ``min_bits`` bits
    inside its consumers in ``fn``."""
    returned = {v for op in fn.body.block.ops if isinstance(op, func.ReturnOp)
                for v in op.operands}
    for kernel in [op for op in fn.body.block.ops if isinstance(op, loop.KernelOp)]:
        norm = analyse(kernel)
        buffer = None if norm is None else temporary_output(kernel, norm.out_arg, returned)
        if norm is None or buffer is None or element_bits(buffer) < min_bits:
            continue
        consumers = list(dict.fromkeys(u.operation for u in buffer.uses
                                       if u.operation is not kernel))
        if not consumers or not all(isinstance(c, loop.KernelOp) for c in consumers):
            continue
        found = {c: product_sites(norm, c, buffer) for c in consumers}  # type: ignore[arg-type]
        if any(sites is None for sites in found.values()):
            continue
        for consumer, sites in found.items():
            recompute(norm, consumer, buffer, sites)  # type: ignore[arg-type]
        Rewriter.erase_op(kernel)
        if not buffer.uses:
            Rewriter.erase_op(buffer.owner)


@dataclass(frozen=True)
class RecomputeIntoProducts(ModulePass):
    """Recompute one-row normalisations inside the products reading them (see the module
    docstring)."""

    name = "recompute-into-products"

    min_bits: int = 0
    """Leave a norm alone whose row has elements narrower than this (0: take every one)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in list(op.walk()):
            if isinstance(fn, func.FuncOp) and not fn.is_declaration:
                recompute_function(fn, self.min_bits)
