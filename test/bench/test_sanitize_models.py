"""``bench/sanitize_models.py`` on the CPU: it takes several sequence lengths, ragged ones
included, dtypes, one symbolic program for every length, and decode options; ``--prebuild``
splits into one job per program, and fills the compile cache so that a run with
``--require-cached`` finds every whole-model program there (the sanitized runs themselves
need a GPU and compute-sanitizer)."""

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
    assert not args.decode and not args.prebuild and args.init_device == "cpu"


def test_one_length_and_the_default() -> None:
    assert sanitize_models.parse_args(["--seq", "64"]).seqs == [64]
    assert sanitize_models.parse_args([]).seqs == [33]


def test_dtypes_and_one_symbolic_program() -> None:
    args = sanitize_models.parse_args(["--dynamic", "--seqs", "1", "17", "512",
                                       "--dtype", "bfloat16"])
    assert args.dynamic and args.max_seq == 512 and args.dtypes == ["bfloat16"]
    assert sanitize_models.parse_args([]).dtypes == ["float32"]
    assert sanitize_models.parse_args(["--dtypes", "float32", "bfloat16"]).dtypes == [
        "float32", "bfloat16"]
    assert sanitize_models.parse_args(["--dynamic", "--max-seq", "2048"]).max_seq == 2048


def test_decode_defaults_and_cache_length() -> None:
    args = sanitize_models.parse_args(["--decode"])
    assert args.decode and args.contexts == [300] and args.new == 4
    assert args.max_ctx == sanitize_models.DEFAULT_MAX_CTX and not args.no_graph
    longer = sanitize_models.parse_args(["--decode", "--contexts", "17", "1000", "--new", "8"])
    assert longer.max_ctx == 1007  # room for the longest context and every new token
    assert sanitize_models.parse_args(["--decode", "--max-ctx", "303"]).max_ctx == 303


@pytest.mark.parametrize("argv", [["--seqs", "0"], ["--seqs", "-3"], ["--seq", "4", "--seqs",
                                                                      "5"],
                                  ["--max-seq", "64"], ["--dynamic", "--seqs", "100",
                                                        "--max-seq", "64"],
                                  ["--dtype", "int8"], ["--dynamic", "--seqs", "1"],
                                  ["--contexts", "300"], ["--no-graph"], ["--max-ctx", "600"],
                                  ["--decode", "--seqs", "128"], ["--decode", "--dynamic"],
                                  ["--decode", "--new", "1"], ["--decode", "--max-ctx", "302"],
                                  ["--prebuild", "--require-cached"], ["--jobs", "4"],
                                  ["--init-device", "meta"], ["--no-prefill"],
                                  ["--list-kernels", "--prebuild"]])
def test_bad_options_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        sanitize_models.parse_args(argv)


def test_prebuild_jobs_one_per_program() -> None:
    args = sanitize_models.parse_args(["--models", "qwen2.5-7b", "--layers", "1", "--seqs",
                                       "128", "200", "128", "512", "--prebuild"])
    jobs = sanitize_models.prebuild_jobs(args)
    assert [name for name, _ in jobs] == [f"qwen2.5-7b float32 seq {s}" for s in (128, 200, 512)]
    for _, argv in jobs:  # each job's arguments parse, as the options of one program
        one = sanitize_models.parse_args([*argv, "--prebuild"])
        assert one.models == ["qwen2.5-7b"] and one.layers == 1 and len(one.seqs) == 1
    decode = sanitize_models.parse_args(["--decode", "--dtypes", "float32", "bfloat16",
                                         "--no-graph", "--prebuild"])
    jobs = sanitize_models.prebuild_jobs(decode)
    assert len(jobs) == 4 and all("Generator(max_ctx=520)" in name for name, _ in jobs)
    one = sanitize_models.parse_args([*jobs[-1][1], "--prebuild"])
    assert one.decode and one.no_graph and one.dtypes == ["bfloat16"] and one.max_ctx == 520
    symbolic = sanitize_models.parse_args(["--dynamic", "--seqs", "1", "17", "--prebuild"])
    jobs = sanitize_models.prebuild_jobs(symbolic)
    assert [name for name, _ in jobs] == ["tinyllama float32 symbolic seq <= 17",
                                          "qwen2.5-7b float32 symbolic seq <= 17"]


def test_prebuild_fills_the_compile_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A whole-model program is lowered and compiled without a GPU by ``--prebuild``; then
    it is a compile-cache hit, and before that ``--require-cached`` refuses to lower it."""
    from transformers import AutoConfig

    from llmopt.target import default_arch

    arch = default_arch()  # what --prebuild lowers for
    monkeypatch.setenv("LLMOPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LLMOPT_NO_CACHE", raising=False)
    AutoConfig.for_model("qwen2", hidden_size=36, intermediate_size=50, num_hidden_layers=2,
                         num_attention_heads=3, num_key_value_heads=1, vocab_size=101,
                         max_position_embeddings=64).save_pretrained(tmp_path / "tiny")
    config = str(tmp_path / "tiny" / "config.json")
    with pytest.raises(sanitize_models.CacheMiss, match="not in the compile cache"):
        sanitize_models.whole_model_program(config, 1, 6, "float32", arch,
                                            require_cached=True)
    assert sanitize_models.main(["--prebuild", "--models", config, "--layers", "1",
                                 "--seqs", "6", "--jobs", "1"]) == 0
    assert "lowered in" in capsys.readouterr().out
    program = sanitize_models.whole_model_program(config, 1, 6, "float32", arch,
                                                  require_cached=True)
    assert program.hit and "__global__" in program.source
    capsys.readouterr()
    assert sanitize_models.main(["--list-kernels", "--models", config, "--layers", "1",
                                 "--seqs", "6"]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()
             if line.startswith("KERNEL\t")]
    assert lines, "a program with attention and norms has kernels with shared memory"
    assert [name for _, name, _ in lines] == sanitize_models.shared_memory_kernels(
        program.source)
    for _, _, options in lines:  # the options run that one program
        one = sanitize_models.parse_args([*options.split(), "--require-cached"])
        assert one.models == [config] and one.seqs == [6] and one.layers == 1


def test_shared_memory_kernels() -> None:
    """Kernels are found by their ``__global__`` heads (with or without launch bounds); only
    those whose bodies declare shared memory, static or dynamic, are kept."""
    source = (
        'extern "C" __global__ void __launch_bounds__(128) tiled(float* a) {\n'
        "  __shared__ float buf[128];\n}\n"
        'extern "C" __global__ void plain(float* a, int n) {\n  a[0] = n;\n}\n'
        'extern "C" __global__ void __launch_bounds__(256, 2) pooled(float* a) {\n'
        "  extern __shared__ __align__(16) unsigned char smem[];\n}\n")
    assert sanitize_models.shared_memory_kernels(source) == ["tiled", "pooled"]
    assert sanitize_models.shared_memory_kernels("int x;") == []
