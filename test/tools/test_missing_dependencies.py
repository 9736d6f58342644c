"""A missing optional dependency is one line saying what to install, exit status 1, and no
traceback, from ``llmopt`` and from ``llm-opt``; ``llmopt demo`` without the CUDA libraries
still prints every level and interprets the Kernel IR.

Each case runs the tool in a subprocess in which the dependency cannot be imported (a
``None`` entry in ``sys.modules``) or cuda-python cannot find the NVRTC library (no
site-packages directory to search).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from llmopt.deps import CUDA, INSTALL, MODELS, TORCH_CPU, MissingDependency, missing_dependency

ROOT = Path(__file__).resolve().parents[2]
RMS = str(ROOT / "docs" / "examples" / "rms.mlir")

#: no site-packages directory to search: cuda-python cannot find the NVRTC library
NO_NVRTC = "import site; site.getsitepackages = lambda *a: []"


def _block(*modules: str) -> str:
    """Python making ``modules`` unimportable."""
    return "import sys; " + "; ".join(f"sys.modules[{m!r}] = None" for m in modules)


def _run(prelude: str, tool: str, argv: list[str], tmp_path: Path
         ) -> subprocess.CompletedProcess[str]:
    """``tool`` (``llmopt`` or ``llm-opt``) with ``argv`` after ``prelude``, in ``tmp_path``."""
    entry = {"llmopt": "from llmopt.tools.llmopt_cli import main; sys.exit(main(sys.argv[1:]))",
             "llm-opt": "from llmopt.tools.llm_opt import run_tool; sys.exit(run_tool())"}[tool]
    env = {**os.environ, "LLMOPT_CACHE_DIR": str(tmp_path / "cache"), "LLMOPT_NO_PLUGINS": "1"}
    return subprocess.run([sys.executable, "-c", f"{prelude}; import sys; {entry}", *argv],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)


def _one_line_error(result: subprocess.CompletedProcess[str], prefix: str, install: str) -> None:
    """Exit 1, and stderr ends in exactly one error line: ``prefix``, then ``install``."""
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith(prefix) and errors[0].endswith(f": {install}"), errors[0]


def test_llmopt_run_without_transformers(tmp_path: Path) -> None:
    result = _run(_block("transformers"), "llmopt", ["run", "tinyllama"], tmp_path)
    _one_line_error(result, "llmopt: error: 'llmopt run' needs transformers", MODELS)


def test_llmopt_compile_without_safetensors_or_transformers(tmp_path: Path) -> None:
    result = _run(_block("transformers", "safetensors"), "llmopt",
                  ["compile", "tinyllama", "--emit", "loop", "-o", "x.mlir"], tmp_path)
    _one_line_error(result, "llmopt: error: 'llmopt compile' needs transformers", MODELS)


def test_llmopt_demo_without_torch(tmp_path: Path) -> None:
    result = _run(_block("torch"), "llmopt", ["demo"], tmp_path)
    _one_line_error(result, "llmopt: error: 'llmopt demo' needs torch", TORCH_CPU)


def test_llmopt_demo_without_cuda_python(tmp_path: Path) -> None:
    """The demo's CUDA source and interpreted run need no CUDA library: it says what NVRTC
    would need and goes on."""
    result = _run(_block("cuda.bindings"), "llmopt", ["demo", "softmax", "--shape", "4", "32"],
                  tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert f"// NVRTC: not compiled, needs cuda-python: {CUDA}\n" in result.stdout
    assert "__global__" in result.stdout and "Kernel IR interpreted on the CPU" in result.stdout


def test_compile_cuda_without_the_nvrtc_library(tmp_path: Path) -> None:
    """What ``llmopt compile --emit cubin`` and ``llmopt.compile`` meet: compile_cuda raises
    MissingDependency, whose message says what to install."""
    code = textwrap.dedent("""
        from llmopt.codegen.nvrtc import compile_cuda
        from llmopt.deps import MissingDependency
        try:
            compile_cuda('extern "C" __global__ void k() {}')
        except MissingDependency as err:
            print(err)
    """)
    env = {**os.environ, "LLMOPT_CACHE_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", NO_NVRTC + "\n" + code], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ("needs the NVRTC library (nvidia-cuda-nvrtc): "
                             "pip install nvidia-cuda-nvrtc\n")


PLUGIN = '''
"""A pass needing a dependency that is not installed."""
from dataclasses import dataclass

from xdsl.passes import ModulePass

from llmopt.registry import register_pass


@register_pass
@dataclass(frozen=True)
class NeedsTransformers(ModulePass):
    name = "needs-transformers"

    def apply(self, ctx, op):
        import transformers  # noqa: F401
'''


def test_llm_opt_pass_without_its_dependency(tmp_path: Path) -> None:
    (tmp_path / "needs.py").write_text(PLUGIN)
    argv = [RMS, "--load-plugin", "needs.py", "-p", "canonicalize,needs-transformers"]
    result = _run(_block("transformers"), "llm-opt", argv, tmp_path)
    _one_line_error(result, "llm-opt: error: pass 'needs-transformers' needs transformers",
                    MODELS)
    assert "reproducer" not in result.stderr


LAZY_PLUGIN = '''
"""A pass whose module needs a dependency that is not installed (loaded when used)."""
from llmopt import registry


def load():
    import transformers  # noqa: F401


registry.PASSES["needs-at-load"] = load
'''


def test_llm_opt_pass_that_cannot_load_without_its_dependency(tmp_path: Path) -> None:
    (tmp_path / "lazy.py").write_text(LAZY_PLUGIN)
    argv = [RMS, "--load-plugin", "lazy.py", "-p", "needs-at-load"]
    result = _run(_block("transformers"), "llm-opt", argv, tmp_path)
    _one_line_error(result, "llm-opt: error: pass 'needs-at-load' needs transformers", MODELS)


def test_llm_opt_lowers_to_cuda_without_torch_or_cuda_libraries(tmp_path: Path) -> None:
    """The IR tool needs neither torch nor the CUDA libraries to print CUDA."""
    result = _run(_block("torch", "cuda", "transformers"), "llm-opt",
                  [RMS, "-p", "lower-to-cuda", "-t", "cuda"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "__global__" in result.stdout


def test_missing_dependency_follows_the_causes() -> None:
    try:
        try:
            raise ModuleNotFoundError("no", name="cuda.bindings")
        except ImportError as err:
            raise RuntimeError("cannot load pass 'x'") from err
    except RuntimeError as wrapped:
        found = missing_dependency(wrapped)
    assert isinstance(found, MissingDependency)
    assert str(found) == f"needs cuda-python: {CUDA}"
    assert missing_dependency(ModuleNotFoundError("no", name="llmopt.passes.tile")) is None
    assert missing_dependency(ValueError("unrelated")) is None


def test_the_models_hint_installs_the_models_extra() -> None:
    """The command printed for transformers installs what pyproject.toml's ``models`` extra
    lists."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extra = pyproject["project"]["optional-dependencies"]["models"]
    assert MODELS == "pip install " + " ".join(
        f"'{req}'" if any(c in req for c in "<>=") else req for req in extra)
    assert {INSTALL[m][1] for m in ("transformers", "safetensors", "tqdm")} == {MODELS}
