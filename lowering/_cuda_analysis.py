"""What ``kernel-to-cuda`` learns about a module before it lowers its kernels: which buffers
each kernel writes (those stay non-``const`` pointers), which parameters may alias a written
one in some launch (those lose ``__restrict__``), and whether the target has the tensor-core
instructions the kernels use.

``__restrict__`` promises the CUDA compiler that no other pointer of the kernel reaches the
same memory, which lets it keep loaded values in registers across stores. The promise is
kept by dropping it, kernel by kernel, for every buffer that some ``kernel.launch`` passes
twice, or together with a view of the same allocation, when one of them is written.
"""

from __future__ import annotations

from xdsl.dialects.builtin import MemRefType, ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.utils.exceptions import PassFailedException

from llmopt.dialects import kernel, mma, wgmma
from llmopt.dialects.kernel import enclosing_func
from llmopt.target import (
    BULK_PREFETCH_MIN_SM,
    GRID_DEPENDENCY_MIN_SM,
    LDMATRIX_MIN_SM,
    MMA_SHAPES,
    TF32_MMA,
    WGMMA_ARCH,
    for_arch,
)

__all__ = ["buffer_root", "check_tensor_cores", "unrestricted_params", "written_buffers"]

# Views: values that alias their first operand (for the __restrict__ analysis).
_VIEW_OPS = frozenset({
    "memref.cast", "memref.collapse_shape", "memref.expand_shape", "memref.reshape",
    "memref.subview", "memref.reinterpret_cast", "memref.view",
})  # fmt: skip


def buffer_root(value: SSAValue) -> SSAValue:
    """The allocation or argument a memref value views."""
    while isinstance(value.owner, Operation) and value.owner.name in _VIEW_OPS:
        value = value.owner.operands[0]
    return value


def written_buffers(func: kernel.FuncOp) -> set[SSAValue]:
    """The buffers that ``func`` stores to or copies into (a ``kernel.last_block``'s
    counter among them)."""
    written: set[SSAValue] = set()
    for op in func.walk():
        if isinstance(op, kernel.StoreOp):
            written.add(op.buffer)
        elif isinstance(op, kernel.CopyBase):
            written.add(op.dst)
        elif isinstance(op, kernel.LastBlockOp):
            written.add(op.counter)
    return written


def unrestricted_params(module: ModuleOp) -> dict[str, set[int]]:
    """For each kernel name, the parameters that may alias a written parameter in a launch."""
    written: dict[str, set[int]] = {}
    for op in module.ops:
        if isinstance(op, kernel.FuncOp):
            stored = written_buffers(op)
            written[op.sym_name.data] = {
                k for k, arg in enumerate(op.body.block.args) if arg in stored
            }
    result: dict[str, set[int]] = {}
    for launch in module.walk():
        if not isinstance(launch, kernel.LaunchOp):
            continue
        name = launch.kernel.root_reference.data
        writes = written.get(name, set())
        groups: dict[SSAValue, list[int]] = {}
        for k, arg in enumerate(launch.args):
            if isinstance(arg.type, MemRefType):
                groups.setdefault(buffer_root(arg), []).append(k)
        for members in groups.values():
            if len(members) > 1 and writes.intersection(members):
                result.setdefault(name, set()).update(members)
    return result


def check_tensor_cores(module: ModuleOp, arch: str) -> None:
    """``mma`` ops need an arch that has them — ``mma.sync`` of each shape (TF32 ``m16n8k8``,
    ``bf16``/``f16`` ``m16n8k16``: sm_80 or newer), ``mma.to_tf32`` like the TF32 product,
    ``ldmatrix`` sm_75 or newer; so do ``kernel.wait_prior_grids`` and
    ``kernel.launch_dependents`` (``griddepcontrol``, sm_90), and ``kernel.prefetch``
    (``cp.async.bulk.prefetch``, sm_90): an error naming the kernel
    otherwise (NVRTC's own would name a PTX line). ``wgmma`` ops and
    ``kernel.set_max_registers`` (``setmaxnreg``) need sm_90a itself."""
    target = for_arch(arch)
    for op in module.walk():
        if isinstance(op, mma.SyncOp):
            shape = next(s for s in MMA_SHAPES if s.operands == op.kind)
            needs = None if target.has_mma(shape) else shape.min_sm
        elif isinstance(op, mma.ToTf32Op):
            needs = None if target.has_mma() else TF32_MMA.min_sm
        elif isinstance(op, mma.LdMatrixOp):
            needs = None if target.sm >= LDMATRIX_MIN_SM else LDMATRIX_MIN_SM
        elif isinstance(op, kernel.WaitPriorGridsOp | kernel.LaunchDependentsOp):
            needs = None if target.sm >= GRID_DEPENDENCY_MIN_SM else GRID_DEPENDENCY_MIN_SM
        elif isinstance(op, kernel.PrefetchOp):
            needs = None if target.sm >= BULK_PREFETCH_MIN_SM else BULK_PREFETCH_MIN_SM
        elif isinstance(op, wgmma.FenceOp | wgmma.MmaOp | wgmma.CommitOp | wgmma.WaitOp
                        | kernel.SetMaxRegistersOp):
            if arch != WGMMA_ARCH:  # sm_90a's own instructions, in no other architecture
                func = enclosing_func(op)
                name = func.sym_name.data if func is not None else "?"
                raise PassFailedException(f"kernel-to-cuda: kernel '{name}' uses {op.name}, "
                                          f"which only {WGMMA_ARCH} has; the target is {arch}")
            continue
        else:
            continue
        if needs is not None:
            func = enclosing_func(op)
            name = func.sym_name.data if func is not None else "?"
            raise PassFailedException(f"kernel-to-cuda: kernel '{name}' uses {op.name}, which "
                                      f"needs sm_{needs} or newer; the target is {arch}")
