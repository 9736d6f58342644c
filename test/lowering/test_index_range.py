"""``fits_in_32_bits``: when a kernel's index arithmetic may be printed as ``int``."""

from __future__ import annotations

import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from llmopt.api import make_context
from llmopt.dialects import kernel
from llmopt.lowering._index_range import fits_in_32_bits, launch_grids, length_bounds

LOOP = """
kernel.func @k(%x: memref<BUFxf32>) block [256, 1, 1] {
  %tid = kernel.thread_id x
  %lb = arith.constant LB : index
  %ub = arith.constant UB : index
  %step = arith.constant STEP : index
  %c0 = arith.constant 0 : index
  scf.for %i = %lb to %ub step %step {
    %j = arith.OP %i, %c9 : index
    %v = kernel.load %x[%c0] : memref<BUFxf32>
    kernel.store %v, %x[%tid] : memref<BUFxf32>
  }
  kernel.return
}
"""


def parse(text: str) -> ModuleOp:
    return Parser(make_context(), text).parse_module()


def loop_kernel(lb: int, ub: int, step: int, op: str = "addi", buf: int = 1024) -> kernel.FuncOp:
    text = (LOOP.replace("LB", str(lb)).replace("UB", str(ub)).replace("STEP", str(step))
            .replace("OP", op).replace("BUF", str(buf))
            .replace("%c0 = arith.constant 0 : index",
                     "%c0 = arith.constant 0 : index\n  %c9 = arith.constant 9 : index"))
    (func,) = [o for o in parse(text).ops if isinstance(o, kernel.FuncOp)]
    return func


def test_a_small_loop_fits() -> None:
    assert fits_in_32_bits(loop_kernel(0, 1000, 1), grid=None)


def test_the_increment_after_the_last_trip_must_fit() -> None:
    """``i += step`` runs once more after the last trip: ub − 1 + step must fit too."""
    assert fits_in_32_bits(loop_kernel(0, 2**31 - 2, 1, "remsi"), grid=None)
    assert not fits_in_32_bits(loop_kernel(0, 2**31 - 2, 4, "remsi"), grid=None)


@pytest.mark.parametrize(("op", "lb", "fits"), [
    ("muli", 0, True), ("remsi", -5, True), ("remui", 0, True), ("remui", -5, False),
    ("divui", -5, False), ("divsi", -5, True), ("shli", 0, False)])
def test_operations(op: str, lb: int, fits: bool) -> None:
    """Unsigned division of a possibly negative value and unmodelled ops keep 64 bits."""
    assert fits_in_32_bits(loop_kernel(lb, 1000, 1, op), grid=None) is fits


def test_a_product_that_overflows_keeps_64_bits() -> None:
    assert fits_in_32_bits(loop_kernel(0, 2**16, 1, "muli"), grid=None)
    big = loop_kernel(0, 2**28, 1, "muli")  # i · 9 reaches 2.4e9
    assert not fits_in_32_bits(big, grid=None)


def test_buffer_offsets_are_bounded() -> None:
    """``x[tid]`` in a buffer: the offset bound is the index's, whatever the buffer's size."""
    assert fits_in_32_bits(loop_kernel(0, 10, 1, buf=2**40), grid=None)


GRID = """
func.func @main(%x: memref<4096xf32>) -> memref<4096xf32> {
  kernel.launch @k grid [G, 1, 1] block [256, 1, 1] smem 0 (%x) : memref<4096xf32>
  kernel.launch @k grid [2, 1, 1] block [256, 1, 1] smem 0 (%x) : memref<4096xf32>
  func.return %x : memref<4096xf32>
}
kernel.func @k(%x: memref<4096xf32>) block [256, 1, 1] {
  %bid = kernel.block_id x
  %gdim = kernel.grid_dim x
  %ub = arith.constant 4096 : index
  scf.for %i = %bid to %ub step %gdim {
    %v = kernel.load %x[%i] : memref<4096xf32>
    kernel.store %v, %x[%i] : memref<4096xf32>
  }
  kernel.return
}
"""


def test_the_grid_comes_from_the_largest_launch() -> None:
    module = parse(GRID.replace("G", "16"))
    grids = launch_grids(module)
    assert grids == {"k": (16, 1, 1)}
    (func,) = [o for o in module.ops if isinstance(o, kernel.FuncOp)]
    assert fits_in_32_bits(func, grids["k"])
    assert not fits_in_32_bits(func, None)  # blockIdx unbounded without a launch
    huge = parse(GRID.replace("G", str(2**31 - 1)))
    (func,) = [o for o in huge.ops if isinstance(o, kernel.FuncOp)]
    assert not fits_in_32_bits(func, launch_grids(huge)["k"])  # i += gridDim overflows


CARRIED = """
kernel.func @k(%x: memref<BUFxf32>) block [256, 1, 1] {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %init = arith.constant INIT : index
  %n = arith.constant 100000 : index
  %wrap = arith.constant WRAP : index
  %step = arith.constant STEP : index
  %last = scf.for %i = %c0 to %n step %c1 iter_args(%s = %init) -> (index) {
    %v = kernel.load %x[%s] : memref<BUFxf32>
    kernel.store %v, %x[%c0] : memref<BUFxf32>
    %next = arith.addi %s, %step : index
    %inside = arith.cmpi slt, %next, %wrap : index
    %wrapped = arith.select %inside, %next, %c0 : index
    scf.yield %wrapped : index
  }
  %w = kernel.load %x[%last] : memref<BUFxf32>
  kernel.store %w, %x[%c1] : memref<BUFxf32>
  kernel.return
}
"""


def carried_kernel(init: int, wrap: int, step: int = 1, buf: int = 4096) -> kernel.FuncOp:
    text = (CARRIED.replace("INIT", str(init)).replace("WRAP", str(wrap))
            .replace("STEP", str(step)).replace("BUF", str(buf)))
    (func,) = [o for o in parse(text).ops if isinstance(o, kernel.FuncOp)]
    return func


@pytest.mark.parametrize(("init", "wrap", "step", "fits"), [
    (2, 44, 1, True),            # async-copy's fetched chunk: [0, 44)
    (0, 3, 1, True),             # its slots
    (5, 2**31 - 1, 1, True),     # wraps just below the 32-bit limit
    (5, 2**31 - 1, 7, False),    # next = s + 7 may pass 2³¹ − 1 before the compare
    (-(2**31) - 1, 10, 1, False),  # starts below the 32-bit range
])
def test_a_wrapping_counter_carried_by_a_loop(init: int, wrap: int, step: int,
                                              fits: bool) -> None:
    """An index ``iter_arg`` stepped and wrapped with ``select(next < wrap, next, 0)`` lies
    in ``[0, wrap)`` (its initial value included); the analysis widens to find that."""
    assert fits_in_32_bits(carried_kernel(init, wrap, step, buf=2**32), grid=None) is fits


def test_a_counter_that_grows_without_bound_keeps_64_bits() -> None:
    """With no wrap (the compare never true), the counter reaches 100000 · 30000 > 2³¹."""
    text = CARRIED.replace("%inside, %next, %c0", "%inside, %c0, %next")
    text = (text.replace("INIT", "0").replace("WRAP", "0").replace("STEP", "30000")
            .replace("BUF", str(2**40)))
    (func,) = [o for o in parse(text).ops if isinstance(o, kernel.FuncOp)]
    assert not fits_in_32_bits(func, grid=None)


def test_a_carried_index_bounds_the_offsets_it_reaches() -> None:
    """``x[s]`` with ``s`` in ``[0, 44)`` fits whatever the buffer; in a buffer of 2³² rows
    of 2³⁰ elements it would not, and the offset check sees the carried interval."""
    assert fits_in_32_bits(carried_kernel(2, 44), grid=None)
    text = (CARRIED.replace("INIT", "2").replace("WRAP", "44").replace("STEP", "1")
            .replace("memref<BUFxf32>", "memref<64x1073741824xf32>")
            .replace("%x[%s]", "%x[%s, %c0]").replace("%x[%c0]", "%x[%c0, %c0]")
            .replace("%x[%last]", "%x[%last, %c0]").replace("%x[%c1]", "%x[%c1, %c0]"))
    (func,) = [o for o in parse(text).ops if isinstance(o, kernel.FuncOp)]
    assert not fits_in_32_bits(func, grid=None)


def test_an_in_bounds_index_counts_below_its_extent() -> None:
    """``x[p / 2, p % 2]`` for ``p`` up to 2³⁰: the interval of the row reaches 2²⁹, whose
    offset (2²⁹ rows of 1024) would not fit, but an access in bounds stays below the
    buffer's rows: 64 rows fit in 32 bits, 2²² do not."""
    text = """
    kernel.func @k(%x: memref<ROWSx1024xf32>) block [256, 1, 1] {
      %n = arith.constant 1073741824 : index
      %c2 = arith.constant 2 : index
      %step = arith.constant 65536 : index
      %tid = kernel.thread_id x
      scf.for %p = %tid to %n step %step {
        %i = arith.divui %p, %c2 : index
        %j = arith.remui %p, %c2 : index
        %v = kernel.load %x[%i, %j] : memref<ROWSx1024xf32>
        kernel.store %v, %x[%i, %j] : memref<ROWSx1024xf32>
      }
      kernel.return
    }
    """
    (func,) = [o for o in parse(text.replace("ROWS", "64")).ops]
    assert isinstance(func, kernel.FuncOp) and fits_in_32_bits(func, None)
    (func,) = [o for o in parse(text.replace("ROWS", str(2**22))).ops]
    assert isinstance(func, kernel.FuncOp) and not fits_in_32_bits(func, None)


SYMBOLIC = """
func.func @main(%x: memref<1x8x?x64xf32>,
                %seq: index {llmopt.symbol = "seq", llmopt.max = MAX : i64}) {
  %g = arith.constant GRID : index
  kernel.launch @k grid [%g max GRID, 1, 1] block [256, 1, 1] smem 0 (%x, %seq)
      : memref<1x8x?x64xf32>, index
  func.return
}
kernel.func @k(%x: memref<1x8x?x64xf32>, %seq: index) block [256, 1, 1] {
  %bid = kernel.block_id x
  %bdim = kernel.block_dim x
  %tid = kernel.thread_id x
  %c0 = arith.constant 0 : index
  %c64 = arith.constant 64 : index
  %c512 = arith.constant 512 : index
  %t0 = arith.muli %bid, %bdim : index
  %start = arith.addi %t0, %tid : index
  %n = arith.muli %seq, %c512 : index
  %blocks = arith.ceildivui %n, %bdim : index
  %stride = arith.muli %blocks, %bdim : index
  scf.for %p = %start to %n step %stride {
    %d = arith.remui %p, %c64 : index
    %r = arith.divui %p, %c64 : index
    %row = arith.remui %r, %seq : index
    %head = arith.divui %r, %seq : index
    %v = kernel.load %x[%c0, %head, %row, %d] : memref<1x8x?x64xf32>
    kernel.store %v, %x[%c0, %head, %row, %d] : memref<1x8x?x64xf32>
  }
  kernel.return
}
"""


@pytest.mark.parametrize(("bound", "fits"), [(2048, True), (2**22, False)])
def test_a_symbolic_length_is_bounded_by_its_symbol(bound: int, fits: bool) -> None:
    """A symbolic kernel's length parameter is in ``[1, llmopt.max]`` of the host symbol its
    launches pass; division and remainder by it, and the ``?`` extents of its buffers, are
    bounded by that: 8 heads of 2048 rows of 64 fit in 32 bits, of 2²² rows not."""
    module = parse(SYMBOLIC.replace("MAX", str(bound)).replace("GRID", str(2 * bound)))
    bounds = length_bounds(module, {"k": 1})
    assert bounds == {"k": (1, bound)}
    (func,) = [o for o in module.ops if isinstance(o, kernel.FuncOp)]
    grid = launch_grids(module)["k"]
    assert fits_in_32_bits(func, grid, (1, bounds["k"])) is fits
    assert not fits_in_32_bits(func, grid)  # without the bound the length is unknown


def test_a_length_that_is_not_a_symbol_has_no_bound() -> None:
    """A launch that passes a value computed on the host (here the symbol doubled) leaves
    the kernel's length unbounded."""
    text = SYMBOLIC.replace("MAX", "2048").replace("GRID", "4096").replace(
        "smem 0 (%x, %seq)", "smem 0 (%x, %twice)").replace(
        "%g = arith.constant", "%twice = arith.addi %seq, %seq : index\n  %g = arith.constant")
    assert length_bounds(parse(text), {"k": 1}) == {}
