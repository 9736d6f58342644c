"""``A`` fragments from the registers of the threads that wrote them: the 16-bit half of
``mma-fragments`` (:mod:`~llmopt.passes.tile._mma_halves`) reads an ``a`` operand this way
instead of with ``ldmatrix`` when the same threads wrote it in the accumulator layout.

**Matches** an ``a`` operand ``S[row, %kk]`` of a 16-bit chunk loop (``S`` a rank-2 shared
tile, ``row`` over ``wi, g, i, rh``) when ``S`` is written by exactly one store, ``S[row',
2·t + 8·j + rl] = v``, which sits in a ``loop.for`` nest ``i, rh, j, rl`` (extents ``I, 2,
K/8, 2``, ``I`` the reading forall's) of a ``tile.forall over block_threads`` of the reading
forall's extents, one warp across (``wj`` of extent 1), before the chunk loop in the same
block, with ``row'`` the reading row over the writer's variables; and ``S`` is read by this
chunk loop only. That is a product's ``C`` layout (lane ``4·g + t`` holds columns ``2·t``,
``2·t + 1`` of each 8-column piece ``j`` of rows ``g`` and ``g + 8``) written out and read back
as the next product's ``A`` by the warps that own the rows: the flash kernel's ``P``, with
``flash-attention{row_warps}``.

**Produces** a register tile ``R[forall…, I, 2, K/8, 2]`` of ``S``'s type that the writer
also stores ``v`` into (at its own ``i, rh, j, rl``); the fragments of row block ``i`` at
``kk = 16·kq + k`` are ``mma.pack`` of ``R[…, i, rh, 2·kq + q/2, 0]`` and ``[…, 1]`` (``rh =
q mod 2``) — exactly the pairs ``a_q`` of ``m16n8k16`` (``A[g + 8·(q mod 2)][2t + 8·(q/2) +
{0, 1}]``) — and the shared ``S``, its store and the barrier between the two steps go. When
``v`` is an ``f32`` value rounded (``arith.truncf``), ``R`` is ``f32`` and holds it before
the rounding, and each fragment rounds its two values where it packs them: the same bits,
and ``kernel-to-cuda`` writes a pack of two roundings as one paired conversion instead of
two conversions and a shift.

**Why** the row's values never leave the thread that holds them: writing them to shared
memory and reading them back with ``ldmatrix`` costs a barrier of the whole block, a store
and a load per element, and shared-memory bandwidth the other operand needs.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import Float32Type, MemRefType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.ir.affine import AffineConstantExpr, AffineDimExpr, AffineMap
from xdsl.pattern_rewriter import PatternRewriter
from xdsl.rewriter import InsertPoint

from llmopt.dialects import loop, mma, tile
from llmopt.passes.tile._mma_match import Form, Operand, index_form, is_shared


def index_forms(op: loop.LoadOp | loop.StoreOp) -> list[Form] | None:
    """Each index of ``op`` as a :data:`~llmopt.passes.tile._mma_match.Form`, or ``None``
    if one is not linear."""
    forms: list[Form] = []
    for expr in op.map.data.results:
        form = index_form(op, expr)
        if form is None:
            return None
        forms.append(form)
    return forms


@dataclass(frozen=True)
class Source:
    """Where an ``a`` operand's values are in registers: the single store into the shared
    tile, its forall and its ``i, rh, j, rl`` loops."""

    store: loop.StoreOp
    writer: tile.ForallOp
    loops: tuple[loop.ForOp, ...]


def _loops_to_forall(op: Operation) -> tuple[list[loop.ForOp], tile.ForallOp | None]:
    """The static ``loop.for`` ops around ``op`` (outermost first) up to the nearest
    ``tile.forall``; ``None`` for the forall when something else is in between."""
    loops: list[loop.ForOp] = []
    parent = op.parent_op()
    while isinstance(parent, loop.ForOp) and parent.bound is None:
        loops.insert(0, parent)
        parent = parent.parent_op()
    return loops, parent if isinstance(parent, tile.ForallOp) else None


def register_source(chunk: scf.ForOp, reader: tile.ForallOp, operand: Operand,
                    ivs: dict[str, SSAValue], rows: int, extent: int) -> Source | None:
    """The :class:`Source` of ``operand`` (see **Matches**), else ``None``."""
    load, tile_ = operand.load, operand.load.buffer
    typ = tile_.type
    if operand.role != "a" or not is_shared(tile_) or not isinstance(typ, MemRefType):
        return None
    if typ.get_num_dims() != 2 or not mma.is_half(typ.element_type):
        return None
    stores = [u.operation for u in tile_.uses if isinstance(u.operation, loop.StoreOp)]
    others = [u.operation for u in tile_.uses if not isinstance(u.operation, loop.StoreOp)]
    if len(stores) != 1 or not all(isinstance(o, loop.LoadOp) and chunk.is_ancestor(o)
                                   for o in others):
        return None
    (store,) = stores
    loops, writer = _loops_to_forall(store)
    shape = tuple(reader.shape)
    if (writer is None or len(loops) != 4 or writer.mapping.data != "block_threads"
            or tuple(writer.shape) != shape or shape[1] != 1 or writer.runtime_sizes
            or [lp.trip_count for lp in loops] != [rows, 2, extent // 8, 2]):
        return None
    if writer.parent is not chunk.parent:
        return None
    block = chunk.parent_block()
    assert block is not None
    order = list(block.ops)
    if order.index(writer) > order.index(chunk):
        return None
    read, wrote = index_forms(load), index_forms(store)
    if read is None or wrote is None:
        return None
    names = ("wi", "wj", "g", "t", "i", "rh", "j", "rl")
    theirs = dict(zip(names, [*writer.ivs, *(lp.body.block.args[0] for lp in loops)],
                      strict=True))
    rename = {ivs[n]: theirs[n] for n in ("wi", "g", "i", "rh")}
    (row_coefs, row_const), (k_coefs, k_const) = read
    if k_coefs != {chunk.body.block.args[0]: 1} or k_const or not set(row_coefs) <= set(rename):
        return None
    want_row = ({rename[v]: c for v, c in row_coefs.items()}, row_const)
    want_col = ({theirs["t"]: 2, theirs["j"]: 8, theirs["rl"]: 1}, 0)
    if wrote[0] != want_row or ({v: c for v, c in wrote[1][0].items() if v is not theirs["wj"]},
                                wrote[1][1]) != want_col:
        return None
    return Source(store, writer, tuple(loops))


def forward(source: Source, rewriter: PatternRewriter) -> SSAValue:
    """The register tile ``R`` of **Produces**, written by the source's store's thread
    beside ``S``; returns it."""
    shared = source.store.buffer
    typ = shared.type
    assert isinstance(typ, MemRefType)
    extents = [*source.writer.shape, *(lp.trip_count for lp in source.loops)]
    value = source.store.value
    rounded = value.owner
    if isinstance(rounded, arith.TruncFOp) and isinstance(rounded.input.type, Float32Type):
        value = rounded.input  # R keeps the f32 value; the fragments round it
    alloc = tile.AllocOp("registers", MemRefType(value.type, extents))
    alloc.result.name_hint = f"{shared.name_hint or 'a'}_regs"
    owner = shared.owner
    assert isinstance(owner, Operation)
    rewriter.insert(alloc, InsertPoint.before(owner))
    where = [*source.writer.ivs, *(lp.body.block.args[0] for lp in source.loops)]
    twin = loop.StoreOp(value, alloc.result, AffineMap.identity(len(where)), where)
    rewriter.insert(twin, InsertPoint.after(source.store))
    return alloc.result


def register_fragments(registers: SSAValue, thread: list[SSAValue], kq: SSAValue, i: int,
                       half: Attribute) -> tuple[list[Operation], list[SSAValue]]:
    """The ops building the four ``a`` pairs (of ``half`` values) of row block ``i`` at
    ``kq`` from ``registers`` (see **Produces**: an ``f32`` tile's values are rounded to
    ``half`` here), and the pairs."""
    n = len(thread)
    dims = [AffineDimExpr(d) for d in range(n)]
    ops: list[Operation] = []
    pairs: list[SSAValue] = []
    c = AffineConstantExpr
    for q in range(4):
        halves = []
        for rl in range(2):
            amap = AffineMap(n + 1, 0, (*dims, c(i), c(q % 2),
                                        AffineDimExpr(n) * 2 + c(q // 2), c(rl)))
            value: Operation = loop.LoadOp(registers, amap, [*thread, kq])
            ops.append(value)
            if value.results[0].type != half:
                value = arith.TruncFOp(value.results[0], half)
                ops.append(value)
            halves.append(value.results[0])
        pair = mma.PackOp(*halves)
        pair.result.name_hint = f"fa{i}_{q}"
        ops.append(pair)
        pairs.append(pair.result)
    return ops, pairs


def drop_shared(source: Source, rewriter: PatternRewriter) -> None:
    """Erase the shared tile and its store once nothing reads it."""
    shared = source.store.buffer
    if any(u.operation is not source.store for u in shared.uses):
        return
    rewriter.erase(source.store)
    owner = shared.owner
    assert isinstance(owner, Operation)
    rewriter.erase(owner)
