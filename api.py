"""llmopt's Python API: capture a PyTorch function, lower it, print or run its CUDA.

>>> module = llmopt.capture(rms_norm, (x,))          # Torch IR
>>> llmopt.lower(module, "lower-to-cuda")           # in place, through all six levels
>>> print(llmopt.cuda_source(module))                # the generated translation unit
>>> fn = llmopt.compile(rms_norm, (x_cuda,))         # a callable running the kernels
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from llmopt import registry

_XDSL_DIALECTS = ("builtin", "func", "arith", "math", "scf", "memref", "affine")


def make_context() -> Context:
    """A context that knows llmopt's dialects, the xDSL dialects its IR uses, and those of
    installed plugins (loaded on the first call, see :mod:`llmopt.plugins`)."""
    from xdsl.universe import Universe

    from llmopt.plugins import load_entry_points

    load_entry_points()
    ctx = Context()
    xdsl_dialects = Universe.get_multiverse().all_dialects
    for name in _XDSL_DIALECTS:
        ctx.register_dialect(name, xdsl_dialects[name])
    for name, factory in registry.DIALECTS.items():
        ctx.register_dialect(name, factory)
    return ctx


def parse(text: str, ctx: Context | None = None) -> ModuleOp:
    """Parse IR text (any level) into a verified module."""
    from xdsl.parser import Parser

    from llmopt.dialects._symbols import verify_module

    module = Parser(ctx or make_context(), text).parse_module()
    module.verify()
    verify_module(module)
    return module


def lower(
    module: ModuleOp,
    pipeline: str = "lower-to-cuda",
    *,
    callback: Callable[[ModulePass, ModuleOp], None] | None = None,
) -> ModuleOp:
    """Run a pass pipeline (named pipelines such as ``lower-to-cuda`` expand) on ``module``.

    The module is changed in place, verified before the first pass and after every pass
    (a large one in a forked process while the next pass runs, see
    :mod:`llmopt.verification`; with few garbage collections meanwhile, see
    :mod:`llmopt.gc_tuning`), and returned. ``callback`` is called after each pass with
    the pass and the module; the module is verified once more at the end when there is one
    (it may have changed the module).
    """
    ctx = make_context()

    from llmopt.dialects._symbols import verify_module
    from llmopt.gc_tuning import fewer_collections
    from llmopt.verification import verifying

    def check(mod: ModuleOp) -> None:
        mod.verify()
        verify_module(mod)

    with fewer_collections(), verifying(check) as verifier:

        def between(prev: ModulePass | None, mod: ModuleOp, _next: ModulePass | None) -> None:
            verifier.after("the input" if prev is None else prev.name, mod)
            if prev is not None and callback is not None:
                callback(prev, mod)

        registry.build_pipeline(pipeline, callback=between).apply(ctx, module)
    if callback is not None:
        module.verify()
    return module


def _has_cuda(module: ModuleOp) -> bool:
    return any(op.name.startswith("cuda.") for op in module.walk())


def cuda_source(module: ModuleOp, pipeline: str = "lower-to-cuda") -> str:
    """The CUDA translation unit of ``module``; a module not yet at CUDA IR is lowered first
    (on a copy, so ``module`` is unchanged)."""
    from io import StringIO

    from llmopt.codegen.cuda_printer import print_cuda

    if not _has_cuda(module):
        module = lower(module.clone(), pipeline)
    out = StringIO()
    print_cuda(module, out)
    return out.getvalue()


def capture(fn_or_module: Any, example_args: Sequence[Any], *,
            dynamic: dict[str, dict[int, str]] | None = None,
            max: dict[str, int] | None = None,  # noqa: A002 - the bound's plain name
            min: dict[str, int] | None = None) -> ModuleOp:  # noqa: A002
    """Capture a PyTorch function or ``nn.Module`` with ``torch.export`` into Torch IR.

    Parameters and buffers become leading function arguments named after their
    ``state_dict`` keys; the example arguments fix shapes and dtypes. ``dynamic`` makes dims
    symbolic (``{"x": {1: "seq"}}``), each symbol bounded by ``max`` (``{"seq": 2048}``)
    and optionally ``min``: one program for every length in between (see
    :func:`llmopt.frontend.capture.capture`).
    """
    from llmopt.frontend.capture import capture as _capture

    return _capture(fn_or_module, tuple(example_args), dynamic=dynamic, max=max,
                    min=min).module


class Compiled:
    """A captured and compiled function: call it with CUDA tensors shaped like the examples.

    The weights are bound by ``state_dict`` name inside :attr:`program` (a
    :class:`~llmopt.codegen.executor.CompiledProgram`); a call passes only the inputs.
    """

    def __init__(self, program: Any, single: bool) -> None:
        self.program = program
        self._single = single

    def __call__(self, *args: Any) -> Any:
        outputs = self.program(*args)
        return outputs[0] if self._single else tuple(outputs)


def prepare(fn_or_module: Any, example_args: Sequence[Any], pipeline: str = "lower-to-cuda", *,
            dynamic: dict[str, dict[int, str]] | None = None,
            max: dict[str, int] | None = None,  # noqa: A002 - the bound's plain name
            min: dict[str, int] | None = None,  # noqa: A002
            arch: str | None = None) -> Any:
    """Capture (``dynamic``/``max``/``min`` as :func:`capture` takes them) and lower by
    ``pipeline`` (for ``arch`` when given): the
    :class:`~llmopt.frontend.capture.CapturedProgram` whose module :func:`compile` loads.
    Needs no GPU: a pipeline that stops at Kernel IR gives a module the interpreters run."""
    from llmopt.frontend.capture import capture as _capture

    captured = _capture(fn_or_module, tuple(example_args), dynamic=dynamic, max=max, min=min)
    lower(captured.module, registry.with_arch(pipeline, arch) if arch else pipeline)
    return captured


def program_arch(pipeline: str, device_arch: str) -> str:
    """What a program lowered by ``pipeline`` is compiled for on a GPU of ``device_arch``:
    the architecture the pipeline names when it is of the GPU's family (``sm_90a`` on an
    sm_90 GPU), else the GPU's.

    Raises:
        ValueError: the pipeline names an architecture of another family.
    """
    from llmopt.registry import pipeline_arch
    from llmopt.target import arch_number, base_arch

    named = pipeline_arch(pipeline)
    if named is None:
        return device_arch
    if arch_number(named) != arch_number(device_arch):
        base = base_arch(device_arch)
        raise ValueError(f"the pipeline is for {named}, which does not run on this GPU "
                         f"({device_arch}); name {base} or a variant such as {base}a")
    return named


def compile(  # noqa: A001 - the public name mirrors torch.compile
    fn_or_module: Any, example_args: Sequence[Any], pipeline: str = "lower-to-cuda", *,
    cuda_graph: bool = False, dynamic: dict[str, dict[int, str]] | None = None,
    max: dict[str, int] | None = None,  # noqa: A002 - the bound's plain name
    min: dict[str, int] | None = None,  # noqa: A002
) -> Compiled:
    """Capture, lower to CUDA, compile with NVRTC and load: returns a callable that runs the
    generated kernels on CUDA tensors and returns torch tensors.

    The program is lowered and compiled for the GPU it will run on (the device of the example
    tensors, else torch's current one): ``pipeline`` gets that GPU's architecture
    (:func:`llmopt.registry.with_arch`, e.g. ``lower-to-cuda{arch=sm_80}``), so its schedules
    fit that GPU's shared memory and multiprocessors (:func:`llmopt.target.current_target`).
    A pipeline that names a variant of it (``lower-to-cuda{arch=sm_90a}`` on an sm_90 GPU:
    its warpgroup instructions) is compiled for that variant; one of another family is an
    error.

    ``dynamic``, ``max`` and ``min`` make dims symbolic as :func:`capture` does
    (``dynamic={"x": {1: "seq"}}, max={"seq": 2048}``): one program, compiled once, callable
    at every length up to the maximum (a longer input, or a shape that does not match, is an
    error naming the argument and the bound).

    With ``cuda_graph=True`` the first call captures the whole forward into a CUDA graph and
    later calls replay it (a symbolic program: one graph per length, captured on its first
    call); results are then static tensors overwritten by the next call of that length.
    """
    import torch

    from llmopt.codegen.executor import CompiledProgram
    from llmopt.target import current_target

    device = next((a.device for a in example_args if isinstance(a, torch.Tensor)),
                  torch.device("cuda"))
    index = device.index if device.type == "cuda" else None
    target = current_target(index)
    # Capture where the module's weights live; only shapes and dtypes matter to capture.
    where = next((p.device for p in getattr(fn_or_module, "parameters", list)()), device)
    capture_args = tuple(a.to(where) if isinstance(a, torch.Tensor) else a
                         for a in example_args)
    arch = program_arch(pipeline, target.arch)
    captured = prepare(fn_or_module, capture_args, pipeline, dynamic=dynamic, max=max, min=min,
                       arch=arch)
    params = {name: t.detach().to(device) for name, t in captured.params.items()}
    program = CompiledProgram(captured.module, params=params, cuda_graph=cuda_graph,
                              device=index, arch=arch)
    return Compiled(program, captured.output_count == 1)
