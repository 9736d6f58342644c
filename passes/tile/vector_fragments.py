"""``vector-fragments``: a register-tiled chunk loop reads its shared tiles 16 bytes at a time.

**Matches** a chunk loop ``scf.for %kk = 0 to K step 1`` (the one ``register-tile`` and
``stage-inputs`` make inside the K loop) whose body is index arithmetic followed by one
``tile.forall over block_threads`` with one point per thread that stores only into
``tile.alloc registers`` buffers (the accumulators: several chunk steps then run in one
forall with no barrier lost), in which some ``loop.load`` of
a ``tile.alloc shared`` tile has ``%kk`` as its innermost index (and nowhere else) — a tile
kept in the global buffer's order, whose rows run along K. Such a load is *vectorizable*
when ``V`` consecutive elements (``V`` = 16 bytes, 4 for ``f32``) start at a multiple of
``V``: ``K`` and the tile's row pitch (after ``pad-shared``: 36 words for rows of 32) are
multiples of ``V``. Its other indices may use the forall's induction variables, the
``loop.for`` around it in the forall (the micro-tile's ``mi``/``nj``) and values defined
before the chunk loop.

**Produces**, for ``kk = V·kq + kv``::

    scf.for %kq = 0 to K/V {
      tile.forall (%ti, %tj) over block_threads {
        loop.for %mi { tile.copy %a[.., mi·16 + ti, V·kq] to %fa[ti, tj, mi, 0] count V }
        loop.for %nj { tile.copy %b[.., nj·16 + tj, V·kq] to %fb[ti, tj, nj, 0] count V }
        scf.for %kv = 0 to V {             // unrolled; %kk = V·kq + kv
          <the old body, the vectorizable loads reading %fa[ti, tj, mi, kv] …>
        }
      }
    }

with one ``tile.alloc registers`` fragment per distinct vectorizable load (same tile, same
indices), ``[forall extents…, extents of the loops its indices use…, V]``. Every other use
of ``%kk`` (scalar loads of other tiles, masks) sees ``V·kq + kv``. The multiply-adds run
in the same order, so the results are bit-identical.

**Why** a thread of a 8×4 micro-tile reads, per ``kk``, 8 elements of one tile and 4 of the
other: 12 shared-memory loads for 32 multiply-adds, which keeps the shared-memory pipe as
busy as the FMA units. NVRTC merges some consecutive scalar loads into vector loads, but
only where it can prove alignment, and mixes 16-, 8- and 4-byte loads. With fragments every
read is one 16-byte ``ld.shared.v4`` (``kernel-to-cuda`` prints a ``float4`` access), a
quarter of the load instructions. Rows padded to 36 words put 8 consecutive rows' 16-byte
pieces in distinct banks, so a warp reading 16 rows needs the minimum of two wavefronts.

Which loads qualify is decided in :mod:`~llmopt.passes.tile._vector_match`, the loops
and copies are built in :mod:`~llmopt.passes.tile._vector_rewrite`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import MemRefType, ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.utils.exceptions import PassFailedException

from llmopt.dialects import loop, tile
from llmopt.passes._rewrite import KeepLocation
from llmopt.passes.tile._schedule import knob
from llmopt.passes.tile._vector_match import Fragment, vectorizable
from llmopt.passes.tile._vector_rewrite import (
    outer_chunk_loop,
    rewrite_chunk_loop,
    sink_kv_loop,
)
from llmopt.passes.tile.stage_inputs import const_int

VECTOR_BYTES = 16
"""The size of one fragment read: a 128-bit shared-memory load."""


@dataclass
class VectorizeChunkLoop(RewritePattern):
    """Rewrite one chunk loop (see the module docstring)."""

    kv_order: int = 0
    """The pass option (0: each kernel's ``kv_order`` knob, default 1; see
    :class:`VectorFragments`)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: scf.ForOp, rewriter: PatternRewriter) -> None:
        if op.iter_args or const_int(op.lb) != 0 or const_int(op.step) != 1:
            return
        extent = const_int(op.ub)
        body = op.body.block
        ops = list(body.ops)
        if extent is None or len(ops) < 2 or not isinstance(ops[-1], scf.YieldOp):
            return
        forall = ops[-2]
        pre = ops[:-2]
        if not (isinstance(forall, tile.ForallOp) and forall.mapping.data == "block_threads"
                and forall.points == _block_size(op) and _in_blocks(op)
                and all(isinstance(p, arith.ConstantOp | arith.AddiOp | arith.MuliOp)
                        for p in pre)):
            return
        if not _private_updates(forall):
            return
        fragments: dict[tuple[object, ...], Fragment] = {}
        for inner in forall.walk():
            if not isinstance(inner, loop.LoadOp):
                continue
            width = _width(inner)
            if width < 2 or extent % width:
                continue
            fragment = vectorizable(inner, op, forall, width)
            if fragment is not None:
                fragments.setdefault(fragment.key(), fragment).loads.append(inner)
        widths = {_width(f.load) for f in fragments.values()}
        if len(widths) != 1:
            return  # nothing to read in fragments, or elements of several sizes
        (width,) = widths
        kernel = tile.enclosing(op, tile.KernelOp)
        order = knob(self.kv_order, kernel, "kv_order", 1) if kernel is not None else 1
        kv_loop = rewrite_chunk_loop(op, forall, pre, list(fragments.values()), extent, width,
                                     rewriter)
        if order == 2:
            sink_kv_loop(kv_loop)


def _width(load: loop.LoadOp) -> int:
    """Elements of ``load``'s type in :data:`VECTOR_BYTES`."""
    typ = load.buffer.type
    assert isinstance(typ, MemRefType)
    return VECTOR_BYTES * 8 // typ.element_type.bitwidth  # type: ignore[attr-defined]


def _private_updates(forall: tile.ForallOp) -> bool:
    """Whether ``forall`` only stores into ``tile.alloc registers`` buffers and hands no work
    on to other threads: then running several chunk steps in one forall, with no barrier
    between them, orders every access as the chunk loop did."""
    for inner in forall.walk():
        if isinstance(inner, tile.ForallOp | tile.CoopReduceOp) and inner is not forall:
            return False
        if isinstance(inner, loop.StoreOp | tile.CopyBase):
            target = inner.buffer if isinstance(inner, loop.StoreOp) else inner.dst
            owner = target.owner
            if not (isinstance(owner, tile.AllocOp) and owner.space.data == "registers"):
                return False
    return True


def _in_blocks(op: Operation) -> bool:
    """Whether ``op`` is nested in a ``tile.forall over blocks`` (where registers live)."""
    parent = op.parent_op()
    while parent is not None:
        if isinstance(parent, tile.ForallOp) and parent.mapping.data == "blocks":
            return True
        parent = parent.parent_op()
    return False


def _block_size(op: Operation) -> int | None:
    """The threads per block of the ``tile.kernel`` around ``op``."""
    kernel = tile.enclosing(op, tile.KernelOp)
    return None if not isinstance(kernel, tile.KernelOp) else math.prod(kernel.block_shape)


@dataclass(frozen=True)
class VectorFragments(ModulePass):
    """Read register-tiled shared tiles 16 bytes at a time (see the module docstring)."""

    name = "vector-fragments"

    kv_order: int = 0
    """Where the loop over a fragment's ``V`` elements goes: 1 around the micro-tile's
    loops (``for kv { for mi { for nj }}}``), 2 inside them (``for mi { for nj { for kv
    }}}``, :func:`sink_kv_loop`, where legal); 0 (the default): each kernel's ``kv_order``
    knob, else 1. Neither order wins everywhere on the H200: order 2 made Qwen2.5-7B's
    112-wide 8 × 7 tiles slower and some of TinyLlama's kernels faster (timings:
    ``bench/results/schedule-constants.md``, ``kv_order``). A choice per kernel, which
    ``llmopt tune`` measures."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.kv_order not in (0, 1, 2):
            raise PassFailedException(f"vector-fragments: kv_order must be 0 (the kernel's "
                                      f"knob), 1 or 2, got {self.kv_order}")
        PatternRewriteWalker(KeepLocation(VectorizeChunkLoop(self.kv_order)),
                             apply_recursively=False).rewrite_module(op)


__all__ = ["VECTOR_BYTES", "Fragment", "VectorFragments", "VectorizeChunkLoop",
           "outer_chunk_loop", "sink_kv_loop"]
