"""``bench/decode.py`` on the CPU: ``--variant`` arguments, and that a variant's system is
written beside the others (JSON and Markdown)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import decode  # noqa: E402


def test_variant_arguments() -> None:
    assert decode._variant("nopf=lower-to-cuda,x{a=1}") == ("nopf", "lower-to-cuda,x{a=1}")
    for bad in ("lower-to-cuda", "=lower-to-cuda", "name="):
        with pytest.raises(ValueError, match="NAME=PIPELINE"):
            decode._variant(bad)


def test_variant_rows_are_written(tmp_path: Path) -> None:
    def system(tok_s: float) -> dict[str, object]:
        return decode.measure([1, 2], 1 / tok_s, [1, 2], 10**9, 4e12)

    def ours(tok_s: float, launches: int) -> dict[str, object]:
        return {**system(tok_s), "launches": launches}

    doc = {"meta": [{"gpu": "NVIDIA H200"}],
           "records": [{"model": "tinyllama", "dtype": "bfloat16", "context": c,
                        "systems": {"llmopt": ours(900.0, 203),
                                    "llmopt[nopf]": ours(850.0, 159),
                                    "static_graph": system(400.0)}} for c in (128, 512)]}
    decode.write_results(doc, tmp_path, "h200")
    table = (tmp_path / "decode-h200.md").read_text()
    assert "| tinyllama | bfloat16 | 512 | llmopt[nopf] | 850 |" in table
    assert "| True | 159 |" in table and "| static_graph | 400 |" in table
    line = decode._summary("llmopt", doc["records"][0]["systems"]["llmopt"])
    assert line.startswith("llmopt 900 tok/s (") and line.endswith(", 203 launches)")
    assert "launches" not in decode._summary("hf", doc["records"][0]["systems"]["static_graph"])
    saved = json.loads((tmp_path / "decode-h200.json").read_text())
    assert saved["records"][1]["systems"]["llmopt[nopf]"]["tok_s"] == pytest.approx(850.0)


def test_cases_so_far_are_written_as_json(tmp_path: Path) -> None:
    """After each case the JSON holds every case measured so far (a run cut off by a time
    limit keeps them), named for the GPU, with the run's meta; the table names the commit."""
    records = [{"model": "tinyllama", "dtype": "float32", "context": 128,
                "systems": {"llmopt": decode.measure([1], 0.002, [1], 10**9, 3e12)}}]
    meta = {"gpu": "NVIDIA H100 80GB HBM3", "commit": "abc123", "generator_builds": {}}
    path = decode.write_json({"meta": [meta], "records": records}, tmp_path)
    assert path == tmp_path / "decode-h100.json"
    records.append({**records[0], "context": 512})
    meta["generator_builds"]["tinyllama/float32"] = {"cold_s": 1.0}
    decode.write_json({"meta": [meta], "records": records}, tmp_path)
    saved = json.loads(path.read_text())
    assert [r["context"] for r in saved["records"]] == [128, 512]
    assert saved["meta"][0]["generator_builds"]["tinyllama/float32"]["cold_s"] == 1.0
    decode.write_results(saved, tmp_path, "h100")
    assert "Commit abc123." in (tmp_path / "decode-h100.md").read_text()


def test_merged_runs_are_named_for_their_gpu(tmp_path: Path) -> None:
    """``--merge`` writes ``decode-<gpu>.*`` for the GPU of the runs merged (an H100's
    records do not become ``decode-h200``), the records of every run in order."""
    runs = []
    for i, context in enumerate((128, 512)):
        doc = {"meta": [{"gpu": "NVIDIA H100 80GB HBM3"}],
               "records": [{"model": "tinyllama", "dtype": "float32", "context": context,
                            "systems": {"llmopt": decode.measure([1], 0.002, [1], 10**9,
                                                                 3e12)}}]}
        runs.append(tmp_path / f"run{i}.json")
        runs[-1].write_text(json.dumps(doc))
    out = tmp_path / "merged"
    out.mkdir()
    assert decode.merge_results(runs, out) == 0
    merged = json.loads((out / "decode-h100.json").read_text())
    assert [r["context"] for r in merged["records"]] == [128, 512]
    assert not (out / "decode-h200.json").exists()


def test_profile_rows_name_what_each_kernel_reads() -> None:
    """``--profile`` labels each kernel of a decode step by the parameters and inputs it
    reads, layer indices dropped: the gate/up product, the attention over both caches and
    the logits are recognisable, and a kernel used by every layer has one label."""
    pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "frontend"))
    from test_models import tiny_model

    import llmopt
    from llmopt import registry
    from llmopt.codegen.plan import plan_host_function
    from llmopt.frontend.decode import capture_decode

    pipeline = registry.insert_before(registry.with_arch("lower-to-cuda", "sm_90a"),
                                      "kernel-to-cuda", "lengths-in-memory")
    module = llmopt.lower(capture_decode(tiny_model("llama"), 40).module, pipeline)
    reads = decode.kernel_reads(plan_host_function(module))
    labels = set(reads.values())
    assert any({"mlp.up_proj", "mlp.gate_proj"} <= set(label.split("+")) for label in labels)
    assert any({"cache_k", "cache_v"} == set(label.split("+")) for label in labels)
    assert "lm_head" in labels and "mlp.down_proj" in labels
    assert not any("layers." in label or ".weight" in label for label in labels)


def test_one_static_step_serves_every_context() -> None:
    """The PyTorch static-cache baseline keeps one step (one ``torch.compile``) for every
    context of a model: after a longer prompt has filled the cache, a shorter one gives
    the tokens a fresh step gives, and both equal Hugging Face's greedy tokens."""
    pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "frontend"))
    from test_models import tiny_model

    model = tiny_model("llama")
    gen = torch.Generator().manual_seed(3)
    long = torch.randint(0, model.config.vocab_size, (1, 12), generator=gen)
    short = torch.randint(0, model.config.vocab_size, (1, 5), generator=gen)
    shared = decode.static_step(model, 24, compiled=False)
    decode.static_decode(shared, long, 6)
    tokens, _ = decode.static_decode(shared, short, 6)
    fresh, _ = decode.static_decode(decode.static_step(model, 24, compiled=False), short, 6)
    hf, _ = decode.hf_generate(model, short, 6)
    assert tokens == fresh == hf


def test_a_context_past_the_models_positions_is_refused_before_anything_runs(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """TinyLlama has 2048 positions: a context of 2048 and 32 new tokens is an argument
    error naming the longest context that fits, not a traceback from the capture."""
    assert decode.positions_problem(["tinyllama"], [128, 2016], 32) is None
    problem = decode.positions_problem(["tinyllama"], [128, 2048], 32)
    assert problem is not None and "2016" in problem
    assert "gpt-unknown" in (decode.positions_problem(["gpt-unknown"], [128], 32) or "")
    monkeypatch.setattr(sys, "argv", ["decode.py", "--contexts", "2048", "--new", "32"])
    with pytest.raises(SystemExit) as stop:
        decode.main()
    assert stop.value.code == 2
    assert "the longest context it takes is 2016" in capsys.readouterr().err
