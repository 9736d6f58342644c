"""Summaries, merges and reports of the benchmark suite's results (``bench/suite.py``).

A results file is JSON: run metadata (``gpu``, ``driver``, ``torch``, ``cuda``, ``commit``,
``date``, ``dtype``, ``kind`` = ``"ops"``, ``"blocks"`` or ``"sweep"``), ``cases`` (one dict
per case, keyed by its ``name``) and the summary :func:`summarize` computes from the cases:
``geomean_vs_eager``, ``geomean_vs_eager_graph``, ``geomean_vs_compile``, ``min_vs_best``,
``min_vs_eager``, ``min_vs_eager_graph``, ``min_vs_compile``, ``cases_total``,
``cases_timed``, ``cases_failed``. A sweep (``bench/sweep.py``: decoder layers and prefill
over sequence lengths) also counts its points outside tolerance and its products left one
thread per output (``fallback_products``).

**16-bit runs** (``dtype`` ``bfloat16`` or ``float16``) add two things where their cases
carry them. Matrix products timed against cuBLAS (``cublas_ms``, the bare product replayed
from a CUDA graph) get ``vs_cublas = cublas_ms / llmopt_ms`` and, from the product's
``mnk`` = ``[M, N, K]``, ``llmopt_tflops`` and ``cublas_tflops`` (``2·M·N·K`` / time); the
summary ``geomean_vs_cublas``, ``min_vs_cublas`` and ``cases_below_cublas_goal`` (below
:data:`CUBLAS_GOAL`). Cases with llmopt's error beside PyTorch eager's own 16-bit error
(``err_vs_eager`` = their ratio, at most :data:`ERROR_GOAL` by the goal; ``ok_vs_eager`` =
within that goal plus one epsilon of the dtype, the criterion the GPU tests of 16-bit ops
assert, see ``bench/suite.py``) give ``max_err_vs_eager``, ``cases_over_2x_eager`` and
``cases_over_error_goal``. The files of a dtype other than
float32 carry it in their names: ``<kind>-<dtype>-<tag>.json`` (``ops-bfloat16-h200.json``).

Usage::

    python bench/report.py DIR_OR_JSON [DIR_OR_JSON ...] --out-dir bench/results
                           [--tag h200] [--dtype float32|bfloat16|float16]

merges the case lists of every results file given (a directory stands for the
``ops-<tag>.json``, ``blocks-<tag>.json`` and ``sweep-<tag>.json`` in it, with ``--dtype
bfloat16`` the ``ops-bfloat16-<tag>.json`` ...), per kind, in order: a later file's case
replaces an earlier one of the same name (files of different dtypes are not merged). For
each kind (and dtype) it writes ``<kind>-<tag>.json`` (summary recomputed),
``<kind>-<tag>.md`` (a table, the geomeans, the failures and the losses; for a sweep also
each point's product schedules; for a 16-bit run the products against cuBLAS and the errors
against PyTorch's own) and ``<kind>-<tag>.png`` (speed-ups per case, for a sweep against
the sequence length; needs matplotlib, skipped with a note where it is missing). Only the
standard library is needed otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

Case = dict[str, Any]
Doc = dict[str, Any]

KINDS = ("ops", "blocks", "sweep")
"""The kinds of results file the suite (``ops``, ``blocks``) and the sweep write."""

BASELINES = (("eager", "eager_ms"), ("eager_graph", "eager_graph_ms"),
             ("compile", "compile_ms"), ("compile_graphs", "compile_graphs_ms"))
"""The PyTorch systems llmopt is compared with: each gives ``vs_<name> = <field> /
llmopt_ms``; ``compile_graphs`` (torch.compile with CUDA graphs) only where it was timed."""

DEFAULT_TAG = "h200"
"""The suffix of the file names (``ops-h200.json``): the GPU the numbers come from, where no
GPU is visible (:func:`gpu_tag` names the one that is)."""


def gpu_tag(name: str | None = None) -> str:
    """The file-name suffix of results measured on the GPU called ``name`` (default: the
    current CUDA device's, :data:`DEFAULT_TAG` where there is none): its model number in
    lower case, so that an H100's numbers never land in an H200's files.

    >>> gpu_tag("NVIDIA H100 80GB HBM3"), gpu_tag("NVIDIA H200"), gpu_tag("NVIDIA GeForce RTX 5090")
    ('h100', 'h200', 'rtx5090')
    """
    if name is None:
        try:
            import torch
        except ImportError:
            return DEFAULT_TAG
        if not torch.cuda.is_available():
            return DEFAULT_TAG
        name = torch.cuda.get_device_name()
    words = [w for w in re.split(r"[\s\-_]+", name) if w]
    for i, word in enumerate(words):
        if re.fullmatch(r"[A-Za-z]*\d+[A-Za-z]*", word) and not re.fullmatch(r"\d+GB", word, re.I):
            series = words[i - 1] if i and word.isdigit() and words[i - 1].isupper() else ""
            return (series + word).lower()
    return re.sub(r"[^a-z0-9]+", "", name.lower()) or DEFAULT_TAG

DEFAULT_DTYPE = "float32"
"""The dtype whose files have no dtype in their names (:func:`results_stem`)."""

DTYPES = ("float32", "bfloat16", "float16")
"""The dtypes the suite and the sweep run in (``--dtype``)."""

CUBLAS_GOAL = 0.8
"""The speed llmopt's matrix products should reach, as a share of cuBLAS's on the same
product (``vs_cublas`` at least this)."""

ERROR_GOAL = 2.0
"""In 16 bits llmopt's error against float64 should be at most this many times PyTorch
eager's own 16-bit error on the same inputs (``err_vs_eager`` at most this)."""

SUMMARY_KEYS = ("geomean_vs_eager", "geomean_vs_eager_graph", "geomean_vs_compile",
                "min_vs_best", "min_vs_eager", "min_vs_eager_graph", "min_vs_compile",
                "cases_total", "cases_timed", "cases_failed", "geomean_vs_compile_graphs",
                "min_vs_compile_graphs", "cases_outside_tolerance", "fallback_products",
                "geomean_vs_cublas", "min_vs_cublas", "cases_below_cublas_goal",
                "max_err_vs_eager", "cases_over_2x_eager", "cases_over_error_goal")
"""The top-level keys :func:`summarize` computes (those of ``compile_graphs`` only when some
case has a ``compile_graphs_ms``, ``cases_outside_tolerance`` and ``fallback_products`` only
for a sweep, those of cuBLAS only when some case has a ``cublas_ms``, those of the error
goal only when some case has an ``err_vs_eager``)."""


def results_stem(kind: str, tag: str = DEFAULT_TAG, dtype: str | None = DEFAULT_DTYPE) -> str:
    """The name of a results file without its suffix: ``<kind>-<tag>`` for float32 (the
    names the FP32 results have always had), ``<kind>-<dtype>-<tag>`` for another dtype
    (``ops-bfloat16-h200``)."""
    dtype = dtype or DEFAULT_DTYPE
    return f"{kind}-{tag}" if dtype == DEFAULT_DTYPE else f"{kind}-{dtype}-{tag}"


def doc_dtype(doc: Doc) -> str:
    """The dtype of a results document (float32 where it names none)."""
    return str(doc.get("dtype") or DEFAULT_DTYPE)


# --- per case and summary -----------------------------------------------------------------------


def _positive(value: Any) -> bool:
    """Whether ``value`` is a positive finite number."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


def _ratio(num: Any, den: Any) -> float | None:
    """``num / den`` when both are positive finite numbers, else ``None``."""
    return float(num) / float(den) if _positive(num) and _positive(den) else None


def _baselines(case: Case) -> list[tuple[str, str]]:
    """The :data:`BASELINES` a case reports: all but ``compile_graphs`` always, that one when
    the case has its time field."""
    return [(name, field) for name, field in BASELINES
            if name != "compile_graphs" or field in case]


def add_ratios(case: Case) -> Case:
    """Set ``vs_eager``, ``vs_eager_graph``, ``vs_compile`` (``vs_compile_graphs`` when timed)
    and ``vs_best`` of ``case`` from its times, in place.

    ``vs_<system> = <system>_ms / llmopt_ms`` for each PyTorch system of :data:`BASELINES`
    and ``vs_best`` = the fastest of their times (those that exist) / ``llmopt_ms``: above 1
    llmopt is faster. A missing time gives ``None``. A case timed against cuBLAS (it has a
    ``cublas_ms``) also gets ``vs_cublas``, and one with a product shape ``mnk`` gets
    ``llmopt_tflops`` (and ``cublas_tflops``): cuBLAS runs only the case's bare product, so
    it is no part of ``vs_best``. Returns ``case``.
    """
    llmopt = case.get("llmopt_ms")
    for name, field in _baselines(case):
        case[f"vs_{name}"] = _ratio(case.get(field), llmopt)
    best = _best_ms(case)
    case["vs_best"] = _ratio(best, llmopt) if best is not None else None
    if "cublas_ms" in case:
        case["vs_cublas"] = _ratio(case.get("cublas_ms"), llmopt)
    if "mnk" in case:
        case["llmopt_tflops"] = tflops(case.get("mnk"), llmopt)
        if "cublas_ms" in case:
            case["cublas_tflops"] = tflops(case.get("mnk"), case.get("cublas_ms"))
    return case


def tflops(mnk: Any, ms: Any) -> float | None:
    """The TFLOP/s of a ``[M, N, K]`` matrix product that takes ``ms`` milliseconds:
    ``2·M·N·K / time`` (one multiply and one add per term), ``None`` without both."""
    if (not isinstance(mnk, list | tuple) or len(mnk) != 3 or not all(map(_positive, mnk))
            or not _positive(ms)):
        return None
    m, n, k = mnk
    return 2.0 * m * n * k / (float(ms) * 1e-3) / 1e12


def geomean(values: Iterable[Any]) -> float | None:
    """The geometric mean of the positive finite values (``None`` when there are none)."""
    logs = [math.log(v) for v in values if _positive(v)]
    return math.exp(sum(logs) / len(logs)) if logs else None


def failed(case: Case) -> bool:
    """Whether llmopt produced no time for ``case`` (it failed to compile or to run)."""
    return case.get("llmopt_ms") is None


def summarize(cases: Sequence[Case]) -> Doc:
    """The top-level summary of ``cases`` (ratios recomputed from the times first).

    Geomeans are over the cases with an llmopt time (and the baseline's time); a case
    without an llmopt time counts in ``cases_failed`` and in nothing else.
    """
    for case in cases:
        add_ratios(case)
    timed = [c for c in cases if not failed(c)]

    def smallest(key: str) -> float | None:
        values = [c[key] for c in timed if _positive(c.get(key))]
        return min(values) if values else None

    summary: Doc = {
        "geomean_vs_eager": geomean(c.get("vs_eager") for c in timed),
        "geomean_vs_eager_graph": geomean(c.get("vs_eager_graph") for c in timed),
        "geomean_vs_compile": geomean(c.get("vs_compile") for c in timed),
        "min_vs_best": smallest("vs_best"),
        "min_vs_eager": smallest("vs_eager"),
        "min_vs_eager_graph": smallest("vs_eager_graph"),
        "min_vs_compile": smallest("vs_compile"),
        "cases_total": len(cases),
        "cases_timed": len(timed),
        "cases_failed": len(cases) - len(timed),
    }
    if any("compile_graphs_ms" in c for c in cases):
        summary["geomean_vs_compile_graphs"] = geomean(c.get("vs_compile_graphs")
                                                       for c in timed)
        summary["min_vs_compile_graphs"] = smallest("vs_compile_graphs")
    if any("cublas_ms" in c for c in cases):
        summary["geomean_vs_cublas"] = geomean(c.get("vs_cublas") for c in timed)
        summary["min_vs_cublas"] = smallest("vs_cublas")
        summary["cases_below_cublas_goal"] = sum(
            1 for c in timed if _positive(c.get("vs_cublas")) and c["vs_cublas"] < CUBLAS_GOAL)
    if any("err_vs_eager" in c for c in cases):
        ratios = [c["err_vs_eager"] for c in timed if _positive(c.get("err_vs_eager"))]
        summary["max_err_vs_eager"] = max(ratios) if ratios else None
        summary["cases_over_2x_eager"] = sum(1 for r in ratios if r > ERROR_GOAL)
        summary["cases_over_error_goal"] = sum(1 for c in timed
                                               if c.get("ok_vs_eager") is False)
    if any("schedule" in c for c in cases):  # a sweep
        summary["cases_outside_tolerance"] = sum(1 for c in timed if c.get("ok") is False)
        summary["fallback_products"] = sum(r.get("count", 1) for c in cases
                                           for r in fallbacks(c))
    return summary


def fallbacks(case: Case, rows: int = 16) -> list[dict[str, Any]]:
    """The schedule records of a sweep point's products of at least ``rows`` rows that were
    left one thread per output (a record may stand for several kernels: its ``count``)."""
    return [r for r in case.get("schedule") or []
            if r.get("kind") == "product" and r.get("fallback") and (r.get("rows") or 0) >= rows]


def _best_ms(case: Case) -> float | None:
    """The fastest of the case's PyTorch times (:data:`BASELINES`)."""
    times = [case[f] for _, f in _baselines(case) if _positive(case.get(f))]
    return min(times) if times else None


def losses(cases: Sequence[Case]) -> list[Case]:
    """The cases where llmopt is slower than the fastest PyTorch system (``vs_best < 1``),
    slowest first."""
    slow = [c for c in cases if c.get("vs_best") is not None and c["vs_best"] < 1]
    return sorted(slow, key=lambda c: c["vs_best"])


def with_summary(doc: Doc) -> Doc:
    """``doc`` with its summary keys recomputed from its cases, in place; returns it."""
    doc.update(summarize(doc.get("cases", [])))
    return doc


# --- merging ------------------------------------------------------------------------------------


def merge(docs: Sequence[Doc]) -> Doc:
    """One results document from several of the same kind: the union of their cases, a later
    document's case replacing an earlier one of the same name (in the earlier one's place),
    the metadata of the last document, the commits of all, and the summary recomputed.

    Raises:
        ValueError: no document, or documents of different kinds or dtypes.
    """
    if not docs:
        raise ValueError("nothing to merge")
    kinds = {d.get("kind") for d in docs} - {None}
    if len(kinds) > 1:
        raise ValueError(f"cannot merge results of different kinds: {sorted(kinds)}")
    dtypes = {doc_dtype(d) for d in docs}
    if len(dtypes) > 1:
        raise ValueError(f"cannot merge results of different dtypes: {sorted(dtypes)}")
    by_name: dict[str, Case] = {}
    commits: list[str] = []
    for doc in docs:
        for case in doc.get("cases", []):
            by_name[case["name"]] = dict(case)
        for commit in [doc.get("commit"), *doc.get("commits", [])]:
            if commit and commit not in commits:
                commits.append(commit)
    merged: Doc = {k: v for k, v in docs[-1].items() if k not in ("cases", *SUMMARY_KEYS)}
    if kinds:
        merged["kind"] = kinds.pop()
    merged["commits"] = commits
    merged["cases"] = list(by_name.values())
    return with_summary(merged)


def load(path: str | Path) -> Doc:
    """A results file; its ``kind`` is guessed from the file name when it has none."""
    path = Path(path)
    doc: Doc = json.loads(path.read_text())
    if "kind" not in doc:
        doc["kind"] = next((k for k in KINDS if path.name.startswith(k)), None)
    return doc


def find_results(paths: Sequence[str | Path], tag: str = DEFAULT_TAG,
                 dtype: str = DEFAULT_DTYPE) -> list[Path]:
    """The results files named by ``paths``: files as given, directories as their
    ``<kind>-<tag>.json`` files (``<kind>-<dtype>-<tag>.json`` for a dtype other than
    float32, :func:`results_stem`). A path that is neither is reported on stderr."""
    found: list[Path] = []
    names = [f"{results_stem(kind, tag, dtype)}.json" for kind in KINDS]
    for entry in map(Path, paths):
        if entry.is_file():
            found.append(entry)
        elif entry.is_dir():
            hits = [entry / name for name in names]
            hits = [h for h in hits if h.is_file()]
            if not hits:
                print(f"note: no {' or '.join(names)} in {entry}", file=sys.stderr)
            found.extend(hits)
        else:
            print(f"note: {entry} does not exist", file=sys.stderr)
    return found


# --- writing ------------------------------------------------------------------------------------


def _fmt(value: Any, spec: str) -> str:
    """``value`` formatted with ``spec``, or ``—`` when missing."""
    if value is None:
        return "—"
    if not isinstance(value, int | float) or not math.isfinite(value):
        return str(value)
    return format(value, spec)


def _ratio_text(value: float | None) -> str:
    return _fmt(value, ".2f") + ("×" if value is not None else "")


def _ok_text(case: Case) -> str:
    if failed(case):
        return "error"
    ok = case.get("ok")
    return "—" if ok is None else ("yes" if ok else "NO")


def _precision_text(doc: Doc) -> str:
    """How the run computed, for the head of a report: ``FP32, TF32 off`` for float32 (as
    the FP32 reports have always said), else the 16-bit dtype every system ran in."""
    dtype = doc_dtype(doc)
    if dtype == DEFAULT_DTYPE:
        return "FP32, TF32 off"
    reduced = doc.get("reduced_precision_reduction")
    note = ("" if reduced is None else
            f", cuBLAS's reduced-precision reductions {'allowed' if reduced else 'off'} "
            "(PyTorch's setting)")
    return (f"{dtype} weights and inputs, every system in {dtype}{note}; the float64 "
            f"reference is computed from the same {dtype} values")


def markdown(doc: Doc) -> str:
    """The Markdown report of a results document: the run, one table row per case, the
    geomeans, the failures and the losses (``vs_best < 1``); where the cases carry them, the
    products against cuBLAS (:func:`_cublas_lines`) and llmopt's error against PyTorch's own
    16-bit error (:func:`_error_goal_lines`); a sweep's is :func:`sweep_markdown`."""
    if doc.get("kind") == "sweep":
        return sweep_markdown(doc)
    cases: list[Case] = doc.get("cases", [])
    summary = summarize(cases)
    kind = doc.get("kind") or "results"
    commits = doc.get("commits") or ([doc["commit"]] if doc.get("commit") else [])
    lines = [
        f"# llmopt benchmark: {kind}",
        "",
        f"GPU {doc.get('gpu') or '?'} (driver {doc.get('driver') or '?'}), torch "
        f"{doc.get('torch') or '?'}, CUDA {doc.get('cuda') or '?'}, commit "
        f"{', '.join(commits) or '?'}, {doc.get('date') or '?'}. {_precision_text(doc)}; median of "
        f"{doc.get('reps') or '?'} timed calls per system. vs X = X ms / llmopt ms (above 1: "
        "llmopt is faster); eager graph = eager replayed from a CUDA graph, as llmopt is; "
        "best = the fastest PyTorch system timed; max err = "
        "max|llmopt − float64| / max|float64|, ok = within the case's tolerance.",
        "",
        "| case | eager ms | eager graph ms | compile ms | llmopt ms | vs eager "
        "| vs eager graph | vs compile | vs best | max err | ok |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for c in cases:
        lines.append(
            f"| {c['name']} | {_fmt(c.get('eager_ms'), '.4g')} | "
            f"{_fmt(c.get('eager_graph_ms'), '.4g')} | "
            f"{_fmt(c.get('compile_ms'), '.4g')} | {_fmt(c.get('llmopt_ms'), '.4g')} | "
            f"{_ratio_text(c.get('vs_eager'))} | {_ratio_text(c.get('vs_eager_graph'))} | "
            f"{_ratio_text(c.get('vs_compile'))} | "
            f"{_ratio_text(c.get('vs_best'))} | {_fmt(c.get('max_err_rel'), '.1e')} | "
            f"{_ok_text(c)} |"
        )
    lines += ["", *_summary_lines(summary)]
    graphs = [c for c in cases if "compile_graphs_ms" in c]
    if graphs:
        lines += ["", "## torch.compile with CUDA graphs (`mode=\"reduce-overhead\"`)", "",
                  "Inductor's kernels replayed from CUDA graphs as llmopt's are, so PyTorch's "
                  "per-launch host overhead is gone; part of vs best.", "",
                  "| case | compile ms | compile + graphs ms | llmopt ms | vs compile + graphs |",
                  "|---|---:|---:|---:|---:|"]
        lines += [f"| {c['name']} | {_fmt(c.get('compile_ms'), '.4g')} | "
                  f"{_fmt(c.get('compile_graphs_ms'), '.4g')} | "
                  f"{_fmt(c.get('llmopt_ms'), '.4g')} | "
                  f"{_ratio_text(c.get('vs_compile_graphs'))} |" for c in graphs]
        lines += ["", "- geomean vs torch.compile with CUDA graphs: "
                  f"**{_ratio_text(summary.get('geomean_vs_compile_graphs'))}**"]
    lines += _cublas_lines(cases, summary) + _error_goal_lines(cases, summary, doc_dtype(doc))
    lines += _problem_lines(cases)
    return "\n".join(lines) + "\n"


def _mnk_text(case: Case) -> str:
    mnk = case.get("mnk")
    return "×".join(map(str, mnk)) if isinstance(mnk, list | tuple) else "—"


def _cublas_lines(cases: Sequence[Case], summary: Doc) -> list[str]:
    """The matrix products timed against cuBLAS (cases with a ``cublas_ms``): a table of
    both times, the ratio and both TFLOP/s per shape, with the summary; nothing when no case
    has one."""
    products = [c for c in cases if "cublas_ms" in c]
    if not products:
        return []
    lines = ["", "## Matrix products against cuBLAS", "",
             "cuBLAS = the case's bare product (`F.linear` of its input and weight, in the "
             "same dtype; matmul_residual without the residual, silu_mul_down on `silu(g) * u` "
             "computed beforehand) replayed from a CUDA graph and timed in the same rounds. "
             "M×N×K: rows × outputs × reduction; TFLOP/s = 2·M·N·K / time; vs cuBLAS = "
             f"cuBLAS ms / llmopt ms, the goal at least {CUBLAS_GOAL:g}×.", "",
             "| case | M×N×K | cuBLAS ms | llmopt ms | vs cuBLAS | cuBLAS TFLOP/s "
             f"| llmopt TFLOP/s | ≥ {CUBLAS_GOAL:g}× |",
             "|---|---|---:|---:|---:|---:|---:|:---:|"]
    for c in products:
        ratio = c.get("vs_cublas")
        goal = "—" if ratio is None else ("yes" if ratio >= CUBLAS_GOAL else "NO")
        lines.append(f"| {c['name']} | {_mnk_text(c)} | {_fmt(c.get('cublas_ms'), '.4g')} | "
                     f"{_fmt(c.get('llmopt_ms'), '.4g')} | {_ratio_text(ratio)} | "
                     f"{_fmt(c.get('cublas_tflops'), '.1f')} | "
                     f"{_fmt(c.get('llmopt_tflops'), '.1f')} | {goal} |")
    lines += ["", f"- geomean vs cuBLAS: **{_ratio_text(summary.get('geomean_vs_cublas'))}**, "
              f"min vs cuBLAS: **{_ratio_text(summary.get('min_vs_cublas'))}**; below "
              f"{CUBLAS_GOAL:g}×: {summary.get('cases_below_cublas_goal', 0)} of "
              f"{len(products)} products"]
    return lines


def _error_goal_lines(cases: Sequence[Case], summary: Doc, dtype: str) -> list[str]:
    """llmopt's error beside PyTorch eager's own error on the same inputs (cases with an
    ``err_vs_eager``, i.e. a 16-bit run): a table of both, their ratio and whether the goal
    is met, with the summary; nothing when no case has one."""
    judged = [c for c in cases if "err_vs_eager" in c]
    if not judged:
        return []
    lines = ["", f"## Accuracy against PyTorch's own {dtype}", "",
             "err = max|out − float64| / max|float64|, the float64 reference computed from the "
             f"same {dtype} weights and inputs; eager err is PyTorch eager's own {dtype} error "
             f"on them. Goal: llmopt err ≤ {ERROR_GOAL:g} × eager err; ≤ {ERROR_GOAL:g}× + ε "
             "adds one epsilon of the dtype (for outputs PyTorch gets exactly), the criterion "
             "the GPU tests of 16-bit ops assert.", "",
             f"| case | llmopt err | eager err | llmopt / eager | ≤ {ERROR_GOAL:g}× "
             f"| ≤ {ERROR_GOAL:g}× + ε |",
             "|---|---:|---:|---:|:---:|:---:|"]
    for c in judged:
        ratio, ok = c.get("err_vs_eager"), c.get("ok_vs_eager")
        strict = "—" if not _positive(ratio) else ("yes" if ratio <= ERROR_GOAL else "NO")
        lines.append(f"| {c['name']} | {_fmt(c.get('max_err_rel'), '.2e')} | "
                     f"{_fmt(c.get('eager_err_rel'), '.2e')} | {_fmt(ratio, '.2f')} | "
                     f"{strict} | {'—' if ok is None else ('yes' if ok else 'NO')} |")
    lines += ["", "- largest llmopt err / eager err: "
              f"**{_fmt(summary.get('max_err_vs_eager'), '.2f')}**; over {ERROR_GOAL:g}×: "
              f"{summary.get('cases_over_2x_eager', 0)}, over {ERROR_GOAL:g}× + ε: "
              f"{summary.get('cases_over_error_goal', 0)}"]
    return lines


def _summary_lines(summary: Doc) -> list[str]:
    """The geomeans and minima of a summary, as Markdown list items."""
    timed = summary["cases_timed"]
    return [
        f"- geomean vs eager: **{_ratio_text(summary['geomean_vs_eager'])}** "
        f"({timed} of {summary['cases_total']} cases timed)",
        f"- geomean vs eager CUDA graph: **{_ratio_text(summary['geomean_vs_eager_graph'])}**",
        f"- geomean vs torch.compile: **{_ratio_text(summary['geomean_vs_compile'])}**",
        f"- min vs eager CUDA graph: **{_ratio_text(summary['min_vs_eager_graph'])}**, "
        f"min vs torch.compile: **{_ratio_text(summary['min_vs_compile'])}**, "
        f"min vs best: **{_ratio_text(summary['min_vs_best'])}**",
        f"- failed (no llmopt time): {summary['cases_failed']}",
    ]


def _problem_lines(cases: Sequence[Case]) -> list[str]:
    """The failures, the cases outside tolerance and the losses, as Markdown sections."""
    lines: list[str] = []
    broken = [c for c in cases if failed(c)]
    if broken:
        lines += ["", "## Failures", ""]
        lines += [f"- {c['name']}: {c.get('error') or 'no llmopt time'}" for c in broken]
    inaccurate = [c for c in cases if not failed(c) and c.get("ok") is False]
    if inaccurate:
        lines += ["", "## Outside tolerance", ""]
        lines += [f"- {c['name']}: max err {_fmt(c.get('max_err_rel'), '.2e')} > tolerance "
                  f"{_fmt(c.get('tol'), '.2e')}" for c in inaccurate]
    over = [c for c in cases if not failed(c) and (
        c.get("ok_vs_eager") is False
        or (_positive(c.get("err_vs_eager")) and c["err_vs_eager"] > ERROR_GOAL))]
    if over:
        lines += ["", f"## Over the error goal ({ERROR_GOAL:g}× PyTorch's own)", ""]
        lines += [f"- {c['name']}: err {_fmt(c.get('max_err_rel'), '.2e')}, PyTorch's "
                  f"{_fmt(c.get('eager_err_rel'), '.2e')}" for c in over]
    slow = losses(cases)
    lines += ["", f"## Losses (vs best < 1): {len(slow)}", ""]
    lines += [f"- {c['name']}: {_ratio_text(c['vs_best'])} ({_fmt(c.get('llmopt_ms'), '.4g')} "
              f"ms vs {_fmt(_best_ms(c), '.4g')}"
              " ms)" for c in slow] or ["none"]
    return lines


def table(doc: Doc) -> str:
    """A plain-text table for the terminal: one line per case, then the geomeans."""
    cases: list[Case] = doc.get("cases", [])
    summary = summarize(cases)
    width = max([len(c["name"]) for c in cases] + [4])
    head = (f"{'case':{width}s} {'eager ms':>10s} {'graph ms':>10s} {'compile ms':>10s} "
            f"{'llmopt ms':>10s} {'vs eager':>8s} {'vs graph':>8s} {'vs comp':>8s} "
            f"{'vs best':>8s} {'max err':>8s}  ok")
    lines = [head, "-" * len(head)]
    for c in cases:
        lines.append(
            f"{c['name']:{width}s} {_fmt(c.get('eager_ms'), '10.4f')} "
            f"{_fmt(c.get('eager_graph_ms'), '10.4f')} "
            f"{_fmt(c.get('compile_ms'), '10.4f')} {_fmt(c.get('llmopt_ms'), '10.4f')} "
            f"{_fmt(c.get('vs_eager'), '8.2f')} {_fmt(c.get('vs_eager_graph'), '8.2f')} "
            f"{_fmt(c.get('vs_compile'), '8.2f')} "
            f"{_fmt(c.get('vs_best'), '8.2f')} {_fmt(c.get('max_err_rel'), '8.1e')}  "
            f"{_ok_text(c)}"
        )
    lines += [
        "-" * len(head),
        f"geomean vs eager {_fmt(summary['geomean_vs_eager'], '.3f')}, vs eager graph "
        f"{_fmt(summary['geomean_vs_eager_graph'], '.3f')}, vs torch.compile "
        f"{_fmt(summary['geomean_vs_compile'], '.3f')}, min vs best "
        f"{_fmt(summary['min_vs_best'], '.3f')}; {summary['cases_timed']} timed, "
        f"{summary['cases_failed']} failed",
    ]
    if "geomean_vs_compile_graphs" in summary:
        lines += [f"{c['name']:{width}s} torch.compile + CUDA graphs "
                  f"{_fmt(c.get('compile_graphs_ms'), '.4f')} ms, vs llmopt "
                  f"{_fmt(c.get('vs_compile_graphs'), '.2f')}"
                  for c in cases if "compile_graphs_ms" in c]
        lines.append("geomean vs torch.compile + CUDA graphs "
                     f"{_fmt(summary['geomean_vs_compile_graphs'], '.3f')}")
    if "geomean_vs_cublas" in summary:
        lines += [f"{c['name']:{width}s} cuBLAS {_fmt(c.get('cublas_ms'), '.4f')} ms "
                  f"({_fmt(c.get('cublas_tflops'), '.1f')} TFLOP/s), llmopt "
                  f"{_fmt(c.get('llmopt_tflops'), '.1f')} TFLOP/s, vs cuBLAS "
                  f"{_fmt(c.get('vs_cublas'), '.2f')}" for c in cases if "cublas_ms" in c]
        lines.append(f"geomean vs cuBLAS {_fmt(summary['geomean_vs_cublas'], '.3f')}, min "
                     f"{_fmt(summary['min_vs_cublas'], '.3f')}, "
                     f"{summary['cases_below_cublas_goal']} below {CUBLAS_GOAL:g}")
    if "max_err_vs_eager" in summary:
        lines.append(f"largest err / PyTorch's own err {_fmt(summary['max_err_vs_eager'], '.2f')}"
                     f", {summary['cases_over_2x_eager']} over {ERROR_GOAL:g}x, "
                     f"{summary['cases_over_error_goal']} over {ERROR_GOAL:g}x + eps")
    return "\n".join(lines)


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float replaced by its name (``"nan"``, ``"inf"``),
    which strict JSON cannot hold, in nested dicts, lists and tuples too."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def write_json(doc: Doc, path: str | Path) -> None:
    """Write ``doc`` to ``path`` atomically (a reader never sees half a file); non-finite
    floats become strings (:func:`json_safe`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(json_safe(doc), indent=1, allow_nan=False) + "\n")
    os.replace(tmp, path)


def _dtype_suffix(doc: Doc) -> str:
    """`` (bfloat16)`` for a plot title of a run in a dtype other than float32, else
    nothing (the FP32 titles stay as they were)."""
    dtype = doc_dtype(doc)
    return "" if dtype == DEFAULT_DTYPE else f" ({dtype})"


def plot(doc: Doc, path: str | Path) -> bool:
    """A PNG of llmopt's speed-up over eager, eager replayed from a CUDA graph,
    torch.compile and, where timed, cuBLAS per case (log scale, a line at 1); for a sweep
    :func:`sweep_plot`. Returns
    False, after printing a note, when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"note: matplotlib is not installed; {path} not written")
        return False
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    if doc.get("kind") == "sweep":
        return sweep_plot(doc, path, plt)
    cases = [c for c in doc.get("cases", []) if not failed(c)]
    names = [c["name"] for c in cases]
    height = max(3.0, 0.36 * len(cases) + 1.5)
    fig, ax = plt.subplots(figsize=(9, height))
    rows = range(len(cases))
    bars = [("vs_eager", "over eager"), ("vs_eager_graph", "over eager CUDA graph"),
            ("vs_compile", "over torch.compile")]
    if any("vs_cublas" in c for c in cases):
        bars.append(("vs_cublas", "over cuBLAS (the bare product)"))
    bar = 0.81 / len(bars)
    seen = [1.0]
    for k, (key, label) in enumerate(bars):
        shift = (k - (len(bars) - 1) / 2) * bar
        values = [c[key] if _positive(c.get(key)) else math.nan for c in cases]
        seen += [v for v in values if math.isfinite(v)]
        # bars grow from the line at 1: right of it llmopt is faster, left of it slower
        ax.barh([r + shift for r in rows], [v - 1.0 for v in values], left=1.0, height=bar,
                label=label)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlim(min(seen) / 1.25, max(seen) * 1.25)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}×"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_yticks(list(rows), names, fontsize=7)
    ax.set_ylim(len(cases) - 0.5, -0.5)  # the first case on top
    ax.set_xlabel("llmopt speed-up (× faster; log scale)")
    summary = summarize(doc.get("cases", []))
    ax.set_title(f"llmopt {doc.get('kind') or ''}{_dtype_suffix(doc)} on {doc.get('gpu') or '?'}: "
                 "geomean "
                 f"{_fmt(summary['geomean_vs_eager'], '.2f')}× over eager, "
                 f"{_fmt(summary['geomean_vs_eager_graph'], '.2f')}× over eager graph, "
                 f"{_fmt(summary['geomean_vs_compile'], '.2f')}× over torch.compile",
                 fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# --- the length sweep ---------------------------------------------------------------------------


SWEEP_LINES = (("vs_eager", "over eager"), ("vs_eager_graph", "over eager CUDA graph"),
               ("vs_compile", "over torch.compile"),
               ("vs_compile_graphs", "over torch.compile with CUDA graphs"))
"""The speed-ups a sweep plots against the sequence length, one line each (the last where it
was timed)."""


def series(cases: Sequence[Case]) -> dict[str, list[Case]]:
    """A sweep's points grouped by what was run (``<model> <op>``, e.g. ``tinyllama
    decoder_layer``), each group in sequence-length order, the groups in order of first
    appearance."""
    groups: dict[str, list[Case]] = {}
    for case in cases:
        groups.setdefault(f"{case.get('model')} {case.get('op')}", []).append(case)
    return {k: sorted(v, key=lambda c: c.get("seq") or 0) for k, v in groups.items()}


def schedule_text(case: Case) -> str:
    """A point's product schedules in a few words: how many products took each schedule
    (``tc`` tensor cores, ``fma`` register tiles, ``warp`` a warp per output of one row,
    ``coop`` a block per output, ``fallback`` one thread per output)."""
    counts = {"tensor_cores": 0, "register_tile": 0, "warp_gemv": 0, "coop_reduce": 0,
              "thread_per_output": 0}
    for r in case.get("schedule") or []:
        if r.get("kind") == "product" and r.get("schedule") in counts:
            counts[r["schedule"]] += r.get("count", 1)
    if not any(counts.values()):
        return "—"
    short = {"tensor_cores": "tc", "register_tile": "fma", "warp_gemv": "warp",
             "coop_reduce": "coop", "thread_per_output": "fallback"}
    return ", ".join(f"{n} {short[k]}" for k, n in counts.items() if n)


def _product_line(record: dict[str, Any]) -> str:
    what = record.get("tile") or ""
    extra = [f"split {record['split']}" if (record.get("split") or 1) > 1 else "",
             f"×{record['count']}" if (record.get("count") or 1) > 1 else ""]
    return " ".join(x for x in (str(record.get("shape") or "?"), record.get("schedule") or "?",
                                what, *extra) if x)


def sweep_markdown(doc: Doc) -> str:
    """The Markdown report of a sweep: the run, a table per series (decoder layers of each
    model, the prefill) with each length's times, speed-ups, error against float64 with its
    tolerance and its products' schedules; the summary; every point's product schedules; the
    fallbacks; in a 16-bit run llmopt's error against PyTorch's own; the failures, points
    outside tolerance and losses."""
    cases: list[Case] = doc.get("cases", [])
    summary = summarize(cases)
    commits = doc.get("commits") or ([doc["commit"]] if doc.get("commit") else [])
    lines = [
        "# llmopt benchmark: length sweep",
        "",
        f"GPU {doc.get('gpu') or '?'} (driver {doc.get('driver') or '?'}), torch "
        f"{doc.get('torch') or '?'}, CUDA {doc.get('cuda') or '?'}, commit "
        f"{', '.join(commits) or '?'}, {doc.get('date') or '?'}. {_precision_text(doc)}; "
        f"{doc.get('timing') or 'median of the timed calls per system'}. vs X = X ms / llmopt "
        "ms (above 1: llmopt is faster); eager graph = eager replayed from a CUDA graph, as "
        "llmopt is; err = max|out − float64| / max|float64| against the tolerance tol; "
        "products: how many took each schedule (tc: tensor cores, fma: register tile, coop: "
        "a block per output, fallback: one thread per output).",
    ]
    for title, points in series(cases).items():
        lines += [
            "", f"## {title}", "",
            "| seq | eager ms | eager graph ms | compile ms | llmopt ms | vs eager "
            "| vs eager graph | vs compile | err | tol | ok | products |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|---|",
        ]
        lines += [
            f"| {c.get('seq')} | {_fmt(c.get('eager_ms'), '.4g')} | "
            f"{_fmt(c.get('eager_graph_ms'), '.4g')} | {_fmt(c.get('compile_ms'), '.4g')} | "
            f"{_fmt(c.get('llmopt_ms'), '.4g')} | {_ratio_text(c.get('vs_eager'))} | "
            f"{_ratio_text(c.get('vs_eager_graph'))} | {_ratio_text(c.get('vs_compile'))} | "
            f"{_fmt(c.get('max_err_rel'), '.1e')} | {_fmt(c.get('tol'), '.1e')} | "
            f"{_ok_text(c)} | {schedule_text(c)} |" for c in points]
    lines += ["", "## Summary", "", *_summary_lines(summary),
              f"- outside tolerance: {summary.get('cases_outside_tolerance', 0)}; products of "
              f"16 rows or more left one thread per output: "
              f"{summary.get('fallback_products', 0)}"]
    lines += ["", "## Product schedules", ""]
    for c in cases:
        products = [r for r in c.get("schedule") or [] if r.get("kind") == "product"]
        attention = [r for r in c.get("schedule") or [] if r.get("kind") == "attention"]
        parts = [_product_line(r) for r in products]
        parts += [f"attention flash {r.get('flash')}"
                  + (" tc" if r.get("tensor_cores") else "") for r in attention]
        lines.append(f"- {c['name']}: " + ("; ".join(parts) if parts else "—"))
    slow_paths = [(c, r) for c in cases for r in fallbacks(c)]
    if slow_paths:
        lines += ["", "## One thread per output (16 rows or more)", ""]
        lines += [f"- {c['name']}: {r.get('name')} {r.get('shape')}" for c, r in slow_paths]
    lines += _error_goal_lines(cases, summary, doc_dtype(doc))
    lines += _problem_lines(cases)
    return "\n".join(lines) + "\n"


def sweep_plot(doc: Doc, path: str | Path, plt: Any) -> bool:
    """The sweep's PNG: for each series a panel of llmopt's speed-up against the sequence
    length (both axes logarithmic), one line per PyTorch baseline, a line at 1."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    groups = {k: [c for c in v if not failed(c)] for k, v in series(doc.get("cases", [])).items()}
    groups = {k: v for k, v in groups.items() if v}
    panels = max(1, len(groups))
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 4.2), squeeze=False)
    for ax, (title, points) in zip(axes[0], groups.items(), strict=False):
        seqs = [c["seq"] for c in points]
        seen = [1.0]
        for key, label in SWEEP_LINES:
            values = [c[key] if _positive(c.get(key)) else math.nan for c in points]
            if all(math.isnan(v) for v in values):
                continue
            seen += [v for v in values if math.isfinite(v)]
            ax.plot(seqs, values, marker="o", markersize=3, label=label)
        ax.axhline(1.0, color="black", linewidth=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(min(seen) / 1.25, max(seen) * 1.25)
        ax.set_xticks(seqs, [str(s) for s in seqs], fontsize=7, rotation=90)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}×"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("sequence length")
        ax.set_ylabel("llmopt speed-up (× faster)")
        ax.set_title(title, fontsize=9)
        ax.grid(which="both", alpha=0.3)
        ax.legend(fontsize=7)
    summary = summarize(doc.get("cases", []))
    fig.suptitle(f"llmopt length sweep{_dtype_suffix(doc)} on {doc.get('gpu') or '?'}: min "
                 f"{_fmt(summary['min_vs_compile'], '.2f')}× torch.compile, min "
                 f"{_fmt(summary['min_vs_eager_graph'], '.2f')}× eager CUDA graph", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_report(doc: Doc, out_dir: str | Path, tag: str = DEFAULT_TAG) -> list[Path]:
    """Write ``<kind>-<tag>.json``, ``.md`` and (with matplotlib) ``.png`` of ``doc`` into
    ``out_dir`` (``<kind>-<dtype>-<tag>.*`` when the document's dtype is not float32,
    :func:`results_stem`), the summary recomputed first; returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with_summary(doc)
    stem = results_stem(doc.get("kind") or "results", tag, doc_dtype(doc))
    written = [out / f"{stem}.json", out / f"{stem}.md"]
    write_json(doc, written[0])
    written[1].write_text(markdown(doc))
    if plot(doc, out / f"{stem}.png"):
        written.append(out / f"{stem}.png")
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", help="results directories or JSON files")
    parser.add_argument("--out-dir", default="bench/results")
    parser.add_argument("--tag", default=DEFAULT_TAG,
                        help="file-name suffix: <kind>-<tag>.json (default %(default)s)")
    parser.add_argument("--dtype", choices=DTYPES, default=DEFAULT_DTYPE,
                        help="whose files a directory stands for: <kind>-<tag>.json for "
                             "float32, <kind>-<dtype>-<tag>.json for another (%(default)s)")
    args = parser.parse_args(argv)
    files = find_results(args.inputs, args.tag, args.dtype)
    if not files:
        print("no results files found", file=sys.stderr)
        return 1
    docs = [load(f) for f in files]
    for kind in KINDS:
        for dtype in DTYPES:  # files named one by one may hold several dtypes
            group = [d for d in docs if d.get("kind") == kind and doc_dtype(d) == dtype]
            if not group:
                continue
            merged = merge(group)
            for path in write_report(merged, args.out_dir, args.tag):
                print(f"wrote {path}")
            print(table(merged))
    return 0


if __name__ == "__main__":
    sys.exit(main())
