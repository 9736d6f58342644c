"""``vector-rows``: the threads of a block that works on a row take 16 bytes at a time.

**Matches**, in any ``tile.kernel``, the two constructs ``loop-to-tile`` gives a row kernel
(an RMSNorm, a softmax: a ``tile.forall over blocks`` of rows):

* a ``tile.coop_reduce`` with a static extent ``E`` and a straight-line body (loads and
  side-effect-free ``arith``/``math`` ops) of which at least one load is contiguous along
  the reduction's variable ``%r``;
* a ``tile.forall over block_threads`` with static extents, no ``llmopt.layout`` (a register
  tile's forall is another pass's business) and a straight-line body over kernel buffers
  only, whose stores are all contiguous along its innermost variable and whose loads read no
  buffer it writes.

"Contiguous" and the chunk width ``V`` are those of ``vector-elementwise``
(:mod:`~llmopt.passes.tile._chunks`): ``V`` is the elements of the widest contiguous access
in 16 bytes, at least 2, and divides the extent and the access's offsets.

**Produces**, for the reduction (``%r = V·%q + %v``)::

    %m = tile.coop_reduce max %q = 0 to E/V : f32 {
      %x = tile.alloc registers : memref<Vxbf16>       // the thread's own, one per load
      tile.copy %in[%row, %q * V] to %x[0] count V
      %p = loop.reduce max %v = 0 to V : f32 {         // unrolled
        <the body; a contiguous load reads %x[%v]>
        loop.yield %e : f32
      }
      tile.yield %p : f32
    }

and for the map ``vector-elementwise``'s chunk form: the innermost extent divided by ``V``,
one copy in per contiguous load and one out per store around the unrolled element loop. The
block keeps its threads; each now strides over chunks instead of elements.

**Numerics.** The map computes each element as before. The reduction's thread folds its
chunks' elements in order, chunk after chunk: the same elements in a different
association than one element a round, so the rounding of the total changes, as any change
of the block's threads would (the interpreters follow the new order exactly).

**Why** a row kernel reads its row once per reduction and once more in its map, one 2-byte
element a thread a round: an RMSNorm row of 2048 halves is eight loads a thread per pass,
and a softmax row three passes of them. With ``V`` elements a thread each pass is one
128-bit load, and each store one 128-bit store.

**Opt-in** (not in ``lower-to-cuda``; add it before ``tile-to-kernel`` with
``registry.insert_before``): the op suite's RMSNorm and softmax kernels and a decode step's
norms measured no faster with it (``bench/results/vector-rows-h100.md``). Those kernels wait
on their blocks' memory round trips and barriers, not on their instructions; the chunk form
is the starting point for removing round trips (one copy of the row shared by every pass,
the map's operands loaded before the reductions).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from llmopt.dialects import loop, tile
from llmopt.passes._rewrite import KeepLocation
from llmopt.passes.tile._chunks import (
    VECTOR_BYTES,
    chunk_body,
    chunk_forall,
    chunk_width,
    contiguous,
    innermost_multiples,
    scalar_op,
    varying_values,
)

LAYOUT_ATTR = "llmopt.layout"
"""A forall that distributes a register tile (``register-tile``'s thread layouts)."""


@dataclass
class VectorizeRowReduce(RewritePattern):
    """One qualifying ``tile.coop_reduce`` (see the module docstring)."""

    limit: int = VECTOR_BYTES

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.CoopReduceOp, rewriter: PatternRewriter) -> None:
        body = op.body.block
        if op.bound is not None or not all(
                scalar_op(o) or isinstance(o, tile.YieldOp) for o in body.ops):
            return
        varying = varying_values(body, op.iv)
        loads = [o for o in body.ops if isinstance(o, loop.LoadOp)]
        forms = {ld: m for ld in loads
                 if (m := innermost_multiples(ld, op.iv, varying)) is not None}
        if not forms:
            return
        width = chunk_width(op.trip_count, list(forms), self.limit)
        if not width:
            return
        chunked = [ld for ld in loads if ld in forms and contiguous(ld, forms[ld], width)]
        if not chunked:
            return
        op.properties["extent"] = IntegerAttr(op.trip_count // width, i64)
        chunk_body(body, op.iv, varying, chunked, [], width, rewriter, fold=op.kind.data)


@dataclass
class VectorizeRowMap(RewritePattern):
    """One qualifying ``tile.forall over block_threads`` (see the module docstring)."""

    limit: int = VECTOR_BYTES

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.ForallOp, rewriter: PatternRewriter) -> None:
        if (op.mapping.data != "block_threads" or LAYOUT_ATTR in op.attributes
                or op.runtime_sizes):
            return
        kernel = tile.enclosing(op, tile.KernelOp)
        if kernel is None:
            return
        outer = dict(zip(kernel.body.block.args, kernel.buffers, strict=True))
        accesses = [o for o in op.body.block.walk()
                    if isinstance(o, loop.LoadOp | loop.StoreOp)]
        if any(a.buffer not in outer for a in accesses):  # registers, shared: not ours
            return
        chunk_forall(op, outer, self.limit, rewriter)


@dataclass(frozen=True)
class VectorRows(ModulePass):
    """Give the threads of a row's cooperative reductions and map 16 bytes of every
    contiguous access (see the module docstring)."""

    name = "vector-rows"

    bytes: int = VECTOR_BYTES
    """The widest access a thread makes (4, 8 or 16); 0 leaves every kernel as it is."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.bytes == 0:  # llmopt.options checks the range
            return
        patterns = GreedyRewritePatternApplier([VectorizeRowReduce(self.bytes),
                                                VectorizeRowMap(self.bytes)])
        PatternRewriteWalker(KeepLocation(patterns), apply_recursively=False
                             ).rewrite_module(op)


__all__ = ["VectorRows", "VectorizeRowMap", "VectorizeRowReduce"]
