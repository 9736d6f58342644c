"""lit configuration of the example plugin's FileCheck tests: ``lit -v tests/lit``.

The tests use the plugin as installed (``pip install -e .``): ``llm-opt`` loads it through
its ``llmopt.plugins`` entry point. ``%src`` is the plugin's source directory, for tests that
load a file with ``--load-plugin`` instead.
"""

# ruff: noqa: F821  (lit defines ``config`` and ``lit_config`` before running this file)

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import lit.formats

_HERE = Path(__file__).resolve().parent
_BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    """The path of command ``name``: next to ``sys.executable``, else on ``PATH``."""
    candidate = _BIN / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        lit_config.fatal(f"cannot find '{name}': pip install llmopt filecheck")
    return found


config.name = "llmopt-example-plugin"
config.test_format = lit.formats.ShTest()
config.suffixes = [".mlir"]
config.test_source_root = str(_HERE)
config.test_exec_root = str(_HERE)
config.excludes = {"Output"}
config.substitutions.append(("%src", str(_HERE.parents[1] / "src")))
for _name in ("llm-opt", "filecheck"):
    config.substitutions.append((rf"(?<![\w./%-]){_name}(?![\w.-])", _tool(_name)))
config.environment["PATH"] = os.pathsep.join([str(_BIN), config.environment.get("PATH", "")])
for _var in ("HOME", "TMPDIR", "LLMOPT_CACHE_DIR"):
    if _var in os.environ:
        config.environment[_var] = os.environ[_var]
