"""The command lines' bad-input corpus (``tools/fuzz_cli.py``): every case ends with its exit
status, bad input with exactly one error line naming the file, tensor, option or op, and
nothing ends in a traceback or an internal error."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("safetensors")

from llmopt.tools import fuzz, fuzz_cli  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small checkpoint the cases copy."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fuzz_cli.build_base(tmp_path_factory.mktemp("cli") / "base")


def test_case_names_are_unique() -> None:
    names = [case.name for case in fuzz_cli.CASES]
    assert len(names) == len(set(names))


def test_corpus_covers_the_reported_inputs() -> None:
    """The inputs that once ended in a traceback or a silently wrong answer are all here."""
    names = {case.name for case in fuzz_cli.CASES}
    for required in ("config-invalid-json", "config-empty", "config-list",
                     "config-unknown-model-type", "config-gpt2", "config-hidden-not-divisible",
                     "config-zero-heads", "config-negative-hidden", "config-zero-vocab",
                     "run-seq-negative", "run-seq-zero", "arch-sm_1", "arch-foo",
                     "ckpt-truncated", "ckpt-garbage", "ckpt-header-not-json",
                     "ckpt-wrong-shape", "ckpt-wrong-dtype", "ckpt-missing-tensor",
                     "ckpt-more-layers", "ckpt-nan", "ckpt-nan-allowed",
                     "llm-opt-constant-out-of-bounds", "llm-opt-unroll-bool",
                     "llm-opt-pass-option-range"):
        assert required in names, required


@pytest.mark.parametrize("case", fuzz_cli.CASES, ids=[c.name for c in fuzz_cli.CASES])
def test_cli_case(case: fuzz_cli.CliCase, base: Path, tmp_path: Path) -> None:
    outcome = fuzz_cli.run_cli_case(case, base, tmp_path)
    expected = "ok" if case.status == 0 else "diagnosed"
    assert outcome.kind == expected, (
        f"{outcome.kind}: {'; '.join(outcome.problems) or outcome.escaped}\n"
        f"--- stdout\n{outcome.stdout}--- stderr\n{outcome.stderr}")


def test_problems_are_reported() -> None:
    """The checker itself: a wrong status, two error lines, a vague error line and
    forbidden output are each a problem."""
    case = fuzz_cli.CliCase("x", "llmopt", (), None, 1, ("tensor 'w'",), ("3/3",))
    assert fuzz_cli._problems(case, 1, "", "llmopt: error: tensor 'w' is bad\n") == []
    assert "exit status 0, expected 1" in fuzz_cli._problems(case, 0, "", "")[0]
    two = fuzz_cli._problems(case, 1, "", "llmopt: error: a\nllmopt: error: tensor 'w'\n")
    assert "2 error lines, expected one" in two
    vague = fuzz_cli._problems(case, 1, "", "llmopt: error: something\n")
    assert vague == ["the error line does not name \"tensor 'w'\""]
    said = fuzz_cli._problems(case, 1, "argmax agreement: 3/3", "llmopt: error: tensor 'w'")
    assert said == ["the output says '3/3'"]


def test_driver_runs_named_cases(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m llmopt.tools.fuzz --cli --case NAME`` runs that case and prints it."""
    status = fuzz.main(["--cli", "--case", "run-seq-zero", "--case", "config-list", "--out",
                        str(tmp_path), "--quiet"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "CLI cases: 2   ok 0, diagnosed 2, internal error 0, traceback 0, wrong 0" in out
    assert "argument --seq: must be an integer >= 1, got 0" in out
