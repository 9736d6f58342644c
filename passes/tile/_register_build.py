"""The tiled kernel of ``register-tile`` (:mod:`llmopt.passes.tile.register_tile`): the
values of its ``blocked`` and ``raster`` knobs, the :class:`ThreadLayout` of each ``blocked``
layout (which outputs a block's threads own) and :func:`build_tiled_kernel`, which builds the
forall over blocks, the accumulators, the K loop and the epilogue."""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import (
    Float32Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    StringAttr,
)
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.ir.affine import AffineMap

from llmopt.dialects import loop, tile
from llmopt.passes.tile._access import (
    UNROLL,
    ClampingCloner,
    Cloner,
    Linear,
    block_threads,
    ceildiv_into,
    close_guards,
    guard_inside,
    loop_nest,
)
from llmopt.passes.tile._register_match import Contraction
from llmopt.passes.tile._schedule import RegisterTile

MMA_LAYOUT = 3
"""``blocked`` value of the tensor-core layout (``mma-fragments``)."""

COLUMNS_FASTEST, ROWS_FASTEST = 1, 2
"""Values of the ``raster`` knob: the order in which consecutive blocks take the output
tiles — along a row of tiles (``n`` fastest), or down a column (``m`` fastest: the blocks
that read the same ``bn`` rows of the weight run together, so the weight is read from
memory about once and the activations, a few MB, stay in L2; the default of 16-bit
tensor-core products, whose weights of tens to hundreds of MB do not fit in L2 and were
otherwise read once per row of tiles)."""


def mma_fits(t: RegisterTile, typ: Attribute) -> bool:
    """Whether ``t`` can take the tensor-core layout: ``f32`` sums, each thread's outputs
    whole ``m16n8`` fragments (``tm``, ``tn`` even), whole warp tiles in the block."""
    return (isinstance(typ, Float32Type) and t.tm % 2 == 0 and t.tn % 2 == 0
            and t.bm % (8 * t.tm) == 0 and t.bn % (4 * t.tn) == 0)


@dataclass(frozen=True)
class ThreadLayout:
    """Which outputs a block's threads own: the ``tile.forall over block_threads`` (extents,
    names), the ``loop.for`` nest of a thread's outputs, and ``m``/``n`` of an output as
    ``(coefficient, position)`` pairs over the forall's ivs then the nest's (the block's
    ``bm·b_m`` / ``bn·b_n`` added separately)."""

    forall: tuple[int, ...]
    forall_names: tuple[str, ...]
    nest: tuple[int, ...]
    nest_names: tuple[str, ...]
    m: tuple[tuple[int, int], ...]
    n: tuple[tuple[int, int], ...]


def thread_layout(t: RegisterTile, layout: int) -> ThreadLayout:
    """The :class:`ThreadLayout` of ``register-tile``'s ``blocked`` knob: 1 blocked, 2
    cyclic, 3 the tensor-core layout — warps ``(wi, wj)`` own ``8·tm × 4·tn`` warp tiles;
    lane ``4·g + t`` owns, of each 16 × 8 fragment ``(i, j)``, rows ``g`` and ``g + 8``
    (``rh``) and columns ``2·t`` and ``2·t + 1`` (``rl``): what ``mma.sync`` reads and writes
    as ``C`` and ``D``."""
    wm, wn = t.bm // t.tm, t.bn // t.tn
    if layout == MMA_LAYOUT:
        wtm, wtn = 8 * t.tm, 4 * t.tn
        return ThreadLayout((t.bm // wtm, t.bn // wtn, 8, 4), ("wi", "wj", "g", "t"),
                            (t.tm // 2, 2, t.tn // 2, 2), ("i", "rh", "j", "rl"),
                            ((wtm, 0), (1, 2), (16, 4), (8, 5)),
                            ((wtn, 1), (2, 3), (8, 6), (1, 7)))
    if layout == 1:
        return ThreadLayout((wm, wn), ("ti", "tj"), (t.tm, t.tn), ("mi", "nj"),
                            ((t.tm, 0), (1, 2)), ((t.tn, 1), (1, 3)))
    return ThreadLayout((wm, wn), ("ti", "tj"), (t.tm, t.tn), ("mi", "nj"),
                        ((wm, 2), (1, 0)), ((wn, 3), (1, 1)))


def build_tiled_kernel(op: tile.KernelOp, found: Contraction, t: RegisterTile,
                       layout: int = 2, grid: SSAValue | None = None,
                       rows_fastest: bool = False) -> tile.KernelOp:
    """The register-tiled version of ``op``, its threads' outputs placed by ``layout``
    (:func:`thread_layout`); with runtime rows, ``grid`` is the launch's runtime grid. The
    forall over blocks is over (batch…, ``m`` tiles, ``n`` tiles), or with
    ``rows_fastest`` over (batch…, ``n`` tiles, ``m`` tiles) (:data:`ROWS_FASTEST`)."""
    ext = found.extents
    lay = thread_layout(t, layout)
    m_ext, n_ext = ext[found.m], ext[found.n]
    tiles = [-(-m_ext // t.bm), -(-n_ext // t.bn)]
    m_at = 1 if rows_fastest else 0  # where the m tiles are, after the batch dimensions
    block_ext = [ext[d] for d in found.batch] + (tiles[::-1] if rows_fastest else tiles)
    ragged = {found.m: m_ext % t.bm != 0 or found.length is not None,
              found.n: n_ext % t.bn != 0}
    kernel_args = set(op.body.block.args)
    points = math.prod(block_ext)
    new = tile.KernelOp(op.sym_name.data, [min(points, 2**31 - 1), 1, 1], [t.threads, 1, 1],
                        list(op.buffers), grid_size=grid)
    new.attributes |= op.attributes
    body = new.body.block
    kernel_values: dict[SSAValue, SSAValue] = dict(zip(op.body.block.args, body.args,
                                                       strict=True))
    for other in op.body.block.ops:
        if other is found.forall:
            continue
        copy = other.clone(value_mapper=kernel_values)
        body.add_op(copy)
        kernel_values.update(zip(other.results, copy.results, strict=True))

    sizes: dict[int, SSAValue] = {}
    m_bound: SSAValue | int = m_ext
    batches = len(found.batch)
    if found.length is not None:
        m_bound = kernel_values[found.length]
        sizes[batches + m_at] = ceildiv_into(body, m_bound, t.bm)
    blocks = tile.ForallOp(block_ext, "blocks", sizes=sizes)
    body.add_op(blocks)
    bivs = list(blocks.ivs)
    b_m, b_n = bivs[batches + m_at], bivs[batches + 1 - m_at]
    for arg, name in zip(bivs, [f"b{d}" for d in found.batch], strict=False):
        arg.name_hint = name
    b_m.name_hint, b_n.name_hint = "bm", "bn"
    batch_ivs = dict(zip(found.batch, bivs, strict=False))
    typ = found.reduce.result.type
    accs = []
    for i, _ in enumerate(found.reduces):
        acc = tile.AllocOp("registers", MemRefType(typ, [*lay.forall, *lay.nest]))
        acc.result.name_hint = "acc" if len(found.reduces) == 1 else f"acc{i}"
        blocks.body.block.add_op(acc)
        accs.append(acc.result)
    acc_map = AffineMap.identity(len(lay.forall) + len(lay.nest))

    def point_cloner(*ivs: SSAValue, clamp: bool = True) -> Cloner:
        cloner_cls = ClampingCloner if clamp and any(ragged.values()) else Cloner
        subst: dict[SSAValue, Linear] = {}
        for d, iv in enumerate(found.forall.ivs):
            if d == found.m:
                subst[iv] = Linear.of((t.bm, b_m), *((c, ivs[k]) for c, k in lay.m))
            elif d == found.n:
                subst[iv] = Linear.of((t.bn, b_n), *((c, ivs[k]) for c, k in lay.n))
            elif ext[d] == 1:
                subst[iv] = Linear.of()
            else:
                subst[iv] = Linear.of((1, batch_ivs[d]))
        cloner = cloner_cls(subst, dict(kernel_values))
        if isinstance(cloner, ClampingCloner):
            cloner.global_buffers = {kernel_values[a] for a in kernel_args}
        return cloner

    def micro(name: str) -> tuple[tile.ForallOp, Block, list[SSAValue]]:
        forall, tivs = block_threads(list(lay.forall), list(lay.forall_names))
        nest, inner, nivs = loop_nest(list(lay.nest), list(lay.nest_names), UNROLL)
        forall.body.block.add_op(nest)
        forall.attributes["llmopt.role"] = StringAttr(name)
        if layout == MMA_LAYOUT:
            forall.attributes["llmopt.layout"] = StringAttr("mma")
        return forall, inner, [*tivs, *nivs]

    # Zero the accumulators.
    init, inner, ivs = micro("init")
    zero = arith.ConstantOp(FloatAttr(0.0, typ))
    inner.add_op(zero)
    for acc in accs:
        inner.add_op(loop.StoreOp(zero.result, acc, acc_map, ivs))
    blocks.body.block.add_op(init)

    # The K loop: every accumulator of the thread takes the same step.
    c0 = arith.ConstantOp(IntegerAttr(0, IndexType()))
    ck = arith.ConstantOp(IntegerAttr(found.reduce.trip_count, IndexType()))
    c1 = arith.ConstantOp(IntegerAttr(1, IndexType()))
    k_block = Block(arg_types=[IndexType()])
    k_iv = k_block.args[0]
    k_iv.name_hint = "k"
    step, inner, ivs = micro("update")
    cloner = point_cloner(*ivs)
    for op_ in found.prologue:
        cloner.clone_into(op_, inner)
    for red, acc in zip(found.reduces, accs, strict=True):
        cloner.values[red.body.block.args[0]] = k_iv
        red_ops = list(red.body.block.ops)
        for red_op in red_ops[:-1]:
            cloner.clone_into(red_op, inner)
        yielded = red_ops[-1].operands[0]
        old = loop.LoadOp(acc, acc_map, ivs)
        total = arith.AddfOp(old.result, cloner.value(yielded, inner))
        inner.add_ops([old, total, loop.StoreOp(total.result, acc, acc_map, ivs)])
    k_block.add_ops([step, scf.YieldOp()])
    k_loop = scf.ForOp(c0.result, ck.result, c1.result, [], Region(k_block))
    k_loop.attributes["llmopt.role"] = StringAttr("k_loop")
    blocks.body.block.add_ops([c0, ck, c1, k_loop])

    # The epilogue, once per output (of a ragged tile: once per output inside the output).
    epi, inner, ivs = micro("epilogue")
    cloner = point_cloner(*ivs, clamp=False)
    bounds: dict[int, SSAValue | int] = {found.m: m_bound, found.n: n_ext}
    edges = [(found.forall.ivs[d], bounds[d]) for d, cut in ragged.items() if cut]
    if edges:
        inner = guard_inside(inner, [(cloner.value(iv, inner), e) for iv, e in edges])
    for red, acc in zip(found.reduces, accs, strict=True):
        result = loop.LoadOp(acc, acc_map, ivs)
        result.result.name_hint = "sum"
        inner.add_op(result)
        cloner.values[red.result] = result.result
    for other in found.forall.body.block.ops:
        if not isinstance(other, loop.ReduceOp):
            cloner.clone_into(other, inner)
    close_guards(epi.body.block)
    blocks.body.block.add_op(epi)
    return new
