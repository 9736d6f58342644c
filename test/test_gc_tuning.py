"""Fewer garbage collections while capturing and lowering (llmopt.gc_tuning)."""

from __future__ import annotations

import gc

from llmopt.gc_tuning import THRESHOLDS, fewer_collections


def test_thresholds_and_the_frozen_heap_are_restored() -> None:
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    with fewer_collections():
        assert gc.get_threshold() == THRESHOLDS
        assert gc.get_freeze_count() > frozen
        with fewer_collections():  # nested: nothing more happens, nothing is undone early
            assert gc.get_threshold() == THRESHOLDS
        assert gc.get_threshold() == THRESHOLDS
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_restored_after_an_exception() -> None:
    before = gc.get_threshold()
    try:
        with fewer_collections():
            raise ValueError("a failing lowering")
    except ValueError:
        pass
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_cyclic_garbage_is_still_collected() -> None:
    """A cycle made inside the block is freed by a collection (young objects are not
    frozen)."""
    import weakref

    class Node:
        pass

    with fewer_collections():
        a, b = Node(), Node()
        a.other, b.other = b, a  # type: ignore[attr-defined]
        alive = weakref.ref(a)
        del a, b
        gc.collect()
        assert alive() is None
