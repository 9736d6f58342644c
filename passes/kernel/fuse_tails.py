"""``fuse-tails``: a small launch that reads what the launch before it wrote runs in that
launch's last block.

**Matches** two ``kernel.launch`` ops of one block of a host function, *A* then *B*, with
nothing between them but allocations, views, scalar ops and launches independent of *A*
(neither one writes what the other reads or writes: *A* moves after them), where

* both launch a ``kernel.func`` of the module, with one-dimensional blocks;
* *B* reads a buffer that *A* writes (a pair that does not depend on each other is
  ``fuse-launches``' business), *A* the latest such launch that fits;
* *B*'s grid is static, ``[g, 1, 1]``, and it has no dynamic shared memory;
* *A* and *B* have one block shape, or *B*'s threads never talk to each other (no
  barrier, shuffle, shared buffer, copy or tensor-core op): then *A*'s threads stride over
  *B*'s ``g`` times its block size threads;
* one block of *A* does *B*'s work in at most ``max_rounds`` rounds (``g`` with one block
  shape, else *B*'s threads over *A*'s block size, rounded up; default 1): the rounds run
  one after another, each about a memory latency long, while a launch saved is worth
  about one;
* the shared buffers of both stay within ``shared_slack`` bytes of the larger one's.

**Produces** one launch, on *A*'s grid, of a kernel ``A__last_B``: *A*'s body, then
``kernel.last_block %counter { ... }`` holding *B*'s body, in a loop over *B*'s blocks
(``kernel.block_id x`` the loop variable, ``kernel.grid_dim x`` the constant ``g``, a
barrier between two blocks) or over its threads (``kernel.thread_id x`` and
``kernel.block_id x`` computed from the loop variable). A kernel that has a
``kernel.last_block`` already (a chain: *B* was fused into it before) gets *B* appended to
that region behind a barrier. The two kernels' shared buffers of one kind are one buffer,
since the region starts after every thread is done with *A*'s. ``%counter`` is one
``memref<1xi32>`` that the host function allocates zeroed (``{llmopt.zeroed}``), first
thing, for all its tails: every launch leaves it at zero, and launches run one after
another (a ``programmatic`` launch touches memory only after the grid before it is
complete). Identical pairs (the same kernels and operand pattern, as in every layer of a
model) share one fused kernel, and a kernel no launch is left for is erased.

**Why** a decode step is a chain of short kernels, and each one costs a launch and the ramp
of its grid. Several of a Llama layer's are tiny and come right after the product whose
output they read: the rotary embeddings and cache append after the query/key/value
projections, the merge of split-key attention after the attention, the RMSNorm after each
residual sum. In the product's last block they start the moment the product's grid is
done, with no launch in between, and the product's other blocks are already free.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import func, memref
from xdsl.dialects.builtin import (
    FunctionType,
    IntegerType,
    MemRefType,
    ModuleOp,
    StringAttr,
    UnitAttr,
)
from xdsl.ir import Block, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from llmopt.codegen.plan import ZEROED_ATTR
from llmopt.dialects import kernel
from llmopt.passes._ir import allocates_at_most
from llmopt.passes.kernel._fuse_kernel import SharedPool, declare_buffers, unique_name
from llmopt.passes.kernel._fuse_members import (
    Launch,
    fused_shared_bytes,
    launch_of,
    shared_bytes,
    shared_kind,
)
from llmopt.passes.kernel._tail_body import independent_threads, tail_body

__all__ = ["FuseTails", "fuse_tails"]

MAX_ROUNDS = 1
"""Default of the ``max_rounds`` option: how many rounds of *A*'s block a tail may take."""

SHARED_SLACK = 4096
"""Default of the ``shared_slack`` option, in bytes."""


@dataclass
class _Tails:
    """Fuses the tails of one module (see the module docstring)."""

    module: ModuleOp
    max_rounds: int
    slack: int
    kernels: dict[str, kernel.FuncOp] = field(default_factory=dict)
    writes: dict[str, set[int]] = field(default_factory=dict)
    fused: dict[tuple[object, ...], str] = field(default_factory=dict)
    counter: SSAValue | None = None

    def __post_init__(self) -> None:
        for op in self.module.ops:
            if isinstance(op, kernel.FuncOp):
                self.kernels[op.sym_name.data] = op

    def run_host(self, host: func.FuncOp) -> int:
        """Fuse the tails of every block of ``host``; how many launches were saved."""
        self.counter = None
        blocks = [b for op in host.walk() for r in op.regions for b in r.blocks]
        return sum(self.run_block(host, block) for block in blocks)

    def run_block(self, host: func.FuncOp, block: Block) -> int:
        """Fuse the tails of ``block``'s runs of launches; how many launches were saved."""
        saved = 0
        run: list[Launch] = []
        for op in list(block.ops):
            if isinstance(op, kernel.LaunchOp):
                b = self.launch(op)
                k = self.front(run, b)
                if k is not None:
                    fused = self.fuse(host, run[k].op, op)
                    run = [*run[:k], *run[k + 1:], self.launch(fused)]
                    saved += 1
                else:
                    run.append(b)
            elif not allocates_at_most(op):
                run = []
        return saved

    def front(self, run: list[Launch], b: Launch) -> int | None:
        """The index in ``run`` of the launch that ``b`` may be the tail of: the latest one
        it reads from whose pair fits and that every launch after it is independent of (it
        moves past them, other launches ``b`` reads from among them)."""
        for k in range(len(run) - 1, -1, -1):
            a = run[k]
            if (b.reads & a.writes and self.fits(a, b)
                    and not any(a.conflicts(x) for x in run[k + 1:])):
                return k
        return None

    def fits(self, a: Launch, b: Launch) -> bool:
        """Whether ``b`` (which reads what ``a`` writes) may become the tail of ``a`` (see the
        module docstring)."""
        a_op, b_op = a.op, b.op
        if a.callee is None or b.callee is None:
            return False
        grid = b_op.grid_shape
        if (b_op.grid_size is not None or grid[1:] != (1, 1) or b_op.shared_bytes != 0
                or a_op.block_shape[1:] != (1, 1) or b_op.block_shape[1:] != (1, 1)):
            return False
        threads, own = a_op.block_shape[0], b_op.block_shape[0]
        rounds = grid[0] if threads == own else -(-grid[0] * own // threads)
        if rounds > self.max_rounds:
            return False
        if any(isinstance(op, kernel.LastBlockOp | kernel.WaitPriorGridsOp
                          | kernel.LaunchDependentsOp) for op in b.callee.walk()):
            return False
        if a_op.block_shape != b_op.block_shape and not independent_threads(b.callee):
            return False
        largest = max(shared_bytes(a.callee), shared_bytes(b.callee))
        return fused_shared_bytes([a.callee, b.callee]) <= largest + self.slack

    def launch(self, op: kernel.LaunchOp) -> Launch:
        return launch_of(op, self.kernels, self.writes)

    def zeroed_counter(self, host: func.FuncOp) -> SSAValue:
        """The host function's tail counter, allocated zeroed first thing."""
        if self.counter is None:
            alloc = memref.AllocOp([], [], MemRefType(IntegerType(32), [1]))
            alloc.attributes[ZEROED_ATTR] = UnitAttr()
            alloc.memref.name_hint = "tail_counter"
            entry = host.body.block
            Rewriter.insert_op(alloc, InsertPoint.at_start(entry))
            self.counter = alloc.memref
        return self.counter

    def fuse(self, host: func.FuncOp, a_op: kernel.LaunchOp,
             b_op: kernel.LaunchOp) -> kernel.LaunchOp:
        """One launch of ``a_op``'s kernel with ``b_op``'s in its last block, in place of
        ``b_op``; both launches are erased."""
        counter = self.zeroed_counter(host)
        operands = list(a_op.args)
        for value in (*b_op.args, counter):
            if value not in operands:
                operands.append(value)
        pattern = tuple(operands.index(v) for v in b_op.args)
        a_name = a_op.kernel.root_reference.data
        b_name = b_op.kernel.root_reference.data
        key = (a_name, b_name, len(a_op.args), pattern, operands.index(counter),
               b_op.grid_shape[0])
        if key not in self.fused:
            self.fused[key] = self.build(a_op, b_op, operands, pattern,
                                         operands.index(counter))
        launch = kernel.LaunchOp(self.fused[key], a_op.grid_shape, a_op.block_shape,
                                 operands, smem=a_op.shared_bytes, grid_size=a_op.grid_size)
        launch.attributes |= a_op.attributes
        Rewriter.insert_op(launch, InsertPoint.before(b_op))
        for op in (a_op, b_op):
            op.detach()
            op.erase()
        return launch

    def build(self, a_op: kernel.LaunchOp, b_op: kernel.LaunchOp, operands: list[SSAValue],
              pattern: tuple[int, ...], counter: int) -> str:
        """The kernel of ``a_op``'s kernel with ``b_op``'s as its tail (``operands[counter]``
        the counter); its name."""
        a_fn = self.kernels[a_op.kernel.root_reference.data]
        b_fn = self.kernels[b_op.kernel.root_reference.data]
        base = a_fn.sym_name.data
        name = unique_name(f"{base}__last_{b_fn.sym_name.data}", self.kernels)
        fused = a_fn.clone()
        fused.properties["sym_name"] = StringAttr(name)
        top = fused.body.block
        for operand in operands[len(a_op.args):]:
            arg = top.insert_arg(operand.type, len(top.args))
            arg.name_hint = operand.name_hint
        fused.properties["function_type"] = FunctionType.from_lists(
            [a.type for a in top.args], [])
        tails = [op for op in top.ops if isinstance(op, kernel.LastBlockOp)]
        if tails:
            region = tails[0].body.block
            region.add_op(kernel.BarrierOp())
        else:
            region = Block()
            assert top.last_op is not None
            top.insert_op_before(kernel.LastBlockOp(top.args[counter], Region(region)),
                                 top.last_op)
        values: dict[SSAValue, SSAValue] = dict(zip(
            b_fn.body.block.args, (top.args[p] for p in pattern), strict=True))
        # the tail starts after every thread is done with the kernel's own shared buffers
        pool: SharedPool = {}
        for op in top.ops:
            if isinstance(op, kernel.SharedOp):
                pool.setdefault(shared_kind(op), []).append(op.result)
        assert top.first_op is not None
        declare_buffers(b_fn, top.first_op, values, pool)
        tail_body(b_fn, values, region, b_op.grid_shape[0], a_op.block_shape[0])
        Rewriter.insert_op(fused, InsertPoint.after(b_fn))
        self.kernels[name] = fused
        return name

    def erase_unused(self, launched_before: set[str]) -> None:
        """Erase the kernels that were launched before, or built here (a step of a chain),
        and are not launched any more."""
        launched = {op.kernel.root_reference.data for op in self.module.walk()
                    if isinstance(op, kernel.LaunchOp)}
        for name in (launched_before | set(self.fused.values())) - launched:
            callee = self.kernels.pop(name, None)
            if callee is not None:
                callee.detach()
                callee.erase()


def fuse_tails(module: ModuleOp, max_rounds: int = MAX_ROUNDS,
               shared_slack: int = SHARED_SLACK) -> int:
    """Fuse the tails of every host function of ``module`` (see the module docstring); how
    many launches were saved."""
    tails = _Tails(module, max_rounds, shared_slack)
    before = {op.kernel.root_reference.data for op in module.walk()
              if isinstance(op, kernel.LaunchOp)}
    saved = 0
    for host in [op for op in module.ops if isinstance(op, func.FuncOp)]:
        if host.body.blocks:
            saved += tails.run_host(host)
    tails.erase_unused(before)
    return saved


@dataclass(frozen=True)
class FuseTails(ModulePass):
    """A small launch that reads what the launch before it wrote, as that launch's last
    block's work (see the module docstring). Options: ``max_rounds``, how many rounds of
    the block a tail may take (default 1); ``shared_slack``, the shared-memory bytes the
    pair may hold beyond the larger kernel's (default 4096)."""

    name = "fuse-tails"

    max_rounds: int = MAX_ROUNDS
    shared_slack: int = SHARED_SLACK

    def __post_init__(self) -> None:
        for option, least in (("max_rounds", 1), ("shared_slack", 0)):
            value = getattr(self, option)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"{option} must be an integer of at least {least}, got "
                                 f"{value!r}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        fuse_tails(op, self.max_rounds, self.shared_slack)

