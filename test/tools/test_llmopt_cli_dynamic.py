"""``llmopt compile --dynamic``: a whole model with a symbolic sequence length, written as Torch,
Tensor, Loop, Tile or Kernel IR that ``llm-opt`` verifies, lowers and checks numerically at
random lengths; CUDA IR is refused with one clear error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from llmopt.tools.llmopt_cli import main  # noqa: E402

LLM_OPT = [sys.executable, "-m", "llmopt.tools.llm_opt"]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test compiles into its own program cache."""
    monkeypatch.setenv("LLMOPT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-layer Llama config.json (hidden 36, 3 heads of 12, 1 kv head)."""
    from transformers import AutoConfig

    directory = tmp_path_factory.mktemp("llama")
    AutoConfig.for_model("llama", hidden_size=36, intermediate_size=50, num_hidden_layers=1,
                         num_attention_heads=3, num_key_value_heads=1, vocab_size=101,
                         max_position_embeddings=64).save_pretrained(directory)
    return directory / "config.json"


def llm_opt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LLM_OPT, *args], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("level, passes", [("torch", "torch-to-prim,canonicalize"),
                                           ("prim", "canonicalize,cse")])
def test_compile_dynamic_writes_symbolic_ir(level: str, passes: str, config: Path,
                                            tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / f"m.{level}.mlir"
    assert main(["compile", str(config), "--seq", "6", "--dynamic", "--max-seq", "32",
                 "--emit", level, "-o", str(out)]) == 0
    assert "symbolic seq <= 32" in capsys.readouterr().err
    text = out.read_text()
    assert text.startswith(f"// llmopt compile {config} --seq 6 --dynamic --max-seq 32")
    assert "// the sequence length is the symbol seq, 1 <= seq <= 32" in text
    assert "// next:" not in text
    assert 'tensor<1x?xi64> {llmopt.input = "input_ids", llmopt.dynamic = ["seq"]}' in text
    assert '%seq: index {llmopt.symbol = "seq", llmopt.max = 32 : i64}' in text
    assert "-> tensor<1x?x101xf32>" in text
    done = llm_opt(str(out), "-p", passes, "--check-numerics", "--check-numerics-lengths", "3")
    assert done.returncode == 0, done.stderr
    assert "// numerics: tolerance" in done.stderr and " at seq = " in done.stderr
    assert done.stderr.count(" ok") == len(passes.split(","))


def test_compile_dynamic_writes_loop_ir(config: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.loop.mlir"
    assert main(["compile", str(config), "--seq", "6", "--dynamic", "--max-seq", "32",
                 "--emit", "loop", "-o", str(out)]) == 0
    assert "symbolic seq <= 32" in capsys.readouterr().err
    text = out.read_text()
    assert 'memref<1x?xi64> {llmopt.input = "input_ids", llmopt.dynamic = ["seq"]}' in text
    assert "-> memref<1x?x101xf32>" in text
    assert "memref.alloc(%seq) : memref<1x?x36xf32>" in text
    assert " max 32 {" in text and " max 32 : f32 {" in text  # free and reduce loops
    done = llm_opt(str(out), "-p", "canonicalize,cse", "--check-numerics",
                   "--check-numerics-lengths", "2")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(" ok") == 2


def test_compile_dynamic_writes_tile_ir(config: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.tile.mlir"
    assert main(["compile", str(config), "--seq", "6", "--dynamic", "--max-seq", "32",
                 "--emit", "tile", "-o", str(out)]) == 0
    text = out.read_text()
    assert "tile.kernel @" in text and " max 32, 1, 1] block [" in text  # runtime grids
    assert "arith.ceildivui" in text
    done = llm_opt(str(out), "-p", "canonicalize", "--check-numerics",
                   "--check-numerics-lengths", "2")
    assert done.returncode == 0, done.stderr


def test_compile_dynamic_writes_kernel_ir(config: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.kernel.mlir"
    assert main(["compile", str(config), "--seq", "6", "--dynamic", "--max-seq", "32",
                 "--emit", "kernel", "-o", str(out)]) == 0
    text = out.read_text()
    assert "kernel.launch @" in text and " max 32, 1, 1] block [" in text  # runtime grids
    assert "%seq: index" in text  # the length, a kernel parameter
    done = llm_opt(str(out), "-p", "canonicalize", "--check-numerics",
                   "--check-numerics-lengths", "2")
    assert done.returncode == 0, done.stderr


def test_compile_dynamic_emits_cuda_source(config: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.cu"
    assert main(["compile", str(config), "--seq", "6", "--dynamic", "--max-seq", "32",
                 "--emit", "cuda-source", "-o", str(out)]) == 0
    source = out.read_text()
    assert "int seq) {" in source  # the length, an int parameter
    assert "const long long seq_index = (long long)seq;" in source
    assert main(["compile", str(config), "--max-seq", "8", "--emit", "torch", "-o",
                 str(tmp_path / "x")]) == 1
    assert "--max-seq bounds a symbolic length: add --dynamic" in capsys.readouterr().err


def test_llm_opt_lowers_symbolic_ir_to_cuda(config: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.torch.mlir"
    assert main(["compile", str(config), "--seq", "6", "--dynamic", "--max-seq", "32",
                 "--emit", "torch", "-o", str(out)]) == 0
    done = llm_opt(str(out), "-p", "lower-to-cuda", "-t", "cuda")
    assert done.returncode == 0, done.stderr
    assert "int seq) {" in done.stdout


def test_run_dynamic_compiles_once_and_runs_two_lengths(
        config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One symbolic program, two lengths through the Kernel-IR interpreter, each within the
    float32 tolerance (1e-4 of the largest logit) of the float64 model, argmax identical."""
    import re

    assert main(["run", str(config), "--cpu", "--dynamic", "--max-seq", "32",
                 "--seq", "3", "11"]) == 0
    out = capsys.readouterr().out
    assert out.count("// compile (once, every length)") == 1
    assert "symbolic seq <= 32 (lengths 3 11)" in out
    for seq in (3, 11):
        line = re.search(rf"^// seq {seq}: max \|error\| / max \|ref\| (\S+) vs PyTorch "
                         rf"float32, (\S+) vs float64; argmax agreement (\d+)/(\d+) vs "
                         rf"PyTorch, (\d+)/(\d+) vs float64", out, re.M)
        assert line is not None, out
        assert float(line[1]) < 1e-4 and float(line[2]) < 1e-4
        assert line[5] == line[6] == str(seq)


@pytest.mark.parametrize("argv, message", [
    (["--seq", "3", "5"], "2 --seq lengths need --dynamic"),
    (["--dynamic", "--max-seq", "16", "--seq", "3", "20"],
     "--seq 20 is above --max-seq 16, the bound of the symbolic length"),
    (["--max-seq", "16", "--seq", "3"], "--max-seq bounds a symbolic length: add --dynamic"),
])
def test_run_dynamic_bad_arguments(argv: list[str], message: str, config: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(config), "--cpu", *argv]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("llmopt: error: ") and message in err[0]
