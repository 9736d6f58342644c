"""``torch.minimum`` and ``torch.amin`` in the Torch-IR interpreter, against PyTorch: exact,
NaN-propagating, on floats (16-bit included) and integers."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

from llmopt.interp import run

torch = pytest.importorskip("torch")

Parse = Callable[[str], ModuleOp]


@pytest.mark.parametrize("element,dtype", [("f32", torch.float32), ("f16", torch.float16)])
def test_minimum_and_amin_propagate_nan(parse: Parse, element: str, dtype: torch.dtype) -> None:
    module = parse(f"""
func.func @f(%x: tensor<5x6x{element}>, %y: tensor<6x{element}>)
    -> (tensor<5x6x{element}>, tensor<5x{element}>, tensor<1x6x{element}>) {{
  %m = torch.minimum %x, %y : tensor<5x6x{element}>, tensor<6x{element}> -> tensor<5x6x{element}>
  %r = torch.amin %x {{dims = [-1], keepdim = false}} : tensor<5x6x{element}> -> tensor<5x{element}>
  %c = torch.amin %x {{dims = [0], keepdim = true}} : tensor<5x6x{element}> -> tensor<1x6x{element}>
  func.return %m, %r, %c : tensor<5x6x{element}>, tensor<5x{element}>, tensor<1x6x{element}>
}}
""")
    torch.manual_seed(4)
    x, y = torch.randn(5, 6).to(dtype), torch.randn(6).to(dtype)
    x[1, 2], x[3, 0], x[3, 4], y[5] = float("nan"), float("-inf"), float("inf"), float("nan")
    m, r, c = run(module, [x.numpy(), y.numpy()])
    np.testing.assert_array_equal(m, torch.minimum(x, y).numpy())
    np.testing.assert_array_equal(r, x.amin(-1).numpy())
    np.testing.assert_array_equal(c, x.amin(0, keepdim=True).numpy())
    assert np.isnan(m).any() and np.isnan(r).any() and np.isinf(r).any()


def test_integer_minimum(parse: Parse) -> None:
    module = parse("""
func.func @f(%x: tensor<3x4xi64>, %y: tensor<4xi64>) -> tensor<3x4xi64> {
  %m = torch.minimum %x, %y : tensor<3x4xi64>, tensor<4xi64> -> tensor<3x4xi64>
  func.return %m : tensor<3x4xi64>
}
""")
    torch.manual_seed(5)
    x, y = torch.randint(-50, 50, (3, 4)), torch.randint(-50, 50, (4,))
    (m,) = run(module, [x.numpy(), y.numpy()])
    assert m.dtype == np.int64
    np.testing.assert_array_equal(m, torch.minimum(x, y).numpy())


def test_integer_amin_and_amax(parse: Parse) -> None:
    """Integer ``amin``/``amax`` keep their type (what ``argmax``'s index reduction needs)."""
    module = parse("""
func.func @f(%x: tensor<3x4xi64>, %y: tensor<3x4xi32>) -> (tensor<3xi64>, tensor<1x4xi32>) {
  %r = torch.amin %x {dims = [-1], keepdim = false} : tensor<3x4xi64> -> tensor<3xi64>
  %c = torch.amax %y {dims = [0], keepdim = true} : tensor<3x4xi32> -> tensor<1x4xi32>
  func.return %r, %c : tensor<3xi64>, tensor<1x4xi32>
}
""")
    torch.manual_seed(6)
    x, y = torch.randint(-2**40, 2**40, (3, 4)), torch.randint(-50, 50, (3, 4), dtype=torch.int32)
    r, c = run(module, [x.numpy(), y.numpy()])
    assert r.dtype == np.int64 and c.dtype == np.int32
    np.testing.assert_array_equal(r, x.amin(-1).numpy())
    np.testing.assert_array_equal(c, y.amax(0, keepdim=True).numpy())
