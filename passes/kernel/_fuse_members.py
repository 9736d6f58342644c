"""What ``fuse-launches`` knows of a launch: its buffers, its shared memory, its grid.

A launch of a run with the root buffers it reads and writes and what a group's members must
share; the shared-memory bytes of a kernel fusing several (each kind of buffer as often as
the member with the most of it); the length a runtime grid is computed from (see
:mod:`llmopt.passes.kernel.fuse_launches`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import IndexType, MemRefType
from xdsl.ir import Attribute, SSAValue

from llmopt.dialects import kernel
from llmopt.lowering._cuda_analysis import buffer_root, written_buffers
from llmopt.passes.kernel._index_expr import Expr, index_expr


@dataclass
class Launch:
    """A launch of a run and what it reads and writes (by root buffer)."""

    op: kernel.LaunchOp
    callee: kernel.FuncOp | None
    reads: set[SSAValue]
    writes: set[SSAValue]
    level: int = 0

    def conflicts(self, other: Launch) -> bool:
        """Whether one of ``self`` and ``other`` writes a buffer the other reads or writes."""
        return bool(self.writes & (other.reads | other.writes) or other.writes & self.reads)

    def key(self) -> tuple[int, ...] | None:
        """What a group's members must share (the block shape), or ``None`` when the launch
        cannot be fused."""
        grid = self.op.grid_shape
        if self.callee is None or grid[1:] != (1, 1) or self.op.shared_bytes != 0:
            return None  # (buffer declarations sit at a kernel's top level: its verifier)
        if any(isinstance(op, kernel.SetMaxRegistersOp) for op in self.callee.walk()):
            return None  # its roles' branches must run to the end of the kernel
        if self.op.grid_size is not None:
            length = length_operand(self.op)
            if length is None or grid_expression(self.op.grid_size, length) is None:
                return None
        return self.op.block_shape


def launch_of(op: kernel.LaunchOp, kernels: dict[str, kernel.FuncOp],
              writes: dict[str, set[int]]) -> Launch:
    """``op`` with the root buffers it reads and writes; ``kernels`` are the module's by
    name, ``writes`` remembers the parameters each callee writes (filled as needed). A
    launch of unknown code may write any buffer it is given."""
    callee = kernels.get(op.kernel.root_reference.data)
    buffers = [(k, buffer_root(a)) for k, a in enumerate(op.args)
               if isinstance(a.type, MemRefType)]
    if callee is None:
        written = {root for _, root in buffers}
    else:
        name = callee.sym_name.data
        if name not in writes:
            stored = {buffer_root(v) for v in written_buffers(callee)}
            writes[name] = {k for k, a in enumerate(callee.body.block.args) if a in stored}
        written = {root for k, root in buffers if k in writes[name]}
    return Launch(op, callee, {root for _, root in buffers}, written)


def _buffer_bytes(typ: Attribute) -> int:
    """The bytes of a buffer of memref type ``typ``."""
    assert isinstance(typ, MemRefType)
    return typ.element_count() * max(getattr(typ.element_type, "bitwidth", 32) // 8, 1)


def shared_kind(op: kernel.SharedOp) -> tuple[Attribute, str]:
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
                kind = shared_kind(op)
                counts[kind] = counts.get(kind, 0) + 1
        for kind, n in counts.items():
            most[kind] = max(most.get(kind, 0), n)
    return sum(_buffer_bytes(kind[0]) * n for kind, n in most.items())


def length_operand(launch: kernel.LaunchOp) -> SSAValue | None:
    """The one ``index`` operand of ``launch`` (its length), ``None`` if none or
    several."""
    found = {a for a in launch.args if isinstance(a.type, IndexType)}
    return next(iter(found)) if len(found) == 1 else None


def group_length(group: Sequence[Launch]) -> SSAValue | None:
    """The length the members of ``group`` with runtime grids pass, when they all pass
    the same one."""
    found = {length_operand(m.op) for m in group if m.op.grid_size is not None}
    return next(iter(found)) if len(found) == 1 else None


def grid_expression(value: SSAValue, length: SSAValue) -> Expr | None:
    """``value`` as arithmetic of constants and ``length`` (leaf ``("len",)``), or ``None``
    when it is anything else."""
    return index_expr(value, lambda v: ("len",) if v is length else None)
