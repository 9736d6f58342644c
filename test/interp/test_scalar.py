"""The scalar ``arith``/``math`` table: integer semantics, NaN rules, conversions."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

from llmopt.interp import run

Parse = Callable[[str], ModuleOp]

A = np.array([7, -7, 7, -7, 0, 13, -1, 2**31 - 1], dtype=np.int32)
B = np.array([2, 2, -2, -2, 3, 4, 3, 1], dtype=np.int32)


def _trunc(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


INT_OPS: dict[str, Callable[[int, int], int]] = {
    "divsi": _trunc,
    "remsi": lambda a, b: a - b * _trunc(a, b),
    "floordivsi": lambda a, b: a // b,
    "ceildivsi": lambda a, b: -((-a) // b),
    "divui": lambda a, b: (a % 2**32) // (b % 2**32),
    "remui": lambda a, b: (a % 2**32) % (b % 2**32),
    "maxsi": max,
    "minui": lambda a, b: a if a % 2**32 < b % 2**32 else b,
    "shli": lambda a, b: a << b,
    "shrsi": lambda a, b: a >> b,
    "shrui": lambda a, b: (a % 2**32) >> b,
    "addi": lambda a, b: (a + b + 2**31) % 2**32 - 2**31,  # wraps around
}


@pytest.mark.parametrize("name", sorted(INT_OPS))
def test_integer_ops(parse: Parse, name: str) -> None:
    module = parse(f"""
func.func @f(%a: tensor<8xi32>, %b: tensor<8xi32>) -> tensor<8xi32> {{
  %y = prim.elementwise (%a, %b) : (tensor<8xi32>, tensor<8xi32>) -> tensor<8xi32> {{
  ^bb0(%x: i32, %z: i32):
    %r = arith.{name} %x, %z : i32
    prim.yield %r : i32
  }}
  func.return %y : tensor<8xi32>
}}
""")
    b_values = np.abs(B) if name.startswith("sh") else B  # negative shifts are poison
    (y,) = run(module, [A, b_values])
    expected = [INT_OPS[name](int(a), int(b)) for a, b in zip(A, b_values, strict=True)]
    expected = [(e + 2**31) % 2**32 - 2**31 for e in expected]
    np.testing.assert_array_equal(y, np.array(expected, dtype=np.int32))


def test_comparisons_nan_and_conversions(parse: Parse) -> None:
    module = parse("""
func.func @f(%x: tensor<5xf32>, %i: tensor<5xi32>)
    -> (tensor<5xi1>, tensor<5xi1>, tensor<5xi1>, tensor<5xf32>, tensor<5xf32>, tensor<5xi64>,
        tensor<5xf32>) {
  %olt = prim.elementwise (%x) : (tensor<5xf32>) -> tensor<5xi1> {
  ^bb0(%a: f32):
    %c = arith.constant 1.0 : f32
    %r = arith.cmpf olt, %a, %c : f32
    prim.yield %r : i1
  }
  %ult = prim.elementwise (%x) : (tensor<5xf32>) -> tensor<5xi1> {
  ^bb0(%a: f32):
    %c = arith.constant 1.0 : f32
    %r = arith.cmpf ult, %a, %c : f32
    prim.yield %r : i1
  }
  %uns = prim.elementwise (%i) : (tensor<5xi32>) -> tensor<5xi1> {
  ^bb0(%a: i32):
    %c = arith.constant 3 : i32
    %r = arith.cmpi ult, %a, %c : i32
    prim.yield %r : i1
  }
  %max = prim.elementwise (%x) : (tensor<5xf32>) -> tensor<5xf32> {
  ^bb0(%a: f32):
    %c = arith.constant 0.0 : f32
    %r = arith.maximumf %a, %c : f32
    prim.yield %r : f32
  }
  %maxnum = prim.elementwise (%x) : (tensor<5xf32>) -> tensor<5xf32> {
  ^bb0(%a: f32):
    %c = arith.constant 0.0 : f32
    %r = arith.maxnumf %a, %c : f32
    prim.yield %r : f32
  }
  %wide = prim.elementwise (%i) : (tensor<5xi32>) -> tensor<5xi64> {
  ^bb0(%a: i32):
    %r = arith.extsi %a : i32 to i64
    prim.yield %r : i64
  }
  %fl = prim.elementwise (%i) : (tensor<5xi32>) -> tensor<5xf32> {
  ^bb0(%a: i32):
    %f = arith.sitofp %a : i32 to f32
    %e = math.erf %f : f32
    prim.yield %e : f32
  }
  func.return %olt, %ult, %uns, %max, %maxnum, %wide, %fl
      : tensor<5xi1>, tensor<5xi1>, tensor<5xi1>, tensor<5xf32>, tensor<5xf32>, tensor<5xi64>,
        tensor<5xf32>
}
""")
    x = np.array([np.nan, -2.0, 0.5, 1.0, 3.0], dtype=np.float32)
    i = np.array([-1, 0, 2, 3, 4], dtype=np.int32)
    olt, ult, uns, mx, mxn, wide, fl = run(module, [x, i])
    np.testing.assert_array_equal(olt, [False, True, True, False, False])
    np.testing.assert_array_equal(ult, [True, True, True, False, False])
    np.testing.assert_array_equal(uns, [False, True, True, False, False])  # -1 is 2**32 - 1
    np.testing.assert_array_equal(mx, [np.nan, 0.0, 0.5, 1.0, 3.0])
    np.testing.assert_array_equal(mxn, [0.0, 0.0, 0.5, 1.0, 3.0])
    assert wide.dtype == np.int64
    np.testing.assert_array_equal(wide, i)
    np.testing.assert_array_equal(fl, np.array([math.erf(v) for v in i], dtype=np.float32))
