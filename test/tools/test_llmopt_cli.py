"""``llmopt demo``: the README's main job prints every level and checks the result."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("torch")

from llmopt.tools.llmopt_cli import main  # noqa: E402


@pytest.mark.parametrize("argv", [[], ["demo", "softmax", "--shape", "7", "33"]])
def test_demo_prints_every_level_and_matches_pytorch(argv: list[str],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 0
    out = capsys.readouterr().out
    for level in ("Torch IR", "Tensor IR", "Loop IR", "Tile IR", "Kernel IR", "CUDA"):
        assert f"===== {level}" in out
    assert out.count("__global__") == 1
    match = re.search(r"max \|error\| / max \|PyTorch float64\| = ([0-9.e+-]+)", out)
    assert match is not None
    assert float(match.group(1)) < 1e-5
