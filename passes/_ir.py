"""Small queries on IR that passes of every level share."""

from __future__ import annotations

from xdsl.ir import Block, Operation, SSAValue


def defined_inside(value: SSAValue, op: Operation) -> bool:
    """Whether ``value`` is defined inside ``op``'s regions, at any depth (an op's own
    results are not inside it): a value that is not is the same for every iteration of a
    loop ``op``."""
    owner = value.owner
    node = owner.parent_op() if isinstance(owner, Operation | Block) else None
    return node is not None and op.is_ancestor(node)
