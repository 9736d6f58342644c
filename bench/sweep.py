"""The length sweep: decoder layers and a whole-model prefill at many sequence lengths.

Usage (on a GPU host; ``bash bench/run_bench.sh sweep ...`` runs it)::

    python bench/sweep.py --out-dir DIR [--models tinyllama qwen2.5-7b] [--what layers prefill]
                          [--seqs 1 17 100 ...] [--reps 30] [--warmup 3] [--rounds 3]
                          [--budget-ms 300] [--jobs N] [--lower-first] [--commit SHA]
                          [--fresh] [--tag h200] [--dtype float32|bfloat16|float16]
    python bench/sweep.py --list [...]             # the points, nothing run
    python bench/sweep.py --dry-run [N] [...]      # lower the first N points (1) on the CPU

**Points.** A decoder layer of each model (TinyLlama-1.1B and Qwen2.5-7B at their real
dimensions, ``--what layers``) and TinyLlama's whole-model prefill logits (``--what prefill``)
at every length of :data:`SEQS` — lengths no tile divides (1, 17, 100, 200, 255, 500, 1000,
2047) and the two the block suite has always measured (128, 512). Weights are built once per
model and series (seeded, every 1-D parameter perturbed as in ``bench/suite.py``), inputs are
seeded by the point's name (``tinyllama/s17/decoder_layer``). ``--dtype`` (default float32)
is the dtype of the weights and inputs, drawn as in float32 and rounded
(:func:`suite.block_model`), and of every system; in a 16-bit dtype each point also records
llmopt's error beside PyTorch eager's own on the same inputs (``err_vs_eager``,
``ok_vs_eager``, as in ``bench/suite.py``).

**Systems.** Those of ``bench/suite.py blocks``: eager, eager replayed from a CUDA graph,
``torch.compile(dynamic=False)`` compiled anew for each length (the strongest static-shape
baseline), and llmopt replayed from its CUDA graph, every time a median of CUDA-event-timed
calls in interleaved rounds. The timed calls of a point are fewer for long points: each
system gets about ``--budget-ms`` of timed calls (at least :data:`MIN_REPS`, at most
``--reps``), judged from one eager call. Each output is compared with the same module in
float64 (``max_err_rel``, ``tol``, ``ok``), as in the suite.

**Compiling.** llmopt's programs are captured on the meta device and lowered (for the GPU's
architecture) by ``--jobs`` worker processes while the GPU measures earlier points (with
``--lower-first`` all of them before any timing, so that no lowering shares the CPUs with
the host side of eager and torch.compile), each
program once into the kernel cache (keyed on the model, length, pipeline and llmopt's
sources), so a second run parses the lowered IR instead of lowering again; the worker also
compiles the CUDA with NVRTC into the same cache. Each point records the seconds its program
took to lower (``lower_s``) and to load (``llmopt_compile_s``).

**Schedules.** Each point records the schedule of every product and attention kernel
(``schedule``: :func:`llmopt.tools.schedules.schedule_records` of its Tile IR, identical
records of the layers of a whole model counted once with ``count``): shape, tile, tensor
cores or not, K slices, and whether it took the one-thread-per-output fallback.

**Results.** ``DIR/sweep-<tag>.json`` (``<tag>`` the GPU's model by default,
:func:`report.gpu_tag`; ``DIR/sweep-<dtype>-<tag>.json`` in a 16-bit dtype;
rewritten after every point; the top level carries
``min_vs_compile``, ``min_vs_eager_graph``, ``min_vs_best``, the geomeans, the points outside
tolerance and the fallback products), ``.md`` and ``.png`` (speed-up against sequence length,
one line per baseline) from ``bench/report.py``.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import math
import multiprocessing
import os
import sys
import time
import traceback
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from report import (
    DEFAULT_DTYPE,
    DEFAULT_TAG,
    DTYPES,
    Case,
    add_ratios,
    gpu_tag,
    results_stem,
    schedule_text,
    write_report,
)
from suite import (
    MODELS,
    Builder,
    Built,
    LayerCall,
    LogitsCall,
    ResultsFile,
    Timer,
    block_model,
    build_eager,
    build_eager_graph,
    build_torch_compile,
    case_name,
    case_seed,
    cleanup,
    configure_precision,
    cuda_samples_ms,
    error_text,
    git_commit,
    launch_count,
    measure,
    run_metadata,
    static_replay,
)
from torch import nn

SEQS = (1, 17, 100, 128, 200, 255, 500, 512, 1000, 2047)
"""The sequence lengths of the sweep."""

WHAT = {"layers": "decoder_layer", "prefill": "whole_model"}
"""What ``--what`` names, and the op name of its points."""

PREFILL_MODELS = ("tinyllama",)
"""The models whose whole-model prefill is swept (the others' layers only)."""

SOURCES: dict[str, Any] = {name: name for name in MODELS}
"""What each model is built from: a preset name of :mod:`llmopt.frontend.models` (or a
config, as :func:`~llmopt.frontend.models.build_model` takes it)."""

DEFAULT_PIPELINE = "lower-to-cuda"
MIN_REPS = 6
"""Timed calls of a system at a point, at least."""

DEFAULT_REPS, DEFAULT_WARMUP, DEFAULT_ROUNDS, DEFAULT_BUDGET_MS = 30, 3, 3, 300.0


@dataclass(frozen=True)
class Point:
    """One point of the sweep: ``model``'s ``what`` (``decoder_layer`` or ``whole_model``)
    at ``seq`` tokens in ``dtype`` (a ``--dtype`` name), the model built from ``source``
    (:func:`source_text`: fixed when the point is made, so the lowering processes build what
    the key names)."""

    model: str
    seq: int
    what: str
    source: str = ""
    dtype: str = DEFAULT_DTYPE

    def __post_init__(self) -> None:
        if not self.source:
            object.__setattr__(self, "source", source_text(SOURCES[self.model]))

    def built_from(self) -> Any:
        """What :func:`~llmopt.frontend.models.build_model` takes for this point."""
        return self.source if self.source in MODELS else json.loads(self.source)

    @property
    def name(self) -> str:
        return case_name(self.model, self.seq, self.what)


def source_text(source: Any) -> str:
    """A model's source as text: a preset's name, or a config's JSON."""
    return source if isinstance(source, str) else json.dumps(source, sort_keys=True,
                                                             default=str)


def plan(models: Sequence[str], seqs: Sequence[int], what: Sequence[str],
         dtype: str = DEFAULT_DTYPE) -> list[Point]:
    """The points asked for, in ``dtype``, in run order: the layers of each model, then the
    prefills, each series from the shortest length up."""
    points: list[Point] = []
    for kind in ("layers", "prefill"):
        if kind not in what:
            continue
        for model in models:
            if kind == "prefill" and model not in PREFILL_MODELS:
                continue
            points += [Point(model, s, WHAT[kind], dtype=dtype) for s in sorted(set(seqs))]
    return points


# --- lowering, in worker processes --------------------------------------------------------------


def _capture(point: Point) -> Any:
    """The point's program captured from its model built on the meta device (no weights) as
    the measured model is built (:func:`suite.block_model`), so its weight arguments have
    the dtypes of the weights bound to them."""
    from llmopt.frontend.models import capture_layer, capture_model

    meta = block_model(point.built_from(), point.what, device="meta",
                       dtype=getattr(torch, point.dtype))
    if point.what == "decoder_layer":
        return capture_layer(meta, point.seq)
    return capture_model(meta, point.seq)


def program_key(point: Point, pipeline: str) -> str:
    """The cache key of a point's lowered program: the model's identity (its preset or
    config), what is captured, the length, the dtype, the pipeline and llmopt's sources
    (:func:`llmopt.codegen.program_cache.program_cache_key`)."""
    from llmopt import registry
    from llmopt.codegen.program_cache import program_cache_key
    from llmopt.tools.llmopt_cli import model_identity

    layers = 1 if point.what == "decoder_layer" else None
    identity = (model_identity(point.source, layers) if point.source in MODELS
                else f"{point.source}\nlayers={layers}")
    elements = [text for text, _ in registry.pipeline_elements(pipeline)]
    return program_cache_key(f"sweep:{point.what}\n{identity}", point.seq, point.dtype,
                             elements)


def dedup_records(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Product and attention records, those equal but for the kernel's name (the same
    product in every layer) once, with ``count``."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.get("kind") not in ("product", "attention"):
            continue
        key = json.dumps({k: v for k, v in r.items() if k != "name"}, sort_keys=True)
        if key in out:
            out[key]["count"] += 1
        else:
            out[key] = {**r, "count": 1}
    return list(out.values())


def lower_point(point: Point, pipeline: str, arch: str) -> dict[str, Any]:
    """The point's program lowered for ``arch`` (from the cache when it is there):
    ``{"ir": CUDA-level IR text, "tol", "schedule", "lower_s", "kernels"}``, or
    ``{"error": ...}`` when capture or lowering fails. Compiles the CUDA with NVRTC too
    (into its cache) where NVRTC is installed. Runs without a GPU."""
    from llmopt.codegen.cache import default_cache
    from llmopt.registry import with_arch

    start = time.perf_counter()
    try:
        spec = with_arch(pipeline, arch)
        key = program_key(point, spec)
        cache = default_cache()
        blob = cache.get(key)
        if blob is not None:
            with_hit = json.loads(zlib.decompress(blob).decode())
            with_hit["cached"] = True
            return with_hit
        entry = _lower(point, spec, arch)
        entry["lower_s"] = time.perf_counter() - start
        cache.put(key, zlib.compress(json.dumps(entry).encode(), 6))
        return entry
    except Exception as err:  # recorded as llmopt's failure at this point
        traceback.print_exc(limit=6)
        return {"error": error_text(err), "lower_s": time.perf_counter() - start}


def _lower(point: Point, pipeline: str, arch: str) -> dict[str, Any]:
    from llmopt.api import cuda_source
    from llmopt.numerics import tolerance
    from llmopt.tools.schedules import lower_with_schedules

    captured = _capture(point)
    tol = tolerance(captured.module)
    records = lower_with_schedules(captured.module, pipeline)
    source = cuda_source(captured.module)
    entry: dict[str, Any] = {"ir": str(captured.module), "tol": tol,
                             "schedule": dedup_records(r.to_json() for r in records),
                             "kernels": source.count("__global__")}
    try:
        from llmopt.codegen.nvrtc import compile_cuda

        compile_cuda(source, arch=arch)
    except ImportError:
        pass
    except Exception as err:  # the executor will meet it again and report it
        entry["nvrtc_error"] = error_text(err)
    return entry


def worker_pool(jobs: int) -> ProcessPoolExecutor | None:
    """``jobs`` lowering processes (spawned: the parent may hold a CUDA context), or
    ``None`` for lowering in this process."""
    if jobs <= 1:
        return None
    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))


def submit_all(points: Sequence[Point], pipeline: str, arch: str,
               pool: ProcessPoolExecutor | None) -> dict[Point, Callable[[], dict[str, Any]]]:
    """A getter of each point's :func:`lower_point` entry: all submitted to ``pool`` now, in
    order, or lowered when first asked for without one."""
    getters: dict[Point, Callable[[], dict[str, Any]]] = {}
    for point in points:
        if pool is None:
            getters[point] = _memo(lambda p=point: lower_point(p, pipeline, arch))
        else:
            future: Future[dict[str, Any]] = pool.submit(lower_point, point, pipeline, arch)
            getters[point] = future.result
    return getters


def _memo(fn: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    done: list[dict[str, Any]] = []

    def get() -> dict[str, Any]:
        if not done:
            done.append(fn())
        return done[0]

    return get


# --- measuring, on the GPU ----------------------------------------------------------------------


def llmopt_builder(entry: Callable[[], dict[str, Any]], model: nn.Module) -> Builder:
    """A builder that loads a point's lowered program (``entry()``, waiting for its worker)
    into a :class:`~llmopt.codegen.executor.CompiledProgram` with a CUDA graph, its weights
    bound by name from ``model``."""

    def build(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> Built:
        import llmopt
        from llmopt.codegen.executor import CompiledProgram
        from llmopt.tools.llmopt_cli import model_weights

        got = entry()
        if "error" in got:
            raise RuntimeError(f"lowering failed: {got['error']}")
        start = time.perf_counter()
        program = CompiledProgram(llmopt.parse(got["ir"]), params=model_weights(model),
                                  cuda_graph=True)

        def call(*args: torch.Tensor) -> torch.Tensor:
            return program(*args)[0]

        call(*inputs)
        if any(t.is_cuda for t in inputs):
            torch.cuda.synchronize()
        return Built(fn=call, compile_s=time.perf_counter() - start, tol=got["tol"],
                     kernels=launch_count(program), replay=static_replay(call, program))

    return build


def reps_for(call_ms: float, *, reps: int, budget_ms: float) -> int:
    """Timed calls of each system at a point whose eager call takes ``call_ms``: as many
    as fit ``budget_ms``, at least :data:`MIN_REPS`, at most ``reps``."""
    if not math.isfinite(call_ms) or call_ms <= 0:
        return reps
    return max(min(MIN_REPS, reps), min(reps, int(budget_ms / call_ms)))


@dataclass
class Series:
    """What the points of one model and kind share: the model (weights on the device, in
    ``dtype``), the module eager runs, and its float64 copy for the references."""

    model: Any
    module: nn.Module
    wide: nn.Module
    dtype: torch.dtype = torch.float32


def build_series(model_name: str, what: str, device: str,
                 dtype: torch.dtype = torch.float32) -> Series:
    """The model of a series, seeded by ``<model>/<what>``, perturbed and cast to ``dtype``
    (:func:`suite.block_model`), its module and the float64 copy (widened from the
    ``dtype`` weights, so exactly their values)."""
    from llmopt.frontend.models import decoder_layers

    model = block_model(SOURCES[model_name], what, device=device, dtype=dtype,
                        perturb_seed=case_seed(f"{model_name}/{what}"))
    layer = what == "decoder_layer"
    module = LayerCall(decoder_layers(model)[0]) if layer else LogitsCall(model)
    return Series(model, module, copy.deepcopy(module).double(), dtype)


def point_inputs(series: Series, point: Point, device: str) -> tuple[torch.Tensor, ...]:
    """The point's inputs, seeded by its name: hidden states (drawn in float32, then in the
    series' dtype) and the rotary ``cos``/``sin`` (in the weights' dtype) of a layer, token
    ids of a prefill."""
    from llmopt.frontend.models import position_embeddings

    config = series.model.config
    gen = torch.Generator(device=device).manual_seed(case_seed(point.name))
    if point.what == "decoder_layer":
        x = torch.randn(1, point.seq, config.hidden_size, generator=gen, device=device)
        cos, sin = (t.to(device) for t in position_embeddings(series.model, point.seq))
        return x.to(series.dtype), cos, sin
    return (torch.randint(0, config.vocab_size, (1, point.seq), generator=gen, device=device),)


def reference(series: Series, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
    """The series' float64 module on ``inputs`` (floating inputs widened)."""
    args = [t.double() if t.is_floating_point() else t for t in inputs]
    with torch.no_grad():
        out = series.wide(*args)
    return (out[0] if isinstance(out, tuple) else out).detach()


def run_point(point: Point, series: Series, entry: Callable[[], dict[str, Any]], *,
              device: str = "cuda", reps: int = DEFAULT_REPS, warmup: int = DEFAULT_WARMUP,
              rounds: int = DEFAULT_ROUNDS, budget_ms: float = DEFAULT_BUDGET_MS,
              timer: Timer | None = None, builders: Mapping[str, Builder] | None = None,
              ) -> Case:
    """Measure one point: every system built, checked against the float64 reference and
    timed (:func:`suite.measure`, without the copying calls), with the point's schedule
    records, tolerance and lowering time. ``builders`` replace systems by name; ``timer``
    replaces the CUDA-event timer."""
    row: Case = {"name": point.name, "model": point.model, "seq": point.seq, "op": point.what}
    timer = timer or cuda_samples_ms
    try:
        with torch.no_grad():
            inputs = point_inputs(series, point, device)
            row["shapes"] = [list(t.shape) for t in inputs]
            ref = reference(series, inputs)
            systems = {"eager": build_eager, "eager_graph": build_eager_graph,
                       "compile": build_torch_compile,
                       "llmopt": llmopt_builder(entry, series.model), **(builders or {})}
            probe = timer(lambda: series.module(*inputs), 1, 1)
            n = reps_for(probe[0] if probe else math.nan, reps=reps, budget_ms=budget_ms)
            row["reps"] = n
            measure(row, series.module, inputs, ref, systems, timer=timer, reps=n,
                    warmup=warmup, rounds=min(rounds, n), copies=False, dtype=series.dtype)
    except Exception as err:  # the point itself could not be set up
        row.setdefault("error", error_text(err))
        traceback.print_exc(limit=4)
    got = entry()
    for key in ("schedule", "lower_s", "kernels", "nvrtc_error", "cached"):
        if key in got:
            row[key if key != "kernels" else "cuda_kernels"] = got[key]
    if "error" in got:
        row.setdefault("error", f"lowering failed: {got['error']}")
    if row.get("tol") is None:
        row["tol"] = got.get("tol")
    err, tol = row.get("max_err_rel"), row.get("tol")
    row["ok"] = (bool(math.isfinite(err) and err <= tol)
                 if isinstance(err, float) and isinstance(tol, float) else None)
    cleanup()
    return add_ratios(row)


# --- the command line ---------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, help="where the results files go")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--what", nargs="+", choices=list(WHAT), default=list(WHAT),
                        help="decoder layers of each model, the whole-model prefill of "
                             f"{', '.join(PREFILL_MODELS)} (default: both)")
    parser.add_argument("--seqs", nargs="+", type=int, default=list(SEQS),
                        help="sequence lengths (default: %(default)s)")
    parser.add_argument("--reps", type=int, default=DEFAULT_REPS,
                        help="timed calls per system at most (%(default)s)")
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP,
                        help="untimed calls before each round's timed calls (%(default)s)")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                        help="interleaved timing rounds (%(default)s)")
    parser.add_argument("--budget-ms", type=float, default=DEFAULT_BUDGET_MS,
                        help="timed milliseconds per system and point, which sets the timed "
                             f"calls between {MIN_REPS} and --reps (%(default)s)")
    parser.add_argument("--jobs", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)),
                        help="processes lowering llmopt's programs ahead of the GPU "
                             "(default: half the CPUs, at most 8)")
    parser.add_argument("--lower-first", action="store_true",
                        help="lower every point before timing any (no lowering processes "
                             "share the CPUs with the timed calls; takes longer)")
    parser.add_argument("--pipeline", default=DEFAULT_PIPELINE,
                        help="the pass pipeline llmopt lowers with (%(default)s)")
    parser.add_argument("--commit", help="the commit measured (default: git HEAD, if any)")
    parser.add_argument("--tag", default=None,
                        help=f"file-name suffix (default: the GPU's model, {DEFAULT_TAG} "
                        "without a GPU)")
    parser.add_argument("--dtype", choices=DTYPES, default=DEFAULT_DTYPE,
                        help="the weights' and inputs' dtype, every system's (%(default)s); "
                             "16 bits also judge llmopt's error against PyTorch's own, into "
                             "sweep-<dtype>-<tag>.*")
    parser.add_argument("--fresh", action="store_true",
                        help="drop the points an earlier run left in the results file")
    parser.add_argument("--list", action="store_true", help="print the points and exit")
    parser.add_argument("--dry-run", nargs="?", type=int, const=1, default=None, metavar="N",
                        help="lower the first N points (default 1) on the CPU, print their "
                             "schedules, time nothing")
    args = parser.parse_args(argv)
    args.tag = args.tag or gpu_tag()
    if any(s < 1 for s in args.seqs):
        parser.error("--seqs must be positive")
    if args.reps < 1 or args.rounds < 1 or args.warmup < 0 or args.budget_ms <= 0:
        parser.error("--reps, --rounds and --budget-ms must be positive, --warmup not negative")
    if args.dry_run is not None and args.dry_run < 1:
        parser.error("--dry-run takes a positive number of points")
    if not plan(args.models, args.seqs, args.what):
        parser.error(f"nothing to run: the prefill is swept for {', '.join(PREFILL_MODELS)} "
                     "only")
    if not (args.list or args.dry_run) and args.out_dir is None:
        parser.error("--out-dir is required")
    return args


def dry_run(points: Sequence[Point], pipeline: str, jobs: int) -> int:
    """Lower ``points`` for the current target (the sm_90 default without a GPU) and print
    each one's lowering time and product schedules; no GPU, nothing timed."""
    from llmopt.target import current_target

    arch = current_target().arch
    pool = worker_pool(min(jobs, len(points)))
    try:
        getters = submit_all(points, pipeline, arch, pool)
        status = 0
        for point in points:
            got = getters[point]()
            if "error" in got:
                print(f"{point.name}: lowering failed: {got['error']}")
                status = 1
                continue
            products = schedule_text({"schedule": got["schedule"]})
            fallbacks = [r for r in got["schedule"]
                         if r.get("fallback") and (r.get("rows") or 0) >= 16]
            print(f"{point.name}: {point.dtype}, lowered for {arch} in {got['lower_s']:.1f} s"
                  f"{' (cached)' if got.get('cached') else ''}, {got['kernels']} kernels, "
                  f"tol {got['tol']:.1e}; products: {products}")
            for r in got["schedule"]:
                print(f"  {r['name']}: {r['kind']} {r.get('shape') or ''} {r['schedule']} "
                      f"{r.get('tile') or ''} split {r.get('split')} x{r.get('count')}")
            if fallbacks:
                print(f"  {sum(r.get('count', 1) for r in fallbacks)} products of 16 rows or "
                      "more one thread per output")
    finally:
        if pool is not None:
            pool.shutdown()
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Run the sweep (see the module docstring); returns the exit status."""
    args = parse_args(argv)
    points = plan(args.models, args.seqs, args.what, args.dtype)
    if args.list:
        print("\n".join(p.name for p in points))
        return 0
    if args.dry_run is not None:
        return dry_run(points[: args.dry_run], args.pipeline, args.jobs)
    if not torch.cuda.is_available():
        print("the sweep needs a CUDA GPU (torch.cuda.is_available() is False); --dry-run "
              "lowers points on the CPU", file=sys.stderr)
        return 2
    return run(points, args)


def run(points: Sequence[Point], args: argparse.Namespace, device: str = "cuda",
        timer: Timer | None = None, builders: Mapping[str, Builder] | None = None) -> int:
    """Measure ``points`` on ``device`` into ``args.out_dir`` and write the report."""
    from llmopt.target import current_target

    began = time.perf_counter()
    configure_precision()
    commit = args.commit or git_commit()
    arch = current_target().arch
    meta = run_metadata("sweep", commit=commit, reps=args.reps, warmup=args.warmup,
                        rounds=args.rounds, pipeline=args.pipeline, dtype=args.dtype)
    meta |= {"arch": arch, "seqs": sorted(set(args.seqs)), "budget_ms": args.budget_ms,
             "jobs": args.jobs, "lower_first": args.lower_first,
             "timing": f"median of up to {args.reps} calls per system (each system about "
                       f"{args.budget_ms:g} ms of timed calls, at least {MIN_REPS}), each "
                       f"between CUDA events and synchronised, in up to {args.rounds} "
                       f"interleaved rounds of {args.warmup} warm-up calls and the timed calls"}
    path = args.out_dir / f"{results_stem('sweep', args.tag, args.dtype)}.json"
    results = ResultsFile(path, meta, fresh=args.fresh)
    print(f"{len(points)} sweep points in {args.dtype} on {meta['gpu']} ({arch}, torch "
          f"{meta['torch']}, commit {commit}) -> {results.path}", flush=True)
    pool = worker_pool(min(args.jobs, len(points)))
    try:
        getters = submit_all(points, args.pipeline, arch, pool)
        if args.lower_first:
            for get in getters.values():
                get()
        groups: dict[tuple[str, str], list[Point]] = {}
        for point in points:
            groups.setdefault((point.model, point.what), []).append(point)
        k = 0
        for (model, what), members in groups.items():
            series = build_series(model, what, device, getattr(torch, args.dtype))
            for point in members:
                k += 1
                print(f"[{k}/{len(points)}] {point.name}", flush=True)
                start = time.perf_counter()
                row = run_point(point, series, getters[point], device=device, reps=args.reps,
                                warmup=args.warmup, rounds=args.rounds,
                                budget_ms=args.budget_ms, timer=timer, builders=builders)
                row["commit"] = commit
                row["case_s"] = time.perf_counter() - start
                results.add(row)
                print(f"  {_short(row)}", flush=True)
            del series
            gc.collect()
            cleanup()
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    doc = results.doc()
    doc["sweep_s"] = time.perf_counter() - began
    for path in write_report(doc, args.out_dir, args.tag):
        print(f"wrote {path}")
    print(f"min vs torch.compile {doc.get('min_vs_compile')}, min vs eager CUDA graph "
          f"{doc.get('min_vs_eager_graph')}, {doc.get('fallback_products')} fallback products, "
          f"{doc.get('cases_outside_tolerance')} outside tolerance, "
          f"{doc['sweep_s']:.0f} s in all")
    return 0


def _short(row: Case) -> str:
    """One progress line for a finished point."""

    def num(key: str, spec: str) -> str:
        value = row.get(key)
        return format(value, spec) if isinstance(value, float) else "-"

    text = (f"eager {num('eager_ms', '.4f')} graph {num('eager_graph_ms', '.4f')} compile "
            f"{num('compile_ms', '.4f')} llmopt {num('llmopt_ms', '.4f')} ms; vs compile "
            f"{num('vs_compile', '.2f')}, vs graph {num('vs_eager_graph', '.2f')}; err "
            f"{num('max_err_rel', '.1e')} tol {num('tol', '.1e')} ok {row.get('ok')}; "
            f"{schedule_text(row)}")
    if "err_vs_eager" in row:
        text += (f"; err / eager's {num('err_vs_eager', '.2f')} (eager "
                 f"{num('eager_err_rel', '.1e')}), goal met {row.get('ok_vs_eager')}")
    return text + (f"  [{row['error']}]" if row.get("error") else "")


if __name__ == "__main__":
    sys.exit(main())
