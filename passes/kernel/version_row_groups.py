"""``version-row-groups``: a register tile over a runtime length runs a K loop made for the
number of its row groups that hold rows below the length.

**Matches**, in a ``kernel.func``, a K loop (``scf.for`` marked ``llmopt.role = "k_loop"``)
holding one *update nest* of three ``scf.for`` loops without results, each loop's body only
the next loop::

    scf.for %kv = ... {
      scf.for %mi = %c0 to %tm step %c1 {      // tm: a constant, the thread's row groups
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
length of a symbolic program, defined before the K loop) and ``%row`` depending on ``%ei``
through ``arith.addi`` and ``arith.muli``.

**Produces**, before the K loop, the number of live row groups: for each group ``g`` below
``tm``, ``%row`` rebuilt at ``%ei = g`` with every term it cannot keep (the thread's row
within the group) at 0, compared with ``%len``, the ones summed; then a chain of ``scf.if``
on that number, each branch a copy of the K loop whose ``%mi`` loop stops at it::

    %live = <number of groups g < tm whose first row is below %len>
    %r = scf.if (%live == tm) { <the K loop>  } else {
           scf.if (%live == tm - 1) { <the K loop, %mi to tm - 1> } else { ... <%mi to 1> } }

The results of the K loop (its pipeline slots) become the chain's. A group past the length
holds no row that the epilogue stores (index arithmetic does not wrap, so a term at 0 is at
its least), so its sums are not needed; every other accumulator takes its K steps in the same
order, and the results are bit-identical. ``%live`` is the same for the block's threads: a
block runs one copy, without a branch inside it. The trip count of every copy but the
whole tile's passes through ``kernel.opaque``: with it a constant, ptxas duplicated the
first iteration of the copies in the middle of the chain, and a block then fetched twice the
loop's code, cold, which a static tile does not.

**Why** a length bucket's tile is scheduled for the bucket's bound: a prompt of 17 tokens in
the 32-row bucket computes 15 rows of padding per block. A static program of 17 rows does
not, because NVRTC sees that the last row group is never stored and drops its
multiply-adds (and the fragment reads that feed only them); with the groups' count a
constant in each copy, NVRTC does the same for a symbolic one. A guard around each group
inside the K loop instead (branches between the multiply-adds) left the symbolic layer no
faster on the H200 (``bench/results/symbolic-short-lengths-h200.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp, StringAttr
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import is_side_effect_free

from llmopt.dialects import kernel
from llmopt.dialects._syntax import constant_index
from llmopt.passes._ir import nested_ops

__all__ = ["VersionRowGroups", "version_row_groups"]

ULT = 6
"""``arith.cmpi``'s predicate number of ``ult``."""
GROUPS_ATTR = "llmopt.row_groups"
"""Marks a copy of a K loop with the row groups it runs (a copy is not versioned again)."""


@dataclass(frozen=True)
class _Nest:
    """A matched update nest: its row-group loop (``mi``), the number of row groups, the
    epilogue's row and its loop variable, and the length."""

    mi: scf.ForOp
    groups: int
    row: SSAValue
    row_iv: SSAValue
    length: SSAValue


def _only_loop(loop: scf.ForOp) -> scf.ForOp | None:
    """The one ``scf.for`` without results that is ``loop``'s whole body (beside its
    yield), if so."""
    ops = [op for op in loop.body.block.ops if not isinstance(op, scf.YieldOp)]
    if len(ops) == 1 and isinstance(ops[0], scf.ForOp) and not ops[0].results:
        return ops[0]
    return None


def _accumulators(nest: scf.ForOp) -> tuple[scf.ForOp, set[SSAValue]] | None:
    """The ``%mi`` loop of the update nest ``nest`` and the ``kernel.local`` buffers it
    stores into (see the module docstring), or ``None`` when ``nest`` is not one."""
    if nest.results or (mid := _only_loop(nest)) is None or (inner := _only_loop(mid)) is None:
        return None
    lb, step, ub = (constant_index(v) for v in (mid.lb, mid.step, mid.ub))
    if lb != 0 or step != 1 or (ub or 0) < 2:
        return None
    accs: set[SSAValue] = set()
    for op in inner.body.block.ops:
        if isinstance(op, kernel.StoreOp):
            if not (isinstance(op.buffer.owner, kernel.LocalOp)
                    and tuple(op.indices) == (mid.body.block.args[0],
                                              inner.body.block.args[0])):
                return None
            accs.add(op.buffer)
        elif op.regions or not (isinstance(op, kernel.LoadOp | scf.YieldOp)
                                or is_side_effect_free(op)):
            return None
    return (mid, accs) if accs else None


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


def _row_bound(load: kernel.LoadOp) -> tuple[SSAValue, SSAValue, SSAValue] | None:
    """``(%row, %ei, %len)`` of the guard of an epilogue load (see the module docstring)."""
    guard = load.parent_op()
    if not isinstance(guard, scf.IfOp) or len(load.indices) != 2:
        return None
    first = load.indices[0]
    if not (isinstance(first, BlockArgument)
            and isinstance(first.owner.parent_op(), scf.ForOp)):
        return None
    for test in _conjuncts(guard.cond):
        cmp = test.owner
        if (isinstance(cmp, arith.CmpiOp) and cmp.predicate.value.data == ULT
                and constant_index(cmp.rhs) is None and _depends_on(cmp.lhs, first)):
            return cmp.lhs, first, cmp.rhs
    return None


def _dominates(value: SSAValue, op: Operation) -> bool:
    """Whether ``value`` is defined before ``op``, in a block around it."""
    owner = value.owner
    block = owner if isinstance(owner, Block) else owner.parent_block()
    current: Operation | None = op
    while current is not None:
        if current.parent_block() is block:
            return isinstance(owner, Block) or owner.is_before_in_block(current)
        current = current.parent_op()
    return False


def match_nest(nest: scf.ForOp) -> _Nest | None:
    """``nest`` as an update nest whose accumulators only a guarded epilogue reads."""
    found = _accumulators(nest)
    if found is None:
        return None
    mid, accs = found
    guards: set[tuple[SSAValue, SSAValue, SSAValue] | None] = set()
    for acc in accs:
        for use in acc.uses:
            user = use.operation
            if nest.is_ancestor(user) or isinstance(user, kernel.StoreOp):
                continue
            guards.add(_row_bound(user) if isinstance(user, kernel.LoadOp) else None)
    lengths = {g[2] if g else None for g in guards}
    if None in lengths or len(lengths) != 1:
        return None
    row, row_iv, length = next(g for g in guards if g is not None)
    groups = constant_index(mid.ub)
    assert groups is not None
    return _Nest(mid, groups, row, row_iv, length)


def _lower_bound(value: SSAValue, nest: _Nest, group: SSAValue, at: Operation,
                 ops: list[Operation]) -> SSAValue | None:
    """``value`` rebuilt (ops appended to ``ops``) with the epilogue's row variable as
    ``group``, keeping the ``arith.addi``/``arith.muli`` tree, constants and values defined
    before ``at``; every other term 0 (``None``: the whole of it is 0)."""
    if value is nest.row_iv:
        return group
    owner = value.owner
    if isinstance(owner, arith.AddiOp | arith.MuliOp):
        lhs = _lower_bound(owner.lhs, nest, group, at, ops)
        rhs = _lower_bound(owner.rhs, nest, group, at, ops)
        if lhs is None or rhs is None:
            return (lhs or rhs) if isinstance(owner, arith.AddiOp) else None
        new = type(owner)(lhs, rhs)
        ops.append(new)
        return new.result
    if _dominates(value, at):
        return value
    if isinstance(owner, arith.ConstantOp):
        copy = owner.clone()
        ops.append(copy)
        return copy.result
    return None


def _index(value: int, ops: list[Operation]) -> SSAValue:
    const = arith.ConstantOp(IntegerAttr(value, IndexType()))
    ops.append(const)
    return const.result


def live_groups(nest: _Nest, at: Operation) -> tuple[list[Operation], SSAValue]:
    """Ops computing, before ``at``, how many of the nest's row groups have a first row
    below the length; the count."""
    ops: list[Operation] = []
    one, zero = _index(1, ops), _index(0, ops)
    total: SSAValue | None = None
    for g in range(nest.groups):
        row = _lower_bound(nest.row, nest, _index(g, ops), at, ops)
        assert row is not None  # it depends on the row variable
        below = arith.CmpiOp(row, nest.length, "ult")
        counted = arith.SelectOp(below.result, one, zero)
        ops += [below, counted]
        if total is None:
            total = counted.result
        else:
            add = arith.AddiOp(total, counted.result)
            ops.append(add)
            total = add.result
    assert total is not None
    total.name_hint = "live"
    return ops, total


def _copy_for(k_loop: scf.ForOp, nest: _Nest, groups: int) -> tuple[Block, scf.ForOp]:
    """A block holding a copy of ``k_loop`` whose update nest runs ``groups`` row groups,
    and that copy."""
    block = Block()
    copy = k_loop.clone()
    copy.attributes[GROUPS_ATTR] = IntegerAttr(groups, IndexType())
    block.add_op(copy)
    index = next(i for i, op in enumerate(nested_ops(k_loop)) if op is nest.mi)
    mid = nested_ops(copy)[index]
    assert isinstance(mid, scf.ForOp)
    bound = arith.ConstantOp(IntegerAttr(groups, IndexType()))
    block.insert_op_before(bound, copy)
    mid.operands[1] = bound.result
    if groups < nest.groups:  # the whole tile's copy stays the loop it was
        trips = kernel.OpaqueOp(copy.ub)
        block.insert_op_before(trips, copy)
        copy.operands[1] = trips.result
    block.add_op(scf.YieldOp(*copy.results))
    return block, copy


def version(k_loop: scf.ForOp, nest: _Nest) -> None:
    """Rewrite ``k_loop`` as the module docstring shows."""
    ops, live = live_groups(nest, k_loop)
    Rewriter.insert_op(ops, InsertPoint.before(k_loop))
    types = [r.type for r in k_loop.results]
    chain: Block | None = None  # the else-branch the next copy goes into
    outer: scf.IfOp | None = None
    for groups in range(nest.groups, 1, -1):
        count = arith.ConstantOp(IntegerAttr(groups, IndexType()))
        test = arith.CmpiOp(live, count.result, "eq")
        then, _ = _copy_for(k_loop, nest, groups)
        if groups == 2:
            other, _ = _copy_for(k_loop, nest, 1)
        else:
            other = Block()
        branch = scf.IfOp(test.result, types, Region(then), Region(other))
        branch.attributes["llmopt.role"] = StringAttr("row_groups")
        if chain is None:
            Rewriter.insert_op([count, test, branch], InsertPoint.before(k_loop))
            outer = branch
        else:
            chain.add_ops([count, test, branch, scf.YieldOp(*branch.results)])
        chain = other
    assert outer is not None
    for old, new in zip(k_loop.results, outer.results, strict=True):
        old.replace_all_uses_with(new)
    k_loop.detach()
    k_loop.erase()


def version_row_groups(module: ModuleOp) -> int:
    """Version the K loops of every ``kernel.func`` of ``module`` (see the module
    docstring); how many were versioned."""
    done = 0
    for func in module.ops:
        if not isinstance(func, kernel.FuncOp):
            continue
        for op in nested_ops(func):
            if not (isinstance(op, scf.ForOp) and isinstance(
                    role := op.attributes.get("llmopt.role"), StringAttr)
                    and role.data == "k_loop" and GROUPS_ATTR not in op.attributes):
                continue
            nests = [n for inner in nested_ops(op) if isinstance(inner, scf.ForOp)
                     and (n := match_nest(inner)) is not None]
            if len(nests) == 1 and _dominates(nests[0].length, op):
                version(op, nests[0])
                done += 1
    return done


@dataclass(frozen=True)
class VersionRowGroups(ModulePass):
    """A K loop per count of live row groups of a register tile over a runtime length (see
    the module docstring)."""

    name = "version-row-groups"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        version_row_groups(op)
