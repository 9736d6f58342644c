"""``tile.lane_reduce`` in the Tile IR interpreter: each warp's 32 lanes combined by the xor
butterfly the GPU's shuffles perform (every lane the same bits), against NumPy in float64
and against the same kernel lowered to Kernel IR (``kernel.shuffle_xor``), bit for bit."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from xdsl.dialects.builtin import ModuleOp

import llmopt
from llmopt.interp import random_inputs, run

Parse = Callable[[str], ModuleOp]

ROWS = """
func.func @f(%x: memref<12x32xf32>) -> (memref<12xf32>, memref<12xf32>) {
  %s = memref.alloc() : memref<12xf32>
  %m = memref.alloc() : memref<12xf32>
  tile.kernel @rows grid [2, 1, 1] block [128, 1, 1] (%a = %x : memref<12x32xf32>,
      %os = %s : memref<12xf32>, %om = %m : memref<12xf32>) {
    tile.forall (%nb) in [3] over blocks {
      tile.forall (%w, %l) in [4, 32] over block_threads {
        %v = loop.load %a[%nb * 4 + %w, %l] : memref<12x32xf32>
        %t = tile.lane_reduce add %v : f32
        %top = tile.lane_reduce max %v : f32
        %one = arith.constant 1 : index
        %first = arith.cmpi ult, %l, %one : index
        scf.if %first {
          loop.store %t, %os[%nb * 4 + %w] : memref<12xf32>
          loop.store %top, %om[%nb * 4 + %w] : memref<12xf32>
        }
      }
    }
  }
  func.return %s, %m : memref<12xf32>, memref<12xf32>
}
"""
"""Three rounds of blocks over two blocks (the second block's second round owns nothing),
four warps a block, a row a warp: each row's sum and maximum."""


def test_rows_sum_and_max_as_the_shuffles_do(parse: Parse) -> None:
    module = parse(ROWS)
    inputs = random_inputs(module, seed=5)
    total, top = run(module, inputs)
    x = inputs[0].astype(np.float64)
    # 31 float32 additions of values of size ~1: a few ulps of the row's magnitude.
    np.testing.assert_allclose(total, x.sum(axis=1), rtol=0, atol=1e-5)
    np.testing.assert_array_equal(top, inputs[0].max(axis=1))
    lowered = llmopt.lower(parse(ROWS), "tile-to-kernel")
    assert "kernel.shuffle_xor" in str(lowered)
    again = run(lowered, inputs)
    for got, want in zip(again, (total, top), strict=True):
        np.testing.assert_array_equal(got, want)


def test_uniform_value(parse: Parse) -> None:
    """A value the same in every lane (a block-uniform scalar) combines 32 copies."""
    text = ROWS.replace("%v = loop.load %a[%nb * 4 + %w, %l]", "%v = loop.load %a[%nb, 0]")
    module = parse(text)
    inputs = random_inputs(module, seed=1)
    total, top = run(module, inputs)
    first = inputs[0][:, 0]
    rows = first[np.arange(12) // 4]
    np.testing.assert_allclose(total, 32 * rows, rtol=1e-6)
    np.testing.assert_array_equal(top, rows)
