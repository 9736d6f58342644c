"""The host level and the public API: function selection, arguments, calls, random inputs."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

from llmopt.interp import InterpretError, UnsupportedOpError, random_inputs, run

Parse = Callable[[str], ModuleOp]

TWO_FUNCS = """
func.func @double(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = prim.elementwise (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: f32):
    %s = arith.addf %a, %a : f32
    prim.yield %s : f32
  }
  func.return %y : tensor<4xf32>
}
func.func @quadruple(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = func.call @double(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %z = func.call @double(%y) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %z : tensor<4xf32>
}
"""


def test_function_selection_and_calls(parse: Parse) -> None:
    module = parse(TWO_FUNCS)
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(run(module, [x], "quadruple")[0], 4 * x)
    np.testing.assert_array_equal(run(module, [x], func_name="double")[0], 2 * x)
    with pytest.raises(InterpretError, match="name the function"):
        run(module, [x])
    with pytest.raises(InterpretError, match="no func.func @nope"):
        run(module, [x], "nope")
    forward = parse(TWO_FUNCS.replace("@quadruple", "@forward"))
    np.testing.assert_array_equal(run(forward, [x])[0], 4 * x)


def test_argument_checks(parse: Parse) -> None:
    module = parse(TWO_FUNCS)
    with pytest.raises(InterpretError, match="takes 1 inputs, 2 given"):
        run(module, [np.zeros(4), np.zeros(4)], "double")
    with pytest.raises(InterpretError, match=r"input #0 has shape \[5\]"):
        run(module, [np.zeros(5)], "double")
    (y,) = run(module, [np.arange(4, dtype=np.float64)], "double")
    assert y.dtype == np.float32  # inputs are converted to the argument type


def test_inputs_are_never_modified(parse: Parse) -> None:
    """A kernel writing into its argument buffer works on a copy."""
    module = parse("""
func.func @inplace(%x: memref<6xf64>) -> memref<6xf64> {
  loop.kernel @neg (%a = %x : memref<6xf64>) {
    loop.for %i = 0 to 6 {
      %v = loop.load %a[%i] : memref<6xf64>
      %n = arith.negf %v : f64
      loop.store %n, %a[%i] : memref<6xf64>
    }
  }
  func.return %x : memref<6xf64>
}
""")
    x = np.arange(6, dtype=np.float64)
    (y,) = run(module, [x])
    np.testing.assert_array_equal(y, -np.arange(6))
    np.testing.assert_array_equal(x, np.arange(6))


def test_scalar_launch_arguments(parse: Parse) -> None:
    module = parse("""
kernel.func @fill(%y: memref<100xf32>, %n: index, %v: f32) block [64, 1, 1] {
  %tid = kernel.thread_id x
  %bid = kernel.block_id x
  %bdim = kernel.block_dim x
  %base = arith.muli %bid, %bdim : index
  %i = arith.addi %base, %tid : index
  %in = arith.cmpi ult, %i, %n : index
  scf.if %in {
    kernel.store %v, %y[%i] : memref<100xf32>
  }
  kernel.return
}
func.func @forward(%v: f32) -> memref<100xf32> {
  %y = memref.alloc() : memref<100xf32>
  %n = arith.constant 100 : index
  kernel.launch @fill grid [2, 1, 1] block [64, 1, 1] smem 0 (%y, %n, %v)
      : memref<100xf32>, index, f32
  func.return %y : memref<100xf32>
}
""")
    (y,) = run(module, [np.float32(2.5)])
    np.testing.assert_array_equal(y, np.full(100, 2.5, np.float32))


def test_unsupported_op_is_named(parse: Parse) -> None:
    module = parse("""
func.func @f(%x: memref<4xi32>) -> memref<4xi32> {
  %y = memref.alloc() : memref<4xi32>
  loop.kernel @popcount (%a = %x : memref<4xi32>, %o = %y : memref<4xi32>) {
    loop.for %i = 0 to 4 {
      %v = loop.load %a[%i] : memref<4xi32>
      %c = math.ctpop %v : i32
      loop.store %c, %o[%i] : memref<4xi32>
    }
  }
  func.return %y : memref<4xi32>
}
""")
    with pytest.raises(UnsupportedOpError, match=r"(?s)math.ctpop: no interpretation.*"
                       r"in loop.kernel @popcount"):
        run(module, [np.arange(4)])


def test_random_inputs(parse: Parse) -> None:
    module = parse("""
func.func @f(%a: tensor<3x4xf32>, %b: memref<5xf64>, %c: tensor<2xi64>, %d: f32)
    -> tensor<3x4xf32> {
  func.return %a : tensor<3x4xf32>
}
""")
    a, b, c, d = random_inputs(module, seed=7)
    assert (a.dtype, a.shape) == (np.float32, (3, 4))
    assert (b.dtype, b.shape) == (np.float64, (5,))
    assert c.dtype == np.int64 and ((0 <= c) & (c < 16)).all()
    assert d.dtype == np.float32 and d.shape == ()
    again = random_inputs(module.body.block.first_op, seed=7)  # a func.func works too
    for first, second in zip((a, b, c, d), again, strict=True):
        np.testing.assert_array_equal(first, second)
    assert not np.array_equal(a, random_inputs(module, seed=8)[0])
    f64 = parse("""
func.func @g(%a: tensor<3x4xf64>) -> tensor<3x4xf64> {
  func.return %a : tensor<3x4xf64>
}
""")
    # The same seed draws the same numbers whatever the precision.
    np.testing.assert_array_equal(random_inputs(f64, seed=7)[0].astype(np.float32), a)


def test_zeroed_allocations_hold_zeros(parse: Parse) -> None:
    """A ``memref.alloc {llmopt.zeroed}`` starts at zero (the executor's ``torch.zeros``);
    a plain allocation still holds the poison value (NaN, the most negative integer)."""
    module = parse("""
func.func @f() -> (memref<4xi32>, memref<4xf32>, memref<4xi32>, memref<4xf32>) {
  %zi = memref.alloc() {llmopt.zeroed} : memref<4xi32>
  %zf = memref.alloc() {llmopt.zeroed} : memref<4xf32>
  %pi = memref.alloc() : memref<4xi32>
  %pf = memref.alloc() : memref<4xf32>
  func.return %zi, %zf, %pi, %pf : memref<4xi32>, memref<4xf32>, memref<4xi32>, memref<4xf32>
}
""")
    zi, zf, pi, pf = run(module, [])
    assert (zi.dtype, zf.dtype) == (np.int32, np.float32)
    np.testing.assert_array_equal(zi, np.zeros(4, np.int32))
    np.testing.assert_array_equal(zf, np.zeros(4, np.float32))
    np.testing.assert_array_equal(pi, np.full(4, np.iinfo(np.int32).min, np.int32))
    assert np.isnan(pf).all()
