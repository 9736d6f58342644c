"""Shared helpers of the interpreter tests: parsing IR text and RMSNorm at every level.

Tolerances. Results are compared with a float64 numpy reference. An RMSNorm output element
is ``x * rsqrt(mean(x^2) + eps) * w``: its relative error is that of the sum of squares plus
a few roundings of the epilogue (divide, add, rsqrt, two multiplies: <= 6 ulp). A sum of
``n`` positive terms has a worst-case relative error of ``(n - 1) * eps`` (sequential order),
``(n / B + log2 B) * eps`` for the blocked tree orders used on GPUs, and for random data the
rounding errors behave like a random walk, ``~ sqrt(n) * eps``. For ``n <= 4096`` in f32
(eps = 2**-24 ~ 6e-8) that is ``~ 4e-6``, so ``rtol = 1e-5`` has margin, while any
indexing mistake (a missed, repeated or misplaced element) moves results by far more. The
same reasoning gives ``rtol = 1e-12`` for f64 (eps = 2**-53 ~ 1.1e-16).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, math, memref, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from llmopt.dialects.kernel import Kernel
from llmopt.dialects.loop import Loop
from llmopt.dialects.prim import Prim
from llmopt.dialects.tile import Tile

RTOL = {"f32": 1e-5, "f64": 1e-12}
"""Relative tolerance of an RMSNorm row of ``n <= 4096`` elements (see the module docstring)."""

EPS = 1e-5
EPS_TEXT = "1.0e-05"  # MLIR float literals need a mantissa with a point


def parse_module(text: str) -> ModuleOp:
    """Parse and verify IR text with builtin, func, arith, math, memref, scf and llmopt."""
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, arith.Arith, math.Math, memref.MemRef, scf.Scf,
                    Prim, Loop, Tile, Kernel):
        ctx.load_dialect(dialect)
    try:
        from llmopt.dialects.torch import Torch
    except ImportError:  # pragma: no cover - the torch dialect is optional here
        pass
    else:
        ctx.load_dialect(Torch)
    module = Parser(ctx, text).parse_module()
    module.verify()
    return module


def rms_norm_reference(x: np.ndarray, w: np.ndarray, eps: float = EPS) -> np.ndarray:
    """RMSNorm over the last axis, in float64."""
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    return x64 / np.sqrt((x64 * x64).mean(axis=-1, keepdims=True) + eps) * w64


# --- RMSNorm over rows of ``x: R x N``, one IR text per level ----------------------------------


def rms_prim(rows: int, n: int, t: str) -> str:
    """Tensor IR: square, reduce, scale, broadcast, multiply."""
    x, r = f"tensor<{rows}x{n}x{t}>", f"tensor<{rows}x1x{t}>"
    return f"""
func.func @forward(%x: {x}, %w: tensor<{n}x{t}>) -> {x} {{
  %sq = prim.elementwise (%x) : ({x}) -> {x} {{
  ^bb0(%a: {t}):
    %m = arith.mulf %a, %a : {t}
    prim.yield %m : {t}
  }}
  %ss = prim.reduce add %sq dims [1] : {x} -> {r}
  %inv = prim.elementwise (%ss) : ({r}) -> {r} {{
  ^bb0(%s: {t}):
    %n = arith.constant {n}.0 : {t}
    %mean = arith.divf %s, %n : {t}
    %eps = arith.constant {EPS_TEXT} : {t}
    %sum = arith.addf %mean, %eps : {t}
    %rs = math.rsqrt %sum : {t}
    prim.yield %rs : {t}
  }}
  %invb = prim.index_map (%inv) [(d0, d1) -> (d0, 0)] : ({r}) -> {x}
  %wb = prim.index_map (%w) [(d0, d1) -> (d1)] : (tensor<{n}x{t}>) -> {x}
  %y = prim.elementwise (%x, %invb, %wb) : ({x}, {x}, {x}) -> {x} {{
  ^bb0(%a: {t}, %b: {t}, %c: {t}):
    %m = arith.mulf %a, %b : {t}
    %o = arith.mulf %m, %c : {t}
    prim.yield %o : {t}
  }}
  func.return %y : {x}
}}
"""


def _rms_epilogue(n: int, t: str, total: str) -> str:
    return f"""
      %n = arith.constant {n}.0 : {t}
      %mean = arith.divf {total}, %n : {t}
      %eps = arith.constant {EPS_TEXT} : {t}
      %sum = arith.addf %mean, %eps : {t}
      %r = math.rsqrt %sum : {t}"""


def rms_loop(rows: int, n: int, t: str, reduce_extent: int | None = None,
             w_index: str = "%j") -> str:
    """Loop IR, fused: one kernel, a reduce loop and a free loop inside the row loop."""
    m, v = f"memref<{rows}x{n}x{t}>", f"memref<{n}x{t}>"
    return f"""
func.func @forward(%x: {m}, %w: {v}) -> {m} {{
  %y = memref.alloc() : {m}
  loop.kernel @rms (%a = %x : {m}, %b = %w : {v}, %c = %y : {m}) {{
    loop.for %i = 0 to {rows} {{
      %ss = loop.reduce add %k = 0 to {reduce_extent or n} : {t} {{
        %v = loop.load %a[%i, %k] : {m}
        %sq = arith.mulf %v, %v : {t}
        loop.yield %sq : {t}
      }}{_rms_epilogue(n, t, "%ss")}
      loop.for %j = 0 to {n} {{
        %v = loop.load %a[%i, %j] : {m}
        %g = loop.load %b[{w_index}] : {v}
        %o = arith.mulf %v, %r : {t}
        %o2 = arith.mulf %o, %g : {t}
        loop.store %o2, %c[%i, %j] : {m}
      }}
    }}
  }}
  func.return %y : {m}
}}
"""


def rms_tile(rows: int, n: int, t: str, grid: int, block: int) -> str:
    """Tile IR, row schedule: rows over blocks, a cooperative reduce, columns over threads."""
    m, v = f"memref<{rows}x{n}x{t}>", f"memref<{n}x{t}>"
    return f"""
func.func @forward(%x: {m}, %w: {v}) -> {m} {{
  %y = memref.alloc() : {m}
  tile.kernel @rms grid [{grid}, 1, 1] block [{block}, 1, 1] (%a = %x : {m}, %b = %w : {v},
                                                          %c = %y : {m}) {{
    tile.forall (%i) in [{rows}] over blocks {{
      %ss = tile.coop_reduce add %k = 0 to {n} : {t} {{
        %v = loop.load %a[%i, %k] : {m}
        %sq = arith.mulf %v, %v : {t}
        tile.yield %sq : {t}
      }}{_rms_epilogue(n, t, "%ss")}
      tile.forall (%j) in [{n}] over block_threads {{
        %v = loop.load %a[%i, %j] : {m}
        %g = loop.load %b[%j] : {v}
        %o = arith.mulf %v, %r : {t}
        %o2 = arith.mulf %o, %g : {t}
        loop.store %o2, %c[%i, %j] : {m}
      }}
    }}
  }}
  func.return %y : {m}
}}
"""


def rms_kernel(rows: int, n: int, t: str, grid: int, block: int, *, lead: str = "",
               shape: str | None = None) -> str:
    """Kernel IR: rows strided over blocks; a strided per-thread sum of squares, a warp
    butterfly, warp totals through shared memory folded by every thread; the scaled row.

    ``block`` must be a multiple of 32. ``shape``/``lead`` give ``x`` a different layout
    (e.g. ``1x8x256`` with ``lead="%c0, "``).
    """
    warps = block // 32
    m = f"memref<{shape or f'{rows}x{n}'}x{t}>"
    v = f"memref<{n}x{t}>"
    lines, p = [], "acc"
    for off in (16, 8, 4, 2, 1):
        lines.append(f"%s{off} = kernel.shuffle_xor %{p}, {off} : {t}")
        lines.append(f"%p{off} = arith.addf %{p}, %s{off} : {t}")
        p = f"p{off}"
    butterfly = "\n    ".join(lines)
    return f"""
kernel.func @rms(%x: {m}, %w: {v}, %y: {m}) block [{block}, 1, 1] {{
  %red = kernel.shared : memref<{warps}x{t}>
  %tid = kernel.thread_id x
  %bid = kernel.block_id x
  %nblocks = kernel.grid_dim x
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %cb = arith.constant {block} : index
  %cn = arith.constant {n} : index
  %crows = arith.constant {rows} : index
  %cwarps = arith.constant {warps} : index
  %zero = arith.constant 0.0 : {t}
  %lane = arith.remui %tid, %c32 : index
  %warp = arith.divui %tid, %c32 : index
  %is_lane0 = arith.cmpi eq, %lane, %c0 : index
  scf.for %row = %bid to %crows step %nblocks {{
    %acc = scf.for %k = %tid to %cn step %cb iter_args(%a = %zero) -> ({t}) {{
      %v = kernel.load %x[{lead}%row, %k] : {m}
      %sq = arith.mulf %v, %v : {t}
      %a2 = arith.addf %a, %sq : {t}
      scf.yield %a2 : {t}
    }}
    {butterfly}
    scf.if %is_lane0 {{
      kernel.store %{p}, %red[%warp] : memref<{warps}x{t}>
    }}
    kernel.barrier
    %total = scf.for %wi = %c0 to %cwarps step %c1 iter_args(%b = %zero) -> ({t}) {{
      %pw = kernel.load %red[%wi] : memref<{warps}x{t}>
      %b2 = arith.addf %b, %pw : {t}
      scf.yield %b2 : {t}
    }}
    kernel.barrier{_rms_epilogue(n, t, "%total")}
    scf.for %j = %tid to %cn step %cb {{
      %v = kernel.load %x[{lead}%row, %j] : {m}
      %g = kernel.load %w[%j] : {v}
      %o = arith.mulf %v, %r : {t}
      %o2 = arith.mulf %o, %g : {t}
      kernel.store %o2, %y[{lead}%row, %j] : {m}
    }}
  }}
  kernel.return
}}
func.func @forward(%x: {m}, %w: {v}) -> {m} {{
  %y = memref.alloc() : {m}
  kernel.launch @rms grid [{grid}, 1, 1] block [{block}, 1, 1] smem 0 (%x, %w, %y) : {m}, {v}, {m}
  func.return %y : {m}
}}
"""


@pytest.fixture
def parse() -> Callable[[str], ModuleOp]:
    """Parse and verify IR text (see :func:`parse_module`)."""
    return parse_module


@pytest.fixture
def rms() -> dict[str, Callable[..., str]]:
    """RMSNorm IR builders by level: ``prim``, ``loop``, ``tile``, ``kernel``."""
    return {"prim": rms_prim, "loop": rms_loop, "tile": rms_tile, "kernel": rms_kernel}


@pytest.fixture
def reference() -> Callable[..., np.ndarray]:
    """The float64 RMSNorm reference."""
    return rms_norm_reference


@pytest.fixture
def rtol() -> dict[str, float]:
    """Relative tolerances of RMSNorm results by element type (see the module docstring)."""
    return RTOL
