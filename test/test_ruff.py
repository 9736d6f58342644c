"""The repository is clean under ``ruff check`` (rules and exclusions in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_check() -> None:
    """``ruff check .`` from the repository root reports nothing."""
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"ruff check found problems:\n{result.stdout}{result.stderr}"
