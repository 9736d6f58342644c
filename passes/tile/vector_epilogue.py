"""``vector-epilogue``: a tensor-core tile's epilogue moves each thread's column pairs at once.

**Matches** the epilogue ``register-tile`` gives a product in the tensor-core layout (a
``tile.forall … over block_threads`` marked ``llmopt.role = "epilogue"``, ``llmopt.layout =
"mma"``) whose innermost loop is ``loop.for %rl = 0 to 2``: the two adjacent columns ``2·t
+ rl`` a thread holds of each 8-column group. Its body is straight-line scalar ops, global
loads (a residual, a bias) and global stores (the output), optionally inside one ``scf.if``
(a ragged edge's guard). Every global access must be :func:`contiguous
<llmopt.passes.tile._chunks.innermost_multiples>` along ``%rl`` with an even
start (every other coefficient, the constant and the buffer's row even), in 4 or 8 bytes
(two ``bf16``/``f16`` or two ``f32``), its other indices defined outside the loop; the
guard must be the same for both columns: ``andi`` of ``value < bound`` tests where a value
that uses ``%rl`` is ``%rl`` plus even terms and its bound an even constant.

**Produces**::

    %in = tile.alloc registers : memref<…threads…x…loops…x2xT>   // one per global load
    %out = tile.alloc registers : memref<…threads…x…loops…x2xT>  // one per global store
    tile.forall (…threads…) … {                                   // the epilogue
      loop.for … {                                                // i, rh, j
        %ok = <the guard at %rl = 0>
        scf.if %ok {
          tile.copy %r[…, c + 0] to %in[…threads…, …loops…, 0] count 2
          loop.for %rl = 0 to 2 {   // unrolled
            <the body; a load of %r reads %in[…, %rl], a store writes %out[…, %rl]>
          }
          tile.copy %out[…threads…, …loops…, 0] to %y[…, c + 0] count 2
        }
      }
    }

(the registers hold a pair for every point and every iteration of the loops around the
pair loop, whose iterations are independent, as the accumulators do).

Each output is computed by the same operations as before, so the bits do not change.

**Why** the tensor-core layout gives a thread two adjacent columns in each of its rows, and
the epilogue moved them one element a load and a store: a warp's 2-byte accesses to eight
rows fill a quarter of each 32-byte sector they touch, and 96 loads and 96 stores a thread
(a 128 × 192 tile) with their guards make the epilogue the longest stretch in which the
tensor cores wait. One 4-byte access per pair halves the instructions and doubles each
sector's use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, MemRefType, ModuleOp, StringAttr
from xdsl.ir import Block, Operation, SSAValue
from xdsl.ir.affine import AffineConstantExpr, AffineDimExpr, AffineMap
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from llmopt.dialects import loop, tile
from llmopt.dialects.kernel import COPY_BYTES
from llmopt.passes._ir import element_bits, linear_index
from llmopt.passes._rewrite import KeepLocation
from llmopt.passes.tile._chunks import innermost_multiples

PAIR = 2
"""Columns a thread holds side by side in the tensor-core layout (``rl``)."""

Access = loop.LoadOp | loop.StoreOp

_ULT = arith.CMPI_COMPARISON_OPERATIONS.index("ult")


def _is_global(buffer: SSAValue) -> bool:
    return not isinstance(buffer.owner, tile.AllocOp)


def _uniform_guard(cond: SSAValue, rl: SSAValue) -> bool:
    """Whether ``cond`` (``andi`` of ``value < bound``) is the same at ``rl`` = 0 and 1."""
    op = cond.owner
    if isinstance(op, arith.AndIOp):
        return _uniform_guard(op.lhs, rl) and _uniform_guard(op.rhs, rl)
    if not (isinstance(op, arith.CmpiOp) and op.predicate.value.data == _ULT):
        return False
    const, terms = linear_index(op.lhs)
    if _uses(op.rhs, rl):
        return False
    if rl not in terms:
        return not _uses(op.lhs, rl)
    bound, bound_terms = linear_index(op.rhs)
    others = [c for leaf, c in terms.items() if leaf is not rl]
    return (terms[rl] == 1 and not bound_terms and bound % PAIR == 0 and const % PAIR == 0
            and all(c % PAIR == 0 for c in others))


def _ancestors(op: Operation, top: Operation) -> list[Operation]:
    """The ops enclosing ``op`` below ``top``, outermost first."""
    found: list[Operation] = []
    parent = op.parent_op()
    while parent is not None and parent is not top:
        found.append(parent)
        parent = parent.parent_op()
    return found[::-1]


def _uses(value: SSAValue, target: SSAValue) -> bool:
    if value is target:
        return True
    op = value.owner
    return isinstance(op, Operation) and any(_uses(v, target) for v in op.operands)


def _pairs(access: Access, rl: SSAValue, loop_op: loop.ForOp) -> bool:
    """Whether ``access`` moves two consecutive elements of a pair starting at an even
    column, in a size a copy makes, its other indices defined outside ``loop_op``."""
    multiples = innermost_multiples(access, rl, {rl})
    if multiples is None or any(m % PAIR for m in multiples):
        return False
    typ = access.buffer.type
    assert isinstance(typ, MemRefType)
    if typ.get_shape()[-1] % PAIR or PAIR * element_bits(access.buffer) // 8 not in COPY_BYTES:
        return False
    return all(v is rl or not loop_op.is_ancestor(v.owner) for v in access.indices
               if isinstance(v.owner, Operation))


@dataclass
class PairEpilogue(RewritePattern):
    """Rewrite one matched epilogue (see the module docstring)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.ForallOp, rewriter: PatternRewriter) -> None:
        if (op.attributes.get("llmopt.role") != StringAttr("epilogue")
                or op.attributes.get("llmopt.layout") != StringAttr("mma")):
            return
        inner = [o for o in op.walk() if isinstance(o, loop.ForOp)
                 and not any(isinstance(x, loop.ForOp) for x in o.body.block.ops)]
        for pair_loop in inner:
            _pair(op, pair_loop, rewriter)


def _pair(forall: tile.ForallOp, pair_loop: loop.ForOp, rewriter: PatternRewriter) -> None:
    if pair_loop.trip_count != PAIR or pair_loop.is_dynamic or not all(
            isinstance(o, loop.ForOp) and not o.is_dynamic
            for o in _ancestors(pair_loop, forall)):
        return
    rl = pair_loop.body.block.args[0]
    body = pair_loop.body.block
    ifs = [o for o in body.ops if isinstance(o, scf.IfOp)]
    if len(ifs) > 1 or any(o.regions and not isinstance(o, scf.IfOp) for o in body.ops):
        return
    guard = ifs[0] if ifs else None
    if guard is not None and (guard.false_region.blocks or guard.results
                              or not _uniform_guard(guard.cond, rl)):
        return
    accesses = [o for o in pair_loop.walk() if isinstance(o, Access)
                and _is_global(o.buffer)]
    stores = [a for a in accesses if isinstance(a, loop.StoreOp)]
    if not stores or not all(_pairs(a, rl, pair_loop) for a in accesses):
        return
    if {a.buffer for a in stores} & {a.buffer for a in accesses if isinstance(a, loop.LoadOp)}:
        return  # a pair reading what it writes keeps its order
    _rewrite(forall, pair_loop, guard, accesses, rewriter)


def _rewrite(forall: tile.ForallOp, pair_loop: loop.ForOp, guard: scf.IfOp | None,
             accesses: Sequence[Access], rewriter: PatternRewriter) -> None:
    """Copies in front of ``pair_loop`` and behind it, inside the guard at ``rl = 0``."""
    rl = pair_loop.body.block.args[0]
    ivs = list(forall.ivs)
    zero = arith.ConstantOp(IntegerAttr(0, IndexType()))
    rewriter.insert_op(zero, InsertPoint.before(pair_loop))
    outer_cond: SSAValue | None = None
    if guard is not None:  # computed once for the pair: its ops cloned with rl = 0
        mapping: dict[SSAValue, SSAValue] = {rl: zero.result}
        for o in pair_loop.body.block.ops:
            if o is guard:
                break
            clone = o.clone(value_mapper=mapping)
            mapping.update(zip(o.results, clone.results, strict=True))
            rewriter.insert_op(clone, InsertPoint.before(pair_loop))
        outer_cond = mapping.get(guard.cond, guard.cond)
        for o in list(guard.true_region.block.ops):
            if not isinstance(o, scf.YieldOp):
                o.detach()
                pair_loop.body.block.insert_op_before(o, guard)
        rewriter.erase_op(guard)
        for o in reversed(list(pair_loop.body.block.ops)):  # the guard's own ops, now dead
            if o.dialect_name() == "arith" and not any(r.uses for r in o.results):
                rewriter.erase_op(o)
    loops = [o for o in _ancestors(pair_loop, forall) if isinstance(o, loop.ForOp)]
    owners = [*ivs, *(o.body.block.args[0] for o in loops)]
    shape = [*forall.shape, *(o.trip_count for o in loops), PAIR]
    element = AffineMap(len(owners) + 1, 0, tuple(AffineDimExpr(d)
                                                  for d in range(len(owners) + 1)))
    before: list[Operation] = []
    after: list[Operation] = []
    for access in accesses:
        typ = access.buffer.type
        assert isinstance(typ, MemRefType)
        alloc = tile.AllocOp("registers", MemRefType(typ.element_type, shape))
        alloc.result.name_hint = "pair"
        rewriter.insert_op(alloc, InsertPoint.before(forall))
        n = len(access.indices)
        operands = [*(zero.result if v is rl else v for v in access.indices), *owners]
        global_map = AffineMap(n + len(owners), 0, access.map.data.results)
        pair_map = AffineMap(n + len(owners), 0, (*(AffineDimExpr(n + d) for d in
                                                    range(len(owners))),
                                                  AffineConstantExpr(0)))
        if isinstance(access, loop.LoadOp):
            before.append(tile.CopyOp(access.buffer, global_map, alloc.result, pair_map,
                                      operands, PAIR))
            new: Operation = loop.LoadOp(alloc.result, element, [*owners, rl])
            new.results[0].name_hint = access.results[0].name_hint
        else:
            after.append(tile.CopyOp(alloc.result, pair_map, access.buffer, global_map,
                                     operands, PAIR))
            new = loop.StoreOp(access.value, alloc.result, element, [*owners, rl])
        rewriter.replace_op(access, new)
    if outer_cond is None:
        rewriter.insert_op(before, InsertPoint.before(pair_loop))
        rewriter.insert_op(after, InsertPoint.after(pair_loop))
        return
    then = Block()
    holder = scf.IfOp(outer_cond, [], [then])
    rewriter.insert_op(holder, InsertPoint.before(pair_loop))
    pair_loop.detach()
    then.add_ops([*before, pair_loop, *after, scf.YieldOp()])


@dataclass(frozen=True)
class VectorEpilogue(ModulePass):
    """Move each thread's column pairs of a tensor-core epilogue in one access (see the
    module docstring)."""

    name = "vector-epilogue"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(KeepLocation(PairEpilogue()),
                             apply_recursively=False).rewrite_module(op)


__all__ = ["VectorEpilogue"]
