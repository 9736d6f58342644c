"""The host level: interpreting a ``func.func`` whose body is the dataflow between kernels.

At Torch and Tensor IR the body is tensor ops (values are numpy arrays, never mutated); at
Loop, Tile and Kernel IR it is ``memref.alloc``, kernels (``loop.kernel``, ``tile.kernel``)
or ``kernel.launch`` calls, and ``func.return``. Each op is dispatched by name to the
interpretation its level registered with :func:`host_impl`; scalar ``arith``/``math`` ops
(launch sizes, constants) use the shared scalar table. A host ``scf.if`` without results
runs the region its condition picks (a choice between kernel variants, e.g. of a length
bucket, see ``length-buckets``).

A function with symbolic extents (``?`` in its types, see :mod:`llmopt.dialects._symbols`) runs
at any length its symbols allow: :func:`run` binds each symbol argument from the inputs'
shapes (or checks the value passed for it), and rejects a shape that does not match or a
length outside the declared bounds with an error naming the argument and the bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from xdsl.dialects import memref
from xdsl.dialects.builtin import MemRefType, ModuleOp, StringAttr, TensorType
from xdsl.ir import Attribute, Block, Operation, SSAValue

from llmopt.codegen.plan import ZEROED_ATTR
from llmopt.dialects._symbols import (
    BindError,
    argument_dynamic,
    bind_arguments,
    function_symbols,
    is_dynamic,
    is_symbolic,
    shape_of_type,
)
from llmopt.dialects._updates import written_arguments
from llmopt.interp._core import (
    InterpretError,
    UnsupportedOpError,
    Value,
    error,
    is_float,
    np_dtype,
    shape_of,
    uninitialized,
)
from llmopt.interp.scalar import SCALAR_IMPLS, apply_scalar

HostImpl = Callable[["HostInterpreter", Operation, list[Value]], Sequence[Value]]
"""``impl(interpreter, op, operand_values) -> result values``."""

HOST_IMPLS: dict[str, HostImpl] = {}
"""Op name → interpretation in a host function body."""


def host_impl(*names: str) -> Callable[[HostImpl], HostImpl]:
    """Register an interpretation for ops that appear in a host function body."""

    def register(fn: HostImpl) -> HostImpl:
        """Add ``fn`` to the table."""
        for name in names:
            HOST_IMPLS[name] = fn
        return fn

    return register


class HostInterpreter:
    """Interprets the ``func.func`` ops of one module."""

    def __init__(self, module: ModuleOp, check_races: bool = True) -> None:
        """Index the module's symbols."""
        self.module = module
        self.check_races = check_races
        self.funcs: dict[str, Operation] = {}
        self.symbols: dict[str, Operation] = {}
        for op in module.ops:
            sym = op.properties.get("sym_name")
            if sym is not None:
                self.symbols[sym.data] = op  # type: ignore[attr-defined]
                if op.name == "func.func":
                    self.funcs[sym.data] = op  # type: ignore[attr-defined]

    def lookup(self, name: str, op: Operation) -> Operation:
        """The module-level symbol ``name`` (referenced by ``op``)."""
        found = self.symbols.get(name)
        if found is None:
            raise error(InterpretError, op, f"no symbol @{name} in the module")
        return found

    def call(self, fn: Operation, args: Sequence[Value]) -> list[Value]:
        """Run the body of ``func.func`` ``fn`` on ``args``; return what it returns."""
        block = fn.regions[0].block
        if len(args) != len(block.args):
            raise error(InterpretError, fn, f"takes {len(block.args)} arguments, "
                        f"{len(args)} given")
        env: dict[SSAValue, Value] = dict(zip(block.args, args, strict=True))
        with np.errstate(all="ignore"):
            returned = self.run_block(block, env)
        if returned is None:
            raise error(InterpretError, fn, "body ends without func.return")
        return returned

    def run_block(self, block: Block, env: dict[SSAValue, Value]) -> list[Value] | None:
        """Run ``block``'s ops in ``env`` (which gains their results); the values of the
        ``func.return`` that ends it, ``None`` when another terminator (``scf.yield``)
        does."""
        for op in block.ops:
            operands = [env[v] for v in op.operands]
            if op.name == "func.return":
                return operands
            if op.name == "scf.yield":
                if operands:
                    raise error(UnsupportedOpError, op, "a host scf.yield yields no values")
                return None
            if op.name == "scf.if":  # a choice between launches (a length bucket's variant)
                if op.results:
                    raise error(UnsupportedOpError, op, "a host scf.if has no results")
                region = op.regions[0] if bool(operands[0]) else op.regions[1]
                if region.blocks:
                    self.run_block(region.block, env)
                continue
            impl = HOST_IMPLS.get(op.name)
            if impl is not None:
                results = impl(self, op, operands)
            elif op.name in SCALAR_IMPLS:
                results = apply_scalar(op, operands)
            else:
                raise error(UnsupportedOpError, op, "no interpretation for this op in a "
                            "host function")
            for res, val in zip(op.results, results, strict=True):
                env[res] = val
        return None


def _visibility(op: Operation) -> str | None:
    visibility = op.properties.get("sym_visibility")
    return visibility.data if isinstance(visibility, StringAttr) else None


def find_function(module: ModuleOp, func_name: str | None = None) -> Operation:
    """``func_name``, else ``@forward``, else the module's only ``func.func`` with a body,
    else its only public one."""
    funcs = {
        op.properties["sym_name"].data: op  # type: ignore[attr-defined]
        for op in module.ops
        if op.name == "func.func" and op.regions[0].blocks
    }
    if func_name is not None:
        if func_name not in funcs:
            raise InterpretError(f"no func.func @{func_name} in the module "
                                 f"(functions: {sorted(funcs)})")
        return funcs[func_name]
    if "forward" in funcs:
        return funcs["forward"]
    if len(funcs) == 1:
        return next(iter(funcs.values()))
    public = [f for f in funcs.values() if _visibility(f) != "private"]
    if len(public) == 1:  # the entry beside its private helpers (outlined kernels)
        return public[0]
    raise InterpretError(f"name the function to run: the module has {sorted(funcs)}")


def argument_value(typ: Attribute, value: object, k: int) -> Value:
    """A fresh copy of input ``value`` as argument ``k`` of type ``typ`` (a ``?`` extent
    matches any extent: the symbols were bound and checked before)."""
    dtype = np_dtype(typ)
    if isinstance(typ, TensorType | MemRefType):
        arr = np.array(value, dtype=dtype, copy=True)
        expected = shape_of_type(typ)
        if len(arr.shape) != len(expected) or any(
                got != want for got, want in zip(arr.shape, expected, strict=True)
                if not is_dynamic(want)):
            raise InterpretError(f"input #{k} has shape {list(arr.shape)}, the function takes "
                                 f"{typ}")
        return arr
    if np.ndim(value) != 0:
        raise InterpretError(f"input #{k} must be a scalar of type {typ}")
    return dtype.type(value)  # type: ignore[call-overload]


def run(module: ModuleOp, inputs: Sequence[np.ndarray], func_name: str | None = None, *,
        check_races: bool = True) -> list[np.ndarray]:
    """Interpret a function of ``module`` on ``inputs``; return its results.

    The function is ``func_name``, else ``@forward``, else the only ``func.func``. Inputs
    are copied into the arguments' dtypes (the caller's arrays are never modified), and each
    op is interpreted by its level's interpreter: whole-array numpy at Torch and Tensor IR,
    vectorised loop nests at Loop IR, SIMT-vectorised threads at Tile and Kernel IR.
    Arguments marked ``llmopt.written`` (buffers the program updates in place, see
    :mod:`llmopt.dialects._updates`) follow the results, with their final contents.
    ``check_races=False`` skips the data-race checks of kernel launches (they cost a few
    numpy operations per shared or written global access).
    """
    fn = find_function(module, func_name)
    types = list(fn.properties["function_type"].inputs.data)  # type: ignore[attr-defined]
    if is_symbolic(fn):
        try:
            inputs, _ = bind_arguments(fn, inputs)  # type: ignore[assignment]
        except BindError as err:
            name = fn.properties["sym_name"].data  # type: ignore[attr-defined]
            raise InterpretError(f"@{name}: {err}") from None
    if len(inputs) != len(types):
        raise InterpretError(f"@{fn.properties['sym_name'].data} takes {len(types)} inputs, "  # type: ignore[attr-defined]
                             f"{len(inputs)} given")
    args = [argument_value(t, v, k) for k, (t, v) in enumerate(zip(types, inputs, strict=True))]
    results = HostInterpreter(module, check_races).call(fn, args)
    results = [*results, *(args[k] for k in written_arguments(fn))]
    return [np.array(r, copy=True) if isinstance(r, np.ndarray) else np.asarray(r)
            for r in results]


_INDEX_MOVES = frozenset({
    "torch.reshape", "torch.unsqueeze", "torch.expand", "torch.slice", "torch.transpose",
    "torch.permute", "torch.cat", "prim.index_map",
})
"""Ops that move index values around unchanged (an index argument may reach a gather
through them)."""


def index_extent(value: SSAValue) -> int | None:
    """The smallest table extent that ``value``'s elements index, if it reaches the indices
    operand of a ``torch.embedding`` or ``prim.gather`` (directly or through data movement):
    valid indices are then below it. ``None`` when it reaches none."""
    best: int | None = None
    seen: set[SSAValue] = set()
    work = [value]
    while work:
        current = work.pop()
        if current in seen:
            continue
        seen.add(current)
        for use in current.uses:
            user = use.operation
            extent: int | None = None
            if user.name == "torch.embedding" and use.index == 1:
                extent = shape_of(user.operands[0].type)[0]
            elif user.name == "prim.gather" and use.index == 1:
                axis = user.properties["axis"].value.data  # type: ignore[attr-defined]
                extent = shape_of(user.operands[0].type)[axis]
            elif user.name in _INDEX_MOVES:
                work.extend(user.results)
            if extent is not None:
                best = extent if best is None else min(best, extent)
    return best


RANDOM_LENGTH_CAP = 64
"""Random lengths stay at or below this (and the symbol's maximum): the interpreters run
whole-array numpy, so checks at small lengths are fast and as telling as long ones."""


def random_lengths(func_op: Operation, count: int, seed: int = 0) -> list[dict[str, int]]:
    """``count`` seeded random bindings of ``func_op``'s symbols (all symbols drawn for
    each), uniform in ``[min, min(max, RANDOM_LENGTH_CAP)]`` and distinct where the range
    allows; ``[{}]`` for a function without symbols."""
    if isinstance(func_op, ModuleOp):
        func_op = find_function(func_op)
    symbols = function_symbols(func_op)
    if not symbols:
        return [{}]
    rng = np.random.default_rng(seed + 7919)
    out: list[dict[str, int]] = [{} for _ in range(max(1, count))]
    for name, sym in symbols.items():
        high = max(sym.min, min(sym.max, RANDOM_LENGTH_CAP))
        choices = np.arange(sym.min, high + 1)
        picked = rng.choice(choices, size=len(out), replace=len(choices) < len(out))
        for binding, value in zip(out, picked, strict=True):
            binding[name] = int(value)
    return out


def random_inputs(func_op: Operation, seed: int = 0, int_high: int = 16,
                  lengths: dict[str, int] | None = None) -> list[np.ndarray]:
    """Seeded random arguments for ``func_op`` (a ``func.func``, or a module: its function).

    Floating-point arguments are standard-normal draws (made in f64, then rounded to the
    argument's type, so f32 and f64 versions of a program get the same numbers); integer
    arguments are uniform in ``[0, int_high)``, narrowed to the valid rows when they are
    the indices of an embedding or gather (see :func:`index_extent`); ``i1`` arguments are
    fair coin flips. A symbolic function gets the symbol values of ``lengths`` (by default
    the first binding of :func:`random_lengths`): its ``?`` extents take them, and the
    symbol arguments are those values.
    """
    if isinstance(func_op, ModuleOp):
        func_op = find_function(func_op)
    rng = np.random.default_rng(seed)
    out: list[np.ndarray] = []
    block_args = list(func_op.regions[0].block.args) if func_op.regions[0].blocks else []
    types = func_op.properties["function_type"].inputs.data  # type: ignore[attr-defined]
    symbols = function_symbols(func_op)
    if symbols and lengths is None:
        lengths = random_lengths(func_op, 1, seed)[0]
    lengths = dict(lengths or {})
    for name in symbols:
        if name not in lengths:
            raise InterpretError(f"no length given for symbol '{name}'")
    by_arg = {sym.arg: lengths[name] for name, sym in symbols.items()}
    for k, typ in enumerate(types):
        if k in by_arg:
            out.append(np.int64(by_arg[k]))  # type: ignore[arg-type]
            continue
        dtype = np_dtype(typ)
        shape = shape_of_type(typ)
        if any(is_dynamic(e) for e in shape):
            names = iter(argument_dynamic(func_op, k) or ())
            shape = tuple(lengths[next(names)] if is_dynamic(e) else e for e in shape)
        if is_float(dtype):
            out.append(rng.standard_normal(shape).astype(dtype))
        elif dtype.kind == "b":
            out.append(rng.integers(0, 2, shape).astype(bool))
        else:
            high = int_high
            if k < len(block_args):
                extent = index_extent(block_args[k])
                if extent is not None:
                    high = max(1, min(high, extent))
            out.append(rng.integers(0, high, shape).astype(dtype))
    return out


# --- generic host ops ---------------------------------------------------------------------------


@host_impl("func.call")
def _call(interp: HostInterpreter, op: Operation, args: list[Value]) -> Sequence[Value]:
    """``func.call``: run the callee."""
    callee = op.properties["callee"].root_reference.data  # type: ignore[attr-defined]
    fn = interp.lookup(callee, op)
    if fn.name != "func.func" or not fn.regions[0].blocks:
        raise error(InterpretError, op, f"@{callee} is not a func.func with a body")
    return interp.call(fn, args)


@host_impl("memref.alloc", "memref.alloca")
def _alloc(interp: HostInterpreter, op: Operation, args: list[Value]) -> Sequence[Value]:
    """A fresh, poisoned buffer — or zeros, for a ``memref.alloc`` marked
    ``{llmopt.zeroed}`` (:data:`~llmopt.codegen.plan.ZEROED_ATTR`: its kernels need it at zero
    before their first launch, as the executor's ``torch.zeros`` gives it); a ``?`` extent
    takes the value of its size operand."""
    typ = op.results[0].type
    shape = shape_of_type(typ)
    if len(args) != sum(1 for e in shape if is_dynamic(e)):
        raise error(UnsupportedOpError, op, "symbol operands are not supported")
    sizes = iter(int(a) for a in args)
    concrete = tuple(next(sizes) if is_dynamic(e) else e for e in shape)
    if any(e < 0 for e in concrete):
        raise error(InterpretError, op, f"negative extent in {list(concrete)}")
    if op.name == "memref.alloc" and ZEROED_ATTR in op.attributes:
        return [np.zeros(concrete, dtype=np_dtype(typ))]
    return [uninitialized(concrete, np_dtype(typ))]


@host_impl("memref.dealloc")
def _dealloc(interp: HostInterpreter, op: Operation, args: list[Value]) -> Sequence[Value]:
    """Nothing to do: numpy owns the memory."""
    return []


@host_impl("memref.copy")
def _copy(interp: HostInterpreter, op: Operation, args: list[Value]) -> Sequence[Value]:
    """``memref.copy``: copy all elements."""
    source, target = args
    if source.shape != target.shape:
        raise error(InterpretError, op, f"copies {source.shape} into {target.shape}")
    target[...] = source
    return []


@host_impl("memref.collapse_shape", "memref.expand_shape", "memref.cast")
def _reshape_view(interp: HostInterpreter, op: Operation, args: list[Value]) -> Sequence[Value]:
    """A view with the result shape (writes through it reach the source); a collapse's
    extents are the products of its groups' extents, so a runtime extent carries over."""
    source = args[0]
    if isinstance(op, memref.CollapseShapeOp):
        groups = [[int(d.value.data) for d in g.data] for g in op.reassociation.data]
        shape: tuple[int, ...] = tuple(
            math.prod(source.shape[d] for d in g) for g in groups)
    else:
        shape = shape_of(op.results[0].type)
    view = source.reshape(shape)
    if view.size and not np.shares_memory(view, source):
        raise error(InterpretError, op, "cannot view this buffer with the new shape")
    return [view]


@host_impl("memref.load")
def _memref_load(interp: HostInterpreter, op: Operation, args: list[Value]) -> Sequence[Value]:
    """A host-side scalar load."""
    buf, *idx = args
    if any(not 0 <= int(i) < e for i, e in zip(idx, buf.shape, strict=True)):
        raise error(InterpretError, op, f"index {[int(i) for i in idx]} out of bounds "
                    f"for {list(buf.shape)}")
    return [buf[tuple(int(i) for i in idx)]]


@host_impl("memref.store")
def _memref_store(interp: HostInterpreter, op: Operation, args: list[Value]) -> Sequence[Value]:
    """A host-side scalar store."""
    value, buf, *idx = args
    if any(not 0 <= int(i) < e for i, e in zip(idx, buf.shape, strict=True)):
        raise error(InterpretError, op, f"index {[int(i) for i in idx]} out of bounds "
                    f"for {list(buf.shape)}")
    buf[tuple(int(i) for i in idx)] = value
    return []


@host_impl("builtin.unrealized_conversion_cast")
def _cast(interp: HostInterpreter, op: Operation, args: list[Value]) -> Sequence[Value]:
    """Tensors and buffers are both numpy arrays: the value itself."""
    return args


@host_impl("bufferization.to_tensor", "bufferization.to_buffer", "bufferization.clone")
def _to_tensor(interp: HostInterpreter, op: Operation, args: list[Value]) -> Sequence[Value]:
    # Tensors are values: a snapshot, so later writes to the buffer cannot change them.
    """A copy between the tensor and buffer worlds."""
    return [np.array(args[0], copy=True)]


def interpreter_arrays(values: Sequence[object]) -> list[object]:
    """A program's arguments as the interpreters take them: tensors as NumPy arrays (bf16,
    which NumPy does not have from torch, travels as float32, exactly, and the interpreter
    rounds it back to the argument's type, exactly), other values as they are."""
    import torch

    return [(v.float() if v.dtype == torch.bfloat16 else v).detach().cpu().numpy()
            if isinstance(v, torch.Tensor) else v for v in values]
