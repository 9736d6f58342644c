"""The fused ``kernel.func`` that ``fuse-launches`` builds for a group of launches.

One kernel whose blocks run the members' bodies end to end behind one ``scf.if`` per
member, ``kernel.block_id x`` and ``kernel.grid_dim x`` rewritten to the member's own, its
buffer declarations at the top level with shared buffers of one kind shared between
members; runtime grids computed again from the length parameter (see
:mod:`llmopt.passes.kernel.fuse_launches`).
"""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from llmopt.dialects import kernel
from llmopt.passes.kernel._fuse_members import Launch, shared_kind
from llmopt.passes.kernel._index_expr import Expr, ExprBuilder

SharedPool = dict[tuple[Attribute, str], list[SSAValue]]
"""A fused kernel's shared buffers by kind (:func:`~llmopt.passes.kernel._fuse_members.
shared_kind`)."""


def build_fused(group: list[Launch], operands: list[SSAValue],
                pattern: tuple[tuple[int, ...], ...], sizes: tuple[Expr | None, ...],
                kernels: dict[str, kernel.FuncOp]) -> str:
    """The fused ``kernel.func`` of ``group``, added to the module and to ``kernels`` (the
    module's kernels by name); its name. A member's ``sizes`` entry is its runtime grid as
    an expression of the length (:func:`~llmopt.passes.kernel._fuse_members.grid_expression`;
    ``None``: its static grid)."""
    name = unique_name("__".join(m.op.kernel.root_reference.data for m in group),
                       kernels)
    fused = kernel.FuncOp(name, [a.type for a in operands], group[0].op.block_shape)
    top = fused.body.block
    for arg, operand in zip(top.args, operands, strict=True):
        arg.name_hint = operand.name_hint
    bid = kernel.BlockIdOp("x")
    top.add_op(bid)
    here, elses = top, []
    offset: int | SSAValue = 0  # the blocks of the members before: static or runtime
    lengths = [arg for arg in top.args if isinstance(arg.type, IndexType)]

    def length(_build: ExprBuilder, _leaf: Expr) -> SSAValue:
        return lengths[0]  # a runtime grid's group passes one length (fits())

    grids = ExprBuilder(length)
    pool: SharedPool = {}
    for k, (member, params) in enumerate(zip(group, pattern, strict=True)):
        assert member.callee is not None
        values: dict[SSAValue, SSAValue] = dict(zip(
            member.callee.body.block.args, (top.args[p] for p in params), strict=True))
        declare_buffers(member.callee, bid, values, pool)  # buffers first, at the top level
        local: SSAValue = bid.result
        if not isinstance(offset, int) or offset:
            start = _index(offset, here)
            minus = arith.SubiOp(bid.result, start)
            here.add_op(minus)
            local = minus.result
        sized = sizes[k]
        if sized is not None:  # the grids before sit in blocks around this one
            size = grids.value(sized)
            here.add_ops(grids.take())
        else:
            size = _index(member.op.grid_shape[0], here)
        inside = arith.CmpiOp(local, size, "ult")
        then = member_body(member.callee, values, local, size)
        last = k == len(group) - 1
        otherwise = None if last else Block()
        branch = scf.IfOp(inside.result, [], Region(then),
                          None if otherwise is None else Region(otherwise))
        here.add_ops([inside, branch])
        if otherwise is not None:
            elses.append(otherwise)
            here = otherwise
            offset = _plus(offset, size if sized is not None else member.op.grid_shape[0],
                           here)
    for block in elses:
        block.add_op(scf.YieldOp())
    top.add_op(kernel.ReturnOp())
    Rewriter.insert_op(fused, InsertPoint.after(group[-1].callee))  # type: ignore[arg-type]
    kernels[name] = fused
    return name


def declare_buffers(callee: kernel.FuncOp, before: Operation, values: dict[SSAValue, SSAValue],
                    pool: SharedPool) -> None:
    """``callee``'s buffer declarations in the fused kernel, in front of ``before`` (an op
    of its top level), each mapped in ``values``. The fused kernel runs ``callee``'s body
    at a time no other body uses its shared buffers, so the ``n``-th shared buffer of a
    kind is the ``pool``'s ``n``-th of that kind where there is one; the others are new
    and join the pool."""
    taken: dict[tuple[Attribute, str], int] = {}
    for op in callee.body.block.ops:
        if not isinstance(op, kernel.BufferDeclOp):
            continue
        if isinstance(op, kernel.SharedOp):  # one of the pool's?
            kind = shared_kind(op)
            n = taken[kind] = taken.get(kind, 0) + 1
            if n <= len(pool.get(kind, [])):
                values[op.result] = pool[kind][n - 1]
                continue
        copy = op.clone(value_mapper=values)
        assert before.parent is not None
        before.parent.insert_op_before(copy, before)
        values[op.result] = copy.result
        if isinstance(op, kernel.SharedOp):
            pool.setdefault(shared_kind(op), []).append(copy.result)


def _index(value: int | SSAValue, block: Block) -> SSAValue:
    """``value`` as an ``index`` SSA value (a constant added to ``block``)."""
    if not isinstance(value, int):
        return value
    const = arith.ConstantOp(IntegerAttr(value, IndexType()))
    block.add_op(const)
    return const.result


def _plus(offset: int | SSAValue, size: int | SSAValue, block: Block) -> int | SSAValue:
    """``offset + size``: an ``int`` while both are static, else an ``arith.addi`` added to
    ``block``."""
    if isinstance(offset, int) and isinstance(size, int):
        return offset + size
    if isinstance(offset, int) and offset == 0:
        return size
    total = arith.AddiOp(_index(offset, block), _index(size, block))
    block.add_op(total)
    return total.result


def member_body(callee: kernel.FuncOp, values: dict[SSAValue, SSAValue], block_id: SSAValue,
                grid: SSAValue) -> Block:
    """The ops of ``callee`` (its parameters and buffers mapped by ``values``) as the body of
    a member's branch: ``kernel.block_id x`` is ``block_id``, ``kernel.grid_dim x`` is
    ``grid``, the buffer declarations and ``kernel.return`` are left out."""
    body = Block()
    for op in callee.body.block.ops:
        if not isinstance(op, kernel.BufferDeclOp | kernel.ReturnOp):
            body.add_op(op.clone(value_mapper=values))
    special = [op for op in body.walk() if isinstance(op, kernel.BlockIdOp | kernel.GridDimOp)]
    for op in special:
        if op.dim.data == "x":
            op.result.replace_all_uses_with(
                block_id if isinstance(op, kernel.BlockIdOp) else grid)
            op.detach()
            op.erase()
    body.add_op(scf.YieldOp())
    return body


def unique_name(base: str, taken: dict[str, kernel.FuncOp]) -> str:
    """``base``, or ``base_2``, ``base_3`` … whichever is free."""
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    return name
