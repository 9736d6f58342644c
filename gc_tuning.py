"""Fewer garbage collections while a model is captured or lowered.

CPython's cyclic collector starts a collection every few hundred net allocations, and every
so often a full one that walks every tracked object on the heap. Capturing and lowering a
whole model allocate millions of objects (FX nodes, fake tensors, then xDSL ops, attributes
and uses) that mostly live on, and IR nodes point at their parents, so nearly everything is
tracked: the collector keeps walking an ever larger heap to free little, a sizeable share of
a whole-model compile. :func:`fewer_collections` freezes what exists when it is entered
(``gc.freeze``: those objects are never walked) and raises the thresholds, so that young
objects are still collected but rarely, and full collections practically never happen,
until the block ends; then the thresholds are restored and the frozen objects unfrozen.
Garbage with cycles made meanwhile is still found: by the young collections, or by the
first full collection after the block.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["THRESHOLDS", "fewer_collections"]

THRESHOLDS = (50_000, 20, 100)
"""``gc.set_threshold`` within :func:`fewer_collections`: a young collection every 50000 net
allocations (CPython's default is 700), an older one every 20 of those, a full one after
100 of the older ones."""

_depth = 0


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Freeze the heap and collect rarely for the ``with`` block (see the module docstring).
    Blocks nest: only the outermost one changes anything."""
    global _depth
    if _depth:
        yield
        return
    saved = gc.get_threshold()
    _depth += 1
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*saved)
        gc.unfreeze()
        _depth -= 1
