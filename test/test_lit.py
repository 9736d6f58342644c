"""Run the lit/FileCheck suite (every ``*.mlir`` test below ``test/``) from pytest."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lit_command() -> list[str]:
    """The ``lit`` of this interpreter's environment, else the one on ``PATH``."""
    candidate = Path(sys.executable).parent / "lit"
    if candidate.is_file():
        return [str(candidate)]
    found = shutil.which("lit")
    if found is not None:
        return [found]
    return [sys.executable, "-c", "import sys; from lit.main import main; sys.exit(main())"]


def test_lit_suite() -> None:
    """``lit -v test/`` passes and runs at least one test."""
    result = subprocess.run(
        [*_lit_command(), "-v", "test/"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"lit failed (exit status {result.returncode}):\n{output}"
    discovered = re.search(r"Total Discovered Tests:\s*(\d+)", output)
    assert discovered is not None, f"cannot find lit's test count in its output:\n{output}"
    assert int(discovered.group(1)) > 0, f"lit ran no tests:\n{output}"
    passed = re.search(r"Passed\s*:\s*(\d+)", output)
    assert passed is not None and int(passed.group(1)) > 0, f"no lit test passed:\n{output}"


SYMBOLIC = re.compile(r"llmopt\.symbol|<\?x|x\?x|x\?>")
"""What marks a lit test's input as symbolic: a declared symbol or a ``?`` extent."""


def test_every_pass_has_a_lit_test_on_a_symbolic_input() -> None:
    """Each pass llmopt registers (its own and xDSL's it offers) appears in a ``-p``
    pipeline of a lit test whose input has a symbolic length, so every pass is checked on
    one (an installed plugin's passes, which a test in the same process may have loaded,
    have their tests in the plugin)."""
    from llmopt import registry

    runs: dict[Path, str] = {}
    for path in (ROOT / "test").rglob("*.mlir"):
        if "Output" in path.parts:
            continue
        text = path.read_text()
        if SYMBOLIC.search(text):
            runs[path] = "\n".join(line for line in text.splitlines() if "RUN:" in line)
    assert runs, "no lit test has a symbolic input"
    own = [name for name, factory in sorted(registry.PASSES.items())  # not a plugin's
           if factory().__module__.split(".")[0] in ("llmopt", "xdsl")]
    missing = [name for name in own
               if not any(re.search(rf"-p[ '\"][^\n]*(?<![\w-]){re.escape(name)}(?![\w-])", run)
                          for run in runs.values())]
    assert not missing, f"passes without a lit test on a symbolic input: {missing}"
