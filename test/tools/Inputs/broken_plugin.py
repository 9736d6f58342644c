"""A plugin that fails while it is imported, for ``llm-opt --load-plugin`` error tests."""

from __future__ import annotations

SETTINGS: dict[str, int] = {}


def configure() -> int:
    """Look up a setting that is not there."""
    return SETTINGS["missing-setting"]


configure()
