"""lit configuration of llmopt's FileCheck tests (``lit -v test/``).

Every ``*.mlir`` file below ``test/`` is a test, except those in ``Inputs/`` (files that
tests read), ``Output/`` (what lit writes) and directories with Python tests and no
``.mlir`` file below them.
``llm-opt`` and ``filecheck`` in RUN lines resolve to the commands installed next to the
Python interpreter that runs lit (the virtual environment's), falling back to ``PATH``.
"""

# ruff: noqa: F821  (lit defines ``config`` and ``lit_config`` before running this file)

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import lit.formats

_BIN = Path(sys.executable).parent
_ROOT = Path(__file__).resolve().parent


def _tool(name: str) -> str:
    """The path of command ``name``: next to ``sys.executable``, else on ``PATH``."""
    candidate = _BIN / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        lit_config.fatal(f"cannot find '{name}': run pip install -e '.[test]'")
    return found


def _python_only_dirs(root: Path) -> set[str]:
    """Names of directories holding Python tests and no ``.mlir`` test anywhere below them,
    unless a directory of the same name elsewhere holds ``.mlir`` tests below it."""

    def has_mlir(path: Path) -> bool:
        return any(not {"Output", "Inputs"} & set(p.relative_to(path).parts)
                   for p in path.rglob("*.mlir"))

    python_only: set[str] = set()
    with_mlir: set[str] = set()
    for directory, _, files in os.walk(root):
        path = Path(directory)
        if path == root or "Output" in path.parts or "Inputs" in path.parts:
            continue
        if has_mlir(path):
            with_mlir.add(path.name)
        elif any(
            (f.startswith("test_") and f.endswith(".py")) or f == "conftest.py" for f in files
        ):
            python_only.add(path.name)
    return python_only - with_mlir


config.name = "llmopt"
config.test_format = lit.formats.ShTest()
config.suffixes = [".mlir"]
config.test_source_root = str(_ROOT)
config.test_exec_root = str(_ROOT)
config.excludes = {"Inputs", "Output", "__pycache__", ".pytest_cache"} | _python_only_dirs(_ROOT)

# Whole words only, so that file names such as ``llm-opt-basic.mlir`` stay untouched.
for _name in ("llm-opt", "filecheck"):
    config.substitutions.append((rf"(?<![\w./%-]){_name}(?![\w.-])", _tool(_name)))

config.environment["PATH"] = os.pathsep.join([str(_BIN), config.environment.get("PATH", "")])
for _var in ("HOME", "TMPDIR", "LLMOPT_CACHE_DIR", "LLMOPT_TUNE_CACHE"):
    if _var in os.environ:
        config.environment[_var] = os.environ[_var]
