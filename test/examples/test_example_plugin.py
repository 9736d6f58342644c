"""The out-of-tree example plugin (``examples/llmopt-example-plugin``) installs as its own
package and passes its own tests.

The example is pip-installed into the running environment (editable, without dependencies)
unless this checkout's copy already is; then its pytest suite and its lit suite run in
subprocesses, as its own CI would run them.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "llmopt-example-plugin"
SOURCE = EXAMPLE / "src"
DISTRIBUTION = "llmopt-example-plugin"


def _installed_here() -> bool:
    """Whether this checkout's example is the installed ``llmopt-example-plugin``."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return False
    command = [sys.executable, "-c", "import llmopt_example; print(llmopt_example.__file__)"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd="/")
    if result.returncode != 0 or not list(dist.entry_points.select(group="llmopt.plugins")):
        return False
    return Path(result.stdout.strip()).resolve().is_relative_to(SOURCE.resolve())


def _pip_install() -> None:
    """``pip install --no-deps -e examples/llmopt-example-plugin`` into this environment."""
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "-e", str(EXAMPLE)]
    if importlib.util.find_spec("setuptools") is not None:
        command.insert(-2, "--no-build-isolation")  # offline, with this environment's setuptools
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"pip install failed:\n{result.stdout}{result.stderr}"
    # Processes started from now on see the new path entry; make this one see it too, so
    # that installed plugins keep loading in later tests of this session.
    importlib.invalidate_caches()
    if importlib.util.find_spec("llmopt_example") is None:
        sys.path.append(str(SOURCE))


@pytest.fixture(scope="module")
def installed() -> None:
    """The example plugin, installed from this checkout."""
    if not _installed_here():
        _pip_install()
    assert _installed_here(), f"{DISTRIBUTION} is not importable after pip install"


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in the example's directory."""
    return subprocess.run(command, cwd=EXAMPLE, capture_output=True, text=True, timeout=900)


def _lit() -> list[str]:
    """The ``lit`` of this interpreter's environment."""
    candidate = Path(sys.executable).parent / "lit"
    if candidate.is_file():
        return [str(candidate)]
    return [sys.executable, "-c", "import sys; from lit.main import main; sys.exit(main())"]


def test_example_pytest_suite(installed: None) -> None:
    """The example's pytest tests pass (numerics of its passes, against PyTorch too)."""
    result = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
    assert result.returncode == 0, f"example pytest failed:\n{result.stdout}{result.stderr}"
    assert " passed" in result.stdout


def test_example_lit_suite(installed: None) -> None:
    """The example's lit tests pass, with ``llm-opt`` finding the plugin by its entry point."""
    result = _run([*_lit(), "-v", "tests/lit"])
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"example lit failed:\n{output}"
    assert "Passed" in output and "Failed" not in output, output


def test_llm_opt_loads_the_installed_plugin(installed: None) -> None:
    """Once installed, ``llm-opt`` knows the plugin's dialect and passes without flags."""
    text = (
        "func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {\n"
        "  %y = ex.gelu_tanh %x : tensor<8xf32>\n"
        "  func.return %y : tensor<8xf32>\n"
        "}\n"
    )
    llm_opt = Path(sys.executable).parent / "llm-opt"
    command = [str(llm_opt), "-p", "ex-to-prim"]
    result = subprocess.run(command, input=text, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "prim.elementwise" in result.stdout and "math.tanh" in result.stdout
