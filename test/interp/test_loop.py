"""Loop IR interpretation: loop nests vectorised over broadcast index grids."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

from llmopt.interp import OutOfBoundsError, random_inputs, run

Parse = Callable[[str], ModuleOp]


@pytest.mark.parametrize("t", ["f32", "f64"])
@pytest.mark.parametrize("n", [7, 33, 100, 1000])
def test_rms_norm_fused(parse: Parse, rms: dict, reference: Callable, rtol: dict, n: int,
                        t: str) -> None:
    module = parse(rms["loop"](3, n, t))
    x, w = random_inputs(module, seed=n)
    (y,) = run(module, [x, w])
    np.testing.assert_allclose(y, reference(x, w), rtol=rtol[t], atol=0)


def test_rms_norm_is_fast(parse: Parse, rms: dict, reference: Callable, rtol: dict) -> None:
    module = parse(rms["loop"](8, 256, "f32"))
    inputs = random_inputs(module, seed=0)
    run(module, inputs)
    start = time.perf_counter()
    (y,) = run(module, inputs)
    elapsed = time.perf_counter() - start
    np.testing.assert_allclose(y, reference(*inputs), rtol=rtol["f32"], atol=0)
    assert elapsed < 0.1, f"Loop-IR RMSNorm (8x256) took {elapsed * 1e3:.1f} ms"


def test_reduce_folds_sequentially_in_f32(parse: Parse) -> None:
    """``loop.reduce`` rounds like a sequential f32 loop (not pairwise, not in f64)."""
    module = parse("""
func.func @sum(%x: memref<3x1000xf32>) -> memref<3xf32> {
  %s = memref.alloc() : memref<3xf32>
  loop.kernel @sum (%a = %x : memref<3x1000xf32>, %o = %s : memref<3xf32>) {
    loop.for %i = 0 to 3 {
      %r = loop.reduce add %k = 0 to 1000 : f32 {
        %v = loop.load %a[%i, %k] : memref<3x1000xf32>
        loop.yield %v : f32
      }
      loop.store %r, %o[%i] : memref<3xf32>
    }
  }
  func.return %s : memref<3xf32>
}
""")
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 1000)) * 10.0 ** rng.integers(-4, 5, (3, 1000)))
    x = x.astype(np.float32)
    (s,) = run(module, [x])
    for i in range(3):
        acc = np.float32(0)
        for v in x[i]:
            acc = np.float32(acc + v)
        assert s[i] == acc
    assert not np.array_equal(s, x.astype(np.float64).sum(axis=1).astype(np.float32))


def test_unfused_kernels_with_a_temporary(parse: Parse, reference: Callable, rtol: dict) -> None:
    """Two kernels through a buffer; a broadcast load with a constant map coordinate."""
    module = parse("""
func.func @forward(%x: memref<4x50xf64>, %w: memref<50xf64>) -> memref<4x50xf64> {
  %inv = memref.alloc() : memref<4x1xf64>
  loop.kernel @stats (%a = %x : memref<4x50xf64>, %r = %inv : memref<4x1xf64>) {
    loop.for %i = 0 to 4 {
      %ss = loop.reduce add %k = 0 to 50 : f64 {
        %v = loop.load %a[%i, %k] : memref<4x50xf64>
        %sq = arith.mulf %v, %v : f64
        loop.yield %sq : f64
      }
      %n = arith.constant 50.0 : f64
      %mean = arith.divf %ss, %n : f64
      %eps = arith.constant 1.0e-05 : f64
      %sum = arith.addf %mean, %eps : f64
      %rs = math.rsqrt %sum : f64
      loop.store %rs, %r[%i, 0] : memref<4x1xf64>
    }
  }
  %y = memref.alloc() : memref<4x50xf64>
  loop.kernel @scale (%a = %x : memref<4x50xf64>, %r = %inv : memref<4x1xf64>,
                      %b = %w : memref<50xf64>, %o = %y : memref<4x50xf64>) {
    loop.for %i = 0 to 4 {
      loop.for %j = 0 to 50 {
        %v = loop.load %a[%i, %j] : memref<4x50xf64>
        %s = loop.load %r[%i, 0] : memref<4x1xf64>
        %g = loop.load %b[%j] : memref<50xf64>
        %m = arith.mulf %v, %s : f64
        %o2 = arith.mulf %m, %g : f64
        loop.store %o2, %o[%i, %j] : memref<4x50xf64>
      }
    }
  }
  func.return %y : memref<4x50xf64>
}
""")
    x, w = random_inputs(module, seed=5)
    (y,) = run(module, [x, w])
    np.testing.assert_allclose(y, reference(x, w), rtol=rtol["f64"], atol=0)


def test_affine_indices_floordiv_mod(parse: Parse) -> None:
    """A transposing, reshaping copy: ``out[j floordiv 4, j mod 4, i] = x[i, j]``."""
    module = parse("""
func.func @f(%x: memref<3x8xf32>) -> memref<2x4x3xf32> {
  %y = memref.alloc() : memref<2x4x3xf32>
  loop.kernel @copy (%a = %x : memref<3x8xf32>, %o = %y : memref<2x4x3xf32>) {
    loop.for %i = 0 to 3 {
      loop.for %j = 0 to 8 {
        %v = loop.load %a[%i, %j] : memref<3x8xf32>
        loop.store %v, %o[%j floordiv 4, %j mod 4, %i] : memref<2x4x3xf32>
      }
    }
  }
  func.return %y : memref<2x4x3xf32>
}
""")
    (x,) = random_inputs(module, seed=6)
    (y,) = run(module, [x])
    np.testing.assert_array_equal(y, x.T.reshape(2, 4, 3))


def test_off_by_one_reduce_extent_changes_the_result(parse: Parse, rms: dict,
                                                     reference: Callable, rtol: dict) -> None:
    module = parse(rms["loop"](3, 100, "f32", reduce_extent=99))
    x, w = random_inputs(module, seed=7)
    (y,) = run(module, [x, w])
    assert not np.allclose(y, reference(x, w), rtol=rtol["f32"], atol=0)


def test_out_of_bounds_load_names_the_op(parse: Parse, rms: dict) -> None:
    """An index that leaves its buffer at run time (a wrapping ``mod``, which the verifier
    does not bound: ``%j + 1`` over ``%j < 100`` does not verify) is caught by the
    interpreter, naming the op."""
    module = parse(rms["loop"](3, 100, "f32", w_index="(%j + 50) mod 101"))
    with pytest.raises(OutOfBoundsError, match=r"(?s)loop.load: index 100 .* extent 100.*"
                       r"loop.load %b\[\(\(%j \+ 50\) mod 101\)\]"):
        run(module, random_inputs(module, seed=0))


def test_unwritten_output_is_poisoned(parse: Parse) -> None:
    """Fresh buffers hold NaN: an output element no store reaches cannot pass as zero."""
    module = parse("""
func.func @f(%x: memref<10xf32>) -> memref<10xf32> {
  %y = memref.alloc() : memref<10xf32>
  loop.kernel @half (%a = %x : memref<10xf32>, %o = %y : memref<10xf32>) {
    loop.for %i = 0 to 5 {
      %v = loop.load %a[%i] : memref<10xf32>
      loop.store %v, %o[%i] : memref<10xf32>
    }
  }
  func.return %y : memref<10xf32>
}
""")
    (x,) = random_inputs(module, seed=0)
    (y,) = run(module, [x])
    np.testing.assert_array_equal(y[:5], x[:5])
    assert np.isnan(y[5:]).all()


def test_large_reduction_is_chunked_exactly(parse: Parse, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    """With a tiny frame budget every axis runs in chunks; results stay bit-identical."""
    from llmopt.interp import simt

    module = parse("""
func.func @mv(%a: memref<16x300xf32>, %v: memref<300xf32>) -> memref<16xf32> {
  %y = memref.alloc() : memref<16xf32>
  loop.kernel @mv (%m = %a : memref<16x300xf32>, %x = %v : memref<300xf32>,
                   %o = %y : memref<16xf32>) {
    loop.for %i = 0 to 16 {
      %r = loop.reduce add %k = 0 to 300 : f32 {
        %p = loop.load %m[%i, %k] : memref<16x300xf32>
        %q = loop.load %x[%k] : memref<300xf32>
        %pq = arith.mulf %p, %q : f32
        loop.yield %pq : f32
      }
      loop.store %r, %o[%i] : memref<16xf32>
    }
  }
  func.return %y : memref<16xf32>
}
""")
    inputs = random_inputs(module, seed=8)
    (whole,) = run(module, inputs)
    monkeypatch.setattr(simt, "FRAME_BUDGET", 7)
    (chunked,) = run(module, inputs)
    np.testing.assert_array_equal(whole, chunked)
    a, v = (t.astype(np.float64) for t in inputs)
    np.testing.assert_allclose(whole, a @ v, rtol=1e-4, atol=1e-5)


def test_data_dependent_index(parse: Parse) -> None:
    """A ``loop.load`` whose index operand is a loaded value (a gather): vectorised over the
    nest, and bounds-checked per point."""
    module = parse("""
func.func @f(%t: memref<5x3xf32>, %ids: memref<4xi64>) -> memref<4x3xf32> {
  %o = memref.alloc() : memref<4x3xf32>
  loop.kernel @gather (%a = %t : memref<5x3xf32>, %b = %ids : memref<4xi64>,
                       %c = %o : memref<4x3xf32>) {
    loop.for %i = 0 to 4 {
      %id = loop.load %b[%i] : memref<4xi64>
      %row = arith.index_cast %id : i64 to index
      loop.for %j = 0 to 3 {
        %v = loop.load %a[%row, %j] : memref<5x3xf32>
        loop.store %v, %c[%i, %j] : memref<4x3xf32>
      }
    }
  }
  func.return %o : memref<4x3xf32>
}""")
    table = np.arange(15, dtype=np.float32).reshape(5, 3)
    (y,) = run(module, [table, np.array([4, 0, 2, 2])])
    np.testing.assert_array_equal(y, table[[4, 0, 2, 2]])
    with pytest.raises(OutOfBoundsError, match="index 5 is out of bounds for dimension 0"):
        run(module, [table, np.array([4, 5, 2, 2])])
