"""``mma-fragments``: a register-tiled chunk loop runs on the tensor cores, exactly.

**Matches** a chunk loop ``scf.for %kk = 0 to K step 1`` (``K`` a multiple of 8) whose body
is index arithmetic and one ``tile.forall (%wi, %wj, %g, %t) over block_threads`` in the
tensor-core layout (``register-tile{blocked=3}``, marked ``llmopt.layout = "mma"``) holding
the nest ``loop.for %i, %rh, %j, %rl`` of the thread's outputs, whose body is nothing but
updates ``acc[wi, wj, g, t, i, rh, j, rl] += a · b``, ``a`` and ``b`` loads of shared tiles
(what ``stage-inputs`` makes): ``a`` depends on the output's row (``g + 8·rh``, ``i``,
``wi``) and ``%kk``, ``b`` on its column (``2·t + rl``, ``j``, ``wj``) and ``%kk``, with
``%kk`` alone in one index. Several updates (the gate and up sums of a fused projection)
may share ``a``. The factors are ``f32`` loads (TF32 products, below) or, all of one type,
``arith.extf`` of ``bf16``/``f16`` loads: those take ``ldmatrix`` and ``m16n8k16``
``mma.sync`` where ``K`` is a multiple of 16 and each tile keeps ``%kk`` innermost with
rows of a multiple of 8 elements (:mod:`llmopt.passes.tile._mma_halves`, which says what
they become; the knobs below do not apply to them). A sum that is not ``f32`` is left alone.

**Produces**, for ``f32`` factors and ``kk = 8·(P·kqo + kqi) + k`` (``k < 8``, ``P`` the
knob ``promote``)::

    scf.for %kqo = 0 to K/(8·P) {                // the chunk loop's attributes
      tile.forall (%wi, %wj, %g, %t) over block_threads {
        part[…] = 0
        scf.for %kqi = 0 to P {                  // unrolled; kq = P·kqo + kqi
          loop.for %i, %q {                      // A fragments: rows g, g+8; columns t, t+4
            %x = loop.load a[rh := q mod 2, kk := 8·kq + t + 4·(q floordiv 2)]
            ah[…, i, q] = %x with its low 13 bits cleared;  al[…, i, q] = %x - ah
          }
          loop.for %j, %q {                      // B fragments: column g; rows t, t+4
            %y = loop.load b[2·t + rl := g, kk := 8·kq + t + 4·q];  bh, bl likewise
          }
          loop.for %i, %j { part[i, j] = mma.sync (al) * (bh) + (part[i, j]) }
          loop.for %i, %j { part[i, j] = mma.sync (ah) * (bl) + (part[i, j]) }
          loop.for %i, %j { part[i, j] = mma.sync (ah) * (bh) + (part[i, j]) }
        }
        loop.for %i, %j { acc[i, rh, j, rl] += part[i, j, 2·rh + rl] }   // in f32
      }
    }

with ``tile.alloc registers`` fragments ``[forall extents…, I, 4]`` (``a``) and ``[…, J, 2]``
(``b``) per distinct load and partial sums ``[…, I, J, 4]`` per update. Knobs (pass options,
or the kernel's schedule): ``promote`` (default 4, or 2 or 1 where the chunk's steps of 8
are not a multiple of 4): how many steps of 8 the tensor cores sum before the ``f32`` add;
``order`` (default 2): 2 as above, the three products term by term over every ``(i, j)``
(independent ``mma.sync`` back to back), 1 each ``(i, j)``'s three at once (with
``promote=1`` straight from zero into the accumulators, no partial-sum buffer); ``terms``
(default 3): 1 one ``mma.sync`` of the rounded operands (TF32 precision: about three decimal
digits, not an ``f32`` product — ``--check-numerics`` rejects it at ``f32`` tolerances);
``split`` (default 3): how an operand becomes ``hi + lo`` — 1 ``hi = mma.to_tf32 x``, ``lo
= mma.to_tf32 (x - hi)``; 2 the same ``hi``, ``lo = x - hi`` unrounded (the tensor core
reads a TF32 operand's top 19 bits, truncating it); 3 ``hi`` = ``x`` with its low 13 bits
cleared (``arith.bitcast``, ``arith.andi``) and ``lo = x - hi`` (exact) unrounded.

**Why** the H200's FP32 units peak at 67 TFLOP/s, its TF32 tensor cores several times
higher. Splitting each operand into a TF32 ``hi`` and the TF32 rounding of ``x - hi``
keeps 22 of the ``f32`` mantissa's 24 bits, and ``ah·bh + ah·bl + al·bh`` drops only
``al·bl`` (below ``2⁻²²`` relative); with ``split=3`` each operand keeps at least 22 bits,
truncated, and the dropped term stays below ``2⁻²⁰``. ``cvt.rna.tf32.f32`` costs four
instructions on sm_90 (add, compare, select, and), two per operand element with
``split=1``: ``split=3`` needs one ``and`` and one subtraction, so it is the faster form,
and its errors stay at the ``split=1`` form's order. The tensor core adds its products to
``C`` with truncation, so summing a whole ``K`` on it loses accuracy against the FMA loop;
summing ``P`` steps from zero and adding those partial sums in ``f32`` (round to nearest)
brings the error *below* the FMA loop's, because each ``f32`` add now takes 8·P terms at
once. Results round differently from the FMA loop, so they are not bit-identical to it.
The timings and errors: ``bench/results/schedule-constants.md`` (``mma-fragments``).
Fragment reads stay conflict-free when ``pad-shared`` pads rows to ``≡ 4 (mod 32)`` words
(or 20, as for rows of 16): lane ``4·g + t`` reads a distinct bank.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import (
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    f32,
)
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint
from xdsl.utils.exceptions import PassFailedException

from llmopt.dialects import loop, mma, tile
from llmopt.passes._rewrite import KeepLocation
from llmopt.passes.tile import _mma_halves
from llmopt.passes.tile._access import UNROLL, counted_for
from llmopt.passes.tile._mma_match import K_STEP, Operand, Update, match_chunk_loop
from llmopt.passes.tile._mma_nests import fragment_nest, product_nests
from llmopt.passes.tile._schedule import knob
from llmopt.passes.tile.vector_fragments import outer_chunk_loop

SPLITS = (1, 2, 3)
"""Ways to split an ``f32`` into TF32 ``hi`` and ``lo`` (the knob ``split``)."""
TERMS = (1, 3)
"""Tensor-core products per ``f32`` product: 1 (TF32 precision) or 3 (``f32``)."""

@dataclass
class MmaChunkLoop(RewritePattern):
    """Rewrite one chunk loop (see the module docstring)."""

    terms: int = 0
    order: int = 0
    promote: int = 0
    split: int = 0

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: scf.ForOp, rewriter: PatternRewriter) -> None:
        chunk = match_chunk_loop(op)
        if chunk is None or chunk.extent % K_STEP:
            return
        forall, nest, ivs, kk = chunk.forall, chunk.nest, chunk.ivs, chunk.kk
        updates, operands, loaded = chunk.updates, chunk.operands, chunk.loaded
        extent = chunk.extent
        if mma.is_half(loaded):
            if extent % _mma_halves.K_STEP == 0 and _mma_halves.fits(operands.values(), kk, ivs):
                _mma_halves.rewrite(op, forall, nest, ivs, updates, operands, extent, rewriter)
            return
        kernel = tile.enclosing(op, tile.KernelOp)

        def setting(option: int, name: str, default: int) -> int:
            return knob(option, kernel, name, default) if kernel is not None else option or default

        terms = setting(self.terms, "mma_terms", 3)
        if terms not in TERMS:
            raise PassFailedException(f"mma-fragments: terms must be 1 or 3, got {terms}")
        order = setting(self.order, "mma_order", 2)
        if order not in (1, 2):
            raise PassFailedException(f"mma-fragments: order must be 1 or 2, got {order}")
        steps = extent // K_STEP
        promote = setting(self.promote, "mma_promote",
                          next(p for p in (4, 2, 1) if steps % p == 0))
        if promote < 1 or extent % (K_STEP * promote):
            raise PassFailedException(f"mma-fragments: promote must divide the chunk's "
                                      f"{steps} steps of 8, got {promote}")
        split = setting(self.split, "mma_split", 3)
        if split not in SPLITS:
            raise PassFailedException(f"mma-fragments: split must be one of {SPLITS}, "
                                      f"got {split}")
        _rewrite(op, forall, nest, ivs, updates, operands, extent, terms, order, promote,
                 split, rewriter)


def _rewrite(chunk: scf.ForOp, forall: tile.ForallOp, nest: list[loop.ForOp],
             ivs: dict[str, SSAValue], updates: list[Update],
             operands: dict[tuple[object, ...], Operand], extent: int, terms: int,
             order: int, promote: int, split: int, rewriter: PatternRewriter) -> None:
    """Replace ``chunk`` by the tensor-core loop of the module docstring."""
    anchor: Operation = chunk
    while not (isinstance(owner := anchor.parent_op(), tile.ForallOp)
               and owner.mapping.data == "blocks"):
        assert owner is not None
        anchor = owner
    extents = {"i": nest[0].trip_count, "j": nest[2].trip_count}
    for operand in operands.values():
        count = extents["i" if operand.role == "a" else "j"]
        shape = [*forall.shape, count, 4 if operand.role == "a" else 2]
        parts = []
        for part in ("hi", "lo") if terms == 3 else ("hi",):
            alloc = tile.AllocOp("registers", MemRefType(f32, shape))
            alloc.result.name_hint = f"{operand.role}_{part}"
            rewriter.insert(alloc, InsertPoint.before(anchor))
            parts.append(alloc.result)
        operand.hi = parts[0]
        operand.lo = parts[1] if terms == 3 else None

    # Allocated before the chunk loop's scf.for %kq (made next, in front of the chunk): where
    # the K loop had one step and canonicalize inlined it, the anchor is the chunk itself.
    parts: list[SSAValue] | None = None
    if order == 2 or promote > 1:
        parts = []
        for _ in updates:
            alloc = tile.AllocOp("registers", MemRefType(
                f32, [*forall.shape, extents["i"], extents["j"], 4]))
            alloc.result.name_hint = "part"
            rewriter.insert(alloc, InsertPoint.before(anchor))
            parts.append(alloc.result)

    # scf.for %kq = 0 to K/8 (with promote P: %kqo = 0 to K/(8·P)), the forall moved into
    # it and emptied.
    old_nest = nest[0]
    old_nest.detach()
    kq = outer_chunk_loop(chunk, forall, extent // (K_STEP * promote),
                          "kq" if promote == 1 else "kqo", rewriter)
    fbody = forall.body.block
    terminator = fbody.last_op if isinstance(fbody.last_op, tile.YieldOp) else None

    def add(new: Operation) -> None:
        if terminator is None:
            fbody.add_op(new)
        else:
            fbody.insert_op_before(new, terminator)

    kk = chunk.body.block.args[0]
    thread_ivs = list(forall.ivs)
    if promote == 1:
        for operand in operands.values():
            add(fragment_nest(operand, kk, kq, ivs, thread_ivs, extents, terms, split))
        for nest_ in product_nests(updates, operands, thread_ivs, extents, terms, parts):
            add(nest_)
    else:  # P steps summed on the tensor cores, then added to the accumulators
        assert parts is not None
        for nest_ in product_nests(updates, operands, thread_ivs, extents, 0, parts,
                                   accumulate=False):
            add(nest_)
        bounds, steps, kqi = counted_for(promote, "kqi", UNROLL)
        inner = steps.body.block
        for op_ in [*bounds, steps]:
            add(op_)
        scale = arith.ConstantOp(IntegerAttr(promote, IndexType()))
        scaled = arith.MuliOp(kq, scale.result)
        step = arith.AddiOp(scaled.result, kqi)
        step.result.name_hint = "kq"
        inner.add_ops([scale, scaled, step])
        for operand in operands.values():
            inner.add_op(fragment_nest(operand, kk, step.result, ivs, thread_ivs, extents,
                                       terms, split))
        inner.add_ops(product_nests(updates, operands, thread_ivs, extents, terms, parts,
                                    zero=False, accumulate=False, order=order))
        inner.add_op(scf.YieldOp())
        for nest_ in product_nests(updates, operands, thread_ivs, extents, 0, parts,
                                   zero=False):
            add(nest_)
    chunk.body.block.insert_op_before(old_nest, chunk.body.block.first_op)  # erased with it
    rewriter.erase(chunk, safe_erase=False)


@dataclass(frozen=True)
class MmaFragments(ModulePass):
    """Run tensor-core-layout chunk loops on the tensor cores (see the module docstring).

    Options (0 = the kernel's knob ``mma_<option>``, else the default): ``terms``,
    tensor-core products per ``f32`` product, 3 (``f32`` accuracy, the default) or 1 (TF32
    precision); ``order`` (1 or 2, default 2), ``promote`` (default 4) and ``split`` (1, 2
    or 3, default 3) as the module docstring says."""

    name = "mma-fragments"

    terms: int = 0
    order: int = 0
    promote: int = 0
    split: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.terms not in (0, *TERMS):
            raise PassFailedException(f"mma-fragments: terms must be 0 (the kernel's knob), "
                                      f"1 or 3, got {self.terms}")
        PatternRewriteWalker(KeepLocation(MmaChunkLoop(self.terms, self.order, self.promote,
                                                       self.split)),
                             apply_recursively=False).rewrite_module(op)
