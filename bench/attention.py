"""Attention alone: llmopt's flash kernel against PyTorch's ``scaled_dot_product_attention``.

Usage (on a GPU host)::

    python bench/attention.py [--models tinyllama qwen2.5-7b]
                              [--seqs 17 100 200 255 512 1000 2047] [--reps 100] [--rounds 5]
                              [--pipelines lower-to-cuda ...] [--dtype bfloat16]
                              [--out FILE.json]

**Cases.** The op suite's ``sdpa`` case (:func:`suite.make_case`: causal GQA attention,
``q: [1, heads, seq, head_dim]``, ``k, v: [1, kv_heads, seq, head_dim]``, seeded standard
normal) in the head configurations of TinyLlama-1.1B (32 query heads, 4 KV heads of 64) and
Qwen2.5-7B (28 and 4 of 128), at every ``--seqs`` length (by default 17 to 2047, most of
them divided by no block size).

**Systems.** PyTorch eager (``eager_ms``); the same eager call captured once into a
``torch.cuda.CUDAGraph`` and replayed (``eager_graph_ms``: PyTorch without its per-call host
overhead, as llmopt is timed); llmopt, ``llmopt.compile(..., cuda_graph=True)`` replayed
from its static input buffers, once per ``--pipelines`` entry (``llmopt_ms``, then
``llmopt_ms[1]`` …: e.g. ``"lower-to-cuda"`` against a pipeline with
``flash-attention{bn=32}`` in place of ``flash-attention{arch=sm_90}``, to A/B a knob). FP32,
TF32 off, or with ``--dtype bfloat16``/``float16`` every system in that dtype (the inputs
drawn as in FP32 and rounded; the float64 reference computed from the rounded values).
Timing as the suite's (:func:`suite.interleaved_samples`: interleaved rounds in rotating
order, CUDA events around each call, the median of all samples).

**Accuracy.** Each output against the module in float64 on the same inputs
(``max|out - ref| / max|ref|``); ``ok`` when llmopt's is within the captured program's
tolerance (:func:`llmopt.numerics.tolerance`).

**Results.** One JSON object per case in ``--out`` (default ``attention-h200.json`` in
``--out-dir``, the current directory by default; ``attention-bfloat16-h200.json`` in 16
bits), each with ``vs_eager`` and ``vs_eager_graph`` (PyTorch's time over llmopt's, above 1
llmopt is faster) and the flash kernel's block (``llmopt_flash``: ``bm x bn``), and a
Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from report import gpu_tag
from suite import (  # the op suite's cases, systems and timing
    MODELS,
    Built,
    TimedCall,
    build_eager,
    build_llmopt,
    cleanup,
    configure_precision,
    cuda_samples_ms,
    git_commit,
    interleaved_samples,
    make_case,
    reference,
    rel_error,
)
from torch import nn

import llmopt

SEQS = (17, 100, 200, 255, 512, 1000, 2047)


def build_eager_graph(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> Built:
    """The eager call captured into a CUDA graph (after three warm-up calls on a side
    stream, as PyTorch's documentation does it): ``replay`` replays it on the static inputs,
    ``fn(*args)`` copies ``args`` into them first."""
    static = [t.clone() for t in inputs]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            module(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        out = module(*static)

    def replay() -> torch.Tensor:
        graph.replay()
        return out

    def call(*args: torch.Tensor) -> torch.Tensor:
        for dst, src in zip(static, args, strict=True):
            dst.copy_(src)
        return replay()

    return Built(fn=call, replay=replay)


def flash_blocks(module: nn.Module, inputs: tuple[torch.Tensor, ...], pipeline: str
                 ) -> str | None:
    """``bm x bn`` of the flash kernel ``pipeline`` makes (its passes up to
    ``flash-attention`` run on a fresh capture), or ``None`` when it makes none."""
    from llmopt import registry

    passes = registry.expand_pipeline(pipeline).split(",")
    upto = next((k for k, p in enumerate(passes) if p.startswith("flash-attention")), None)
    if upto is None:
        return None
    lowered = llmopt.lower(llmopt.capture(module, inputs), ",".join(passes[:upto + 1]))
    found = re.search(r'llmopt.flash = "(\d+x\d+)"', str(lowered))
    return found.group(1) if found else None


def run_case(model: str, seq: int, pipelines: Sequence[str], reps: int, warmup: int,
             rounds: int, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """Build, check and time every system on one case."""
    dims = MODELS[model]
    row: dict[str, Any] = {"model": model, "seq": seq, "heads": dims.heads,
                           "kv_heads": dims.kv_heads, "head_dim": dims.head_dim,
                           "dtype": str(dtype).removeprefix("torch.")}
    with torch.no_grad():
        case = make_case(dims, seq, "sdpa", device="cuda", dtype=dtype)
        ref = reference(case.module, case.inputs)
        systems: dict[str, Built] = {"eager": build_eager(case.module, case.inputs),
                                     "eager_graph": build_eager_graph(case.module,
                                                                      case.inputs)}
        for k, pipeline in enumerate(pipelines):
            key = "llmopt" if k == 0 else f"llmopt[{k}]"
            try:
                row[f"{key}_flash"] = flash_blocks(case.module, case.inputs, pipeline)
                start = time.perf_counter()
                systems[key] = build_llmopt(case.module, case.inputs, pipeline)
                row[f"{key}_compile_s"] = time.perf_counter() - start
            except Exception as err:  # one pipeline's failure must not hide the others
                row[f"{key}_error"] = f"{type(err).__name__}: {str(err).splitlines()[0]}"
        for key, built in systems.items():
            out = built.fn(*case.inputs)
            row[f"{key}_err_rel"] = rel_error(out[0] if isinstance(out, tuple) else out, ref)
            if key.startswith("llmopt"):
                row["tol"] = built.tol
        calls = [TimedCall(key, f"{key}_ms",
                           built.replay or (lambda b=built: b.fn(*case.inputs)))
                 for key, built in systems.items()]
        samples, errors = interleaved_samples(calls, cuda_samples_ms, reps=reps,
                                              warmup=warmup, rounds=rounds)
    for field, times in samples.items():
        row[field] = statistics.median(times) if times else None
    for key, err in errors.items():
        row[f"{key}_error"] = f"{type(err).__name__}: {err}"
    llmopt_ms = row.get("llmopt_ms")
    for base in ("eager", "eager_graph"):
        theirs = row.get(f"{base}_ms")
        row[f"vs_{base}"] = theirs / llmopt_ms if theirs and llmopt_ms else None
    err, tol = row.get("llmopt_err_rel"), row.get("tol")
    row["ok"] = bool(err <= tol) if isinstance(err, float) and isinstance(tol, float) else None
    systems.clear()
    cleanup()
    return row


def table(rows: Sequence[dict[str, Any]], pipelines: Sequence[str]) -> str:
    """The results as a Markdown table."""
    extra = [f"llmopt[{k}]" for k in range(1, len(pipelines))]
    head = ["model", "seq", "block", "eager ms", "eager graph ms", "llmopt ms",
            *(f"{e} ms" for e in extra), "vs eager", "vs eager graph", "err", "ok"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def ms(value: Any) -> str:
        return f"{value:.4f}" if isinstance(value, float) else "—"

    def ratio(value: Any) -> str:
        return f"{value:.2f}x" if isinstance(value, float) else "—"

    for r in rows:
        err = r.get("llmopt_err_rel")
        cells = [r["model"], str(r["seq"]), str(r.get("llmopt_flash")), ms(r.get("eager_ms")),
                 ms(r.get("eager_graph_ms")),
                 ms(r.get("llmopt_ms")), *(ms(r.get(f"{e}_ms")) for e in extra),
                 ratio(r.get("vs_eager")), ratio(r.get("vs_eager_graph")),
                 f"{err:.1e}" if isinstance(err, float) else "—", str(r.get("ok"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the cases (see the module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--seqs", nargs="+", type=int, default=list(SEQS))
    parser.add_argument("--pipelines", nargs="+", default=["lower-to-cuda"],
                        help="llmopt's pipeline, and others to time beside it")
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32",
                        help="dtype of every system's inputs (default float32)")
    parser.add_argument("--out", type=Path, default=None,
                        help="the JSON file (default: attention-<gpu>.json in --out-dir, "
                             "attention-<dtype>-<gpu>.json for 16 bits; <gpu> as "
                             "report.gpu_tag names the GPU)")
    parser.add_argument("--out-dir", type=Path, default=Path("."))
    parser.add_argument("--commit", help="the commit measured (default: git HEAD, if any)")
    args = parser.parse_args(argv)
    if args.out is None:
        infix = "" if args.dtype == "float32" else f"-{args.dtype}"
        args.out = args.out_dir / f"attention{infix}-{gpu_tag()}.json"
    if not torch.cuda.is_available():
        print("attention.py needs a CUDA GPU", file=sys.stderr)
        return 2
    configure_precision()
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "commit": args.commit or git_commit(), "pipelines": args.pipelines, "reps": args.reps,
            "rounds": args.rounds, "dtype": args.dtype}
    rows: list[dict[str, Any]] = []
    for model in args.models:
        for seq in args.seqs:
            print(f"{model} seq {seq}", flush=True)
            rows.append(run_case(model, seq, args.pipelines, args.reps, args.warmup,
                                 args.rounds, getattr(torch, args.dtype)))
            args.out.write_text(json.dumps({"meta": meta, "cases": rows}, indent=1))
    print(table(rows, args.pipelines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
