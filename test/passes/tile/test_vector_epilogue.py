"""``vector-epilogue`` on the products ``lower-to-cuda`` schedules: a residual product's
epilogue gets its column pairs, and the program keeps its bits."""

from __future__ import annotations

import numpy as np
import pytest

import llmopt
from llmopt import registry
from llmopt.dialects import tile
from llmopt.interp import random_inputs, run

PRODUCT = """
func.func @forward(%w: tensor<512x256xbf16> {llmopt.param = "w"},
                   %x: tensor<1x200x256xbf16> {llmopt.input = "x"},
                   %r: tensor<1x200x512xbf16> {llmopt.input = "r"}) -> tensor<1x200x512xbf16> {
  %0 = torch.linear %x, %w : tensor<1x200x256xbf16>, tensor<512x256xbf16>
      -> tensor<1x200x512xbf16>
  %1 = torch.add %0, %r : tensor<1x200x512xbf16>, tensor<1x200x512xbf16> -> tensor<1x200x512xbf16>
  func.return %1 : tensor<1x200x512xbf16>
}
"""


def _lowered(pipeline: str) -> object:
    module = llmopt.parse(PRODUCT)
    llmopt.lower(module, pipeline)
    return module


@pytest.mark.parametrize(("arch", "copies"), [("sm_90a", 2), ("sm_80", 1)])
def test_a_residual_products_epilogue_moves_pairs_and_keeps_its_bits(arch: str,
                                                                    copies: int) -> None:
    """A warpgroup product (sm_90a) of 200 rows (a ragged last row band) reads the residual
    and writes the output two columns a copy; the ``mma.sync`` one (sm_80) is split over K,
    and its epilogue writes the f32 partials so (the split's sum adds the residual). The
    interpreter gives the bits of the pipeline without the pass."""
    full = registry.expand_pipeline(f"lower-to-cuda{{arch={arch}}}")
    to_tile = full[:full.index(",tile-to-kernel")]
    paired = _lowered(to_tile)
    pairs = [op for op in paired.walk() if isinstance(op, tile.CopyOp)
             and op.count.value.data == 2]
    assert len(pairs) == copies
    to_kernel = full[:full.index(",kernel-to-cuda")]
    with_pass = _lowered(to_kernel)
    without = _lowered(registry.without(to_kernel, "vector-epilogue"))
    fn = next(op for op in llmopt.parse(PRODUCT).walk() if op.name == "func.func")
    inputs = random_inputs(fn, 2)
    (want,) = run(without, inputs)
    (got,) = run(with_pass, inputs)
    np.testing.assert_array_equal(got, want)
