"""``fuse-launches``: independent launches of one block shape become one launch.

**Matches** the ``kernel.launch`` ops of each block of a host function, in *runs*: the
launches between two ops that touch memory otherwise (a host ``memref.store``, a copy, a
``memref.dealloc``, an op with regions, ``func.return``); allocations, views and scalar
ops inside a run do not end it. Within a run a launch *depends on* an earlier one when one
of them writes a buffer that the other reads or writes (buffers compared by the allocation
or argument they view; a kernel writes what it stores or copies into). Each launch gets a
*level*: one more than the highest level of the launches it depends on, 0 if none. Launches
of one level are independent of each other. Of those, the launches that can share a kernel
— a grid ``[g, 1, 1]`` (static, or a runtime ``[%g max G, 1, 1]``), no dynamic shared
memory, the same block shape, a ``kernel.func`` callee — form a group, as long as the
group's shared buffers together stay within ``shared_slack`` bytes of its largest
member's (a block holds the shared buffers of the fused kernel, not of its member alone:
two tiled products would halve their occupancy). Counted as the fused kernel holds them:
each kind of buffer (type and attributes) as often as the member with the most of it.

**Produces** for each group of two or more one ``kernel.func`` whose grid is the members'
grids end to end: block ``b`` runs member ``i`` when ``b - offset_i`` is below its grid
``g_i``, with ``kernel.block_id x`` replaced by ``b - offset_i`` and ``kernel.grid_dim x``
by ``g_i`` (so every index is what it was in the member's own launch), behind one
``scf.if`` per member. A member's runtime grid ``%g_i`` is ``index`` arithmetic of
constants and the length the members pass (their one ``index`` operand, which the fused
kernel takes once): the kernel computes it again from that parameter, its offsets from
those, and the fused launch's grid is their sum, computed on the host before it
(``[%total max ΣG, 1, 1]``); members whose grids are not such arithmetic, or that pass
different ``index`` operands, are not grouped. The condition is the same for every thread
of a block, so the members' barriers stay block-uniform. The members'
``kernel.shared``/``kernel.local`` buffers move to the fused kernel's top level, where
members share their shared buffers of one kind: a block runs one member, so the key, value
and query projections of one normalised row, each staging it (``warp-gemv``), stage it in
one buffer, and hold the shared memory of one. The
parameters are the members' launch operands, each distinct value once (the members of a
level only read a buffer they share). The run's launches are emitted at its end, level by
level, each group as its fused launch; identical groups (the same members, grids and
operand pattern, as in every layer of a model) share one fused kernel, and a kernel no
launch is left for is erased.

A symbolic program's launches have runtime grids (a length bucket's products and their
split-K sums, the rotary embeddings of a runtime number of tokens); with them the symbolic
layer fuses what the static one does.

**Why** a decode step is a chain of small kernels, and on the GPU each costs a launch and a
ramp up and down whatever it does: in a Llama layer the key and value projections (one
row each, the same block shape) and the rotary embeddings of the queries and the keys are
independent pairs, and the rotary tables' two casts another. One launch for each pair
removes those gaps without changing any member's code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, MemRefType, ModuleOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from llmopt.dialects import kernel
from llmopt.lowering._cuda_analysis import buffer_root, written_buffers
from llmopt.passes._ir import allocates_at_most
from llmopt.passes.kernel._index_expr import Expr, ExprBuilder, index_expr

__all__ = ["FuseLaunches", "fuse_launches"]

SHARED_SLACK = 4096
"""Default of the ``shared_slack`` option, in bytes."""


@dataclass
class _Launch:
    """A launch of a run and what it reads and writes (by root buffer)."""

    op: kernel.LaunchOp
    callee: kernel.FuncOp | None
    reads: set[SSAValue]
    writes: set[SSAValue]
    level: int = 0

    def conflicts(self, other: _Launch) -> bool:
        return bool(self.writes & (other.reads | other.writes) or other.writes & self.reads)

    def key(self) -> tuple[int, ...] | None:
        """What a group's members must share (the block shape), or ``None`` when the launch
        cannot be fused."""
        grid = self.op.grid_shape
        if self.callee is None or grid[1:] != (1, 1) or self.op.shared_bytes != 0:
            return None  # (buffer declarations sit at a kernel's top level: its verifier)
        if self.op.grid_size is not None:
            length = _length_operand(self.op)
            if length is None or grid_expression(self.op.grid_size, length) is None:
                return None
        return self.op.block_shape


def _buffer_bytes(typ: Attribute) -> int:
    assert isinstance(typ, MemRefType)
    return typ.element_count() * max(getattr(typ.element_type, "bitwidth", 32) // 8, 1)


def _shared_kind(op: kernel.SharedOp) -> tuple[Attribute, str]:
    """What makes two members' shared buffers interchangeable: type and attributes."""
    return op.result.type, str(op.attributes)


def shared_bytes(callee: kernel.FuncOp) -> int:
    """The bytes of ``callee``'s ``kernel.shared`` buffers."""
    return fused_shared_bytes([callee])


def fused_shared_bytes(callees: Sequence[kernel.FuncOp]) -> int:
    """The bytes of the shared buffers of a kernel fusing ``callees``: each kind of buffer
    (type and attributes) as many times as the member that has most of it (a block runs
    one member, so the members share their buffers of one kind)."""
    most: dict[tuple[Attribute, str], int] = {}
    for callee in callees:
        counts: dict[tuple[Attribute, str], int] = {}
        for op in callee.body.block.ops:
            if isinstance(op, kernel.SharedOp):
                kind = _shared_kind(op)
                counts[kind] = counts.get(kind, 0) + 1
        for kind, n in counts.items():
            most[kind] = max(most.get(kind, 0), n)
    return sum(_buffer_bytes(kind[0]) * n for kind, n in most.items())


@dataclass
class _Fuser:
    """Fuses the runs of one module (see the module docstring)."""

    module: ModuleOp
    slack: int
    kernels: dict[str, kernel.FuncOp] = field(default_factory=dict)
    fused: dict[tuple[object, ...], str] = field(default_factory=dict)
    writes: dict[str, set[int]] = field(default_factory=dict)
    shared: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for op in self.module.ops:
            if isinstance(op, kernel.FuncOp):
                self.kernels[op.sym_name.data] = op

    def written_params(self, callee: kernel.FuncOp) -> set[int]:
        name = callee.sym_name.data
        if name not in self.writes:
            stored = {buffer_root(v) for v in written_buffers(callee)}
            self.writes[name] = {k for k, a in enumerate(callee.body.block.args) if a in stored}
        return self.writes[name]

    def shared_bytes(self, callee: kernel.FuncOp) -> int:
        name = callee.sym_name.data
        if name not in self.shared:
            self.shared[name] = shared_bytes(callee)
        return self.shared[name]

    def launch(self, op: kernel.LaunchOp) -> _Launch:
        callee = self.kernels.get(op.kernel.root_reference.data)
        buffers = [(k, buffer_root(a)) for k, a in enumerate(op.args)
                   if isinstance(a.type, MemRefType)]
        if callee is None:  # unknown code: it may write any buffer it is given
            written = {root for _, root in buffers}
        else:
            params = self.written_params(callee)
            written = {root for k, root in buffers if k in params}
        return _Launch(op, callee, {root for _, root in buffers}, written)

    def run_block(self, block: Block) -> int:
        """Fuse the runs of ``block``; how many launches were saved."""
        saved = 0
        run: list[Operation] = []
        for op in list(block.ops):
            if isinstance(op, kernel.LaunchOp):
                run.append(op)
            elif not allocates_at_most(op):  # a run's launches may pass it
                saved += self.fuse_run(run)
                run = []
        return saved + self.fuse_run(run)

    def fuse_run(self, ops: list[Operation]) -> int:
        launches = [self.launch(op) for op in ops if isinstance(op, kernel.LaunchOp)]
        for k, launch in enumerate(launches):
            launch.level = 1 + max((e.level for e in launches[:k] if e.conflicts(launch)),
                                   default=-1)
        groups: list[list[_Launch]] = []
        for level in sorted({launch.level for launch in launches}):
            groups += self.groups([x for x in launches if x.level == level])
        if all(len(group) == 1 for group in groups):
            return 0
        last = launches[-1].op
        for group in groups:
            new = group[0].op if len(group) == 1 else self.fused_launch(group)
            if new.parent is not None:
                new.detach()
            Rewriter.insert_op(new, InsertPoint.after(last))
            last = new
        for group in groups:
            if len(group) > 1:
                for member in group:
                    member.op.detach()
                    member.op.erase()
        return sum(len(group) - 1 for group in groups)

    def groups(self, level: list[_Launch]) -> list[list[_Launch]]:
        """The launches of one level in groups (in order of their first member)."""
        groups: list[list[_Launch]] = []
        open_groups: dict[tuple[int, ...], list[_Launch]] = {}
        for launch in level:
            key = launch.key()
            group = open_groups.get(key) if key is not None else None
            if group is not None and self.fits([*group, launch]):
                group.append(launch)
                continue
            groups.append([launch])
            if key is not None:
                open_groups[key] = groups[-1]
        return groups

    def fits(self, group: Sequence[_Launch]) -> bool:
        """Whether ``group`` may share a kernel: within the shared-memory slack, and,
        where a member's grid is runtime, one ``index`` operand among the members (the
        length its grid is computed from again)."""
        callees = [x.callee for x in group if x.callee is not None]
        largest = max(self.shared_bytes(c) for c in callees)
        lengths = {a for x in group for a in x.op.args if isinstance(a.type, IndexType)}
        runtime = any(x.op.grid_size is not None for x in group)
        return (fused_shared_bytes(callees) <= largest + self.slack
                and (len(lengths) <= 1 or not runtime))

    def fused_launch(self, group: list[_Launch]) -> kernel.LaunchOp:
        """One launch of the fused kernel of ``group`` (built once per distinct group),
        after the host ops that sum its members' runtime grids (if any)."""
        operands: list[SSAValue] = []
        for member in group:
            operands += [a for a in member.op.args if a not in operands]
        pattern = tuple(tuple(operands.index(a) for a in m.op.args) for m in group)
        length = _length(group)
        sizes = tuple(None if m.op.grid_size is None or length is None
                      else grid_expression(m.op.grid_size, length) for m in group)
        # key() and fits() admit a runtime grid only as arithmetic of the group's one length
        assert all((m.op.grid_size is None) == (e is None) for m, e in zip(group, sizes,
                                                                             strict=True))
        grids = tuple(m.op.grid_shape[0] for m in group)
        names = tuple(m.op.kernel.root_reference.data for m in group)
        key = (names, grids, pattern, sizes)
        if key not in self.fused:
            self.fused[key] = self.build(group, operands, pattern, sizes)
        block = group[0].op.block_shape
        launch = kernel.LaunchOp(self.fused[key], [sum(grids), 1, 1], list(block), operands,
                                 grid_size=self.total_grid(group))
        return launch

    def total_grid(self, group: list[_Launch]) -> SSAValue | None:
        """The sum of ``group``'s grids as host ops put before its last member, where a
        member's grid is runtime; ``None`` when every grid is static."""
        if all(m.op.grid_size is None for m in group):
            return None
        ops: list[Operation] = []
        total: SSAValue | None = None
        for m in group:
            size = m.op.grid_size
            if size is None:
                const = arith.ConstantOp(IntegerAttr(m.op.grid_shape[0], IndexType()))
                ops.append(const)
                size = const.result
            if total is None:
                total = size
            else:
                add = arith.AddiOp(total, size)
                ops.append(add)
                total = add.result
        Rewriter.insert_op(ops, InsertPoint.before(group[-1].op))
        assert total is not None
        total.name_hint = "grid_fused"
        return total

    def build(self, group: list[_Launch], operands: list[SSAValue],
              pattern: tuple[tuple[int, ...], ...], sizes: tuple[Expr | None, ...]) -> str:
        """The fused ``kernel.func`` of ``group``, added to the module; its name. A
        member's ``sizes`` entry is its runtime grid as an expression of the length
        (:func:`grid_expression`; ``None``: its static grid)."""
        name = unique_name("__".join(m.op.kernel.root_reference.data for m in group),
                           self.kernels)
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
        pool: dict[tuple[Attribute, str], list[SSAValue]] = {}  # shared buffers, by kind
        for k, (member, params) in enumerate(zip(group, pattern, strict=True)):
            assert member.callee is not None
            values: dict[SSAValue, SSAValue] = dict(zip(
                member.callee.body.block.args, (top.args[p] for p in params), strict=True))
            taken: dict[tuple[Attribute, str], int] = {}
            for op in member.callee.body.block.ops:  # buffers first, at the top level
                if not isinstance(op, kernel.BufferDeclOp):
                    continue
                if isinstance(op, kernel.SharedOp):  # one an earlier member left free?
                    kind = _shared_kind(op)
                    n = taken[kind] = taken.get(kind, 0) + 1
                    if n <= len(pool.get(kind, [])):
                        values[op.result] = pool[kind][n - 1]
                        continue
                copy = op.clone(value_mapper=values)
                top.insert_op_before(copy, bid)
                values[op.result] = copy.result
                if isinstance(op, kernel.SharedOp):
                    pool.setdefault(_shared_kind(op), []).append(copy.result)
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
        self.kernels[name] = fused
        return name

    def erase_unused(self, launched_before: set[str]) -> None:
        """Erase the kernels that were launched before and are not any more."""
        launched = {op.kernel.root_reference.data for op in self.module.walk()
                    if isinstance(op, kernel.LaunchOp)}
        for name in launched_before - launched:
            callee = self.kernels.pop(name, None)
            if callee is not None:
                callee.detach()
                callee.erase()


def _length_operand(launch: kernel.LaunchOp) -> SSAValue | None:
    """The one ``index`` operand of ``launch`` (its length), ``None`` if none or
    several."""
    found = {a for a in launch.args if isinstance(a.type, IndexType)}
    return next(iter(found)) if len(found) == 1 else None


def _length(group: Sequence[_Launch]) -> SSAValue | None:
    """The length the members of ``group`` with runtime grids pass, when they all pass
    the same one."""
    found = {_length_operand(m.op) for m in group if m.op.grid_size is not None}
    return next(iter(found)) if len(found) == 1 else None


def grid_expression(value: SSAValue, length: SSAValue) -> Expr | None:
    """``value`` as arithmetic of constants and ``length`` (leaf ``("len",)``), or ``None``
    when it is anything else."""
    return index_expr(value, lambda v: ("len",) if v is length else None)


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


def fuse_launches(module: ModuleOp, shared_slack: int = SHARED_SLACK) -> int:
    """Fuse the independent launches of every host function of ``module`` (see the module
    docstring); how many launches were saved."""
    fuser = _Fuser(module, shared_slack)
    before = {op.kernel.root_reference.data for op in module.walk()
              if isinstance(op, kernel.LaunchOp)}
    saved = 0
    for host in [op for op in module.ops if isinstance(op, func.FuncOp)]:
        blocks = [b for op in host.walk() for r in op.regions for b in r.blocks]
        for block in blocks:
            saved += fuser.run_block(block)
    fuser.erase_unused(before)
    return saved


@dataclass(frozen=True)
class FuseLaunches(ModulePass):
    """Independent launches of one block shape as one launch (see the module docstring).
    Option: ``shared_slack``, the shared-memory bytes a group may add to its largest
    member's (default 4096)."""

    name = "fuse-launches"

    shared_slack: int = SHARED_SLACK

    def __post_init__(self) -> None:
        if (not isinstance(self.shared_slack, int) or isinstance(self.shared_slack, bool)
                or self.shared_slack < 0):
            raise ValueError(f"shared_slack must be a non-negative integer, got "
                             f"{self.shared_slack!r}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        fuse_launches(op, self.shared_slack)
