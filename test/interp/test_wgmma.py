"""The ``wgmma`` dialect in the interpreter: warpgroups that stage ``x`` and ``W`` in swizzled
shared tiles and chain ``wgmma.mma`` over ``K`` compute ``x·Wᵀ`` as NumPy does, each
warpgroup from its own indices; a block that is not whole warpgroups, a warpgroup that
disagrees on its indices, divergence inside a warpgroup, a missing barrier and a box out of
bounds are reported. The accumulator layout is written out here independently of the
interpreter: thread ``l`` of warp ``w`` of a warpgroup (``g = l / 4``, ``t = l % 4``) holds,
as value ``i``, ``D[16w + g + 8·((i / 2) mod 2)][8·(i / 4) + 2t + i mod 2]``."""

from __future__ import annotations

from collections.abc import Sequence

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects.builtin import IndexType, MemRefType, ModuleOp, bf16, f32
from xdsl.dialects.test import TestOp as Dummy
from xdsl.ir import Attribute, SSAValue
from xdsl.parser import Parser

from llmopt.api import make_context
from llmopt.dialects.wgmma import MmaOp
from llmopt.interp import DivergenceError, InterpretError, OutOfBoundsError, RaceError, run
from llmopt.interp.simt import SIMT_IMPLS, SimtEvaluator

BF16 = np.dtype(ml_dtypes.bfloat16)
WIDTH = 64
"""Columns (``K``) of every tile: one 128-byte swizzled row of bf16."""


def halves(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random bf16 values (exactly representable, so the reference needs no rounding)."""
    return rng.standard_normal(shape).astype(BF16)


def spot(i: int) -> tuple[int, int]:
    """The ``(row, column)`` offsets of value ``i`` from ``(16w + g, 2t)``."""
    return 8 * ((i // 2) % 2), 8 * (i // 4) + i % 2


def product(*, rows: int = 64, n: int = 64, threads: int = 128,
            ar: Sequence[str] = ("%ar = arith.constant 0 : index",), bias: bool = False,
            barrier: bool = True, extra: Sequence[str] = (), guard: int | None = None,
            fence: bool = True, pending: int = 0, in_flight: Sequence[str] = ()) -> str:
    """Kernel IR of ``y = x·Wᵀ (+ c)`` with ``x: rows×64``, ``W: n×64`` (bf16) staged in
    swizzled shared tiles, and a chain of four ``wgmma.mma`` over ``k = 0, 16, 32, 48``
    (``N = n``) whose accumulators each thread stores at its layout spots.

    ``ar`` defines ``%ar``, ``a``'s row index (from ``%tid``, ``%wg`` = ``tid / 128``, ``%wl``
    = ``tid % 128`` and constants ``%cK``); ``bias`` starts the chain from ``c: rows×n``
    (read at the layout spots) instead of zeros; ``extra`` lines follow the barrier;
    ``guard`` runs the fence, chain and stores under ``tid < guard``; ``pending`` is the
    first wait's, and ``in_flight`` lines follow it, before a ``wgmma.wait 0`` that retires
    the chain (with ``pending = 0`` nothing is in flight there)."""
    x, w, y = (f"memref<{rows}x{WIDTH}xbf16>", f"memref<{n}x{WIDTH}xbf16>",
               f"memref<{rows}x{n}xf32>")
    count = n // 2
    consts = sorted({0, 1, 2, 4, 8, 16, 32, 48, 64, 128, rows * WIDTH, n * WIDTH, threads}
                    | {guard or 0} | {r for i in range(count) for r in spot(i)})
    lines = [f"%c{v} = arith.constant {v} : index" for v in consts]
    lines += [
        "%tid = kernel.thread_id x",
        "%zero = arith.constant 0.0 : f32",
        "%wg = arith.divui %tid, %c128 : index",
        "%wl = arith.remui %tid, %c128 : index",
        "%warp = arith.divui %wl, %c32 : index",
        "%lane = arith.remui %tid, %c32 : index",
        "%g = arith.divui %lane, %c4 : index",
        "%t = arith.remui %lane, %c4 : index",
    ]
    for src, dst, size, typ in (("%x", "%sa", rows * WIDTH, x), ("%w", "%sb", n * WIDTH, w)):
        lines += [
            f"scf.for %e = %tid to %c{size} step %c{threads} {{",
            f"  %r = arith.divui %e, %c{WIDTH} : index",
            f"  %k = arith.remui %e, %c{WIDTH} : index",
            f"  %v = kernel.load {src}[%r, %k] : {typ}",
            f"  kernel.store %v, {dst}[%r, %k] : {typ}",
            "}",
        ]
    if barrier:
        lines.append("kernel.barrier")
    lines += extra
    body = [
        *ar,
        "%w16 = arith.muli %warp, %c16 : index",
        "%r16 = arith.addi %ar, %w16 : index",
        "%row = arith.addi %r16, %g : index",
        "%col = arith.muli %t, %c2 : index",
    ]
    spots = []
    for i in range(count):
        dr, dc = spot(i)
        body.append(f"%row{i} = arith.addi %row, %c{dr} : index")
        body.append(f"%col{i} = arith.addi %col, %c{dc} : index")
        spots.append(f"%row{i}, %col{i}")
    acc = ["%zero"] * count
    if bias:
        acc = [f"%c_{i}" for i in range(count)]
        body += [f"{v} = kernel.load %c[{at}] : {y}" for v, at in zip(acc, spots, strict=True)]
    if fence:
        body.append("wgmma.fence")
    for step in range(4):
        k = f"%c{16 * step}"
        out = [f"%d{step}_{i}" for i in range(count)]
        body.append(f"{', '.join(out)} = wgmma.mma %sa[%ar, {k}], %sb[%c0, {k}] + "
                    f"({', '.join(acc)}) : {x}, {w}")
        acc = out
    body.append("wgmma.commit")
    done = [f"%e{i}" for i in range(count)]
    body.append(f"{', '.join(done)} = wgmma.wait {pending} ({', '.join(acc)})")
    if pending or in_flight:
        body += in_flight
        waited = [f"%f{i}" for i in range(count)]
        body.append(f"{', '.join(waited)} = wgmma.wait 0 ({', '.join(done)})")
        done = waited
    body += [f"kernel.store {v}, %y[{at}] : {y}" for v, at in zip(done, spots, strict=True)]
    if guard is not None:
        body = [f"%p = arith.cmpi ult, %tid, %c{guard} : index", "scf.if %p {",
                *("  " + b for b in body), "}"]
    lines += body
    params = f"%x: {x}, %w: {w}" + (f", %c: {y}" if bias else "")
    args = "%x, %w" + (", %c" if bias else "")
    types = f"{x}, {w}" + (f", {y}" if bias else "")
    kernel_body = "\n  ".join(lines)
    return f"""
func.func @main({params}) -> {y} {{
  %y = memref.alloc() : {y}
  kernel.launch @wg grid [1, 1, 1] block [{threads}, 1, 1] smem 0 ({args}, %y)
      : {types}, {y}
  func.return %y : {y}
}}
kernel.func @wg({params}, %y: {y}) block [{threads}, 1, 1] {{
  %sa = kernel.shared {{llmopt.swizzle = 128 : i64}} : {x}
  %sb = kernel.shared {{llmopt.swizzle = 128 : i64}} : {w}
  {kernel_body}
  kernel.return
}}
"""


def parse(text: str) -> ModuleOp:
    module = Parser(make_context(), text).parse_module()
    module.verify()
    return module


def reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x·Wᵀ`` in float64 from the same bf16 values."""
    return x.astype(np.float64) @ w.astype(np.float64).T


BY_WARPGROUP = ("%ar = arith.muli %wg, %c64 : index",)
"""``a``'s row ``64 · (tid / 128)``: warpgroup ``j`` multiplies rows ``64j`` to ``64j + 63``."""


def test_one_warpgroup_chains_four_products_over_k() -> None:
    """128 threads, ``N = 64``: every thread's 32 values land where the layout says."""
    rng = np.random.default_rng(11)
    x, w = halves(rng, (64, WIDTH)), halves(rng, (64, WIDTH))
    (y,) = run(parse(product()), [x, w])
    np.testing.assert_allclose(y, reference(x, w), rtol=1e-6, atol=1e-6)


def test_small_n_from_a_random_c() -> None:
    """``N = 8`` (four values a thread), the chain starting from a random ``C``."""
    rng = np.random.default_rng(12)
    x, w = halves(rng, (64, WIDTH)), halves(rng, (8, WIDTH))
    c = rng.standard_normal((64, 8)).astype(np.float32)
    (y,) = run(parse(product(n=8, bias=True)), [x, w, c])
    np.testing.assert_allclose(y, reference(x, w) + c, rtol=1e-6, atol=1e-6)


def test_each_warpgroup_uses_its_own_indices() -> None:
    """256 threads: warpgroup 1 multiplies rows 64..127 of a 128×64 ``A`` tile."""
    rng = np.random.default_rng(13)
    x, w = halves(rng, (128, WIDTH)), halves(rng, (64, WIDTH))
    c = rng.standard_normal((128, 64)).astype(np.float32)
    (y,) = run(parse(product(rows=128, threads=256, ar=BY_WARPGROUP, bias=True)), [x, w, c])
    np.testing.assert_allclose(y, reference(x, w) + c, rtol=1e-6, atol=1e-6)


def test_a_warpgroup_may_skip_the_products_whole() -> None:
    """Under ``tid < 128`` only warpgroup 0 multiplies; warpgroup 1's rows stay unwritten."""
    rng = np.random.default_rng(14)
    x, w = halves(rng, (128, WIDTH)), halves(rng, (8, WIDTH))
    (y,) = run(parse(product(rows=128, n=8, threads=256, ar=BY_WARPGROUP, guard=128)), [x, w])
    np.testing.assert_allclose(y[:64], reference(x[:64], w), rtol=1e-6, atol=1e-6)
    assert np.isnan(y[64:]).all()


def test_indices_that_differ_within_a_warpgroup_are_rejected() -> None:
    """Threads 64..127 of the warpgroup name row 8, threads 0..63 row 0."""
    ar = ("%half = arith.divui %wl, %c64 : index", "%ar = arith.muli %half, %c8 : index")
    rng = np.random.default_rng(15)
    with pytest.raises(InterpretError, match=r"wgmma\.mma: the row index of 'a' must be the "
                       r"same for every thread of a warpgroup: 0 at block 0, thread 0 but 8 "
                       r"at block 0, thread 64"):
        run(parse(product(ar=ar)), [halves(rng, (64, WIDTH)), halves(rng, (64, WIDTH))])


def test_a_misaligned_row_is_rejected() -> None:
    """Warpgroup 1 agrees on row 4, which is not a multiple of 8."""
    ar = ("%ar = arith.muli %wg, %c4 : index",)
    rng = np.random.default_rng(16)
    with pytest.raises(InterpretError, match=r"wgmma\.mma: the row index of 'a' must be a "
                       r"multiple of 8, got 4 at block 0, thread 128"):
        run(parse(product(rows=128, n=8, threads=256, ar=ar)),
            [halves(rng, (128, WIDTH)), halves(rng, (8, WIDTH))])


def test_a_block_of_96_threads_is_rejected() -> None:
    rng = np.random.default_rng(17)
    with pytest.raises(InterpretError, match=r"wgmma\.fence: needs whole warpgroups of 128 "
                       r"threads, the block has 96 threads"):
        run(parse(product(n=8, threads=96)), [halves(rng, (64, WIDTH)),
                                              halves(rng, (8, WIDTH))])


@pytest.mark.parametrize("fence", [True, False])
def test_a_warpgroup_split_by_a_condition_is_divergent(fence: bool) -> None:
    """Under ``tid < 64`` half of the warpgroup would run the fence, or (without the
    fence) the first product."""
    rng = np.random.default_rng(18)
    name = "fence" if fence else "mma"
    with pytest.raises(DivergenceError, match=rf"wgmma\.{name}: every thread of a "
                       r"warpgroup must execute it \(it sits in divergent control flow\)"):
        run(parse(product(n=8, guard=64, fence=fence)), [halves(rng, (64, WIDTH)),
                                                          halves(rng, (8, WIDTH))])


def test_reading_the_tiles_before_the_barrier_is_a_race() -> None:
    rng = np.random.default_rng(19)
    with pytest.raises(RaceError, match=r"wgmma\.mma: data race \(read after write\) on "
                       r"shared %sa\["):
        run(parse(product(barrier=False)), [halves(rng, (64, WIDTH)),
                                            halves(rng, (64, WIDTH))])


@pytest.mark.parametrize("writer", [0, 1, 64, 127])
def test_a_write_by_any_one_thread_after_the_barrier_is_a_race(writer: int) -> None:
    """Thread ``writer`` rewrites ``a[0][0]`` after the barrier: the tensor core reads it for
    the whole warpgroup, so whichever thread wrote it, the read races with the write."""
    extra = (f"%who = arith.constant {writer} : index",
             "%is = arith.cmpi eq, %tid, %who : index",
             "%h = arith.truncf %zero : f32 to bf16",
             "scf.if %is {",
             f"  kernel.store %h, %sa[%c0, %c0] : memref<64x{WIDTH}xbf16>",
             "}")
    rng = np.random.default_rng(20)
    with pytest.raises(RaceError, match=r"wgmma\.mma: data race \(read after write\) on "
                       rf"shared %sa\[0, 0\] \(block 0\): thread {writer} of block 0"):
        run(parse(product(n=8, extra=extra)), [halves(rng, (64, WIDTH)),
                                               halves(rng, (8, WIDTH))])


def _overwrite_a(writer: int) -> tuple[str, ...]:
    """Thread ``writer`` stores 0 into ``a[0][0]``."""
    return (f"%who = arith.constant {writer} : index",
            "%is = arith.cmpi eq, %tid, %who : index",
            "%h = arith.truncf %zero : f32 to bf16",
            "scf.if %is {",
            f"  kernel.store %h, %sa[%c0, %c0] : memref<64x{WIDTH}xbf16>",
            "}")


@pytest.mark.parametrize("pending", [0, 1])
def test_a_tile_written_after_a_barrier_races_with_a_product_still_in_flight(
        pending: int) -> None:
    """A barrier orders the threads, not the tensor core: with ``wait 1`` the chain's group is
    still in flight after the barrier, so thread 5 rewriting ``a[0][0]`` there races with
    it (found when ``wait 0`` retires the group); after ``wait 0`` the tile is free."""
    rng = np.random.default_rng(22)
    x, w = halves(rng, (64, WIDTH)), halves(rng, (8, WIDTH))
    text = product(n=8, pending=pending, in_flight=("kernel.barrier", *_overwrite_a(5)))
    if pending == 0:
        (y,) = run(parse(text), [x, w])
        np.testing.assert_allclose(y, reference(x, w), rtol=1e-6, atol=1e-6)
        return
    with pytest.raises(RaceError, match=r"wgmma\.mma: data race \(read after write\) on "
                       r"shared %sa\[0, 0\] \(block 0\): thread 5 of block 0"):
        run(parse(text), [x, w])


def test_a_box_out_of_bounds_is_reported() -> None:
    """Warpgroup 1 reads rows 64..127 of a 64-row tile."""
    rng = np.random.default_rng(21)
    with pytest.raises(OutOfBoundsError, match=r"wgmma\.mma: index 64 is out of bounds for "
                       r"dimension 0 of extent 64"):
        run(parse(product(n=8, threads=256, ar=BY_WARPGROUP)),
            [halves(rng, (64, WIDTH)), halves(rng, (8, WIDTH))])


def values(types: list[Attribute]) -> list[SSAValue]:
    """SSA values of the given types (results of a dummy op)."""
    return list(Dummy(result_types=types).results)


def test_tile_ir_gathers_under_loop_axes() -> None:
    """At Tile IR (plain gathers, no race checks), in a frame ``(iteration, block, thread)``
    of two loop iterations and two warpgroups: ``a``'s row ``64·i + 8·(warpgroup + 1)`` and
    ``k`` 32, ``b``'s row 0 and ``k`` ``16·i``, from a random ``C``, ``N = 16``."""
    rng = np.random.default_rng(22)
    n = 16
    a_tile, b_tile = halves(rng, (200, WIDTH)), halves(rng, (n, WIDTH))
    a, ar, ak, b, bn, bk, *c = values([MemRefType(bf16, [200, WIDTH]), *[IndexType()] * 2,
                                       MemRefType(bf16, [n, WIDTH]), *[IndexType()] * 2,
                                       *[f32] * (n // 2)])
    op = MmaOp(a, [ar, ak], b, [bn, bk], c)
    ev = SimtEvaluator({a: a_tile, b: b_tile}, threads=(1, 256))
    ev.frame = (2, 1, 256)
    it = np.arange(2).reshape(2, 1, 1)
    tid = np.arange(256)
    wg, wl = tid // 128, tid % 128
    ev.env |= {ar: 64 * it + 8 * (wg + 1), ak: np.int64(32), bn: np.int64(0), bk: 16 * it}
    acc = rng.standard_normal((2, 2, 64, n)).astype(np.float32)  # [iteration, warpgroup]
    row, col = 16 * (wl // 32) + (wl % 32) // 4, 2 * (wl % 4)
    for i, value in enumerate(c):
        dr, dc = spot(i)
        ev.env[value] = acc[:, wg, row + dr, col + dc].reshape(2, 1, 256)
    SIMT_IMPLS["wgmma.mma"](ev, op)
    for j in range(2):
        for g in range(2):
            r0 = 64 * j + 8 * (g + 1)
            want = (a_tile[r0:r0 + 64, 32:48].astype(np.float64)
                    @ b_tile[:, 16 * j:16 * j + 16].astype(np.float64).T + acc[j, g])
            got = np.full((64, n), np.nan, np.float32)
            for i, result in enumerate(op.results):
                dr, dc = spot(i)
                lanes = np.asarray(ev.env[result]).reshape(2, 256)[j, 128 * g:128 * g + 128]
                got[row[:128] + dr, col[:128] + dc] = lanes
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
