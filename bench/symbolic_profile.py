"""Where the symbolic program's time goes: its launches beside the static program's.

Usage (on a GPU host)::

    python bench/symbolic_profile.py --out-dir DIR [--models tinyllama] [--seqs 1 17 128]
                                     [--max-seq 2048] [--reps 30] [--rounds 3]

For one decoder layer of each model (as ``bench/symbolic.py`` builds it), the symbolic
program (compiled once) and the static program of every length, per length:

* **graph**: both replayed from their CUDA graphs, timed in ``--rounds`` alternating rounds
  (CUDA events around each call, as ``bench/symbolic.py``), so that a slow moment of the GPU
  shows in both;
* **host**: the host seconds one call takes to return (no synchronisation), averaged over
  200 calls: the part of a timed call in which the GPU may wait for the host;
* **launches**: :meth:`CompiledProgram.profile` of both, outside the graph, each launch
  timed on its own, side by side;
* **replay only**: the CUDA graph's ``replay()`` alone, without the call's copies of its
  inputs and its host work, in the same alternating rounds.

``--ncu-window`` then replays each program's graph once more inside a profiler window
(``torch.cuda.profiler.start()``/``stop()``): run under ``ncu --profile-from-start off
--clock-control none --metrics gpu__time_duration.sum``, it gives every kernel node's own
time inside the graph, which the launches timed alone (each paying its launch) do not.

Writes ``DIR/symbolic-profile.json`` and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from suite import MODELS, cuda_samples_ms
from symbolic import EXAMPLE_SEQ, MAX_SEQ, build_layer, layer_inputs, lowered_layer

HOST_CALLS = 200


def host_ms(call: Callable[[], Any]) -> float:
    """Mean host milliseconds of one ``call()`` (the GPU is synchronised before, not during)."""
    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(HOST_CALLS):
        call()
    elapsed = time.perf_counter() - began
    torch.cuda.synchronize()
    return elapsed / HOST_CALLS * 1e3


def launches(program: Any, inputs: Sequence[torch.Tensor], reps: int) -> list[dict[str, Any]]:
    return [{"kernel": t.kernel, "grid": list(t.grid), "block": list(t.block), "ms": t.ms}
            for t in program.profile(*inputs, reps=reps)]


def measure(model_name: str, seqs: Sequence[int], max_seq: int, reps: int,
            rounds: int, ncu_window: bool = False, pipeline: str = "lower-to-cuda",
            dtype: torch.dtype = torch.float32) -> list[dict[str, Any]]:
    """The rows of one model in ``dtype``: both programs lowered by ``pipeline`` at every
    length."""
    from llmopt.codegen.executor import CompiledProgram
    from llmopt.registry import with_arch
    from llmopt.target import current_target
    from llmopt.tools.llmopt_cli import model_weights

    pipeline = with_arch(pipeline, current_target().arch)
    model, _, _ = build_layer(model_name, "cuda", model_name, dtype)
    weights = model_weights(model)
    module = lowered_layer(model, model_name, EXAMPLE_SEQ, pipeline, max_seq)
    symbolic = CompiledProgram(module, params=weights, cuda_graph=True)
    plain = CompiledProgram(module, params=weights)
    rows = []
    for seq in seqs:
        inputs = layer_inputs(model, model_name, seq, "cuda")
        static = lowered_layer(model, model_name, seq, pipeline)
        fixed = CompiledProgram(static, params=weights, cuda_graph=True)
        fixed_plain = CompiledProgram(static, params=weights)
        row = {"model": model_name, "seq": seq, "pipeline": pipeline,
               "dtype": str(dtype).removeprefix("torch.")}
        with torch.no_grad():
            row |= compare({"symbolic": (symbolic, plain), "static": (fixed, fixed_plain)},
                           inputs, reps, rounds)
            if ncu_window:
                symbolic(*inputs)  # this length's graph is the current one
                torch.cuda.synchronize()
                torch.cuda.profiler.start()
                symbolic.replay_graph()
                fixed.replay_graph()
                torch.cuda.synchronize()
                torch.cuda.profiler.stop()
        rows.append(row)
        print_row(row)
    return rows


def compare(systems: dict[str, tuple[Any, Any]], inputs: Sequence[torch.Tensor], reps: int,
            rounds: int) -> dict[str, Any]:
    """Graph times in alternating rounds, host time per call and the launches of each
    system (``name: (program with CUDA graph, program without)``)."""
    samples: dict[str, list[float]] = {name: [] for name in systems}
    replays: dict[str, list[float]] = {name: [] for name in systems}
    names = list(systems)
    row: dict[str, Any] = {}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            graph = systems[name][0]
            samples[name] += cuda_samples_ms(lambda g=graph: g(*inputs), reps, 3)
            replays[name] += cuda_samples_ms(graph.replay_graph, reps, 3)
    for name, (graph, plain) in systems.items():
        row[f"{name}_graph_ms"] = statistics.median(samples[name])
        row[f"{name}_replay_ms"] = statistics.median(replays[name])
        row[f"{name}_graph_spread"] = [min(samples[name]), max(samples[name])]
        row[f"{name}_host_ms"] = host_ms(lambda g=graph: g(*inputs))
        row[f"{name}_launches"] = launches(plain, inputs, reps)
        row[f"{name}_launch_sum_ms"] = sum(k["ms"] for k in row[f"{name}_launches"])
    return row


def print_row(row: dict[str, Any]) -> None:
    print(f"\n== {row['model']} seq {row['seq']}: graph symbolic {row['symbolic_graph_ms']:.3f} "
          f"ms {row['symbolic_graph_spread']}, static {row['static_graph_ms']:.3f} ms "
          f"{row['static_graph_spread']}; replay only symbolic {row['symbolic_replay_ms']:.3f} "
          f"ms, static {row['static_replay_ms']:.3f} ms; host per call symbolic "
          f"{row['symbolic_host_ms']:.3f} "
          f"ms, static {row['static_host_ms']:.3f} ms; sum of launches symbolic "
          f"{row['symbolic_launch_sum_ms']:.3f} ms ({len(row['symbolic_launches'])}), static "
          f"{row['static_launch_sum_ms']:.3f} ms ({len(row['static_launches'])})")
    for name in ("symbolic", "static"):
        print(f"-- {name}")
        for k in row[f"{name}_launches"]:
            print(f"   {k['ms']:8.4f}  {k['kernel']:<40} grid {k['grid']} block {k['block']}")
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--models", nargs="+", choices=list(MODELS), default=["tinyllama"])
    p.add_argument("--seqs", type=int, nargs="+", default=[1, 17, 128])
    p.add_argument("--max-seq", type=int, default=MAX_SEQ)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pipeline", default="lower-to-cuda",
                   help="the pass pipeline of both programs")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
                   help="the layer's weights' and inputs' dtype")
    p.add_argument("--ncu-window", action="store_true",
                   help="replay both graphs once more inside a profiler window (for ncu)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("symbolic_profile: needs a GPU", file=sys.stderr)
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for model_name in args.models:
        rows += measure(model_name, args.seqs, args.max_seq, args.reps, args.rounds,
                        args.ncu_window, args.pipeline, getattr(torch, args.dtype))
        (args.out_dir / "symbolic-profile.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
