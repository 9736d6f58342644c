"""``kernel.last_block`` in the Kernel-IR interpreter: the region runs once, in one block,
after every block's writes; reading another block's writes without it is a race; the
counter must be zero on arrival."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

from llmopt.interp import InterpretError, RaceError, run

Parse = Callable[[str], ModuleOp]

# Each of 4 blocks of 32 threads writes 2 * in[i]; the block arriving last sums all 128
# doubled values (thread 0) and counts how often the region ran (hits).
TAIL = """
kernel.func @twice_sum(%out: memref<128xf32>, %in: memref<128xf32>, %total: memref<1xf32>,
                       %hits: memref<1xi32>, %count: memref<1xi32>) block [32, 1, 1] {
  %b = kernel.block_id x
  %t = kernel.thread_id x
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c128 = arith.constant 128 : index
  %two = arith.constant 2.0 : f32
  %zero = arith.constant 0.0 : f32
  %i1 = arith.constant 1 : i32
  %base = arith.muli %b, %c32 : index
  %i = arith.addi %base, %t : index
  %v = kernel.load %in[%i] : memref<128xf32>
  %w = arith.mulf %v, %two : f32
  kernel.store %w, %out[%i] : memref<128xf32>
  kernel.last_block %count : memref<1xi32> {
    %first = arith.cmpi eq, %t, %c0 : index
    scf.if %first {
      %s = scf.for %j = %c0 to %c128 step %c1 iter_args(%acc = %zero) -> (f32) {
        %p = kernel.load %out[%j] : memref<128xf32>
        %a = arith.addf %acc, %p : f32
        scf.yield %a : f32
      }
      kernel.store %s, %total[%c0] : memref<1xf32>
      %h = kernel.load %hits[%c0] : memref<1xi32>
      %h1 = arith.addi %h, %i1 : i32
      kernel.store %h1, %hits[%c0] : memref<1xi32>
    }
  }
  kernel.return
}

func.func @main(%in: memref<128xf32>, %count: memref<1xi32>)
    -> (memref<128xf32>, memref<1xf32>, memref<1xi32>) {
  %out = memref.alloc() : memref<128xf32>
  %total = memref.alloc() : memref<1xf32>
  %hits = memref.alloc() {llmopt.zeroed} : memref<1xi32>
  kernel.launch @twice_sum grid [4, 1, 1] block [32, 1, 1] smem 0
      (%out, %in, %total, %hits, %count)
      : memref<128xf32>, memref<128xf32>, memref<1xf32>, memref<1xi32>, memref<1xi32>
  func.return %out, %total, %hits : memref<128xf32>, memref<1xf32>, memref<1xi32>
}
"""


def _inputs(count: int = 0) -> list[np.ndarray]:
    x = np.random.default_rng(7).standard_normal(128).astype(np.float32)
    return [x, np.array([count], np.int32)]


def test_the_last_block_sums_every_block_s_writes_once(parse: Parse) -> None:
    x, count = _inputs()
    out, total, hits = run(parse(TAIL), [x, count])
    np.testing.assert_array_equal(out, 2 * x)
    # a float32 sequential sum of 128 terms against float64: within 128 * eps relative
    ref = (2 * x.astype(np.float64)).sum()
    assert abs(float(total[0]) - ref) <= 128 * np.finfo(np.float32).eps * np.abs(2 * x).sum()
    assert int(hits[0]) == 1


def test_reading_other_blocks_writes_without_it_is_a_race(parse: Parse) -> None:
    # the region's work after a plain barrier: a block reads what other blocks wrote
    text = TAIL.replace("kernel.last_block %count : memref<1xi32> {",
                        "kernel.barrier\n  %all = arith.constant true\n  scf.if %all {")
    with pytest.raises(RaceError, match="read after write"):
        run(parse(text), _inputs())


def test_a_counter_that_is_not_zero_is_an_error(parse: Parse) -> None:
    with pytest.raises(InterpretError, match="the counter holds 3 .* not 0"):
        run(parse(TAIL), _inputs(count=3))
