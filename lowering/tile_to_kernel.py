"""``tile-to-kernel``: Tile IR → Kernel IR, every scheduling decision made explicit.

Matches every ``tile.kernel`` and, inside the resulting kernels, every ``tile.forall``,
``tile.coop_reduce``, ``loop.for``, ``loop.reduce``, ``loop.load`` and ``loop.store``:

* ``tile.kernel @k grid G block B (...)`` → a module-level ``kernel.func @k(buffers) block B``
  (the name made unique) holding the body, and in its place
  ``kernel.launch @k grid G block B smem 0 (buffers)``: ``smem`` is the *dynamic* shared
  memory of the launch, and every shared buffer made here is a statically sized
  ``kernel.shared`` (``kernel-to-cuda`` moves a kernel's buffers into dynamic shared memory,
  and raises ``smem``, when they total more than the 48 KiB CUDA declares statically). Only
  1-D launch shapes (``[n, 1, 1]``) are accepted. Outlined kernels that are identical
  (``dedup-kernels``' structural key: a model's identical layers) then become one, launched
  by each, before anything inside them is lowered: the rest of the pass, and every pass
  after it, sees each distinct kernel once.
* ``tile.forall`` → ``scf.for %p = first to points step stride`` — ``over threads``: first =
  ``block_id * block_dim + thread_id``, stride = ``grid_dim * block_dim``; ``over blocks``:
  ``block_id`` / ``grid_dim``; ``over block_threads``: ``thread_id`` / ``block_dim`` — then
  ``%p`` is delinearised into the forall's ivs with ``arith.remui``/``divui`` by the constant
  extents (innermost fastest). The loop bound is the bounds guard. Over block_threads the
  block size is known: a forall with exactly one point per thread becomes straight-line code
  (``%p`` = thread id, no loop, no guard), and one with ``r ≤ 32`` points per thread for every
  thread (points a multiple of the block) a loop ``%round = 0 to r`` marked ``unroll`` with
  ``%p = %round · B + thread_id`` — its iterations' loads can all be in flight at once.
* ``loop.for`` → ``scf.for 0 to extent step 1``; ``loop.reduce`` → ``scf.for`` with one
  ``iter_args`` accumulator starting at the identity of its kind (add 0, mul 1, max -inf,
  min +inf), combined by ``arith.addf/mulf/maximumf/minimumf`` (integers: ``addi/muli/
  maxsi/minsi``).
* ``loop.load``/``loop.store`` → ``kernel.load``/``kernel.store`` with each coordinate of the
  affine map computed by ``arith`` index ops. ``floordiv``/``mod``/``ceildiv`` are exact for
  negative operands (``floordivsi``, ``((a rem c) + c) rem c``, ``ceildivsi``) unless a range
  analysis over the loop extents proves the operand non-negative (then ``divui``/``remui``,
  or nothing when ``a mod c`` is ``a``). A ``clamp`` load (or copy source) gets each
  coordinate the range analysis cannot bound below the buffer's last index through an
  ``arith.minsi`` with it (the innermost of a copy of ``n`` with ``extent - n``).
* ``tile.coop_reduce`` over a block of B threads (B a multiple of 32): each thread folds
  ``k = tid, tid + B, ...`` into a private accumulator (where B divides a static trip count
  of at most 32 B, in an ``scf.for %round = 0 to n/B`` marked ``unroll = 0``, so the
  thread's loads are independent; one round is the body alone; option ``unroll_folds``),
  the warp folds it with
  ``kernel.shuffle_xor`` 16, 8, 4, 2, 1 (every lane gets the warp's total); with more than one
  warp, lane 0 of each warp writes it into a ``kernel.shared : memref<NWARPxT>`` buffer
  (one per coop_reduce, declared at the top of the kernel), ``kernel.barrier``, every thread
  folds the NWARP partials in the same order (so all threads hold the same bits), and a
  second ``kernel.barrier`` lets the shared buffer be reused.
* ``tile.copy``/``tile.async_copy %src[map_s(ivs)] to %dst[map_d(ivs)] count n`` →
  ``kernel.copy``/``kernel.async_copy %src[...] to %dst[...] count n``, both index lists
  computed like a ``loop.load``'s (a ``tile.alloc registers`` side loses its distributed
  dimensions, as in loads and stores); with option ``zero_fill`` (off by default) a clamped
  ``tile.async_copy`` whose source's innermost extent is static and a multiple of its count
  also gets ``if %ok``, every clamped coordinate at most its limit: where ``%ok`` is false
  the copy reads nothing and writes zeros, so the rows of a ragged tile past the edge cost
  no memory traffic (without it each reads the buffer's last row, every block of a row band
  the same few lines at once); ``tile.async_commit``/``async_wait`` →
  ``kernel.async_commit``/``async_wait``.
* Inside a ``tile.forall over blocks`` the ops directly in its body run one after another
  for the whole block: a ``kernel.barrier`` is inserted between two of them when one writes
  a buffer that the other (run by other threads: a forall over block_threads or a
  coop_reduce) reads or writes. An asynchronous copy counts as reading its source but not as
  writing its destination (see :func:`buffer_effects`); a ``kernel.barrier`` already in the
  body orders the steps around it like an inserted one. Different points of a forall are
  independent (they touch different elements), so one block moving on to its next point
  needs no barrier; for the same reason the foralls over threads or blocks that sit side by
  side in one kernel must not depend on each other (``loop-to-tile`` puts dependent nests in
  separate kernels).

**Runtime extents** (a symbolic length): a loop or cooperative reduction with a runtime bound
runs ``scf.for`` up to that value; a forall with runtime extents runs to their product (the
static part a constant) and delinearises by the runtime extent along those dims (the unrolled
and one-point forms need a static point count); a launch with a runtime grid keeps it
(``kernel.launch @k grid [%grid max 8, 1, 1]``), and the length is a kernel parameter like a
buffer. Buffers with ``?`` extents stay row-major ``memref<1x?x64xf32>``; a clamped access
along a ``?`` extent clamps to the kernel's length parameter (``min(i, %n - 1)``).

Why: Kernel IR has no implicit behaviour left — every thread index, bound check, barrier
and shuffle is an op — so the CUDA printer below it only prints.

The patterns live by concern in ``_kernel_access`` (loads, stores, copies), ``_kernel_loops``
(loops, foralls, cooperative reductions), ``_kernel_barriers`` and ``_kernel_buffers``, on
the builders of ``_kernel_emit``.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from llmopt.dialects import kernel, tile
from llmopt.lowering._kernel_access import (
    LowerAsyncCommit,
    LowerAsyncWait,
    LowerCopy,
    LowerLoad,
    LowerPrefetch,
    LowerStore,
)
from llmopt.lowering._kernel_barriers import InsertRowBarriers
from llmopt.lowering._kernel_buffers import LowerAlloc
from llmopt.lowering._kernel_loops import (
    LowerCoopReduce,
    LowerFor,
    LowerForall,
    LowerLaneReduce,
    LowerReduce,
)
from llmopt.lowering._symbols import unique_name
from llmopt.passes._rewrite import KeepLocation, fail
from llmopt.passes.kernel.dedup_kernels import DedupKernels


@dataclass
class OutlineKernel(RewritePattern):
    """``tile.kernel`` → module-level ``kernel.func`` + ``kernel.launch`` in its place."""

    taken: set[str]

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.KernelOp, rewriter: PatternRewriter) -> None:
        grid, block = op.grid_shape, op.block_shape
        if grid[1:] != (1, 1) or block[1:] != (1, 1):
            raise fail(op, f"only 1-D launch shapes are supported, got grid {list(grid)} "
                           f"block {list(block)}")
        top: Operation = op
        while (parent := top.parent_op()) is not None and not isinstance(parent, ModuleOp):
            top = parent
        if top is op:
            raise fail(op, "a tile.kernel must sit inside a function")
        name = unique_name(self.taken, op.sym_name.data)
        body = rewriter.move_region_contents_to_new_regions(op.body)
        body.block.add_op(kernel.ReturnOp())
        fn = kernel.FuncOp(name, [a.type for a in body.block.args], block, body)
        fn.attributes |= op.attributes
        rewriter.insert(fn, InsertPoint.before(top))
        rewriter.replace(op, kernel.LaunchOp(name, grid, block, op.buffers,
                                             grid_size=op.grid_size))


@dataclass(frozen=True)
class TileToKernel(ModulePass):
    """Lower Tile IR to Kernel IR (see the module docstring). Option ``unroll_folds``
    (default ``true``): a cooperative reduction whose static length the block's threads
    divide folds each thread's points in a fixed loop marked for full unrolling, so their
    loads are in flight at once; ``false`` keeps the strided loop for every reduction (the
    form to compare with). Option ``zero_fill`` (default ``false``): a clamped asynchronous
    copy reads nothing where a coordinate was clamped (``kernel.async_copy … if %ok``, zeros
    written) instead of the buffer's last row or column again."""

    name = "tile-to-kernel"

    unroll_folds: bool = True
    zero_fill: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        taken: set[str] = set()
        for inner in op.walk():
            sym = inner.properties.get("sym_name")
            if isinstance(sym, StringAttr) and not isinstance(inner, tile.KernelOp):
                taken.add(sym.data)

        def walk(*patterns: RewritePattern) -> None:
            PatternRewriteWalker(
                KeepLocation(GreedyRewritePatternApplier(list(patterns))),
                apply_recursively=False,
            ).rewrite_module(op)

        walk(OutlineKernel(taken))
        # Identical layers give identical kernels: lower each distinct one once.
        DedupKernels().apply(ctx, op)
        walk(InsertRowBarriers())
        walk(LowerAlloc())
        walk(LowerLoad(), LowerStore(), LowerCopy(self.zero_fill), LowerPrefetch(),
             LowerAsyncCommit(), LowerAsyncWait())
        walk(LowerForall(), LowerCoopReduce(self.unroll_folds), LowerLaneReduce(), LowerFor(),
             LowerReduce())
