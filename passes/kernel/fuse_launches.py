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
memory, the same block shape, a ``kernel.func`` callee that sets no registers
(``kernel.set_max_registers``, whose branches must run to the kernel's end) — form a
group, as long as the group's shared buffers together stay within ``shared_slack`` bytes
of its largest member's (a block holds the shared buffers of the fused kernel, not of its
member alone: two tiled products would halve their occupancy). Counted as the fused
kernel holds them: each kind of buffer (type and attributes) as often as the member with
the most of it.

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
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from llmopt.dialects import kernel
from llmopt.passes._ir import allocates_at_most
from llmopt.passes.kernel._fuse_kernel import build_fused
from llmopt.passes.kernel._fuse_members import (
    Launch,
    fused_shared_bytes,
    grid_expression,
    group_length,
    launch_of,
    shared_bytes,
)

__all__ = ["FuseLaunches", "fuse_launches"]

SHARED_SLACK = 4096
"""Default of the ``shared_slack`` option, in bytes."""


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

    def shared_bytes(self, callee: kernel.FuncOp) -> int:
        name = callee.sym_name.data
        if name not in self.shared:
            self.shared[name] = shared_bytes(callee)
        return self.shared[name]

    def launch(self, op: kernel.LaunchOp) -> Launch:
        return launch_of(op, self.kernels, self.writes)

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
        groups: list[list[Launch]] = []
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

    def groups(self, level: list[Launch]) -> list[list[Launch]]:
        """The launches of one level in groups (in order of their first member)."""
        groups: list[list[Launch]] = []
        open_groups: dict[tuple[int, ...], list[Launch]] = {}
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

    def fits(self, group: Sequence[Launch]) -> bool:
        """Whether ``group`` may share a kernel: within the shared-memory slack, and,
        where a member's grid is runtime, one ``index`` operand among the members (the
        length its grid is computed from again)."""
        callees = [x.callee for x in group if x.callee is not None]
        largest = max(self.shared_bytes(c) for c in callees)
        lengths = {a for x in group for a in x.op.args if isinstance(a.type, IndexType)}
        runtime = any(x.op.grid_size is not None for x in group)
        return (fused_shared_bytes(callees) <= largest + self.slack
                and (len(lengths) <= 1 or not runtime))

    def fused_launch(self, group: list[Launch]) -> kernel.LaunchOp:
        """One launch of the fused kernel of ``group`` (built once per distinct group),
        after the host ops that sum its members' runtime grids (if any)."""
        operands: list[SSAValue] = []
        for member in group:
            operands += [a for a in member.op.args if a not in operands]
        pattern = tuple(tuple(operands.index(a) for a in m.op.args) for m in group)
        length = group_length(group)
        sizes = tuple(None if m.op.grid_size is None or length is None
                      else grid_expression(m.op.grid_size, length) for m in group)
        # key() and fits() admit a runtime grid only as arithmetic of the group's one length
        assert all((m.op.grid_size is None) == (e is None) for m, e in zip(group, sizes,
                                                                             strict=True))
        grids = tuple(m.op.grid_shape[0] for m in group)
        names = tuple(m.op.kernel.root_reference.data for m in group)
        key = (names, grids, pattern, sizes)
        if key not in self.fused:
            self.fused[key] = build_fused(group, operands, pattern, sizes, self.kernels)
        block = group[0].op.block_shape
        launch = kernel.LaunchOp(self.fused[key], [sum(grids), 1, 1], list(block), operands,
                                 grid_size=self.total_grid(group))
        return launch

    def total_grid(self, group: list[Launch]) -> SSAValue | None:
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

    def erase_unused(self, launched_before: set[str]) -> None:
        """Erase the kernels that were launched before and are not any more."""
        launched = {op.kernel.root_reference.data for op in self.module.walk()
                    if isinstance(op, kernel.LaunchOp)}
        for name in launched_before - launched:
            callee = self.kernels.pop(name, None)
            if callee is not None:
                callee.detach()
                callee.erase()


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
