"""Per-kernel times of one decoder layer: llmopt's launches and torch.compile's kernels.

Usage (GPU host)::

    python bench/profile_layer.py qwen2.5-7b:128 tinyllama:512
    python bench/profile_layer.py --dtype bfloat16 qwen2.5-7b:2047
    python bench/profile_layer.py --pipeline PIPELINE --no-compile qwen2.5-7b:1000

For each ``model:seq`` the layer is built and captured as ``bench/suite.py blocks`` does
(``capture_layer``, lowered by ``lower-to-cuda`` or ``--pipeline``, for the GPU's
architecture unless the pipeline names a variant of it); every llmopt launch is timed alone
(:meth:`~llmopt.codegen.executor.CompiledProgram.profile`: CUDA events around each launch,
outside the CUDA graph, so a small kernel's time includes the host's launch latency), and
``torch.compile`` (default mode) is run under ``torch.profiler``, its CUDA kernels summed by
name over the calls (``--no-compile``: llmopt's launches only). FP32 with TF32 off, or the
weights and inputs in ``--dtype`` (``bfloat16``, ``float16``: the model built in that
dtype, as the sweep's 16-bit layers are). Prints llmopt's launches in order and
torch.compile's kernels by time, each with their sum.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import suite  # noqa: E402

import llmopt  # noqa: E402
from llmopt.codegen.executor import CompiledProgram  # noqa: E402

CALLS = 20
"""torch.compile calls under the profiler (after five untimed ones)."""


def parse_case(text: str) -> tuple[str, int]:
    """``"tinyllama:512"`` → ``("tinyllama", 512)``."""
    model, sep, seq = text.partition(":")
    if not sep or model not in suite.MODELS or not seq.isdigit():
        raise ValueError(f"a case is MODEL:SEQ with MODEL one of {', '.join(suite.MODELS)}, "
                         f"got {text!r}")
    return model, int(seq)


def profile_case(model_name: str, seq: int, dtype: torch.dtype = torch.float32,
                 top: int = 16, pipeline: str = suite.DEFAULT_PIPELINE,
                 compiled_too: bool = True) -> None:
    """Print both systems' kernel times for decoder layer 0 of ``model_name`` at ``seq``,
    weights and inputs in ``dtype``, llmopt's lowered by ``pipeline`` (``compiled_too``:
    also torch.compile's)."""
    from llmopt.api import program_arch
    from llmopt.frontend.models import (
        build_model,
        capture_layer,
        decoder_layers,
        position_embeddings,
    )
    from llmopt.registry import with_arch
    from llmopt.target import current_target

    with torch.no_grad():
        model = build_model(model_name, device="cuda", dtype=dtype, seed=0, layers=1)
        layer = suite.LayerCall(decoder_layers(model)[0])
        x = torch.randn(1, seq, model.config.hidden_size, device="cuda").to(dtype)
        cos, sin = (t.cuda() for t in position_embeddings(model, seq))
        captured = capture_layer(model, seq)
        arch = program_arch(pipeline, current_target().arch)
        llmopt.lower(captured.module, with_arch(pipeline, arch))
        program = CompiledProgram(captured.module, params=captured.params, cuda_graph=False,
                                  arch=arch)
        times = program.profile(x, cos, sin, reps=30)
        label = str(dtype).removeprefix("torch.")
        print(f"== {model_name} s{seq} {label} llmopt: sum {sum(t.ms for t in times):.4f} ms")
        for t in times:
            print(f"  {t.ms:8.4f} {t.grid[0]:6d}x{t.block[0]:<4d} {t.kernel}")
        if not compiled_too:
            suite.cleanup()
            return
        compiled = torch.compile(layer, dynamic=False)
        for _ in range(5):
            compiled(x, cos, sin)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(CALLS):
                compiled(x, cos, sin)
            torch.cuda.synchronize()
        by_name: dict[str, float] = collections.defaultdict(float)
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                by_name[event.name] += event.device_time / CALLS / 1000
        print(f"== {model_name} s{seq} {label} torch.compile: sum {sum(by_name.values()):.4f} ms")
        for name, ms in sorted(by_name.items(), key=lambda kv: -kv[1])[:top]:
            print(f"  {ms:8.4f} {name[:110]}")
    suite.cleanup()


def main(argv: list[str]) -> int:
    """Profile every ``model:seq`` of ``argv``; returns the exit status."""
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="+", metavar="MODEL:SEQ")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                        default="float32")
    parser.add_argument("--pipeline", default=suite.DEFAULT_PIPELINE,
                        help="llmopt's pass pipeline (default: %(default)s)")
    parser.add_argument("--no-compile", action="store_true",
                        help="time llmopt's launches only, not torch.compile's kernels")
    args = parser.parse_args(argv)
    try:
        cases = [parse_case(a) for a in args.cases]
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("profile_layer needs a CUDA GPU", file=sys.stderr)
        return 2
    suite.configure_precision()
    for model_name, seq in cases:
        profile_case(model_name, seq, getattr(torch, args.dtype), pipeline=args.pipeline,
                     compiled_too=not args.no_compile)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
