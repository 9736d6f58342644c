"""L2 prefetches (``tile.prefetch``, ``kernel.prefetch``) in the interpreters: a hint that
changes no value, whose range is still checked as the GPU needs it (inside the buffer,
starting at a multiple of 16 bytes)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import VerifyException

from llmopt.interp import InterpretError, OutOfBoundsError, random_inputs, run

Parse = Callable[[str], ModuleOp]

TILE = """
func.func @f(%x: memref<4x64xf32>) -> memref<4x64xf32> {{
  %y = memref.alloc() : memref<4x64xf32>
  tile.kernel @rows grid [4, 1, 1] block [64, 1, 1] (%a = %x : memref<4x64xf32>,
                                                     %o = %y : memref<4x64xf32>) {{
    tile.forall (%b) in [4] over blocks {{
      tile.forall (%r) in [1] over block_threads {{
        tile.prefetch %a[{row}, {col}]{clamp} count {count} : memref<4x64xf32>
      }}
      tile.forall (%j) in [64] over block_threads {{
        %v = loop.load %a[%b, %j] : memref<4x64xf32>
        %w = arith.addf %v, %v : f32
        loop.store %w, %o[%b, %j] : memref<4x64xf32>
      }}
    }}
  }}
  func.return %y : memref<4x64xf32>
}}
"""
"""Each block doubles its row of ``x``, having asked for a range of ``x`` first."""

KERNEL = """
kernel.func @rows(%o: memref<4x64xf32>, %a: memref<4x64xf32>) block [64, 1, 1] {{
  %b = kernel.block_id x
  %t = kernel.thread_id x
  %c = arith.constant {col} : index
  kernel.prefetch %a[%b, %c] count {count} : memref<4x64xf32>
  %v = kernel.load %a[%b, %t] : memref<4x64xf32>
  %w = arith.addf %v, %v : f32
  kernel.store %w, %o[%b, %t] : memref<4x64xf32>
  kernel.return
}}
func.func @f(%x: memref<4x64xf32>) -> memref<4x64xf32> {{
  %y = memref.alloc() : memref<4x64xf32>
  kernel.launch @rows grid [4, 1, 1] block [64, 1, 1] smem 0 (%y, %x)
      : memref<4x64xf32>, memref<4x64xf32>
  func.return %y : memref<4x64xf32>
}}
"""


def _doubled(module: ModuleOp) -> None:
    inputs = random_inputs(module, seed=3)
    (out,) = run(module, inputs)
    np.testing.assert_array_equal(out, 2 * inputs[0])


@pytest.mark.parametrize("row,col,clamp,count", [
    ("%b", "0", "", 64),  # the block's whole row
    ("%b + 1", "4", " clamp", 60),  # the next row, clamped to the last for the last block
    ("%b", "8", "", 8),
])
def test_tile_prefetch_changes_nothing(parse: Parse, row: str, col: str, clamp: str,
                                       count: int) -> None:
    _doubled(parse(TILE.format(row=row, col=col, clamp=clamp, count=count)))


def test_tile_prefetch_past_the_buffer(parse: Parse) -> None:
    """Without clamp the last block's next row is outside ``x``: the verifier says so (the
    coordinate is affine in the blocks' variable); at Kernel IR the interpreter does."""
    with pytest.raises(VerifyException, match=r"tile.prefetch: index \(%b \+ 1\) takes "
                       r"values 1 to 4 over its loops, outside"):
        parse(TILE.format(row="%b + 1", col="0", clamp="", count=64))


def test_tile_prefetch_misaligned(parse: Parse) -> None:
    """A prefetch starts at a multiple of 16 bytes: element 2 of an f32 row is byte 8."""
    module = parse(TILE.format(row="%b", col="2", clamp="", count=16))
    with pytest.raises(InterpretError, match=r"tile.prefetch: misaligned prefetch: element "
                       r"offset 2 is not at a multiple of 16 bytes"):
        run(module, random_inputs(module, seed=0))


def test_kernel_prefetch(parse: Parse) -> None:
    _doubled(parse(KERNEL.format(col=16, count=48)))
    module = parse(KERNEL.format(col=32, count=48))  # elements 32..79 of a row of 64
    with pytest.raises(OutOfBoundsError, match="kernel.prefetch"):
        run(module, random_inputs(module, seed=0))
    module = parse(KERNEL.format(col=6, count=32))
    with pytest.raises(InterpretError, match="misaligned prefetch"):
        run(module, random_inputs(module, seed=0))
