"""Batch-1 greedy decode on the GPU: llmopt's cached steps against PyTorch.

For each model, dtype and context: a random prompt of ``context`` tokens (seeded), then
``--new`` greedy tokens, by

* **llmopt**: :class:`llmopt.Generator` (prefill and decode programs, compiled once for the
  largest context);
* **HF eager**: ``model.generate`` (transformers' dynamic cache, eager PyTorch);
* **static step, CUDA graph**: a PyTorch decode step over a static cache of the largest
  context (the new row written with ``index_copy_`` at a position held in device memory,
  attention over the whole cache with a mask), captured once into a CUDA graph and replayed
  for every position;
* **static step, torch.compile**: the same step under ``torch.compile`` (default mode),
  replayed from a CUDA graph too.

Every system's tokens are compared with HF's. ``pct_bandwidth`` is the bytes one decode step
must read (every weight once, the embedding table excepted, plus the keys and values of the
context) over its time, as a percentage of the device-to-device copy bandwidth measured in
the same run; each llmopt system also gives the kernel launches of its decode step
(``launches``) and the host's time to issue a step (``issue_us_per_token``: the decode loop
until the last step is queued, over the steps). Writes ``decode-<gpu>.json`` and ``.md``
to ``--out-dir``.

    python3 bench/decode.py --models tinyllama --contexts 128 512 2000 --new 32

``--steps-per-graph N`` sets how many decode steps one CUDA-graph replay runs (the
Generator's default otherwise); ``--also-steps-per-graph N`` (repeatable) times the same
Generator again with N, as system ``llmopt[steps=N]``.

``--variant NAME=PIPELINE`` (repeatable) also times llmopt lowered by another pipeline, in
the same process after the default one, as system ``llmopt[NAME]``: an A/B of a schedule
option against the default under the same conditions.

A run's Generators (one per model and dtype) can be built first, all at once, each in its
own process (``--prebuild-jobs N``): lowering is single-threaded Python, so on a host of many
cores the builds overlap, and the measuring process then finds every program in the compile
cache. Their cold build times are reported as measured in those processes. In 16 bits,
where llmopt's tokens leave HF's the record says how close HF's choice was there
(:func:`llmopt.generation.divergence`) and which of the two tokens the same weights prefer
computed in float64 (``--no-float64-check`` skips that forward).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from report import gpu_tag
from suite import git_commit

from llmopt.generation import copy_bandwidth, divergence, float64_twin, step_bytes


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class StaticStep(torch.nn.Module):
    """A PyTorch decode step over static caches ``[max_ctx, kv_heads, head_dim]``, the
    position a device tensor: one CUDA graph serves every position."""

    def __init__(self, model: Any, max_ctx: int) -> None:
        super().__init__()
        from llmopt.frontend.decode import _Step, cache_names, cache_shape

        self.step = _Step(model, prefill=False)
        self.max_ctx = max_ctx
        dtype = next(model.parameters()).dtype
        self.device = next(model.parameters()).device
        self.caches = [torch.zeros(cache_shape(model, max_ctx), dtype=dtype,
                                   device=self.device)
                       for _ in cache_names(model.config.num_hidden_layers)]

    def forward(self, token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        s = self.step
        inner = s.inner
        x = inner.embed_tokens(token)
        cos, sin = inner.rotary_emb(x, pos.view(1, 1))
        keep = (torch.arange(self.max_ctx, device=self.device) <= pos).view(1, 1, 1, -1)
        for k, layer in enumerate(s.model.model.layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q = attn.q_proj(h).view(1, 1, s.heads, s.head_dim).transpose(1, 2)
            key = attn.k_proj(h).view(1, 1, s.kv_heads, s.head_dim).transpose(1, 2)
            value = attn.v_proj(h).view(1, 1, s.kv_heads, s.head_dim)
            q, key = s.rotate(q, key, cos, sin)
            ck, cv = self.caches[2 * k], self.caches[2 * k + 1]
            ck.index_copy_(0, pos, key[0].transpose(0, 1))
            cv.index_copy_(0, pos, value[0])
            out = torch.nn.functional.scaled_dot_product_attention(
                q, ck.permute(1, 0, 2).unsqueeze(0), cv.permute(1, 0, 2).unsqueeze(0),
                attn_mask=keep, enable_gqa=True)
            out = out.transpose(1, 2).reshape(1, 1, s.heads * s.head_dim)
            x = x + attn.o_proj(out)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return s.model.lm_head(inner.norm(x[:, -1]))


def static_step(model: Any, max_ctx: int, compiled: bool) -> tuple[StaticStep, Any]:
    """A :class:`StaticStep` and what calls it: itself, or its ``torch.compile``. One serves
    every context of a model (a prefill rewrites the cache up to its position, and the
    mask hides the rest), so ``torch.compile`` compiles once a model and dtype."""
    step = StaticStep(model, max_ctx)
    return step, (torch.compile(step) if compiled else step)


def static_decode(step: tuple[StaticStep, Any], prompt: torch.Tensor, new: int
                  ) -> tuple[list[int], float]:
    """Prefill the static caches token by token (not timed), then ``new - 1`` decode steps
    replayed from one CUDA graph (run eagerly without a GPU); returns the tokens and the
    seconds of the timed steps."""
    device, fn = step[0].device, step[1]
    token = torch.zeros((1, 1), dtype=torch.long, device=device)
    pos = torch.zeros(1, dtype=torch.long, device=device)
    with torch.no_grad():
        for _ in range(3):  # warm up (and compile)
            logits = fn(token, pos)
        replay = lambda: fn(token, pos)  # noqa: E731
        if device.type == "cuda":
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                logits = fn(token, pos)
            replay = graph.replay
        ids = prompt.view(-1).tolist()
        for p, t in enumerate(ids):
            token.fill_(t)
            pos.fill_(p)
            out_logits = replay()
            logits = logits if out_logits is None else out_logits
        out = [logits.argmax(-1)]
        _sync()
        began = time.perf_counter()
        for k in range(1, new):
            token.copy_(out[-1].view(1, 1))
            pos.fill_(len(ids) + k - 1)
            out_logits = replay()
            logits = logits if out_logits is None else out_logits
            out.append(logits.argmax(-1))
        _sync()
        seconds = time.perf_counter() - began
    return [int(t) for t in out], seconds


def hf_generate(model: Any, prompt: torch.Tensor, new: int) -> tuple[list[int], float]:
    """``model.generate`` greedy; the seconds per decode step estimated as (time of ``new``
    tokens - time of 1 token) / (new - 1)."""
    def run(n: int) -> tuple[list[int], float]:
        _sync()
        began = time.perf_counter()
        out = model.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        _sync()
        return out[0, prompt.shape[1]:].tolist(), time.perf_counter() - began

    with torch.no_grad():
        run(2)
        _, one = run(1)
        tokens, total = run(new)
    return tokens, total - one


def measure(tokens: list[int], per_token: float, reference: list[int], nbytes: int,
            bandwidth: float) -> dict[str, Any]:
    """One system's record: speed, share of the copy bandwidth, agreement with HF."""
    return {
        "tok_s": 1 / per_token, "ms_per_token": per_token * 1e3,
        "pct_bandwidth": 100 * nbytes / per_token / bandwidth,
        "tokens_equal_hf": tokens == reference,
        "first_divergence": next((k for k, (a, b) in enumerate(zip(tokens, reference,
                                                                      strict=False))
                                  if a != b), None),
    }


def measure_llmopt(out: Any, steps: int, reference: list[int], nbytes: int,
                   bandwidth: float, launches: int | None) -> dict[str, Any]:
    """An llmopt system's record (a :class:`~llmopt.generation.Generation` of ``steps``
    decode steps): :func:`measure`'s, the launches of its step when given, and the host's
    time to issue a step."""
    record = measure(out.tokens, out.decode_seconds / steps, reference, nbytes, bandwidth)
    if launches is not None:
        record["launches"] = launches
    record["issue_us_per_token"] = out.issue_seconds / steps * 1e6
    return record


def kernel_reads(plan: Any) -> dict[str, str]:
    """What each kernel of a program reads, by kernel name: the model parameters and
    program inputs among its launch arguments (views traced to the buffer they view), in
    argument order, with ``model.``, a layer's ``layers.N.`` and ``.weight`` dropped
    (``mlp.up_proj+mlp.gate_proj``; ``cache_k+cache_v`` for an attention), so that a
    profile's row says which product, norm or attention a kernel is. A kernel launched
    for every layer gets the label most of its launches have (the first layer's residual
    may be the embedding instead of the sum before it)."""
    from collections import Counter

    from llmopt.codegen.plan import LaunchStep

    labels: dict[str, Counter[str]] = {}
    for step in plan.steps:
        if not isinstance(step, LaunchStep):
            continue
        found: list[str] = []
        for slot in plan.view_roots(step.args):
            if slot >= len(plan.inputs):
                continue
            name = (plan.params[slot] if slot < len(plan.params) else None) or plan.inputs[slot][0]
            name = re.sub(r"^model\.|layers\.\d+\.|\.weight$", "", name)
            if name not in found:
                found.append(name)
        labels.setdefault(step.kernel, Counter())["+".join(found)] += 1
    return {kernel: counts.most_common(1)[0][0] for kernel, counts in labels.items()}


def profile_decode(gen: Any, context: int, steps: int = 4) -> list[dict[str, Any]]:
    """The GPU time of each kernel of a decode step at ``context``: ``steps`` calls of the
    decode program on the generator's caches under ``torch.profiler`` (CUPTI, so kernels
    inside the CUDA graph count, and no event sits between launches), summed by kernel
    name and divided by the steps, longest first; printed as a table. With programmatic
    launches (``programmatic-launch``, on by default on sm_90) a kernel starts before the
    one in front of it ends and waits for it, so its time includes that wait and the sum
    exceeds the step: lower with ``--pipeline`` without the pass to read kernels alone."""
    from torch.profiler import ProfilerActivity, profile

    decode = gen._programs[1]
    caches = gen._caches()
    token = torch.zeros((1, 1), dtype=torch.long, device="cuda")
    decode(token, *(c[:context] for c in caches))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            decode(token, *(c[:context] for c in caches))
        torch.cuda.synchronize()
    reads = kernel_reads(decode.plan)
    rows = []
    for event in prof.key_averages():
        device_us = getattr(event, "device_time_total", None)
        if device_us is None:
            device_us = event.cuda_time_total
        if device_us > 0:
            rows.append({"kernel": event.key, "us_per_step": device_us / steps,
                         "launches_per_step": event.count / steps,
                         "reads": reads.get(event.key, "")})
    rows.sort(key=lambda r: -r["us_per_step"])
    total = sum(r["us_per_step"] for r in rows)
    overlap = any(getattr(s, "programmatic", False) for s in decode.plan.steps)
    print(f"# GPU time of a decode step at context {context}: {total / 1e3:.3f} ms"
          + (" (programmatic launches: each kernel's time includes its wait for the one "
             "before it)" if overlap else ""))
    for r in rows[:16]:
        print(f"#   {r['us_per_step']:9.1f} us  x{r['launches_per_step']:<5.1f} "
              f"{r['kernel'][:40]:40s} {r['reads'][:60]}")
    return rows


def build_only(args: argparse.Namespace) -> int:
    """``--build-only``: build each Generator (cold, filling the compile cache) and print
    ``{"build": "model/dtype", "seconds": s, "timings": {...}}`` a line each."""
    import llmopt
    from llmopt.frontend.models import build_model

    for name in args.models:
        for dtype_name in args.dtypes:
            model = build_model(name, device="cuda", dtype=getattr(torch, dtype_name),
                                seed=args.seed)
            began = time.perf_counter()
            gen = llmopt.Generator(model, max_ctx=max(args.contexts) + args.new, device="cuda",
                                   pipeline=args.pipeline)
            print(json.dumps({"build": f"{name}/{dtype_name}",
                              "seconds": time.perf_counter() - began,
                              "timings": gen.timings}), flush=True)
            del gen, model
            torch.cuda.empty_cache()
    return 0


def prebuild(args: argparse.Namespace) -> dict[str, tuple[float, dict[str, float]]]:
    """Every model's and dtype's Generator built by ``--build-only`` processes,
    ``--prebuild-jobs`` at a time; their cold build times by ``model/dtype``."""
    pipelines = [args.pipeline, *args.variants.values()]  # the variants fill the cache
    jobs = [(m, d, p) for m in args.models for d in args.dtypes for p in pipelines]
    common = ["--contexts", *map(str, args.contexts), "--new", str(args.new),
              "--seed", str(args.seed), "--build-only"]
    done: dict[str, tuple[float, dict[str, float]]] = {}
    began = time.perf_counter()
    for start in range(0, len(jobs), args.prebuild_jobs):
        procs = [(p, subprocess.Popen([sys.executable, __file__, "--models", m, "--dtypes", d,
                                       "--pipeline", p, *common], stdout=subprocess.PIPE,
                                      text=True))
                 for m, d, p in jobs[start:start + args.prebuild_jobs]]
        for pipeline, proc in procs:
            out, _ = proc.communicate()
            if pipeline == args.pipeline:  # cold times are reported for the main pipeline
                done |= read_builds(out)
    print(f"# prebuilt {sorted(done)} in {time.perf_counter() - began:.1f} s "
          f"({args.prebuild_jobs} at a time)", flush=True)
    return done


def read_builds(text: str) -> dict[str, tuple[float, dict[str, float]]]:
    """The build times in ``--build-only`` output (its JSON lines), by ``model/dtype``."""
    builds = {}
    for line in text.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            builds[rec["build"]] = (rec["seconds"], rec["timings"])
    return builds


def _variant(text: str) -> tuple[str, str]:
    """``NAME=PIPELINE`` of ``--variant``."""
    name, sep, pipeline = text.partition("=")
    if not sep or not name or not pipeline:
        raise ValueError(f"--variant takes NAME=PIPELINE, got {text!r}")
    return name, pipeline


def timed(gen: Any, prompt: torch.Tensor, new: int) -> Any:
    """The median of three generations of ``new`` tokens, after one that warms every
    kernel up and captures the decode graphs (one per count of steps a replay)."""
    gen.generate(prompt, new)
    runs = [gen.generate(prompt, new) for _ in range(3)]
    return sorted(runs, key=lambda r: r.decode_seconds)[1]


def positions_problem(models: list[str], contexts: list[int], new: int) -> str | None:
    """Why a model of ``models`` cannot hold its longest context and the ``new`` tokens
    after it (its ``max_position_embeddings``), or ``None`` when every one can."""
    from llmopt.frontend.models import ModelError, model_config

    for name in models:
        try:
            limit = model_config(name).max_position_embeddings
        except ModelError as err:
            return str(err)
        if max(contexts) + new > limit:
            return (f"{name} has {limit} positions: the context {max(contexts)} and {new} new "
                    f"tokens do not fit (the longest context it takes is {limit - new})")
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["tinyllama"])
    parser.add_argument("--dtypes", nargs="+", default=["float32"])
    parser.add_argument("--contexts", nargs="+", type=int, default=[128, 512, 2000])
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-compile-baseline", action="store_true",
                        help="skip the torch.compile static step")
    parser.add_argument("--no-float64-check", action="store_true",
                        help="judge divergences by the dtype's own forward only (default: "
                             "also by the weights in float64, which needs 8 bytes a parameter)")
    parser.add_argument("--profile", action="store_true",
                        help="time each kernel of one decode step at the longest context")
    parser.add_argument("--pipeline", default="lower-to-cuda",
                        help="the pass pipeline llmopt's programs are lowered by (e.g. "
                        "llmopt.registry.without('lower-to-cuda', 'programmatic-launch'))")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=PIPELINE",
                        help="also time llmopt lowered by PIPELINE, reported as system "
                        "llmopt[NAME] beside the others of the same run (repeatable; e.g. "
                        "shuffle=\"$(python3 -c 'from llmopt import registry as r; print(r."
                        "with_options(\"lower-to-cuda\", \"warp-gemv{shuffle=true}\"))')\")")
    parser.add_argument("--steps-per-graph", type=int, default=None, metavar="N",
                        help="decode steps one graph replay runs (Generator's default if "
                        "not given; 0: one step a replay, tokens picked between replays)")
    parser.add_argument("--also-steps-per-graph", type=int, action="append", default=[],
                        metavar="N", help="also time the same Generator with N steps a "
                        "replay, as system llmopt[steps=N] (repeatable)")
    parser.add_argument("--out-dir", type=Path, default=Path("bench/results"))
    parser.add_argument("--commit", help="the commit measured (default: git HEAD, if any)")
    parser.add_argument("--merge", type=Path, nargs="+", metavar="JSON",
                        help="only write the results of these runs as one (no GPU needed)")
    parser.add_argument("--prebuild-jobs", type=int, default=0, metavar="N",
                        help="build every model's and dtype's Generator first, N at a time, "
                        "each in its own process (they fill the compile cache)")
    parser.add_argument("--build-only", action="store_true",
                        help="build the Generator of each model and dtype, print its build "
                        "times as one JSON line each, and stop")
    parser.add_argument("--cold-times", type=Path, nargs="+", default=[], metavar="JSONL",
                        help="cold build times printed by earlier --build-only runs (their "
                        "Generators then load from the compile cache here)")
    args = parser.parse_args()
    try:
        args.variants = dict(_variant(v) for v in args.variant)
    except ValueError as err:
        parser.error(str(err))
    if args.merge:
        return merge_results(args.merge, args.out_dir)
    if problem := positions_problem(args.models, args.contexts, args.new):
        parser.error(problem)
    if args.build_only:
        return build_only(args)
    prebuilt = prebuild(args) if args.prebuild_jobs > 0 else {}
    for path in args.cold_times:
        prebuilt |= read_builds(path.read_text())

    import llmopt
    from llmopt.frontend.models import build_model

    bandwidth = copy_bandwidth()
    gpu = torch.cuda.get_device_name()
    print(f"# {gpu}: device-to-device copy {bandwidth / 1e12:.2f} TB/s", flush=True)
    records: list[dict[str, Any]] = []
    builds: dict[str, Any] = {}
    meta = {"gpu": gpu, "copy_bandwidth_bytes_s": bandwidth, "torch": torch.__version__,
            "host": platform.node(), "commit": args.commit or git_commit(),
            "generator_builds": builds}
    for name in args.models:
        for dtype_name in args.dtypes:
            dtype = getattr(torch, dtype_name)
            model = build_model(name, device="cuda", dtype=dtype, seed=args.seed)
            max_ctx = max(args.contexts) + args.new
            began = time.perf_counter()
            gen = llmopt.Generator(model, max_ctx=max_ctx, device="cuda",
                                   pipeline=args.pipeline)
            compile_s = time.perf_counter() - began
            cold = dict(gen.timings)
            if f"{name}/{dtype_name}" in prebuilt:  # built cold in its own process
                compile_s, cold = prebuilt[f"{name}/{dtype_name}"]
            began = time.perf_counter()
            gen = llmopt.Generator(model, max_ctx=max_ctx, device="cuda",
                                   pipeline=args.pipeline)  # cache hits
            if args.steps_per_graph is not None:
                gen.steps_per_graph = args.steps_per_graph
            default_steps = gen.steps_per_graph
            warm_s = time.perf_counter() - began
            print(f"# {name} {dtype_name}: Generator(max_ctx={max_ctx}) built in "
                  f"{compile_s:.1f} s {cold}; again (compile cache) in {warm_s:.1f} s "
                  f"{gen.timings}", flush=True)
            builds[f"{name}/{dtype_name}"] = {"cold_s": compile_s, "cold": cold,
                                              "warm_s": warm_s, "warm": dict(gen.timings)}
            variant_gens = {key: llmopt.Generator(model, max_ctx=max_ctx, device="cuda",
                                                  pipeline=spec)
                            for key, spec in args.variants.items()}
            eager_step, compiled_step = static_step(model, max_ctx, False), None
            for context in args.contexts:
                g = torch.Generator().manual_seed(args.seed + context)
                prompt = torch.randint(0, model.config.vocab_size, (1, context), generator=g)
                prompt = prompt.cuda()
                ours = timed(gen, prompt, args.new)
                hf_tokens, hf_s = hf_generate(model, prompt, args.new)
                systems: dict[str, dict[str, Any]] = {}
                steps = args.new - 1
                nbytes = step_bytes(model, context)

                llmopt_runs = [("llmopt", ours, gen.launches_per_step)]
                for count in args.also_steps_per_graph:  # the same programs, other replays
                    gen.steps_per_graph = count
                    llmopt_runs.append((f"llmopt[steps={count}]", timed(gen, prompt, args.new),
                                        None))
                    gen.steps_per_graph = default_steps
                for key, other in variant_gens.items():  # the same run, other pipelines
                    llmopt_runs.append((f"llmopt[{key}]", timed(other, prompt, args.new),
                                        other.launches_per_step))
                tokens_of = {}
                for key, out, launches in llmopt_runs:
                    systems[key] = measure_llmopt(out, steps, hf_tokens, nbytes, bandwidth,
                                                  launches)
                    tokens_of[key] = out.tokens
                systems["hf_eager"] = measure(hf_tokens, hf_s / steps, hf_tokens, nbytes,
                                               bandwidth)
                st_tokens, st_s = static_decode(eager_step, prompt, args.new)
                systems["static_graph"] = measure(st_tokens, st_s / steps, hf_tokens, nbytes,
                                                   bandwidth)
                tokens_of["static_graph"] = st_tokens
                if not args.no_compile_baseline:
                    try:
                        if compiled_step is None:
                            compiled_step = static_step(model, max_ctx, True)
                        ct_tokens, ct_s = static_decode(compiled_step, prompt, args.new)
                        systems["static_compile_graph"] = measure(
                            ct_tokens, ct_s / steps, hf_tokens, nbytes, bandwidth)
                        tokens_of["static_compile_graph"] = ct_tokens
                    except Exception as err:  # report, keep the other systems
                        print(f"# torch.compile baseline failed: {err}")
                exact = None  # float64 weights, built once for the cases that diverge
                for key, tokens in tokens_of.items():  # where each leaves HF, and why
                    if tokens != hf_tokens:
                        if exact is None and not args.no_float64_check:
                            exact = float64_twin(model)
                        systems[key]["divergence"] = divergence(
                            model, prompt[0].tolist(), tokens, hf_tokens, exact)
                del exact
                rec = {"model": name, "dtype": dtype_name, "context": context,
                       "new_tokens": args.new, "step_bytes": nbytes,
                       "prefill_ms": ours.prefill_seconds * 1e3, "systems": systems}
                records.append(rec)
                line = ", ".join(_summary(k, v) for k, v in systems.items())
                print(f"{name} {dtype_name} ctx {context}: {line}", flush=True)
                write_json({"meta": [meta], "records": records}, args.out_dir)  # if cut off
            if args.profile:
                records[-1]["profile"] = profile_decode(gen, args.contexts[-1])
            del gen, model, variant_gens, eager_step, compiled_step
            torch.cuda.empty_cache()
    write_results({"meta": [meta], "records": records}, args.out_dir, gpu_tag(gpu))
    return 0


def write_json(doc: dict[str, Any], out_dir: Path, tag: str | None = None) -> Path:
    """``decode-<tag>.json`` of ``doc`` (``meta`` and the records so far), by default named
    for the GPU of its first run; the tables and the plot are :func:`write_results`'
    business."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"decode-{tag or gpu_tag(doc['meta'][0]['gpu'])}.json"
    path.write_text(json.dumps(doc, indent=1))
    return path


def _summary(key: str, system: dict[str, Any]) -> str:
    """``llmopt 965 tok/s (50%, 159 launches)``: one system's line of a case."""
    notes = [f"{system['pct_bandwidth']:.0f}%"]
    if "launches" in system:
        notes.append(f"{system['launches']} launches")
    if "issue_us_per_token" in system:
        notes.append(f"issued in {system['issue_us_per_token']:.0f} us a step")
    if not system["tokens_equal_hf"]:
        notes.append("tokens differ")
    return f"{key} {system['tok_s']:.0f} tok/s ({', '.join(notes)})"


def write_results(doc: dict[str, Any], out_dir: Path, tag: str) -> None:
    """``decode-<tag>.json``, ``.md`` (a table) and ``.png`` (tok/s and the share of the
    copy bandwidth against the context, per model and system; needs matplotlib)."""
    write_json(doc, out_dir, tag)
    gpus = sorted({m["gpu"] for m in doc["meta"]})
    commits = list(dict.fromkeys(m["commit"] for m in doc["meta"] if m.get("commit")))
    lines = [f"# Decode, batch 1 ({', '.join(gpus)})", "",
             f"Commit {', '.join(commits) or '?'}.", "",
             "| model | dtype | context | system | tok/s | ms/token | % of copy bandwidth | "
             "tokens = HF | launches a step |", "|---|---|---:|---|---:|---:|---:|---|---:|"]
    for r in doc["records"]:
        for key, v in r["systems"].items():
            lines.append(f"| {r['model']} | {r['dtype']} | {r['context']} | {key} | "
                         f"{v['tok_s']:.0f} | {v['ms_per_token']:.2f} | "
                         f"{v['pct_bandwidth']:.1f} | {_agreement(v)} | "
                         f"{v.get('launches', '')} |")
    (out_dir / f"decode-{tag}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(doc, out_dir / f"decode-{tag}.png")


def _agreement(system: dict[str, Any]) -> str:
    """``True``, or where the tokens leave HF's and whether HF's choice was a near-tie."""
    if system["tokens_equal_hf"]:
        return "True"
    div = system.get("divergence")
    if not div:
        return f"False (from token {system['first_divergence']})"
    tie = "near-tie" if div["near_tie"] else "not a near-tie"
    judged = ""
    if "float64_gap" in div:
        winner = {"tokens": "this system's", "reference": "HF's"}.get(div["float64_prefers"],
                                                                       "neither")
        judged = f"; float64 gap {div['float64_gap']:.3g}: {winner} token"
    return (f"False (from token {div['step']}: logit gap {div['logit_gap']:.3g}, bound "
            f"{div['bound']:.3g}, {tie}{judged})")


def plot(doc: dict[str, Any], path: Path) -> None:
    """Per model and dtype, tok/s against the context for every system (the share of the
    copy bandwidth in the labels of llmopt's points)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"note: matplotlib is not installed; {path} not written")
        return
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in doc["records"]:
        groups.setdefault(f"{r['model']} {r['dtype']}", []).append(r)
    fig, axes = plt.subplots(1, len(groups), figsize=(5.5 * len(groups), 4), squeeze=False)
    for ax, (title, records) in zip(axes[0], groups.items(), strict=True):
        records.sort(key=lambda r: r["context"])
        contexts = [r["context"] for r in records]
        for system in records[0]["systems"]:
            tok_s = [r["systems"][system]["tok_s"] for r in records]
            ax.plot(contexts, tok_s, marker="o", label=system)
            if system == "llmopt":
                for c, t, r in zip(contexts, tok_s, records, strict=True):
                    ax.annotate(f"{r['systems'][system]['pct_bandwidth']:.0f}%", (c, t),
                                textcoords="offset points", xytext=(4, 6), fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(contexts, [str(c) for c in contexts])
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("decode tok/s (batch 1)")
        ax.set_ylim(bottom=0)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def merge_results(paths: list[Path], out_dir: Path) -> int:
    """Write one set of results from several runs' ``decode-*.json`` (records in order),
    named for the GPU of the first run (:func:`report.gpu_tag`)."""
    docs = [json.loads(p.read_text()) for p in paths]
    meta: list[Any] = []
    for d in docs:
        meta += d["meta"] if isinstance(d["meta"], list) else [d["meta"]]
    write_results({"meta": meta, "records": [r for d in docs for r in d["records"]]},
                  out_dir, gpu_tag(meta[0]["gpu"]) if meta else gpu_tag())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
