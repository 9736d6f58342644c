"""The ``mma`` dialect's bf16/f16 ops in the interpreter: ``mma.ldmatrix`` hands each lane the
elements the PTX ISA says, ``mma.sync`` on pairs computes ``A·B + C`` (``m16n8k16``), and a
warp that stages tiles in shared memory, loads fragments with ``ldmatrix`` and multiplies
them matches NumPy. The lane layouts are written out here independently of the interpreter:
with ``g = lane / 4``, ``t = lane % 4``, pair ``a_q`` holds ``A[g + 8·(q % 2)][2t + 8·(q //
2) + {0, 1}]``, ``b_q`` holds ``B[2t + 8q + {0, 1}][g]`` (``B`` is K×N), ``c`` is ``C[g][2t],
C[g][2t+1], C[g+8][2t], C[g+8][2t+1]``; after ``ldmatrix`` result ``m`` of lane ``l`` is row
``l / 4``, columns ``2·(l % 4)`` and ``+1`` of matrix ``m`` (transposed: rows ``2·(l % 4)``,
``+1`` of column ``l / 4``)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects.builtin import MemRefType, ModuleOp, bf16, f16, f32
from xdsl.dialects.test import TestOp as Dummy
from xdsl.ir import Attribute, SSAValue
from xdsl.parser import Parser

from llmopt.api import make_context
from llmopt.dialects.mma import LdMatrixOp, SyncOp, pair_type
from llmopt.interp import DivergenceError, InterpretError, OutOfBoundsError, run
from llmopt.interp.simt import SIMT_IMPLS, SimtEvaluator

DTYPES = {"bf16": np.dtype(ml_dtypes.bfloat16), "f16": np.dtype(np.float16)}
TYPES: dict[str, Attribute] = {"bf16": bf16, "f16": f16}


def halves(rng: np.random.Generator, shape: tuple[int, ...], name: str) -> np.ndarray:
    """Random 16-bit values (exactly representable, so the reference needs no rounding)."""
    return rng.standard_normal(shape).astype(DTYPES[name])


def words(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Pairs as the register holds them: ``first`` in the low 16 bits."""
    return (first.view(np.uint16).astype(np.uint32)
            | (second.view(np.uint16).astype(np.uint32) << 16))


def values(types: list[Attribute]) -> list[SSAValue]:
    """SSA values of the given types (results of a dummy op)."""
    return list(Dummy(result_types=types).results)


LANE = np.arange(32)
G, T = LANE // 4, LANE % 4


@pytest.mark.parametrize("name", ["bf16", "f16"])
def test_sync_on_pairs_is_m16n8k16(name: str) -> None:
    """Pairs placed as the layout says give ``A·B + C`` (products exact, one rounding)."""
    rng = np.random.default_rng(0)
    a, b = halves(rng, (16, 16), name), halves(rng, (16, 8), name)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    pair = pair_type(TYPES[name])
    ins = values([pair] * 6 + [f32] * 4)
    op = SyncOp(ins[:4], ins[4:6], ins[6:])
    ev = SimtEvaluator({}, threads=(1, 32))
    for q in range(4):
        row, col = G + 8 * (q % 2), 2 * T + 8 * (q // 2)
        ev.env[ins[q]] = words(a[row, col], a[row, col + 1]).reshape(1, 32)
    for q in range(2):
        ev.env[ins[4 + q]] = words(b[2 * T + 8 * q, G], b[2 * T + 8 * q + 1, G]).reshape(1, 32)
    spots = [(G, 2 * T), (G, 2 * T + 1), (G + 8, 2 * T), (G + 8, 2 * T + 1)]
    for value, (r, n) in zip(ins[6:], spots, strict=True):
        ev.env[value] = c[r, n].reshape(1, 32)
    SIMT_IMPLS["mma.sync"](ev, op)
    ref = (a.astype(np.float64) @ b.astype(np.float64) + c).astype(np.float32)
    for result, (r, n) in zip(op.results, spots, strict=True):
        np.testing.assert_array_equal(np.asarray(ev.env[result]).reshape(32), ref[r, n])


@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("count", [1, 2, 4])
def test_ldmatrix_hands_out_the_documented_elements(count: int, trans: bool) -> None:
    """Lane ``8m + r`` names row ``r`` of matrix ``m`` (here: row ``5·(8m + r) mod 40`` of
    the tile, at column ``8·(m mod 2)``); the other lanes' indices are ignored even when out
    of bounds."""
    rng = np.random.default_rng(count)
    tile = halves(rng, (40, 16), "bf16")
    buffer, row, col = values([MemRefType(bf16, [40, 16]), *[f32] * 2])
    op = LdMatrixOp(buffer, [row, col], count, trans)
    rows = (5 * LANE) % 40
    cols = 8 * ((LANE // 8) % 2)
    supplied = LANE < 8 * count
    ev = SimtEvaluator({buffer: tile, row: np.where(supplied, rows, 999).reshape(1, 32),
                        col: cols.reshape(1, 32)}, threads=(1, 32))
    SIMT_IMPLS["mma.ldmatrix"](ev, op)
    for m, result in enumerate(op.results):
        matrix = np.stack([tile[rows[8 * m + r], cols[8 * m + r]:cols[8 * m + r] + 8]
                           for r in range(8)])  # matrix[r, c]
        if trans:
            want = words(matrix[2 * T, G], matrix[2 * T + 1, G])
        else:
            want = words(matrix[G, 2 * T], matrix[G, 2 * T + 1])
        np.testing.assert_array_equal(np.asarray(ev.env[result]).reshape(32), want)


def test_ldmatrix_rejects_a_misaligned_row() -> None:
    buffer, row, col = values([MemRefType(bf16, [8, 16]), f32, f32])
    op = LdMatrixOp(buffer, [row, col], 1)
    ev = SimtEvaluator({buffer: np.zeros((8, 16), DTYPES["bf16"]),
                        row: (LANE % 8).reshape(1, 32), col: np.int64(4)}, threads=(1, 32))
    with pytest.raises(InterpretError, match="not 16-byte aligned"):
        SIMT_IMPLS["mma.ldmatrix"](ev, op)


def test_ldmatrix_needs_the_whole_warp() -> None:
    buffer, row, col = values([MemRefType(bf16, [8, 16]), f32, f32])
    op = LdMatrixOp(buffer, [row, col], 1)
    ev = SimtEvaluator({buffer: np.zeros((8, 16), DTYPES["bf16"]),
                        row: (LANE % 8).reshape(1, 32), col: np.int64(0)}, threads=(1, 32))
    ev.mask = (LANE < 16).reshape(1, 32)
    with pytest.raises(DivergenceError, match="every thread of a warp"):
        SIMT_IMPLS["mma.ldmatrix"](ev, op)


WARP_PRODUCT = """
func.func @main(%a: memref<2x16x16xT>, %w: memref<2x8x16xT>, %c: memref<2x16x8xf32>)
    -> memref<2x16x8xf32> {
  %d = memref.alloc() : memref<2x16x8xf32>
  kernel.launch @mma grid [2, 1, 1] block [32, 1, 1] smem 0 (%a, %w, %c, %d)
      : memref<2x16x16xT>, memref<2x8x16xT>, memref<2x16x8xf32>, memref<2x16x8xf32>
  func.return %d : memref<2x16x8xf32>
}
kernel.func @mma(%a: memref<2x16x16xT>, %w: memref<2x8x16xT>, %c: memref<2x16x8xf32>,
                 %d: memref<2x16x8xf32>) block [32, 1, 1] {
  %sa = kernel.shared : memref<16x24xT>
  %sw = kernel.shared : memref<8x24xT>
  %lane = kernel.thread_id x
  %blk = kernel.block_id x
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %c128 = arith.constant 128 : index
  %c256 = arith.constant 256 : index
  scf.for %e = %lane to %c256 step %c32 {
    %r = arith.divui %e, %c16 : index
    %k = arith.remui %e, %c16 : index
    %v = kernel.load %a[%blk, %r, %k] : memref<2x16x16xT>
    kernel.store %v, %sa[%r, %k] : memref<16x24xT>
  }
  scf.for %e = %lane to %c128 step %c32 {
    %r = arith.divui %e, %c16 : index
    %k = arith.remui %e, %c16 : index
    %v = kernel.load %w[%blk, %r, %k] : memref<2x8x16xT>
    kernel.store %v, %sw[%r, %k] : memref<8x24xT>
  }
  kernel.barrier
  %l8 = arith.remui %lane, %c8 : index
  %m = arith.divui %lane, %c8 : index
  %m2 = arith.remui %m, %c2 : index
  %hi = arith.muli %m2, %c8 : index
  %arow = arith.addi %l8, %hi : index
  %half = arith.divui %lane, %c16 : index
  %acol = arith.muli %half, %c8 : index
  %a0, %a1, %a2, %a3 = mma.ldmatrix x4 %sa[%arow, %acol] : memref<16x24xT>
  %b0, %b1 = mma.ldmatrix x2 %sw[%l8, %hi] : memref<8x24xT>
  %g = arith.divui %lane, %c4 : index
  %t = arith.remui %lane, %c4 : index
  %g8 = arith.addi %g, %c8 : index
  %n0 = arith.muli %t, %c2 : index
  %n1 = arith.addi %n0, %c1 : index
  %x0 = kernel.load %c[%blk, %g, %n0] : memref<2x16x8xf32>
  %x1 = kernel.load %c[%blk, %g, %n1] : memref<2x16x8xf32>
  %x2 = kernel.load %c[%blk, %g8, %n0] : memref<2x16x8xf32>
  %x3 = kernel.load %c[%blk, %g8, %n1] : memref<2x16x8xf32>
  %d0, %d1, %d2, %d3 = mma.sync (%a0, %a1, %a2, %a3) * (%b0, %b1)
      + (%x0, %x1, %x2, %x3) : vector<2xT>
  kernel.store %d0, %d[%blk, %g, %n0] : memref<2x16x8xf32>
  kernel.store %d1, %d[%blk, %g, %n1] : memref<2x16x8xf32>
  kernel.store %d2, %d[%blk, %g8, %n0] : memref<2x16x8xf32>
  kernel.store %d3, %d[%blk, %g8, %n1] : memref<2x16x8xf32>
  kernel.return
}
"""
"""Two blocks of one warp: ``D = A·Wᵀ + C`` through shared tiles padded to 24 elements,
``A`` fragments by ``ldmatrix.x4``, ``B`` fragments by ``ldmatrix.x2`` of ``W``'s rows."""


def parse(text: str) -> ModuleOp:
    return Parser(make_context(), text).parse_module()


@pytest.mark.parametrize("name", ["bf16", "f16"])
def test_a_warp_product_from_shared_tiles_matches_numpy(name: str) -> None:
    module = parse(WARP_PRODUCT.replace("xT>", f"x{name}>"))
    rng = np.random.default_rng(3)
    a, w = halves(rng, (2, 16, 16), name), halves(rng, (2, 8, 16), name)
    c = rng.standard_normal((2, 16, 8)).astype(np.float32)
    (d,) = run(module, [a, w, c])
    ref = a.astype(np.float64) @ np.swapaxes(w.astype(np.float64), 1, 2) + c
    np.testing.assert_allclose(d, ref, rtol=1e-6, atol=1e-6)


def test_ldmatrix_before_the_barrier_is_a_race() -> None:
    text = WARP_PRODUCT.replace("xT>", "xbf16>").replace("  kernel.barrier\n", "", 1)
    rng = np.random.default_rng(4)
    inputs = [halves(rng, (2, 16, 16), "bf16"), halves(rng, (2, 8, 16), "bf16"),
              np.zeros((2, 16, 8), np.float32)]
    with pytest.raises(Exception, match="data race"):
        run(parse(text), inputs)


def test_ldmatrix_out_of_bounds_is_reported() -> None:
    text = WARP_PRODUCT.replace("xT>", "xbf16>").replace(
        "mma.ldmatrix x2 %sw[%l8, %hi]", "mma.ldmatrix x2 %sw[%arow, %hi]")
    rng = np.random.default_rng(5)
    inputs = [halves(rng, (2, 16, 16), "bf16"), halves(rng, (2, 8, 16), "bf16"),
              np.zeros((2, 16, 8), np.float32)]
    with pytest.raises(OutOfBoundsError):
        run(parse(text), inputs)
