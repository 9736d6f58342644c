"""``skip-padded-rows``: a register tile over a runtime length skips its rows past the length.

**Matches**, in a ``kernel.func``, an *update nest* of three ``scf.for`` loops without
results, each loop's body only the next loop::

    scf.for %kv = ... {
      scf.for %mi = ... {
        scf.for %nj = ... {
          <kernel.load, pure arithmetic>
          kernel.store %s, %acc[%mi, %nj]       // only into kernel.local accumulators
        }
      }
    }

(``register-tile``'s multiply-adds once ``vector-fragments`` has read the fragments), where
every other ``kernel.load`` of those accumulators (the epilogue's) is ``%acc[%ei, %ej]``
(``%ei``, ``%ej`` induction variables of loops) inside an ``scf.if`` whose condition is, or is
``arith.andi``-ed from, ``arith.cmpi ult, %row, %len`` with ``%len`` a runtime value (the
length of a symbolic program; a constant bound is left to NVRTC, which already removes the
rows a static tile never stores) and ``%row`` depending on ``%ei`` through ``arith.addi`` and
``arith.muli``.

**Produces** the nest with the ``%mi`` loop outermost and the rest guarded by a lower bound of
the first row the group ``%mi`` holds::

    scf.for %mi = ... {
      %row0 = <%row at %ei = %mi, every other term it cannot keep at 0>
      %live = arith.cmpi ult, %row0, %len : index
      scf.if %live {
        scf.for %kv = ... { scf.for %nj = ... { <the same body> } }
      }
    }

``%row0`` keeps the ``arith.addi``/``arith.muli`` tree of ``%row`` over ``%ei``, constants and
values defined before the nest, and puts 0 for every other term (the thread's row within
the group: index arithmetic does not wrap, so a term at 0 is at its least). When ``%row0`` is
past the length, so is the row of every thread of the group, and the epilogue stores none of
the group's sums: their multiply-adds are skipped. Each accumulator still takes its K
steps in the same order, so the results are bit-identical; ``%row0`` is the same for the
block's threads, so the branch does not diverge.

**Why** a length bucket's tile is scheduled for the bucket's bound: a prompt of 17 tokens in
the 32-row bucket computes 15 rows of padding per block on the CUDA cores. A static program
of 17 rows loses those multiply-adds without this pass, as NVRTC sees that the rows past 17
are never stored; a symbolic one needs the guard in the IR.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import is_side_effect_free

from llmopt.dialects import kernel
from llmopt.passes._ir import nested_ops

__all__ = ["SkipPaddedRows", "skip_padded_rows"]


def _only_loop(loop: scf.ForOp) -> scf.ForOp | None:
    """The one ``scf.for`` that is ``loop``'s whole body (beside its yield), if so."""
    ops = [op for op in loop.body.block.ops if not isinstance(op, scf.YieldOp)]
    if len(ops) == 1 and isinstance(ops[0], scf.ForOp) and not ops[0].results:
        return ops[0]
    return None


def _update_accumulators(nest: scf.ForOp) -> set[SSAValue] | None:
    """The ``kernel.local`` buffers the update nest ``nest`` stores into (see the module
    docstring), or ``None`` when ``nest`` is not one."""
    if nest.results or (mid := _only_loop(nest)) is None or (inner := _only_loop(mid)) is None:
        return None
    accs: set[SSAValue] = set()
    for op in inner.body.block.ops:
        if isinstance(op, kernel.StoreOp):
            if not (isinstance(op.buffer.owner, kernel.LocalOp)
                    and tuple(op.indices) == (mid.body.block.args[0],
                                              inner.body.block.args[0])):
                return None
            accs.add(op.buffer)
        elif not (isinstance(op, kernel.LoadOp | scf.YieldOp) or is_side_effect_free(op)):
            return None
        elif op.regions:
            return None
    return accs or None


def _conjuncts(cond: SSAValue) -> list[SSAValue]:
    owner = cond.owner
    if isinstance(owner, arith.AndIOp):
        return _conjuncts(owner.lhs) + _conjuncts(owner.rhs)
    return [cond]


def _depends_on(value: SSAValue, iv: SSAValue) -> bool:
    """Whether ``value`` is ``iv`` or an ``arith.addi``/``arith.muli`` tree over it."""
    if value is iv:
        return True
    owner = value.owner
    if isinstance(owner, arith.AddiOp | arith.MuliOp):
        return _depends_on(owner.lhs, iv) or _depends_on(owner.rhs, iv)
    return False


def _row_bound(load: kernel.LoadOp) -> tuple[SSAValue, SSAValue] | None:
    """``(%row, %len)`` of the guard of an epilogue load (see the module docstring)."""
    guard = load.parent_op()
    if not isinstance(guard, scf.IfOp) or len(load.indices) != 2:
        return None
    first = load.indices[0]
    if not isinstance(first, BlockArgument) or not isinstance(first.owner.parent_op(),
                                                                scf.ForOp):
        return None
    for test in _conjuncts(guard.cond):
        cmp = test.owner
        if (isinstance(cmp, arith.CmpiOp) and cmp.predicate.value.data == 6  # ult
                and not isinstance(cmp.rhs.owner, arith.ConstantOp)
                and _depends_on(cmp.lhs, first)):
            return cmp.lhs, cmp.rhs
    return None


def _dominates(value: SSAValue, op: Operation) -> bool:
    """Whether ``value`` is defined before ``op``, in a block around it."""
    owner = value.owner
    block = owner if isinstance(owner, Block) else owner.parent_block()
    current: Operation | None = op
    while current is not None:
        if current.parent_block() is block:
            if isinstance(owner, Block):
                return True
            walker = owner.next_op
            while walker is not None and walker is not current:
                walker = walker.next_op
            return walker is current
        current = current.parent_op()
    return False


def _lower_bound(value: SSAValue, row_iv: SSAValue, mi: SSAValue, at: Operation,
                 into: Block) -> SSAValue | None:
    """``value`` rebuilt in ``into`` with ``row_iv`` as ``mi``, keeping the
    ``arith.addi``/``arith.muli`` tree, constants and values defined before ``at``; every
    other term 0 (``None``: the whole of it is 0)."""
    if value is row_iv:
        return mi
    owner = value.owner
    if isinstance(owner, arith.AddiOp | arith.MuliOp):
        lhs = _lower_bound(owner.lhs, row_iv, mi, at, into)
        rhs = _lower_bound(owner.rhs, row_iv, mi, at, into)
        if lhs is None or rhs is None:
            return (lhs or rhs) if isinstance(owner, arith.AddiOp) else None
        new = type(owner)(lhs, rhs)
        into.add_op(new)
        return new.result
    if _dominates(value, at):
        return value
    if isinstance(owner, arith.ConstantOp):
        copy = owner.clone()
        into.add_op(copy)
        return copy.result
    return None


def _guard(nest: scf.ForOp, row: SSAValue, row_iv: SSAValue, length: SSAValue) -> None:
    """Rewrite the update ``nest`` as the module docstring shows."""
    mid = _only_loop(nest)
    assert mid is not None
    inner = _only_loop(mid)
    assert inner is not None
    mi_body = Block(arg_types=[IndexType()])
    mi = mi_body.args[0]
    mi.name_hint = mid.body.block.args[0].name_hint
    live_row = _lower_bound(row, row_iv, mi, nest, mi_body)
    assert live_row is not None  # it depends on row_iv
    live_row.name_hint = "row0"
    live = arith.CmpiOp(live_row, length, "ult")
    live.result.name_hint = "live"
    then = Block()
    mi_body.add_ops([live, scf.IfOp(live.result, [], Region(then)), scf.YieldOp()])
    outer = scf.ForOp(mid.lb, mid.ub, mid.step, [], Region(mi_body))
    outer.attributes |= mid.attributes
    Rewriter.insert_op(outer, InsertPoint.before(nest))
    # %kv and %nj around the body, %mi now the outer loop's.
    mid.body.block.args[0].replace_all_uses_with(mi)
    inner.detach()
    nest.body.block.insert_op_before(inner, mid)
    mid.detach()
    mid.erase()
    nest.detach()
    then.add_ops([nest, scf.YieldOp()])


def skip_padded_rows(module: ModuleOp) -> int:
    """Guard the update nests of every ``kernel.func`` of ``module`` (see the module
    docstring); how many were guarded."""
    guarded = 0
    for func in module.ops:
        if not isinstance(func, kernel.FuncOp):
            continue
        ops = nested_ops(func)
        nests = [(op, accs) for op in ops if isinstance(op, scf.ForOp)
                 and (accs := _update_accumulators(op)) is not None]
        for nest, accs in nests:
            bounds = set()
            found: tuple[SSAValue, SSAValue, SSAValue] | None = None
            for acc in accs:
                for use in acc.uses:
                    load = use.operation
                    if nest.is_ancestor(load) or isinstance(load, kernel.StoreOp):
                        continue
                    if not isinstance(load, kernel.LoadOp):
                        bounds.add(None)
                        continue
                    got = _row_bound(load)
                    bounds.add(got[1] if got else None)
                    if got is not None:
                        found = (got[0], load.indices[0], got[1])
            if found is None or bounds != {found[2]} or not _dominates(found[2], nest):
                continue
            _guard(nest, found[0], found[1], found[2])
            guarded += 1
    return guarded


@dataclass(frozen=True)
class SkipPaddedRows(ModulePass):
    """Register tiles over a runtime length skip the row groups past it (see the module
    docstring)."""

    name = "skip-padded-rows"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        skip_padded_rows(op)
