"""Run a module lowered by ``kernel-to-cuda`` on the GPU.

:class:`CompiledProgram` takes a module holding ``cuda.kernel`` functions and the host
``func.func`` that launches them. At construction it prints the CUDA source
(:func:`~llmopt.codegen.cuda_printer.print_cuda`; or it is given the source, with a module
whose kernels are signatures only — :func:`~llmopt.codegen.plan.host_side`, what the compile
cache hands over), compiles it once with NVRTC for the device's
architecture (through the kernel cache), loads the CUBIN, and turns the host function into a
flat list of steps; a call then walks no IR:

* function arguments are bound to the given tensors (checked: CUDA device, dtype, shape,
  contiguity; a tensor whose data does not start on a 16-byte boundary — a view at an odd
  offset — is copied first, since kernels read and copy 16 bytes at a time, and is refused
  when the program writes it) or Python numbers (for scalar arguments). Arguments marked
  ``{llmopt.param = "name"}`` (the model's weights, named after ``state_dict`` keys) can
  instead be bound once, by name, from a dict of tensors (``params=`` or
  :meth:`CompiledProgram.bind_params`); a call then passes only the other arguments;
* ``memref.alloc`` → ``torch.empty`` of the buffer's shape and dtype on the module's device,
  or ``torch.zeros`` for one marked ``{llmopt.zeroed}`` (:data:`ZEROED_ATTR`: a buffer the
  kernels need at zero before their first launch and put back to zero themselves; a symbolic
  program's flat buffer of one is zeroed once, when it is allocated);
  views (``memref.expand_shape``/``collapse_shape``/``reshape``/``cast``) → ``Tensor.view``;
  ``memref.copy`` → ``Tensor.copy_``; ``memref.dealloc`` → nothing (buffers are released after
  their last use anyway); scalar ``arith.constant`` → a kernel argument;
* ``kernel.launch`` → ``CudaFunction.launch(grid, block, args, shared_bytes)`` on torch's
  current stream (``programmatic=True`` for a ``{programmatic}`` launch); a kernel with
  tensor maps (``tma.load``) gets one more argument per map, encoded from the buffer the
  launch passes (:mod:`llmopt.codegen.tensor_map`);
* ``func.return`` → the tuple of returned tensors.

Before compiling, every launch is checked against the device's
:class:`~llmopt.target.Target` (threads a block, shared memory a block): a program lowered
for a bigger GPU than the one it runs on fails with the kernel's name rather than a launch
error. A call neither synchronises nor inspects IR, so it can be captured in a CUDA graph
(``cuda_graph=True``, see :mod:`llmopt.codegen.graph`); weights bound by name are captured
in place, never copied. The plan itself is built by
:func:`~llmopt.codegen.plan.plan_host_function`. torch and the CUDA libraries are imported
when a program is built, not when this module is imported.

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
length seen, on that length's first call, and replays it when the length repeats — or one
graph for every length, when its kernels read the lengths from memory
(``lengths-in-memory``; the host's ``memref.store`` of a length is a step of its own).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xdsl.dialects.builtin import MemRefType, ModuleOp

from llmopt.codegen.graph import GraphReplay
from llmopt.codegen.plan import (
    ALIGNMENT,
    PARAM_ATTR,
    ZEROED_ATTR,
    AllocStep,
    CopyStep,
    ExecutorError,
    HostPlan,
    LaunchStep,
    Step,
    StoreStep,
    ViewStep,
    argument_names,
    host_function,
    is_host_side,
    plan_host_function,
    torch_dtype,
)
from llmopt.codegen.plan import ctype as _ctype
from llmopt.codegen.tensor_map import TensorMapEncoder
from llmopt.dialects import cuda
from llmopt.target import Target, current_target

if TYPE_CHECKING:
    pass

__all__ = [
    "PARAM_ATTR", "ZEROED_ATTR", "AllocStep", "CompiledProgram", "CopyStep", "ExecutorError",
    "HostPlan", "KernelTime", "LaunchStep", "StoreStep", "ViewStep", "argument_names",
    "bind_weights", "check_launches", "plan_host_function", "torch_dtype",
]



@dataclass(frozen=True)
class KernelTime:
    """One launch of :meth:`CompiledProgram.profile`: its kernel, launch shape and median
    milliseconds."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    ms: float




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


def _allocator(step: AllocStep) -> Callable[..., Any]:
    """``torch.zeros`` for a zeroed allocation (:data:`ZEROED_ATTR`), else ``torch.empty``."""
    import torch

    return torch.zeros if step.zeroed else torch.empty


class CompiledProgram(GraphReplay):
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
        source: the CUDA source printed from the module (default: printed here). Required
            when ``module`` is a :func:`~llmopt.codegen.plan.host_side` module, whose kernels
            have no code: the compile cache hands a program over as its host side and its
            printed kernels, so that a hit parses no kernel.

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
                 cuda_graph: bool = False, source: str | None = None) -> None:
        """Print (unless ``source`` is given), compile and load ``module``; plan its host
        function."""
        import torch

        from llmopt.codegen.cuda_printer import cuda_source
        from llmopt.codegen.nvrtc import compile_cuda
        from llmopt.codegen.runtime import CudaModule
        from llmopt.codegen.symbolic import SymbolicHost

        if source is None and is_host_side(module):
            raise ExecutorError("the module holds only the host side of a program (its "
                                "kernels have no code): pass its CUDA source")
        self.plan = plan_host_function(module, entry)
        self.symbolic = (SymbolicHost(host_function(module, entry)) if self.plan.symbols
                         else None)
        torch.cuda.init()
        index = torch.cuda.current_device() if device is None else int(device)
        self.target = current_target(index)
        check_launches(self.plan, self.target)
        self.source = cuda_source(module) if source is None else source
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
        self._symbols_by_call: dict[tuple[object, ...], dict[str, int]] = {}
        self._layout: Any = None
        self._buffers = self._symbolic_buffers() if self.symbolic is not None else {}
        self._initial: list[Any] = [None] * self.plan.num_slots
        for slot, value, _ in self.plan.constants:
            self._initial[slot] = value
        self._steps = [self._compile_step(s, r, k) for k, (s, r) in
                       enumerate(zip(self.plan.steps, self.plan.release, strict=True))]
        self._results = self.plan.results
        self._bound: dict[int, Any] = {}
        self._call_slots: tuple[int, ...] = tuple(k for k in range(len(self.plan.inputs))
                                                  if k not in self.plan.symbols)
        self._init_graphs()
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
        self._symbols_by_call = {}
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

        device = self.device
        if isinstance(step, AllocStep) and step.slot in self._buffers:
            slot, flat = step.slot, self._buffers[step.slot]
            # a zeroed buffer was zeroed once, at construction; the kernels that need the
            # zero keep it, so a call does not fill it again

            def alloc_prefix(env: list[Any]) -> None:
                shape = self._layout.shapes[slot]
                numel = 1
                for e in shape:
                    numel *= e
                env[slot] = flat[:numel].view(shape)

            return alloc_prefix
        if isinstance(step, AllocStep) and self.symbolic is not None:
            slot, dtype = step.slot, torch_dtype(step.element)
            make = _allocator(step)

            def alloc_call(env: list[Any]) -> None:
                env[slot] = make(self._layout.shapes[slot], dtype=dtype, device=device)

            return alloc_call
        if isinstance(step, AllocStep):
            slot, shape, dtype = step.slot, step.shape, torch_dtype(step.element)
            make = _allocator(step)

            def alloc(env: list[Any]) -> None:
                env[slot] = make(shape, dtype=dtype, device=device)

            return alloc
        if isinstance(step, ViewStep):
            slot, source, shape = step.slot, step.source, step.shape

            def view(env: list[Any]) -> None:
                env[slot] = env[source].view(shape)
                for r in release:
                    env[r] = None

            return view
        if isinstance(step, StoreStep):
            value, target, position = step.value, step.target, step.index

            def store(env: list[Any]) -> None:
                env[target][position].fill_(env[value])

            return store
        if isinstance(step, CopyStep):
            source, target = step.source, step.target

            def copy(env: list[Any]) -> None:
                env[target].copy_(env[source])
                for r in release:
                    env[r] = None

            return copy
        fn = self.module.function(step.kernel)
        if step.carveout is not None:
            fn.set_preferred_carveout(step.carveout)
        start = (functools.partial(fn.launch, programmatic=True) if step.programmatic
                 else fn.launch)
        grid, block, shared = step.grid, step.block, step.shared_bytes
        args = step.args
        converters = [None if isinstance(p, cuda.PtrType) else _ctype(p) for p in step.params]
        # each tensor map: the slot of the buffer it describes, and its encoder
        maps = [(args[m.arg.data], TensorMapEncoder(m)) for m in step.tensor_maps]
        if self.symbolic is not None:
            pairs = list(zip(args, converters, strict=True))

            def launch_symbolic(env: list[Any]) -> None:
                if index not in self._layout.inactive:
                    start(self._layout.grids[index], block,
                              [env[a] if c is None else c(env[a]) for a, c in pairs], shared)
                for r in release:
                    env[r] = None

            def launch_symbolic_with_maps(env: list[Any]) -> None:
                if index not in self._layout.inactive:
                    start(self._layout.grids[index], block,
                          [env[a] if c is None else c(env[a]) for a, c in pairs]
                          + [encoder(env[a]) for a, encoder in maps], shared)
                for r in release:
                    env[r] = None

            return launch_symbolic_with_maps if maps else launch_symbolic
        if maps:
            pairs = list(zip(args, converters, strict=True))

            def launch_with_maps(env: list[Any]) -> None:
                start(grid, block, [env[a] if c is None else c(env[a]) for a, c in pairs]
                      + [encoder(env[a]) for a, encoder in maps], shared)
                for r in release:
                    env[r] = None

            return launch_with_maps
        if all(c is None for c in converters):

            def launch(env: list[Any]) -> None:
                start(grid, block, [env[a] for a in args], shared)
                for r in release:
                    env[r] = None

            return launch
        pairs = list(zip(args, converters, strict=True))

        def launch_with_scalars(env: list[Any]) -> None:
            start(grid, block, [env[a] if c is None else c(env[a]) for a, c in pairs], shared)
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
        call's results are not overwritten by the next call. A zeroed allocation
        (:attr:`AllocStep.zeroed`) is zeroed here, once: its kernels put it back to zero
        themselves, so the calls' views of it need no fill."""

        assert self.symbolic is not None
        returned = set(self.plan.view_roots(self.plan.results))
        allocs = [s for s in self.plan.steps if isinstance(s, AllocStep)]
        buffers: dict[int, Any] = {}
        for step, shape in zip(allocs, self.symbolic.max_shapes(), strict=True):
            if step.slot in returned:
                continue
            numel = 1
            for e in shape:
                numel *= e
            make = _allocator(step)
            buffers[step.slot] = make(numel, dtype=torch_dtype(step.element),
                                      device=self.device)
        return buffers

    def symbols_of(self, args: Sequence[Any]) -> dict[str, int]:
        """The symbols' values for a call's ``args`` (read from their shapes); raises
        :class:`ExecutorError` naming the argument and the bound.

        Remembered per :func:`~llmopt.codegen.symbolic.binding_key` of the call's own
        arguments (the weights bound by name do not change between calls), so that a length
        seen before costs a dictionary lookup: at one token the host's time per call is
        part of the layer's."""
        from llmopt.codegen.symbolic import BINDINGS_REMEMBERED, binding_key

        assert self.symbolic is not None
        if len(args) != len(self._call_slots):
            raise ExecutorError(f"@{self.plan.name} takes {len(self._call_slots)} arguments, "
                                f"got {len(args)}")
        key = binding_key(args)
        known = self._symbols_by_call.get(key) if key is not None else None
        if known is not None:
            return dict(known)
        given = dict(zip(self._call_slots, args, strict=True))
        symbols = self.symbolic.bind([given.get(k) for k in range(len(self.plan.inputs))
                                      if k not in self.plan.symbols])
        if key is not None and len(self._symbols_by_call) < BINDINGS_REMEMBERED:
            self._symbols_by_call[key] = dict(symbols)
        return symbols

    def _layout_of(self, env: list[Any]) -> Any:
        assert self.symbolic is not None
        symbols = self.symbolic.bind([env[k] if k in self._call_slots else None
                                      for k in range(len(self.plan.inputs))
                                      if k not in self.plan.symbols])
        return self._layout_for(symbols)

    def _layout_for(self, symbols: dict[str, int]) -> Any:
        """The call layout at ``symbols`` (computed once per length)."""
        from llmopt.codegen.symbolic import layout_call

        assert self.symbolic is not None
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

    def _run(self, env: list[Any], stores: bool = True) -> tuple[Any, ...]:
        """Run the steps on ``env`` (without the host stores: a CUDA graph's replay writes
        them itself, see :mod:`llmopt.codegen.graph`)."""
        for step, kind in zip(self._steps, self.plan.steps, strict=True):
            if stores or not isinstance(kind, StoreStep):
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

    def __repr__(self) -> str:
        graph = " cuda_graph" if self.cuda_graph else ""
        return (f"<CompiledProgram @{self.plan.name} kernels={len(self.kernel_names)} "
                f"arch={self.arch} device={self.device}{graph}>")
