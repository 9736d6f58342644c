"""``bench/sweep.py`` on the CPU: its points and arguments, lowering a (small) point with its
schedule records and the cache, one point measured with stand-in systems and timer, the dry
run, and the sweep's report (JSON summary, Markdown, plot) from synthetic points."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import report  # noqa: E402
import suite  # noqa: E402
import sweep  # noqa: E402

TINY_LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 96,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 16, "vocab_size": 97, "max_position_embeddings": 256,
              "rms_norm_eps": 1e-5}


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Both models are a small Llama; the kernel cache is private."""
    monkeypatch.setitem(sweep.SOURCES, "tinyllama", TINY_LLAMA)
    monkeypatch.setitem(sweep.SOURCES, "qwen2.5-7b", {**TINY_LLAMA, "model_type": "qwen2"})
    monkeypatch.setenv("LLMOPT_CACHE_DIR", str(tmp_path / "cache"))


# --- points and arguments -----------------------------------------------------------------------


def test_the_default_sweep() -> None:
    """Layers of both models and TinyLlama's prefill at ten lengths, eight of which no tile
    divides."""
    args = sweep.parse_args(["--out-dir", "x"])
    points = sweep.plan(args.models, args.seqs, args.what)
    assert sweep.SEQS == (1, 17, 100, 128, 200, 255, 500, 512, 1000, 2047)
    assert len(points) == 30
    assert points[0].name == "tinyllama/s1/decoder_layer"
    assert points[10].name == "qwen2.5-7b/s1/decoder_layer"
    assert points[-1].name == "tinyllama/s2047/whole_model"
    assert {p.model for p in points if p.what == "whole_model"} == {"tinyllama"}


def test_subsets_and_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert sweep.main(["--list", "--what", "prefill", "--seqs", "200", "17", "17"]) == 0
    assert capsys.readouterr().out.split() == ["tinyllama/s17/whole_model",
                                               "tinyllama/s200/whole_model"]
    assert sweep.main(["--list", "--models", "qwen2.5-7b", "--what", "layers", "--seqs",
                       "1"]) == 0
    assert capsys.readouterr().out.split() == ["qwen2.5-7b/s1/decoder_layer"]
    assert sweep.parse_args(["--dry-run"]).dry_run == 1
    assert sweep.parse_args(["--dry-run", "3"]).dry_run == 3
    for bad in (["--seqs", "0"], ["--models", "qwen2.5-7b", "--what", "prefill"],
                ["--dry-run", "0"], ["--reps", "0"], [], ["--budget-ms", "0"]):
        with pytest.raises(SystemExit):
            sweep.parse_args(bad if bad else [])  # [] lacks --out-dir


def test_long_points_take_fewer_timed_calls() -> None:
    assert sweep.reps_for(0.5, reps=30, budget_ms=300) == 30
    assert sweep.reps_for(20.0, reps=30, budget_ms=300) == 15
    assert sweep.reps_for(150.0, reps=30, budget_ms=300) == sweep.MIN_REPS
    assert sweep.reps_for(150.0, reps=3, budget_ms=300) == 3
    assert sweep.reps_for(math.nan, reps=30, budget_ms=300) == 30


def test_records_of_every_layer_are_counted_once() -> None:
    a = {"name": "k1", "kind": "product", "schedule": "tensor_cores", "shape": "1x128x64x64"}
    b = {**a, "name": "k9"}
    c = {**a, "name": "k2", "shape": "1x128x64x128"}
    other = {"name": "k3", "kind": "other", "schedule": "blocks"}
    got = sweep.dedup_records([a, b, c, other])
    assert [(r["name"], r["count"]) for r in got] == [("k1", 2), ("k2", 1)]


# --- lowering and measuring a small point --------------------------------------------------------


@pytest.mark.usefixtures("tiny")
def test_lowering_a_point_records_its_schedule_and_is_cached() -> None:
    point = sweep.Point("tinyllama", 17, "decoder_layer")
    entry = sweep.lower_point(point, "lower-to-cuda", "sm_90")
    assert "error" not in entry, entry
    assert entry["kernels"] >= 1 and entry["tol"] > 0 and entry["lower_s"] > 0
    assert "cuda.kernel" in entry["ir"] and "cached" not in entry
    products = [r for r in entry["schedule"] if r["kind"] == "product"]
    assert products and all(r["shape"] and r["schedule"] for r in products)
    assert all(r["rows"] == 17 for r in products if r["shape"].startswith("1x"))
    again = sweep.lower_point(point, "lower-to-cuda", "sm_90")
    assert again["cached"] and again["ir"] == entry["ir"]
    other_arch = sweep.lower_point(point, "lower-to-cuda", "sm_80")
    assert "cached" not in other_arch  # lowered anew for another GPU
    broken = sweep.lower_point(point, "no-such-pass", "sm_90")
    assert "no-such-pass" in broken["error"]


def _timer(log: list[str]) -> suite.Timer:
    """A stand-in timer: runs the calls, returns 1 ms a call."""

    def timer(call: Callable[[], Any], reps: int, warmup: int) -> list[float]:
        for _ in range(warmup + reps):
            call()
        log.append(f"{reps}/{warmup}")
        return [1.0] * reps

    return timer


@pytest.mark.usefixtures("tiny")
def test_a_point_with_stand_in_systems() -> None:
    """The point's systems are built and checked against float64, the schedule and the
    tolerance come from the lowering, and ``ok`` is judged by that tolerance."""
    point = sweep.Point("tinyllama", 17, "whole_model")
    series = sweep.build_series("tinyllama", "whole_model", "cpu")
    assert series.wide.model.lm_head.weight.dtype == torch.float64
    log: list[str] = []
    entry = sweep._memo(lambda: sweep.lower_point(point, "lower-to-cuda", "sm_90"))
    stand_ins = {name: suite.build_eager for name in ("eager_graph", "compile", "llmopt")}
    row = sweep.run_point(point, series, entry, device="cpu", reps=8, warmup=1, rounds=2,
                          timer=_timer(log), builders=stand_ins)
    assert row["name"] == "tinyllama/s17/whole_model" and row["shapes"] == [[1, 17]]
    assert "error" not in row, row.get("error")
    assert row["reps"] == 8 and log[0] == "1/1"  # the probe, then 2 rounds of 4 calls
    assert row["llmopt_ms"] == row["eager_graph_ms"] == 1.0
    assert row["vs_compile"] == row["vs_eager_graph"] == 1.0
    assert row["tol"] == entry()["tol"] and row["ok"] is True
    assert row["schedule"] == entry()["schedule"] and row["lower_s"] > 0
    assert "llmopt_copy_ms" not in row and "eager_graph_copy_ms" not in row


@pytest.mark.usefixtures("tiny")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_dry_run_lowers_one_point(capsys: pytest.CaptureFixture[str], dtype: str) -> None:
    assert sweep.main(["--dry-run", "--jobs", "1", "--seqs", "100", "17", "--dtype",
                       dtype]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"tinyllama/s17/decoder_layer: {dtype}, lowered for sm_90 in")
    assert "products:" in out and "s100" not in out
    tol = float(out.split(" tol ")[1].split(";")[0])
    assert (tol > 1e-2) == (dtype == "bfloat16")  # four bfloat16 epsilons on top


# --- 16 bits ------------------------------------------------------------------------------------


def test_the_dtype_option(capsys: pytest.CaptureFixture[str]) -> None:
    """``--dtype`` (float32 by default) goes into every point and its cache key, not into
    the point names; other dtypes are refused."""
    assert sweep.parse_args(["--list"]).dtype == "float32"
    args = sweep.parse_args(["--list", "--dtype", "bfloat16", "--seqs", "17"])
    points = sweep.plan(args.models, args.seqs, args.what, args.dtype)
    assert {p.dtype for p in points} == {"bfloat16"}
    assert [p.name for p in points] == [p.name for p in sweep.plan(args.models, args.seqs,
                                                                    args.what)]
    assert sweep.main(["--list", "--seqs", "17"]) == 0
    plain = capsys.readouterr().out
    assert sweep.main(["--list", "--seqs", "17", "--dtype", "bfloat16"]) == 0
    assert capsys.readouterr().out == plain
    wide, half = sweep.Point("tinyllama", 17, "decoder_layer"), points[0]
    assert wide.name == half.name and wide.dtype == "float32"
    assert sweep.program_key(wide, "lower-to-cuda") != sweep.program_key(half, "lower-to-cuda")
    with pytest.raises(SystemExit):
        sweep.parse_args(["--list", "--dtype", "float64"])


@pytest.mark.usefixtures("tiny")
def test_a_bfloat16_point_with_stand_in_systems() -> None:
    """A bfloat16 point: weights and inputs in bfloat16 (the rotary frequencies float32),
    the float64 copy widened from them, the program lowered in bfloat16, and llmopt's error
    judged against PyTorch's own (the stand-in is eager: the same error)."""
    point = sweep.plan(["tinyllama"], [17], ["layers"], "bfloat16")[0]
    series = sweep.build_series("tinyllama", "decoder_layer", "cpu", torch.bfloat16)
    assert series.dtype == torch.bfloat16
    assert {p.dtype for p in series.model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in series.wide.parameters()} == {torch.float64}
    inputs = sweep.point_inputs(series, point, "cpu")
    assert [t.dtype for t in inputs] == [torch.bfloat16] * 3
    entry = sweep._memo(lambda: sweep.lower_point(point, "lower-to-cuda", "sm_90"))
    assert "error" not in entry(), entry().get("error")
    assert "bf16" in entry()["ir"]
    stand_ins = {name: suite.build_eager for name in ("eager_graph", "compile", "llmopt")}
    row = sweep.run_point(point, series, entry, device="cpu", reps=2, warmup=0, rounds=1,
                          timer=_timer([]), builders=stand_ins)
    assert "error" not in row, row.get("error")
    assert 0 < row["eager_err_rel"] == row["max_err_rel"] < 8 * suite.HALF_EPS["bfloat16"]
    assert row["err_vs_eager"] == 1.0 and row["ok_vs_eager"] is True
    assert row["ok"] is True and row["tol"] == entry()["tol"] > 1e-2


def test_a_bfloat16_sweep_writes_its_own_files(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``--dtype bfloat16`` builds each series in bfloat16 and writes
    ``sweep-bfloat16-h200.*``, whose Markdown says so and has the errors against PyTorch's
    own."""
    built: list[Any] = []

    def fake_series(*args: Any) -> None:
        built.append(args)

    def fake_point(point: sweep.Point, series: Any, entry: Any, **kwargs: Any) -> report.Case:
        row = synthetic_point(point.model, point.seq, point.what, 1.0)
        row |= {"eager_err_rel": 4e-3, "max_err_rel": 3e-3}
        return suite.add_error_goal(row, getattr(torch, point.dtype))

    monkeypatch.setattr(sweep.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(sweep.torch.cuda, "get_device_name", lambda: "NVIDIA H200")
    monkeypatch.setattr(sweep, "configure_precision", lambda: None)
    monkeypatch.setattr(sweep, "build_series", fake_series)
    monkeypatch.setattr(sweep, "run_point", fake_point)
    assert sweep.main(["--out-dir", str(tmp_path), "--seqs", "17", "--jobs", "1", "--commit",
                       "abc", "--models", "tinyllama", "--what", "layers", "--dtype",
                       "bfloat16"]) == 0
    assert built == [("tinyllama", "decoder_layer", "cuda", torch.bfloat16)]
    assert not (tmp_path / "sweep-h200.json").exists()
    doc = json.loads((tmp_path / "sweep-bfloat16-h200.json").read_text())
    assert doc["dtype"] == "bfloat16" and doc["cases"][0]["err_vs_eager"] == 0.75
    assert doc["max_err_vs_eager"] == 0.75 and doc["cases_over_error_goal"] == 0
    text = (tmp_path / "sweep-bfloat16-h200.md").read_text()
    assert "bfloat16 weights and inputs, every system in bfloat16" in text
    assert "## Accuracy against PyTorch's own bfloat16" in text
    assert "| tinyllama/s17/decoder_layer | 3.00e-03 | 4.00e-03 | 0.75 | yes | yes |" in text


# --- the run and its report ---------------------------------------------------------------------


def synthetic_point(model: str, seq: int, what: str, llmopt_ms: float,
                    fallback_rows: int | None = None) -> report.Case:
    """A measured point: eager 2 ms, eager graph 1.5, torch.compile 1 ms."""
    schedule = [{"name": "k", "kind": "product", "schedule": "tensor_cores",
                 "shape": f"1x{seq}x64x64", "rows": seq, "tile": "128x64/8x4", "split": 2,
                 "fallback": False, "count": 3}]
    if fallback_rows is not None:
        schedule.append({"name": "f", "kind": "product", "schedule": "thread_per_output",
                         "shape": f"1x{fallback_rows}x64x64", "rows": fallback_rows,
                         "fallback": True, "split": 1, "count": 1})
    return report.add_ratios({
        "name": suite.case_name(model, seq, what), "model": model, "seq": seq, "op": what,
        "eager_ms": 2.0, "eager_graph_ms": 1.5, "compile_ms": 1.0, "llmopt_ms": llmopt_ms,
        "max_err_rel": 1e-6, "tol": 1e-4, "ok": True, "schedule": schedule})


def test_the_report_of_a_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run writes ``sweep-h200.json`` (min vs torch.compile and vs the eager graph over
    every point at the top level), the Markdown tables per series with each point's
    schedules, and the plot."""
    speeds = {1: 0.5, 17: 2.0, 128: 0.8}

    def fake_point(point: sweep.Point, series: Any, entry: Any, **kwargs: Any) -> report.Case:
        return synthetic_point(point.model, point.seq, point.what, speeds[point.seq],
                               fallback_rows=17 if point.seq == 17 else None)

    monkeypatch.setattr(sweep.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(sweep.torch.cuda, "get_device_name", lambda: "NVIDIA H200")
    monkeypatch.setattr(sweep, "configure_precision", lambda: None)
    monkeypatch.setattr(sweep, "build_series", lambda *a: None)
    monkeypatch.setattr(sweep, "run_point", fake_point)
    assert sweep.main(["--out-dir", str(tmp_path), "--seqs", "1", "17", "128", "--jobs", "1",
                       "--commit", "abc", "--models", "tinyllama"]) == 0
    doc = json.loads((tmp_path / "sweep-h200.json").read_text())
    assert doc["kind"] == "sweep" and doc["seqs"] == [1, 17, 128] and doc["arch"] == "sm_90"
    assert len(doc["cases"]) == 6 and doc["sweep_s"] >= 0
    assert doc["min_vs_compile"] == pytest.approx(1.0 / 2.0)  # at seq 17
    assert doc["min_vs_eager_graph"] == pytest.approx(1.5 / 2.0)
    assert doc["fallback_products"] == 2 and doc["cases_outside_tolerance"] == 0
    text = (tmp_path / "sweep-h200.md").read_text()
    assert "## tinyllama decoder_layer" in text and "## tinyllama whole_model" in text
    assert "| 17 | 2 | 1.5 | 1 | 2 | 1.00× | 0.75× | 0.50× | 1.0e-06 | 1.0e-04 | yes | 3 tc, " \
           "1 fallback |" in text
    assert "- tinyllama/s17/decoder_layer: 1x17x64x64 tensor_cores 128x64/8x4 split 2 ×3; " \
           "1x17x64x64 thread_per_output" in text
    assert "## One thread per output (16 rows or more)" in text
    assert "min vs torch.compile: **0.50×**" in text
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert not (tmp_path / "sweep-h200.png").exists()
    else:
        assert (tmp_path / "sweep-h200.png").read_bytes()[:4] == b"\x89PNG"
    # the report command re-renders the sweep from its JSON
    out = tmp_path / "again"
    assert report.main([str(tmp_path), "--out-dir", str(out)]) == 0
    assert (out / "sweep-h200.md").read_text() == text


def test_without_a_gpu_the_sweep_says_so(capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sweep.torch.cuda, "is_available", lambda: False)
    assert sweep.main(["--out-dir", "nowhere", "--seqs", "1"]) == 2
    assert "--dry-run" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.usefixtures("tiny")
def test_a_small_sweep_on_the_gpu(tmp_path: Path) -> None:
    """Every system of a (small) layer and prefill point, the real ones: times, the float64
    check within tolerance, the schedule records."""
    assert sweep.main(["--out-dir", str(tmp_path), "--models", "tinyllama", "--seqs", "17",
                       "--jobs", "2", "--reps", "6", "--rounds", "2", "--commit", "test"]) == 0
    doc = json.loads((tmp_path / "sweep-h200.json").read_text())
    assert [c["name"] for c in doc["cases"]] == ["tinyllama/s17/decoder_layer",
                                                 "tinyllama/s17/whole_model"]
    for case in doc["cases"]:
        assert "error" not in case, case["error"]
        for field in ("eager_ms", "eager_graph_ms", "compile_ms", "llmopt_ms"):
            assert case[field] > 0, field
        assert case["ok"] is True and case["eager_graph_err_rel"] <= case["tol"]
        assert case["schedule"]
    assert doc["min_vs_compile"] is not None and doc["min_vs_eager_graph"] is not None
