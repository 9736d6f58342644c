"""Tensor IR (``prim``) interpretation: whole-array numpy per op."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

from llmopt.interp import OutOfBoundsError, random_inputs, run

Parse = Callable[[str], ModuleOp]


@pytest.mark.parametrize("t", ["f32", "f64"])
@pytest.mark.parametrize("n", [7, 33, 100, 1000])
def test_rms_norm(parse: Parse, rms: dict, reference: Callable, rtol: dict, n: int,
                  t: str) -> None:
    module = parse(rms["prim"](3, n, t))
    x, w = random_inputs(module, seed=n)
    (y,) = run(module, [x, w])
    assert y.dtype == np.dtype("float32" if t == "f32" else "float64")
    np.testing.assert_allclose(y, reference(x, w), rtol=rtol[t], atol=0)


def test_elementwise_rounds_in_f32(parse: Parse) -> None:
    """The body runs in the tensor's dtype: bit-identical to the same numpy f32 ops."""
    module = parse("""
func.func @silu(%x: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %y = prim.elementwise (%x) : (tensor<4x64xf32>) -> tensor<4x64xf32> {
  ^bb0(%a: f32):
    %neg = arith.negf %a : f32
    %e = math.exp %neg : f32
    %one = arith.constant 1.0 : f32
    %den = arith.addf %one, %e : f32
    %s = arith.divf %a, %den : f32
    prim.yield %s : f32
  }
  func.return %y : tensor<4x64xf32>
}
""")
    (x,) = random_inputs(module, seed=1)
    (y,) = run(module, [x])
    expected = x / (np.float32(1) + np.exp(-x))
    assert expected.dtype == np.float32
    np.testing.assert_array_equal(y, expected)


def test_elementwise_mixed_precision_select_and_fill(parse: Parse) -> None:
    module = parse("""
func.func @f(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<2x3xf64>) {
  %y = prim.elementwise (%x) : (tensor<8xf32>) -> tensor<8xf32> {
  ^bb0(%a: f32):
    %wide = arith.extf %a : f32 to f64
    %t = math.tanh %wide : f64
    %zero = arith.constant 0.0 : f64
    %pos = arith.cmpf ogt, %wide, %zero : f64
    %r = arith.select %pos, %t, %zero : f64
    %m = arith.maximumf %r, %zero : f64
    %n = arith.truncf %m : f64 to f32
    prim.yield %n : f32
  }
  %fill = prim.elementwise () : () -> tensor<2x3xf64> {
    %c = arith.constant 2.5 : f64
    prim.yield %c : f64
  }
  func.return %y, %fill : tensor<8xf32>, tensor<2x3xf64>
}
""")
    x = np.linspace(-2, 2, 8, dtype=np.float32)
    y, fill = run(module, [x])
    expected = np.maximum(np.tanh(x.astype(np.float64)), 0).astype(np.float32)
    np.testing.assert_array_equal(y, expected)
    np.testing.assert_array_equal(fill, np.full((2, 3), 2.5))


@pytest.mark.parametrize("kind,fn", [("add", np.sum), ("mul", np.prod), ("max", np.max),
                                     ("min", np.min)])
def test_reduce_kinds(parse: Parse, kind: str, fn: Callable) -> None:
    module = parse(f"""
func.func @r(%x: tensor<3x4x5xf64>) -> tensor<1x4x1xf64> {{
  %r = prim.reduce {kind} %x dims [0, 2] : tensor<3x4x5xf64> -> tensor<1x4x1xf64>
  func.return %r : tensor<1x4x1xf64>
}}
""")
    (x,) = random_inputs(module, seed=2)
    (y,) = run(module, [x])
    np.testing.assert_allclose(y, fn(x, axis=(0, 2), keepdims=True), rtol=1e-14)


INDEX_MAPS = [
    # permute: result[a, b, c] = x[b, c, a]
    ("(d0, d1, d2) -> (d1, d2, d0)", (2, 3, 4), (4, 2, 3), lambda x: x.transpose(2, 0, 1)),
    # reshape 6x4 -> 2x12 through floordiv/mod of the linear index
    ("(d0, d1) -> ((d0 * 12 + d1) floordiv 4, (d0 * 12 + d1) mod 4)", (6, 4), (2, 12),
     lambda x: x.reshape(2, 12)),
    # broadcast a column
    ("(d0, d1, d2) -> (d0, d1, 0)", (1, 8, 1), (1, 8, 5), lambda x: np.broadcast_to(x, (1, 8, 5))),
    # strided slice x[:, 1:8:2]
    ("(d0, d1) -> (d0, d1 * 2 + 1)", (3, 8), (3, 4), lambda x: x[:, 1:8:2]),
    # reverse
    ("(d0) -> (6 - d0)", (7,), (7,), lambda x: x[::-1]),
]


@pytest.mark.parametrize("amap,src,dst,fn", INDEX_MAPS)
def test_index_map(parse: Parse, amap: str, src: tuple, dst: tuple, fn: Callable) -> None:
    s = "x".join(map(str, src))
    d = "x".join(map(str, dst))
    module = parse(f"""
func.func @m(%x: tensor<{s}xf32>) -> tensor<{d}xf32> {{
  %y = prim.index_map (%x) [{amap}] : (tensor<{s}xf32>) -> tensor<{d}xf32>
  func.return %y : tensor<{d}xf32>
}}
""")
    (x,) = random_inputs(module, seed=3)
    (y,) = run(module, [x])
    np.testing.assert_array_equal(y, fn(x))


def test_index_map_concat_rotate_half(parse: Parse) -> None:
    """``cat(-x[..., 4:], x[..., :4])`` — maps take the result's coordinates."""
    module = parse("""
func.func @rot(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %hi = prim.index_map (%x) [(d0, d1) -> (d0, d1 + 4)] : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %neg = prim.elementwise (%hi) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: f32):
    %n = arith.negf %a : f32
    prim.yield %n : f32
  }
  %lo = prim.index_map (%x) [(d0, d1) -> (d0, d1)] : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %y = prim.index_map (%neg, %lo) concat 1 [(d0, d1) -> (d0, d1), (d0, d1) -> (d0, d1 - 4)]
       : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}
""")
    (x,) = random_inputs(module, seed=4)
    (y,) = run(module, [x])
    np.testing.assert_array_equal(y, np.concatenate([-x[:, 4:], x[:, :4]], axis=1))


def test_index_map_out_of_bounds(parse: Parse) -> None:
    """A map the verifier cannot bound (a ``mod`` that wraps: ``d0 + 1`` over 5 rows it
    rejects) and that leaves the input at one index."""
    module = parse("""
func.func @shift(%x: tensor<5xf32>) -> tensor<5xf32> {
  %y = prim.index_map (%x) [(d0) -> ((d0 * 2) mod 7)] : (tensor<5xf32>) -> tensor<5xf32>
  func.return %y : tensor<5xf32>
}
""")
    with pytest.raises(OutOfBoundsError, match=r"prim.index_map.*coordinate 6 of dim 0"):
        run(module, random_inputs(module, seed=0))


def test_gather_and_coordinates(parse: Parse) -> None:
    """``prim.gather`` is ``numpy.take``; ``prim.coord`` is the coordinate grid."""
    from llmopt.interp import OutOfBoundsError

    module = parse("""
func.func @f(%t: tensor<3x9x2xf32>, %ids: tensor<2x2xi32>)
    -> (tensor<3x2x2x2xf32>, tensor<4x5xi64>) {
  %g = prim.gather %t[%ids] axis 1 : (tensor<3x9x2xf32>, tensor<2x2xi32>) -> tensor<3x2x2x2xf32>
  %c = prim.elementwise () : () -> tensor<4x5xi64> {
    %i = prim.coord 0 : index
    %j = prim.coord 1 : index
    %ten = arith.constant 10 : index
    %a = arith.muli %i, %ten : index
    %s = arith.addi %a, %j : index
    %r = arith.index_cast %s : index to i64
    prim.yield %r : i64
  }
  func.return %g, %c : tensor<3x2x2x2xf32>, tensor<4x5xi64>
}""")
    table = np.arange(54, dtype=np.float32).reshape(3, 9, 2)
    ids = np.array([[8, 0], [3, 3]], dtype=np.int32)
    g, c = run(module, [table, ids])
    np.testing.assert_array_equal(g, np.take(table, ids, axis=1))
    np.testing.assert_array_equal(c, np.arange(4)[:, None] * 10 + np.arange(5)[None, :])
    with pytest.raises(OutOfBoundsError, match="index 9 is out of bounds for dim 1"):
        run(module, [table, np.array([[9, 0], [0, 0]], dtype=np.int32)])
