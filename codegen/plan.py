"""The plan of a host function: what a :class:`~llmopt.codegen.executor.CompiledProgram`
runs, as data.

:func:`plan_host_function` flattens the host ``func.func`` of a module lowered by
``kernel-to-cuda`` into a :class:`HostPlan`: numbered slots (the arguments first) and a
list of steps — allocations, views, copies, host stores of scalars and kernel launches —
with the slots each step releases. Building the plan checks what the executor can run
(contiguous buffers, launches whose arguments fit the kernel's parameters), so a call never
walks IR.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    DictionaryAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    NoneAttr,
    StringAttr,
    UnitAttr,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from llmopt.dialects import cuda, kernel
from llmopt.dialects._symbols import function_symbols

if TYPE_CHECKING:
    import torch

__all__ = [
    "ALIGNMENT", "HOST_SIDE_ATTR", "PARAM_ATTR", "ZEROED_ATTR", "AllocStep", "CopyStep",
    "ExecutorError", "HostPlan", "LaunchStep", "Step", "StoreStep", "ViewStep",
    "argument_names", "ctype", "host_function", "host_side", "is_host_side",
    "plan_host_function", "static_shape", "torch_dtype",
]

#: argument attribute naming the ``state_dict`` key a weight argument is bound to
PARAM_ATTR = "llmopt.param"

ZEROED_ATTR = "llmopt.zeroed"
"""Unit attribute of a host ``memref.alloc`` whose buffer must hold zeros before its first
use (a counter the kernels expect at zero on their first launch and put back to zero
themselves): the executor allocates it with ``torch.zeros``, the interpreter with
``np.zeros``, and ``plan-buffers`` never hands it to another buffer or another buffer to it.
Only ``memref.alloc`` takes it (a ``memref.alloca`` with it is an :class:`ExecutorError`)."""


class ExecutorError(ValueError):
    """The module cannot be run, or a call got arguments that do not fit it."""


# --- the plan: the host function as data ------------------------------------------------------


ALIGNMENT = 16
"""Bytes a tensor argument's data must be aligned to (kernels move 16 bytes at a time)."""


@dataclass(frozen=True)
class AllocStep:
    """``env[slot] = torch.empty(shape, dtype)``; ``zeroed``: ``torch.zeros`` instead of
    ``torch.empty`` (a ``memref.alloc`` marked :data:`ZEROED_ATTR`)."""

    slot: int
    shape: tuple[int, ...]
    element: Attribute
    zeroed: bool = False


@dataclass(frozen=True)
class ViewStep:
    """``env[slot] = env[source].view(shape)``."""

    slot: int
    source: int
    shape: tuple[int, ...]


@dataclass(frozen=True)
class CopyStep:
    """``env[target].copy_(env[source])``."""

    source: int
    target: int


@dataclass(frozen=True)
class LaunchStep:
    """One kernel launch; ``args`` are slots (tensors or scalars), ``params`` the types of
    the kernel parameters they are passed to (pointers or scalars) in order; ``programmatic``:
    the launch may overlap the one before it (``kernel.launch {programmatic}``);
    ``carveout``: the kernel's preferred shared-memory carveout in percent (``{carveout =
    N}``), ``None`` for the driver's choice; ``tensor_maps``: the kernel's tensor-map
    parameters, which follow those, each encoded at the launch from the buffer passed as
    its ``arg`` (:mod:`llmopt.codegen.tensor_map`)."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    args: tuple[int, ...]
    params: tuple[Attribute, ...]
    programmatic: bool = False
    carveout: int | None = None
    tensor_maps: tuple[cuda.TensorMapType, ...] = ()


@dataclass(frozen=True)
class StoreStep:
    """``env[target][index] = env[value]``: a host scalar into a buffer (the lengths a
    program's kernels read from memory, ``lengths-in-memory``)."""

    value: int
    target: int
    index: int


Step = AllocStep | ViewStep | CopyStep | LaunchStep | StoreStep

@dataclass(frozen=True)
class HostPlan:
    """The host function, flattened: slots ``0 .. len(inputs)-1`` hold the arguments,
    ``constants`` fill other slots before the steps run, ``release[k]`` are the slots no
    longer needed after step ``k``, ``results`` the returned slots; ``params[k]`` is the
    ``state_dict`` name of argument ``k`` (``None`` for a call input)."""

    name: str
    inputs: tuple[tuple[str, Attribute], ...]
    constants: tuple[tuple[int, int | float, Attribute], ...]
    steps: tuple[Step, ...]
    release: tuple[tuple[int, ...], ...]
    results: tuple[int, ...]
    num_slots: int
    written_inputs: frozenset[int]
    params: tuple[str | None, ...] = ()
    symbols: tuple[int, ...] = ()
    """Slots of the symbol arguments (a symbolic program: bound from the inputs' shapes)."""
    computed: tuple[int, ...] = ()
    """Slots of the host's ``index`` arithmetic results, in op order
    (:meth:`~llmopt.codegen.symbolic.SymbolicHost.index_values` fills them per call)."""

    def view_roots(self, slots: Iterable[int]) -> list[int]:
        """For each of ``slots``, the slot it is a view of (through every view step), or
        itself."""
        roots = {s.slot: s.source for s in self.steps if isinstance(s, ViewStep)}
        found = []
        for slot in slots:
            while slot in roots:
                slot = roots[slot]
            found.append(slot)
        return found


HOST_SIDE_ATTR = "llmopt.host_side"
"""Module attribute of a :func:`host_side` module: its ``cuda.kernel`` ops have no body."""


def host_side(module: ModuleOp) -> ModuleOp:
    """A new module holding what :func:`plan_host_function` and
    :class:`~llmopt.codegen.symbolic.SymbolicHost` read from ``module``, without the kernels'
    code: every op of ``module``, except that each ``cuda.kernel`` keeps only its signature
    (name, parameters, launch bounds, dynamic shared memory: what the plan and the
    ``kernel.launch`` verifier read) and an empty body. The result is marked with
    :data:`HOST_SIDE_ATTR`, since printing its kernels would give empty functions: a program
    built from it is given the CUDA source printed from ``module``
    (:class:`~llmopt.codegen.executor.CompiledProgram`'s ``source``). The kernels are
    nearly all of a whole model's IR, so the compile cache stores this module to plan from
    without parsing them."""
    ops: list[Operation] = []
    for op in module.ops:
        if isinstance(op, cuda.KernelOp):
            ops.append(cuda.KernelOp.create(properties=dict(op.properties),
                                            attributes=dict(op.attributes),
                                            location=op.location, regions=[Region(Block())]))
        else:
            ops.append(op.clone())
    attributes = {**module.attributes, HOST_SIDE_ATTR: UnitAttr()}
    return ModuleOp(ops, attributes, module.sym_name)


def is_host_side(module: ModuleOp) -> bool:
    """Whether ``module`` is a :func:`host_side` module (its kernels have no code)."""
    return HOST_SIDE_ATTR in module.attributes


def host_function(module: ModuleOp, entry: str | None) -> func.FuncOp:
    funcs = [op for op in module.ops if isinstance(op, func.FuncOp) and op.body.blocks]
    if entry is not None:
        for f in funcs:
            if f.sym_name.data == entry:
                return f
        raise ExecutorError(f"no function @{entry} in the module")
    public = [f for f in funcs if f.sym_visibility is None
              or f.sym_visibility.data == "public"]
    if len(public) != 1:
        names = ", ".join("@" + f.sym_name.data for f in public) or "none"
        raise ExecutorError(f"the module has {len(public)} public functions ({names}); "
                            "name the entry point")
    return public[0]


def static_shape(typ: Attribute, what: str, dynamic: bool = False) -> tuple[int, ...]:
    """The shape of a contiguous memref type; ``?`` extents (``DYNAMIC``) only when
    ``dynamic`` (a symbolic program, whose extents follow from its symbols per call)."""
    if not isinstance(typ, MemRefType):
        raise ExecutorError(f"{what}: expected a memref, got {typ}")
    shape = typ.get_shape()
    if any(d < 0 for d in shape):
        if not dynamic:
            raise ExecutorError(f"{what}: dynamic shape {typ} is not supported")
        if isinstance(typ.layout, NoneAttr):
            return shape
        raise ExecutorError(f"{what}: only contiguous row-major buffers are supported, got "
                            f"{typ}")
    strides, offset = typ.get_strides(), typ.get_offset()
    if offset != 0 or strides is None or list(strides) != list(
        MemRefType.strides_for_shape(shape)
    ):
        raise ExecutorError(f"{what}: only contiguous row-major buffers are supported, got "
                            f"{typ}")
    return shape


def argument_names(fn: func.FuncOp) -> list[str | None]:
    """For each argument of ``fn``: its ``{llmopt.param = "..."}`` name, or ``None``."""
    attrs = fn.arg_attrs
    names: list[str | None] = [None] * len(fn.body.block.args if fn.body.blocks else
                                           fn.function_type.inputs.data)
    if isinstance(attrs, ArrayAttr):
        for k, entry in enumerate(attrs.data[: len(names)]):
            if isinstance(entry, DictionaryAttr):
                value = entry.data.get(PARAM_ATTR)
                if isinstance(value, StringAttr):
                    names[k] = value.data
    return names


def plan_host_function(module: ModuleOp, entry: str | None = None) -> HostPlan:
    """Flatten the host function of a module lowered by ``kernel-to-cuda`` into a plan.

    A symbolic host function (one that declares symbols) keeps its ``?`` extents in the
    plan's shapes (``DYNAMIC``) and its ``index`` arithmetic as :attr:`HostPlan.computed`
    slots: each call's shapes, grids and index values come from
    :class:`~llmopt.codegen.symbolic.SymbolicHost`. A view may then have one ``?`` extent
    (``Tensor.view`` infers it). A ``memref.alloc`` marked :data:`ZEROED_ATTR` gives an
    :class:`AllocStep` with ``zeroed`` set.

    Raises :class:`ExecutorError` for ops the executor does not run, launches of unknown
    kernels, launches whose arguments do not fit the kernel's parameters, or a
    ``memref.alloca`` marked :data:`ZEROED_ATTR` (only ``memref.alloc`` can be zeroed).
    """
    from llmopt.codegen.symbolic import host_ops, is_index_arith

    kernels = {op.sym_name.data: op for op in module.ops if isinstance(op, cuda.KernelOp)}
    unlowered = [op.sym_name.data for op in module.ops if isinstance(op, kernel.FuncOp)]
    if unlowered:
        raise ExecutorError(f"kernels {unlowered} are not lowered yet: run kernel-to-cuda")
    host = host_function(module, entry)
    symbol_slots = tuple(s.arg for s in function_symbols(host).values())
    dynamic = bool(symbol_slots)
    computed: list[int] = []
    slots: dict[SSAValue, int] = {}
    inputs: list[tuple[str, Attribute]] = []
    for k, arg in enumerate(host.body.block.args):
        slots[arg] = k
        name = arg.name_hint or f"arg{k}"
        if isinstance(arg.type, MemRefType):
            static_shape(arg.type, f"argument '{name}'", dynamic)
        elif not cuda.is_scalar(arg.type):
            raise ExecutorError(f"argument '{name}' has unsupported type {arg.type}")
        inputs.append((name, arg.type))
    constants: list[tuple[int, int | float, Attribute]] = []
    steps: list[Step] = []
    uses: dict[int, int] = {}  # slot -> last step using it
    results: tuple[int, ...] = ()
    written: set[int] = set()

    def slot_of(value: SSAValue, op: Operation) -> int:
        if value not in slots:
            raise ExecutorError(f"'{op.name}': operand is not produced by a supported op")
        slot = slots[value]
        uses[slot] = len(steps)
        return slot

    def new_slot(value: SSAValue) -> int:
        slots[value] = len(slots)
        return slots[value]

    roots: dict[int, int] = {}  # view slot -> slot it views
    for op, guard in host_ops(host.body.block):
        if guard and not isinstance(op, kernel.LaunchOp | memref.AllocOp | arith.ConstantOp
                                    | scf.IfOp | scf.YieldOp) and not is_index_arith(op):
            raise ExecutorError(f"'{op.name}' cannot run inside a host scf.if (only launches, "
                                "allocations and index arithmetic can)")
        if isinstance(op, scf.IfOp):
            if not dynamic or op.results:
                raise ExecutorError("a host scf.if needs a symbolic program and has no "
                                    "results")
            slot_of(op.cond, op)
        elif isinstance(op, scf.YieldOp):
            continue
        elif isinstance(op, memref.AllocOp | memref.AllocaOp):
            shape = static_shape(op.memref.type, f"'{op.name}'", dynamic)
            if isinstance(op, memref.AllocaOp) and any(d < 0 for d in shape):
                raise ExecutorError(f"'{op.name}': a ? extent needs memref.alloc")
            zeroed = ZEROED_ATTR in op.attributes
            if zeroed and isinstance(op, memref.AllocaOp):
                raise ExecutorError(f"'{op.name}': only memref.alloc can be zeroed "
                                    f"({ZEROED_ATTR})")
            steps.append(AllocStep(new_slot(op.memref), shape,
                                   op.memref.type.element_type,  # type: ignore[union-attr]
                                   zeroed))
        elif isinstance(op, memref.CollapseShapeOp | memref.ExpandShapeOp | memref.CastOp):
            result = op.results[0]
            shape = static_shape(result.type, f"'{op.name}'", dynamic)
            if sum(d < 0 for d in shape) > 1:
                raise ExecutorError(f"'{op.name}': a view with more than one ? extent "
                                    f"({result.type}) is not supported")
            shape = tuple(-1 if d < 0 else d for d in shape)
            source = slot_of(op.operands[0], op)
            slot = new_slot(result)
            roots[slot] = roots.get(source, source)
            steps.append(ViewStep(slot, source, shape))
        elif isinstance(op, memref.CopyOp):
            source, target = slot_of(op.source, op), slot_of(op.destination, op)
            steps.append(CopyStep(source, target))
            written.add(roots.get(target, target))
        elif isinstance(op, memref.DeallocOp):
            continue
        elif isinstance(op, memref.StoreOp):
            steps.append(_store_step(op, slot_of))
        elif dynamic and is_index_arith(op):
            for v in op.operands:
                slot_of(v, op)
            computed.append(new_slot(op.results[0]))
        elif isinstance(op, arith.ConstantOp):
            value = op.value
            if not isinstance(value, IntegerAttr | FloatAttr):
                raise ExecutorError(f"'{op.name}': only scalar constants are supported")
            slot = new_slot(op.result)
            constants.append((slot, value.value.data, value.type))
        elif isinstance(op, kernel.LaunchOp):
            name = op.kernel.root_reference.data
            target = kernels.get(name)
            if target is None:
                raise ExecutorError(f"kernel.launch @{name}: no cuda.kernel of that name")
            maps = tuple(target.tensor_maps)
            params = tuple(target.param_types.data)[:len(target.param_types.data) - len(maps)]
            if len(params) != len(op.args):
                raise ExecutorError(f"kernel.launch @{name}: {len(op.args)} arguments for "
                                    f"{len(params)} parameters")
            for k, (arg, param) in enumerate(zip(op.args, params, strict=True)):
                if isinstance(param, cuda.PtrType) != isinstance(arg.type, MemRefType) or (
                    isinstance(param, cuda.PtrType)
                    and param.element != arg.type.element_type  # type: ignore[union-attr]
                ):
                    raise ExecutorError(f"kernel.launch @{name}: argument {k} of type "
                                        f"{arg.type} does not fit parameter type {param}")
            for m in maps:
                if op.args[m.arg.data].type != m.buffer:
                    raise ExecutorError(f"kernel.launch @{name}: argument {m.arg.data} of type "
                                        f"{op.args[m.arg.data].type} is not the "
                                        f"{m.buffer} its tensor map describes")
            args = tuple(slot_of(a, op) for a in op.args)
            for a, param in zip(args, params, strict=True):
                if isinstance(param, cuda.PtrType) and not param.is_const:
                    written.add(roots.get(a, a))
            grid, block = op.grid_shape, op.block_shape
            bounds = target.max_threads
            if bounds is not None and block[0] * block[1] * block[2] > bounds:
                raise ExecutorError(f"kernel.launch @{name}: block {list(block)} exceeds the "
                                    f"kernel's launch bounds ({bounds})")
            carveout = op.attributes.get(kernel.CARVEOUT)
            steps.append(LaunchStep(name, (grid[0], grid[1], grid[2]),
                                    (block[0], block[1], block[2]), op.shared_bytes, args,
                                    params, kernel.PROGRAMMATIC in op.attributes,
                                    carveout.value.data if isinstance(carveout, IntegerAttr)
                                    else None, maps))
        elif isinstance(op, func.ReturnOp):
            results = tuple(slot_of(v, op) for v in op.arguments)
        else:
            raise ExecutorError(f"'{op.name}' cannot run in the host function")
    keep = (set(results) | set(range(len(inputs))) | {c[0] for c in constants}
            | set(computed))
    release: list[list[int]] = [[] for _ in steps]
    for slot, last in uses.items():
        if slot not in keep and last < len(steps):
            release[last].append(slot)
    return HostPlan(
        name=host.sym_name.data, inputs=tuple(inputs), constants=tuple(constants),
        steps=tuple(steps), release=tuple(tuple(r) for r in release), results=results,
        num_slots=len(slots), written_inputs=frozenset(s for s in written if s < len(inputs)),
        params=tuple(argument_names(host)), symbols=symbol_slots, computed=tuple(computed),
    )


def _store_step(op: memref.StoreOp, slot_of: Callable[[SSAValue, Operation], int]) -> StoreStep:
    """A ``memref.store`` of a host scalar at a constant position of a 1-D buffer."""
    typ = op.memref.type
    index = op.indices[0].owner if len(op.indices) == 1 else None
    if not (isinstance(typ, MemRefType) and len(typ.get_shape()) == 1
            and isinstance(index, arith.ConstantOp) and isinstance(index.value, IntegerAttr)):
        raise ExecutorError("'memref.store' runs on the host only at a constant position of a "
                            "1-D buffer")
    return StoreStep(slot_of(op.value, op), slot_of(op.memref, op), index.value.value.data)

def torch_dtype(element: Attribute) -> torch.dtype:
    """The torch dtype of a memref element type."""
    import torch

    if isinstance(element, Float32Type):
        return torch.float32
    if isinstance(element, Float64Type):
        return torch.float64
    if isinstance(element, Float16Type):
        return torch.float16
    if isinstance(element, BFloat16Type):
        return torch.bfloat16
    if isinstance(element, IndexType):
        return torch.int64
    if isinstance(element, IntegerType):
        if cuda.is_bool(element):
            return torch.bool
        table = ({8: torch.uint8, 16: torch.uint16, 32: torch.uint32, 64: torch.uint64}
                 if cuda.is_unsigned(element) else
                 {8: torch.int8, 16: torch.int16, 32: torch.int32, 64: torch.int64})
        if element.width.data in table:
            return table[element.width.data]
    raise ExecutorError(f"no torch dtype for {element}")


def ctype(param: Attribute) -> Callable[[Any], Any]:
    """The ctypes constructor a scalar kernel parameter of this type is passed with."""
    if isinstance(param, Float32Type):
        return ctypes.c_float
    if isinstance(param, Float64Type):
        return ctypes.c_double
    if isinstance(param, IndexType):
        return ctypes.c_longlong
    if cuda.is_bool(param):
        return ctypes.c_bool
    if isinstance(param, IntegerType):
        unsigned = cuda.is_unsigned(param)
        table = {
            8: (ctypes.c_int8, ctypes.c_uint8), 16: (ctypes.c_int16, ctypes.c_uint16),
            32: (ctypes.c_int32, ctypes.c_uint32), 64: (ctypes.c_int64, ctypes.c_uint64),
        }  # fmt: skip
        if param.width.data in table:
            return table[param.width.data][unsigned]
    raise ExecutorError(f"cannot pass a kernel parameter of type {param}")

