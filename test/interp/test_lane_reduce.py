"""``tile.lane_reduce`` in the Tile IR interpreter: each warp's 32 lanes (or each group of
lanes) combined by the xor butterfly the GPU's shuffles perform (every lane the same bits),
against NumPy in float64 and against the same kernel lowered to Kernel IR
(``kernel.shuffle_xor``), bit for bit."""

from __future__ import annotations

import re
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


QUADS = """
func.func @f(%x: memref<2x16x4x6xf32>) -> (memref<2x16x6xf32>, memref<2x16x6xf32>) {
  %s = memref.alloc() : memref<2x16x6xf32>
  %m = memref.alloc() : memref<2x16x6xf32>
  tile.kernel @quads grid [2, 1, 1] block [64, 1, 1] (%a = %x : memref<2x16x4x6xf32>,
      %os = %s : memref<2x16x6xf32>, %om = %m : memref<2x16x6xf32>) {
    tile.forall (%nb) in [2] over blocks {
      tile.forall (%g, %t) in [16, 4] over block_threads {
        loop.for %i = 0 to 6 {
          %v = loop.load %a[%nb, %g, %t, %i] : memref<2x16x4x6xf32>
          %sum = tile.lane_reduce add %v lanes 4 : f32
          %top = tile.lane_reduce max %v lanes 4 : f32
          %one = arith.constant 1 : index
          %first = arith.cmpi ult, %t, %one : index
          scf.if %first {
            loop.store %sum, %os[%nb, %g, %i] : memref<2x16x6xf32>
            loop.store %top, %om[%nb, %g, %i] : memref<2x16x6xf32>
          }
        }
      }
    }
  }
  func.return %s, %m : memref<2x16x6xf32>, memref<2x16x6xf32>
}
"""
"""Groups of 4 lanes (a row's four partials in the tensor-core layout), inside a static
loop over each thread's rows: each group's sum and maximum."""


def test_groups_of_four_lanes_inside_a_loop(parse: Parse) -> None:
    module = parse(QUADS)
    inputs = random_inputs(module, seed=7)
    total, top = run(module, inputs)
    x = inputs[0]
    # three float32 additions: a few ulps of the group's magnitude.
    np.testing.assert_allclose(total, x.astype(np.float64).sum(axis=2), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(top, x.max(axis=2))
    # the butterfly's order (offset 2, then 1): (v0 + v2) + (v1 + v3), in every lane
    pairs = (x[:, :, 0] + x[:, :, 2]) + (x[:, :, 1] + x[:, :, 3])
    np.testing.assert_array_equal(total, pairs)
    lowered = llmopt.lower(parse(QUADS), "tile-to-kernel")
    offsets = re.findall(r"kernel.shuffle_xor %\w+, (\d+)", str(lowered))
    assert offsets == ["2", "1", "2", "1"]  # two butterflies of two rounds each
    for got, want in zip(run(lowered, inputs), (total, top), strict=True):
        np.testing.assert_array_equal(got, want)
