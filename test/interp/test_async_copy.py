"""Asynchronous copies (``cp.async``) in the Tile- and Kernel-IR interpreters.

The copied values stay in flight until a wait of the issuing thread completes their group,
so a missing commit or wait, or a wait that leaves the needed group in flight, reads stale
(NaN) shared memory; at Kernel IR the race checker also wants a barrier between the wait and
other threads' reads, and before a slot that others read is overwritten.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

from llmopt.interp import InterpretError, OutOfBoundsError, RaceError, random_inputs, run

Parse = Callable[[str], ModuleOp]


def edit(text: str, old: str, new: str, count: int = 1) -> str:
    """``text`` with ``old`` replaced (it must occur at least ``count`` times)."""
    assert text.count(old) >= count, old
    return text.replace(old, new, count)


# --- Tile IR ------------------------------------------------------------------------------------

TILE_ROWS = """
func.func @f(%x: memref<4x64xf32>) -> memref<4x64xf32> {{
  %y = memref.alloc() : memref<4x64xf32>
  tile.kernel @rows grid [{grid}, 1, 1] block [16, 1, 1] (%a = %x : memref<4x64xf32>,
                                                        %o = %y : memref<4x64xf32>) {{
    tile.forall (%b) in [4] over blocks {{
      %s = tile.alloc shared : memref<64xf32>
      tile.forall (%t) in [16] over block_threads {{
        tile.async_copy %a[%b, %t * 4] to %s[%t * 4] count 4 : memref<4x64xf32> to memref<64xf32>
      }}
      {sync}
      tile.forall (%j) in [64] over block_threads {{
        %v = loop.load %s[%j] : memref<64xf32>
        loop.store %v, %o[%b, %j] : memref<4x64xf32>
      }}
    }}
  }}
  func.return %y : memref<4x64xf32>
}}
"""
"""A block's row copied into shared memory (16 threads × 4 floats), then read back."""


@pytest.mark.parametrize("grid", [4, 2])
@pytest.mark.parametrize("sync,ok", [
    ("tile.async_commit\n tile.async_wait 0\n kernel.barrier", True),
    ("tile.async_commit\n tile.async_wait 0", True),  # every step runs for the whole block
    ("", False),  # never waited for: only complete at the end of the kernel
    ("tile.async_commit", False),
    ("tile.async_wait 0", False),  # nothing committed: the wait completes nothing
    ("tile.async_wait 0\n tile.async_commit", False),
    ("tile.async_commit\n tile.async_wait 1", False),  # the only group may stay in flight
])
def test_tile_wait_completes_the_copies(parse: Parse, grid: int, sync: str, ok: bool) -> None:
    module = parse(TILE_ROWS.format(grid=grid, sync=sync))
    (x,) = random_inputs(module, seed=grid)
    (y,) = run(module, [x])
    if ok:
        np.testing.assert_array_equal(y, x)
    else:
        assert np.isnan(y).all()


TILE_PIPELINE = """
func.func @f(%x: memref<4x64xf32>) -> memref<4x64xf32> {{
  %y = memref.alloc() : memref<4x64xf32>
  tile.kernel @pipelined grid [{grid}, 1, 1] block [{block}, 1, 1] (%a = %x : memref<4x64xf32>,
                                                                   %o = %y : memref<4x64xf32>) {{
    tile.forall (%b) in [4] over blocks {{
      %s = tile.alloc shared : memref<2x16xf32>
      tile.forall (%t) in [4] over block_threads {{
        tile.async_copy %a[%b, %t * 4] to %s[0, %t * 4] count 4
            : memref<4x64xf32> to memref<2x16xf32>
      }}
      tile.async_commit
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c4 = arith.constant 4 : index
      scf.for %k0 = %c0 to %c4 step %c1 {{
        tile.forall (%t) in [4] over block_threads {{
          tile.async_copy %a[%b, ((%k0 + 1) mod 4) * 16 + %t * 4] to %s[(%k0 + 1) mod 2, %t * 4]
              count 4 : memref<4x64xf32> to memref<2x16xf32>
        }}
        tile.async_commit
        tile.async_wait {pending}
        kernel.barrier
        tile.forall (%j) in [16] over block_threads {{
          %v = loop.load %s[%k0 mod 2, %j] : memref<2x16xf32>
          %w = arith.mulf %v, %v : f32
          loop.store %w, %o[%b, %k0 * 16 + %j] : memref<4x64xf32>
        }}
        kernel.barrier
      }}
      tile.async_wait 0
    }}
  }}
  func.return %y : memref<4x64xf32>
}}
"""
"""Double buffering: chunk ``k0 + 1`` is in flight while chunk ``k0`` is squared."""


@pytest.mark.parametrize("pending", [0, 1, 2])
def test_tile_pipeline(parse: Parse, pending: int) -> None:
    """``wait 1`` leaves only the prefetch in flight; ``wait 2`` also the chunk in use, so
    chunks 0 and 1 read a fresh (NaN) slot and chunks 2 and 3 the slot's previous chunk."""
    module = parse(TILE_PIPELINE.format(pending=pending, grid=2, block=16))
    (x,) = random_inputs(module, seed=1)
    (y,) = run(module, [x])
    if pending < 2:
        np.testing.assert_array_equal(y, x * x)
    else:
        assert np.isnan(y[:, :32]).all()
        np.testing.assert_array_equal(y[:, 32:], (x * x)[:, :32])


@pytest.mark.parametrize("grid,block", [(2, 16), (3, 16), (2, 3)])
def test_tile_pipeline_lowered_matches_bit_for_bit(parse: Parse, grid: int, block: int) -> None:
    """``tile-to-kernel`` of the pipeline computes the same bits, race-free: with blocks that
    run different numbers of rows (grid 3), and with threads that issue two copies of a
    group (block 3) while others issue one."""
    from llmopt.api import make_context
    from llmopt.lowering.tile_to_kernel import TileToKernel

    tile = parse(TILE_PIPELINE.format(pending=1, grid=grid, block=block))
    inputs = random_inputs(tile, seed=2)
    expected = run(tile, inputs)[0]
    TileToKernel().apply(make_context(), tile)
    tile.verify()
    assert "kernel.async_copy" in str(tile)
    np.testing.assert_array_equal(run(tile, inputs)[0], expected)


def test_tile_pipeline_compiles(parse: Parse) -> None:
    """The double-buffered Tile-IR kernel lowers through Kernel IR to CUDA that compiles."""
    from llmopt.api import make_context
    from llmopt.codegen.cache import KernelCache
    from llmopt.codegen.cuda_printer import cuda_source
    from llmopt.codegen.nvrtc import compile_cuda
    from llmopt.lowering.kernel_to_cuda import KernelToCuda
    from llmopt.lowering.tile_to_kernel import TileToKernel

    ctx = make_context()
    module = parse(TILE_PIPELINE.format(pending=1, grid=2, block=16))
    TileToKernel().apply(ctx, module)
    module.verify()
    KernelToCuda().apply(ctx, module)
    module.verify()
    source = cuda_source(module)
    assert source.count("__pipeline_memcpy_async(") == 2
    cubin = compile_cuda(source, arch="sm_90", cache=KernelCache("/nonexistent", enabled=False))
    assert cubin[:4] == b"\x7fELF"


def test_tile_misaligned_copy(parse: Parse) -> None:
    """A 16-byte copy must start at an element offset that is a multiple of 4."""
    module = parse(edit(TILE_ROWS.format(grid=4, sync="tile.async_commit\n tile.async_wait 0"),
                        "%a[%b, %t * 4]", "%a[%b, %t * 3 + 1]"))
    with pytest.raises(InterpretError, match=r"tile.async_copy: misaligned copy: element offset "
                       r"1 is not a multiple of 4.*block 0, thread 0"):
        run(module, random_inputs(module, seed=0))


def test_tile_copy_past_the_end(parse: Parse) -> None:
    """Every element of the copy is bounds-checked, not just the first."""
    text = TILE_ROWS.format(grid=4, sync="tile.async_commit\n tile.async_wait 0")
    text = text.replace("%s = tile.alloc shared : memref<64xf32>",
                        "%s = tile.alloc shared : memref<62xf32>")
    text = text.replace("memref<4x64xf32> to memref<64xf32>", "memref<4x64xf32> to memref<62xf32>")
    text = text.replace("loop.load %s[%j] : memref<64xf32>", "loop.load %s[%j] : memref<62xf32>")
    # Read back only the 62 elements (a read past them does not verify): only the last
    # thread's copy, starting at 60, runs past the end.
    text = text.replace("tile.forall (%j) in [64]", "tile.forall (%j) in [62]")
    module = parse(text)
    with pytest.raises(OutOfBoundsError, match=r"index 62 is out of bounds for dimension 0 of "
                       r"extent 62 at block 0, thread 15"):
        run(module, random_inputs(module, seed=0))


# --- Kernel IR ----------------------------------------------------------------------------------

KERNEL_ROWS = """
kernel.func @rows(%x: memref<4x64xf32>, %y: memref<4x64xf32>) block [16, 1, 1] {{
  %s = kernel.shared : memref<64xf32>
  %t = kernel.thread_id x
  %b = kernel.block_id x
  %c4 = arith.constant 4 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %c48 = arith.constant 48 : index
  %i = arith.muli %t, %c4 : index
  kernel.async_copy %x[%b, %i] to %s[%i] count 4 : memref<4x64xf32> to memref<64xf32>
  {sync}
  %j1 = arith.addi %t, %c16 : index
  %j2 = arith.addi %t, %c32 : index
  %j3 = arith.addi %t, %c48 : index
  %v0 = kernel.load %s[%t] : memref<64xf32>
  %v1 = kernel.load %s[%j1] : memref<64xf32>
  %v2 = kernel.load %s[%j2] : memref<64xf32>
  %v3 = kernel.load %s[%j3] : memref<64xf32>
  kernel.store %v0, %y[%b, %t] : memref<4x64xf32>
  kernel.store %v1, %y[%b, %j1] : memref<4x64xf32>
  kernel.store %v2, %y[%b, %j2] : memref<4x64xf32>
  kernel.store %v3, %y[%b, %j3] : memref<4x64xf32>
  kernel.return
}}
func.func @forward(%x: memref<4x64xf32>) -> memref<4x64xf32> {{
  %y = memref.alloc() : memref<4x64xf32>
  kernel.launch @rows grid [4, 1, 1] block [16, 1, 1] smem 0 (%x, %y)
      : memref<4x64xf32>, memref<4x64xf32>
  func.return %y : memref<4x64xf32>
}}
"""
"""Each block copies its row into shared memory, 4 floats a thread, and every thread then
reads elements that other threads copied."""


@pytest.mark.parametrize("sync,ok", [
    ("kernel.async_commit\n kernel.async_wait 0\n kernel.barrier", True),
    ("kernel.barrier", False),  # a barrier does not complete copies
    ("kernel.async_commit\n kernel.barrier", False),
    ("kernel.async_wait 0\n kernel.barrier", False),  # nothing committed yet
    ("kernel.async_commit\n kernel.async_wait 1\n kernel.barrier", False),
    ("kernel.async_commit\n kernel.barrier\n kernel.async_wait 0", False),  # wait too late
])
def test_kernel_wait_completes_the_copies(parse: Parse, sync: str, ok: bool) -> None:
    """Without race checks the numbers show a missing or misplaced wait (stale NaN). With
    them the launch fails too: copies still in flight at the end of the launch complete after
    other threads read their destination in that epoch, and copies completed by the late wait
    are read by other threads with no barrier after it (in lock-step, after the wait: only the
    race checker sees that one)."""
    module = parse(KERNEL_ROWS.format(sync=sync))
    (x,) = random_inputs(module, seed=3)
    if ok:
        (y,) = run(module, [x])
        np.testing.assert_array_equal(y, x)
        return
    late = sync.endswith("kernel.async_wait 0")
    race = (r"kernel.load: data race \(read after write\)" if late
            else r"kernel.async_copy: data race \(write after read\)")
    with pytest.raises(RaceError, match=race):
        run(module, [x])
    (y,) = run(module, [x], check_races=False)
    if late:
        np.testing.assert_array_equal(y, x)
    else:
        assert np.isnan(y).all()


def test_kernel_copy_if_false_writes_zeros(parse: Parse) -> None:
    """``kernel.async_copy … if %ok``: the threads whose ``%ok`` is false (here every other
    one, and every thread of block 3) write zeros and read nothing; the others copy."""
    text = edit(KERNEL_ROWS.format(sync="kernel.async_commit\n kernel.async_wait 0\n"
                                        " kernel.barrier"),
                "kernel.async_copy %x[%b, %i] to %s[%i] count 4 :",
                """%c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %parity = arith.remui %t, %c2 : index
  %even = arith.cmpi eq, %parity, %c0 : index
  %first = arith.cmpi ult, %b, %c3 : index
  %ok = arith.andi %even, %first : i1
  kernel.async_copy %x[%b, %i] to %s[%i] count 4 if %ok :""")
    module = parse(text)
    (x,) = random_inputs(module, seed=5)
    (y,) = run(module, [x])
    want = x.copy()
    want.reshape(4, 16, 4)[:, 1::2] = 0  # odd threads' four floats
    want[3] = 0  # block 3
    np.testing.assert_array_equal(y, want)


def test_kernel_missing_barrier_after_wait_is_a_race(parse: Parse) -> None:
    """The wait makes a thread's own copies complete; others need a barrier to see them."""
    module = parse(KERNEL_ROWS.format(sync="kernel.async_commit\n kernel.async_wait 0"))
    with pytest.raises(RaceError, match=r"(?s)kernel.load: data race \(read after write\) on "
                       r"shared %s\[1\] \(block 0\): thread 0 of block 0 accessed it in "
                       r"'kernel.async_copy .*thread 1 of block 0 reads"):
        run(module, random_inputs(module, seed=0))


def test_kernel_missing_barrier_without_race_checks_still_computes(parse: Parse) -> None:
    """Lock-step execution hides the missing barrier in the numbers; only the checker sees it."""
    module = parse(KERNEL_ROWS.format(sync="kernel.async_commit\n kernel.async_wait 0"))
    (x,) = random_inputs(module, seed=4)
    (y,) = run(module, [x], check_races=False)
    np.testing.assert_array_equal(y, x)


def test_kernel_overwriting_a_slot_others_read_is_a_race(parse: Parse) -> None:
    """A second copy into the buffer while other threads still read it (no barrier)."""
    text = KERNEL_ROWS.format(sync="kernel.async_commit\n kernel.async_wait 0\n kernel.barrier")
    text = edit(text, "  kernel.store %v0, %y[%b, %t]",
                "  kernel.async_copy %x[%b, %i] to %s[%i] count 4 : memref<4x64xf32> to "
                "memref<64xf32>\n  kernel.store %v0, %y[%b, %t]")
    module = parse(text)
    with pytest.raises(RaceError, match=r"(?s)kernel.async_copy: data race \(write after read\) "
                       r"on shared %s\[\d+\].*kernel.load"):
        run(module, random_inputs(module, seed=0))


def test_kernel_copy_of_another_threads_global_write_is_a_race(parse: Parse) -> None:
    """The copy's global read is race-checked like a load."""
    module = parse("""
kernel.func @k(%x: memref<64xf32>, %m: memref<64xf32>, %y: memref<64xf32>) block [16, 1, 1] {
  %s = kernel.shared : memref<64xf32>
  %t = kernel.thread_id x
  %c4 = arith.constant 4 : index
  %c63 = arith.constant 63 : index
  %i = arith.muli %t, %c4 : index
  %r = arith.subi %c63, %i : index
  %v = kernel.load %x[%i] : memref<64xf32>
  kernel.store %v, %m[%r] : memref<64xf32>
  kernel.async_copy %m[%i] to %s[%i] count 4 : memref<64xf32> to memref<64xf32>
  kernel.async_commit
  kernel.async_wait 0
  kernel.barrier
  %w = kernel.load %s[%t] : memref<64xf32>
  kernel.store %w, %y[%t] : memref<64xf32>
  kernel.return
}
func.func @forward(%x: memref<64xf32>) -> memref<64xf32> {
  %m = memref.alloc() : memref<64xf32>
  %y = memref.alloc() : memref<64xf32>
  kernel.launch @k grid [1, 1, 1] block [16, 1, 1] smem 0 (%x, %m, %y)
      : memref<64xf32>, memref<64xf32>, memref<64xf32>
  func.return %y : memref<64xf32>
}
""")
    with pytest.raises(RaceError, match=r"kernel.async_copy: data race \(read after write\) on "
                       r"%m\[3\]: thread 15 of block 0 accessed it in 'kernel.store"):
        run(module, random_inputs(module, seed=0))


def test_kernel_groups_are_counted_per_thread(parse: Parse) -> None:
    """Threads 0-7 commit an extra (empty) group under ``scf.if``: ``wait 1`` then completes
    their copy but leaves the only group of threads 8-15 in flight, as on the GPU."""
    module = parse("""
kernel.func @k(%x: memref<64xf32>, %y: memref<16xf32>) block [16, 1, 1] {
  %s = kernel.shared : memref<64xf32>
  %t = kernel.thread_id x
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %i = arith.muli %t, %c4 : index
  kernel.async_copy %x[%i] to %s[%i] count 4 : memref<64xf32> to memref<64xf32>
  kernel.async_commit
  %low = arith.cmpi ult, %t, %c8 : index
  scf.if %low {
    kernel.async_commit
  }
  kernel.async_wait 1
  %v = kernel.load %s[%i] : memref<64xf32>
  kernel.store %v, %y[%t] : memref<16xf32>
  kernel.return
}
func.func @forward(%x: memref<64xf32>) -> memref<16xf32> {
  %y = memref.alloc() : memref<16xf32>
  kernel.launch @k grid [1, 1, 1] block [16, 1, 1] smem 0 (%x, %y)
      : memref<64xf32>, memref<16xf32>
  func.return %y : memref<16xf32>
}
""")
    (x,) = random_inputs(module, seed=5)
    (y,) = run(module, [x])
    np.testing.assert_array_equal(y[:8], x[0:32:4])
    assert np.isnan(y[8:]).all()


def test_kernel_copies_in_flight_at_the_end_complete(parse: Parse) -> None:
    """Copies never waited for (one group committed, one not) are completed when the launch
    ends, without disturbing the result; issued before other threads finished reading the
    buffer (no barrier), they race."""
    extra = ("  kernel.async_copy %x[%b, %i] to %s[%i] count 4 : memref<4x64xf32> to "
             "memref<64xf32>\n  kernel.async_commit\n  kernel.async_copy %x[%b, %i] to %s[%i] "
             "count 4 : memref<4x64xf32> to memref<64xf32>\n  kernel.return")
    text = KERNEL_ROWS.format(sync="kernel.async_commit\n kernel.async_wait 0\n kernel.barrier")
    module = parse(edit(text, "  kernel.return", "  kernel.barrier\n" + extra))
    (x,) = random_inputs(module, seed=6)
    (y,) = run(module, [x])
    np.testing.assert_array_equal(y, x)
    module = parse(edit(text, "  kernel.return", extra))
    with pytest.raises(RaceError, match=r"kernel.async_copy: data race \(write after read\)"):
        run(module, [x])


def test_kernel_misaligned_copy(parse: Parse) -> None:
    module = parse(edit(KERNEL_ROWS.format(sync="kernel.async_commit\n kernel.async_wait 0\n "
                                                "kernel.barrier"),
                        "kernel.async_copy %x[%b, %i] to %s[%i] count 4",
                        "kernel.async_copy %x[%b, %i] to %s[%t] count 4"))
    with pytest.raises(InterpretError, match=r"kernel.async_copy: misaligned copy: element "
                       r"offset 1 is not a multiple of 4 .*block 0, thread 1"):
        run(module, random_inputs(module, seed=0))
