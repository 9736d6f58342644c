"""``bench/profile_layer.py`` on the CPU: its arguments and its refusals (the profiling itself
needs a GPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import profile_layer  # noqa: E402


def test_cases_are_model_colon_seq() -> None:
    assert profile_layer.parse_case("tinyllama:512") == ("tinyllama", 512)
    assert profile_layer.parse_case("qwen2.5-7b:128") == ("qwen2.5-7b", 128)
    for bad in ("tinyllama", "llama:128", "tinyllama:x"):
        with pytest.raises(ValueError, match="MODEL:SEQ"):
            profile_layer.parse_case(bad)


def test_refusals(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """No case, a bad case, or no GPU: exit status 2 and a message, nothing profiled."""
    assert profile_layer.main([]) == 2
    assert "Usage" in capsys.readouterr().err
    assert profile_layer.main(["gpt2:128"]) == 2
    assert "MODEL:SEQ" in capsys.readouterr().err
    monkeypatch.setattr(profile_layer.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(profile_layer, "profile_case", lambda *a: pytest.fail("profiled"))
    assert profile_layer.main(["tinyllama:128"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_dtype_is_passed_to_each_case(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, int, object, str, bool]] = []
    monkeypatch.setattr(profile_layer.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(profile_layer, "profile_case",
                        lambda model, seq, dtype, pipeline, compiled_too:
                        seen.append((model, seq, dtype, pipeline, compiled_too)))
    assert profile_layer.main(["--dtype", "bfloat16", "qwen2.5-7b:2047", "tinyllama:17"]) == 0
    default = profile_layer.suite.DEFAULT_PIPELINE
    assert seen == [("qwen2.5-7b", 2047, profile_layer.torch.bfloat16, default, True),
                    ("tinyllama", 17, profile_layer.torch.bfloat16, default, True)]


def test_pipeline_and_no_compile_are_passed_to_each_case(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, bool]] = []
    monkeypatch.setattr(profile_layer.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(profile_layer, "profile_case",
                        lambda model, seq, dtype, pipeline, compiled_too:
                        seen.append((pipeline, compiled_too)))
    pipeline = "lower-to-cuda{arch=sm_90a}"
    assert profile_layer.main(["--pipeline", pipeline, "--no-compile", "tinyllama:17"]) == 0
    assert seen == [(pipeline, False)]
