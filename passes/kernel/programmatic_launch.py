"""``programmatic-launch``: each kernel may be scheduled while the one before it drains.

**Matches** every ``kernel.launch`` of a ``kernel.func`` in the module, when the target
(option ``arch``) has programmatic dependent launch (sm_90 and newer; below that the pass
changes nothing).

**Produces** launches marked ``{programmatic}`` and kernels that open with::

    kernel.wait_prior_grids        // griddepcontrol.wait: the grids before are complete
    kernel.launch_dependents       // griddepcontrol.launch_dependents

The executor launches a ``programmatic`` launch with programmatic stream serialization:
the driver may start the kernel's blocks as soon as every block of the kernel in front of
it has passed its ``kernel.launch_dependents``, instead of after its last block has
exited and its writes have been flushed. Each block then waits in
``kernel.wait_prior_grids`` until that grid has completed and its memory is visible, so
nothing is read early; the wait comes before every other op (``lengths-in-memory`` keeps
it first when it adds the loads of the lengths). A kernel launched without the attribute
(a launch the driver does not serialize programmatically) passes the wait at once.

A kernel that asks for data ahead (``kernel.prefetch``: ``warp-gemv``'s weight rows) waits
after its prefetches instead (option ``prefetch_first``, default ``true``; ``false`` keeps
the wait first, so the prefetches run ahead of the kernel's own loads only, such as the row
statistics a product computes before its first weight): the prologue goes in front of the
first op that touches memory, and where that op's regions (the loop over the blocks, a fused
member's branch) prefetch first, into those regions, in front of their own first such op
(again on each later path, since a wait that has returned returns at once). The prefetches
then run while the grid in front still does: a hint changes no value, so it needs no wait.
Such a kernel reads its lengths before the wait too (``lengths-in-memory``), which the host
wrote before any kernel ran. ``kernel.launch``'s verifier checks the placement: nothing but
prefetches, declarations, ids, index arithmetic and length loads before a wait on any path.

**Spreading** (option ``spread``, 1 = on, the default): a programmatic grid is placed
while the grid in front of it still holds most multiprocessors, so its blocks land where
room frees first, several to a multiprocessor when they fit, and a grid of at most one
block per multiprocessor (a product of 128 row tiles, a split-K slice) can run on half of
them. With ``spread`` such a launch (at most ``sms`` blocks, its runtime grid's maximum
counted) asks for more than half of a multiprocessor's shared memory (``smem``, raised to
:func:`spread_smem`), so each block needs a multiprocessor of its own and they spread as
an unmarked launch's do. The kernel uses no more than it did; the launch only reserves it.

**Prefetches behind short kernels only** (option ``prefetch_after``, a number of blocks;
off by default): a kernel keeps its ``kernel.prefetch`` ops only where every launch of it
follows a launch of at most that many blocks (its runtime grid's maximum counted; the first
launch of a function follows nothing), and loses them elsewhere (the loops and branches
left empty go too). A prefetch before the wait can only pay while the kernel in front
leaves memory idle (an RMSNorm of one block, a split-key merge of a few); behind a product
streaming its own weights it competes with that stream. Whether it pays there is measured
in ``bench/results/decode-prefetch-after-h100.md``.

**Carveout** (option ``carveout``, a percentage; off by default): every launch asks for the
same share of the unified L1/shared memory as shared memory, on the theory that a
multiprocessor holds blocks of one carveout at a time, so that a product using no shared
memory could not join a draining kernel that reserved a lot. A decode step measured slower
with ``carveout=100`` than with the driver's own choices
(``bench/results/decode-ab-prefetch-h200.md``); the option stays for other targets.

**Why** a decode step is a chain of a few hundred short kernels, each of a few
microseconds, and between two of them the GPU idles: the launch is processed and the new
grid's blocks are distributed only once the previous grid is done. With the next grid
already resident when the previous one ends, that gap overlaps the previous kernel's
tail. The order of the two ops follows that intent: a kernel lets its successor launch
once it is itself running (after its wait), so at most one grid waits on another.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, UnitAttr, i64
from xdsl.ir import Block, Operation
from xdsl.passes import ModulePass
from xdsl.transforms.dead_code_elimination import region_dce
from xdsl.utils.exceptions import PassFailedException

from llmopt.dialects import kernel
from llmopt.target import DEFAULT_ARCH, GRID_DEPENDENCY_MIN_SM, Target, arch_number, for_arch

__all__ = ["ProgrammaticLaunch", "programmatic_launch"]


def _prologue() -> list[Operation]:
    return [kernel.WaitPriorGridsOp(), kernel.LaunchDependentsOp()]


def _free(op: Operation) -> bool:
    """Whether ``op``, and every op inside it, may run before the wait."""
    if op.regions:
        return all(_free(inner) for region in op.regions for block in region.blocks
                   for inner in block.ops)
    return kernel.before_wait(op)


def _prefetch_ahead(block: Block) -> bool:
    """Whether a ``kernel.prefetch`` runs in ``block`` before its first op that must wait."""
    for op in block.ops:
        if _free(op):
            if any(isinstance(inner, kernel.PrefetchOp) for inner in op.walk()):
                return True
            continue
        return any(_prefetch_ahead(b) for region in op.regions for b in region.blocks)
    return False


def _place_wait(block: Block) -> None:
    """Put the prologue in front of ``block``'s first op that must wait, or, where that op's
    regions prefetch first, into those regions, in front of their own first such op; then
    on to the next op, which a path that did not enter the regions reaches unwaited."""
    for op in list(block.ops):
        if _free(op):
            continue
        if not _prefetch_ahead_of(op):
            block.insert_ops_before(_prologue(), op)
            return
        for region in op.regions:
            for inner in region.blocks:
                _place_wait(inner)


def _prefetch_ahead_of(op: Operation) -> bool:
    return any(_prefetch_ahead(b) for region in op.regions for b in region.blocks)


def _open_with_wait(fn: kernel.FuncOp, prefetch_first: bool = True) -> None:
    """Give ``fn`` its grid-dependency prologue (once): first, or where the kernel prefetches
    before it touches memory and ``prefetch_first``, after those prefetches (see the module
    docstring)."""
    block = fn.body.block
    if any(isinstance(op, kernel.WaitPriorGridsOp) for op in fn.walk()):
        return
    if prefetch_first and any(isinstance(op, kernel.PrefetchOp) for op in fn.walk()):
        _place_wait(block)
        return
    block.insert_ops_before(_prologue(), block.first_op)  # type: ignore[arg-type]


def _blocks(launch: kernel.LaunchOp) -> int:
    return math.prod(launch.grid_shape)


def _behind_large(module: ModuleOp, most: int) -> set[str]:
    """The kernels launched at least once right behind a launch of more than ``most``
    blocks (in the order of each function's launches)."""
    names: set[str] = set()
    for fn in module.ops:
        if isinstance(fn, kernel.FuncOp):
            continue
        before: kernel.LaunchOp | None = None
        for op in fn.walk():
            if not isinstance(op, kernel.LaunchOp):
                continue
            if before is not None and _blocks(before) > most:
                names.add(op.kernel.root_reference.data)
            before = op
    return names


def _drop_prefetches(fn: kernel.FuncOp) -> None:
    """Erase ``fn``'s prefetches, then what only they used (the loops and branches left
    empty, their index arithmetic)."""
    for op in [op for op in fn.walk() if isinstance(op, kernel.PrefetchOp)]:
        op.detach()
        op.erase()
    region_dce(fn.body)


def spread_smem(gpu: Target) -> int:
    """Dynamic shared memory that leaves room for one block a multiprocessor of ``gpu``:
    half of a multiprocessor's, plus the 1 KiB the hardware reserves a block."""
    return gpu.smem_per_sm // 2 + 1024


def programmatic_launch(module: ModuleOp, spread: Target | None = None,
                        carveout: int | None = None, prefetch_first: bool = True,
                        prefetch_after: int | None = None) -> int:
    """Mark every launch of ``module`` programmatic and open its kernel with the wait (after
    its first prefetches when ``prefetch_first``); with ``spread``, a launch of at most
    ``spread.sms`` blocks reserves :func:`spread_smem`; with ``carveout``, every launch asks
    for that shared-memory carveout; with ``prefetch_after``, a kernel launched behind a
    larger grid loses its prefetches (see the module docstring). Returns the number of
    launches marked."""
    marked = 0
    kernels = {op.sym_name.data: op for op in module.ops if isinstance(op, kernel.FuncOp)}
    if prefetch_after is not None:
        for name in _behind_large(module, prefetch_after):
            if name in kernels:
                _drop_prefetches(kernels[name])
    for op in module.walk():
        if not isinstance(op, kernel.LaunchOp):
            continue
        callee = kernels.get(op.kernel.root_reference.data)
        if callee is None:
            name = op.kernel.root_reference.data
            raise PassFailedException(
                f"programmatic-launch: @{name} is not a kernel.func (the pass runs on Kernel "
                "IR, before kernel-to-cuda)")
        _open_with_wait(callee, prefetch_first)
        op.attributes[kernel.PROGRAMMATIC] = UnitAttr()
        if spread is not None and math.prod(op.grid_shape) <= spread.sms:
            op.smem = IntegerAttr(max(op.shared_bytes, spread_smem(spread)), i64)
        if carveout is not None:
            op.attributes[kernel.CARVEOUT] = IntegerAttr(carveout, i64)
        marked += 1
    return marked


@dataclass(frozen=True)
class ProgrammaticLaunch(ModulePass):
    """Programmatic dependent launch for every kernel (see the module docstring). Options:
    ``arch`` (default ``sm_90``; below sm_90 the pass changes nothing), ``spread`` (1, the
    default: a launch of at most one block a multiprocessor reserves more than half of
    one's shared memory; 0: off), ``carveout`` (-1, the default: the driver chooses each
    kernel's shared-memory carveout; 0-100: every kernel prefers that percentage),
    ``prefetch_first`` (default ``true``: a kernel that prefetches waits after its first
    prefetches; ``false``: every kernel waits first, its prefetches after),
    ``prefetch_after`` (-1, the default: every kernel keeps its prefetches; N: only kernels
    whose every launch follows a launch of at most N blocks keep them)."""

    name = "programmatic-launch"

    arch: str = DEFAULT_ARCH
    spread: int = 1
    carveout: int = -1
    prefetch_first: bool = True
    prefetch_after: int = -1

    def __post_init__(self) -> None:
        if self.spread not in (0, 1):
            raise ValueError(f"spread must be 0 or 1, got {self.spread}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if arch_number(self.arch) >= GRID_DEPENDENCY_MIN_SM:
            programmatic_launch(op, for_arch(self.arch) if self.spread else None,
                                None if self.carveout < 0 else self.carveout,
                                self.prefetch_first,
                                None if self.prefetch_after < 0 else self.prefetch_after)
