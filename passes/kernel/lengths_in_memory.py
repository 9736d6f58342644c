"""``lengths-in-memory``: kernels read a symbolic program's lengths from device memory.

**Matches** a host ``func.func`` that declares symbols (``{llmopt.symbol = "ctx"}``) and the
``kernel.func`` ops it launches. After ``tile-to-kernel`` a length reaches a kernel as host
values: an ``index`` argument (the length itself, or ``index`` arithmetic of it computed on
the host, such as the position ``ctx - 1``) and a grid computed from it
(``grid [%grid max 512, 1, 1]``).

**Produces** a program whose launches do not depend on the lengths:

* the host function stores its symbols into a buffer, first thing
  (``%lengths = memref.alloc() : memref<1xindex>``, ``memref.store %ctx, %lengths[%c0]``);
* each kernel that took a length-dependent ``index`` argument takes ``%lengths`` instead
  (its last parameter) and computes the value itself: it loads each symbol it needs
  (``kernel.load %lengths[%c0] {llmopt.length = "ctx"}``) and repeats the host's ``index``
  arithmetic on it;
* a launch whose grid was computed from the lengths runs at its maximum (``grid [512, 1,
  1]``); the kernel computes the grid it had (``%grid``), uses it wherever it read
  ``kernel.grid_dim x``, and its blocks from ``%grid`` on do nothing (the body sits in an
  ``scf.if`` on ``kernel.block_id x < %grid``), so the kernel computes what it computed at
  ``%grid`` blocks; a ``kernel.last_block`` stays outside that ``scf.if``, since it counts
  every block of the grid;
* a kernel launched with different arithmetic at different sites is cloned per site kind
  (``reduce_7``, ``reduce_7_l1``);
* a kernel that opens with ``kernel.wait_prior_grids`` (``programmatic-launch``) keeps it
  first: the loads of the lengths come after it. One that prefetches before its wait loads
  them first (the host writes the lengths before any kernel runs, so a load of them need
  not wait).

**Why** a call whose launches take no length can be replayed from one CUDA graph at every
length: only the buffer of lengths changes between calls, and the host writes it before the
replay. The decode step of a KV cache runs at a new length every token; with this pass it is
one graph for all of them (see :class:`~llmopt.codegen.executor.CompiledProgram`).

A host ``scf.if`` (kernel variants chosen per length, ``length-buckets``) and a host
``memref.copy`` of a buffer with ``?`` extents are choices and sizes of the host, which a
replayed graph cannot make: the pass refuses them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import (
    FunctionType,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
)
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter
from xdsl.utils.exceptions import PassFailedException

from llmopt.codegen.symbolic import is_index_arith
from llmopt.dialects import kernel
from llmopt.dialects._symbols import function_symbols, has_dynamic
from llmopt.passes.kernel._index_expr import Expr, ExprBuilder, index_expr

__all__ = ["LENGTH_ATTR", "LengthsInMemory", "length_loads"]

LENGTH_ATTR = kernel.LENGTH_ATTR
"""On a ``kernel.load`` of the lengths buffer: the symbol it reads."""


def length_loads(fn: kernel.FuncOp) -> dict[str, SSAValue]:
    """The values ``fn`` loads from a lengths buffer, by symbol name."""
    found: dict[str, SSAValue] = {}
    for op in fn.body.block.ops:
        name = op.attributes.get(LENGTH_ATTR)
        if isinstance(op, kernel.LoadOp) and isinstance(name, StringAttr):
            found[name.data] = op.result
    return found


def _fail(op: Operation, message: str) -> PassFailedException:
    from llmopt.passes._rewrite import fail

    return fail(op, message)


def _depends(expr: Expr | None) -> bool:
    if expr is None:
        return False
    if expr[0] == "sym":
        return True
    return any(isinstance(e, tuple) and _depends(e) for e in expr[2:])


@dataclass
class _Host:
    """The expressions of one host function's ``index`` values; ``symbols`` are the
    arguments of its symbols, in the order of the lengths buffer."""

    symbols: list[SSAValue]
    cache: dict[SSAValue, Expr | None] = field(default_factory=dict[SSAValue, "Expr | None"])

    def expr(self, value: SSAValue) -> Expr | None:
        return index_expr(value, self._symbol, self.cache)

    def _symbol(self, value: SSAValue) -> Expr | None:
        return ("sym", self.symbols.index(value)) if value in self.symbols else None


def _loader(lengths: SSAValue, names: list[str]) -> ExprBuilder:
    """Rebuilds expressions at the start of a kernel, each symbol loaded from ``lengths``."""

    def load(build: ExprBuilder, expr: Expr) -> SSAValue:
        k = int(expr[1])  # type: ignore[call-overload]
        position = build.add(arith.ConstantOp(IntegerAttr(k, IndexType())))
        op = kernel.LoadOp(lengths, [position])
        op.attributes[LENGTH_ATTR] = StringAttr(names[k])
        op.result.name_hint = names[k]
        return build.add(op)

    return ExprBuilder(load)


Signature = tuple[tuple[Expr | None, ...], Expr | None]
"""What a launch computes on the host for its kernel: per argument the expression it
passes (``None``: passed as it is), and the grid's."""


def _rewrite_kernel(fn: kernel.FuncOp, signature: Signature, names: list[str]) -> None:
    """Make ``fn`` compute its length-dependent arguments and grid from a lengths buffer
    (its new last parameter)."""
    exprs, grid = signature
    block = fn.body.block
    lengths = block.insert_arg(MemRefType(IndexType(), [len(names)]), len(block.args))
    lengths.name_hint = "lengths"
    build = _loader(lengths, names)
    for k, expr in enumerate(exprs):
        if expr is not None:
            block.args[k].replace_all_uses_with(build.value(expr))
    if grid is not None:
        count = build.value(grid)
        for op in list(fn.walk()):
            if isinstance(op, kernel.GridDimOp) and op.dim.data == "x":
                op.result.replace_all_uses_with(count)
                Rewriter.erase_op(op)
        body = [op for op in block.ops
                if not isinstance(op, kernel.ReturnOp | kernel.LastBlockOp | _PROLOGUE)]
        decls = [op for op in body if isinstance(op, kernel.SharedOp | kernel.LocalOp)]
        body = [op for op in body if op not in decls]
        block_id = kernel.BlockIdOp("x")
        inside = arith.CmpiOp(block_id.result, count, "ult")
        guarded = Block()
        for op in body:
            op.detach()
            guarded.add_op(op)
        guarded.add_op(scf.YieldOp())
        branch = scf.IfOp(inside.result, [], Region(guarded))
        # every block, idle or not, reaches a kernel.last_block: it counts the grid's blocks
        tails = [op for op in block.ops if isinstance(op, kernel.LastBlockOp)]
        end = tails[0] if tails else block.last_op
        block.insert_ops_before([block_id, inside, branch], end)  # type: ignore[arg-type]
        for decl in decls:
            decl.detach()
        if decls:
            block.insert_ops_before(decls, _after_prologue(block))
    if build.ops:
        block.insert_ops_before(build.ops, _after_prologue(block))
    for k in sorted((k for k, e in enumerate(exprs) if e is not None), reverse=True):
        block.erase_arg(block.args[k])
    fn.properties["function_type"] = FunctionType.from_lists([a.type for a in block.args], [])


_PROLOGUE = kernel.WaitPriorGridsOp | kernel.LaunchDependentsOp
"""The ops of a kernel's grid-dependency prologue (``programmatic-launch``)."""


def _after_prologue(block: Block) -> Operation:
    """The first op of a kernel's body after its grid-dependency prologue when the body
    opens with it (``programmatic-launch``'s ``kernel.wait_prior_grids``), else the first op:
    a kernel that prefetches before its wait reads the lengths before it too, as it may
    (the host writes them before any kernel runs; ``kernel.before_wait``)."""
    for op in block.ops:
        if not isinstance(op, _PROLOGUE):
            return op
    raise AssertionError("a kernel body ends with kernel.return")


def _launch_signature(launch: kernel.LaunchOp, host: _Host) -> Signature | None:
    exprs: list[Expr | None] = []
    for arg in launch.args:
        expr = host.expr(arg) if isinstance(arg.type, IndexType) else None
        exprs.append(expr if _depends(expr) else None)
    grid = None
    if launch.grid_size is not None:
        grid = host.expr(launch.grid_size)
        if grid is None:
            raise _fail(launch, "its grid is not index arithmetic of the function's lengths")
    if grid is None and not any(e is not None for e in exprs):
        return None
    return tuple(exprs), grid


def _check_host(fn: func.FuncOp) -> None:
    for op in fn.walk():
        if isinstance(op, scf.IfOp):
            raise _fail(op, "lengths-in-memory: the host chooses between kernels by length "
                            "here, which a program replayed at every length cannot do "
                            "(lower it without length-buckets)")
        if isinstance(op, memref.CopyOp) and has_dynamic(op.source.type):
            raise _fail(op, "lengths-in-memory: a host copy of a buffer with ? extents has "
                            "the size of the call's lengths")


def _store_lengths(fn: func.FuncOp, symbols: list[SSAValue]) -> SSAValue:
    """``%lengths = memref.alloc()`` and one ``memref.store`` per symbol, first thing."""
    alloc = memref.AllocOp([], [], MemRefType(IndexType(), [len(symbols)]))
    alloc.memref.name_hint = "lengths"
    ops: list[Operation] = [alloc]
    for k, symbol in enumerate(symbols):
        position = arith.ConstantOp(IntegerAttr(k, IndexType()))
        ops += [position, memref.StoreOp.get(symbol, alloc.memref, [position.result])]
    block = fn.body.block
    block.insert_ops_before(ops, block.first_op)  # type: ignore[arg-type]
    return alloc.memref


def _erase_dead_arithmetic(fn: func.FuncOp) -> None:
    for op in reversed(list(fn.body.block.ops)):
        if (is_index_arith(op) or isinstance(op, arith.ConstantOp)) and not any(
                r.uses for r in op.results):
            Rewriter.erase_op(op)


class LengthsInMemory(ModulePass):
    """Kernels read the lengths from a buffer the host writes (see the module docstring)."""

    name = "lengths-in-memory"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        kernels = {f.sym_name.data: f for f in op.ops if isinstance(f, kernel.FuncOp)}
        for fn in [f for f in op.ops if isinstance(f, func.FuncOp) and f.body.blocks]:
            if function_symbols(fn):
                self._apply_host(op, fn, kernels)

    @staticmethod
    def _apply_host(module: ModuleOp, fn: func.FuncOp,
                    kernels: dict[str, kernel.FuncOp]) -> None:
        _check_host(fn)
        declared = function_symbols(fn)
        names = list(declared)
        symbols = [fn.body.block.args[declared[name].arg] for name in names]
        host = _Host(symbols)
        launches = [o for o in fn.walk() if isinstance(o, kernel.LaunchOp)]
        signatures = {id(launch): _launch_signature(launch, host) for launch in launches}
        by_kernel: dict[str, list[Signature | None]] = {}
        for launch in launches:
            by_kernel.setdefault(launch.kernel.root_reference.data, []).append(
                signatures[id(launch)])
        if not any(s is not None for s in signatures.values()):
            return
        lengths = _store_lengths(fn, symbols)
        targets: dict[tuple[str, Signature], str] = {}
        for name, seen in by_kernel.items():
            distinct = list(dict.fromkeys(s for s in seen if s is not None))
            for k, signature in enumerate(distinct):
                original = kernels.get(name)
                if original is None:
                    raise _fail(fn, f"no kernel.func @{name} in the module")
                in_place = len(distinct) == 1 and None not in seen
                target = original if in_place else original.clone()
                if not in_place:
                    new_name = f"{name}_l{k}"
                    target.properties["sym_name"] = StringAttr(new_name)
                    module.body.block.insert_op_after(target, original)
                _rewrite_kernel(target, signature, names)
                targets[(name, signature)] = target.sym_name.data
        for launch in launches:
            signature = signatures[id(launch)]
            if signature is None:
                continue
            args = [a for a, e in zip(launch.args, signature[0], strict=True) if e is None]
            new = kernel.LaunchOp(targets[(launch.kernel.root_reference.data, signature)],
                                  launch.grid_shape, launch.block_shape, [*args, lengths],
                                  launch.shared_bytes)
            new.attributes |= launch.attributes
            Rewriter.replace_op(launch, new)
        _erase_dead_arithmetic(fn)

