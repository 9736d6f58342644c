"""``bench/symbolic.py`` on the CPU: its arguments and the ``--tiny --dry-run`` (one symbolic
decoder layer captured and lowered to Kernel IR once, every length's arguments, the shortest
lengths interpreted against float64)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import symbolic  # noqa: E402


def test_arguments() -> None:
    args = symbolic.parse_args([])
    assert args.seqs == list(symbolic.SEQS) and args.max_seq == symbolic.MAX_SEQ
    assert symbolic.parse_args(["--tiny"]).max_seq == symbolic.TINY_MAX_SEQ
    for bad in (["--seqs", "0"], ["--max-seq", "64", "--seqs", "65"], ["--reps", "0"]):
        with pytest.raises(SystemExit):
            symbolic.parse_args(bad)


def test_tiny_dry_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LLMOPT_CACHE_DIR", str(tmp_path / "cache"))
    assert symbolic.main(["--tiny", "--dry-run", "--seqs", "1", "9", "40"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["max_seq"] == symbolic.TINY_MAX_SEQ
    assert [p["seq"] for p in result["points"]] == [1, 9, 40]
    arguments = {p["arguments"] for p in result["points"]}
    assert len(arguments) == 1  # one program: the same arguments at every length
    interpreted = [p for p in result["points"] if "err_rel" in p]
    assert len(interpreted) == symbolic.DRY_RUN_LENGTHS
    for p in interpreted:  # float32 against float64, within the program's tolerance
        assert p["ok"] and 0 < p["err_rel"] <= result["tol"] < 1e-3


def test_tiny_dry_run_in_bfloat16(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``--dtype bfloat16``: the layer's weights and inputs are bf16, the reference float64
    from the same bf16 values, and the tolerance that of 16-bit storage (looser than f32's,
    far tighter than a wrong result)."""
    monkeypatch.setenv("LLMOPT_CACHE_DIR", str(tmp_path / "cache"))
    assert symbolic.main(["--tiny", "--dry-run", "--dtype", "bfloat16", "--seqs", "1", "9"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert 1e-3 < result["tol"] < 0.1
    for p in result["points"]:
        assert p["ok"] and 0 < p["err_rel"] <= result["tol"]
