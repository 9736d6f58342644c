"""Small queries on IR that passes of every level share."""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Block, Operation, SSAValue
from xdsl.traits import MemoryEffectKind, is_side_effect_free, only_has_effect

from llmopt.dialects._syntax import constant_index
from llmopt.dialects.tma import element_bytes

LinearIndex = tuple[int, dict[SSAValue, int]]
"""``const + Σ coef·leaf`` over ``index`` values: the constant and the coefficients."""


def defined_inside(value: SSAValue, op: Operation) -> bool:
    """Whether ``value`` is defined inside ``op``'s regions, at any depth (an op's own
    results are not inside it): a value that is not is the same for every iteration of a
    loop ``op``."""
    owner = value.owner
    node = owner.parent_op() if isinstance(owner, Operation | Block) else None
    return node is not None and op.is_ancestor(node)


def nested_ops(op: Operation) -> list[Operation]:
    """``op`` and every op nested in it, in the order of ``op.walk()`` (pre-order), as a
    list taken at once. xDSL's walk nests a generator per region, block and op; passes that
    walk whole kernels many times (fusion re-reads each consumer after every inlining)
    spend most of their time there. Being a snapshot, the list is for reading: an IR
    changed while it is iterated is not seen."""
    out: list[Operation] = []
    stack = [op]
    while stack:
        current = stack.pop()
        out.append(current)
        if current.regions:
            children = [child for region in current.regions for block in region.blocks
                        for child in block.ops]
            children.reverse()
            stack.extend(children)
    return out


def allocates_at_most(op: Operation) -> bool:
    """Whether ``op`` has no regions and touches no memory (constants, views, scalar
    arithmetic) or only allocates: it may move across, or sit between, ops that do."""
    if op.regions:
        return False
    return is_side_effect_free(op) or only_has_effect(op, MemoryEffectKind.ALLOC)


def element_bits(buffer: SSAValue) -> int:
    """The bits of an element of a memref value (0 for another type)."""
    return 8 * element_bytes(buffer.type) if isinstance(buffer.type, MemRefType) else 0


def linear_index(value: SSAValue) -> LinearIndex:
    """``value`` as a :data:`LinearIndex` of the values that are not sums, differences or
    multiples by a constant (``arith.addi``, ``arith.subi``, ``arith.muli``)."""
    op = value.owner
    known = constant_index(value)
    if known is not None:
        return known, {}
    if isinstance(op, arith.AddiOp | arith.SubiOp):
        (ca, ta), (cb, tb) = linear_index(op.lhs), linear_index(op.rhs)
        sign = 1 if isinstance(op, arith.AddiOp) else -1
        terms = dict(ta)
        for leaf, k in tb.items():
            terms[leaf] = terms.get(leaf, 0) + sign * k
        return ca + sign * cb, {leaf: k for leaf, k in terms.items() if k}
    if isinstance(op, arith.MuliOp):
        for a, b in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            factor = constant_index(b)
            if factor is not None:
                c, terms = linear_index(a)
                return c * factor, {leaf: k * factor for leaf, k in terms.items() if k * factor}
    return 0, {value: 1}
