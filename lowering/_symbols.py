"""Symbol naming shared by the lowerings that create kernels."""

from __future__ import annotations


def unique_name(taken: set[str], name: str) -> str:
    """``name``, or ``name_<k>`` for the least k not in ``taken``; the result is added to it."""
    candidate, k = name, 0
    while candidate in taken:
        k += 1
        candidate = f"{name}_{k}"
    taken.add(candidate)
    return candidate
