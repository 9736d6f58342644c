"""One program for every length: the symbolic decoder layer against static programs.

Usage (on a GPU host; ``bash bench/run_bench.sh symbolic ...`` runs it)::

    python bench/symbolic.py --out-dir DIR [--models tinyllama qwen2.5-7b] [--seqs 1 17 ...]
                             [--max-seq 2048] [--reps 30] [--warmup 3] [--commit SHA] [--tag h200]
                             [--dtype float32|bfloat16|float16] [--pipeline P]
                             [--baseline-pipeline B] [--prebuild-jobs N]
    python bench/symbolic.py --tiny --dry-run      # the CPU-side part, on a tiny config

**Points.** A decoder layer of each model (TinyLlama-1.1B and Qwen2.5-7B at their real
dimensions) at every length of :data:`SEQS`, weights seeded and perturbed as in
``bench/suite.py``, inputs seeded by the point's name.

**Systems.** ``symbolic``: the layer captured once with a symbolic length (at most
``--max-seq``), lowered and loaded once, replayed from its CUDA graph of each length;
``static``: the layer captured and compiled for that exact length (CUDA graph); eager; eager
replayed from a CUDA graph; ``torch.compile(dynamic=True)`` compiled once for every length;
with ``--baseline-pipeline B`` also ``baseline``, the symbolic layer lowered by ``B`` (an A/B
of a pipeline change on one machine: ``vs_baseline`` = baseline / symbolic).
Each is the median of CUDA-event-timed calls, the five systems of a length timed in
``--rounds`` interleaved rounds (each in turn, the order rotated every round, so that a
slow moment of a shared GPU falls on all of them); each output is compared with the layer in
float64 (``err_rel``, ``ok`` against the symbolic program's tolerance). ``--dtype`` sets the
weights' and activations' dtype (default float32; with a 16-bit one the float64 reference
starts from the same 16-bit weights and inputs, and ``DIR/symbolic-<tag>-<dtype>.*`` hold
the results).

**Results.** ``DIR/symbolic-<tag>.json`` (the compile seconds of the symbolic program and of
torch.compile once per model; per point the times, ``vs_static`` = static / symbolic and
``vs_compile`` = torch.compile / symbolic; at the top ``min_vs_static`` and
``min_vs_compile``) and ``DIR/symbolic-<tag>.md``, a table of them.

**Builds.** Every lowered program goes through the compile cache
(:func:`llmopt.codegen.program_cache.cached_lowering`, keyed on the model, the length or its
bound, the dtype and the pipeline): a second run, or one after ``--prebuild-jobs N`` has
lowered every program the run needs in ``N`` processes at once (lowering is single-threaded
Python), reads them instead of lowering again.

**Dry run.** ``--dry-run`` does what needs no GPU: capture with a symbolic length, lowering
to Kernel IR, the arguments of every length (the length bound as the last argument), and
the Kernel IR interpreted at the shortest lengths against float64.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from report import gpu_tag
from suite import (
    MODELS,
    LayerCall,
    TimedCall,
    build_eager_graph,
    case_name,
    case_seed,
    configure_precision,
    cuda_samples_ms,
    git_commit,
    interleaved_samples,
    perturb_,
    rel_error,
)

SEQS = (1, 17, 100, 128, 200, 512, 1000, 2047)
"""The lengths every symbolic program runs at."""

MAX_SEQ = 2048
TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "vocab_size": 97, "max_position_embeddings": 256, "rms_norm_eps": 1e-5}
"""``--tiny``: a one-layer Llama small enough for the interpreter."""
TINY_SEQS, TINY_MAX_SEQ = (1, 17, 100, 200), 256
DRY_RUN_LENGTHS = 2
"""Lengths the dry run interprets (the shortest ones)."""
EXAMPLE_SEQ = 8
"""The length the symbolic capture traces with."""


def build_layer(source: Any, device: str, name: str, dtype: torch.dtype = torch.float32
                ) -> tuple[Any, LayerCall, LayerCall]:
    """A one-layer model from ``source`` (a preset or a config dict), seeded and perturbed
    (in float32, then cast to ``dtype``), its first decoder layer as a module and that
    module's float64 copy."""
    from llmopt.frontend.models import build_model, decoder_layers

    model = build_model(source, device=device, dtype=torch.float32, seed=0, layers=1)
    perturb_(model, case_seed(f"{name}/decoder_layer"))
    model = model.to(dtype)
    module = LayerCall(decoder_layers(model)[0])
    return model, module, copy.deepcopy(module).double()


def layer_inputs(model: Any, model_name: str, seq: int, device: str
                 ) -> tuple[torch.Tensor, ...]:
    """Hidden states and rotary ``cos``/``sin`` for ``seq`` tokens, seeded by the point."""
    from llmopt.frontend.models import position_embeddings

    gen = torch.Generator(device=device).manual_seed(
        case_seed(case_name(model_name, seq, "decoder_layer")))
    x = torch.randn(1, seq, model.config.hidden_size, generator=gen, device=device)
    cos, sin = (t.to(device) for t in position_embeddings(model, seq))
    x = x.to(cos.dtype)
    return x, cos, sin


def lowered(program: Any, pipeline: str) -> float:
    """Lower ``program``'s module by ``pipeline`` in place; the seconds it took."""
    import llmopt

    began = time.perf_counter()
    llmopt.lower(program.module, pipeline)
    return time.perf_counter() - began


def lowered_layer(model: Any, model_name: str, seq: int, pipeline: str,
                  max_seq: int | None = None) -> Any:
    """The decoder layer of ``model`` captured at ``seq`` tokens (with ``max_seq``: a
    symbolic length of at most ``max_seq``, ``seq`` the example) and lowered by
    ``pipeline``, through the compile cache (see *Builds*)."""
    from llmopt.codegen.program_cache import cached_lowering, program_cache_key
    from llmopt.frontend.models import capture_layer
    from llmopt.registry import pipeline_elements

    dtype = str(model.dtype).removeprefix("torch.")
    identity = (f"bench/symbolic decoder layer of {model_name}: {model.config.to_json_string()}"
                + ("" if max_seq is None else f"\nsymbolic seq <= {max_seq}"))
    key = program_cache_key(identity, seq, dtype, [t for t, _ in pipeline_elements(pipeline)])

    def build() -> Any:
        program = capture_layer(model, seq, dynamic=max_seq is not None, max_seq=max_seq)
        lowered(program, pipeline)
        return program.module

    module, _ = cached_lowering(key, build)
    return module


def _prebuild_one(model_name: str, seq: int, pipeline: str, max_seq: int | None,
                  dtype: str) -> float:
    """One program of :func:`prebuild`, in a process of its own; the seconds it took."""
    began = time.perf_counter()
    model, _, _ = build_layer(model_name, "cpu", model_name, getattr(torch, dtype))
    lowered_layer(model, model_name, seq, pipeline, max_seq)
    return time.perf_counter() - began


def prebuild(args: argparse.Namespace, arch: str) -> None:
    """Every program the run lowers (per model: the symbolic one, the baseline's, the static
    one of each length), ``args.prebuild_jobs`` processes at a time, into the compile
    cache."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from llmopt.registry import with_arch

    jobs: list[tuple[str, int, str, int | None, str]] = []
    for name in args.models:
        for pipeline in [args.pipeline, *([args.baseline_pipeline]
                                          if args.baseline_pipeline else [])]:
            jobs.append((name, EXAMPLE_SEQ, with_arch(pipeline, arch), args.max_seq,
                         args.dtype))
        jobs += [(name, seq, with_arch("lower-to-cuda", arch), None, args.dtype)
                 for seq in args.seqs]
    began = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(args.prebuild_jobs, mp_context=context) as pool:
        seconds = list(pool.map(_prebuild_one, *zip(*jobs, strict=True)))
    print(f"# prebuilt {len(jobs)} programs in {time.perf_counter() - began:.1f} s "
          f"({args.prebuild_jobs} at a time; longest {max(seconds):.1f} s)", flush=True)


def dry_run(source: Any, model_name: str, seqs: Sequence[int], max_seq: int,
            dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """The CPU-side part: capture once, lower to Kernel IR, build every length's arguments,
    interpret the :data:`DRY_RUN_LENGTHS` shortest against float64."""
    import llmopt.interp
    from llmopt.frontend.models import capture_layer
    from llmopt.numerics import tolerance
    from llmopt.tools.llmopt_cli import interpreter_arrays, split_pipeline

    model, module, wide = build_layer(source, "cpu", model_name, dtype)
    began = time.perf_counter()
    program = capture_layer(model, min(EXAMPLE_SEQ, max_seq), dynamic=True, max_seq=max_seq)
    tol = tolerance(program.module)
    to_kernel, _ = split_pipeline("lower-to-cuda", "kernel")
    seconds = lowered(program, ",".join(to_kernel)) + time.perf_counter() - began
    result: dict[str, Any] = {"model": model_name, "max_seq": max_seq, "to_kernel_s": seconds,
                              "tol": tol, "points": []}
    for i, seq in enumerate(sorted(seqs)):
        inputs = layer_inputs(model, model_name, seq, "cpu")
        args = program.arguments(*inputs)
        if args[-1] != seq:
            raise RuntimeError(f"seq {seq}: the length argument is {args[-1]}")
        point: dict[str, Any] = {"seq": seq, "arguments": len(args)}
        if i < DRY_RUN_LENGTHS:
            (out,) = llmopt.interp.run(program.module, interpreter_arrays(args),
                                       check_races=False)
            out = out.astype(np.float32)
            with torch.no_grad():
                ref = wide(*(t.double() for t in inputs))
            point["err_rel"] = rel_error(torch.from_numpy(out), ref)
            point["ok"] = point["err_rel"] <= tol
        result["points"].append(point)
    return result


def measure_model(model_name: str, seqs: Sequence[int], max_seq: int, reps: int,
                  warmup: int, dtype: torch.dtype = torch.float32,
                  symbolic_pipeline: str = "lower-to-cuda", rounds: int = 5,
                  baseline_pipeline: str | None = None) -> dict[str, Any]:
    """Every system of one model's decoder layer at every length (on the GPU), timed in
    ``rounds`` interleaved rounds (:func:`suite.interleaved_samples`); the symbolic program
    is lowered by ``symbolic_pipeline``, the static ones by ``lower-to-cuda``, and with a
    ``baseline_pipeline`` a second symbolic program by that one."""
    from llmopt.codegen.executor import CompiledProgram
    from llmopt.frontend.models import capture_layer
    from llmopt.numerics import tolerance
    from llmopt.registry import with_arch
    from llmopt.target import current_target
    from llmopt.tools.llmopt_cli import model_weights

    arch = current_target().arch
    pipeline = with_arch("lower-to-cuda", arch)
    model, module, wide = build_layer(model_name, "cuda", model_name, dtype)
    weights = model_weights(model)
    began = time.perf_counter()
    tol = tolerance(capture_layer(model, EXAMPLE_SEQ, dynamic=True, max_seq=max_seq).module)

    def symbolic_program(spec: str) -> Any:
        return CompiledProgram(lowered_layer(model, model_name, EXAMPLE_SEQ,
                                             with_arch(spec, arch), max_seq),
                               params=weights, cuda_graph=True)

    symbolic = symbolic_program(symbolic_pipeline)
    symbolic_s = time.perf_counter() - began
    baseline = None if baseline_pipeline is None else symbolic_program(baseline_pipeline)
    torch._dynamo.reset()
    dynamic = torch.compile(module, dynamic=True)
    compile_s: float | None = None
    points = []
    for seq in seqs:
        inputs = layer_inputs(model, model_name, seq, "cuda")
        with torch.no_grad():
            ref = wide(*(t.double() for t in inputs))
            row: dict[str, Any] = {"name": case_name(model_name, seq, "decoder_layer"),
                                   "seq": seq, "tol": tol}
            (out,) = symbolic(*inputs)
            row["err_rel"] = rel_error(out, ref)
            row["ok"] = row["err_rel"] <= tol
            start = time.perf_counter()
            fixed = CompiledProgram(lowered_layer(model, model_name, seq, pipeline),
                                    params=weights, cuda_graph=True)
            fixed(*inputs)
            row["static_compile_s"] = time.perf_counter() - start
            graph = build_eager_graph(module, inputs)
            if compile_s is None:
                start = time.perf_counter()
                dynamic(*inputs)
                torch.cuda.synchronize()
                compile_s = time.perf_counter() - start
            row["compile_err_rel"] = rel_error(dynamic(*inputs), ref)
            if baseline is not None:
                (out,) = baseline(*inputs)
                row["baseline_err_rel"] = rel_error(out, ref)
            calls = [TimedCall("symbolic", "symbolic_ms", lambda i=inputs: symbolic(*i)),
                     TimedCall("static", "static_ms", lambda i=inputs, f=fixed: f(*i)),
                     TimedCall("eager", "eager_ms", lambda i=inputs: module(*i)),
                     TimedCall("eager_graph", "eager_graph_ms", graph.replay or graph.fn),
                     TimedCall("compile", "compile_ms", lambda i=inputs: dynamic(*i))]
            if baseline is not None:
                calls.append(TimedCall("baseline", "baseline_ms",
                                       lambda i=inputs: baseline(*i)))
            samples, errors = interleaved_samples(calls, cuda_samples_ms, reps=reps,
                                                  warmup=warmup, rounds=rounds)
            if errors:
                raise RuntimeError(f"{row['name']}: " + "; ".join(
                    f"{system}: {err}" for system, err in errors.items()))
            row.update({field: statistics.median(times) for field, times in samples.items()})
            del fixed, graph
        row["vs_static"] = row["static_ms"] / row["symbolic_ms"]
        row["vs_compile"] = row["compile_ms"] / row["symbolic_ms"]
        row["vs_eager_graph"] = row["eager_graph_ms"] / row["symbolic_ms"]
        if baseline is not None:
            row["vs_baseline"] = row["baseline_ms"] / row["symbolic_ms"]
        points.append(row)
        print(f"{row['name']}: symbolic {row['symbolic_ms']:.3f} ms, static "
              f"{row['static_ms']:.3f} ms ({row['vs_static']:.2f}x), torch.compile dynamic "
              f"{row['compile_ms']:.3f} ms ({row['vs_compile']:.2f}x), "
              + (f"baseline {row['baseline_ms']:.3f} ms ({row['vs_baseline']:.2f}x), "
                 if baseline is not None else "")
              + f"err {row['err_rel']:.2e}"
              f"{'' if row['ok'] else ' OUTSIDE TOLERANCE'}", flush=True)
    return {"model": model_name, "dtype": str(dtype).removeprefix("torch."), "max_seq": max_seq,
            "symbolic_compile_s": symbolic_s, "baseline_pipeline": baseline_pipeline,
            "torch_compile_dynamic_s": compile_s, "points": points}


def summarise(models: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The top-level ratios over every point of every model."""
    points = [p for m in models for p in m["points"]]
    return {"min_vs_static": min(p["vs_static"] for p in points),
            "min_vs_compile": min(p["vs_compile"] for p in points),
            "geomean_vs_static": statistics.geometric_mean(p["vs_static"] for p in points),
            "outside_tolerance": [p["name"] for p in points if not p["ok"]]}


def markdown(doc: dict[str, Any]) -> str:
    """A table: one row per model and length."""
    ab = any("vs_baseline" in p for m in doc["models"] for p in m["points"])
    lines = [f"# Symbolic decoder layer: one program for every length ({doc['dtype']})", "",
             f"min vs static {doc['min_vs_static']:.2f}x, min vs torch.compile(dynamic=True) "
             f"{doc['min_vs_compile']:.2f}x (higher: the symbolic program is faster)", "",
             "| model | seq | symbolic ms | static ms | vs static | eager graph ms | "
             "compile(dynamic) ms | vs compile | err vs float64 |"
             + (" baseline ms | vs baseline |" if ab else ""),
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if ab else "")]
    for m in doc["models"]:
        for p in m["points"]:
            lines.append(f"| {m['model']} | {p['seq']} | {p['symbolic_ms']:.3f} | "
                         f"{p['static_ms']:.3f} | {p['vs_static']:.2f} | "
                         f"{p['eager_graph_ms']:.3f} | {p['compile_ms']:.3f} | "
                         f"{p['vs_compile']:.2f} | {p['err_rel']:.1e} |"
                         + (f" {p['baseline_ms']:.3f} | {p['vs_baseline']:.2f} |"
                            if "vs_baseline" in p else ""))
    baselines = {m.get("baseline_pipeline") for m in doc["models"]} - {None}
    if baselines:
        lines += ["", "Baseline pipeline: " + "; ".join(f"`{b}`" for b in sorted(baselines))]
    lines += ["", "Compiled once: " + "; ".join(
        f"{m['model']} symbolic {m['symbolic_compile_s']:.1f} s, torch.compile(dynamic=True) "
        f"{m['torch_compile_dynamic_s']:.1f} s" for m in doc["models"])]
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out-dir", type=Path, default=Path(__file__).parent / "results")
    p.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    p.add_argument("--seqs", type=int, nargs="+", default=None)
    p.add_argument("--max-seq", type=int, default=None)
    p.add_argument("--reps", type=int, default=100,
                   help="timed calls of each system at each length, over all rounds")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls before each round's")
    p.add_argument("--rounds", type=int, default=5,
                   help="interleaved rounds: each system in turn, rotated every round")
    p.add_argument("--commit", default=None)
    p.add_argument("--tag", default=None,
                   help="file-name suffix (default: the GPU's model, report.gpu_tag)")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    p.add_argument("--tiny", action="store_true", help="a tiny one-layer Llama config")
    p.add_argument("--pipeline", default="lower-to-cuda",
                   help="the pass pipeline of the symbolic program (the static programs "
                        "take lower-to-cuda)")
    p.add_argument("--baseline-pipeline", default=None,
                   help="also time the symbolic layer lowered by this pipeline (an A/B)")
    p.add_argument("--prebuild-jobs", type=int, default=0, metavar="N",
                   help="lower every program of the run in N processes at once first")
    p.add_argument("--dry-run", action="store_true", help="the CPU-side part only")
    args = p.parse_args(argv)
    args.tag = args.tag or gpu_tag()
    args.max_seq = args.max_seq or (TINY_MAX_SEQ if args.tiny else MAX_SEQ)
    args.seqs = args.seqs or [s for s in (TINY_SEQS if args.tiny else SEQS)
                              if s <= args.max_seq]
    if min(args.seqs) < 1 or max(args.seqs) > args.max_seq:
        p.error(f"--seqs must lie in [1, {args.max_seq}] (--max-seq)")
    if args.reps < 1 or args.rounds < 1 or args.warmup < 0:
        p.error("--reps and --rounds must be positive and --warmup not negative")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dry_run:
        sources = [("tiny", TINY)] if args.tiny else [(m, m) for m in args.models]
        for name, source in sources:
            result = dry_run(source, name, args.seqs, args.max_seq, getattr(torch, args.dtype))
            print(json.dumps(result))
            if not all(p.get("ok", True) for p in result["points"]):
                return 1
        return 0
    if args.prebuild_jobs > 0:
        from llmopt.target import current_target

        prebuild(args, current_target().arch)
    configure_precision()
    models: list[dict[str, Any]] = []
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name in args.models:
        models.append(measure_model(name, args.seqs, args.max_seq, args.reps, args.warmup,
                                    getattr(torch, args.dtype), args.pipeline, args.rounds,
                                    args.baseline_pipeline))
        torch.cuda.empty_cache()
        # Written after every model, so a run stopped early keeps the models it finished.
        doc = {"kind": "symbolic", "dtype": args.dtype, "commit": args.commit or git_commit(),
               "pipeline": args.pipeline,
               "gpu": torch.cuda.get_device_name(), "reps": args.reps, "warmup": args.warmup,
               "rounds": args.rounds,
               **summarise(models), "models": models}
        stem = f"symbolic-{args.tag}" + ("" if args.dtype == "float32" else f"-{args.dtype}")
        (args.out_dir / f"{stem}.json").write_text(json.dumps(doc, indent=1) + "\n")
        (args.out_dir / f"{stem}.md").write_text(markdown(doc))
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
