"""``vector-fragments`` on a small row-sum kernel: the rows of an aligned shared tile are read
four at a time and the result does not change; a chunk loop whose forall also writes shared
memory (other threads read it in the next step) is left alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from xdsl.dialects import scf
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, i64

import llmopt
from llmopt.dialects import loop, tile
from llmopt.interp import random_inputs, run
from llmopt.passes.tile._schedule import SCHEDULE_ATTR

ROW_SUMS = """
func.func @forward(%u: memref<4x8xf32>) -> memref<4xf32> {
  %rows = memref.alloc() : memref<4xf32>
  tile.kernel @row_sums grid [1, 1, 1] block [4, 1, 1] (%a = %u : memref<4x8xf32>,
                                                        %o = %rows : memref<4xf32>) {
    tile.forall (%b) in [1] over blocks {
      %sums = tile.alloc registers : memref<4x1xf32>
      tile.forall (%t) in [4] over block_threads {
        %z = arith.constant 0.000000e+00 : f32
        loop.store %z, %sums[%t, 0] : memref<4x1xf32>
      }
      %s = tile.alloc shared : memref<4xPITCHxf32>
      tile.forall (%t) in [4] over block_threads {
        loop.for %j = 0 to 8 {
          %v = loop.load %a[%t, %j] : memref<4x8xf32>
          loop.store %v, %s[%t, %j] : memref<4xPITCHxf32>
        }
      }
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c8 = arith.constant 8 : index
      scf.for %kk = %c0 to %c8 step %c1 {
        tile.forall (%t) in [4] over block_threads {
          %v = loop.load %s[(3 - %t), %kk] : memref<4xPITCHxf32>
          %w = loop.load %sums[%t, 0] : memref<4x1xf32>
          %y = arith.addf %w, %v : f32
          loop.store %y, %sums[%t, 0] : memref<4x1xf32>
          EXTRA
        }
      }
      tile.forall (%t) in [4] over block_threads {
        %v = loop.load %sums[%t, 0] : memref<4x1xf32>
        loop.store %v, %o[%t] : memref<4xf32>
      }
    }
  }
  func.return %rows : memref<4xf32>
}
"""
"""Thread ``t`` sums row ``3 - t`` of a staged copy of ``u`` (rows ``PITCH`` words apart),
one chunk step at a time; ``EXTRA`` is spliced into the step's forall."""

WRITES_SHARED = "loop.store %y, %s[%t, %kk] : memref<4xPITCHxf32>"


def _program(pitch: int, extra: str = "") -> str:
    return ROW_SUMS.replace("EXTRA", extra).replace("PITCH", str(pitch))


@pytest.mark.parametrize("pitch,fires", [(8, True), (12, True), (9, False), (10, False)])
def test_aligned_rows_are_read_in_fragments(pitch: int, fires: bool) -> None:
    """Rows whose pitch is a multiple of 4 words get fragments; the sums are unchanged, in
    Tile IR and in the Kernel IR it lowers to (race-checked)."""
    module = llmopt.parse(_program(pitch))
    inputs = random_inputs(module, seed=2)
    (want,) = run(module, inputs)
    np.testing.assert_allclose(want, inputs[0][::-1].sum(axis=1), rtol=1e-6)
    llmopt.lower(module, "vector-fragments")
    text = str(module)
    assert ("tile.copy" in text) == fires, text
    if fires:
        assert "scf.for %kq" in text and "tile.alloc registers : memref<4x4xf32>" in text
    (got,) = run(module, inputs)
    np.testing.assert_array_equal(got, want)
    llmopt.lower(module, "tile-to-kernel,canonicalize,cse")
    (again,) = run(module, inputs)
    np.testing.assert_array_equal(again, want)


def test_a_step_that_writes_shared_memory_is_left_alone() -> None:
    """Merging chunk steps into one forall would drop the barriers between them."""
    module = llmopt.parse(_program(8, WRITES_SHARED.replace("PITCH", "8")))
    before = str(module)
    llmopt.lower(module, "vector-fragments")
    assert str(module) == before


LINEAR = Path(__file__).with_name("vector-fragments.mlir")
"""The register-tiled linear of the lit test: 2 × 4 micro-tiles, ``acc[ti, tj, mi, nj]``."""


def _kv_loops(module: Any) -> list[scf.ForOp]:
    return [op for op in module.walk() if isinstance(op, scf.ForOp)
            and op.body.block.args[0].name_hint == "kv"]


def test_kv_order_2_puts_the_element_loop_innermost_and_keeps_the_sums() -> None:
    """``kv_order=2`` moves the loop over a fragment's elements inside the micro-tile's
    ``mi``/``nj`` loops; every accumulator takes the same multiply-adds in the same order, so
    the outputs are bit-identical to ``kv_order=1``'s (and the kernel's knob does the same)."""
    text = LINEAR.read_text()
    outer = llmopt.lower(llmopt.parse(text), "vector-fragments{kv_order=1}")
    inner = llmopt.lower(llmopt.parse(text), "vector-fragments{kv_order=2}")
    assert all(isinstance(k.parent_op(), tile.ForallOp) for k in _kv_loops(outer))
    moved = _kv_loops(inner)
    assert moved and all(isinstance(k.parent_op(), loop.ForOp) for k in moved)
    inputs = random_inputs(outer, seed=3)
    for a, b in zip(run(outer, inputs), run(inner, inputs), strict=True):
        np.testing.assert_array_equal(a, b)
    knobbed = llmopt.parse(text)
    for kernel in knobbed.walk():
        if isinstance(kernel, tile.KernelOp):
            kernel.attributes[SCHEDULE_ATTR] = DictionaryAttr({"kv_order": IntegerAttr(2, i64)})
    llmopt.lower(knobbed, "vector-fragments")
    knob_loops = _kv_loops(knobbed)
    assert knob_loops and all(isinstance(k.parent_op(), loop.ForOp) for k in knob_loops)


def test_an_accumulator_shared_by_the_nest_keeps_the_element_loop_outside() -> None:
    """When the ``nj`` iterations add into one accumulator, putting ``kv`` inside would
    reorder its sum: the loop stays around the nest."""
    text = LINEAR.read_text().replace("%acc[%ti_1, %tj_1, %mi_1, %nj_1]",
                                      "%acc[%ti_1, %tj_1, %mi_1, 0]")
    module = llmopt.lower(llmopt.parse(text), "vector-fragments{kv_order=2}")
    loops = _kv_loops(module)
    assert loops and all(isinstance(k.parent_op(), tile.ForallOp) for k in loops)


def test_a_bad_kv_order_is_refused() -> None:
    with pytest.raises(Exception, match="kv_order must be"):
        llmopt.lower(llmopt.parse(LINEAR.read_text()), "vector-fragments{kv_order=3}")
