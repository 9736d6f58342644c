"""``bench/sanitize_models.py`` on the CPU: it takes several sequence lengths, ragged ones
included, a dtype, and one symbolic program for every length (the runs themselves need a
GPU and compute-sanitizer)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import sanitize_models  # noqa: E402


def test_several_lengths() -> None:
    args = sanitize_models.parse_args(["--seqs", "128", "512", "200", "17"])
    assert args.seqs == [128, 512, 200, 17]
    assert args.models == ["tinyllama", "qwen2.5-7b"] and args.layers == 2


def test_one_length_and_the_default() -> None:
    assert sanitize_models.parse_args(["--seq", "64"]).seqs == [64]
    assert sanitize_models.parse_args([]).seqs == [33]


def test_dtype_and_one_symbolic_program() -> None:
    args = sanitize_models.parse_args(["--dynamic", "--seqs", "1", "17", "512",
                                       "--dtype", "bfloat16"])
    assert args.dynamic and args.max_seq == 512 and args.dtype == "bfloat16"
    assert sanitize_models.parse_args([]).dtype == "float32"
    assert sanitize_models.parse_args(["--dynamic", "--max-seq", "2048"]).max_seq == 2048


@pytest.mark.parametrize("argv", [["--seqs", "0"], ["--seqs", "-3"], ["--seq", "4", "--seqs",
                                                                      "5"],
                                  ["--max-seq", "64"], ["--dynamic", "--seqs", "100",
                                                        "--max-seq", "64"],
                                  ["--dtype", "int8"], ["--dynamic", "--seqs", "1"]])
def test_bad_lengths_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        sanitize_models.parse_args(argv)
