"""pytest configuration shared by all of llmopt's tests.

Tests marked ``@pytest.mark.gpu`` are skipped where torch sees no CUDA device. torch is
imported only when such a test was collected. The user's tuning cache is replaced by an
empty one (``LLMOPT_TUNE_CACHE``), so that ``llmopt tune`` in a test writes no home
directory and a pipeline asking for the cache (``apply-tuned{user=1}``) finds none.
"""

from __future__ import annotations

import os
import tempfile

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Declare the ``gpu`` marker (also declared in pyproject.toml); point the tuning cache
    at a file that does not exist (unless the caller chose one)."""
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU (skipped where none is present)")
    config.addinivalue_line("markers", "slow: takes a minute or more (builds and installs a "
                            "wheel); runs with the rest")
    os.environ.setdefault("LLMOPT_TUNE_CACHE",
                          os.path.join(tempfile.mkdtemp(prefix="llmopt-tune-"), "tuned.json"))


def _cuda_available() -> bool:
    """Whether torch is installed and sees a CUDA device."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the collected ``gpu`` tests when no CUDA device is available."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items or _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (torch.cuda.is_available() is False)")
    for item in gpu_items:
        item.add_marker(skip)
