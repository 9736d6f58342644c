"""``prefetch-stages``: the next K chunk's global loads overlap this chunk's arithmetic.

**Matches** the K loop that ``stage-inputs`` makes — ``scf.for %k0 = 0 to n`` directly in a
``tile.forall over blocks``, its body the forall(s) filling shared tiles (``llmopt.role =
"stage"``, each a global load stored into the tile) followed by the chunk loop, or by other
steps that read the tiles and write none of them (``flash-attention``'s loop over key
blocks; see :func:`staged_fills`) — in kernels
whose ``prefetch`` knob is 1 (pass option or ``llmopt.schedule``; off by default), when
every fill has the same number ``R ≤ 32`` of points for each of the block's ``T`` threads.
A loop ``async-copy`` already pipelined (the default, unless ``stages = 1``) has no such
fills left and is not matched.

**Produces** register double buffering: per fill a ``tile.alloc registers`` buffer ``[T, R]``;
a *prefetch* (``tile.forall`` with one point per thread, an unrolled ``loop.for`` over its
``R`` points, each a global load into the thread's registers) and a *commit* (the registers
stored into the shared tile). The loop becomes::

    prefetch(chunk 0); commit
    scf.for %k0 { prefetch(chunk (k0 + 1) mod n); <chunk loop>; commit }

``tile-to-kernel`` places the barriers: before the loop, before each commit (the chunk
loop's reads of the tile must be done) and at the end of the body. The last iteration
prefetches chunk 0 again (in bounds, never read), which keeps the loop free of branches.

**Why** a GPU issues a warp's instructions in order: with the copy ``load; store to shared``
each thread waits for its global loads before it can compute. Loading the next chunk into
registers first lets the loads travel while the unrolled multiply-adds of the current chunk
run, at the cost of ``R`` registers per fill.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IntegerAttr, MemRefType, ModuleOp, StringAttr
from xdsl.ir import Block, Operation, SSAValue
from xdsl.ir.affine import AffineDimExpr, AffineExpr, AffineMap
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
from llmopt.passes.tile._access import (
    UNROLL,
    block_threads,
    iv_range,
    loop_nest,
    simplified,
)
from llmopt.passes.tile._schedule import knob
from llmopt.passes.tile.stage_inputs import block_level_loop, const_int

MAX_ROUNDS = 32


@dataclass(frozen=True)
class Fill:
    """One fill forall: its global load and its store into the shared tile."""

    forall: tile.ForallOp
    load: loop.LoadOp
    store: loop.StoreOp


def match_fill(op: Operation) -> Fill | None:
    """A ``stage`` fill: a forall over block_threads holding ``load`` then ``store``, the
    store into a ``tile.alloc`` at indices made of the forall's ivs only."""
    if not (isinstance(op, tile.ForallOp) and op.mapping.data == "block_threads"):
        return None
    ops = list(op.body.block.ops)
    if len(ops) != 2 or not isinstance(ops[0], loop.LoadOp) or not isinstance(
            ops[1], loop.StoreOp) or ops[1].value is not ops[0].result:
        return None
    if not isinstance(ops[1].buffer.owner, tile.AllocOp):
        return None
    if not all(any(v is iv for iv in op.ivs) for v in ops[1].indices):
        return None
    return Fill(op, ops[0], ops[1])


def staged_fills(op: scf.ForOp) -> list[Fill] | None:
    """The fills of a staged loop, each loading at indices made of the chunk counter, its
    own forall's ivs and values from outside the loop; ``None`` when the body has another
    shape. The body must start with the fills and go on with steps that read the tiles but
    write none of them: the chunk loop of a matrix product (what ``stage-inputs`` makes), or
    the score, softmax and ``P·V`` steps of a key block (what ``flash-attention`` makes)."""
    body = [step for step in op.body.block.ops if not isinstance(step, scf.YieldOp)]
    found: list[Fill] = []
    for step in body:
        fill = match_fill(step)
        if fill is None:
            break
        found.append(fill)
    rest = body[len(found):]
    tiles = {f.store.buffer for f in found}
    if not found or not rest or any(
            isinstance(inner, loop.StoreOp | tile.CopyBase)
            and (inner.buffer if isinstance(inner, loop.StoreOp) else inner.dst) in tiles
            for step in rest for inner in step.walk()):
        return None
    k0 = op.body.block.args[0]
    for f in found:
        if any(v is not k0 and v not in f.forall.ivs and op.is_ancestor(
                v.owner if isinstance(v.owner, Operation) else v.block.parent_op()
                ) for v in f.load.indices):
            return None
    return found


def delinearise(extents: tuple[int, ...], linear: AffineExpr) -> list[AffineExpr]:
    """The row-major coordinates of point ``linear`` in ``extents``."""
    coords = []
    for i, extent in enumerate(extents):
        inner = math.prod(extents[i + 1:])
        coord = linear // inner if inner > 1 else linear
        coords.append(coord % extent if i else coord)
    return coords


def remap(amap: AffineMap, operands: list[SSAValue], replace: dict[SSAValue, AffineExpr],
          new_operands: list[SSAValue]) -> AffineMap:
    """``amap`` over ``operands`` rewritten over ``new_operands``: operands in ``replace``
    become their expressions (over ``new_operands``' dims), the others their own dim."""
    dims = []
    for v in operands:
        if v in replace:
            dims.append(replace[v])
        else:
            if v not in new_operands:
                new_operands.append(v)
            dims.append(AffineDimExpr(new_operands.index(v)))
    n = len(new_operands)
    ranges = [iv_range(v) for v in new_operands]
    new = amap.replace_dims_and_symbols(dims, [], n, 0)
    return AffineMap(n, 0, tuple(simplified(e, n, ranges) for e in new.results))


@dataclass
class PrefetchLoop(RewritePattern):
    """Pipeline one staged K loop (see the module docstring)."""

    prefetch: int

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: scf.ForOp, rewriter: PatternRewriter) -> None:
        kernel = block_level_loop(op)
        if kernel is None:
            return
        if knob(self.prefetch, kernel, "prefetch", 0) != 1:
            return
        threads = kernel.block_shape[0]
        n = const_int(op.ub)
        if const_int(op.lb) != 0 or const_int(op.step) != 1 or not n or n < 2:
            return
        fills = staged_fills(op)
        if fills is None or any(f.forall.points % threads
                                or f.forall.points // threads > MAX_ROUNDS for f in fills):
            return
        k0 = op.body.block.args[0]
        before = InsertPoint.before(op)
        c0 = arith.ConstantOp(IntegerAttr(0, k0.type))
        rewriter.insert(c0, before)
        commits = []
        for f in fills:
            assert f is not None
            rounds = f.forall.points // threads
            typ = f.load.result.type
            regs = tile.AllocOp("registers", MemRefType(typ, [threads, rounds]))
            regs.result.name_hint = "next"
            rewriter.insert(regs, InsertPoint.before(op))
            first = self._prefetch(f, regs.result, rounds, threads, k0, c0.result, None)
            rewriter.insert(first, before)
            rewriter.insert(self._commit(f, regs.result, rounds, threads), before)
            rewriter.insert(self._prefetch(f, regs.result, rounds, threads, k0, k0, n),
                            InsertPoint.before(f.forall))
            commits.append(self._commit(f, regs.result, rounds, threads))
        for commit in commits:
            rewriter.insert(commit, InsertPoint.before(op.body.block.last_op))
        for f in fills:
            assert f is not None
            rewriter.erase(f.forall)
        op.attributes["llmopt.prefetch"] = StringAttr("registers")

    @staticmethod
    def _points(rounds: int, threads: int, role: str
                ) -> tuple[tile.ForallOp, Block, SSAValue, SSAValue]:
        """A forall with one point per thread around an unrolled loop over its rounds:
        the forall, the loop body, the thread and the round."""
        forall, (t,) = block_threads([threads], ["t"])
        nest, inner, (r,) = loop_nest([rounds], ["r"], UNROLL)
        forall.body.block.add_op(nest)
        forall.attributes["llmopt.role"] = StringAttr(role)
        return forall, inner, t, r

    def _prefetch(self, f: Fill, regs: SSAValue, rounds: int, threads: int, k0: SSAValue,
                  chunk: SSAValue, n: int | None) -> tile.ForallOp:
        """Each thread loads its ``rounds`` points of chunk ``chunk`` (``(chunk + 1) mod n``
        when ``n`` is given) into its registers; ``k0`` is the chunk index the fill used."""
        forall, inner, t, r = self._points(rounds, threads, "prefetch")
        new_operands: list[SSAValue] = [r, t, chunk]
        linear = AffineDimExpr(0) * threads + AffineDimExpr(1)
        coords = delinearise(f.forall.shape, linear)
        which: AffineExpr = AffineDimExpr(2)
        if n is not None:
            which = (which + 1) % n
        replace: dict[SSAValue, AffineExpr] = dict(zip(f.forall.ivs, coords, strict=True))
        replace[k0] = which
        gmap = remap(f.load.map.data, list(f.load.indices), replace, new_operands)
        value = loop.LoadOp(f.load.buffer, gmap, new_operands, f.load.clamped)
        inner.add_ops([value, loop.StoreOp(value.result, regs, AffineMap.identity(2), [t, r])])
        return forall

    def _commit(self, f: Fill, regs: SSAValue, rounds: int, threads: int) -> tile.ForallOp:
        """Each thread stores its registers into the shared tile."""
        forall, inner, t, r = self._points(rounds, threads, "commit")
        value = loop.LoadOp(regs, AffineMap.identity(2), [t, r])
        new_operands: list[SSAValue] = [r, t]
        linear = AffineDimExpr(0) * threads + AffineDimExpr(1)
        coords = delinearise(f.forall.shape, linear)
        replace = dict(zip(f.forall.ivs, coords, strict=True))
        smap = remap(f.store.map.data, list(f.store.indices), replace, new_operands)
        inner.add_ops([value, loop.StoreOp(value.result, f.store.buffer, smap, new_operands)])
        return forall


@dataclass(frozen=True)
class PrefetchStages(ModulePass):
    """Prefetch the next K chunk into registers (see the module docstring). Option:
    ``prefetch`` (1: on for every staged kernel; 0: the kernel's ``llmopt.schedule``, off by
    default)."""

    name = "prefetch-stages"

    prefetch: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(KeepLocation(PrefetchLoop(self.prefetch)),
                             apply_recursively=False).rewrite_module(op)
