"""``fuse-launches``: independent launches of one block shape become one launch.

**Matches** the ``kernel.launch`` ops of each block of a host function, in *runs*: the
launches between two ops that touch memory otherwise (a host ``memref.store``, a copy, a
``memref.dealloc``, an op with regions, ``func.return``); allocations, views and scalar
ops inside a run do not end it. Within a run a launch *depends on* an earlier one when one
of them writes a buffer that the other reads or writes (buffers compared by the allocation
or argument they view; a kernel writes what it stores or copies into). Each launch gets a
*level*: one more than the highest level of the launches it depends on, 0 if none. Launches
of one level are independent of each other. Of those, the launches that can share a kernel
— a static grid ``[g, 1, 1]``, no dynamic shared memory, the same block shape, a
``kernel.func`` callee — form a group, as long as the group's shared buffers together
stay within ``shared_slack`` bytes of its largest member's (a block runs one member, but
holds every member's shared buffers: two tiled products would halve their occupancy).

**Produces** for each group of two or more one ``kernel.func`` whose grid is the members'
grids end to end: block ``b`` runs member ``i`` when ``b - offset_i`` is below its grid
``g_i``, with ``kernel.block_id x`` replaced by ``b - offset_i`` and ``kernel.grid_dim x``
by ``g_i`` (so every index is what it was in the member's own launch), behind one
``scf.if`` per member; the condition is the same for every thread of a block, so the
members' barriers stay block-uniform. The members' ``kernel.shared``/``kernel.local``
buffers move to the fused kernel's top level. The parameters are the members' launch
operands, each distinct value once (the members of a level only read a buffer they share).
The run's launches are emitted at its end, level by level, each group as its fused launch;
identical groups (the same members, grids and operand pattern, as in every layer of a
model) share one fused kernel, and a kernel no launch is left for is erased.

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
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import MemoryEffectKind, is_side_effect_free, only_has_effect

from llmopt.dialects import kernel
from llmopt.lowering._cuda_analysis import buffer_root, written_buffers

__all__ = ["FuseLaunches", "fuse_launches"]

SHARED_SLACK = 4096
"""Default of the ``shared_slack`` option, in bytes."""


def _free_in_run(op: Operation) -> bool:
    """``op`` may sit between the launches of a run: it touches no memory (constants,
    views, scalar arithmetic) or only allocates."""
    if op.regions:
        return False
    return is_side_effect_free(op) or only_has_effect(op, MemoryEffectKind.ALLOC)


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
        if (self.callee is None or self.op.grid_size is not None or grid[1:] != (1, 1)
                or self.op.shared_bytes != 0):
            return None  # (buffer declarations sit at a kernel's top level: its verifier)
        return self.op.block_shape


def shared_bytes(callee: kernel.FuncOp) -> int:
    """The bytes of ``callee``'s ``kernel.shared`` buffers."""
    total = 0
    for op in callee.body.block.ops:
        if isinstance(op, kernel.SharedOp):
            typ = op.result.type
            assert isinstance(typ, MemRefType)
            total += typ.element_count() * max(getattr(typ.element_type, "bitwidth", 32) // 8, 1)
    return total


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
            elif not _free_in_run(op):
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
        sizes = [self.shared_bytes(x.callee) for x in group if x.callee is not None]
        return sum(sizes) <= max(sizes) + self.slack

    def fused_launch(self, group: list[_Launch]) -> kernel.LaunchOp:
        """One launch of the fused kernel of ``group`` (built once per distinct group)."""
        operands: list[SSAValue] = []
        for member in group:
            operands += [a for a in member.op.args if a not in operands]
        pattern = tuple(tuple(operands.index(a) for a in m.op.args) for m in group)
        grids = tuple(m.op.grid_shape[0] for m in group)
        names = tuple(m.op.kernel.root_reference.data for m in group)
        key = (names, grids, pattern)
        if key not in self.fused:
            self.fused[key] = self.build(group, operands, pattern)
        block = group[0].op.block_shape
        return kernel.LaunchOp(self.fused[key], [sum(grids), 1, 1], list(block), operands)

    def build(self, group: list[_Launch], operands: list[SSAValue],
              pattern: tuple[tuple[int, ...], ...]) -> str:
        """The fused ``kernel.func`` of ``group``, added to the module; its name."""
        name = unique_name("__".join(m.op.kernel.root_reference.data for m in group),
                           self.kernels)
        fused = kernel.FuncOp(name, [a.type for a in operands], group[0].op.block_shape)
        top = fused.body.block
        for arg, operand in zip(top.args, operands, strict=True):
            arg.name_hint = operand.name_hint
        bid = kernel.BlockIdOp("x")
        top.add_op(bid)
        here, offset, elses = top, 0, []
        for k, (member, params) in enumerate(zip(group, pattern, strict=True)):
            assert member.callee is not None
            grid = member.op.grid_shape[0]
            values: dict[SSAValue, SSAValue] = dict(zip(
                member.callee.body.block.args, (top.args[p] for p in params), strict=True))
            for op in member.callee.body.block.ops:  # buffers first, at the top level
                if isinstance(op, kernel.BufferDeclOp):
                    copy = op.clone(value_mapper=values)
                    top.insert_op_before(copy, bid)
                    values[op.result] = copy.result
            local: SSAValue = bid.result
            if offset:
                start = arith.ConstantOp(IntegerAttr(offset, IndexType()))
                minus = arith.SubiOp(bid.result, start.result)
                here.add_ops([start, minus])
                local = minus.result
            size = arith.ConstantOp(IntegerAttr(grid, IndexType()))
            inside = arith.CmpiOp(local, size.result, "ult")
            then = member_body(member.callee, values, local, size.result)
            last = k == len(group) - 1
            otherwise = None if last else Block()
            branch = scf.IfOp(inside.result, [], Region(then),
                              None if otherwise is None else Region(otherwise))
            here.add_ops([size, inside, branch])
            if otherwise is not None:
                elses.append(otherwise)
                here = otherwise
            offset += grid
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
