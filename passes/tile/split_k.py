"""``split-k``: a skinny matrix product is cut along K into slices summed by a second kernel.

**Matches** the same kernels as ``register-tile`` (one ``tile.forall over threads`` with one
or more ``loop.reduce add`` over floats and the same K — the fused gate and up projections
have two —, a prologue and an epilogue; see
:func:`~llmopt.passes.tile.register_tile.match_contraction`) when the split factor ``S``
(knob ``split_k``) is above 1 and divides K. A kernel whose K the pass option does not
divide stays whole; one whose own ``llmopt.schedule`` asks for such a split stays whole with
a warning. Runtime rows (a symbolic length, ``in [%n max 256, 32]`` with ``%n`` the kernel's
length parameter) are matched as ``register-tile`` matches them: the split is chosen for the
maximum.

**Produces** a ``memref.alloc`` of partial sums ``[S, band…]`` per reduction before the
kernel and two kernels in its place: ``<name>_split`` computes, for every slice ``s`` and
output, each reduction's sum over ``k = s·K/S … (s+1)·K/S − 1`` (a contraction with ``s`` as
a batch dimension, which ``register-tile`` then tiles); ``<name>`` sums the ``S`` partials
of each output in slice order and applies the original epilogue (bias, residual,
``silu(g)·u`` …). With runtime rows the partial sums are ``memref.alloc(%len)`` with ``?``
on the rows (``%len`` the function-level length the kernel's parameter is bound to), both
kernels take the length parameter and run their foralls to it, and each launch gets a grid
computed from ``%len`` before the kernels, ``ceildiv(%len · points per row, 256)`` blocks
(``grid [%g max G, 1, 1]``, ``G`` the grid at the maximum); the old launch's grid is erased.

**Why** ``register-tile`` gives each block a ``bm × bn`` output tile; a product with few
rows (a prompt of 32 or 128 tokens) has too few tiles to occupy every multiprocessor, and
each block walks all of K alone. ``S`` slices make ``S`` times as many blocks; the price is
one write and one read of ``S × M × N`` partial sums. The heuristic
(:func:`~llmopt.passes.tile._schedule.choose_product_schedule`) picks the register tile and
the slices together by modelled time: slices until the tiles reach one block per
multiprocessor, each at least 128 long, and four slices of a long K (at least 896 each,
measured faster on the H200); the tile it chose goes into the partial kernel's
``llmopt.schedule``, so ``register-tile`` uses it. The sum is
reassociated (slices first), which changes the rounding within the usual tolerance.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import memref
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    DictionaryAttr,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    i64,
)
from xdsl.ir import SSAValue
from xdsl.ir.affine import AffineMap
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from llmopt.dialects import loop, tile
from llmopt.passes._rewrite import KeepLocation
from llmopt.passes.tile._access import Cloner, Linear, threads_grid
from llmopt.passes.tile._schedule import (
    SCHEDULE_ATTR,
    RegisterTile,
    knob,
)
from llmopt.passes.tile.register_tile import (
    MMA_LAYOUT,
    Contraction,
    contraction_schedule,
    erase_if_unused,
    match_contraction,
)

THREADS = 256


def _grid(points: int) -> list[int]:
    return [max(1, min(-(-points // THREADS), 2**31 - 1)), 1, 1]


@dataclass
class SplitContraction(RewritePattern):
    """Split one matched kernel (see the module docstring)."""

    split_k: int
    arch: str
    roles: int = 0

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.KernelOp, rewriter: PatternRewriter) -> None:
        if op.attributes.get("llmopt.split") is not None:
            return
        found = match_contraction(op)
        if found is None:
            return
        ext = found.extents
        k_ext = found.reduce.trip_count
        typ = found.reduce.result.type
        chosen = contraction_schedule(found, self.arch, roles=knob(self.roles, op, "roles", 0))
        if chosen is None:
            return
        tile_, auto, tensor_cores = chosen
        split = knob(self.split_k, op, "split_k", auto)
        if split > 1 and k_ext % split:
            if not self.split_k:  # the kernel's own schedule asked for it
                warnings.warn(f"split-k: @{op.sym_name.data} keeps its K loop of {k_ext} "
                              f"whole: its split_k={split} does not divide it", stacklevel=2)
            return
        if split <= 1:
            return
        part, total = split_kernels(op, found, split, tile_ if split == auto else None,
                                    tensor_cores)
        # with runtime rows: the function-level length the kernel's length argument binds
        length = None if found.length is None else op.buffers[found.length.index]
        shape = [split, *ext]
        if length is not None:
            shape[1 + found.m] = DYNAMIC_INDEX
        partials = []
        for _ in found.reduces:
            alloc = memref.AllocOp([] if length is None else [length], [],
                                   MemRefType(typ, shape))
            alloc.memref.name_hint = "partial"
            rewriter.insert(alloc, InsertPoint.before(op))
            partials.append(alloc.memref)
        grids: list[SSAValue | None] = [None, None]
        if length is not None:
            per_row = math.prod(ext) // ext[found.m]
            for i, points in enumerate((split * per_row, per_row)):
                ops, grids[i] = threads_grid(length, points, THREADS)
                rewriter.insert(ops, InsertPoint.before(op))
        old_grid = op.grid_size
        rewriter.replace(op, [part(partials, grids[0]), total(partials, grids[1])], [])
        if old_grid is not None:
            erase_if_unused(old_grid, rewriter)


KernelBuilder = Callable[[Sequence[SSAValue], SSAValue | None], tile.KernelOp]


def split_kernels(op: tile.KernelOp, found: Contraction, split: int,
                  tile_: RegisterTile | None = None, tensor_cores: bool = False
                  ) -> tuple[KernelBuilder, KernelBuilder]:
    """Builders of the two kernels (partial sums, total), given one partial-sum buffer per
    reduction and, with runtime rows, the kernel's runtime grid; ``tile_``, the register
    tile the slices were chosen for, goes into the partial kernel's ``llmopt.schedule``
    unless that already names one (with ``blocked = 3`` where it was chosen for the
    ``tensor_cores``)."""
    ext = found.extents
    rank = len(ext)
    slice_len = found.reduce.trip_count // split
    typ = found.reduce.result.type

    def new_kernel(name: str, partials: Sequence[SSAValue], points: int,
                   grid: SSAValue | None
                   ) -> tuple[tile.KernelOp, dict[SSAValue, SSAValue], Sequence[SSAValue]]:
        """The kernel with the old one's buffers and ``partials``, its copies of the ops
        outside the forall, the old-to-new value map and the partials' block arguments."""
        buffers = [*op.buffers, *partials]
        kern = tile.KernelOp(name, _grid(points), [THREADS, 1, 1], buffers, grid_size=grid)
        kern.attributes |= {k: v for k, v in op.attributes.items() if k != SCHEDULE_ATTR}
        kern.attributes["llmopt.split"] = StringAttr("partial" if name.endswith("_split")
                                                     else "total")
        values = dict(zip(op.body.block.args, kern.body.block.args, strict=False))
        for old_arg, new_arg in values.items():
            new_arg.name_hint = old_arg.name_hint
        for other in op.body.block.ops:
            if other is not found.forall:
                copy = other.clone(value_mapper=values)
                kern.body.block.add_op(copy)
                values.update(zip(other.results, copy.results, strict=True))
        return kern, values, kern.body.block.args[len(op.buffers):]

    def rows(values: dict[SSAValue, SSAValue], shift: int) -> dict[int, SSAValue]:
        """The forall's runtime size: the new kernel's length argument on the rows."""
        return {} if found.length is None else {shift + found.m: values[found.length]}

    def part(partials: Sequence[SSAValue], grid: SSAValue | None) -> tile.KernelOp:
        kern, values, stores = new_kernel(f"{op.sym_name.data}_split", partials,
                                          split * math.prod(ext), grid)
        knobs = dict(op.attributes[SCHEDULE_ATTR].data) if isinstance(
            op.attributes.get(SCHEDULE_ATTR), DictionaryAttr) else {}
        if tile_ is not None and not {"bm", "bn", "tm", "tn"} & knobs.keys():
            knobs |= {name: IntegerAttr(getattr(tile_, name), i64)
                      for name in ("bm", "bn", "tm", "tn")}
            if tensor_cores and "blocked" not in knobs:
                knobs["blocked"] = IntegerAttr(MMA_LAYOUT, i64)
        if knobs:
            kern.attributes[SCHEDULE_ATTR] = DictionaryAttr(knobs)
        forall = tile.ForallOp([split, *ext], "threads", sizes=rows(values, 1))
        kern.body.block.add_op(forall)
        s, *ivs = forall.ivs
        s.name_hint = "s"
        for new_iv, old_iv in zip(ivs, found.forall.ivs, strict=True):
            new_iv.name_hint = old_iv.name_hint
        outer = Cloner({}, values | dict(zip(found.forall.ivs, ivs, strict=True)))
        for op_ in found.prologue:
            outer.clone_into(op_, forall.body.block)
        for old, buffer in zip(found.reduces, stores, strict=True):
            red = loop.ReduceOp("add", slice_len, typ)
            kk = red.body.block.args[0]
            kk.name_hint = "kk"
            cloner = Cloner({old.body.block.args[0]: Linear.of((slice_len, s), (1, kk))},
                            dict(outer.values))
            body_ops = list(old.body.block.ops)
            for body_op in body_ops[:-1]:
                cloner.clone_into(body_op, red.body.block)
            red.body.block.add_op(loop.YieldOp(cloner.value(body_ops[-1].operands[0],
                                                            red.body.block)))
            store = loop.StoreOp(red.result, buffer, AffineMap.identity(rank + 1), [s, *ivs])
            forall.body.block.add_ops([red, store])
        return kern

    def total(partials: Sequence[SSAValue], grid: SSAValue | None) -> tile.KernelOp:
        kern, values, loads = new_kernel(op.sym_name.data, partials, math.prod(ext), grid)
        forall = tile.ForallOp(list(ext), "threads", sizes=rows(values, 0))
        kern.body.block.add_op(forall)
        ivs = list(forall.ivs)
        for new_iv, old_iv in zip(ivs, found.forall.ivs, strict=True):
            new_iv.name_hint = old_iv.name_hint
        cloner = Cloner({}, values | dict(zip(found.forall.ivs, ivs, strict=True)))
        for old, buffer in zip(found.reduces, loads, strict=True):
            red = loop.ReduceOp("add", split, typ)
            s = red.body.block.args[0]
            s.name_hint = "s"
            load = loop.LoadOp(buffer, AffineMap.identity(rank + 1), [s, *ivs])
            red.body.block.add_ops([load, loop.YieldOp(load.result)])
            forall.body.block.add_op(red)
            cloner.values[old.result] = red.result
        for other in found.forall.body.block.ops:
            if other not in found.reduces:
                cloner.clone_into(other, forall.body.block)
        return kern

    return part, total


@dataclass(frozen=True)
class SplitK(ModulePass):
    """Split the K loop of skinny matrix products (see the module docstring). Options:
    ``split_k`` (slices; 0 = the kernel's ``llmopt.schedule`` or the heuristic, 1 = never),
    ``arch``, ``roles`` (how many the products are scheduled for, see ``register-tile``)."""

    name = "split-k"

    split_k: int = 0
    arch: str = "sm_90"
    roles: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(KeepLocation(SplitContraction(self.split_k, self.arch,
                                                           self.roles)),
                             apply_recursively=False).rewrite_module(op)
