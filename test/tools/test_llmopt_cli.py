"""The ``llmopt`` command: ``demo`` (the README's main job) prints every level and checks the
result; ``compile`` writes a whole model's IR at any level; ``run`` compiles a whole model and
compares it with PyTorch (here on the CPU, through the Kernel-IR interpreter)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from llmopt import registry  # noqa: E402
from llmopt.tools.llmopt_cli import main  # noqa: E402

LLM_OPT = [sys.executable, "-m", "llmopt.tools.llm_opt"]


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


# --- whole models ------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test compiles into its own kernel and program cache."""
    monkeypatch.setenv("LLMOPT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.delenv("LLMOPT_NO_CACHE", raising=False)


_FULL = registry.expand_pipeline("lower-to-cuda{arch=sm_90}")
LOOP_TO_CUDA = _FULL[_FULL.index("loop-to-tile"):]
"""What ``lower-to-cuda`` runs after Loop IR (the pipeline a Loop-IR file continues with)."""


def _config(tmp_path: Path, model_type: str = "qwen2", **sizes: int) -> Path:
    """A config.json whose sizes divide no tile (hidden 36, 3 heads of 12, 1 kv head)."""
    from transformers import AutoConfig

    values = {"hidden_size": 36, "intermediate_size": 50, "num_hidden_layers": 2,
              "num_attention_heads": 3, "num_key_value_heads": 1, "vocab_size": 101,
              "max_position_embeddings": 64, **sizes}
    directory = tmp_path / model_type
    AutoConfig.for_model(model_type, **values).save_pretrained(directory)
    return directory / "config.json"


def _ir(path: Path) -> str:
    """IR text without the header comments."""
    return "\n".join(line for line in path.read_text().splitlines()
                     if not line.startswith("//")).strip()


def test_compile_emits_ir_that_llm_opt_continues(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Loop IR from ``llmopt compile`` plus the rest of the pipeline in ``llm-opt`` gives the
    CUDA IR and the CUDA source that ``llmopt compile`` emits directly."""
    config = _config(tmp_path, "qwen2")
    loop_ir, cuda_ir, source = tmp_path / "m.loop.mlir", tmp_path / "m.cuda.mlir", tmp_path / "m.cu"
    common = [str(config), "--seq", "5", "--layers", "1"]
    assert main(["compile", *common, "--emit", "loop", "-o", str(loop_ir)]) == 0
    err = capsys.readouterr().err
    assert f"next: llm-opt {loop_ir} -p '{LOOP_TO_CUDA}'" in err
    header = loop_ir.read_text().splitlines()[:2]
    assert header[1] == f"// next: llm-opt {loop_ir.name} -p '{LOOP_TO_CUDA}'"
    assert "loop.kernel" in loop_ir.read_text()
    assert main(["compile", *common, "--emit", "cuda", "-o", str(cuda_ir)]) == 0
    assert "compile cache hit" not in capsys.readouterr().err
    assert main(["compile", *common, "--emit", "cuda-source", "-o", str(source)]) == 0
    assert "compile cache hit" in capsys.readouterr().err  # the same pipeline as --emit cuda

    continued = tmp_path / "continued.mlir"
    done = subprocess.run([*LLM_OPT, str(loop_ir), "-p", LOOP_TO_CUDA, "-o", str(continued)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert _ir(continued) == _ir(cuda_ir)
    printed = subprocess.run([*LLM_OPT, str(continued), "-t", "cuda"], capture_output=True,
                             text=True, timeout=300)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == source.read_text()
    assert source.read_text().count("__global__") > 3


@pytest.mark.parametrize("level", ["torch", "prim", "tile", "kernel"])
def test_compile_every_level(level: str, tmp_path: Path) -> None:
    """Each level is written as IR of that level that ``llm-opt`` parses back."""
    config = _config(tmp_path, "llama")
    out = tmp_path / f"m.{level}.mlir"
    assert main(["compile", str(config), "--seq", "4", "--layers", "1", "--emit", level,
                 "-o", str(out)]) == 0
    text = out.read_text()
    marker = {"torch": "torch.embedding", "prim": "prim.", "tile": "tile.kernel",
              "kernel": "kernel.func"}[level]
    assert marker in text
    done = subprocess.run([*LLM_OPT, str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_compile_rejects_a_missing_model(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown model is an error message and exit status 1, not a traceback."""
    assert main(["compile", str(tmp_path / "nothing"), "--emit", "torch", "-o",
                 str(tmp_path / "x.mlir")]) == 1
    assert "llmopt: error:" in capsys.readouterr().err


def _report(out: str) -> tuple[float, int, int]:
    rel = re.search(r"max \|error\| / max \|ref\| = ([0-9.e+-]+)", out)
    agree = re.search(r"argmax agreement: (\d+)/(\d+) positions", out)
    assert rel is not None and agree is not None, out
    return float(rel.group(1)), int(agree.group(1)), int(agree.group(2))


@pytest.mark.parametrize("model_type", ["qwen2", "llama"])
def test_run_config_with_odd_sizes(model_type: str, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``llmopt run`` on a config.json whose sizes divide no tile: small enough to run as
    given on the CPU (no shrinking), matching PyTorch."""
    config = _config(tmp_path, model_type)
    assert main(["run", str(config), "--seq", "5", "--cpu"]) == 0
    out = capsys.readouterr().out
    assert "shrunk" not in out
    assert f"{model_type}: 2 layers, hidden 36, intermediate 50" in out
    rel, agree, positions = _report(out)
    assert rel < 1e-5 and agree == positions == 5


def test_run_loads_a_saved_checkpoint(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A tiny model saved with ``save_pretrained`` runs with its own weights."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(7)
    config = LlamaConfig(hidden_size=32, intermediate_size=40, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, vocab_size=53,
                         max_position_embeddings=32)
    model = LlamaForCausalLM(config)
    model.save_pretrained(tmp_path / "tiny")
    assert any((tmp_path / "tiny").glob("*.safetensors"))
    assert main(["run", str(tmp_path / "tiny"), "--seq", "6"]) == 0
    out = capsys.readouterr().out
    assert f"weights from {tmp_path / 'tiny'}" in out
    rel, agree, positions = _report(out)
    assert rel < 1e-5 and agree == positions == 6


@pytest.mark.parametrize("model,dtype", [("tinyllama", "bfloat16"), ("qwen2.5-7b", "float16")])
def test_run_in_half_precision(model: str, dtype: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    """``llmopt run MODEL --dtype bfloat16|float16`` on the CPU: the shrunk model with 16-bit
    weights runs through the interpreter; against the model in float64 its logits are off by
    at most twice PyTorch's own 16-bit error plus one ulp of the type, and agree with PyTorch's
    16-bit logits to a few ulps."""
    assert main(["run", model, "--cpu", "--dtype", dtype]) == 0
    out = capsys.readouterr().out
    assert f"seq 7, {dtype}" in out
    eps = 2.0**-7 if dtype == "bfloat16" else 2.0**-10
    rel, agree, positions = _report(out)
    assert rel < 4 * eps and positions == 7 and agree >= 6
    found = re.search(rf"against float64: llmopt (\S+), PyTorch {dtype} (\S+)", out)
    assert found, out
    ours, theirs = float(found.group(1)), float(found.group(2))
    assert 0 < ours <= 2 * theirs + eps, (ours, theirs)
    assert re.search(r"NVRTC: \d+ kernels compiled", out)


def test_run_shrinks_a_large_model_without_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen2.5-7B without a GPU: says so, shrinks the config, runs it in the interpreter
    (and says that ``--profile``, which times GPU kernels, does nothing there)."""
    assert main(["run", "qwen2.5-7b", "--cpu", "--profile", "5"]) == 0
    out = capsys.readouterr().out
    assert "CPU interpreter" in out
    assert "--profile times kernels on a GPU: ignored" in out
    assert "shrunk the config to qwen2: 2 layers, hidden 64" in out and "vocab 97" in out
    assert "seq 7" in out
    rel, agree, positions = _report(out)
    assert rel < 1e-5 and agree == positions == 7
    assert re.search(r"NVRTC: \d+ kernels compiled", out)


def test_compile_cache_hit_gives_the_same_ir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A second compile of the same model is read from the compile cache (no capture, no
    lowering) and writes the same IR; ``LLMOPT_NO_CACHE=1`` bypasses the cache."""
    config = _config(tmp_path, "llama", num_hidden_layers=1)
    outputs = []
    for k, no_cache in enumerate(["", "", "1"]):
        monkeypatch.setenv("LLMOPT_NO_CACHE", no_cache)
        out = tmp_path / f"k{k}.mlir"
        assert main(["compile", str(config), "--seq", "4", "--emit", "kernel", "-o",
                     str(out)]) == 0
        err = capsys.readouterr().err
        assert ("compile cache hit" in err) == (k == 1), err
        assert ("capturing" in err) == (k != 1)
        outputs.append(_ir(out))
    assert outputs[0] == outputs[1] == outputs[2]
    # Another sequence length is another program.
    monkeypatch.setenv("LLMOPT_NO_CACHE", "")
    assert main(["compile", str(config), "--seq", "5", "--emit", "kernel", "-o",
                 str(tmp_path / "other.mlir")]) == 0
    assert "compile cache hit" not in capsys.readouterr().err


def test_the_compile_command_ends_at_once_with_its_output_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``llmopt compile`` run as a command leaves without freeing the model (os._exit once
    its streams are flushed): what it writes to stdout is complete, and its status is the
    command's; called from Python, main() returns."""
    config = _config(tmp_path, "llama", num_hidden_layers=1)
    common = ["compile", str(config), "--seq", "4", "--emit", "cuda-source", "-o"]
    assert main([*common, str(tmp_path / "m.cu")]) == 0
    capsys.readouterr()
    run = subprocess.run([sys.executable, "-m", "llmopt.tools.llmopt_cli", *common, "-"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert run.stdout == (tmp_path / "m.cu").read_text()
    bad = subprocess.run([sys.executable, "-m", "llmopt.tools.llmopt_cli", *common[:-1],
                          "--max-seq", "8", "-o", "-"], capture_output=True, text=True,
                         timeout=600)
    assert bad.returncode == 1 and "llmopt: error:" in bad.stderr


def test_nvrtc_compiles_on_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--emit cubin`` starts NVRTC on its thread as soon as a built program's CUDA source
    is printed; a source that was never started (a cache hit) compiles when asked, and an
    NVRTC error reaches the caller."""
    import threading

    from llmopt.codegen import nvrtc
    from llmopt.tools import llmopt_cli

    calls: list[tuple[str, str]] = []

    def compile_cuda(source: str, arch: str) -> bytes:
        calls.append((source, threading.current_thread().name))
        if source == "bad":
            raise nvrtc.NvrtcError("bad", log="", kernel_names=[], source=source)
        return f"{arch}:{source}".encode()

    monkeypatch.setattr(nvrtc, "compile_cuda", compile_cuda)
    job = llmopt_cli._BackgroundCompile("sm_90")
    job.start("printed")
    assert job.result("printed") == b"sm_90:printed"
    assert llmopt_cli._BackgroundCompile("sm_90").result("cached") == b"sm_90:cached"
    assert calls == [("printed", "nvrtc"), ("cached", "nvrtc")]
    with pytest.raises(nvrtc.NvrtcError):
        llmopt_cli._BackgroundCompile("sm_90").result("bad")


def test_a_warm_compile_reads_only_what_it_emits(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A hit of ``--emit cubin`` or ``cuda-source`` hands the cached CUDA source to NVRTC and
    parses no IR, and writes what the cold build wrote; ``--emit cuda`` parses the whole IR."""
    from llmopt import api

    config = _config(tmp_path, "llama", num_hidden_layers=1)
    common = [str(config), "--seq", "4", "-o"]
    cold, warm = tmp_path / "cold.cubin", tmp_path / "warm.cubin"
    assert main(["compile", *common, str(cold), "--emit", "cubin"]) == 0
    assert "compile cache hit" not in capsys.readouterr().err
    parsed: list[str] = []
    real_parse = api.parse
    monkeypatch.setattr(api, "parse", lambda text: parsed.append(text) or real_parse(text))
    assert main(["compile", *common, str(warm), "--emit", "cubin"]) == 0
    assert "compile cache hit: CUDA source read in" in capsys.readouterr().err
    assert warm.read_bytes() == cold.read_bytes() and not parsed
    source = tmp_path / "m.cu"
    assert main(["compile", *common, str(source), "--emit", "cuda-source"]) == 0
    assert "compile cache hit: CUDA source read in" in capsys.readouterr().err
    assert not parsed and source.read_text().count("__global__") > 3
    ir = tmp_path / "m.mlir"
    assert main(["compile", *common, str(ir), "--emit", "cuda"]) == 0
    assert "compile cache hit: IR parsed in" in capsys.readouterr().err
    assert len(parsed) == 1
    printed = subprocess.run([*LLM_OPT, str(ir), "-t", "cuda"], capture_output=True,
                             text=True, timeout=300)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == source.read_text()


def test_cache_says_where_the_caches_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """``llmopt cache`` prints the compile cache's directory and entry count, and the tuning
    cache's path and whether apply-tuned reads it; ``--clear`` empties the compile cache."""
    from llmopt.codegen.cache import default_cache

    monkeypatch.setenv("LLMOPT_CACHE_DIR", str(tmp_path / "kernels"))
    monkeypatch.delenv("LLMOPT_TUNE_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    default_cache().put("ab" * 32, b"x" * 1000)
    assert main(["cache"]) == 0
    tuned = tmp_path / "home" / ".cache" / "llmopt" / "tuned.json"
    assert capsys.readouterr().out.splitlines() == [
        f"compile cache: {tmp_path / 'kernels'} (1 entry, 0.0 MB)",
        f"tuning cache: {tuned} (0 entries; read only with LLMOPT_TUNE_CACHE set or "
        "apply-tuned{user=1})",
    ]
    monkeypatch.setenv("LLMOPT_TUNE_CACHE", str(tmp_path / "t.json"))
    assert main(["cache", "--clear"]) == 0
    captured = capsys.readouterr()
    assert f"removed 1 entry from {tmp_path / 'kernels'}" in captured.err
    assert f"compile cache: {tmp_path / 'kernels'} (0 entries" in captured.out
    assert "read by apply-tuned: LLMOPT_TUNE_CACHE is set" in captured.out


@pytest.mark.gpu
def test_gpu_run_real_dimensions(capsys: pytest.CaptureFixture[str]) -> None:
    """On a GPU: two TinyLlama layers at their real dimensions, plain launches and a CUDA
    graph, against PyTorch on the same random input_ids."""
    assert main(["run", "tinyllama", "--layers", "2", "--seq", "32", "--repeat", "3"]) == 0
    out = capsys.readouterr().out
    assert "GPU:" in out and "llmopt CUDA graph" in out and "differs" not in out
    rel, agree, positions = _report(out)
    assert rel < 1e-4 and agree >= positions - 1 and positions == 32


def test_profile_table_sums_a_kernels_launches_and_ranks_them() -> None:
    """``run --profile N``'s table: a kernel launched once per layer is one row with its
    launches summed, rows by total time, shares of the sum of every launch."""
    from llmopt.codegen.executor import KernelTime
    from llmopt.tools.llmopt_cli import profile_table

    times = [KernelTime("norm", (8, 1, 1), (256, 1, 1), 0.5),
             KernelTime("matmul", (64, 1, 1), (256, 1, 1), 2.0),
             KernelTime("norm", (8, 1, 1), (256, 1, 1), 0.5),
             KernelTime("tiny", (1, 1, 1), (32, 1, 1), 0.25)]
    lines = profile_table(times, 2)
    assert "sum 3.250 ms" in lines[0]
    rows = [line.split() for line in lines[2:]]
    assert [r[-1] for r in rows] == ["matmul", "norm"]  # "tiny" is past the top 2
    assert rows[1][:3] == ["1.0000", "30.8%", "2"]


@pytest.mark.gpu
def test_gpu_run_profile_lists_the_kernels(capsys: pytest.CaptureFixture[str]) -> None:
    """On a GPU: ``--profile`` times every launch of one TinyLlama layer alone; the listed
    kernels are the program's, with positive times."""
    assert main(["run", "tinyllama", "--layers", "1", "--seq", "32", "--repeat", "3",
                 "--profile", "5"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("kernels by time"):].splitlines()[2:]
    assert len(table) == 5
    assert all(float(line.split()[1]) > 0 for line in table)


def test_run_arch_is_the_gpus_unless_a_variant_of_it_is_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``llmopt run --arch``: on a GPU the default is the GPU's architecture, a variant of
    its family (sm_90a on sm_90) is taken, another family is a clear error; without a GPU
    the default is DEFAULT_ARCH."""
    from llmopt.tools import llmopt_cli

    monkeypatch.setattr(llmopt_cli, "default_arch", lambda: "sm_90")
    assert llmopt_cli._run_arch(None, gpu=True) == "sm_90"
    assert llmopt_cli._run_arch("sm_90a", gpu=True) == "sm_90a"
    with pytest.raises(llmopt_cli.CliError, match=r"--arch sm_80 does not run on this GPU "
                                                  r"\(sm_90\); give sm_90 or a variant"):
        llmopt_cli._run_arch("sm_80", gpu=True)
    assert llmopt_cli._run_arch(None, gpu=False) == llmopt_cli.DEFAULT_ARCH
    assert llmopt_cli._run_arch("sm_80", gpu=False) == "sm_80"
