"""Unit tests of the ``llm-opt`` driver: exit statuses, lazy imports, pipelines, targets."""

from __future__ import annotations

import io
import subprocess
import sys
import types
from pathlib import Path

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from llmopt import registry
from llmopt.tools.cuda_target import CudaTarget

INPUTS = Path(__file__).parent / "Inputs"
PLUGIN = str(INPUTS / "plugin_passes.py")

GOOD = """\
func.func @f(%a: i32) -> i32 {
  %zero = arith.constant 0 : i32
  %r = arith.addi %a, %zero : i32
  func.return %r : i32
}
"""
WRONG_TYPE = GOOD.replace("-> i32 {", "-> i64 {")


def llm_opt(*args: str, stdin: str = GOOD) -> subprocess.CompletedProcess[str]:
    """Run ``llm-opt`` in a fresh interpreter, reading ``stdin``."""
    return subprocess.run(
        [sys.executable, "-m", "llmopt.tools.llm_opt", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_success() -> None:
    """A good input and pipeline: exit 0, the result on stdout, nothing on stderr."""
    result = llm_opt("-p", "canonicalize")
    assert result.returncode == 0, result.stderr
    assert "func.return %a : i32" in result.stdout
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["-p", "canonicalise"], GOOD, "unknown pass 'canonicalise'; did you mean"),
        (["-p", "cse dce"], GOOD, "Error parsing pass pipeline specification"),
        (["-p", "lower-to-cuda{tile=1}"], GOOD, "pipeline 'lower-to-cuda' has no option"),
        (["-t", "nope"], GOOD, "invalid choice: 'nope'"),
        ([], GOOD.replace("%zero : i32", "%zero : i64"), "stdin:3:19: error: operand is used"),
        ([], WRONG_TYPE, "error: 'func.return' op Expected arguments"),
        (["--load-plugin", str(INPUTS / "broken_plugin.py")], GOOD, "KeyError"),
        (["--print-ir-after", "no-such-pass"], GOOD, "unknown pass 'no-such-pass'"),
        (["no-such-file.mlir"], GOOD, "cannot open input file"),
    ],
)
def test_bad_input_exits_1_without_traceback(args: list[str], stdin: str, message: str) -> None:
    """Bad arguments, pipelines, plugins and IR: a diagnostic, status 1, no traceback."""
    result = llm_opt(*args, stdin=stdin)
    assert result.returncode == 1, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert "internal error" not in result.stderr


def test_verify_diagnostics_exits_0() -> None:
    """``--verify-diagnostics`` prints the verifier error on stdout and succeeds."""
    result = llm_opt("--verify-diagnostics", stdin=WRONG_TYPE)
    assert result.returncode == 0, result.stderr
    assert "Expected arguments to have the same types" in result.stdout


@pytest.mark.parametrize(
    ("passes", "message"),
    [
        ("test-crash", "internal error in pass 'test-crash': RuntimeError"),
        ("test-break-types", "does not verify after pass 'test-break-types'"),
    ],
)
def test_compiler_bug_exits_2(passes: str, message: str, tmp_path: Path) -> None:
    """A crashing pass or a pass leaving invalid IR: ``internal error``, status 2, reproducer."""
    reproducer = tmp_path / "repro.mlir"
    result = llm_opt("--load-plugin", PLUGIN, "-p", passes, "--crash-reproducer", str(reproducer))
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert f"reproducer written to {reproducer}" in result.stderr
    text = reproducer.read_text()
    assert f"// RUN: llm-opt %s -p {passes} --load-plugin" in text
    assert GOOD in text


def test_traceback_flag(tmp_path: Path) -> None:
    """``--traceback`` adds the Python traceback to an internal error."""
    reproducer = str(tmp_path / "repro.mlir")
    result = llm_opt(
        "--load-plugin", PLUGIN, "-p", "test-crash", "--traceback", "--crash-reproducer", reproducer
    )
    assert result.returncode == 2
    assert "Traceback (most recent call last)" in result.stderr


def test_startup_imports_no_heavy_modules() -> None:
    """Running a small pipeline imports neither torch, numpy, CUDA nor transformers."""
    script = (
        "import sys\n"
        "from llmopt.tools.llm_opt import run_tool\n"
        "status = run_tool(['-p', 'canonicalize,cse', '-o', '/dev/null'])\n"
        "heavy = sorted(m for m in sys.modules\n"
        "               if m.split('.')[0] in {'torch', 'numpy', 'cuda', 'transformers'})\n"
        "print(status, heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], input=GOOD, capture_output=True, text=True, timeout=120
    )
    assert result.stdout.strip() == "0 []", result.stdout + result.stderr


def test_named_pipeline_expansion() -> None:
    """Named pipelines expand to their passes, with options filled in and other steps kept."""
    default = registry.expand_pipeline("lower-to-cuda")
    assert default.startswith("torch-to-prim,")
    assert "loop-to-tile{arch=sm_90}" in default
    custom = registry.expand_pipeline("cse,lower-to-cuda{arch=sm_80},dce")
    assert custom.startswith("cse,torch-to-prim,")
    assert custom.endswith(",kernel-to-cuda{arch=sm_80},dce")
    assert "loop-to-tile{arch=sm_80}" in custom
    assert registry.expand_pipeline("") == ""
    assert registry.expand_pipeline("canonicalize{max-iterations=3},cse") == (
        "canonicalize{max-iterations=3},cse"
    )


def test_named_pipeline_nesting_and_quoting() -> None:
    """Pipelines may use pipelines; option values that are not identifiers are quoted."""
    registry.register_pipeline("test-outer", "dce,test-inner{{flag={flag}}}", {"flag": "x"})
    registry.register_pipeline("test-inner", "test-pass{{flag={flag}}}", {"flag": "y"})
    try:
        assert registry.expand_pipeline("test-outer") == "dce,test-pass{flag=x}"
        assert registry.expand_pipeline('test-inner{flag="a b"}') == 'test-pass{flag="a b"}'
        assert registry.expand_pipeline("test-inner{flag=1,2}") == "test-pass{flag=1,2}"
    finally:
        del registry.PIPELINES["test-outer"], registry.PIPELINES["test-inner"]


def test_build_pipeline_errors() -> None:
    """Unknown passes get close matches; bad options name the pass."""
    with pytest.raises(registry.PipelineError, match="did you mean .*'canonicalize'"):
        registry.build_pipeline("canonicalizee")
    with pytest.raises(registry.PipelineError, match="invalid options for pass 'cse'"):
        registry.build_pipeline("cse{nope=1}")
    pipeline = registry.build_pipeline("canonicalize,cse,dce")
    assert [p.name for p in pipeline.passes] == ["canonicalize", "cse", "dce"]


def test_cuda_target_calls_the_printer(monkeypatch: pytest.MonkeyPatch) -> None:
    """``-t cuda`` is registered and delegates to ``codegen.cuda_printer.print_cuda``."""
    assert registry.TARGETS["cuda"]() is CudaTarget
    calls: list[ModuleOp] = []

    def print_cuda(module: ModuleOp, output: io.StringIO) -> None:
        calls.append(module)
        output.write("// cuda\n")

    fake = types.ModuleType("llmopt.codegen.cuda_printer")
    fake.print_cuda = print_cuda  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "llmopt.codegen.cuda_printer", fake)
    module = ModuleOp([])
    output = io.StringIO()
    CudaTarget().emit(Context(), module, output)
    assert calls == [module]
    assert output.getvalue() == "// cuda\n"
