"""The ``mbarrier`` dialect in the Kernel-IR interpreter: a producer's copies reach a
consumer through a barrier phase; a consumer that reads before its phase, a missing arrival,
too many arrivals and a barrier used before its initialisation are each reported (a slot
refilled before its release: ``test/passes/kernel/test_warp_specialize.py``). With each role
in a branch of its own the branches run beside each other, as cooperating tasks.

The program is ``test/dialects/mbarrier.mlir``'s: two slots, a producer of two threads
copying eight values into each, a consumer of eight threads doubling them."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import llmopt
from llmopt.interp import InterpretError, OutOfBoundsError, RaceError, run

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


SPLIT = """
kernel.func @handoff(%out: memref<16xf32>, %in: memref<16xf32>) block [64, 1, 1] {
  %slots = kernel.shared : memref<2x8xf32>
  %bars = kernel.shared : memref<2x2xi64>
  %tid = kernel.thread_id x
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c32 = arith.constant 32 : index
  %two = arith.constant 2.0 : f32
  %first = arith.cmpi eq, %tid, %c0 : index
  scf.if %first {
    mbarrier.init %bars[%c0, %c0] count 2 : memref<2x2xi64>
    mbarrier.init %bars[%c0, %c1] count 2 : memref<2x2xi64>
    mbarrier.init %bars[%c1, %c0] count 8 : memref<2x2xi64>
    mbarrier.init %bars[%c1, %c1] count 8 : memref<2x2xi64>
  }
  kernel.barrier
  %consumer = arith.cmpi ult, %tid, %c8 : index
  scf.if %consumer {
    scf.for %s = %c0 to %c2 step %c1 {
      mbarrier.wait %bars[%c0, %s] parity %c0 : memref<2x2xi64>
      %v = kernel.load %slots[%s, %tid] : memref<2x8xf32>
      %w = arith.mulf %v, %two : f32
      %base = arith.muli %s, %c8 : index
      %at = arith.addi %base, %tid : index
      %out_at = arith.addi %at, %SHIFT : index
      kernel.store %w, %out[%out_at] : memref<16xf32>
      mbarrier.arrive %bars[%c1, %s] : memref<2x2xi64>
    }
  } else {
    %producer_lane = arith.subi %tid, %c32 : index
    %producer = arith.cmpi ult, %producer_lane, %c2 : index
    scf.if %producer {
      scf.for %s = %c0 to %c2 step %c1 {
        mbarrier.wait %bars[%c1, %s] parity %c1 : memref<2x2xi64>
        %lane = arith.muli %producer_lane, %c4 : index
        %base = arith.muli %s, %c8 : index
        %at = arith.addi %base, %lane : index
        kernel.async_copy %in[%at] to %slots[%s, %lane] count 4 : memref<16xf32> to memref<2x8xf32>
        mbarrier.arrive_copies %bars[%c0, %s] : memref<2x2xi64>
      }
    }
  }
  kernel.return
}

func.func @main(%in: memref<16xf32>) -> memref<16xf32> {
  %out = memref.alloc() : memref<16xf32>
  kernel.launch @handoff grid [1, 1, 1] block [64, 1, 1] smem 0 (%out, %in)
      : memref<16xf32>, memref<16xf32>
  func.return %out : memref<16xf32>
}
"""
"""The handoff with each role in a branch of its own, each looping over both slots: the
consumers' branch runs first and waits for a slot only the producer's branch fills."""


def _split(shift: int = 0, drop: str | None = None) -> str:
    """:data:`SPLIT`, its stores ``shift`` places on, without its lines matching ``drop``."""
    text = SPLIT.replace("%SHIFT", "%c0" if shift == 0 else "%c8")
    if drop is not None:
        text = "\n".join(line for line in text.splitlines() if not re.search(drop, line))
    return text


def test_roles_in_branches_of_their_own_run_beside_each_other() -> None:
    x = _input()
    (out,) = run(llmopt.parse(_split()), [x])
    np.testing.assert_array_equal(out, 2 * x)


def test_a_wait_no_branch_can_satisfy_is_reported() -> None:
    with pytest.raises(InterpretError, match="has not completed"):
        run(llmopt.parse(_split(drop="mbarrier.arrive_copies")), [_input()])


def test_an_error_in_one_branch_ends_the_other() -> None:
    """The consumers' second slot is stored out of bounds while the producer's branch is
    still to finish: the error is raised where the branches began, and no branch is left
    running."""
    threads = threading.active_count()
    with pytest.raises(OutOfBoundsError, match="out of bounds"):
        run(llmopt.parse(_split(shift=8)), [_input()])
    deadline = time.monotonic() + 5
    while threading.active_count() > threads and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() == threads
