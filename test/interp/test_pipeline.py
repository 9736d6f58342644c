"""Every level of the lowering pipeline interpreted on the same inputs.

A Torch-IR RMSNorm + gated MLP is lowered one pass at a time; after each pass the module is
interpreted at its level and compared with the Torch-IR result. Tile and Kernel IR must
agree bit for bit: ``tile.coop_reduce``'s order is the one ``tile-to-kernel`` generates.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, math, memref, scf
from xdsl.dialects.builtin import ModuleOp

from llmopt.interp import random_inputs, run

Parse = Callable[[str], ModuleOp]

PASSES = ["torch-to-prim", "prim-to-loop", "fuse-kernels", "canonicalize,cse", "loop-to-tile",
          "tile-to-kernel", "canonicalize,cse"]

MODEL = """
func.func @forward(%w: tensor<64xf32>, %wg: tensor<96x64xf32>, %bg: tensor<96xf32>,
                   %wu: tensor<96x64xf32>, %x: tensor<1x5x64xf32>) -> tensor<1x5x96xf32> {
  %eps = torch.constant 1.0e-05 : tensor<f32>
  %0 = torch.pow %x {exponent = 2.0} : tensor<1x5x64xf32> -> tensor<1x5x64xf32>
  %1 = torch.mean %0 {dims = [-1], keepdim = true} : tensor<1x5x64xf32> -> tensor<1x5x1xf32>
  %2 = torch.add %1, %eps : tensor<1x5x1xf32>, tensor<f32> -> tensor<1x5x1xf32>
  %3 = torch.rsqrt %2 : tensor<1x5x1xf32> -> tensor<1x5x1xf32>
  %4 = torch.mul %x, %3 : tensor<1x5x64xf32>, tensor<1x5x1xf32> -> tensor<1x5x64xf32>
  %5 = torch.mul %w, %4 : tensor<64xf32>, tensor<1x5x64xf32> -> tensor<1x5x64xf32>
  %6 = torch.linear %5, %wg, %bg
       : tensor<1x5x64xf32>, tensor<96x64xf32>, tensor<96xf32> -> tensor<1x5x96xf32>
  %7 = torch.linear %5, %wu : tensor<1x5x64xf32>, tensor<96x64xf32> -> tensor<1x5x96xf32>
  %8 = torch.silu %6 : tensor<1x5x96xf32> -> tensor<1x5x96xf32>
  %9 = torch.mul %8, %7 : tensor<1x5x96xf32>, tensor<1x5x96xf32> -> tensor<1x5x96xf32>
  func.return %9 : tensor<1x5x96xf32>
}
"""


def _context() -> Context:
    from llmopt.registry import DIALECTS

    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, arith.Arith, math.Math, memref.MemRef, scf.Scf):
        ctx.load_dialect(dialect)
    for factory in DIALECTS.values():
        ctx.load_dialect(factory())
    return ctx


def test_every_level_computes_the_same(parse: Parse) -> None:
    pytest.importorskip("llmopt.dialects.torch")
    from llmopt.registry import build_pipeline

    module = parse(MODEL)
    inputs = random_inputs(module, seed=0)
    inputs[1] /= 8  # linear outputs of order one
    inputs[3] /= 8
    (expected,) = run(module, inputs)
    ctx = _context()
    levels: dict[str, np.ndarray] = {}
    for name in PASSES:
        build_pipeline(name).apply(ctx, module)
        module.verify()
        (got,) = run(module, inputs)
        # f32 sums of <= 64 terms in different orders: ~sqrt(64) * 6e-8 relative to the
        # terms' magnitude (~1).
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=name)
        levels[name] = got
    np.testing.assert_array_equal(levels["loop-to-tile"], levels["tile-to-kernel"])
    assert any(op.name == "kernel.launch" for op in module.walk())
