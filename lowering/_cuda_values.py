"""Which SSA values of a kernel become C variables (used by ``kernel-to-cuda``).

A value used once, in its own block, by a pure computation is inlined into its user's
expression; any other value — several uses, a use in a nested block, an operand its user
spells twice (``floordivsi``, NaN-propagating ``maximumf``, a loop bound), a load that a
write may separate from its use, a warp shuffle, an inline-asm result — gets a variable at
its definition. Constants are literals at every use. Why: inlining keeps the source close to
the expression trees of the IR, while a variable is needed wherever moving or repeating the
computation could change what it reads or how often it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum, auto

from xdsl.dialects import arith, scf
from xdsl.ir import Block, Operation, SSAValue
from xdsl.traits import MemoryEffectKind, get_effects

from llmopt.dialects import kernel, mma

__all__ = ["Kind", "classify"]

_CMPF_TWICE = frozenset({"one", "ord", "ueq", "uno"})


class Kind(Enum):
    """What a value becomes in the C source."""

    DEAD = auto()  # unused and effect-free: not emitted
    INLINE = auto()  # rebuilt as a subexpression of its single user
    LITERAL = auto()  # a constant: a literal at every use
    NAMED = auto()  # a C variable (parameter, const local, loop variable, mutable local)


def _may_write(op: Operation) -> bool:
    """Whether ``op`` may write memory or synchronise (unknown effects count as writes)."""
    effects = get_effects(op)
    return effects is None or any(e.kind == MemoryEffectKind.WRITE for e in effects)


def classify(block: Block, kind: dict[SSAValue, Kind],
             asm: Callable[[Operation], bool] | None = None) -> None:
    """Record in ``kind`` what each op result of ``block`` (and of its nested blocks) becomes;
    ``asm`` picks further ops the emitter writes as an inline-asm statement."""
    loads: list[kernel.LoadOp] = []
    for op in block.ops:
        for region in op.regions:
            for nested in region.blocks:
                classify(nested, kind, asm)
        if isinstance(op, kernel.LoadOp):
            loads.append(op)
            continue
        if len(op.results) != 1:
            continue
        value = op.results[0]
        if isinstance(op, arith.ConstantOp):
            kind[value] = Kind.LITERAL
        elif isinstance(op, kernel.SharedOp | kernel.LocalOp | scf.ForOp | scf.IfOp):
            kind[value] = Kind.NAMED  # bound to its variable when emitted
        elif (isinstance(op, kernel.ShuffleXorOp | kernel.OpaqueOp | mma.ToTf32Op | mma.PackOp)
              or (asm is not None and asm(op))):
            # A warp-collective call stays where it is (never moved into a branch); an
            # inline-asm result is a variable the asm statement writes; a pair is an
            # ``unsigned int`` local.
            kind[value] = Kind.NAMED if value.uses else Kind.DEAD
        else:
            kind[value] = _inline_kind(value)
    # Loads last, latest first: whether a load may move to its use depends on the users.
    for load in reversed(loads):
        kind[load.result] = _load_kind(load, kind)


def _inline_kind(value: SSAValue) -> Kind:
    uses = list(value.uses)
    if not uses:
        return Kind.DEAD
    if len(uses) > 1:
        return Kind.NAMED
    use = uses[0]
    user = use.operation
    assert isinstance(value.owner, Operation)
    if user.parent is not value.owner.parent or _needs_atom(user, use.index):
        return Kind.NAMED
    return Kind.INLINE


def _load_kind(load: kernel.LoadOp, kind: dict[SSAValue, Kind]) -> Kind:
    inline = _inline_kind(load.result)
    if inline is not Kind.INLINE:
        return inline
    root = next(iter(load.result.uses)).operation
    while len(root.results) == 1 and kind.get(root.results[0]) is Kind.INLINE:
        root = next(iter(root.results[0].uses)).operation
    if root.regions:
        return Kind.NAMED
    op = load.next_op
    while op is not None and op is not root:
        if _may_write(op):
            return Kind.NAMED
        op = op.next_op
    return Kind.INLINE


def _needs_atom(user: Operation, index: int) -> bool:
    """Whether ``user`` spells operand ``index`` more than once (or evaluates it on every
    iteration), so that the operand must be a variable or a literal."""
    if isinstance(user, arith.FloorDivSIOp | arith.CeilDivSIOp | arith.CeilDivUIOp
                  | arith.MaximumfOp | arith.MinimumfOp):
        return True
    if isinstance(user, arith.CmpfOp):
        return arith.CMPF_COMPARISON_OPERATIONS[user.predicate.value.data] in _CMPF_TWICE
    if isinstance(user, scf.ForOp):
        return index in (1, 2)  # upper bound and step
    return False
