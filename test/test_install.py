"""A regular install works: a wheel built from this checkout, installed (not editable) into a
fresh virtual environment, runs from a directory outside the checkout.

The wheel is built from a copy of the checkout's files (``pip wheel --no-deps
--no-build-isolation``: no network, this environment's setuptools), so the checkout gets no
build outputs. The new environment reuses this one's packages — torch, xDSL, the CUDA
libraries — as ``--system-site-packages`` would over this environment: a ``.pth`` file
appends the directories of this process's ``sys.path`` outside the checkout (its
site-packages, and whatever ``PYTHONPATH`` added) to the new ``sys.path``, and this
environment's prefix to those ``site`` (and so cuda-python's library search) knows,
without running this environment's ``.pth`` files, which hold the editable install of the
checkout. llmopt itself comes from the wheel only.

From an empty directory, with an empty home directory and no ``LLMOPT_TUNE_CACHE``, it
then runs ``llmopt demo``, and ``llm-opt -p lower-to-cuda -t cuda`` on a kernel of the
committed tuning table (``test/tools/Inputs/tuned-q-proj.mlir``): the table must be
installed and found, so ``apply-tuned`` gives the kernel its tuned schedule.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUNED_INPUT = ROOT / "test" / "tools" / "Inputs" / "tuned-q-proj.mlir"

#: what is never copied into the build: version control, environments and build outputs
IGNORED = (".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
           ".ruff_cache", "Output", ".whl")

pytestmark = pytest.mark.slow


def _checkout_files() -> list[str]:
    """The checkout's files, relative to the root: those git tracks or would track (so new
    files count, ignored ones do not), else every file outside :data:`IGNORED`."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, capture_output=True, text=True, timeout=120, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def _copy_checkout(dest: Path) -> None:
    """Copy the checkout's files to ``dest``."""
    names = _checkout_files()
    if not names:
        shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(*IGNORED))
        return
    for name in names:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)


def _run(command: list[str], cwd: Path, env: dict[str, str] | None = None,
         timeout: int = 300) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, (
        f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def _outside_the_checkout(path: Path) -> bool:
    """Whether ``path`` is no directory of the checkout (an environment inside it, such as
    ``.venv``, is not part of it)."""
    path = path.resolve()
    return not path.is_relative_to(ROOT) or path.is_relative_to(Path(sys.prefix).resolve())


def _fresh_environment(venv: Path) -> Path:
    """A new virtual environment that sees this one's packages (see the module docstring);
    returns its ``python``."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=venv.parent)
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                   cwd=venv.parent).stdout.strip()
    ours = [p for p in dict.fromkeys([*sys.path, *site.getsitepackages()])
            if p and Path(p).is_dir() and _outside_the_checkout(Path(p))]
    lines = [f"import site, sys; site.PREFIXES.append({sys.prefix!r}); "
             f"sys.path.extend(p for p in {ours!r} if p not in sys.path)"]
    (Path(purelib) / "llmopt-test-reuse-deps.pth").write_text("\n".join(lines) + "\n")
    return python


def test_wheel_installs_and_runs_outside_the_checkout(tmp_path: Path) -> None:
    source, dist, venv, work, home = (tmp_path / d for d in ("src", "dist", "venv", "work",
                                                              "home"))
    for directory in (dist, work, home):
        directory.mkdir()
    _copy_checkout(source)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
          "--no-index", "--quiet", "-w", str(dist), str(source)], cwd=tmp_path, timeout=600)
    (wheel,) = dist.glob("llmopt-*.whl")

    python = _fresh_environment(venv)
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
          "--no-index", "--quiet", str(wheel)], cwd=tmp_path)
    bin_dir = python.parent
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "LLMOPT_TUNE_CACHE", "LLMOPT_NO_CACHE", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), VIRTUAL_ENV=str(venv), LLMOPT_NO_PLUGINS="1",
               LLMOPT_CACHE_DIR=str(tmp_path / "kernels"),
               PATH=os.pathsep.join([str(bin_dir), env.get("PATH", "")]))

    # llmopt comes from the wheel, with the committed tuning tables beside its passes.
    check = ("import llmopt, sys; from pathlib import Path; "
             "from llmopt.tools.tune import TABLE_DIR, load_table; "
             "assert Path(llmopt.__file__).parent.parent == Path(sys.argv[1]), llmopt.__file__; "
             "assert load_table(TABLE_DIR / 'sm_90.json'), TABLE_DIR; print(TABLE_DIR)")
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                   cwd=work, env=env).stdout.strip()
    found = _run([str(python), "-c", check, purelib], cwd=work, env=env).stdout.strip()
    assert Path(found) == Path(purelib) / "llmopt" / "passes" / "tile" / "tuned"

    demo = _run([str(bin_dir / "llmopt"), "demo", "softmax", "--shape", "4", "32"],
                cwd=work, env=env)
    assert "===== Kernel IR" in demo.stdout and "__global__" in demo.stdout
    assert "// NVRTC: 1 kernel(s) compiled to" in demo.stdout, demo.stdout

    shutil.copy(TUNED_INPUT, work / "q.mlir")
    lowered = _run([str(bin_dir / "llm-opt"), "q.mlir", "-p", "lower-to-cuda", "-t", "cuda",
                    "--print-ir-after", "apply-tuned"], cwd=work, env=env)
    assert 'extern "C" __global__' in lowered.stdout
    assert "llmopt.schedule = {" in lowered.stderr, (
        "apply-tuned set no schedule: the installed llmopt does not find its tuning table")
    assert list(work.iterdir()) == [work / "q.mlir"]  # nothing written where it ran
