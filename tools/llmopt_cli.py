"""The ``llmopt`` command: compile PyTorch programs and whole models through llmopt's six levels.

``llmopt demo`` (the default) captures a small PyTorch function (RMSNorm by default), lowers
it through every level and prints the IR after each lowering and the generated CUDA. With a
GPU it also runs the kernels and compares them with PyTorch.

``llmopt compile MODEL --emit LEVEL -o PATH`` captures a whole model (on the ``meta`` device:
no weight is materialised) and writes its IR at one level — ``torch``, ``prim``, ``loop``,
``tile``, ``kernel`` or ``cuda`` — as text that ``llm-opt`` reads, headed by the
``llm-opt`` command that takes it the rest of the way; ``--emit cuda-source`` writes the
CUDA translation unit (what ``llm-opt -t cuda`` prints), ``--emit cubin`` the NVRTC-compiled
image. With ``--dynamic --max-seq N`` the sequence length is symbolic (one program for every
length up to N; ``--seq`` is then the example length export traces with); such programs are
written down to Kernel IR only, as CUDA IR takes static shapes so far.

``llmopt run MODEL`` builds the model (seeded random weights unless MODEL is a checkpoint
directory), compiles it, runs it and compares the logits with the PyTorch model on the same
random ``input_ids``. With a GPU it runs the real configuration through
:class:`~llmopt.codegen.executor.CompiledProgram` (plain launches and a CUDA graph); without
one it says so, shrinks the configuration (unless it is small already) and runs the Kernel IR
through the CPU interpreter. ``llmopt run MODEL --dynamic [--max-seq N] --seq N [N ...]``
compiles one program with a symbolic sequence length once and runs it at every given length,
reporting each length's error against PyTorch and float64 and its argmax agreement.

MODEL is a preset (``tinyllama``, ``qwen2.5-7b``: the real dimensions), a local Hugging Face
directory (``config.json`` plus safetensors) or a ``config.json``. Nothing is ever fetched
from a hub: the command sets ``HF_HUB_OFFLINE=1``.

``llmopt tune MODEL`` times schedule candidates on the GPU (:mod:`llmopt.tools.tune`);
``llmopt cache`` prints where the compile cache and the tuning cache are and what they hold.
A subcommand that needs an optional dependency that is not installed (transformers for the
models, torch, the CUDA libraries) says in one line what to install and exits with status 1
(:mod:`llmopt.deps`); ``llmopt demo`` without the CUDA libraries skips only the NVRTC step.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

from llmopt.registry import LEVELS
from llmopt.target import DEFAULT_ARCH, arch_number, base_arch, default_arch

if TYPE_CHECKING:
    from llmopt.codegen.executor import KernelTime
    from llmopt.codegen.program_cache import LoweredProgram
    from llmopt.verification import PassVerifier

#: the level a module is at after each lowering pass
LEVEL_AFTER = {
    "torch-to-prim": "Tensor IR (prim)",
    "fuse-kernels": "Loop IR (loop), fused",
    "loop-to-tile": "Tile IR (tile)",
    "tile-to-kernel": "Kernel IR (kernel)",
    "kernel-to-cuda": "CUDA IR (cuda)",
}


def _demo_programs() -> dict[str, tuple[Callable[..., Any], Callable[[tuple[int, ...]], tuple]]]:
    import torch

    class RMSNorm(torch.nn.Module):
        """The RMSNorm of Llama-family models, as Hugging Face writes it."""

        def __init__(self, hidden: int, eps: float = 1e-5) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(hidden))
            self.eps = eps

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            var = x.pow(2).mean(-1, keepdim=True)
            return self.weight * (x * torch.rsqrt(var + self.eps))

    def softmax(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)

    def silu_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(a) * b

    def one(shape: tuple[int, ...]) -> tuple:
        return (torch.randn(shape),)

    def two(shape: tuple[int, ...]) -> tuple:
        return (torch.randn(shape), torch.randn(shape))

    return {
        "rmsnorm": (lambda shape: RMSNorm(shape[-1]), one),
        "softmax": (lambda shape: softmax, one),
        "silu-mul": (lambda shape: silu_mul, two),
    }


#: The most elements a ``llmopt demo --shape`` may have (the Kernel IR is interpreted).
DEMO_ELEMENTS = 1 << 24


def demo(args: argparse.Namespace) -> int:
    import math

    import torch

    import llmopt

    shape = tuple(args.shape)
    if math.prod(shape) > DEMO_ELEMENTS:
        raise CliError(f"--shape {' '.join(map(str, shape))} has {math.prod(shape)} elements; "
                       f"the demo takes at most {DEMO_ELEMENTS}")
    check_pipeline(args.pipeline)
    torch.manual_seed(0)
    programs = _demo_programs()
    make_fn, make_inputs = programs[args.program]
    fn = make_fn(shape)
    inputs = make_inputs(shape)
    module = llmopt.capture(fn, inputs)
    print(f"// ===== Torch IR (torch): {args.program} {list(shape)} =====")
    print(module)

    snapshots: dict[str, Any] = {}

    def show(pass_: Any, mod: Any) -> None:
        if pass_.name == "tile-to-kernel":
            snapshots["kernel"] = mod.clone()
        level = LEVEL_AFTER.get(pass_.name)
        if level is not None and (args.all or pass_.name != "kernel-to-cuda"):
            print(f"\n// ===== {level}, after {pass_.name} =====")
            print(mod)

    llmopt.lower(module, args.pipeline, callback=show)
    print("\n// ===== CUDA (printed from CUDA IR) =====")
    source = llmopt.cuda_source(module)
    print(source)
    from llmopt.codegen.nvrtc import compile_cuda
    from llmopt.deps import MissingDependency

    arch = default_arch()
    kernels = source.count("__global__")
    try:
        cubin = compile_cuda(source, arch=arch)
    except MissingDependency as err:  # the IR and the interpreted run need no CUDA library
        print(f"// NVRTC: not compiled, {err}")
    else:
        print(f"// NVRTC: {kernels} kernel(s) compiled to {len(cubin)} bytes of CUBIN for {arch}")
    reference = fn.double() if isinstance(fn, torch.nn.Module) else fn
    params = list(fn.parameters()) if isinstance(fn, torch.nn.Module) else []
    if torch.cuda.is_available():
        compiled = llmopt.compile(fn, [t.cuda() for t in inputs])
        got = compiled(*[t.cuda() for t in inputs]).double().cpu()
        where = "GPU run"
    else:
        outputs = llmopt.interp.run(
            snapshots["kernel"], [t.detach().numpy() for t in [*params, *inputs]]
        )
        got = torch.from_numpy(outputs[0]).double()
        where = "no GPU here; Kernel IR interpreted on the CPU"
    want = reference(*[t.double() for t in inputs]).detach()
    err = ((got - want).abs().max() / want.abs().max()).item()
    print(f"// {where}: max |error| / max |PyTorch float64| = {err:.3e}")
    return 0



# --- whole models: shared helpers -------------------------------------------------------------

#: the IR levels, in lowering order
#: what ``llmopt compile --emit`` writes
EMITS = (*LEVELS, "cuda-source", "cubin")
#: ``--dtype`` names
DTYPES = ("float32", "float64", "float16", "bfloat16")


class CliError(Exception):
    """A problem with what the user asked for: reported as ``llmopt: error: ...``, exit 1."""


def split_pipeline(pipeline: str, level: str) -> tuple[list[str], list[str]]:
    """:func:`llmopt.registry.split_at_level`, its errors as :class:`CliError`."""
    from llmopt import registry

    try:
        return registry.split_at_level(pipeline, level)
    except registry.PipelineError as err:
        raise CliError(str(err)) from None


class _Progress:
    """A tqdm bar over the passes of a pipeline (when tqdm is installed and stderr is a
    terminal), plus the time each pass took."""

    def __init__(self, total: int, desc: str) -> None:
        self.times: list[tuple[str, float]] = []
        self.verify_seconds = 0.0
        self._bar: Any = None
        try:
            from tqdm import tqdm
        except ImportError:
            return
        self._bar = tqdm(total=total, desc=desc, unit="pass", file=sys.stderr, disable=None,
                         leave=False)

    def running(self, name: str) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(name, refresh=True)

    def done(self, name: str, seconds: float) -> None:
        self.times.append((name, seconds))
        if self._bar is not None:
            self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def lower_with_progress(module: Any, elements: Sequence[str], desc: str = "lowering",
                        verifier: PassVerifier | None = None) -> _Progress:
    """Run the pipeline ``elements`` on ``module`` in place, verifying after every pass and
    showing a progress bar; returns the per-pass times. A whole model is verified in
    forked processes while the next passes run (:mod:`llmopt.verification`): the verifying
    time reported is what it added to the lowering (forking, and waiting for verifications
    still running). With ``verifier`` given, the verifications of the last passes may still
    be running on return: the caller waits for them (``verifier.finish()``) before the
    module is used for anything that lasts."""
    from llmopt import registry
    from llmopt.api import make_context
    from llmopt.verification import PassVerifier, preferring_failures

    progress = _Progress(len(elements), desc)
    if not elements:
        progress.close()
        return progress
    clock = {"start": time.perf_counter()}
    owned = verifier is None
    checks = PassVerifier() if verifier is None else verifier

    def between(prev: Any, mod: Any, nxt: Any) -> None:
        now = time.perf_counter()
        if prev is not None:
            progress.done(prev.name, now - clock["start"])
            checks.after(prev.name, mod)
            if nxt is None and owned:
                checks.finish()
            progress.verify_seconds += time.perf_counter() - now
        if nxt is not None:
            progress.running(nxt.name)
        clock["start"] = time.perf_counter()

    try:
        with preferring_failures(checks):
            pipeline = registry.build_pipeline(",".join(elements), callback=between)
            pipeline.apply(make_context(), module)
    except registry.PipelineError as err:
        raise CliError(str(err)) from None
    finally:
        progress.close()
        if owned:
            checks.close()
    return progress


def interpreter_arrays(values: Sequence[Any]) -> list[Any]:
    """:func:`llmopt.interp.host.interpreter_arrays`."""
    from llmopt.interp.host import interpreter_arrays as arrays

    return arrays(values)


def _dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def _describe(config: Any) -> str:
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return (f"{config.model_type}: {config.num_hidden_layers} layers, hidden "
            f"{config.hidden_size}, intermediate {config.intermediate_size}, heads "
            f"{heads} ({kv} kv, head dim {head_dim}), vocab {config.vocab_size}")


def _checkpoint(model: str) -> Path | None:
    """The directory of ``model`` when it is a local checkpoint (weights next to a config)."""
    path = Path(model)
    if path.is_file():
        path = path.parent
    if path.is_dir() and (any(path.glob("*.safetensors")) or
                          any(path.glob("pytorch_model*.bin"))):
        return path
    return None


def _capture(model_name: str, config: Any, seq: int, dtype: Any, layers: int | None,
             layer_alone: bool = False, max_seq: int | None = None) -> Any:
    """Build ``model_name`` (or ``config``) on the meta device and capture it (no weight in
    memory); ``layer_alone``: only decoder layer 0, hidden states in and out (as
    ``bench/suite.py blocks`` times it); ``max_seq``: a symbolic length up to it, ``seq``
    being the example."""
    from llmopt.frontend.models import build_model, capture_layer, capture_model

    source = config if config is not None else model_name
    meta = build_model(source, device="meta", dtype=dtype, layers=layers)
    what = f"decoder layer 0 of {model_name}" if layer_alone else model_name
    length = f"seq {seq}" if max_seq is None else f"symbolic seq <= {max_seq}"
    print(f"// capturing {what} ({_describe(meta.config)}), {length}, "
          f"{str(dtype).removeprefix('torch.')} ...", file=sys.stderr, flush=True)
    dynamic = {"dynamic": True, "max_seq": max_seq} if max_seq is not None else {}
    capture = capture_layer if layer_alone else capture_model
    return capture(meta, seq, **dynamic)


def model_identity(model: str, layers: int | None) -> str:
    """What determines the program of ``model`` (short of the sequence length and dtype),
    read without building anything: a preset's dimensions, or the text of the config.json
    (of a directory: its config.json; weights do not change the program)."""
    import json

    from llmopt.frontend.models import PRESETS

    if model.lower() in PRESETS:
        text = "preset:" + json.dumps(PRESETS[model.lower()], sort_keys=True)
    else:
        path = Path(model)
        if path.is_dir():
            path = path / "config.json"
        try:
            text = "config:" + path.read_bytes().decode("utf-8", errors="replace")
        except OSError as err:
            raise CliError(f"'{model}' is neither a preset ({', '.join(PRESETS)}), a "
                           f"config.json nor a local model directory ({err.strerror})") from None
    return f"{text}\nlayers={layers}"


def lowered_program(model_name: str, identity: str, config: Callable[[], Any], seq: int,
                    dtype_name: str, elements: Sequence[str], desc: str,
                    max_seq: int | None = None,
                    on_source: Callable[[str], None] | None = None
                    ) -> tuple[LoweredProgram, list[str]]:
    """``model_name`` captured on the meta device (from ``config()``, its transformers config)
    and lowered by ``elements``, through the compile cache keyed on ``identity``: a hit skips
    building, capture and lowering, and reads only the parts of the entry asked for
    (:class:`~llmopt.codegen.program_cache.LoweredProgram`; ``LLMOPT_NO_CACHE=1`` bypasses
    the cache). With ``max_seq`` the length is symbolic (``seq`` the example). A program
    that is built hands its CUDA source to ``on_source`` as soon as it is printed. Returns
    the program and, once it was built, a line saying what capture and lowering took."""
    from llmopt.codegen.program_cache import cached_program, program_cache_key
    from llmopt.gc_tuning import fewer_collections
    from llmopt.verification import PassVerifier, preferring_failures

    began = time.perf_counter()
    if max_seq is not None:
        identity += f"\nsymbolic seq <= {max_seq}"
    key = program_cache_key(identity, seq, dtype_name, elements)
    how: list[str] = []

    # The last passes' verifications overlap with printing the parts of the cache entry;
    # the entry is stored once they have passed. Capture and lowering allocate millions of
    # long-lived objects: the garbage collector runs rarely meanwhile.
    verifier = PassVerifier()

    def build() -> Any:
        program = _capture(model_name, config(), seq, _dtype(dtype_name), None, max_seq=max_seq)
        captured = time.perf_counter() - began
        progress = lower_with_progress(program.module, elements, desc, verifier)
        how.append(f"capture {captured:.1f} s, {_timing_line(progress)}")
        return program.module

    try:
        with fewer_collections(), preferring_failures(verifier):
            return cached_program(key, build, before_store=verifier.finish,
                                  on_source=on_source), how
    finally:
        verifier.close()


def _cache_line(program: LoweredProgram, how: Sequence[str], read: str) -> str:
    """What producing ``program`` took: capture and lowering (``how``), or the cache hit and
    what it ``read``."""
    if how:
        return how[-1]
    return (f"compile cache hit: {read} in {program.read_seconds:.1f} s, capture and "
            "lowering skipped")


def lowered_model(model_name: str, identity: str, config: Callable[[], Any], seq: int,
                  dtype_name: str, elements: Sequence[str], desc: str,
                  max_seq: int | None = None) -> tuple[Any, str]:
    """The whole module of :func:`lowered_program` (on a hit, its IR parsed) and a line
    saying what it took."""
    program, how = lowered_program(model_name, identity, config, seq, dtype_name, elements,
                                   desc, max_seq)
    module = program.module
    return module, _cache_line(program, how, "IR parsed")


def _timing_line(progress: _Progress) -> str:
    total = sum(t for _, t in progress.times)
    by_pass: dict[str, float] = {}
    for name, seconds in progress.times:
        by_pass[name] = by_pass.get(name, 0.0) + seconds
    top = sorted(by_pass.items(), key=lambda kv: -kv[1])[:4]
    shown = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in top)
    return (f"{len(progress.times)} passes in {total:.1f} s (+{progress.verify_seconds:.1f} s "
            f"verifying; slowest: {shown})")


def _write_ir(module: Any, out: IO[str], header: Sequence[str]) -> None:
    from xdsl.printer import Printer

    for line in header:
        out.write(f"// {line}\n")
    Printer(stream=out).print_op(module)
    out.write("\n")


# --- llmopt compile ---------------------------------------------------------------------------


class _BackgroundCompile:
    """NVRTC on a thread: a program built for ``llmopt compile --emit cubin`` starts
    compiling as soon as its CUDA source is printed, while the compile cache's entry (the
    IR and the host side) is printed and the last verifications finish; NVRTC does not hold
    the GIL while it compiles."""

    def __init__(self, arch: str) -> None:
        self.arch = arch
        self.seconds = 0.0
        self._thread: threading.Thread | None = None
        self._source: str | None = None
        self._cubin: bytes | None = None
        self._error: BaseException | None = None

    def start(self, source: str) -> None:
        """Begin compiling ``source``."""
        self._source = source
        self._thread = threading.Thread(target=self._run, name="nvrtc", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from llmopt.codegen.nvrtc import compile_cuda

        began = time.perf_counter()
        try:
            assert self._source is not None
            self._cubin = compile_cuda(self._source, arch=self.arch)
        except BaseException as err:  # handed to the caller of result()
            self._error = err
        self.seconds = time.perf_counter() - began

    def result(self, source: str) -> bytes:
        """The CUBIN of ``source``: the compilation started on it, waited for, else one
        run now (a compile-cache hit prints nothing)."""
        if self._thread is None or self._source != source:
            self.start(source)
        assert self._thread is not None
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._cubin is not None
        return self._cubin



def compile_model(args: argparse.Namespace) -> int:
    """``llmopt compile``: write one level of a whole model's IR (or its CUDA or CUBIN)."""
    from llmopt.frontend.models import model_config

    level = "cuda" if args.emit in ("cuda-source", "cubin") else args.emit
    check_pipeline(_with_arch(args.pipeline, args.arch))
    _check_output(Path(args.output))
    if args.max_seq is not None and not args.dynamic:
        raise CliError("--max-seq bounds a symbolic length: add --dynamic")
    max_seq = _max_seq(args) if args.dynamic else None
    first, rest = split_pipeline(_with_arch(args.pipeline, args.arch), level)
    start = time.perf_counter()
    identity = model_identity(args.model, args.layers)
    nvrtc = _BackgroundCompile(args.arch) if args.emit == "cubin" else None
    program, how = lowered_program(args.model, identity,
                                   lambda: model_config(args.model, layers=args.layers),
                                   args.seq, args.dtype, first, f"lowering to {level} IR",
                                   max_seq=max_seq,
                                   on_source=None if nvrtc is None else nvrtc.start)
    output = Path(args.output)
    if args.emit in ("cuda-source", "cubin"):
        source = program.source  # on a hit, the cached CUDA source: no IR is parsed
        print(f"// {_cache_line(program, how, 'CUDA source read')}", file=sys.stderr)
        kernels = source.count("__global__")
        if args.emit == "cuda-source":
            _write_text(output, source)
            what = f"CUDA source ({kernels} kernels)"
        else:
            assert nvrtc is not None
            cubin = nvrtc.result(source)
            if str(output) == "-":
                sys.stdout.buffer.write(cubin)
            else:
                output.write_bytes(cubin)
            what = (f"CUBIN for {args.arch} ({kernels} kernels, {len(cubin)} bytes, NVRTC "
                    f"{nvrtc.seconds:.1f} s)")
    else:
        module = program.module
        print(f"// {_cache_line(program, how, 'IR parsed')}", file=sys.stderr)
        header = [
            f"llmopt compile {args.model} --seq {args.seq}"
            + (f" --dynamic --max-seq {max_seq}" if max_seq is not None else "")
            + (f" --layers {args.layers}" if args.layers else "")
            + f" --dtype {args.dtype} --emit {args.emit}: {level} IR",
        ]
        if max_seq is not None:
            header.append(f"the sequence length is the symbol seq, 1 <= seq <= {max_seq}")
            rest = []
        if rest:
            header.append(f"next: llm-opt {output.name} -p '{','.join(rest)}'")
        if str(output) == "-":
            _write_ir(module, sys.stdout, header)
        else:
            with output.open("w") as out:
                _write_ir(module, out, header)
        what = f"{level} IR"
    print(f"// wrote {what} to {output} in {time.perf_counter() - start:.1f} s",
          file=sys.stderr)
    if rest and args.emit in LEVELS:
        print(f"// next: llm-opt {output} -p '{','.join(rest)}'", file=sys.stderr)
    return 0


def check_pipeline(pipeline: str) -> None:
    """Build ``pipeline`` once, before any work, so that an unknown pass or a bad option is
    reported at once (:class:`CliError`), not after the model is captured."""
    from llmopt import registry

    try:
        registry.build_pipeline(pipeline)
    except registry.PipelineError as err:
        raise CliError(f"--pipeline: {err}") from None


def _check_output(path: Path) -> None:
    """``-o PATH`` can be written: its directory exists and it is not a directory."""
    if str(path) == "-":
        return
    if path.is_dir():
        raise CliError(f"-o {path}: is a directory")
    if not path.parent.is_dir():
        raise CliError(f"-o {path}: the directory {path.parent} does not exist")


def _max_seq(args: argparse.Namespace) -> int:
    """``--max-seq``, else the model's ``max_position_embeddings``."""
    if args.max_seq is not None:
        if args.max_seq < 2:
            raise CliError(f"--max-seq must be at least 2, got {args.max_seq}")
        return int(args.max_seq)
    from llmopt.frontend.models import model_config

    found = getattr(model_config(args.model, layers=args.layers), "max_position_embeddings",
                    None)
    if found is None:
        raise CliError("--dynamic needs --max-seq (the model's config has no "
                       "max_position_embeddings)")
    return int(found)


def _with_arch(pipeline: str, arch: str) -> str:
    """``pipeline`` lowering for ``arch`` (:func:`llmopt.registry.with_arch`: every pipeline
    or pass with an ``arch`` option that does not set it gets ``arch``)."""
    from llmopt.registry import PipelineError, with_arch

    try:
        return with_arch(pipeline, arch)
    except PipelineError as err:
        raise CliError(f"bad --pipeline '{pipeline}': {err}") from None


def _write_text(path: Path, text: str) -> None:
    if str(path) == "-":
        sys.stdout.write(text)
    else:
        path.write_text(text)


# --- llmopt run -------------------------------------------------------------------------------

#: the configuration ``llmopt run`` shrinks a large model to when it has no GPU
SHRUNK = {"hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 97}
SHRUNK_LAYERS = 2
CPU_SEQ = 7


def _too_big_for_the_interpreter(config: Any) -> bool:
    return (config.hidden_size > 256 or config.intermediate_size > 1024
            or config.vocab_size > 4096 or config.num_hidden_layers > 4)


def _shrunk(config: Any, layers: int | None) -> Any:
    import copy

    small = copy.deepcopy(config)
    for key, value in SHRUNK.items():
        setattr(small, key, value)
    if getattr(config, "num_key_value_heads", None) == config.num_attention_heads:
        small.num_key_value_heads = SHRUNK["num_attention_heads"]  # keep multi-head (no GQA)
    small.num_hidden_layers = min(layers or SHRUNK_LAYERS, SHRUNK_LAYERS)
    if getattr(small, "layer_types", None):
        small.layer_types = list(config.layer_types)[: small.num_hidden_layers]
    return small


def _compare(got: Any, want: Any) -> list[str]:
    """Lines reporting how ``got`` logits differ from the reference ``want``. A position
    whose logits are not all finite (in either) never counts as agreeing, so NaN outputs
    cannot look like a perfect match; errors are measured over the finite positions."""
    import torch

    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    finite = torch.isfinite(got).all(-1) & torch.isfinite(want).all(-1)
    agree = ((got.argmax(-1) == want.argmax(-1)) & finite).reshape(-1).tolist()
    marks = "".join("|" if a else "x" for a in agree)
    bad = int((~finite).sum())
    lines = []
    if bool(finite.any()):
        diff = (got - want)[finite].abs()
        scale = want[finite].abs().max().item() or 1.0
        lines += [f"max |error| / max |ref| = {diff.max().item() / scale:.3e}   "
                  f"(max |error| {diff.max().item():.3e}, max |ref| {scale:.3e})",
                  f"mean |error| = {diff.mean().item():.3e}"]
    if bad:
        lines.append(f"NON-FINITE logits at {bad} of {finite.numel()} positions (llmopt "
                     f"{int((~torch.isfinite(got).all(-1)).sum())}, PyTorch "
                     f"{int((~torch.isfinite(want).all(-1)).sum())}): not compared")
    lines.append(f"argmax agreement: {sum(agree)}/{len(agree)} positions  [{marks}]")
    return lines


class WrongResultError(RuntimeError):
    """The compiled model computed something PyTorch does not: a compiler bug (exit 2, with
    a reproducer), not bad input."""


def _check_finite_logits(got: Any, want: Any) -> None:
    """A compiled model whose logits are non-finite where PyTorch's are finite computed
    something wrong: an internal error, not a line among the measurements."""
    import torch

    got, want = got.detach().cpu(), want.detach().cpu()
    wrong = int((~torch.isfinite(got).all(-1) & torch.isfinite(want).all(-1)).sum())
    if wrong:
        raise WrongResultError(f"the compiled model's logits are non-finite at {wrong} of "
                               f"{want.shape[:-1].numel()} positions where PyTorch's are "
                               "finite")


def _relative_error(got: Any, want: Any) -> float:
    """max |got - want| / max |want|, in float64."""
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    return float((got - want).abs().max() / want.abs().max())


def _median_seconds(fn: Callable[[], Any], repeat: int, sync: Callable[[], None]) -> float:
    fn()
    sync()
    samples = []
    for _ in range(max(1, repeat)):
        began = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - began)
    return statistics.median(samples)


def run_model(args: argparse.Namespace) -> int:
    """``llmopt run``: compile a whole model, run it and compare it with PyTorch."""
    import torch

    gpu = torch.cuda.is_available() and not args.cpu
    args.arch = _run_arch(args.arch, gpu)
    check_pipeline(_with_arch(args.pipeline, args.arch))
    from llmopt.frontend.models import model_config

    config = model_config(args.model, layers=args.layers)  # a bad config fails before weights
    seqs: list[int] = list(args.seq or [])
    if len(seqs) > 1 and not args.dynamic:
        raise CliError(f"{len(seqs)} --seq lengths need --dynamic (one program for every "
                       "length); without it one program runs one length")
    if args.max_seq is not None and not args.dynamic:
        raise CliError("--max-seq bounds a symbolic length: add --dynamic")
    for seq in seqs:
        if seq > config.max_position_embeddings:
            raise CliError(f"--seq {seq} is longer than the model's max_position_embeddings "
                           f"({config.max_position_embeddings})")
    if args.dynamic:
        max_seq = _max_seq(args)
        for seq in seqs:
            if seq > max_seq:
                raise CliError(f"--seq {seq} is above --max-seq {max_seq}, the bound of the "
                               "symbolic length")
        seqs = seqs or [CPU_SEQ if not gpu else 128]
        return (_run_gpu_dynamic if gpu else _run_cpu_dynamic)(args, seqs, max_seq)
    args.seq = seqs[0] if seqs else None
    if gpu:
        return _run_gpu(args)
    return _run_cpu(args)


def _run_arch(asked: str | None, gpu: bool) -> str:
    """The architecture ``llmopt run`` compiles for: ``--arch`` when given (on a GPU, one of
    its own family: ``sm_90a`` on an sm_90 GPU), else the GPU's, else :data:`DEFAULT_ARCH`."""
    if not gpu:
        return asked or DEFAULT_ARCH
    device = default_arch()
    if asked is not None and arch_number(asked) != arch_number(device):
        base = base_arch(device)
        raise CliError(f"--arch {asked} does not run on this GPU ({device}); give {base} "
                       f"or a variant of it such as {base}a")
    return asked or device


def _example_seq(max_seq: int) -> int:
    """The length a symbolic capture traces with (export needs one in [2, max_seq])."""
    return min(max_seq, 8)


def _length_line(seq: int, got: Any, want: Any, exact: Any, dtype: str) -> str:
    """One line of ``llmopt run --dynamic``: the error of ``got`` logits against PyTorch
    (``want``, in ``dtype``) and against the model in float64 (``exact``), and the argmax
    agreement with both."""
    import torch

    def agree(ref: Any) -> str:
        g, r = got.detach().double().cpu(), ref.detach().double().cpu()
        finite = torch.isfinite(g).all(-1) & torch.isfinite(r).all(-1)
        same = ((g.argmax(-1) == r.argmax(-1)) & finite).reshape(-1)
        return f"{int(same.sum())}/{same.numel()}"

    return (f"seq {seq}: max |error| / max |ref| {_relative_error(got, want):.3e} vs PyTorch "
            f"{dtype}, {_relative_error(got, exact):.3e} vs float64; argmax agreement "
            f"{agree(want)} vs PyTorch, {agree(exact)} vs float64")


def _run_cpu_dynamic(args: argparse.Namespace, seqs: Sequence[int], max_seq: int) -> int:
    """``llmopt run --dynamic`` without a GPU: one symbolic program lowered to Kernel IR
    once, then every length of ``seqs`` through the Kernel-IR interpreter."""
    import copy

    import torch

    import llmopt.interp
    from llmopt.frontend.models import capture_model

    half = args.dtype in ("float16", "bfloat16")
    model, weights = _cpu_model(args)
    print(f"// ran {args.model} as {_describe(model.config)}, symbolic seq <= {max_seq} "
          f"(lengths {' '.join(map(str, seqs))}), {args.dtype}, {weights}")
    start = time.perf_counter()
    program = capture_model(model, _example_seq(max_seq), dynamic=True, max_seq=max_seq)
    captured = time.perf_counter() - start
    to_kernel, rest = split_pipeline(_with_arch(args.pipeline, args.arch), "kernel")
    progress = lower_with_progress(program.module, to_kernel, "lowering to Kernel IR")
    print(f"// compile (once, every length): capture {captured:.1f} s, "
          f"{_timing_line(progress)}")
    nvrtc = _nvrtc_report(program.module, rest, args.arch)
    if nvrtc:
        print(f"// {nvrtc}")
    exact_model = copy.deepcopy(model).double()
    for seq in seqs:
        ids = _input_ids(model.config.vocab_size, seq, args.seed, "cpu")
        with torch.no_grad():
            want = model(input_ids=ids, use_cache=False).logits
            exact = exact_model(input_ids=ids, use_cache=False).logits
        inputs = interpreter_arrays(program.arguments(ids))
        began = time.perf_counter()
        outputs = llmopt.interp.run(program.module, inputs, check_races=False)
        seconds = time.perf_counter() - began
        got = torch.from_numpy(outputs[0].astype("float32") if half else outputs[0])
        _check_finite_logits(got, want)
        print(f"// {_length_line(seq, got, want, exact, args.dtype)}; interpreter "
              f"{seconds * 1e3:.1f} ms")
    return 0


def _run_gpu_dynamic(args: argparse.Namespace, seqs: Sequence[int], max_seq: int) -> int:
    """``llmopt run --dynamic`` on a GPU: one symbolic program compiled to CUBINs once, then
    every length of ``seqs`` through the executor (plain launches and a CUDA graph per
    length), against PyTorch and the model in float64."""
    import copy

    import torch

    from llmopt.codegen.executor import CompiledProgram
    from llmopt.frontend.models import build_model

    model = build_model(args.model, device="cuda", dtype=_dtype(args.dtype), seed=args.seed,
                        layers=args.layers, allow_nonfinite=args.allow_nonfinite)
    print(f"// GPU: {torch.cuda.get_device_name()}; {args.model} as {_describe(model.config)}, "
          f"symbolic seq <= {max_seq}, {args.dtype}")
    everything, _ = split_pipeline(_with_arch(args.pipeline, args.arch), "cuda")
    identity = "config:" + model.config.to_json_string(use_diff=False)
    began = time.perf_counter()
    module, how = lowered_model(args.model, identity, lambda: model.config,
                                _example_seq(max_seq), args.dtype, everything,
                                "lowering to CUDA", max_seq=max_seq)
    compiled = CompiledProgram(module, params=model_weights(model), arch=args.arch)
    print(f"// compile (once, every length): {how}; {time.perf_counter() - began:.1f} s to "
          f"loaded CUBINs, {len(compiled.kernel_names)} kernels")
    exact_model = copy.deepcopy(model).double()
    sync = torch.cuda.synchronize
    for seq in seqs:
        ids = _input_ids(model.config.vocab_size, seq, args.seed, "cuda")
        with torch.no_grad():
            want = model(input_ids=ids, use_cache=False).logits
            exact = exact_model(input_ids=ids, use_cache=False).logits
            compiled.cuda_graph = False
            (got,) = compiled(ids)
            sync()
            _check_finite_logits(got, want)
            eager = _median_seconds(partial(model, input_ids=ids, use_cache=False),
                                    args.repeat, sync)
            plain = _median_seconds(partial(compiled, ids), args.repeat, sync)
            times = f"eager {eager * 1e3:.2f} ms, llmopt {plain * 1e3:.2f} ms"
            if not args.no_graph:
                compiled.cuda_graph = True
                compiled(ids)
                graph = _median_seconds(partial(compiled, ids), args.repeat, sync)
                times += f", llmopt CUDA graph {graph * 1e3:.2f} ms"
        print(f"// {_length_line(seq, got, want, exact, args.dtype)}; {times}")
    return 0


def _input_ids(vocab: int, seq: int, seed: int, device: str) -> Any:
    import torch

    gen = torch.Generator().manual_seed(seed + 1)
    return torch.randint(0, vocab, (1, seq), generator=gen).to(device)


def _cpu_model(args: argparse.Namespace) -> tuple[Any, str]:
    """The model ``llmopt run`` runs on the CPU (shrunk when too big for the interpreter)
    and a phrase saying where its weights come from; prints what it did."""
    from llmopt.frontend.models import build_model, model_config

    dtype = _dtype(args.dtype)
    print("// no GPU here (torch.cuda.is_available() is False): running the Kernel IR "
          "through the CPU interpreter" if not args.cpu else
          "// --cpu: running the Kernel IR through the CPU interpreter")
    if args.profile:
        print("// --profile times kernels on a GPU: ignored by the CPU interpreter")
    config = model_config(args.model, layers=args.layers)
    checkpoint = _checkpoint(args.model)
    shrink = args.shrink or (not args.no_shrink and _too_big_for_the_interpreter(config))
    if shrink:
        config = _shrunk(config, args.layers)
        weights = f"random weights (seed {args.seed})"
        if checkpoint is not None:
            weights += "; the checkpoint's weights do not fit the shrunk config"
        model = build_model(config, device="cpu", dtype=dtype, seed=args.seed)
        print(f"// shrunk the config to {_describe(config)}")
    else:
        source = args.model if checkpoint is not None else config
        model = build_model(source, device="cpu", dtype=dtype, seed=args.seed,
                            layers=args.layers, allow_nonfinite=args.allow_nonfinite)
        weights = (f"weights from {checkpoint}" if checkpoint is not None
                   else f"random weights (seed {args.seed})")
    return model, weights


def _run_cpu(args: argparse.Namespace) -> int:
    import torch

    from llmopt.frontend.models import capture_model

    half = args.dtype in ("float16", "bfloat16")
    model, weights = _cpu_model(args)
    seq = args.seq if args.seq is not None else CPU_SEQ
    print(f"// ran {args.model} as {_describe(model.config)}, seq {seq}, {args.dtype}, "
          f"{weights}")
    ids = _input_ids(model.config.vocab_size, seq, args.seed, "cpu")
    with torch.no_grad():
        want = model(input_ids=ids, use_cache=False).logits
        torch_seconds = _median_seconds(lambda: model(input_ids=ids, use_cache=False), 5,
                                        lambda: None)

    start = time.perf_counter()
    program = capture_model(model, seq)
    captured = time.perf_counter() - start
    to_kernel, rest = split_pipeline(_with_arch(args.pipeline, args.arch), "kernel")
    progress = lower_with_progress(program.module, to_kernel, "lowering to Kernel IR")
    print(f"// compile: capture {captured:.1f} s, {_timing_line(progress)}")
    nvrtc = _nvrtc_report(program.module, rest, args.arch)
    if nvrtc:
        print(f"// {nvrtc}")

    import llmopt.interp

    inputs = interpreter_arrays(program.arguments(ids))
    began = time.perf_counter()
    outputs = llmopt.interp.run(program.module, inputs, check_races=False)
    interp_seconds = time.perf_counter() - began
    got = torch.from_numpy(outputs[0].astype("float32") if half else outputs[0])
    for line in _compare(got, want):
        print(f"// {line}")
    _check_finite_logits(got, want)
    if half:  # both 16-bit results against the model in float64, on the same weights
        import copy

        with torch.no_grad():
            exact = copy.deepcopy(model).double()(input_ids=ids, use_cache=False).logits
        print(f"// against float64: llmopt {_relative_error(got, exact):.3e}, PyTorch "
              f"{args.dtype} {_relative_error(want, exact):.3e} (max |error| / max |ref|)")
    print(f"// time: PyTorch (CPU, median of 5) {torch_seconds * 1e3:.1f} ms, llmopt Kernel-IR "
          f"interpreter {interp_seconds * 1e3:.1f} ms")
    return 0


def _nvrtc_report(module: Any, rest: Sequence[str], arch: str) -> str:
    """Lower a copy of a Kernel-IR ``module`` the rest of the way and compile it to CUBIN."""
    from llmopt.api import cuda_source, lower
    from llmopt.codegen.nvrtc import compile_cuda
    from llmopt.deps import MissingDependency

    began = time.perf_counter()
    cuda = lower(module.clone(), ",".join(rest)) if rest else module.clone()
    source = cuda_source(cuda)
    try:
        cubin = compile_cuda(source, arch=arch)
    except MissingDependency as err:
        return f"NVRTC: not compiled, {err}"
    except Exception as err:  # the compile failed: report, keep going
        return f"NVRTC failed: {str(err).splitlines()[0]}"
    return (f"NVRTC: {source.count('__global__')} kernels compiled to {len(cubin)} bytes of "
            f"CUBIN for {arch} in {time.perf_counter() - began:.1f} s")


def model_weights(model: Any) -> dict[str, Any]:
    """Every parameter and buffer of ``model`` by ``state_dict``-style name (tied and
    non-persistent ones included): what a program captured from ``model``'s architecture,
    e.g. on the meta device, binds its weight arguments from."""
    return {**dict(model.named_buffers(remove_duplicate=False)),
            **dict(model.named_parameters(remove_duplicate=False))}


def _run_gpu(args: argparse.Namespace) -> int:
    import torch

    from llmopt.codegen.executor import CompiledProgram
    from llmopt.frontend.models import build_model

    dtype = _dtype(args.dtype)
    seq = args.seq if args.seq is not None else 128
    checkpoint = _checkpoint(args.model)
    began = time.perf_counter()
    model = build_model(args.model, device="cuda", dtype=dtype, seed=args.seed,
                        layers=args.layers, allow_nonfinite=args.allow_nonfinite)
    built = time.perf_counter() - began
    weights = (f"weights from {checkpoint}" if checkpoint is not None
               else f"random weights (seed {args.seed})")
    print(f"// GPU: {torch.cuda.get_device_name()}; {args.model} as {_describe(model.config)}, "
          f"seq {seq}, {args.dtype}, {weights} (built in {built:.1f} s)")

    everything, _ = split_pipeline(_with_arch(args.pipeline, args.arch), "cuda")
    identity = "config:" + model.config.to_json_string(use_diff=False)
    module, how = lowered_model(args.model, identity, lambda: model.config, seq, args.dtype,
                                everything, "lowering to CUDA")
    began = time.perf_counter()
    compiled = CompiledProgram(module, params=model_weights(model), arch=args.arch)
    nvrtc = time.perf_counter() - began
    print(f"// compile: {how}; NVRTC + load {nvrtc:.1f} s: {len(compiled.kernel_names)} "
          f"kernels, {len(compiled.plan.steps)} steps")

    ids = _input_ids(model.config.vocab_size, seq, args.seed, "cuda")
    with torch.no_grad():
        want = model(input_ids=ids, use_cache=False).logits
        (got,) = compiled(ids)
        torch.cuda.synchronize()
        for line in _compare(got, want):
            print(f"// {line}")
        _check_finite_logits(got, want)
        sync = torch.cuda.synchronize
        eager = _median_seconds(lambda: model(input_ids=ids, use_cache=False), args.repeat,
                                sync)
        plain = _median_seconds(lambda: compiled(ids), args.repeat, sync)
        times = [f"PyTorch eager {eager * 1e3:.2f} ms", f"llmopt {plain * 1e3:.2f} ms"]
        if not args.no_graph:
            compiled.cuda_graph = True
            (graphed,) = compiled(ids)
            sync()
            if not torch.equal(graphed, got):
                print("// warning: the CUDA graph replay differs from the plain run")
            graph = _median_seconds(lambda: compiled(ids), args.repeat, sync)
            times.append(f"llmopt CUDA graph {graph * 1e3:.2f} ms")
    print(f"// time (median of {args.repeat}): " + ", ".join(times))
    if args.profile:
        for line in profile_table(compiled.profile(ids, reps=args.repeat), args.profile):
            print(f"// {line}")
    return 0


def profile_table(times: Sequence[KernelTime], top: int) -> list[str]:
    """The ``top`` kernels of a :meth:`~llmopt.codegen.executor.CompiledProgram.profile`
    by total time (a kernel launched several times, e.g. once per layer, summed), with
    their share of the sum of all launches."""
    total = sum(t.ms for t in times) or 1.0
    by_kernel: dict[str, list[KernelTime]] = {}
    for t in times:
        by_kernel.setdefault(t.kernel, []).append(t)
    ranked = sorted(by_kernel.values(), key=lambda ts: -sum(t.ms for t in ts))
    lines = [f"kernels by time (each launch timed alone; sum {total:.3f} ms):",
             f"{'ms':>9} {'share':>6} {'launches':>8}  {'grid x block':<16} kernel"]
    for ts in ranked[:top]:
        ms = sum(t.ms for t in ts)
        shape = f"{ts[0].grid[0]} x {ts[0].block[0]}"
        lines.append(f"{ms:9.4f} {ms / total:6.1%} {len(ts):8d}  {shape:<16} {ts[0].kernel}")
    return lines


# --- the command line -------------------------------------------------------------------------


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _layer_at_tile_ir(model_name: str, seq: int, dtype_name: str, elements: Sequence[str],
                      max_seq: int | None = None) -> Any:
    """Decoder layer 0 of ``model_name`` captured alone (``max_seq``: with a symbolic
    length up to it), lowered by ``elements``."""
    program = _capture(model_name, None, seq, _dtype(dtype_name), 1, layer_alone=True,
                       max_seq=max_seq)
    lower_with_progress(program.module, elements, "lowering to Tile IR")
    return program.module


def tune(args: argparse.Namespace) -> int:
    """``llmopt tune``: time schedule candidates of every attention chain (at Loop IR, see
    :mod:`llmopt.tools.tune_attention`) and of every matrix-product kernel (at Tile IR, see
    :mod:`llmopt.tools.tune`) on the GPU and record the fastest correct ones."""
    from llmopt.frontend.models import model_config
    from llmopt.tools import tune as tuner
    from llmopt.tools import tune_attention

    check_pipeline(_with_arch(args.pipeline, args.arch or DEFAULT_ARCH))
    if args.max_seq is not None and not args.dynamic:
        raise CliError("--max-seq bounds a symbolic length: add --dynamic")
    if args.dynamic and args.model.endswith(".mlir"):
        raise CliError("--dynamic captures a model with a symbolic length; an .mlir file is "
                       "tuned as it is (its own symbols, if any)")
    if not _cuda_available():
        raise CliError("tune needs a CUDA GPU: candidates are timed on it")
    if args.arch is None:
        args.arch = default_arch()
    first, _ = split_pipeline(_with_arch(args.pipeline, args.arch), "tile")
    names = [text.split("{")[0].strip() for text in first]
    if "loop-to-tile" not in names:
        raise CliError(f"the pipeline '{args.pipeline}' has no loop-to-tile pass")
    stop = names.index("loop-to-tile")
    if "length-buckets" in names[stop:]:  # a symbolic program's buckets are tuned each
        stop = names.index("length-buckets", stop)
    first = first[: stop + 1]
    # Attention is tuned before flash-attention builds its kernel, the products after.
    flash = "flash-attention" in names[: len(first)]
    cut = names.index("flash-attention") if flash else len(first) - 1
    loop_ir, rest = first[:cut], first[cut:]
    if args.layer and args.model.endswith(".mlir"):
        raise CliError("--layer captures a decoder layer of a model; an .mlir file is tuned "
                       "as it is")
    path = (tuner.TABLE_DIR / f"{args.arch}.json") if args.table else tuner.cache_path()
    table = tuner.load_table(path)
    max_seq = _max_seq(args) if args.dynamic else None
    if max_seq is not None:
        args.seqs = [_example_seq(max_seq)]
    for seq in args.seqs:
        if args.model.endswith(".mlir"):
            from xdsl.utils.exceptions import ParseError, PassFailedException, VerifyException

            from llmopt.api import lower, parse

            try:
                module = lower(parse(Path(args.model).read_text()), ",".join(loop_ir))
            except (ParseError, VerifyException, PassFailedException) as err:
                raise CliError(f"{args.model}: {str(err).strip().splitlines()[0]} (llm-opt "
                               f"{args.model} -p '{','.join(loop_ir)}' shows where)") from None
        elif args.layer:
            module = _layer_at_tile_ir(args.model, seq, args.dtype, loop_ir, max_seq)
        else:
            identity = model_identity(args.model, args.layers)
            module, how = lowered_model(args.model, identity,
                                        lambda: model_config(args.model, layers=args.layers),
                                        seq, args.dtype, loop_ir, "lowering to Loop IR",
                                        max_seq)
            length = f"symbolic seq <= {max_seq}" if max_seq is not None else f"seq {seq}"
            print(f"// {args.model} {length}: {how}", file=sys.stderr)
        tuned = 0
        if flash:
            entries = tune_attention.tune_attention(
                module, args.arch, args.reps, args.limit, jobs=args.jobs,
                save=partial(tuner.record_entries, path, table), recorded=dict(table))
            tuned += sum(entry is not None for entry in entries.values())
        lower_with_progress(module, rest, "lowering to Tile IR")  # reads the new entries
        entries = tuner.tune_module(module, args.arch, args.reps, args.limit, jobs=args.jobs,
                                    save=partial(tuner.record_entries, path, table),
                                    recorded=dict(table))
        tuned += sum(entry is not None for entry in entries.values())
        print(f"// seq {seq}: {tuned} kernels tuned, written to {path}", file=sys.stderr)
        if args.model.endswith(".mlir"):
            break
    if args.table:
        print(f"// apply-tuned reads the table of {args.arch} in every pipeline",
              file=sys.stderr)
    else:
        print(f"// apply-tuned reads the tuning cache only when asked: set "
              f"LLMOPT_TUNE_CACHE={path} (or give apply-tuned{{user=1}})", file=sys.stderr)
    return 0


def cache_info(args: argparse.Namespace) -> int:
    """``llmopt cache``: where the compile cache and the tuning cache are, and what they
    hold (``--clear``: delete the compile cache's entries)."""
    from llmopt.codegen.cache import cache_disabled, default_cache
    from llmopt.tools.tune import cache_path, load_table, user_cache

    def entries(count: int) -> str:
        return f"{count} {'entry' if count == 1 else 'entries'}"

    cache = default_cache()
    if args.clear:
        count = len(cache.entries())
        cache.clear()
        print(f"// removed {entries(count)} from {cache.directory}", file=sys.stderr)
    files = cache.entries()
    size = sum(entry.stat().st_size for entry in files if entry.is_file())
    state = "; bypassed: LLMOPT_NO_CACHE is set" if cache_disabled() else ""
    print(f"compile cache: {cache.directory} ({entries(len(files))}, {size / 1e6:.1f} MB"
          f"{state})")
    tuned = cache_path()
    used = ("read by apply-tuned: LLMOPT_TUNE_CACHE is set" if user_cache(False) is not None
            else "read only with LLMOPT_TUNE_CACHE set or apply-tuned{user=1}")
    print(f"tuning cache: {tuned} ({entries(len(load_table(tuned)))}; {used})")
    return 0


def _integer(low: int, high: int = 2**63 - 1) -> Callable[[str], int]:
    """An ``argparse`` type: an integer from ``low`` to ``high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got '{text}'") from None
        if not low <= value <= high:
            bound = f"an integer >= {low}" if high == 2**63 - 1 else (
                f"an integer from {low} to {high}")
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def _arch(text: str) -> str:
    """An ``argparse`` type: a GPU architecture llmopt compiles for."""
    from llmopt.options import arch_problem

    problem = arch_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


_positive = _integer(1)
_SEED = _integer(0, 2**63 - 2)


class _Parser(argparse.ArgumentParser):
    """``argparse`` with usage errors as the other errors: one ``llmopt: error:`` line after
    the usage, exit status 1 (2 means an internal error)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(1, f"llmopt: error: {message}\n")


def _dynamic_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """``--dynamic`` (``what`` it does for this command) and ``--max-seq``."""
    parser.add_argument("--dynamic", action="store_true", help=what)
    parser.add_argument("--max-seq", type=int, default=None, metavar="N",
                        help="with --dynamic, the largest length (default: the model's "
                        "max_position_embeddings)")


def _model_arguments(p: argparse.ArgumentParser, seq_default: int | None,
                     many: bool = False) -> None:
    p.add_argument("model", help="tinyllama, qwen2.5-7b, a local HF directory or a config.json")
    p.add_argument("--seq", type=_positive, default=seq_default, nargs="+" if many else None,
                   metavar="N",
                   help="sequence length" + (f" (default {seq_default})" if seq_default else
                                             " (default 128 on a GPU, 7 on the CPU)")
                   + ("; several with --dynamic" if many else ""))
    p.add_argument("--layers", type=_positive, default=None,
                   help="keep only the first N decoder layers (at most as many as the "
                   "model has)")
    p.add_argument("--dtype", choices=DTYPES, default="float32",
                   help="dtype of the weights and activations (default float32)")
    p.add_argument("--pipeline", default="lower-to-cuda",
                   help="the pass pipeline (default lower-to-cuda, for --arch)")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``llmopt`` command."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    # torch.export's pytree warns about its own internals on every capture.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)",
                            category=FutureWarning)
    traceback_help = "on an internal error, also print the Python traceback"
    # Before or after the subcommand; SUPPRESS keeps a subcommand from resetting it.
    common = _Parser(add_help=False)
    common.add_argument("--traceback", action="store_true", default=argparse.SUPPRESS,
                        help=traceback_help)
    parser = _Parser(
        prog="llmopt",
        description="Compile PyTorch programs and whole models through llmopt's six levels.",
        epilog="exit status: 0 success, 1 bad input or arguments (one 'llmopt: error:' line "
        "naming the file, tensor or option), 2 internal error (with a reproducer)",
    )
    parser.add_argument("--traceback", action="store_true", help=traceback_help)
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    d = sub.add_parser("demo", help="lower a small PyTorch function and print every level",
                       parents=[common])
    d.add_argument(
        "program", nargs="?", default="rmsnorm", choices=["rmsnorm", "softmax", "silu-mul"]
    )
    d.add_argument("--shape", type=_integer(1, 1 << 20), nargs="+", default=[1, 8, 256])
    d.add_argument("--pipeline", default="lower-to-cuda")
    d.add_argument("--all", action="store_true", help="also print the CUDA IR ops")
    d.set_defaults(run=demo)

    c = sub.add_parser("compile", help="write a whole model's IR at one level (or its CUDA)",
                       parents=[common])
    _model_arguments(c, 128)
    c.add_argument("--emit", choices=EMITS, required=True,
                   help="the level to stop at; cuda-source: the CUDA text; cubin: NVRTC's image")
    c.add_argument("-o", "--output", required=True, help="output file ('-': stdout)")
    c.add_argument("--arch", type=_arch, default=DEFAULT_ARCH,
                   help=f"GPU architecture (default {DEFAULT_ARCH})")
    _dynamic_arguments(c, "make the sequence length symbolic: one program for every length "
                       "up to --max-seq (--seq is the example length; --emit torch … kernel)")
    c.set_defaults(run=compile_model, quick_exit=True)

    r = sub.add_parser("run", help="compile and run a whole model, compare with PyTorch",
                       parents=[common])
    _model_arguments(r, None, many=True)
    _dynamic_arguments(r, "compile one program with a symbolic sequence length, then run each "
                       "--seq length with it")
    r.add_argument("--seed", type=_SEED, default=0, help="seed of the weights and input_ids")
    r.add_argument("--allow-nonfinite", action="store_true",
                   help="run a checkpoint whose weights hold NaN or infinite values (refused "
                   "otherwise, naming the tensor)")
    r.add_argument("--cpu", action="store_true", help="use the CPU interpreter even with a GPU")
    shrink = r.add_mutually_exclusive_group()
    shrink.add_argument("--shrink", action="store_true",
                        help="on the CPU, always run the shrunk config")
    shrink.add_argument("--no-shrink", action="store_true",
                        help="on the CPU, run the given config even when it is large")
    r.add_argument("--no-graph", action="store_true", help="on a GPU, skip the CUDA graph")
    r.add_argument("--repeat", type=_positive, default=20, help="timed runs on a GPU (median)")
    r.add_argument("--profile", type=_integer(0), default=0, metavar="N",
                   help="on a GPU, also time each launch alone and list the N slowest kernels")
    r.add_argument("--arch", type=_arch, default=None,
                   help=f"GPU architecture NVRTC compiles for (default: the GPU's, sm_90a "
                   f"on an H100 or H200, whose 16-bit products then use the warpgroup "
                   f"instructions (wgmma); without one {DEFAULT_ARCH}); sm_90 there keeps "
                   "the portable base")
    r.set_defaults(run=run_model)

    t = sub.add_parser("tune", help="time schedule candidates of each attention (block sizes "
                       "of flash-attention) and each matrix product on the GPU and keep the "
                       "fastest correct one", parents=[common])
    t.add_argument("model", help="tinyllama, qwen2.5-7b, a local HF directory, a config.json "
                   "or a Torch-IR .mlir file")
    t.add_argument("--seqs", type=_positive, nargs="+", default=[128], help="sequence lengths")
    t.add_argument("--layers", type=_positive, default=1, help="decoder layers to keep (default 1: "
                   "the layers are identical)")
    t.add_argument("--layer", action="store_true", help="tune decoder layer 0 captured alone "
                   "(hidden states in, hidden states out, as the blocks benchmark times it): "
                   "its last kernels end in the layer's output, so they are not the whole "
                   "model's")
    t.add_argument("--dtype", choices=DTYPES, default="float32")
    t.add_argument("--pipeline", default="lower-to-cuda")
    t.add_argument("--arch", type=_arch, default=None,
                   help="GPU architecture to tune for (default: the GPU's)")
    t.add_argument("--reps", type=_positive, default=30,
                   help="timed replays per candidate (median)")
    t.add_argument("--limit", type=_positive, default=48,
                   help="candidates per kernel (or attention) at most")
    t.add_argument("--jobs", type=_positive, default=max(1, (os.cpu_count() or 2) - 1),
                   help="processes lowering and compiling candidates (default: CPUs - 1)")
    t.add_argument("--table", action="store_true", help="write the committed table of --arch "
                   "instead of the user's tuning cache")
    _dynamic_arguments(t, "capture the model with a symbolic sequence length (up to "
                       "--max-seq) and tune each length bucket's kernel at its bound (--seqs "
                       "is ignored)")
    t.set_defaults(run=tune)

    from llmopt.tools.generate_cli import add_parser as add_generate_parser

    add_generate_parser(sub, common)

    k = sub.add_parser("cache", help="where the compile cache and the tuning cache are, and "
                       "what they hold")
    k.add_argument("--clear", action="store_true",
                   help="first delete every entry of the compile cache")
    k.set_defaults(run=cache_info)

    program = argv is None  # the llmopt command itself, not a call from Python
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args(["demo", *argv])
    try:
        status = int(args.run(args))
        if program and getattr(args, "quick_exit", False):
            _exit_now(status)
        return status
    except CliError as err:
        print(f"llmopt: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("llmopt: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        from llmopt.deps import missing_dependency

        missing = missing_dependency(err)
        if missing is not None:  # one line saying what to install, no traceback
            print(f"llmopt: error: 'llmopt {args.command}' {missing}", file=sys.stderr)
            return 1
        from llmopt.frontend.capture import CaptureError

        if isinstance(err, CaptureError):
            print(f"llmopt: error: {err}", file=sys.stderr)
            return 1
        if isinstance(err, OSError):
            where = f"{err.filename}: " if err.filename else ""
            print(f"llmopt: error: {where}{err.strerror or err}", file=sys.stderr)
            return 1
        if isinstance(err, ImportError):
            print(f"llmopt: error: {err}", file=sys.stderr)
            return 1
        _report_internal(err, argv, args)
        return 2


def _exit_now(status: int) -> NoReturn:
    """End the process at once with ``status``, its output flushed. After a whole model's
    compile, freeing its IR and what torch.export left one object at a time takes seconds;
    the command has written and closed everything it produces, so nothing is lost."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _report_internal(err: BaseException, argv: Sequence[str], args: argparse.Namespace
                     ) -> None:
    """An internal error: what was raised where, and a reproducer file holding the command,
    the model's config (when it is a file) and the traceback."""
    import shlex
    import tempfile
    import traceback

    print(f"llmopt: internal error: {type(err).__name__}: {err}".split("\n")[0],
          file=sys.stderr)
    frames = traceback.extract_tb(err.__traceback__)
    if frames:
        print(f"llmopt: note: raised at {frames[-1].filename}:{frames[-1].lineno}",
              file=sys.stderr)
    trace = "".join(traceback.format_exception(err))
    if getattr(args, "traceback", False):
        print(trace.rstrip(), file=sys.stderr)
    lines = [f"# llmopt crash reproducer: {type(err).__name__}: {err}".split("\n")[0],
             f"llmopt {shlex.join(argv)}"]
    model = getattr(args, "model", None)
    if model is not None:
        path = Path(model)
        config = path / "config.json" if path.is_dir() else path
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if config.is_file() and config.suffix == ".json":
                lines += [f"# {config}:", *(f"#   {line}" for line in
                                            config.read_text().splitlines())]
    lines += ["#", *(f"# {line}" for line in trace.rstrip().splitlines())]
    try:
        fd, name = tempfile.mkstemp(prefix="llmopt-reproducer-", suffix=".sh")
        with os.fdopen(fd, "w") as out:
            out.write("\n".join(lines) + "\n")
        print(f"llmopt: note: reproducer written to {name}", file=sys.stderr)
    except OSError:
        pass
    if not getattr(args, "traceback", False):
        print("llmopt: note: rerun with --traceback for the Python traceback", file=sys.stderr)
    print("llmopt: note: this is a bug in llmopt; please report it", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
