"""Kernel IR interpretation: SIMT threads, masks, shuffles, shared memory, race checks."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

from llmopt.interp import DivergenceError, OutOfBoundsError, RaceError, random_inputs, run

Parse = Callable[[str], ModuleOp]


def edit(text: str, old: str, new: str, count: int = 1) -> str:
    """``text`` with ``old`` replaced (it must occur at least ``count`` times)."""
    assert text.count(old) >= count, old
    return text.replace(old, new, count)


@pytest.mark.parametrize("t", ["f32", "f64"])
@pytest.mark.parametrize("n,grid,block", [(7, 2, 64), (33, 2, 64), (100, 2, 128),
                                          (1000, 2, 128), (256, 5, 96)])
def test_rms_norm(parse: Parse, rms: dict, reference: Callable, rtol: dict, n: int, grid: int,
                  block: int, t: str) -> None:
    module = parse(rms["kernel"](3, n, t, grid, block))
    x, w = random_inputs(module, seed=n)
    (y,) = run(module, [x, w])
    np.testing.assert_allclose(y, reference(x, w), rtol=rtol[t], atol=0)


@pytest.mark.parametrize("n,grid,block", [(7, 2, 64), (100, 2, 128), (1000, 3, 256)])
def test_rms_norm_matches_tile_ir_bit_for_bit(parse: Parse, rms: dict, n: int, grid: int,
                                              block: int) -> None:
    """The hand-lowered kernel reduces in exactly ``tile.coop_reduce``'s order."""
    tile = parse(rms["tile"](3, n, "f32", grid, block))
    kernel = parse(rms["kernel"](3, n, "f32", grid, block))
    inputs = random_inputs(tile, seed=n)
    np.testing.assert_array_equal(run(tile, inputs)[0], run(kernel, inputs)[0])


def test_rms_norm_1x8x256_is_fast(parse: Parse, rms: dict, reference: Callable,
                                  rtol: dict) -> None:
    module = parse(rms["kernel"](8, 256, "f32", 8, 256, lead="%c0, ", shape="1x8x256"))
    inputs = random_inputs(module, seed=0)
    assert inputs[0].shape == (1, 8, 256)
    run(module, inputs)
    start = time.perf_counter()
    (y,) = run(module, inputs)
    elapsed = time.perf_counter() - start
    np.testing.assert_allclose(y, reference(*inputs), rtol=rtol["f32"], atol=0)
    assert elapsed < 1.0, f"Kernel-IR RMSNorm (1x8x256) took {elapsed:.3f} s"


def test_missing_first_barrier_is_a_race(parse: Parse, rms: dict) -> None:
    """Warp totals written to shared memory, read by other threads with no barrier."""
    text = edit(rms["kernel"](3, 100, "f32", 2, 64), "kernel.barrier", "")
    module = parse(text)
    with pytest.raises(RaceError, match=r"(?s)kernel.load: data race \(read after write\) on "
                       r"shared %red\[0\] \(block 0\): thread 0 of block 0 accessed it in "
                       r"'kernel.store %p1, %red\[%warp\].*thread 63 of block 0 reads.*"
                       r"op: '%pw = kernel.load %red\[%wi\]"):
        run(module, random_inputs(module, seed=0))


def test_missing_trailing_barrier_is_a_race(parse: Parse, rms: dict) -> None:
    """A block's next row overwrites the warp totals other threads may still be reading."""
    text = rms["kernel"](3, 100, "f32", 2, 64)
    last = text.rindex("kernel.barrier")
    module = parse(text[:last] + text[last + len("kernel.barrier"):])
    with pytest.raises(RaceError, match=r"write after read"):
        run(module, random_inputs(module, seed=0))


def test_unguarded_shared_store_is_a_race(parse: Parse, rms: dict) -> None:
    """Lanes 0 and 1 of a warp both storing its total to one shared slot."""
    text = rms["kernel"](3, 100, "f32", 2, 64)
    text = edit(text, "%is_lane0 = arith.cmpi eq, %lane, %c0", "%is_lane0 = arith.cmpi ule, "
                "%lane, %c1")
    module = parse(text)
    with pytest.raises(RaceError, match=r"write after write"):
        run(module, random_inputs(module, seed=0))


def test_off_by_one_loop_bound_changes_the_result(parse: Parse, rms: dict,
                                                  reference: Callable, rtol: dict) -> None:
    text = rms["kernel"](3, 100, "f32", 2, 64)
    text = edit(text, "%cn = arith.constant 100 : index",
                "%cn = arith.constant 100 : index\n  %cn1 = arith.constant 99 : index")
    text = edit(text, "%k = %tid to %cn step", "%k = %tid to %cn1 step")
    module = parse(text)
    x, w = random_inputs(module, seed=1)
    (y,) = run(module, [x, w])
    assert not np.allclose(y, reference(x, w), rtol=rtol["f32"], atol=0)


def test_wrong_stride_changes_the_result(parse: Parse, rms: dict, reference: Callable,
                                         rtol: dict) -> None:
    """Striding by a warp instead of the block: elements summed twice."""
    text = edit(rms["kernel"](3, 100, "f32", 2, 64), "%k = %tid to %cn step %cb",
                "%k = %tid to %cn step %c32")
    module = parse(text)
    x, w = random_inputs(module, seed=2)
    (y,) = run(module, [x, w])
    assert not np.allclose(y, reference(x, w), rtol=rtol["f32"], atol=0)


GUARDED = """
kernel.func @add1(%x: memref<1000xf32>, %y: memref<1000xf32>) block [128, 1, 1] {
  %tid = kernel.thread_id x
  %bid = kernel.block_id x
  %bdim = kernel.block_dim x
  %base = arith.muli %bid, %bdim : index
  %i = arith.addi %base, %tid : index
  %n = arith.constant 1000 : index
  %in = arith.cmpi ult, %i, %n : index
  scf.if %in {
    %v = kernel.load %x[%i] : memref<1000xf32>
    %one = arith.constant 1.0 : f32
    %r = arith.addf %v, %one : f32
    kernel.store %r, %y[%i] : memref<1000xf32>
  }
  kernel.return
}
func.func @forward(%x: memref<1000xf32>) -> memref<1000xf32> {
  %y = memref.alloc() : memref<1000xf32>
  kernel.launch @add1 grid [8, 1, 1] block [128, 1, 1] smem 0 (%x, %y)
      : memref<1000xf32>, memref<1000xf32>
  func.return %y : memref<1000xf32>
}
"""


def test_bounds_guard(parse: Parse) -> None:
    module = parse(GUARDED)
    (x,) = random_inputs(module, seed=3)
    (y,) = run(module, [x])
    np.testing.assert_array_equal(y, x + np.float32(1))


def test_missing_bounds_guard_is_out_of_bounds(parse: Parse) -> None:
    """8 x 128 threads for 1000 elements: thread 104 of block 7 reads x[1000]."""
    module = parse(edit(GUARDED, "scf.if %in {", "scf.if %true {").replace(
        "%in = arith.cmpi", "%true = arith.constant true\n  %in = arith.cmpi"))
    with pytest.raises(OutOfBoundsError, match=r"(?s)kernel.load: index 1000 is out of bounds "
                       r"for dimension 0 of extent 1000 at block 7, thread 104.*%x\[%i\]"):
        run(module, random_inputs(module, seed=0))


def test_barrier_in_divergent_code(parse: Parse, rms: dict) -> None:
    text = edit(rms["kernel"](3, 100, "f32", 2, 64), "kernel.store %p1, %red[%warp] : "
                "memref<2xf32>", "kernel.store %p1, %red[%warp] : memref<2xf32>\n"
                "      kernel.barrier")
    module = parse(text)
    with pytest.raises(DivergenceError, match=r"only 2 of the 64 threads of block 0"):
        run(module, random_inputs(module, seed=0))


SHUFFLE = """
kernel.func @warpsum(%x: memref<{n}xf32>, %y: memref<{n}xf32>) block [{n}, 1, 1] {{
  %tid = kernel.thread_id x
  %v = kernel.load %x[%tid] : memref<{n}xf32>
  %c{cut} = arith.constant {cut} : index
  %low = arith.cmpi ult, %tid, %c{cut} : index
  %r = scf.if %low -> (f32) {{
    %s = kernel.shuffle_xor %v, 1 : f32
    %t = arith.addf %v, %s : f32
    scf.yield %t : f32
  }} else {{
    scf.yield %v : f32
  }}
  kernel.store %r, %y[%tid] : memref<{n}xf32>
  kernel.return
}}
func.func @forward(%x: memref<{n}xf32>) -> memref<{n}xf32> {{
  %y = memref.alloc() : memref<{n}xf32>
  kernel.launch @warpsum grid [1, 1, 1] block [{n}, 1, 1] smem 0 (%x, %y)
      : memref<{n}xf32>, memref<{n}xf32>
  func.return %y : memref<{n}xf32>
}}
"""


def test_shuffle_pairs_lanes(parse: Parse) -> None:
    module = parse(SHUFFLE.format(n=64, cut=64))
    (x,) = random_inputs(module, seed=4)
    (y,) = run(module, [x])
    np.testing.assert_array_equal(y, x + x.reshape(32, 2)[:, ::-1].reshape(64))


def test_shuffle_in_a_divergent_warp(parse: Parse) -> None:
    module = parse(SHUFFLE.format(n=64, cut=5))
    with pytest.raises(DivergenceError, match=r"thread 4 of block 0 reads thread 5"):
        run(module, random_inputs(module, seed=0))


def test_shuffle_past_a_partial_warp(parse: Parse) -> None:
    module = parse(SHUFFLE.format(n=47, cut=47))
    with pytest.raises(DivergenceError, match=r"thread 46 of block 0 reads lane 15 of its warp"):
        run(module, random_inputs(module, seed=0))


RACY_GLOBAL = """
kernel.func @k(%x: memref<64xf32>, %y: memref<64xf32>) block [64, 1, 1] {{
  %tid = kernel.thread_id x
  %bid = kernel.block_id x
  {body}
  kernel.return
}}
func.func @forward(%x: memref<64xf32>) -> memref<64xf32> {{
  %y = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [{grid}, 1, 1] block [64, 1, 1] smem 0 (%x, %y)
      : memref<64xf32>, memref<64xf32>
  func.return %y : memref<64xf32>
}}
"""


def test_blocks_writing_one_global_location(parse: Parse) -> None:
    module = parse(RACY_GLOBAL.format(grid=2, body="""
  %v = kernel.load %x[%tid] : memref<64xf32>
  kernel.store %v, %y[%tid] : memref<64xf32>"""))
    with pytest.raises(RaceError, match=r"write after write.*thread 0 of block 0.*"
                       r"thread 0 of block 1"):
        run(module, random_inputs(module, seed=0))


NEIGHBOUR = """
  %c0 = arith.constant 0 : index
  %is0 = arith.cmpi eq, %bid, %c0 : index
  scf.if %is0 {{
    %v = kernel.load %x[%tid] : memref<64xf32>
    kernel.store %v, %y[%tid] : memref<64xf32>
  }}
  {barrier}
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %n = arith.addi %tid, %c1 : index
  %m = arith.remui %n, %c64 : index
  %w = kernel.load %y[%m] : memref<64xf32>"""


@pytest.mark.parametrize("grid,barrier,message", [
    (1, "kernel.barrier", None),
    (1, "", r"read after write.*thread 1 of block 0.*thread 0 of block 0"),
    (2, "kernel.barrier", r"read after write.*thread 1 of block 0.*thread 0 of block 1"),
])
def test_reading_another_threads_global_write(parse: Parse, grid: int, barrier: str,
                                              message: str | None) -> None:
    """Block 0 writes ``y``, then every thread reads its neighbour's element: fine after a
    barrier within one block; a race without one, or from another block."""
    module = parse(RACY_GLOBAL.format(grid=grid, body=NEIGHBOUR.format(barrier=barrier)))
    inputs = random_inputs(module, seed=0)
    if message is None:
        (y,) = run(module, inputs)
        np.testing.assert_array_equal(y, inputs[0])
    else:
        with pytest.raises(RaceError, match=message):
            run(module, inputs)


def test_race_checks_can_be_turned_off(parse: Parse, rms: dict) -> None:
    module = parse(edit(rms["kernel"](3, 100, "f32", 2, 64), "kernel.barrier", ""))
    inputs = random_inputs(module, seed=0)
    with pytest.raises(RaceError):
        run(module, inputs)
    run(module, inputs, check_races=False)


def test_masked_loop_with_per_thread_bounds(parse: Parse) -> None:
    """``scf.for`` from ``tid`` to ``n - tid``: threads stop at different trip counts and keep
    their loop-carried sums; threads with an empty range yield the initial value."""
    module = parse("""
kernel.func @tri(%x: memref<40xf64>, %y: memref<48xf64>) block [48, 1, 1] {
  %tid = kernel.thread_id x
  %n = arith.constant 40 : index
  %c3 = arith.constant 3 : index
  %hi = arith.subi %n, %tid : index
  %init = arith.constant -1.0 : f64
  %s = scf.for %k = %tid to %hi step %c3 iter_args(%a = %init) -> (f64) {
    %v = kernel.load %x[%k] : memref<40xf64>
    %a2 = arith.addf %a, %v : f64
    scf.yield %a2 : f64
  }
  kernel.store %s, %y[%tid] : memref<48xf64>
  kernel.return
}
func.func @forward(%x: memref<40xf64>) -> memref<48xf64> {
  %y = memref.alloc() : memref<48xf64>
  kernel.launch @tri grid [1, 1, 1] block [48, 1, 1] smem 0 (%x, %y)
      : memref<40xf64>, memref<48xf64>
  func.return %y : memref<48xf64>
}
""")
    (x,) = random_inputs(module, seed=5)
    (y,) = run(module, [x])
    expected = [-1.0 + sum(x[k] for k in range(t, 40 - t, 3)) for t in range(48)]
    np.testing.assert_allclose(y, expected, rtol=1e-14, atol=1e-14)


def test_shared_memory_is_per_block(parse: Parse) -> None:
    """Each block reverses its own 32 values through shared memory."""
    module = parse("""
kernel.func @rev(%x: memref<4x32xf32>, %y: memref<4x32xf32>) block [32, 1, 1] {
  %buf = kernel.shared : memref<32xf32>
  %tid = kernel.thread_id x
  %bid = kernel.block_id x
  %v = kernel.load %x[%bid, %tid] : memref<4x32xf32>
  kernel.store %v, %buf[%tid] : memref<32xf32>
  kernel.barrier
  %c31 = arith.constant 31 : index
  %j = arith.subi %c31, %tid : index
  %r = kernel.load %buf[%j] : memref<32xf32>
  kernel.store %r, %y[%bid, %tid] : memref<4x32xf32>
  kernel.return
}
func.func @forward(%x: memref<4x32xf32>) -> memref<4x32xf32> {
  %y = memref.alloc() : memref<4x32xf32>
  kernel.launch @rev grid [4, 1, 1] block [32, 1, 1] smem 0 (%x, %y)
      : memref<4x32xf32>, memref<4x32xf32>
  func.return %y : memref<4x32xf32>
}
""")
    (x,) = random_inputs(module, seed=6)
    (y,) = run(module, [x])
    np.testing.assert_array_equal(y, x[:, ::-1])


def test_two_dimensional_thread_ids(parse: Parse) -> None:
    """``block [8, 4, 1]``: x is the fastest-varying component of the linear thread id."""
    module = parse("""
kernel.func @ids(%y: memref<3x4x8xindex>) block [8, 4, 1] {
  %tx = kernel.thread_id x
  %ty = kernel.thread_id y
  %bx = kernel.block_id x
  %c100 = arith.constant 100 : index
  %c10 = arith.constant 10 : index
  %a = arith.muli %bx, %c100 : index
  %b = arith.muli %ty, %c10 : index
  %ab = arith.addi %a, %b : index
  %v = arith.addi %ab, %tx : index
  kernel.store %v, %y[%bx, %ty, %tx] : memref<3x4x8xindex>
  kernel.return
}
func.func @forward() -> memref<3x4x8xindex> {
  %y = memref.alloc() : memref<3x4x8xindex>
  kernel.launch @ids grid [3, 1, 1] block [8, 4, 1] smem 0 (%y) : memref<3x4x8xindex>
  func.return %y : memref<3x4x8xindex>
}
""")
    (y,) = run(module, [])
    b, ty, tx = np.indices((3, 4, 8))
    np.testing.assert_array_equal(y, 100 * b + 10 * ty + tx)


# --- kernel.local: thread-private arrays -------------------------------------------------------


LOCAL = """
kernel.func @private(%x: memref<2x64xf32>, %y: memref<2x64xf32>, %z: memref<2x64xf32>)
    block [64, 1, 1] {
  %acc = kernel.local : memref<2xf32>
  %tid = kernel.thread_id x
  %bid = kernel.block_id x
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kernel.load %x[%bid, %tid] : memref<2x64xf32>
  kernel.store %v, %acc[%c0] : memref<2xf32>
  %r = kernel.load %acc[%c0] : memref<2xf32>
  %u = kernel.load %acc[%c1] : memref<2xf32>
  kernel.store %r, %y[%bid, %tid] : memref<2x64xf32>
  kernel.store %u, %z[%bid, %tid] : memref<2x64xf32>
  kernel.return
}
func.func @forward(%x: memref<2x64xf32>) -> (memref<2x64xf32>, memref<2x64xf32>) {
  %y = memref.alloc() : memref<2x64xf32>
  %z = memref.alloc() : memref<2x64xf32>
  kernel.launch @private grid [2, 1, 1] block [64, 1, 1] smem 0 (%x, %y, %z)
      : memref<2x64xf32>, memref<2x64xf32>, memref<2x64xf32>
  func.return %y, %z : memref<2x64xf32>, memref<2x64xf32>
}
"""


def test_local_array_is_private_to_each_thread(parse: Parse) -> None:
    """Every thread of both blocks stores its own value into element 0 of one kernel.local
    and reads it back: no thread sees another's (and no race is reported, as a shared
    buffer used so would be)."""
    module = parse(LOCAL)
    (x,) = random_inputs(module, seed=11)
    y, _ = run(module, [x])
    np.testing.assert_array_equal(y, x)
    shared = parse(edit(LOCAL, "%acc = kernel.local : memref<2xf32>",
                        "%acc = kernel.shared : memref<2xf32>"))
    with pytest.raises(RaceError):
        run(shared, [x])


def test_local_array_read_before_written_is_poison(parse: Parse) -> None:
    """Element 1 of the local array is never written: every thread reads NaN."""
    module = parse(LOCAL)
    (x,) = random_inputs(module, seed=12)
    _, z = run(module, [x])
    assert np.isnan(z).all()


def test_local_array_index_out_of_bounds(parse: Parse) -> None:
    """A thread-private access is bounds-checked like any other (an index computed at run
    time: a constant one out of bounds does not verify)."""
    module = parse(edit(LOCAL, "%c1 = arith.constant 1 : index",
                        "%c1 = arith.addi %tid, %tid : index"))
    (x,) = random_inputs(module, seed=13)
    with pytest.raises(OutOfBoundsError):
        run(module, [x])


SCALAR_OUT = """
kernel.func @k(%x: memref<64xf32>, %y: memref<f32>) block [64, 1, 1] {{
  %tid = kernel.thread_id x
  %c{first} = arith.constant {first} : index
  %one = arith.cmpi ule, %tid, %c{first} : index
  scf.if %one {{
    %v = kernel.load %x[%tid] : memref<64xf32>
    kernel.store %v, %y[] : memref<f32>
  }}
  kernel.return
}}
func.func @forward(%x: memref<64xf32>) -> memref<f32> {{
  %y = memref.alloc() : memref<f32>
  kernel.launch @k grid [1, 1, 1] block [64, 1, 1] smem 0 (%x, %y) : memref<64xf32>, memref<f32>
  func.return %y : memref<f32>
}}
"""


def test_a_zero_dimensional_result(parse: Parse) -> None:
    """A 0-d buffer (a full reduction's result) written by one thread holds its value; two
    threads writing it race."""
    module = parse(SCALAR_OUT.format(first=0))
    inputs = random_inputs(module, seed=0)
    (y,) = run(module, inputs)
    assert y.shape == () and y == inputs[0][0]
    module = parse(SCALAR_OUT.format(first=1))
    with pytest.raises(RaceError, match=r"write after write.*thread 0 of block 0.*thread 1"):
        run(module, random_inputs(module, seed=0))
