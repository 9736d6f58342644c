"""``tma.load`` and ``mbarrier.expect_bytes`` in the Kernel-IR interpreter.

One producer thread announces a box's bytes on a barrier and copies the box from a global
buffer into a slot of shared memory; consumers wait for the barrier's phase and copy the
slot out. The box lands as numpy slicing says, zeros where it runs past the source (negative
coordinates included), whatever the rank of the source and whether the slot is swizzled
(the interpreter sees shared buffers logically). A consumer that does not wait races with
the copy, or reads the slot's old contents when races are not checked, as with
``cp.async`` copies bound to a phase (``test_mbarrier.py``); a copy of more bytes than its
phase announced, a copy on a barrier no one initialised and a phase whose bytes never come
are each reported. A producer and its consumers in branches of their own hand a ring of two
slots round several times (the cooperating-tasks path)."""

from __future__ import annotations

from collections.abc import Sequence

import ml_dtypes
import numpy as np
import pytest

import llmopt
from llmopt.interp import InterpretError, RaceError, run

BF16 = np.dtype(ml_dtypes.bfloat16)
BLOCK = 64
"""Threads of the one-box kernels: warp 0 consumes, thread 32 (warp 1) produces."""
PRODUCER = 32


def _memref(shape: Sequence[int]) -> str:
    return "memref<" + "x".join(str(n) for n in shape) + "xbf16>"


def _index(value: int) -> str:
    """An ``index`` constant's SSA name (defined by :func:`_constants`)."""
    return f"%c{value}" if value >= 0 else f"%cm{-value}"


def _constants(values: Sequence[int]) -> str:
    return "\n  ".join(f"{_index(v)} = arith.constant {v} : index"
                       for v in sorted(set(values)))


def one_box(src_shape: Sequence[int], corner: Sequence[int], tile: tuple[int, int], *,
            slots: int = 2, slot: int = 1, swizzle: bool = False, announced: int | None = None,
            wait: bool = True, init: bool = True, tma_first: bool = False) -> str:
    """A kernel whose thread 32 announces ``announced`` bytes (default: the box's) on
    ``full[slot]`` and copies the box of ``src`` at ``corner`` into slot ``slot`` of a
    ``slots × tile`` shared buffer; the 32 threads of warp 0 wait for the phase (unless not
    ``wait``) and copy the slot to the ``tile``-shaped output."""
    rows, cols = tile
    size = rows * cols
    box_bytes = 2 * size
    src, dst, out = _memref(src_shape), _memref((slots, rows, cols)), _memref(tile)
    bars = f"memref<{slots}xi64>"
    attrs = " {llmopt.swizzle = 128 : i64}" if swizzle else ""
    corner_text = ", ".join(_index(c) for c in corner)
    expect = (f"mbarrier.expect_bytes %full[{_index(slot)}] bytes "
              f"{announced or box_bytes} : {bars}")
    load = (f"tma.load %src[{corner_text}] to %slots[{_index(slot)}] on %full[{_index(slot)}]"
            f" : {src} to {dst}, {bars}")
    produce = [load, expect] if tma_first else [expect, load]
    init_line = f"mbarrier.init %full[{_index(slot)}] count 1 : {bars}" if init else ""
    wait_line = (f"mbarrier.wait %full[{_index(slot)}] parity %c0 : {bars}" if wait else "")
    return f"""
kernel.func @box(%src: {src}, %out: {out}) block [{BLOCK}, 1, 1] {{
  %slots = kernel.shared{attrs} : {dst}
  %full = kernel.shared : {bars}
  %tid = kernel.thread_id x
  {_constants([0, 1, 32, cols, size, PRODUCER, slot, *corner])}
  %first = arith.cmpi eq, %tid, %c0 : index
  scf.if %first {{
    {init_line}
  }}
  kernel.barrier
  %producer = arith.cmpi eq, %tid, %c{PRODUCER} : index
  scf.if %producer {{
    {produce[0]}
    {produce[1]}
  }}
  %consumer = arith.cmpi ult, %tid, %c32 : index
  scf.if %consumer {{
    {wait_line}
    scf.for %i = %tid to %c{size} step %c32 {{
      %r = arith.divui %i, %c{cols} : index
      %c = arith.remui %i, %c{cols} : index
      %v = kernel.load %slots[{_index(slot)}, %r, %c] : {dst}
      kernel.store %v, %out[%r, %c] : {out}
    }}
  }}
  kernel.return
}}

func.func @main(%src: {src}) -> {out} {{
  %out = memref.alloc() : {out}
  kernel.launch @box grid [1, 1, 1] block [{BLOCK}, 1, 1] smem 0 (%src, %out)
      : {src}, {out}
  func.return %out : {out}
}}
"""


def box_reference(src: np.ndarray, corner: Sequence[int], tile: tuple[int, int]) -> np.ndarray:
    """The box of ``src`` at ``corner`` (extent 1 in its leading dimensions, ``tile`` in the
    last two), zero where it leaves ``src``: numpy slicing of the overlap."""
    out = np.zeros(tile, src.dtype)
    *lead, row, col = corner
    if any(not 0 <= i < n for i, n in zip(lead, src.shape, strict=False)):
        return out
    plane = src[tuple(lead)]
    r0, r1 = max(row, 0), min(row + tile[0], plane.shape[0])
    c0, c1 = max(col, 0), min(col + tile[1], plane.shape[1])
    if r0 < r1 and c0 < c1:
        out[r0 - row:r1 - row, c0 - col:c1 - col] = plane[r0:r1, c0:c1]
    return out


def _source(shape: Sequence[int], seed: int = 5) -> np.ndarray:
    """Random bf16 values, none of them zero (so a zero in a result is a filled one)."""
    values = np.random.default_rng(seed).uniform(0.5, 2.0, tuple(shape))
    return values.astype(BF16)


CASES = {
    "rank-2 box inside the source": ((40, 64), (8, 0), (16, 64), False),
    "rank-2 box past the last row": ((40, 64), (32, 0), (16, 64), False),
    "rank-2 box before the first row and past the last column": ((40, 96), (-3, 48), (16, 64),
                                                                  False),
    "rank-3 source, swizzled slot": ((3, 40, 64), (1, 30, 0), (16, 64), True),
    "rank-3 source, narrow box": ((2, 24, 40), (1, -2, 24), (8, 32), False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_consumers_read_the_box_after_the_wait(case: str) -> None:
    shape, corner, tile, swizzle = CASES[case]
    src = _source(shape)
    (out,) = run(llmopt.parse(one_box(shape, corner, tile, swizzle=swizzle)), [src])
    want = box_reference(src, corner, tile)
    np.testing.assert_array_equal(out.astype(np.float32), want.astype(np.float32))


def test_a_box_past_the_source_is_zero_filled() -> None:
    """The reference's zero rows really are there: the box runs 8 rows past the end."""
    src = _source((40, 64))
    (out,) = run(llmopt.parse(one_box((40, 64), (32, 0), (16, 64))), [src])
    assert (out[8:].astype(np.float32) == 0).all()
    np.testing.assert_array_equal(out[:8].astype(np.float32), src[32:].astype(np.float32))


def test_reading_the_slot_without_waiting_is_a_race() -> None:
    text = one_box((40, 64), (8, 0), (16, 64), wait=False)
    with pytest.raises(RaceError, match="read after write"):
        run(llmopt.parse(text), [_source((40, 64))])


def test_reading_the_slot_without_waiting_sees_its_old_contents() -> None:
    """With the race checks off, the copy has not landed when the consumers read: they see
    the slot's poison (NaN), not the box."""
    text = one_box((40, 64), (8, 0), (16, 64), wait=False)
    (out,) = run(llmopt.parse(text), [_source((40, 64))], check_races=False)
    assert np.isnan(out.astype(np.float32)).all()


def test_more_bytes_than_announced_is_an_error() -> None:
    text = one_box((40, 64), (8, 0), (16, 64), announced=1024)
    with pytest.raises(InterpretError, match="completes 2048 bytes .* announced 1024"):
        run(llmopt.parse(text), [_source((40, 64))])


def test_a_copy_before_its_bytes_are_announced_is_an_error() -> None:
    text = one_box((40, 64), (8, 0), (16, 64), tma_first=True)
    with pytest.raises(InterpretError, match="announced 0"):
        run(llmopt.parse(text), [_source((40, 64))])


def test_a_copy_on_a_barrier_no_one_initialised_is_an_error() -> None:
    text = one_box((40, 64), (8, 0), (16, 64), init=False, tma_first=True)
    with pytest.raises(InterpretError, match="completes transactions on barrier .* before it "
                       "was initialised"):
        run(llmopt.parse(text), [_source((40, 64))])


def test_a_phase_waits_for_its_announced_bytes() -> None:
    """The arrival of ``expect_bytes`` alone does not complete the phase: with twice the
    box's bytes announced and one box copied, the consumers' wait is never satisfied."""
    text = one_box((40, 64), (8, 0), (16, 64), announced=4096)
    with pytest.raises(InterpretError, match="1 of 1 arrivals, 2048 of 4096 announced bytes"):
        run(llmopt.parse(text), [_source((40, 64))])


ROWS, COLS, TILE, STEPS, CONSUMERS = 90, 64, 16, 6, 128
"""The ring: a ``1 × 90 × 64`` source in 6 boxes of ``16 × 64`` (the last one 6 rows past
the end), two swizzled slots, 128 consumer threads and a producer warp."""


def ring(drop_empty_wait: bool = False) -> str:
    """Warp 4's first thread fills slot ``k % 2`` with box ``k`` once the consumers have
    released it (``empty``); the 128 consumers wait for it (``full``), copy it to rows
    ``16k…`` of the output and release it. Each role runs in a branch of its own."""
    src, out = _memref((1, ROWS, COLS)), _memref((STEPS * TILE, COLS))
    dst, bars = _memref((2, TILE, COLS)), "memref<2x2xi64>"
    size = TILE * COLS
    empty_wait = ("" if drop_empty_wait else
                  f"mbarrier.wait %bars[%c1, %s] parity %pe : {bars}")
    return f"""
kernel.func @ring(%src: {src}, %out: {out}) block [160, 1, 1] {{
  %slots = kernel.shared {{llmopt.swizzle = 128 : i64}} : {dst}
  %bars = kernel.shared : {bars}
  %tid = kernel.thread_id x
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c{COLS} = arith.constant {COLS} : index
  %c{TILE} = arith.constant {TILE} : index
  %c{CONSUMERS} = arith.constant {CONSUMERS} : index
  %c{size} = arith.constant {size} : index
  %c{STEPS} = arith.constant {STEPS} : index
  %first = arith.cmpi eq, %tid, %c0 : index
  scf.if %first {{
    mbarrier.init %bars[%c0, %c0] count 1 : {bars}
    mbarrier.init %bars[%c0, %c1] count 1 : {bars}
    mbarrier.init %bars[%c1, %c0] count {CONSUMERS} : {bars}
    mbarrier.init %bars[%c1, %c1] count {CONSUMERS} : {bars}
  }}
  kernel.barrier
  %consumer = arith.cmpi ult, %tid, %c{CONSUMERS} : index
  scf.if %consumer {{
    scf.for %k = %c0 to %c{STEPS} step %c1 {{
      %s = arith.remui %k, %c2 : index
      %round = arith.divui %k, %c2 : index
      %p = arith.remui %round, %c2 : index
      mbarrier.wait %bars[%c0, %s] parity %p : {bars}
      %base = arith.muli %k, %c{TILE} : index
      scf.for %i = %tid to %c{size} step %c{CONSUMERS} {{
        %r = arith.divui %i, %c{COLS} : index
        %c = arith.remui %i, %c{COLS} : index
        %v = kernel.load %slots[%s, %r, %c] : {dst}
        %row = arith.addi %base, %r : index
        kernel.store %v, %out[%row, %c] : {out}
      }}
      mbarrier.arrive %bars[%c1, %s] : {bars}
    }}
  }} else {{
    %producer = arith.cmpi eq, %tid, %c{CONSUMERS} : index
    scf.if %producer {{
      scf.for %k = %c0 to %c{STEPS} step %c1 {{
        %s = arith.remui %k, %c2 : index
        %round = arith.divui %k, %c2 : index
        %p = arith.remui %round, %c2 : index
        %pe = arith.xori %p, %c1 : index
        {empty_wait}
        mbarrier.expect_bytes %bars[%c0, %s] bytes {2 * size} : {bars}
        %row = arith.muli %k, %c{TILE} : index
        tma.load %src[%c0, %row, %c0] to %slots[%s] on %bars[%c0, %s] : {src} to {dst}, {bars}
      }}
    }}
  }}
  kernel.return
}}

func.func @main(%src: {src}) -> {out} {{
  %out = memref.alloc() : {out}
  kernel.launch @ring grid [1, 1, 1] block [160, 1, 1] smem 0 (%src, %out) : {src}, {out}
  func.return %out : {out}
}}
"""


def test_a_ring_of_two_slots_hands_every_box_over() -> None:
    src = _source((1, ROWS, COLS))
    (out,) = run(llmopt.parse(ring()), [src])
    want = np.zeros((STEPS * TILE, COLS), BF16)
    want[:ROWS] = src[0]
    np.testing.assert_array_equal(out.astype(np.float32), want.astype(np.float32))


def test_refilling_a_slot_before_its_release_is_a_race() -> None:
    """Without the producer's wait for ``empty``, its third box overwrites slot 0 while
    the consumers' reads of the first box are not ordered before it."""
    with pytest.raises(RaceError, match="write after read"):
        run(llmopt.parse(ring(drop_empty_wait=True)), [_source((1, ROWS, COLS))])
