"""The ``mbarrier`` dialect in the Kernel-IR interpreter: a producer's copies reach a
consumer through a barrier phase; a consumer that reads before its phase, a missing arrival,
too many arrivals and a barrier used before its initialisation are each reported (a slot
refilled before its release: ``test/passes/kernel/test_warp_specialize.py``).

The program is ``test/dialects/mbarrier.mlir``'s: two slots, a producer of two threads
copying eight values into each, a consumer of eight threads doubling them."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import llmopt
from llmopt.interp import InterpretError, RaceError, run

SOURCE = Path(__file__).parents[1] / "dialects" / "mbarrier.mlir"


def _program(drop: str | None = None, occurrence: int = 0) -> str:
    """The test program, without the ``occurrence``-th line matching ``drop``."""
    lines = [line for line in SOURCE.read_text().splitlines()
             if not line.startswith("//")]
    if drop is not None:
        hits = [i for i, line in enumerate(lines) if re.search(drop, line)]
        del lines[hits[occurrence]]
    return "\n".join(lines)


def _input() -> np.ndarray:
    return np.random.default_rng(7).standard_normal(16).astype(np.float32)


def test_the_consumer_reads_what_the_producer_copied() -> None:
    x = _input()
    (out,) = run(llmopt.parse(_program()), [x])
    np.testing.assert_array_equal(out, 2 * x)


def test_reading_a_slot_before_its_phase_is_a_race() -> None:
    with pytest.raises(RaceError, match="read after write"):
        run(llmopt.parse(_program(r"mbarrier.wait %bars\[%c0")), [_input()])


def test_a_missing_arrival_leaves_the_wait_unsatisfied() -> None:
    with pytest.raises(InterpretError, match="has not completed"):
        run(llmopt.parse(_program("mbarrier.arrive_copies")), [_input()])


def test_a_barrier_used_before_its_initialisation_is_an_error() -> None:
    with pytest.raises(InterpretError, match="before it was initialised"):
        run(llmopt.parse(_program(r"mbarrier.init %bars\[%c1, %c0\]")), [_input()])


def test_more_arrivals_than_the_count_is_an_error() -> None:
    text = _program().replace("[%c1, %c0] count 8", "[%c1, %c0] count 4")
    with pytest.raises(InterpretError, match="arrivals at barrier"):
        run(llmopt.parse(text), [_input()])
