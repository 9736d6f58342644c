"""``llmopt``'s exit status: 1 with one error line for bad input (the corpus in
``test/fuzz/test_cli_corpus.py`` covers every case), 2 with a reproducer for a compiler bug;
and non-finite logits never pass for agreement."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from llmopt.tools import llmopt_cli  # noqa: E402


def test_nan_logits_never_agree() -> None:
    want = torch.randn(1, 3, 5)
    got = want.clone()
    got[0, 1, 2] = float("nan")
    lines = llmopt_cli._compare(got, want)
    assert lines[-1] == "argmax agreement: 2/3 positions  [|x|]"
    assert "NON-FINITE logits at 1 of 3 positions (llmopt 1, PyTorch 0)" in lines[-2]
    both = torch.full((1, 3, 5), float("nan"))
    assert llmopt_cli._compare(both, both)[-1] == "argmax agreement: 0/3 positions  [xxx]"


def test_non_finite_where_pytorch_is_finite_is_a_wrong_result() -> None:
    want = torch.randn(1, 2, 4)
    got = want.clone()
    got[0, 0, 0] = float("inf")
    with pytest.raises(llmopt_cli.WrongResultError, match="non-finite at 1 of 2 positions"):
        llmopt_cli._check_finite_logits(got, want)
    llmopt_cli._check_finite_logits(want, want)  # finite: nothing to say
    nan = torch.full_like(want, float("nan"))
    llmopt_cli._check_finite_logits(nan, nan)  # both non-finite (allowed NaN weights)


@pytest.mark.parametrize("traceback", [False, True])
def test_internal_error_exits_2_with_a_reproducer(traceback: bool, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A crash is ``llmopt: internal error``, the line that raised, a reproducer (the
    command, the config and the traceback), exit 2; the traceback itself on request."""
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "llama", "hidden_size": 32}\n')

    def crash(args: argparse.Namespace) -> int:
        raise KeyError("the bug")

    monkeypatch.setattr(llmopt_cli, "compile_model", crash)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    argv = ["compile", str(config), "--emit", "torch", "-o", "-"]
    status = llmopt_cli.main([*(["--traceback"] if traceback else []), *argv])
    err = capsys.readouterr().err
    assert status == 2
    assert "llmopt: internal error: KeyError: 'the bug'" in err
    assert re.search(r"llmopt: note: raised at .*test_llmopt_exit_status.py:\d+", err)
    assert ("Traceback (most recent call last)" in err) == traceback
    match = re.search(r"reproducer written to (\S+)", err)
    assert match is not None, err
    reproducer = Path(match.group(1)).read_text()
    assert f"llmopt {'--traceback ' if traceback else ''}compile {config}" in reproducer
    assert '"hidden_size": 32' in reproducer and "KeyError" in reproducer


def test_usage_errors_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse's own errors (exit 2 by default) exit 1 like every other bad input."""
    with pytest.raises(SystemExit) as exit_:
        llmopt_cli.main(["run", "tinyllama", "--seq", "-5"])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == ("llmopt: error: argument --seq: must be an "
                                            "integer >= 1, got -5")
