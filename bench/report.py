"""Summaries, merges and reports of the benchmark suite's results (``bench/suite.py``).

A results file is JSON: run metadata (``gpu``, ``driver``, ``torch``, ``cuda``, ``commit``,
``date``, ``kind`` = ``"ops"`` or ``"blocks"``), ``cases`` (one dict per case, keyed by its
``name``) and the summary :func:`summarize` computes from the cases: ``geomean_vs_eager``,
``geomean_vs_compile``, ``min_vs_best``, ``cases_total``, ``cases_timed``, ``cases_failed``.

Usage::

    python bench/report.py DIR_OR_JSON [DIR_OR_JSON ...] --out-dir bench/results

merges the case lists of every results file given (a directory stands for the
``ops-<tag>.json`` and ``blocks-<tag>.json`` in it), per kind, in order: a later file's case
replaces an earlier one of the same name. For each kind it writes ``<kind>-<tag>.json``
(summary recomputed), ``<kind>-<tag>.md`` (a table, the geomeans, the failures and the
losses) and ``<kind>-<tag>.png`` (speed-ups per case; needs matplotlib, skipped with a note
where it is missing). Only the standard library is needed otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

Case = dict[str, Any]
Doc = dict[str, Any]

KINDS = ("ops", "blocks")
"""The two kinds of results file the suite writes."""

DEFAULT_TAG = "h200"
"""The suffix of the file names (``ops-h200.json``): the GPU the numbers come from."""

SUMMARY_KEYS = ("geomean_vs_eager", "geomean_vs_compile", "min_vs_best", "cases_total",
                "cases_timed", "cases_failed", "geomean_vs_compile_graphs")
"""The top-level keys :func:`summarize` computes (the last only when some case has a
``compile_graphs_ms``)."""


# --- per case and summary -----------------------------------------------------------------------


def _positive(value: Any) -> bool:
    """Whether ``value`` is a positive finite number."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


def _ratio(num: Any, den: Any) -> float | None:
    """``num / den`` when both are positive finite numbers, else ``None``."""
    return float(num) / float(den) if _positive(num) and _positive(den) else None


def add_ratios(case: Case) -> Case:
    """Set ``vs_eager``, ``vs_compile`` and ``vs_best`` of ``case`` from its times, in place.

    ``vs_eager = eager_ms / llmopt_ms``, ``vs_compile = compile_ms / llmopt_ms`` and
    ``vs_best = min(eager_ms, compile_ms) / llmopt_ms`` (over the times that exist): above 1
    llmopt is faster. A missing time gives ``None``. Returns ``case``.
    """
    llmopt, eager, compiled = case.get("llmopt_ms"), case.get("eager_ms"), case.get("compile_ms")
    case["vs_eager"] = _ratio(eager, llmopt)
    case["vs_compile"] = _ratio(compiled, llmopt)
    if "compile_graphs_ms" in case:
        case["vs_compile_graphs"] = _ratio(case["compile_graphs_ms"], llmopt)
    baselines = [t for t in (eager, compiled) if _positive(t)]
    case["vs_best"] = _ratio(min(baselines), llmopt) if baselines else None
    return case


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
    best = [c["vs_best"] for c in timed if c.get("vs_best") is not None]
    summary: Doc = {
        "geomean_vs_eager": geomean(c.get("vs_eager") for c in timed),
        "geomean_vs_compile": geomean(c.get("vs_compile") for c in timed),
        "min_vs_best": min(best) if best else None,
        "cases_total": len(cases),
        "cases_timed": len(timed),
        "cases_failed": len(cases) - len(timed),
    }
    if any("compile_graphs_ms" in c for c in cases):
        summary["geomean_vs_compile_graphs"] = geomean(c.get("vs_compile_graphs")
                                                       for c in timed)
    return summary


def _best_ms(case: Case) -> float | None:
    """The faster of the case's eager and torch.compile times."""
    times = [t for t in (case.get("eager_ms"), case.get("compile_ms")) if _positive(t)]
    return min(times) if times else None


def losses(cases: Sequence[Case]) -> list[Case]:
    """The cases where llmopt is slower than the better of eager and torch.compile
    (``vs_best < 1``), slowest first."""
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
        ValueError: no document, or documents of different kinds.
    """
    if not docs:
        raise ValueError("nothing to merge")
    kinds = {d.get("kind") for d in docs} - {None}
    if len(kinds) > 1:
        raise ValueError(f"cannot merge results of different kinds: {sorted(kinds)}")
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


def find_results(paths: Sequence[str | Path], tag: str = DEFAULT_TAG) -> list[Path]:
    """The results files named by ``paths``: files as given, directories as their
    ``<kind>-<tag>.json`` files. A path that is neither is reported on stderr."""
    found: list[Path] = []
    for entry in map(Path, paths):
        if entry.is_file():
            found.append(entry)
        elif entry.is_dir():
            hits = [entry / f"{kind}-{tag}.json" for kind in KINDS]
            hits = [h for h in hits if h.is_file()]
            if not hits:
                print(f"note: no {' or '.join(f'{k}-{tag}.json' for k in KINDS)} in {entry}",
                      file=sys.stderr)
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


def markdown(doc: Doc) -> str:
    """The Markdown report of a results document: the run, one table row per case, the
    geomeans, the failures and the losses (``vs_best < 1``)."""
    cases: list[Case] = doc.get("cases", [])
    summary = summarize(cases)
    kind = doc.get("kind") or "results"
    commits = doc.get("commits") or ([doc["commit"]] if doc.get("commit") else [])
    lines = [
        f"# llmopt benchmark: {kind}",
        "",
        f"GPU {doc.get('gpu') or '?'} (driver {doc.get('driver') or '?'}), torch "
        f"{doc.get('torch') or '?'}, CUDA {doc.get('cuda') or '?'}, commit "
        f"{', '.join(commits) or '?'}, {doc.get('date') or '?'}. FP32, TF32 off; median of "
        f"{doc.get('reps') or '?'} timed calls per system. vs X = X ms / llmopt ms (above 1: "
        "llmopt is faster); best = the faster of eager and torch.compile; max err = "
        "max|llmopt − float64| / max|float64|, ok = within the case's tolerance.",
        "",
        "| case | eager ms | compile ms | llmopt ms | vs eager | vs compile | vs best "
        "| max err | ok |",
        "|---|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for c in cases:
        lines.append(
            f"| {c['name']} | {_fmt(c.get('eager_ms'), '.4g')} | "
            f"{_fmt(c.get('compile_ms'), '.4g')} | {_fmt(c.get('llmopt_ms'), '.4g')} | "
            f"{_ratio_text(c.get('vs_eager'))} | {_ratio_text(c.get('vs_compile'))} | "
            f"{_ratio_text(c.get('vs_best'))} | {_fmt(c.get('max_err_rel'), '.1e')} | "
            f"{_ok_text(c)} |"
        )
    timed = summary["cases_timed"]
    lines += [
        "",
        f"- geomean vs eager: **{_ratio_text(summary['geomean_vs_eager'])}** "
        f"({timed} of {summary['cases_total']} cases timed)",
        f"- geomean vs torch.compile: **{_ratio_text(summary['geomean_vs_compile'])}**",
        f"- min vs best: **{_ratio_text(summary['min_vs_best'])}**",
        f"- failed (no llmopt time): {summary['cases_failed']}",
    ]
    graphs = [c for c in cases if "compile_graphs_ms" in c]
    if graphs:
        lines += ["", "## torch.compile with CUDA graphs (`mode=\"reduce-overhead\"`)", "",
                  "Context, not a baseline of vs best: Inductor's kernels replayed from CUDA "
                  "graphs as llmopt's are, so PyTorch's per-launch host overhead is gone.", "",
                  "| case | compile ms | compile + graphs ms | llmopt ms | vs compile + graphs |",
                  "|---|---:|---:|---:|---:|"]
        lines += [f"| {c['name']} | {_fmt(c.get('compile_ms'), '.4g')} | "
                  f"{_fmt(c.get('compile_graphs_ms'), '.4g')} | "
                  f"{_fmt(c.get('llmopt_ms'), '.4g')} | "
                  f"{_ratio_text(c.get('vs_compile_graphs'))} |" for c in graphs]
        lines += ["", "- geomean vs torch.compile with CUDA graphs: "
                  f"**{_ratio_text(summary.get('geomean_vs_compile_graphs'))}**"]
    broken = [c for c in cases if failed(c)]
    if broken:
        lines += ["", "## Failures", ""]
        lines += [f"- {c['name']}: {c.get('error') or 'no llmopt time'}" for c in broken]
    inaccurate = [c for c in cases if not failed(c) and c.get("ok") is False]
    if inaccurate:
        lines += ["", "## Outside tolerance", ""]
        lines += [f"- {c['name']}: max err {_fmt(c.get('max_err_rel'), '.2e')} > tolerance "
                  f"{_fmt(c.get('tol'), '.2e')}" for c in inaccurate]
    slow = losses(cases)
    lines += ["", f"## Losses (vs best < 1): {len(slow)}", ""]
    lines += [f"- {c['name']}: {_ratio_text(c['vs_best'])} ({_fmt(c.get('llmopt_ms'), '.4g')} "
              f"ms vs {_fmt(_best_ms(c), '.4g')}"
              " ms)" for c in slow] or ["none"]
    return "\n".join(lines) + "\n"


def table(doc: Doc) -> str:
    """A plain-text table for the terminal: one line per case, then the geomeans."""
    cases: list[Case] = doc.get("cases", [])
    summary = summarize(cases)
    width = max([len(c["name"]) for c in cases] + [4])
    head = (f"{'case':{width}s} {'eager ms':>10s} {'compile ms':>10s} {'llmopt ms':>10s} "
            f"{'vs eager':>8s} {'vs comp':>8s} {'vs best':>8s} {'max err':>8s}  ok")
    lines = [head, "-" * len(head)]
    for c in cases:
        lines.append(
            f"{c['name']:{width}s} {_fmt(c.get('eager_ms'), '10.4f')} "
            f"{_fmt(c.get('compile_ms'), '10.4f')} {_fmt(c.get('llmopt_ms'), '10.4f')} "
            f"{_fmt(c.get('vs_eager'), '8.2f')} {_fmt(c.get('vs_compile'), '8.2f')} "
            f"{_fmt(c.get('vs_best'), '8.2f')} {_fmt(c.get('max_err_rel'), '8.1e')}  "
            f"{_ok_text(c)}"
        )
    lines += [
        "-" * len(head),
        f"geomean vs eager {_fmt(summary['geomean_vs_eager'], '.3f')}, vs torch.compile "
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


def plot(doc: Doc, path: str | Path) -> bool:
    """A PNG of llmopt's speed-up over eager and over torch.compile per case (log scale, a
    line at 1). Returns False, after printing a note, when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"note: matplotlib is not installed; {path} not written")
        return False
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    cases = [c for c in doc.get("cases", []) if not failed(c)]
    names = [c["name"] for c in cases]
    height = max(3.0, 0.28 * len(cases) + 1.5)
    fig, ax = plt.subplots(figsize=(9, height))
    rows = range(len(cases))
    bar = 0.4
    seen = [1.0]
    for shift, key, label in ((-bar / 2, "vs_eager", "over eager"),
                              (bar / 2, "vs_compile", "over torch.compile")):
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
    ax.set_title(f"llmopt {doc.get('kind') or ''} on {doc.get('gpu') or '?'}: geomean "
                 f"{_fmt(summary['geomean_vs_eager'], '.2f')}× over eager, "
                 f"{_fmt(summary['geomean_vs_compile'], '.2f')}× over torch.compile",
                 fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_report(doc: Doc, out_dir: str | Path, tag: str = DEFAULT_TAG) -> list[Path]:
    """Write ``<kind>-<tag>.json``, ``.md`` and (with matplotlib) ``.png`` of ``doc`` into
    ``out_dir``, the summary recomputed first; returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with_summary(doc)
    stem = f"{doc.get('kind') or 'results'}-{tag}"
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
    args = parser.parse_args(argv)
    files = find_results(args.inputs, args.tag)
    if not files:
        print("no results files found", file=sys.stderr)
        return 1
    docs = [load(f) for f in files]
    for kind in KINDS:
        of_kind = [d for d in docs if d.get("kind") == kind]
        if not of_kind:
            continue
        merged = merge(of_kind)
        for path in write_report(merged, args.out_dir, args.tag):
            print(f"wrote {path}")
        print(table(merged))
    return 0


if __name__ == "__main__":
    sys.exit(main())
