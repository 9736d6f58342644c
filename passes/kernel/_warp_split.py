"""The role split of ``warp-specialize`` (its options ``producer_registers`` and
``consumer_registers``; see :mod:`llmopt.passes.kernel.warp_specialize`): a specialised
kernel's body, from the first op that differs by role on, becomes one branch per role that
runs to the end of the kernel, each opening with the registers its warpgroups keep::

    <buffers, the barriers' initialisation, kernel.barrier>
    scf.if %tid < C {
      kernel.set_max_registers inc <consumer_registers>
      <the rest of the body, the role tests true>
    } else {
      kernel.set_max_registers dec <producer_registers>
      <the rest of the body, the role tests false>
    }
    kernel.return

Each branch is a copy of the rest of the body in which every ``scf.if`` on the role test
(``kernel.thread_id x < C``) is replaced by the branch it takes, so the producer's copy has
no consumer op left and the consumers' none of the producer's; what that leaves unused goes.
The loop of ``K + D`` steps then runs its guarded steps only: ``D … K + D`` for the
consumers, ``0 … K`` for the producer.
"""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IntegerAttr, IntegerType
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.transforms.dead_code_elimination import region_dce

from llmopt.dialects import kernel, mbarrier
from llmopt.dialects._syntax import constant_index
from llmopt.passes.kernel._warp_roles import PRODUCERS, pure, role
from llmopt.passes.kernel._warp_steps import index
from llmopt.passes.tile._schedule import set_knob
from llmopt.target import REGS_PER_SM

_ULT, _UGE = (arith.CMPI_COMPARISON_OPERATIONS.index(p) for p in ("ult", "uge"))


def register_pool(threads: int) -> int:
    """The registers a block of ``threads`` threads holds when it is the one resident on a
    multiprocessor: ``threads`` times what each thread starts with, the multiprocessor's
    even share rounded down to a count ``setmaxnreg`` takes (a multiple of 8, at most 256:
    :data:`~llmopt.dialects.kernel.REGISTER_COUNTS`; 168 each for 384 threads, 64 512 in
    all). ``setmaxnreg`` moves registers between the block's warpgroups within it."""
    granule, most = kernel.REGISTER_COUNTS.step, kernel.REGISTER_COUNTS[-1]
    return threads * min(REGS_PER_SM // threads // granule * granule, most)


def fits(consumers: int, producer_registers: int, consumer_registers: int) -> bool:
    """Whether ``consumers`` threads with ``consumer_registers`` each and the producer
    warpgroup with ``producer_registers`` each fit the block's registers."""
    wanted = producer_registers * PRODUCERS + consumer_registers * consumers
    return wanted <= register_pool(consumers + PRODUCERS)


def consumer_share(consumers: int, producer_registers: int, consumer_registers: int) -> int:
    """The registers each of ``consumers`` threads gets beside a producer warpgroup of
    ``producer_registers`` each: ``consumer_registers`` where that :func:`fits`, else the
    most that does (a count ``setmaxnreg`` takes: three computing warpgroups get 152) as
    long as it is more than the block's even share they start with; 0 otherwise."""
    if fits(consumers, producer_registers, consumer_registers):
        return consumer_registers
    granule = kernel.REGISTER_COUNTS.step
    pool = register_pool(consumers + PRODUCERS)
    share = (pool - producer_registers * PRODUCERS) // consumers // granule * granule
    return share if share > pool // (consumers + PRODUCERS) else 0


def _role_test(value: SSAValue, consumers: int) -> bool:
    """Whether ``value`` is ``arith.cmpi ult, (kernel.thread_id x), consumers``."""
    test = value.owner
    if not isinstance(test, arith.CmpiOp) or test.predicate.value.data != _ULT:
        return False
    tid = test.lhs.owner
    return (isinstance(tid, kernel.ThreadIdOp) and tid.dim.data == "x"
            and constant_index(test.rhs) == consumers)


def _tail(func: kernel.FuncOp) -> list[Operation] | None:
    """The ops of ``func``'s body after the barriers' initialisation and its
    ``kernel.barrier``, the final ``kernel.return`` excluded; ``None`` when there is no
    such initialisation, or when a role may not run them in a branch of its own (a block
    barrier or a last block, which every thread of the block must reach)."""
    body = func.body.block
    init = next((op for op in body.ops if isinstance(op, scf.IfOp) and any(
        isinstance(o, mbarrier.InitOp) for o in op.walk())), None)
    if init is None or not isinstance(init.next_op, kernel.BarrierOp | kernel.ClusterBarrierOp):
        return None
    tail: list[Operation] = []
    op = init.next_op.next_op
    while op is not None and not isinstance(op, kernel.ReturnOp):
        tail.append(op)
        op = op.next_op
    if not tail or any(isinstance(o, kernel.BarrierOp | kernel.ClusterBarrierOp
                                  | kernel.LastBlockOp | kernel.SetMaxRegistersOp)
                       for op in tail for o in op.walk()):
        return None
    return tail


def _known(block: Block, consumers: int, is_consumer: bool) -> None:
    """In ``block`` (a role's branch), the role test is ``is_consumer``: each ``scf.if``
    on it becomes the ops of the branch it takes, any other use of it a constant."""
    constant = arith.ConstantOp(IntegerAttr(int(is_consumer), IntegerType(1)))
    Rewriter.insert_op(constant, InsertPoint.at_start(block))
    for op in list(block.walk()):
        if any(_role_test(v, consumers) for v in op.operands):
            op.operands = tuple(constant.result if _role_test(v, consumers) else v
                                for v in op.operands)
    while True:
        known = next((op for op in block.walk() if isinstance(op, scf.IfOp)
                      and op.cond is constant.result), None)
        if known is None:
            return
        _take(known, known.true_region if is_consumer else known.false_region)


def _take(branch: scf.IfOp, region: Region) -> None:
    """Replace ``branch`` by the ops of ``region`` (one of its regions), its results by
    what that region yields."""
    taken = region.blocks.first
    if taken is None:  # an empty else
        Rewriter.erase_op(branch)
        return
    end = taken.last_op
    assert isinstance(end, scf.YieldOp)
    values = list(end.operands)
    Rewriter.erase_op(end)
    Rewriter.inline_block(taken, InsertPoint.before(branch))
    Rewriter.replace_op(branch, [], values)


def _trim(block: Block) -> None:
    """The loop of steps (``llmopt.role = "ws_loop"``) in ``block`` runs only the steps its
    guard lets through: a body that is ``scf.if %it >= D`` (``%it < K``) and nothing else
    starts at ``D`` (ends at ``K``) and loses the guard."""
    for loop in [op for op in block.walk() if isinstance(op, scf.ForOp)
                 and role(op) == "ws_loop"]:
        ops = [op for op in loop.body.block.ops if not isinstance(op, scf.YieldOp)]
        guard = ops[-1] if ops else None
        if not isinstance(guard, scf.IfOp) or guard.false_region.blocks:
            continue
        test = guard.cond.owner
        it = loop.body.block.args[0]
        if not isinstance(test, arith.CmpiOp) or test.lhs is not it or any(
                op not in (guard, test, test.rhs.owner) for op in ops):
            continue
        bound = constant_index(test.rhs)
        predicate = test.predicate.value.data
        if bound is None or predicate not in (_ULT, _UGE):
            continue
        new = index(bound)
        Rewriter.insert_op(new, InsertPoint.before(loop))
        lb, ub, step = loop.lb, loop.ub, loop.step
        loop.operands = ((new.result, ub, step) if predicate == _UGE
                         else (lb, new.result, step)) + tuple(loop.iter_args)
        _take(guard, guard.true_region)


def _drop_unused(block: Block) -> None:
    """Erase the ops nested in ``block`` that only compute values no op uses (``arith``
    divisions included, which xDSL's dead-code elimination keeps), until none is left."""
    while True:
        unused = [op for op in block.walk(reverse=True) if pure(op) and op.results
                  and not any(r.uses for r in op.results)]
        if not unused:
            return
        for op in unused:
            if not any(r.uses for r in op.results):
                Rewriter.erase_op(op)


def split_roles(func: kernel.FuncOp, consumers: int, producer_registers: int,
                consumer_registers: int) -> bool:
    """Split ``func`` (specialised, ``consumers`` computing threads) by role, each branch
    with its ``kernel.set_max_registers`` (see the module docstring), and cap the kernel at
    one resident block (knob ``min_blocks = 1``: ``__launch_bounds__(threads, 1)``);
    ``False`` (nothing changed) when its body does not allow it."""
    tail = _tail(func)
    if tail is None:
        return False
    tid = kernel.ThreadIdOp("x")
    bound = index(consumers)
    is_consumer = arith.CmpiOp(tid.result, bound.result, "ult")
    branches: list[Block] = []
    for action, count in (("inc", consumer_registers), ("dec", producer_registers)):
        branch = Block([kernel.SetMaxRegistersOp(action, count)])
        mapping: dict[SSAValue, SSAValue] = {}
        for op in tail:
            branch.add_op(op.clone(value_mapper=mapping))
        branch.add_op(scf.YieldOp())
        branches.append(branch)
    split = scf.IfOp(is_consumer.result, [], Region(branches[0]), Region(branches[1]))
    Rewriter.insert_op([tid, bound, is_consumer, split], InsertPoint.before(tail[0]))
    for op in reversed(tail):
        Rewriter.erase_op(op)
    for branch, consumer in zip(branches, (True, False), strict=True):
        _known(branch, consumers, consumer)
        _trim(branch)
    region_dce(func.body)
    _drop_unused(func.body.block)
    set_knob(func, "min_blocks", 1)
    return True
