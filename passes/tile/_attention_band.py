"""The primitives ``flash-attention``'s matchers read a ``loop.kernel`` with.

A kernel's perfect loop band (:func:`band`), the function value an argument is bound to
(:func:`bound`), an access's coordinates (:func:`coord`, :func:`reads_at`), equal op lists
(:func:`same_ops`) and a sum's product of two loads (:func:`product_of`, :func:`factor`):
what :mod:`~llmopt.passes.tile._attention_scores` and
:mod:`~llmopt.passes.tile._attention_chain` match attention's kernels with. See
:mod:`llmopt.passes.tile.flash_attention` for the whole story.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith
from xdsl.ir import Block, Operation, SSAValue
from xdsl.ir.affine import AffineConstantExpr, AffineDimExpr
from xdsl.traits import is_side_effect_free

from llmopt.dialects import loop


def bound(kernel: loop.KernelOp, value: SSAValue) -> SSAValue | None:
    """The function value a block argument of ``kernel`` is bound to, else ``None``."""
    for arg, buf in zip(kernel.body.block.args, kernel.buffers, strict=True):
        if arg is value:
            return buf
    return None


def band(kernel: loop.KernelOp) -> tuple[list[loop.ForOp], list[Operation], list[Operation]]:
    """The kernel's perfect ``loop.for`` band, the ops of its innermost body, and the
    kernel's ops outside the band (which must be region-less and side-effect free); an
    empty band when the kernel is not one band."""
    top = [op for op in kernel.body.block.ops if not isinstance(op, loop.ForOp)]
    fors = [op for op in kernel.body.block.ops if isinstance(op, loop.ForOp)]
    if len(fors) != 1 or any(op.regions or not is_side_effect_free(op) for op in top):
        return [], [], []
    loops = [fors[0]]
    while True:
        ops = list(loops[-1].body.block.ops)
        if len(ops) == 1 and isinstance(ops[0], loop.ForOp):
            loops.append(ops[0])
        else:
            return loops, ops, top


def coord(access: loop.LoadOp | loop.StoreOp, k: int) -> SSAValue | int | None:
    """Coordinate ``k`` of an access when it is an index operand (returned) or a constant
    (its value); ``None`` for any other expression."""
    expr = access.map.data.results[k]
    if isinstance(expr, AffineDimExpr):
        return access.indices[expr.position]
    if isinstance(expr, AffineConstantExpr):
        return expr.value
    return None


def reads_at(access: loop.LoadOp | loop.StoreOp, ivs: Sequence[loop.ForOp | loop.ReduceOp],
             trailing: int = 0) -> bool:
    """Whether ``access`` touches exactly ``[iv₀, iv₁, …, 0 × trailing]``; a loop of extent
    1 may also stand as the constant 0."""
    rank = len(access.map.data.results)
    if rank != len(ivs) + trailing:
        return False
    for k in range(rank):
        c = coord(access, k)
        if k >= len(ivs):
            if c != 0:
                return False
        elif not (c is ivs[k].iv or (c == 0 and ivs[k].trip_count == 1)):
            return False
    return True


def uses_any(access: loop.LoadOp, values: Sequence[SSAValue]) -> bool:
    """Whether an index operand of ``access`` is one of ``values``."""
    return any(v is w for v in access.indices for w in values)


def same_ops(first: Sequence[Operation], second: Sequence[Operation],
             mapping: dict[SSAValue, SSAValue]) -> bool:
    """Whether two op lists compute the same thing: same ops, properties and attributes,
    operands equal through ``mapping`` (extended with the results)."""
    if len(first) != len(second):
        return False
    for a, b in zip(first, second, strict=True):
        if (a.name != b.name or a.regions or b.regions or a.properties != b.properties
                or a.attributes != b.attributes or len(a.operands) != len(b.operands)):
            return False
        if any(mapping.get(x, x) is not y for x, y in zip(a.operands, b.operands, strict=True)):
            return False
        mapping.update(zip(a.results, b.results, strict=True))
    return True


def loop_indexed(access: loop.LoadOp, kernel: loop.KernelOp) -> bool:
    """Whether every index of ``access`` is a loop variable or defined at the top of
    ``kernel``: the rebuilt kernel substitutes the former and clones the latter, and has
    nothing else (a gathered index, say) to offer."""
    for index in access.indices:
        owner = index.owner
        if isinstance(owner, Block):
            if not isinstance(owner.parent_op(), loop.ForOp | loop.ReduceOp):
                return False
        elif owner.parent is not kernel.body.block:
            return False
    return True


def product_of(red: loop.ReduceOp, kernel: loop.KernelOp
               ) -> tuple[loop.LoadOp, loop.LoadOp, arith.MulfOp] | None:
    """A reduce body of ``kernel`` that is exactly two loads indexed by loop variables and
    the product it yields, each factor a load or its ``arith.extf`` (a 16-bit operand
    widened to the ``f32`` of the sum)."""
    ops = list(red.body.block.ops)
    last = ops.pop() if ops else None
    loads = [op for op in ops if isinstance(op, loop.LoadOp)]
    muls = [op for op in ops if isinstance(op, arith.MulfOp)]
    widened = [op for op in ops if isinstance(op, arith.ExtFOp)]
    if (len(loads) != 2 or len(muls) != 1 or len(ops) != 3 + len(widened)
            or not isinstance(last, loop.YieldOp) or last.values[0] is not muls[0].result):
        return None
    a, b = loads
    mul = muls[0]
    if not all(ext.input in (a.result, b.result) for ext in widened):
        return None
    factors = {factor(mul, a), factor(mul, b)}
    if (factors != {mul.lhs, mul.rhs} or len(factors) != 2
            or not (loop_indexed(a, kernel) and loop_indexed(b, kernel))):
        return None
    return a, b, mul


def factor(mul: arith.MulfOp, load: loop.LoadOp) -> SSAValue:
    """The operand of ``mul`` that ``load`` gives: its result, or that widened by an
    ``arith.extf``."""
    for operand in (mul.lhs, mul.rhs):
        if operand is load.result or (isinstance(operand.owner, arith.ExtFOp)
                                      and operand.owner.input is load.result):
            return operand
    return load.result
