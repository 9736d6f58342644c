"""Run a module lowered by ``kernel-to-cuda`` on the GPU.

:class:`CompiledProgram` takes a module holding ``cuda.kernel`` functions and the host
``func.func`` that launches them. At construction it prints the CUDA source
(:func:`~llmopt.codegen.cuda_printer.print_cuda`), compiles it once with NVRTC for the device's
architecture (through the kernel cache), loads the CUBIN, and turns the host function into a
flat list of steps; a call then walks no IR:

* function arguments are bound to the given tensors (checked: CUDA device, dtype, shape,
  contiguity; a tensor whose data does not start on a 16-byte boundary — a view at an odd
  offset — is copied first, since kernels read and copy 16 bytes at a time, and is refused
  when the program writes it) or Python numbers (for scalar arguments). Arguments marked
  ``{llmopt.param = "name"}`` (the model's weights, named after ``state_dict`` keys) can
  instead be bound once, by name, from a dict of tensors (``params=`` or
  :meth:`CompiledProgram.bind_params`); a call then passes only the other arguments;
* ``memref.alloc`` → ``torch.empty`` of the buffer's shape and dtype on the module's device;
  views (``memref.expand_shape``/``collapse_shape``/``reshape``/``cast``) → ``Tensor.view``;
  ``memref.copy`` → ``Tensor.copy_``; ``memref.dealloc`` → nothing (buffers are released after
  their last use anyway); scalar ``arith.constant`` → a kernel argument;
* ``kernel.launch`` → ``CudaFunction.launch(grid, block, args, shared_bytes)`` on torch's
  current stream;
* ``func.return`` → the tuple of returned tensors.

Before compiling, every launch is checked against the device's
:class:`~llmopt.target.Target` (threads a block, shared memory a block): a program lowered
for a bigger GPU than the one it runs on fails with the kernel's name rather than a launch
error. A call neither synchronises nor inspects IR, so it can be captured in a CUDA graph:
with ``cuda_graph=True`` the first call copies the call's tensor arguments into static
buffers, runs the forward once eagerly (warm-up, on a side stream) and captures it into a
``torch.cuda.CUDAGraph``; every later call copies its arguments into the static buffers and
replays the graph (one host call instead of one driver call per kernel); a call that passes
the static buffers themselves (:attr:`CompiledProgram.static_inputs`) skips the copies. Its
results are
then the graph's static output tensors, overwritten by the next call (clone them to keep
them). Weights bound by name are captured in place, never copied. torch and the CUDA
libraries are imported when a program is built, not when this module is imported.

A symbolic program (a host function that declares symbols, e.g. the sequence length ``seq``
up to ``llmopt.max``) is one set of CUBINs for every length. A call reads the symbols from its
inputs' shapes (:class:`~llmopt.codegen.symbolic.SymbolicHost`: a length above the maximum or
a shape that does not match is an :class:`ExecutorError` naming the argument and the bound),
evaluates the host's index arithmetic for that length once
(:func:`~llmopt.codegen.symbolic.layout_call`, cached per length): every launch's grid, every
allocation's shape, and the length itself, passed to the kernels as an ``int32``. Each
intermediate buffer is allocated once, flat, at its size at the maxima
(``SymbolicHost.max_shapes``) and a call views the prefix its shape needs; the buffers
results live in are allocated per call at the call's shape.
Calls therefore share the intermediate buffers: they are ordered on one stream, never run
concurrently on two. With ``cuda_graph=True`` a symbolic program captures one CUDA graph per
length seen, on that length's first call, and replays it when the length repeats.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping, Sequence
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
)
from xdsl.ir import Attribute, Operation, SSAValue

from llmopt.dialects import cuda, kernel
from llmopt.dialects._symbols import function_symbols
from llmopt.target import Target, current_target

if TYPE_CHECKING:
    import torch

__all__ = [
    "PARAM_ATTR", "AllocStep", "CompiledProgram", "CopyStep", "ExecutorError", "HostPlan",
    "LaunchStep", "ViewStep", "argument_names", "bind_weights", "check_launches",
    "plan_host_function",
]

#: argument attribute naming the ``state_dict`` key a weight argument is bound to
PARAM_ATTR = "llmopt.param"


class ExecutorError(ValueError):
    """The module cannot be run, or a call got arguments that do not fit it."""


# --- the plan: the host function as data ------------------------------------------------------


ALIGNMENT = 16
"""Bytes a tensor argument's data must be aligned to (kernels move 16 bytes at a time)."""


@dataclass(frozen=True)
class AllocStep:
    """``env[slot] = torch.empty(shape, dtype)``."""

    slot: int
    shape: tuple[int, ...]
    element: Attribute


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
    """One kernel launch; ``args`` are slots (tensors or scalars), ``params`` the kernel's
    parameter types (pointers or scalars) in order."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    args: tuple[int, ...]
    params: tuple[Attribute, ...]


Step = AllocStep | ViewStep | CopyStep | LaunchStep


@dataclass(frozen=True)
class KernelTime:
    """One launch of :meth:`CompiledProgram.profile`: its kernel, launch shape and median
    milliseconds."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    ms: float


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


def _host_function(module: ModuleOp, entry: str | None) -> func.FuncOp:
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


def _static_shape(typ: Attribute, what: str, dynamic: bool = False) -> tuple[int, ...]:
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
    (``Tensor.view`` infers it).

    Raises :class:`ExecutorError` for ops the executor does not run, launches of unknown
    kernels, or launches whose arguments do not fit the kernel's parameters.
    """
    from llmopt.codegen.symbolic import host_ops, is_index_arith

    kernels = {op.sym_name.data: op for op in module.ops if isinstance(op, cuda.KernelOp)}
    unlowered = [op.sym_name.data for op in module.ops if isinstance(op, kernel.FuncOp)]
    if unlowered:
        raise ExecutorError(f"kernels {unlowered} are not lowered yet: run kernel-to-cuda")
    host = _host_function(module, entry)
    symbol_slots = tuple(s.arg for s in function_symbols(host).values())
    dynamic = bool(symbol_slots)
    computed: list[int] = []
    slots: dict[SSAValue, int] = {}
    inputs: list[tuple[str, Attribute]] = []
    for k, arg in enumerate(host.body.block.args):
        slots[arg] = k
        name = arg.name_hint or f"arg{k}"
        if isinstance(arg.type, MemRefType):
            _static_shape(arg.type, f"argument '{name}'", dynamic)
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
            shape = _static_shape(op.memref.type, f"'{op.name}'", dynamic)
            if isinstance(op, memref.AllocaOp) and any(d < 0 for d in shape):
                raise ExecutorError(f"'{op.name}': a ? extent needs memref.alloc")
            steps.append(AllocStep(new_slot(op.memref), shape,
                                   op.memref.type.element_type))  # type: ignore[union-attr]
        elif isinstance(op, memref.CollapseShapeOp | memref.ExpandShapeOp | memref.CastOp):
            result = op.results[0]
            shape = _static_shape(result.type, f"'{op.name}'", dynamic)
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
            params = tuple(target.param_types.data)
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
            args = tuple(slot_of(a, op) for a in op.args)
            for a, param in zip(args, params, strict=True):
                if isinstance(param, cuda.PtrType) and not param.is_const:
                    written.add(roots.get(a, a))
            grid, block = op.grid_shape, op.block_shape
            bounds = target.max_threads
            if bounds is not None and block[0] * block[1] * block[2] > bounds:
                raise ExecutorError(f"kernel.launch @{name}: block {list(block)} exceeds the "
                                    f"kernel's launch bounds ({bounds})")
            steps.append(LaunchStep(name, (grid[0], grid[1], grid[2]),
                                    (block[0], block[1], block[2]), op.shared_bytes, args,
                                    params))
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


# --- running it ---------------------------------------------------------------------------------


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


def _ctype(param: Attribute) -> Callable[[Any], Any]:
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


def bind_weights(plan: HostPlan, params: Mapping[str, Any], device: Any) -> dict[int, Any]:
    """The tensors of ``params`` for the arguments of ``plan`` marked
    ``{llmopt.param = "name"}``: argument slot → tensor on ``device``, contiguous.

    Names the program does not use are ignored. Tensors are moved to ``device`` once, here;
    their dtype and shape must match the argument's.

    Raises:
        ExecutorError: a weight is missing, is a meta tensor, is not a tensor, or does not
            fit its argument.
    """
    import torch

    slots = [k for k, name in enumerate(plan.params) if name is not None]
    missing = [plan.params[k] for k in slots if plan.params[k] not in params]
    if missing:
        shown = ", ".join(map(repr, missing[:5])) + (" …" if len(missing) > 5 else "")
        raise ExecutorError(f"{len(missing)} weight(s) missing from params: {shown}")
    bound: dict[int, Any] = {}
    for k in slots:
        name = plan.params[k]
        assert name is not None
        tensor = params[name]
        typ = plan.inputs[k][1]
        if not isinstance(typ, MemRefType):
            raise ExecutorError(f"weight '{name}' is bound to a scalar argument ({typ})")
        dtype, shape = torch_dtype(typ.element_type), typ.get_shape()
        if not isinstance(tensor, torch.Tensor):
            raise ExecutorError(f"weight '{name}' must be a tensor, got "
                                f"{type(tensor).__name__}")
        if tensor.is_meta:
            raise ExecutorError(f"weight '{name}' is a meta tensor: load real weights first")
        if tensor.dtype != dtype or tuple(tensor.shape) != shape:
            raise ExecutorError(f"weight '{name}' is {tensor.dtype} {tuple(tensor.shape)}, "
                                f"the program takes {dtype} {shape}")
        tensor = tensor.detach().to(device).contiguous()
        bound[k] = tensor.clone() if tensor.data_ptr() % ALIGNMENT else tensor
    return bound


def check_launches(plan: HostPlan, target: Target) -> None:
    """Check that every launch of ``plan`` fits a block of ``target``: at most
    ``max_threads`` threads and ``max_smem`` bytes of dynamic shared memory.

    Raises:
        ExecutorError: a launch does not fit; the message names its kernel and the target.
    """
    for step in plan.steps:
        if not isinstance(step, LaunchStep):
            continue
        threads = step.block[0] * step.block[1] * step.block[2]
        if threads > target.max_threads:
            raise ExecutorError(f"kernel '{step.kernel}' is launched with {threads} threads a "
                                f"block; {target.arch} allows {target.max_threads}")
        if step.shared_bytes > target.max_smem:
            raise ExecutorError(f"kernel '{step.kernel}' is launched with {step.shared_bytes} "
                                f"bytes of shared memory; a block may use {target.max_smem} "
                                f"on {target.arch} (lower for this GPU: "
                                f"lower-to-cuda{{arch={target.arch}}})")


class CompiledProgram:
    """A module after ``kernel-to-cuda``, compiled and ready to call.

    Args:
        module: holds ``cuda.kernel`` ops and the host ``func.func``.
        entry: the host function's name (default: the module's only public function).
        arch: the GPU architecture NVRTC compiles for (default: the device's,
            :func:`~llmopt.target.current_target`).
        options: extra NVRTC options.
        device: CUDA device index (default: torch's current device).
        check: check the arguments of every call (device, dtype, shape, contiguity, and no
            overlap between a buffer the program writes and another argument).
        params: weights by ``state_dict`` name, bound to the arguments marked
            ``{llmopt.param = "..."}`` (see :meth:`bind_params`); a call then takes only the
            other arguments, in order (:attr:`input_names`). Without it a call takes every
            argument of the host function.
        cuda_graph: capture the whole forward into a CUDA graph on the first call and
            replay it afterwards (see the module docstring).

    Attributes:
        source: the CUDA source text; ``cubin``: the compiled image; ``plan``: the host
        function as a :class:`HostPlan`; ``module``: the loaded
        :class:`~llmopt.codegen.runtime.CudaModule`; ``target``: the device's
        :class:`~llmopt.target.Target`, which every launch was checked against
        (:func:`check_launches`).
    """

    def __init__(self, module: ModuleOp, *, entry: str | None = None, arch: str | None = None,
                 options: Sequence[str] = (), device: int | None = None,
                 check: bool = True, params: Mapping[str, Any] | None = None,
                 cuda_graph: bool = False) -> None:
        """Print, compile and load ``module``; plan its host function."""
        import torch

        from llmopt.codegen.cuda_printer import cuda_source
        from llmopt.codegen.nvrtc import compile_cuda
        from llmopt.codegen.runtime import CudaModule
        from llmopt.codegen.symbolic import SymbolicHost

        self.plan = plan_host_function(module, entry)
        self.symbolic = (SymbolicHost(_host_function(module, entry)) if self.plan.symbols
                         else None)
        torch.cuda.init()
        index = torch.cuda.current_device() if device is None else int(device)
        self.target = current_target(index)
        check_launches(self.plan, self.target)
        self.source = cuda_source(module)
        self.arch = arch or self.target.arch
        self.cubin = compile_cuda(self.source, arch=self.arch, options=options)
        self.module = CudaModule(self.cubin, device=index)
        self.device = torch.device("cuda", self.module.device)
        self.check = check
        self.cuda_graph = cuda_graph
        self._expected = [
            (name, torch_dtype(t.element_type), t.get_shape())
            if isinstance(t, MemRefType) else (name, _ctype(t), None)
            for name, t in self.plan.inputs
        ]
        self._layouts: dict[tuple[int, ...], Any] = {}
        self._layout: Any = None
        self._buffers = self._symbolic_buffers() if self.symbolic is not None else {}
        self._graphs: dict[tuple[int, ...], tuple[Any, ...]] = {}
        self._initial: list[Any] = [None] * self.plan.num_slots
        for slot, value, _ in self.plan.constants:
            self._initial[slot] = value
        self._steps = [self._compile_step(s, r, k) for k, (s, r) in
                       enumerate(zip(self.plan.steps, self.plan.release, strict=True))]
        self._results = self.plan.results
        self._bound: dict[int, Any] = {}
        self._call_slots: tuple[int, ...] = tuple(k for k in range(len(self.plan.inputs))
                                                  if k not in self.plan.symbols)
        self._graph: Any = None
        self._static: dict[int, Any] = {}
        self._graph_scalars: dict[int, Any] = {}
        self._graph_outputs: tuple[Any, ...] = ()
        if params is not None:
            self.bind_params(params)

    # --- weights by name -------------------------------------------------------------------

    @property
    def param_names(self) -> list[str]:
        """The ``state_dict`` names of the weight arguments, in argument order."""
        return [n for n in self.plan.params if n is not None]

    @property
    def input_names(self) -> list[str]:
        """The names of the arguments a call passes, in order."""
        return [self.plan.inputs[k][0] for k in self._call_slots]

    def bind_params(self, params: Mapping[str, Any]) -> None:
        """Bind every argument marked ``{llmopt.param = "name"}`` to ``params[name]`` (see
        :func:`bind_weights`); calls afterwards pass only the remaining arguments. A
        captured CUDA graph is dropped (it holds the previous weights' addresses).

        Raises:
            ExecutorError: a weight is missing, is a meta tensor, or does not fit.
        """
        bound = bind_weights(self.plan, params, self.device)
        self._bound = bound
        self._call_slots = tuple(k for k in range(len(self.plan.inputs))
                                 if k not in bound and k not in self.plan.symbols)
        self.reset_graph()

    # --- running ---------------------------------------------------------------------------

    @property
    def kernel_names(self) -> list[str]:
        """The kernels launched, in launch order (repeats removed)."""
        seen: dict[str, None] = {}
        for step in self.plan.steps:
            if isinstance(step, LaunchStep):
                seen[step.kernel] = None
        return list(seen)

    def _compile_step(self, step: Step, release: tuple[int, ...],
                      index: int) -> Callable[[list[Any]], None]:
        import torch

        device = self.device
        if isinstance(step, AllocStep) and step.slot in self._buffers:
            slot, flat = step.slot, self._buffers[step.slot]

            def alloc_prefix(env: list[Any]) -> None:
                shape = self._layout.shapes[slot]
                numel = 1
                for e in shape:
                    numel *= e
                env[slot] = flat[:numel].view(shape)

            return alloc_prefix
        if isinstance(step, AllocStep) and self.symbolic is not None:
            slot, dtype = step.slot, torch_dtype(step.element)

            def alloc_call(env: list[Any]) -> None:
                env[slot] = torch.empty(self._layout.shapes[slot], dtype=dtype, device=device)

            return alloc_call
        if isinstance(step, AllocStep):
            slot, shape, dtype = step.slot, step.shape, torch_dtype(step.element)

            def alloc(env: list[Any]) -> None:
                env[slot] = torch.empty(shape, dtype=dtype, device=device)

            return alloc
        if isinstance(step, ViewStep):
            slot, source, shape = step.slot, step.source, step.shape

            def view(env: list[Any]) -> None:
                env[slot] = env[source].view(shape)
                for r in release:
                    env[r] = None

            return view
        if isinstance(step, CopyStep):
            source, target = step.source, step.target

            def copy(env: list[Any]) -> None:
                env[target].copy_(env[source])
                for r in release:
                    env[r] = None

            return copy
        fn = self.module.function(step.kernel)
        grid, block, shared = step.grid, step.block, step.shared_bytes
        args = step.args
        converters = [None if isinstance(p, cuda.PtrType) else _ctype(p) for p in step.params]
        if self.symbolic is not None:
            pairs = list(zip(args, converters, strict=True))

            def launch_symbolic(env: list[Any]) -> None:
                if index not in self._layout.inactive:
                    fn.launch(self._layout.grids[index], block,
                              [env[a] if c is None else c(env[a]) for a, c in pairs], shared)
                for r in release:
                    env[r] = None

            return launch_symbolic
        if all(c is None for c in converters):

            def launch(env: list[Any]) -> None:
                fn.launch(grid, block, [env[a] for a in args], shared)
                for r in release:
                    env[r] = None

            return launch
        pairs = list(zip(args, converters, strict=True))

        def launch_with_scalars(env: list[Any]) -> None:
            fn.launch(grid, block, [env[a] if c is None else c(env[a]) for a, c in pairs],
                      shared)
            for r in release:
                env[r] = None

        return launch_with_scalars

    def _check_arg(self, k: int, arg: Any) -> None:
        import torch

        name, kind, shape = self._expected[k]
        if not isinstance(arg, torch.Tensor):
            raise ExecutorError(f"argument {k} ('{name}') must be a tensor, got "
                                f"{type(arg).__name__}")
        if arg.device != self.device:
            raise ExecutorError(f"argument {k} ('{name}') is on {arg.device}, the "
                                f"program runs on {self.device}")
        if arg.dtype != kind:
            raise ExecutorError(f"argument {k} ('{name}') has dtype {arg.dtype}, "
                                f"expected {kind}")
        if len(arg.shape) != len(shape) or any(
                d >= 0 and e != d for e, d in zip(arg.shape, shape, strict=True)):
            raise ExecutorError(f"argument {k} ('{name}') has shape "
                                f"{tuple(arg.shape)}, expected {shape}")
        if not arg.is_contiguous():
            raise ExecutorError(f"argument {k} ('{name}') is not contiguous")

    def _bind(self, args: Sequence[Any]) -> list[Any]:
        slots = self._call_slots
        if len(args) != len(slots):
            what = " (weights are bound by name)" if self._bound else ""
            raise ExecutorError(f"@{self.plan.name} takes {len(slots)} arguments{what}, "
                                f"got {len(args)}")
        env = list(self._initial)
        for k, value in self._bound.items():
            env[k] = value
        for k, arg in zip(slots, args, strict=True):
            name, _, shape = self._expected[k]
            if shape is None:
                if not isinstance(arg, int | float) or isinstance(arg, bool):
                    raise ExecutorError(f"argument {k} ('{name}') must be a number")
            else:
                if self.check:
                    self._check_arg(k, arg)
                arg = self._aligned(k, arg)
            env[k] = arg
        if self.check and self.plan.written_inputs:
            self._check_overlap(env[: len(self.plan.inputs)])
        if self.symbolic is not None:
            self._layout = self._layout_of(env)
            for k, value in self._layout.scalars.items():
                env[k] = value
        return env

    # --- symbolic programs -----------------------------------------------------------------

    def _symbolic_buffers(self) -> dict[int, Any]:
        """One flat buffer per allocation of a symbolic program, sized for the symbols'
        maxima (:meth:`SymbolicHost.max_shapes`); a call views the prefix its shape needs.
        Allocations a result lives in are made per call at the call's shape instead, so a
        call's results are not overwritten by the next call."""
        import torch

        assert self.symbolic is not None
        roots = {s.slot: s.source for s in self.plan.steps if isinstance(s, ViewStep)}

        def root(slot: int) -> int:
            while slot in roots:
                slot = roots[slot]
            return slot

        returned = {root(r) for r in self.plan.results}
        allocs = [s for s in self.plan.steps if isinstance(s, AllocStep)]
        buffers: dict[int, Any] = {}
        for step, shape in zip(allocs, self.symbolic.max_shapes(), strict=True):
            if step.slot in returned:
                continue
            numel = 1
            for e in shape:
                numel *= e
            buffers[step.slot] = torch.empty(numel, dtype=torch_dtype(step.element),
                                             device=self.device)
        return buffers

    def symbols_of(self, args: Sequence[Any]) -> dict[str, int]:
        """The symbols' values for a call's ``args`` (read from their shapes); raises
        :class:`ExecutorError` naming the argument and the bound."""
        assert self.symbolic is not None
        if len(args) != len(self._call_slots):
            raise ExecutorError(f"@{self.plan.name} takes {len(self._call_slots)} arguments, "
                                f"got {len(args)}")
        given = dict(zip(self._call_slots, args, strict=True))
        return self.symbolic.bind([given.get(k) for k in range(len(self.plan.inputs))
                                   if k not in self.plan.symbols])

    def _layout_of(self, env: list[Any]) -> Any:
        from llmopt.codegen.symbolic import layout_call

        assert self.symbolic is not None
        symbols = self.symbolic.bind([env[k] if k in self._call_slots else None
                                      for k in range(len(self.plan.inputs))
                                      if k not in self.plan.symbols])
        key = tuple(symbols.values())
        layout = self._layouts.get(key)
        if layout is None:
            layout = self._layouts[key] = layout_call(self.plan, self.symbolic, symbols)
        return layout

    def _aligned(self, k: int, arg: Any) -> Any:
        """``arg``, or an aligned copy of it when its data is not 16-byte aligned."""
        if not hasattr(arg, "data_ptr") or arg.data_ptr() % ALIGNMENT == 0:
            return arg
        if k in self.plan.written_inputs:
            raise ExecutorError(f"argument {k} ('{self.plan.inputs[k][0]}') is written by the "
                                f"program and must start on a {ALIGNMENT}-byte boundary")
        return arg.clone()

    def _check_overlap(self, args: Sequence[Any]) -> None:
        spans = [
            (a.data_ptr(), a.data_ptr() + a.numel() * a.element_size(), k)
            for k, a in enumerate(args) if hasattr(a, "data_ptr") and a.numel()
        ]
        for start, end, k in spans:
            if k not in self.plan.written_inputs:
                continue
            for other_start, other_end, j in spans:
                if j != k and start < other_end and other_start < end:
                    raise ExecutorError(
                        f"argument {k} ('{self.plan.inputs[k][0]}') is written by the program "
                        f"and overlaps argument {j} ('{self.plan.inputs[j][0]}')"
                    )

    def _run(self, env: list[Any]) -> tuple[Any, ...]:
        for step in self._steps:
            step(env)
        return tuple(env[r] for r in self._results)

    def __call__(self, *args: Any) -> tuple[Any, ...]:
        """Run the program on ``args`` (the arguments not bound by name); returns the tuple
        of returned tensors (without synchronising)."""
        if self.cuda_graph:
            return self._replay(args)
        return self._run(self._bind(args))

    def profile(self, *args: Any, reps: int = 20, warmup: int = 3) -> list[KernelTime]:
        """Time every launch of a call on ``args`` on its own: CUDA events around each
        launch, ``warmup`` untimed calls, then the median of ``reps`` timed ones (outside any
        CUDA graph, so a launch's time includes no neighbour but also no graph saving).
        Returns one :class:`KernelTime` per launch, in launch order."""
        import torch

        launches = [k for k, s in enumerate(self.plan.steps) if isinstance(s, LaunchStep)]
        if self.symbolic is not None:  # the launches this call's length runs
            self._bind(args)
            launches = [k for k in launches if k not in self._layout.inactive]
        samples: dict[int, list[float]] = {k: [] for k in launches}
        for rep in range(warmup + reps):
            env = self._bind(args)
            events = []
            for k, step in enumerate(self._steps):
                if k not in samples:
                    step(env)
                    continue
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                    enable_timing=True)
                begin.record()
                step(env)
                end.record()
                events.append((k, begin, end))
            torch.cuda.synchronize(self.device)
            if rep >= warmup:
                for k, begin, end in events:
                    samples[k].append(begin.elapsed_time(end))
        times = []
        for k in launches:
            step = self.plan.steps[k]
            assert isinstance(step, LaunchStep)
            ordered = sorted(samples[k])
            grid = self._layout.grids[k] if self.symbolic is not None else step.grid
            times.append(KernelTime(step.kernel, grid, step.block,
                                    ordered[len(ordered) // 2]))
        return times

    # --- CUDA graphs -----------------------------------------------------------------------

    def reset_graph(self) -> None:
        """Drop the captured CUDA graph (the next call with ``cuda_graph`` captures anew)."""
        self._graph = None
        self._static = {}
        self._graph_scalars = {}
        self._graph_outputs = ()
        self._graphs = {}

    @property
    def static_inputs(self) -> tuple[Any, ...]:
        """The tensors the captured CUDA graph reads its inputs from, in call order (scalar
        arguments as captured). A call that passes these very tensors replays the graph
        without copying its inputs: write each step's inputs into them (``copy_``) and call
        ``program(*program.static_inputs)``. Empty before the first call captures."""
        if self._graph is None:
            return ()
        return tuple(self._static.get(k, self._graph_scalars.get(k)) for k in self._call_slots)

    @property
    def graph_captured(self) -> bool:
        """Whether a CUDA graph has been captured."""
        return self._graph is not None

    def _copy_in(self, args: Sequence[Any]) -> None:
        for k, arg in zip(self._call_slots, args, strict=True):
            static = self._static.get(k)
            if static is None:
                if arg != self._graph_scalars[k]:
                    raise ExecutorError(
                        f"argument {k} ('{self.plan.inputs[k][0]}') is {arg!r}, but the CUDA "
                        f"graph was captured with {self._graph_scalars[k]!r}; call "
                        "reset_graph() to capture again"
                    )
            elif arg is not static:
                if self.check:
                    self._check_arg(k, arg)
                static.copy_(arg)

    def _copy_out(self, args: Sequence[Any]) -> None:
        for k, arg in zip(self._call_slots, args, strict=True):
            static = self._static.get(k)
            if k in self.plan.written_inputs and static is not None and arg is not static:
                arg.copy_(static)

    def _replay(self, args: Sequence[Any]) -> tuple[Any, ...]:
        if self.symbolic is not None:
            key = tuple(self.symbols_of(args).values())
            if key in self._graphs:
                (self._graph, self._static, self._graph_scalars,
                 self._graph_outputs) = self._graphs[key]
            else:
                self._capture(args)
                self._graphs[key] = (self._graph, self._static, self._graph_scalars,
                                     self._graph_outputs)
        elif self._graph is None:
            self._capture(args)
        self._copy_in(args)
        self._graph.replay()
        self._copy_out(args)
        return self._graph_outputs

    def _capture(self, args: Sequence[Any]) -> None:
        """Static buffers, one eager warm-up run on a side stream, then the capture."""
        import torch

        env = self._bind(args)
        self._static = {}
        self._graph_scalars = {}
        for k in self._call_slots:
            if self._expected[k][2] is None:
                self._graph_scalars[k] = env[k]
            else:
                self._static[k] = env[k] = env[k].clone()
        with torch.cuda.device(self.device):
            current = torch.cuda.current_stream(self.device)
            side = torch.cuda.Stream(self.device)
            side.wait_stream(current)
            with torch.cuda.stream(side):
                self._run(list(env))  # warm-up: first launches, shared-memory opt-ins
            current.wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                outputs = self._run(list(env))
        self._graph = graph
        self._graph_outputs = outputs

    def __repr__(self) -> str:
        graph = " cuda_graph" if self.cuda_graph else ""
        return (f"<CompiledProgram @{self.plan.name} kernels={len(self.kernel_names)} "
                f"arch={self.arch} device={self.device}{graph}>")
