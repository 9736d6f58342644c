"""Tile IR interpretation: SIMT over the launch, strided mappings, cooperative reductions."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

from llmopt.interp import random_inputs, run

Parse = Callable[[str], ModuleOp]


@pytest.mark.parametrize("t", ["f32", "f64"])
@pytest.mark.parametrize("n,grid,block", [(7, 2, 64), (33, 2, 64), (100, 2, 128),
                                          (1000, 2, 128), (256, 5, 96)])
def test_rms_norm_row_schedule(parse: Parse, rms: dict, reference: Callable, rtol: dict,
                               n: int, grid: int, block: int, t: str) -> None:
    """3 rows: with 2 blocks one block takes two rows; with 5 blocks two blocks idle."""
    module = parse(rms["tile"](3, n, t, grid, block))
    x, w = random_inputs(module, seed=n)
    (y,) = run(module, [x, w])
    np.testing.assert_allclose(y, reference(x, w), rtol=rtol[t], atol=0)


def test_forall_over_threads_covers_every_point_once(parse: Parse) -> None:
    """300 points on 2 x 64 threads: three rounds, the last one partial."""
    module = parse("""
func.func @f(%x: memref<3x100xf32>) -> memref<3x100xf32> {
  %y = memref.alloc() : memref<3x100xf32>
  tile.kernel @add1 grid [2, 1, 1] block [64, 1, 1] (%a = %x : memref<3x100xf32>,
                                                      %o = %y : memref<3x100xf32>) {
    tile.forall (%i, %j) in [3, 100] over threads {
      %v = loop.load %a[%i, %j] : memref<3x100xf32>
      %one = arith.constant 1.0 : f32
      %r = arith.addf %v, %one : f32
      loop.store %r, %o[%i, %j] : memref<3x100xf32>
    }
  }
  func.return %y : memref<3x100xf32>
}
""")
    (x,) = random_inputs(module, seed=1)
    (y,) = run(module, [x])
    np.testing.assert_array_equal(y, x + np.float32(1))


def coop_sum_emulation(values: np.ndarray, threads: int) -> np.float32:
    """The documented ``tile.coop_reduce add`` order, written out with scalar f32 loops:
    strided per-thread folds, an xor butterfly per warp, a fold of the warp totals."""
    partial = []
    for t in range(threads):
        acc = np.float32(0)
        for k in range(t, len(values), threads):
            acc = np.float32(acc + values[k])
        partial.append(acc)
    warps = -(-threads // 32)
    lanes = partial + [np.float32(0)] * (warps * 32 - threads)

    def butterfly(v: list[np.float32]) -> list[np.float32]:
        for off in (16, 8, 4, 2, 1):
            v = [np.float32(v[lane] + v[lane ^ off]) for lane in range(32)]
        return v

    totals = [butterfly(lanes[w * 32:(w + 1) * 32])[0] for w in range(warps)]
    if warps == 1:
        return totals[0]
    acc = np.float32(0)
    for total in totals:
        acc = np.float32(acc + total)
    return acc


@pytest.mark.parametrize("n,block", [(1000, 128), (100, 96), (33, 32), (7, 64)])
def test_coop_reduce_uses_the_gpu_order(parse: Parse, n: int, block: int) -> None:
    """Bit-exact against the thread-strided fold, warp butterflies and warp-total fold."""
    module = parse(f"""
func.func @rowsum(%x: memref<3x{n}xf32>) -> memref<3xf32> {{
  %s = memref.alloc() : memref<3xf32>
  tile.kernel @rowsum grid [3, 1, 1] block [{block}, 1, 1] (%a = %x : memref<3x{n}xf32>,
                                                            %o = %s : memref<3xf32>) {{
    tile.forall (%i) in [3] over blocks {{
      %r = tile.coop_reduce add %k = 0 to {n} : f32 {{
        %v = loop.load %a[%i, %k] : memref<3x{n}xf32>
        tile.yield %v : f32
      }}
      loop.store %r, %o[%i] : memref<3xf32>
    }}
  }}
  func.return %s : memref<3xf32>
}}
""")
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((3, n)) * 10.0 ** rng.integers(-3, 4, (3, n))).astype(np.float32)
    (s,) = run(module, [x])
    expected = [coop_sum_emulation(x[i], block) for i in range(3)]
    np.testing.assert_array_equal(s, np.array(expected, dtype=np.float32))


def test_coop_reduce_max(parse: Parse) -> None:
    module = parse("""
func.func @rowmax(%x: memref<4x77xf64>) -> memref<4xf64> {
  %s = memref.alloc() : memref<4xf64>
  tile.kernel @rowmax grid [4, 1, 1] block [64, 1, 1] (%a = %x : memref<4x77xf64>,
                                                       %o = %s : memref<4xf64>) {
    tile.forall (%i) in [4] over blocks {
      %r = tile.coop_reduce max %k = 0 to 77 : f64 {
        %v = loop.load %a[%i, %k] : memref<4x77xf64>
        tile.yield %v : f64
      }
      loop.store %r, %o[%i] : memref<4xf64>
    }
  }
  func.return %s : memref<4xf64>
}
""")
    (x,) = random_inputs(module, seed=2)
    (s,) = run(module, [x])
    np.testing.assert_array_equal(s, x.max(axis=1))


# --- tile.alloc: block-local buffers ------------------------------------------------------------


@pytest.mark.parametrize("space", ["shared", "registers"])
@pytest.mark.parametrize("grid", [4, 2, 1])
def test_tile_alloc_is_private_to_each_block_point(parse: Parse, space: str, grid: int) -> None:
    """Every point of the forall over blocks writes its own row into the same indices of a
    tile.alloc buffer and reads them back: with 4 blocks the points run side by side, with 1
    one block takes all four in rounds; no point sees another's values either way."""
    module = parse(f"""
func.func @f(%x: memref<4x32xf32>) -> memref<4x32xf32> {{
  %y = memref.alloc() : memref<4x32xf32>
  tile.kernel @rows grid [{grid}, 1, 1] block [32, 1, 1] (%a = %x : memref<4x32xf32>,
                                                        %o = %y : memref<4x32xf32>) {{
    tile.forall (%b) in [4] over blocks {{
      %buf = tile.alloc {space} : memref<32x2xf32>
      tile.forall (%t) in [32] over block_threads {{
        %v = loop.load %a[%b, %t] : memref<4x32xf32>
        loop.store %v, %buf[%t, 1] : memref<32x2xf32>
      }}
      tile.forall (%t) in [32] over block_threads {{
        %v = loop.load %buf[%t, 1] : memref<32x2xf32>
        loop.store %v, %o[%b, %t] : memref<4x32xf32>
      }}
    }}
  }}
  func.return %y : memref<4x32xf32>
}}
""")
    (x,) = random_inputs(module, seed=grid)
    (y,) = run(module, [x])
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("grid", [4, 1])
def test_two_blocks_writing_one_shared_index_do_not_interfere(parse: Parse, grid: int) -> None:
    """Each block point stores a value of its own into element 0 of a shared buffer, then
    reads element 0: it gets its own value, not the last writer's."""
    module = parse(f"""
func.func @f(%x: memref<4x8xf32>) -> memref<4xf32> {{
  %y = memref.alloc() : memref<4xf32>
  tile.kernel @one grid [{grid}, 1, 1] block [32, 1, 1] (%a = %x : memref<4x8xf32>,
                                                       %o = %y : memref<4xf32>) {{
    tile.forall (%b) in [4] over blocks {{
      %s = tile.alloc shared : memref<1xf32>
      tile.forall (%once) in [1] over block_threads {{
        %v = loop.load %a[%b, 3] : memref<4x8xf32>
        loop.store %v, %s[0] : memref<1xf32>
      }}
      tile.forall (%once) in [1] over block_threads {{
        %v = loop.load %s[0] : memref<1xf32>
        loop.store %v, %o[%b] : memref<4xf32>
      }}
    }}
  }}
  func.return %y : memref<4xf32>
}}
""")
    (x,) = random_inputs(module, seed=7)
    (y,) = run(module, [x])
    np.testing.assert_array_equal(y, x[:, 3])


def test_register_buffer_read_before_written_is_poison(parse: Parse) -> None:
    """A tile.alloc starts as NaN: column 1 of the registers, never written, reads NaN while
    column 0 holds what each thread stored."""
    module = parse("""
func.func @f(%x: memref<2x32xf32>) -> (memref<2x32xf32>, memref<2x32xf32>) {
  %w = memref.alloc() : memref<2x32xf32>
  %u = memref.alloc() : memref<2x32xf32>
  tile.kernel @poison grid [2, 1, 1] block [32, 1, 1] (%a = %x : memref<2x32xf32>,
      %ow = %w : memref<2x32xf32>, %ou = %u : memref<2x32xf32>) {
    tile.forall (%b) in [2] over blocks {
      %acc = tile.alloc registers : memref<32x2xf32>
      tile.forall (%t) in [32] over block_threads {
        %v = loop.load %a[%b, %t] : memref<2x32xf32>
        loop.store %v, %acc[%t, 0] : memref<32x2xf32>
      }
      tile.forall (%t) in [32] over block_threads {
        %written = loop.load %acc[%t, 0] : memref<32x2xf32>
        %unwritten = loop.load %acc[%t, 1] : memref<32x2xf32>
        loop.store %written, %ow[%b, %t] : memref<2x32xf32>
        loop.store %unwritten, %ou[%b, %t] : memref<2x32xf32>
      }
    }
  }
  func.return %w, %u : memref<2x32xf32>, memref<2x32xf32>
}
""")
    (x,) = random_inputs(module, seed=3)
    written, unwritten = run(module, [x])
    np.testing.assert_array_equal(written, x)
    assert np.isnan(unwritten).all()
