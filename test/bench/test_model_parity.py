"""``bench/model_parity.py`` on the CPU: its comparison and its table, which puts PyTorch's
own argmax agreement beside llmopt's (what a 16-bit run is judged by)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import model_parity  # noqa: E402


def test_logits_compare_counts_argmax_and_the_gap_of_each_miss() -> None:
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(1, 4, 1200, generator=gen, dtype=torch.float64)
    got = ref.clone()
    top2 = ref[0, 2].topk(2).indices
    got[0, 2, top2[1]] = ref[0, 2, top2[0]] + 1  # position 2 now picks the runner-up
    out = model_parity.compare(got, ref)
    assert out["argmax_equal"] == "3/4"
    gap = (ref[0, 2, top2[0]] - ref[0, 2, top2[1]]).item()
    assert out["mismatch_ref_top2_gaps"] == [pytest.approx(gap)]
    assert out["max_err_rel"] > 0


def test_the_table_shows_the_dtype_and_both_argmax_agreements() -> None:
    rows = [{"model": "tinyllama", "seq": 128, "what": "whole model logits",
             "dtype": "torch.bfloat16", "compile_s": 3.0, "max_err_rel": 0.01,
             "argmax_equal": "127/128", "eager_vs_ref": {"argmax_equal": "126/128"},
             "llmopt_ms": 1.0, "eager_ms": 2.0},
            {"model": "tinyllama", "what": "greedy 8 tokens", "identical": True}]
    lines = model_parity.table(rows).splitlines()
    assert "eager argmax" in lines[0]
    assert lines[2].startswith("| tinyllama | bfloat16 | whole model logits | 128 |")
    assert "| 127/128 | 126/128 |" in lines[2]
    assert "| float32 | greedy 8 tokens |" in lines[3] and "identical" in lines[3]
