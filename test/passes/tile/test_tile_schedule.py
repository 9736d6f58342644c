"""The Tile-IR scheduling passes (register-tile, stage-inputs, pad-shared, split-k,
apply-tuned), their knobs and heuristics, and the tuner's GPU-free parts.

* numerics: captured PyTorch programs (linear + bias + residual, bmm, causal GQA attention,
  silu·mul → down) go through the whole ``lower-to-cuda`` pipeline with every pass checked
  by :func:`llmopt.check_numerics`, at sizes where the scheduling passes apply (asserted on
  the Kernel IR: thread-private accumulators, staged shared tiles, split kernels) and at odd
  sizes where they do not; the Kernel IR, interpreted with :func:`llmopt.interp.run` (which
  checks races and bounds), matches PyTorch in float64 within :func:`llmopt.numerics.tolerance`;
* the heuristics and knob precedence of :mod:`llmopt.passes.tile._schedule` (and its
  ``_schedule_*`` modules);
* :mod:`llmopt.tools.tune` without a GPU: structural hashes, candidates, one-kernel modules
  lowered and compiled by NVRTC (which needs no GPU), the tuning table, and ``llmopt tune``
  refusing to run without a GPU.

This file sits in ``test/passes/tile/`` next to the lit tests: a Python test directly in
``test/passes/`` would make ``test/lit.cfg.py`` exclude every directory named ``passes``
(it treats directories holding only Python tests as Python-only, by name).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from xdsl.dialects.builtin import (
    DictionaryAttr,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    bf16,
    f16,
    f32,
    f64,
    i64,
)
from xdsl.ir import Attribute
from xdsl.utils.exceptions import PassFailedException

import llmopt
from llmopt import registry
from llmopt.dialects import tile
from llmopt.interp import random_inputs, run
from llmopt.numerics import compare, tolerance
from llmopt.passes.tile._schedule import SCHEDULE_ATTR, RegisterTile, kernel_knobs, knob
from llmopt.passes.tile._schedule_product import (
    FEW_ROWS,
    choose_bk,
    choose_product_schedule,
    choose_register_tile,
    choose_split_k,
)
from llmopt.passes.tile._schedule_tiles import (
    LONE_BLOCK_EFFICIENCY,
    MMA_HALF_EFFICIENCY,
    TILE_CANDIDATES,
    WGMMA_BK,
    WGMMA_TILES,
    WGMMA_WAVE_TILES,
    has_tensor_cores,
    is_wgmma_tile,
    tensor_core_kind,
    tile_cost,
    tile_efficiency,
)
from llmopt.target import for_arch as limits
from llmopt.tools import tune

SM90 = limits("sm_90")
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _private_caches(tmp_path_factory: pytest.TempPathFactory,
                    monkeypatch: pytest.MonkeyPatch) -> None:
    """No tuning table leaks in (apply-tuned reads ``$LLMOPT_TUNE_CACHE`` and the committed
    tables: the heuristics are under test), and NVRTC compiles into a kernel cache of the
    test's own."""
    root = tmp_path_factory.mktemp("caches")
    monkeypatch.setenv("LLMOPT_TUNE_CACHE", str(root / "no-such-tuned.json"))
    monkeypatch.setattr(tune, "TABLE_DIR", root / "no-committed-tables")
    monkeypatch.setenv("LLMOPT_CACHE_DIR", str(root / "kernels"))
    monkeypatch.delenv("LLMOPT_NO_CACHE", raising=False)


# --- numerics of whole programs through lower-to-cuda ---------------------------------------------


def _linear_residual(x: Any, w: Any, b: Any, r: Any) -> Any:
    import torch.nn.functional as F

    return F.linear(x, w, b) + r


def _bmm(a: Any, b: Any) -> Any:
    import torch

    return torch.bmm(a, b)


def _attention(q: Any, k: Any, v: Any) -> Any:
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def _mlp(x: Any, wg: Any, wu: Any, wd: Any) -> Any:
    import torch.nn.functional as F

    return F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd)


PROGRAMS: dict[str, tuple[Callable[..., Any], list[tuple[int, ...]]]] = {
    # M=32 N=128 K=256: register tile 32x64 of 2x4, two K slices of 128, staged in chunks.
    "linear": (_linear_residual, [(32, 256), (128, 256), (128,), (32, 128)]),
    # N=176 = 16 x 11: one 64x176 block of 4x11 micro-tiles (TinyLlama's 5632 = 32 x 176).
    "linear-176": (_linear_residual, [(64, 64), (176, 64), (176,), (64, 176)]),
    # M=36 N=136: no tile divides the output; a ragged 32x64 tile overhangs it.
    "linear-odd": (_linear_residual, [(36, 48), (136, 48), (136,), (36, 136)]),
    "bmm": (_bmm, [(2, 32, 64), (2, 64, 64)]),
    "bmm-odd": (_bmm, [(2, 36, 40), (2, 40, 72)]),
    # 4 query heads on 2 KV heads: scores and P @ V are 32x32 products per head.
    "attention": (_attention, [(1, 4, 32, 32), (1, 2, 32, 32), (1, 2, 32, 32)]),
    "attention-odd": (_attention, [(1, 4, 20, 24), (1, 2, 20, 24), (1, 2, 20, 24)]),
    # gate and up fused (two accumulators a thread), then down: 64x128x64 and 64x64x128.
    "mlp": (_mlp, [(64, 64), (128, 64), (128, 64), (64, 128)]),
    "mlp-odd": (_mlp, [(10, 24), (40, 24), (40, 24), (24, 40)]),
}

SCHEDULED = {"linear", "linear-176", "bmm", "attention", "mlp"}
RAGGED = {"linear-odd", "bmm-odd"}
"""Register-tiled by tiles that overhang the output: clamped loads, guarded stores."""


def _capture(name: str) -> tuple[ModuleOp, Callable[..., Any]]:
    torch = pytest.importorskip("torch")
    fn, shapes = PROGRAMS[name]
    gen = torch.Generator().manual_seed(0)
    args = [torch.randn(*s, generator=gen) for s in shapes]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return llmopt.capture(fn, args), fn


def _to_kernel_ir() -> str:
    """``lower-to-cuda`` without its last pass: the Kernel IR that becomes CUDA."""
    passes = registry.expand_pipeline("lower-to-cuda")
    head, last = passes.rsplit(",", 1)
    assert last.strip().startswith("kernel-to-cuda")
    return head


def _without_flash(pipeline: str) -> str:
    """``pipeline`` without ``flash-attention``: attention as separate kernels, its products
    register-tiled (what these tests are about)."""
    passes = [p for p in pipeline.split(",") if not p.startswith("flash-attention")]
    assert len(passes) < len(pipeline.split(",")), pipeline
    return ",".join(passes)


def _ops(module: ModuleOp, name: str) -> list[Any]:
    return [op for op in module.walk() if op.name == name]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_lower_to_cuda_keeps_the_meaning(name: str) -> None:
    torch = pytest.importorskip("torch")
    module, fn = _capture(name)

    report = llmopt.check_numerics(module, "lower-to-cuda")
    assert report.ok, str(report)
    checked = [p.name for p in report.passes]
    for step in ("apply-tuned", "split-k", "register-tile", "stage-inputs", "async-copy",
                 "pad-shared", "vector-fragments", "tile-to-kernel", "plan-buffers"):
        assert step in checked, str(report)

    lowered = llmopt.lower(module.clone(), _to_kernel_ir())
    locals_ = _ops(lowered, "kernel.local")
    # vector and mma fragments, warp-gemv's partials, vector-epilogue's column pairs, a row's
    # or a map's 16-byte chunks (vector-rows, vector-elementwise)
    fragments = [op for op in locals_ if (op.results[0].name_hint or "").startswith(
        ("frag", "a_hi", "a_lo", "b_hi", "b_lo", "part", "pair", "vec"))]
    accumulators = [op for op in locals_ if op not in fragments]
    tiles = [op for op in _ops(lowered, "kernel.shared")
             if len(op.results[0].type.get_shape()) >= 2
             and not (op.results[0].name_hint or "").startswith("part")]  # not warp-gemv's
    copies = _ops(lowered, "kernel.async_copy")
    kernels = [op.sym_name.data for op in _ops(lowered, "kernel.func")]
    if name in SCHEDULED:
        assert locals_, f"{name}: no register tile in\n{lowered}"
        assert tiles, f"{name}: no staged tile in\n{lowered}"
        # (attention at 32 tokens is one key block of flash-attention: nothing to fetch ahead)
        assert bool(copies) == (name != "attention"), f"{name}: async copies?\n{lowered}"
    elif name in RAGGED:
        assert locals_ and tiles, f"{name}: no register tile in\n{lowered}"
        # the edge blocks clamp the rows they stage and guard the outputs they store
        assert _ops(lowered, "arith.minsi") and _ops(lowered, "scf.if"), lowered
    else:  # fewer outputs than a ragged tile is worth (warp-gemv's fragments at most)
        assert not accumulators and not tiles and not copies, (
            f"{name}: scheduled although nothing divides:\n{lowered}")
    assert any(k.endswith("_split") for k in kernels) == (name == "linear"), kernels
    if name == "attention":
        # scores and P @ V, and the row statistics in registers (running max, sum, factor)
        assert len(accumulators) == 5
    if name == "mlp":
        assert len(accumulators) == 3  # gate, up (one kernel, two accumulators) and down
    if name == "linear-176":
        assert [a.results[0].type.get_shape()[-2:] for a in accumulators] == [(4, 11)]
    if name in SCHEDULED and name != "attention":
        # rows of K-contiguous tiles are read 16 bytes at a time (attention's products take
        # their operands as tensor-core fragments instead)
        assert fragments and _ops(lowered, "kernel.copy"), f"{name}: no fragments in\n{lowered}"

    inputs = random_inputs(lowered, seed=1)
    got = run(lowered, inputs)
    want = fn(*[torch.from_numpy(a).double() for a in inputs])
    _, rel = compare(got, [want.numpy()])
    assert rel <= tolerance(module), f"{name}: max rel error {rel:.3e} vs PyTorch float64"


# --- heuristics -------------------------------------------------------------------------------


def test_register_tile_geometry() -> None:
    tile_ = RegisterTile(64, 128, 4, 8)
    assert tile_.threads == 16 * 16
    assert tile_.fits(128, 256)
    assert not tile_.fits(96, 256)  # 96 % 64
    assert not tile_.fits(128, 192)  # 192 % 128
    assert not RegisterTile(16, 16, 4, 4).fits(16, 16)  # 16 threads: less than a warp
    assert not RegisterTile(128, 128, 2, 2).fits(128, 128)  # 4096 threads
    assert not RegisterTile(8, 6, 1, 1).fits(8, 6)  # 48 threads: not whole warps
    assert not RegisterTile(32, 64, 3, 4).fits(96, 64)  # tm does not divide bm
    assert RegisterTile(32, 48, 2, 2).fits(64, 96)  # 16 x 24 = 384 threads


@pytest.mark.parametrize("m,n,batch,arch,expected", [
    # big: the most reuse, and its 256 blocks cover 132 multiprocessors
    # 2048²: 256 blocks of 128x128 with 8x8 (two waves, one block a multiprocessor) beat
    # 512 of 128x64 with 8x4 (four)
    (2048, 2048, 1, "sm_90", (128, 128, 8, 8)),
    # 1024²: 128 blocks of 128x64 leave 4 of 132 multiprocessors idle, still cheaper than
    # two waves of 64x64
    (1024, 1024, 1, "sm_90", (128, 64, 8, 4)),
    # with 108 multiprocessors 128 blocks are two waves: 256 of 64x64 are three, but smaller
    (1024, 1024, 1, "sm_80", (64, 64, 4, 4)),
    # the batch multiplies the blocks: 256 of 128x128, as for 2048²
    (1024, 1024, 4, "sm_90", (128, 128, 8, 8)),
    # skinny: never below 8 outputs a thread, the most blocks among those (split-k fills)
    (32, 128, 1, "sm_90", (32, 64, 2, 4)),
    (32, 4096, 1, "sm_90", (32, 64, 2, 4)),
    # nothing with 8 outputs a thread divides 32x32: the tile that makes the most blocks
    (32, 32, 4, "sm_90", (16, 16, 1, 1)),
    # Qwen2.5's width 3584 = 32 x 112: 8x7 micro-tiles, 128 blocks in one wave
    (512, 3584, 1, "sm_90", (128, 112, 8, 7)),
    # TinyLlama's 5632 = 32 x 176: 256 blocks of 4x11 fill two a multiprocessor, where
    # 352 of 128x64 are a wave and a third
    (512, 5632, 1, "sm_90", (64, 176, 4, 11)),
])
def test_choose_register_tile(m: int, n: int, batch: int, arch: str,
                              expected: tuple[int, int, int, int]) -> None:
    assert choose_register_tile(m, n, batch, limits(arch)) == RegisterTile(*expected)


def test_tiles_divide_the_periods_of_the_accesses() -> None:
    """A block must not straddle the period of a ``floordiv``/``mod`` in the kernel's
    accesses (attention's heads): 112 does not divide 128."""
    t = choose_register_tile(512, 3584, 1, SM90, periods=(0, 128))
    assert t is not None and 128 % t.bn == 0 and t.fits(512, 3584, (0, 128))
    assert not RegisterTile(128, 112, 8, 7).fits(512, 3584, (0, 128))
    assert not RegisterTile(128, 64, 8, 4).fits(512, 3584, (64, 0))


def _merged_heads_attention(q: Any, k: Any, v: Any) -> Any:
    import torch.nn.functional as F

    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return out.transpose(1, 2).reshape(q.shape[0], q.shape[2], q.shape[1] * q.shape[3])


def _capture_merged_heads(heads: tuple[int, int, int], seq: int, head_dim: int) -> ModuleOp:
    """:func:`_merged_heads_attention` captured with q, k, v of ``heads`` heads."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    args = [torch.randn(1, h, seq, head_dim, generator=gen) for h in heads]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return llmopt.capture(_merged_heads_attention, args)


def test_attention_output_in_merged_heads_keeps_blocks_within_a_head() -> None:
    """``P·V`` written as ``[seq, heads · head_dim]`` (7 heads of 128: 896 = 8 x 112, on one
    KV head) reads ``V[(j floordiv 128) floordiv 7, k, j mod 128]``: its register tile
    divides 128 (the outer ``floordiv 7`` is constant wherever the inner one is), and the V
    tile is staged in shared memory."""
    from llmopt.passes.tile.register_tile import match_contraction, tile_periods

    module = _capture_merged_heads((7, 1, 1), 64, 128)
    at_tile = llmopt.lower(module.clone(), "torch-to-prim,canonicalize,prim-to-loop,"
                           "fuse-kernels{recompute_limit=0},canonicalize,cse,loop-to-tile")
    periods = {}
    for kernel in _ops(at_tile, "tile.kernel"):
        found = match_contraction(kernel)
        if found is not None:
            periods[kernel.sym_name.data] = (found.extents[found.n], tile_periods(found))
    assert (896, (0, 128)) in periods.values(), periods
    lowered = llmopt.lower(module.clone(), _without_flash(_to_kernel_ir()))
    for func in _ops(lowered, "kernel.func"):
        if "llmopt.gemv" in func.attributes:
            continue  # one row a block: a warp per output reading 16-byte fragments
        tiles = [op for op in _ops(func, "kernel.local")  # not a row's 16-byte chunks
                 if not (op.results[0].name_hint or "").startswith("vec")]
        if tiles:  # register-tiled: both operands staged
            assert len(_ops(func, "kernel.shared")) >= 2, func
    report = llmopt.check_numerics(module, "lower-to-cuda")
    assert report.ok, str(report)


def test_attention_divides_by_the_softmax_denominator_after_the_sum() -> None:
    """``hoist-reduce-factors`` takes the softmax denominator out of ``P·V``'s sum: no K loop
    of the scheduled attention divides (a division a term made ``P·V`` several times slower
    than a plain product)."""
    module = _capture_merged_heads((4, 2, 2), 64, 32)
    tiled = llmopt.lower(module, _without_flash(_to_kernel_ir()).split(",tile-to-kernel")[0])
    k_loops = [op for op in tiled.walk() if op.name == "scf.for"
               and getattr(op.attributes.get("llmopt.role"), "data", None) == "k_loop"]
    assert len(k_loops) >= 2, tiled  # scores and P·V
    for k_loop in k_loops:
        assert not [op for op in k_loop.walk() if op.name == "arith.divf"], k_loop


def test_choose_register_tile_without_a_dividing_tile() -> None:
    assert choose_register_tile(36, 136, 1, SM90) is None
    assert choose_register_tile(8, 4096, 1, SM90) is None  # no bm divides 8


def test_choose_register_tile_with_several_accumulators() -> None:
    """Two accumulator tiles a thread (fused gate and up) stay within 64 registers: no 8x8."""
    assert choose_register_tile(2048, 2048, 1, SM90, accumulators=2) == RegisterTile(
        128, 64, 8, 4)
    assert choose_register_tile(2048, 2048, 1, SM90, accumulators=4) == RegisterTile(
        64, 64, 4, 4)
    for acc in (1, 2, 4):
        for m, n in ((2048, 2048), (256, 512), (64, 128)):
            t = choose_register_tile(m, n, 1, SM90, accumulators=acc)
            assert t is not None and t.tm * t.tn * acc <= 64 and t.fits(m, n)


@pytest.mark.parametrize("k,bk", [(4096, 32), (64, 32), (48, 16), (24, 8), (36, 4), (6, 2),
                                  (33, 1), (1, 1)])
def test_choose_bk(k: int, bk: int) -> None:
    assert choose_bk(k) == bk


@pytest.mark.parametrize("m,n,k,batch,split", [
    (32, 128, 256, 1, 2),  # 2 blocks: two slices of 128
    (32, 128, 64, 1, 1),  # slices would be shorter than 128
    (32, 4096, 4096, 1, 4),  # 64 small blocks: x2 = 128 < 132, x4 = 256 >= 132
    (32, 128, 4096, 1, 32),  # 2 blocks: doubled while slices stay >= 128 long
    (2048, 2048, 4096, 1, 1),  # already 512 blocks of 128x64, almost 4 waves
    (512, 3584, 18944, 1, 1),  # 128 blocks of 128x112, alone on their multiprocessors,
    # in one wave: a long K stays whole
    (128, 3584, 18944, 1, 4),  # 32 such blocks: four slices make 128
    (128, 18944, 3584, 1, 4),  # 148 smaller blocks (128x64 of 8x4), a long K: four slices
    (32, 2048, 5632, 1, 8),  # 32 small blocks: doubled to 256, past one a multiprocessor
    (512, 5632, 2048, 1, 1),  # 352 blocks; slices of 2048 / 4 would be short
    (36, 136, 4096, 1, 32),  # no tile divides: one 64x64 ragged block, 32 slices
    (32, 128, 96, 1, 1),  # 96 is not a multiple of 64
])
def test_choose_split_k(m: int, n: int, k: int, batch: int, split: int) -> None:
    got = choose_split_k(m, n, k, batch, SM90)
    assert got == split
    assert k % got == 0 and (got == 1 or k // got >= 128)


@pytest.mark.parametrize("m,n,k,tile,split", [
    (128, 18944, 3584, (128, 64, 8, 4), 4),  # Qwen2.5-7B s128: 0.961 ms whole, 0.83 in four
    (128, 5632, 2048, (128, 64, 8, 4), 4),  # TinyLlama s128: 88 blocks whole, 0.216 -> 0.17
    (512, 18944, 3584, (128, 64, 8, 4), 1),  # at 512 rows splitting lost (3.12 -> 3.21 ms)
    (512, 5632, 2048, (128, 64, 8, 4), 1),
])
def test_fused_gate_up_schedules(m: int, n: int, k: int, tile: tuple[int, int, int, int],
                                 split: int) -> None:
    """Two reductions (fused gate and up): the model weighs the slices itself; the picks
    are the fastest measured on the H200 (``bench/sweep_gemm.py --gate-up``)."""
    got = choose_product_schedule(m, n, k, 1, SM90, accumulators=2)
    assert got == (RegisterTile(*tile), split, False)


@pytest.mark.parametrize("m,n,k,accumulators,tile,split", [
    (512, 2048, 5632, 1, (128, 128, 8, 8), 2),  # TinyLlama down: 0.208 ms (FMA 0.287)
    (512, 3584, 3584, 1, (128, 128, 8, 8), 1),  # 112 blocks: whole 0.246, two slices 0.269
    (512, 3584, 18944, 1, (128, 128, 8, 8), 1),  # Qwen2.5-7B down: 1.203 (FMA 1.631)
    (128, 3584, 3584, 1, (128, 128, 8, 8), 4),  # 28 blocks in four slices: 0.076
    (128, 3584, 18944, 1, (128, 128, 8, 8), 4),  # 0.320
    (512, 18944, 3584, 2, (128, 64, 8, 4), 1),  # Qwen2.5-7B gate/up: 2.198 (FMA 3.155)
])
def test_tensor_core_schedules(m: int, n: int, k: int, accumulators: int,
                               tile: tuple[int, int, int, int], split: int) -> None:
    """With the tensor cores allowed the model picks them for these products, with the
    tile and slices ``llmopt tune`` found fastest on the H200 (the committed table)."""
    got = choose_product_schedule(m, n, k, 1, SM90, accumulators,
                                  tensor_cores=True)
    assert got == (RegisterTile(*tile), split, True)


@pytest.mark.parametrize("m,n,k,tile,split", [
    (512, 18944, 3584, (128, 128, 8, 16), 1),  # Qwen2.5-7B gate/up: 592 blocks of 4 warps
    (512, 3584, 18944, (128, 256, 8, 16), 2),  # Qwen2.5-7B down
    (512, 3584, 3584, (128, 256, 8, 16), 2),  # Qwen2.5-7B q/o
    (512, 2048, 5632, (128, 256, 8, 16), 4),  # TinyLlama down
    (128, 18944, 3584, (128, 256, 8, 16), 2),
    (512, 512, 3584, (128, 128, 8, 8), 8),  # 16 blocks of 64 × 64 warps: 8 warps win
])
def test_16_bit_tensor_core_schedules(m: int, n: int, k: int,
                                      tile: tuple[int, int, int, int], split: int) -> None:
    """Products of 16-bit factors take warp tiles of 64 × 64 (128 accumulators a thread)
    where they make enough blocks; 128 × 128 blocks of four such warps where a thread's
    share of the multiprocessors still runs two blocks each."""
    got = choose_product_schedule(m, n, k, 1, SM90, tensor_cores=True, halves=True)
    assert got == (RegisterTile(*tile), split, True)
    f32_pick = choose_product_schedule(m, n, k, 1, SM90, tensor_cores=True)
    assert f32_pick is not None and f32_pick.tile.tm * f32_pick.tile.tn <= 64


def test_16_bit_tiles_of_several_reductions_keep_64_accumulators() -> None:
    """The fused gate/up (two reductions) gets no 64 × 64 warp tile: 256 accumulators."""
    got = choose_product_schedule(512, 18944, 3584, 1, SM90, accumulators=2,
                                  tensor_cores=True, halves=True)
    assert got is not None and got.tile.tm * got.tile.tn * 2 <= 64


@pytest.mark.parametrize(("m", "n", "k"), [(512, 18944, 3584), (512, 2048, 5632),
                                          (128, 2048, 2048), (100, 300, 128)])
def test_sm_90a_gives_16_bit_products_warpgroup_tiles(m: int, n: int, k: int) -> None:
    """On sm_90a a 16-bit product takes a warpgroup tile (what wgmma-fragments rewrites):
    tm = 2, one warp column, warps in fours; on sm_90 it keeps an mma.sync tile."""
    got = choose_product_schedule(m, n, k, 1, limits("sm_90a"), tensor_cores=True,
                                  halves=True)
    assert got is not None and is_wgmma_tile(got.tile), got
    assert got.tile in WGMMA_TILES and (k // got.split) % WGMMA_BK == 0
    old = choose_product_schedule(m, n, k, 1, SM90, tensor_cores=True, halves=True)
    assert old is not None and not is_wgmma_tile(old.tile)


def test_sm_90a_gives_a_fused_gate_up_a_64_column_warpgroup_tile() -> None:
    """Two reductions of one role keep 64 accumulators a thread: the 128 × 64 warpgroup
    tile."""
    got = choose_product_schedule(512, 18944, 3584, 1, limits("sm_90a"),
                                  accumulators=2, tensor_cores=True, halves=True)
    assert got is not None and got.tile == RegisterTile(128, 64, 2, 16), got


@pytest.mark.parametrize(("m", "n", "k", "tile"), [
    (2047, 18944, 3584, RegisterTile(128, 128, 2, 32)),  # 128 accumulators over the two
    (1000, 5632, 2048, RegisterTile(128, 128, 2, 32)),
    (100, 18944, 3584, RegisterTile(128, 64, 2, 16)),    # two warpgroups beat one of 64 rows
    (500, 5632, 2048, RegisterTile(128, 64, 2, 16)),     # a wave fewer than 128 x 128
    (17, 5632, 2048, RegisterTile(64, 128, 2, 32)),      # half the padded rows of 128
])
def test_a_two_role_fused_gate_up_gets_the_warpgroup_tiles_of_128_accumulators(
        m: int, n: int, k: int, tile: RegisterTile) -> None:
    """A two-role warpgroup tile reads its operands from shared memory and its computing
    warpgroups get the producer's registers: the fused gate/up product may keep 128
    accumulators a thread over its two reductions, and the model ranks the tiles by the
    fused products' own timings."""
    got = choose_product_schedule(m, n, k, 1, limits("sm_90a"), accumulators=2,
                                  tensor_cores=True, halves=True, roles=2)
    assert got is not None and got.tile == tile, got


def test_a_two_role_product_that_fills_the_gpu_is_not_split_for_its_waves() -> None:
    """Qwen2.5-7B's down projection at 2047 rows: 256 blocks of 128 × 224 (two waves) run
    whole; four slices would make each of eight waves store its blocks' f32 partial tiles
    while one block holds each multiprocessor."""
    got = choose_product_schedule(2047, 3584, 18944, 1, limits("sm_90a"), tensor_cores=True,
                                  halves=True, roles=2)
    assert got is not None and got.tile == RegisterTile(128, 224, 2, 56) and got.split == 1, got


@pytest.mark.parametrize(("m", "k", "bn"), [
    (1000, 3584, 224),   # 128 blocks of 128 x 224 on 132 multiprocessors, not 112 of 256
    (2047, 3584, 224),   # two waves of the smaller blocks
    (1000, 18944, 224),
    (512, 3584, 112),    # 3584 in 128 x 112 blocks: 128, one wave, no slices
])
def test_two_role_products_of_3584_columns_take_the_tile_that_fills_the_waves(
        m: int, k: int, bn: int) -> None:
    """Qwen2.5-7B's 3584-column products: a warpgroup tile of 224 columns makes 16 columns
    of blocks, one wave of 128 at 1000 rows, where 256 columns leave 20 of 132
    multiprocessors idle."""
    got = choose_product_schedule(m, 3584, k, 1, limits("sm_90a"), tensor_cores=True,
                                  halves=True, roles=2)
    assert got is not None and (got.tile.bm, got.tile.bn, got.split) == (128, bn, 1), got


@pytest.mark.parametrize(("m", "n", "k", "bn", "blocks"), [
    (512, 5632, 2048, 176, 128),    # TinyLlama's gate/up: 32 columns of blocks, not 22
    (512, 18944, 3584, 192, 396),   # Qwen2.5-7B's: overhangs by 64 columns, 3 whole waves
    (128, 18944, 3584, 176, 108),   # 108 blocks, not 74 of 128 x 256
])
def test_two_role_products_take_the_tile_width_that_fills_the_waves(
        m: int, n: int, k: int, bn: int, blocks: int) -> None:
    """A product of one reduction takes the warpgroup tile of 128 rows whose width makes
    the fewest padded waves on 132 multiprocessors, overhanging the columns where no
    dividing width does as well (the bulk tensor copies read past the weight's end as
    zeros); a fused product of two keeps its fitted tiles."""
    gpu = limits("sm_90a")
    got = choose_product_schedule(m, n, k, 1, gpu, tensor_cores=True, halves=True, roles=2)
    assert got is not None and (got.tile.bm, got.tile.bn, got.split) == (128, bn, 1), got
    assert got.tile in WGMMA_WAVE_TILES and got.tile.blocks(m, n) == blocks
    fused = choose_product_schedule(m, n, k, 1, gpu, accumulators=2, tensor_cores=True,
                                    halves=True, roles=2)
    assert fused is not None and fused.tile not in WGMMA_WAVE_TILES, fused


def test_sm_90a_records_the_warpgroup_chunk_and_tune_offers_it() -> None:
    """register-tile records bk = 64 for a warpgroup tile (stage-inputs then stages rows of
    128 bytes); ``llmopt tune`` on sm_90a offers warpgroup tiles with that chunk."""
    text = (ROOT / "test/passes/tile/Inputs/linear-bf16.mlir").read_text()
    full = registry.expand_pipeline("lower-to-cuda{arch=sm_90a}")
    until = full[:full.index("register-tile")]
    module = llmopt.lower(llmopt.parse(text), until + "register-tile{arch=sm_90a}")
    kernels = [op for op in module.walk() if isinstance(op, tile.KernelOp)
               and "bk" in kernel_knobs(op)]
    assert [kernel_knobs(k)["bk"] for k in kernels] == [WGMMA_BK]
    unscheduled = llmopt.lower(llmopt.parse(text), until.rstrip(","))
    (kernel,) = [op for op in unscheduled.walk() if isinstance(op, tile.KernelOp)
                 and tune.match_contraction(op) is not None]
    cands = tune.mma_candidates(kernel, "sm_90a", 50)
    assert any(is_wgmma_tile(RegisterTile(c["bm"], c["bn"], c["tm"], c["tn"]))
               and c["bk"] == WGMMA_BK for c in cands)


def test_a_lone_block_of_four_warps_is_slower() -> None:
    """A 128-thread 16-bit tile counts at LONE_BLOCK_EFFICIENCY when its blocks leave some
    multiprocessors one block (fewer than two a multiprocessor)."""
    four_warps = RegisterTile(128, 128, 8, 16)
    full = tile_efficiency(four_warps, True, True, 2 * SM90.sms, SM90)
    lone = tile_efficiency(four_warps, True, True, 2 * SM90.sms - 1, SM90)
    assert lone == pytest.approx(full * LONE_BLOCK_EFFICIENCY)
    eight_warps = RegisterTile(128, 256, 8, 16)
    assert (tile_efficiency(eight_warps, True, True, 1, SM90)
            == MMA_HALF_EFFICIENCY[8, 16])


@pytest.mark.parametrize("sum_type,factors,arch,kind", [
    (f32, (), "sm_90", "tf32"),
    (f32, (bf16, bf16), "sm_90", "bf16"),
    (f32, (f16, f16), "sm_80", "f16"),
    (f32, (bf16, f16), "sm_90", None),
    (bf16, (bf16, bf16), "sm_90", None),
    (f32, (bf16, bf16), "sm_75", None),
])
def test_tensor_core_kind(sum_type: Attribute, factors: tuple, arch: str,
                          kind: str | None) -> None:
    assert tensor_core_kind(arch, sum_type, factors) == kind


def test_tensor_cores_only_where_they_fit() -> None:
    """Outputs no tensor-core tile divides keep the FMA schedule (above ``FEW_ROWS`` rows,
    where a ragged tile does not compete); so does a K that is not a multiple of 32;
    ``f32`` sums on sm_80 or newer only."""
    for m, n, k in ((96, 2048, 2048), (512, 2048, 2056), (128, 256, 2048)):
        got = choose_product_schedule(m, n, k, 1, SM90, tensor_cores=True)
        assert got is not None and not got.tensor_cores
        assert got == choose_product_schedule(m, n, k, 1, SM90)
    assert has_tensor_cores("sm_90", f32)
    assert has_tensor_cores("sm_80", f32)
    assert not has_tensor_cores("sm_75", f32)
    assert not has_tensor_cores("sm_90", f64)


def test_few_rows_let_a_ragged_tensor_core_tile_compete() -> None:
    """32 rows are divided only by the 32-row tiles of the CUDA cores; a length bucket of at
    most 32 tokens is scheduled for 32 rows but runs at any length below, so a 64-row
    tensor-core tile, ragged there, competes, and the model prefers it for TinyLlama's
    square projection (at 17 rows, which no tile divides, it is already the pick)."""
    at_32 = choose_product_schedule(32, 2048, 2048, 1, SM90, tensor_cores=True)
    at_17 = choose_product_schedule(17, 2048, 2048, 1, SM90, tensor_cores=True)
    assert at_32 is not None and at_32.tensor_cores and at_32.tile.bm == 64
    assert at_32 == at_17
    above = choose_product_schedule(FEW_ROWS * 2, 2048, 2048, 1, SM90,
                                    tensor_cores=True)
    assert above is not None and (FEW_ROWS * 2) % above.tile.bm == 0


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
def test_few_rows_of_halves_stay_on_the_tensor_cores(arch: str) -> None:
    """A 32-row bucket of a ``bf16`` product (Qwen2.5-7B's fused gate/up, two reductions,
    and its square projection) runs on the tensor cores as 17 rows do, not in 32-row
    tiles of the CUDA cores, a sixteenth of their rate."""
    gpu = limits(arch)
    for n, k, accumulators in ((18944, 3584, 2), (3584, 3584, 1)):
        at_32 = choose_product_schedule(32, n, k, 1, gpu, accumulators,
                                        tensor_cores=True, halves=True)
        at_17 = choose_product_schedule(17, n, k, 1, gpu, accumulators,
                                        tensor_cores=True, halves=True)
        assert at_32 is not None and at_32.tensor_cores
        assert at_17 is not None and at_17.tensor_cores


def test_limits() -> None:
    assert limits("sm_80").sms == 108
    assert limits("sm_90").sms == 132
    assert limits("sm_999").sms == limits("sm_90").sms
    assert limits("sm_90").static_smem == 48 * 1024


def _kernel(attrs: dict[str, Any] | None = None) -> tile.KernelOp:
    op = tile.KernelOp("k", [1, 1, 1], [32, 1, 1], [])
    if attrs is not None:
        op.attributes[SCHEDULE_ATTR] = DictionaryAttr(attrs)
    return op


def test_knob_precedence() -> None:
    """A pass option (non-zero) beats the kernel's llmopt.schedule, which beats the default."""
    tuned = _kernel({"bm": IntegerAttr(32, i64), "bk": IntegerAttr(8, i64),
                     "note": StringAttr("not a knob")})
    assert kernel_knobs(tuned) == {"bm": 32, "bk": 8}
    assert knob(64, tuned, "bm", 128) == 64
    assert knob(0, tuned, "bm", 128) == 32
    assert knob(0, tuned, "bn", 128) == 128
    assert knob(0, tuned, "note", 5) == 5
    plain = _kernel()
    assert kernel_knobs(plain) == {}
    assert knob(0, plain, "bm", 128) == 128
    assert knob(16, plain, "bm", 128) == 16


# --- the tuner without a GPU ------------------------------------------------------------------


def _linear_kernel(name: str, m: int, n: int, k: int, x: str = "%x") -> str:
    return f"""
  %{name}_out = memref.alloc() : memref<{m}x{n}xf32>
  tile.kernel @{name} grid [16, 1, 1] block [256, 1, 1] (%o = %{name}_out : memref<{m}x{n}xf32>,
      %wt = %w{k} : memref<{n}x{k}xf32>, %in = {x}{k} : memref<{m}x{k}xf32>) {{
    tile.forall (%i, %j) in [{m}, {n}] over threads {{
      %acc = loop.reduce add %r = 0 to {k} : f32 {{
        %u = loop.load %in[%i, %r] : memref<{m}x{k}xf32>
        %v = loop.load %wt[%j, %r] : memref<{n}x{k}xf32>
        %p = arith.mulf %u, %v : f32
        loop.yield %p : f32
      }}
      loop.store %acc, %o[%i, %j] : memref<{m}x{n}xf32>
    }}
  }}"""


TUNE_TEXT = f"""
func.func @forward(%w256: memref<128x256xf32>, %x256: memref<32x256xf32>,
                   %y256: memref<32x256xf32>, %w64: memref<128x64xf32>,
                   %x64: memref<32x64xf32>) {{
{_linear_kernel("a", 32, 128, 256)}
{_linear_kernel("b", 32, 128, 256, "%y")}
{_linear_kernel("c", 32, 128, 64)}
  func.return
}}
"""


def _tune_kernels() -> dict[str, tile.KernelOp]:
    module = llmopt.parse(TUNE_TEXT)
    return {op.sym_name.data: op for op in module.walk() if isinstance(op, tile.KernelOp)}


def test_schedule_key_is_structural() -> None:
    kernels = _tune_kernels()
    a, b, c = kernels["a"], kernels["b"], kernels["c"]
    key = tune.schedule_key(a)
    assert len(key) == 20 and int(key, 16) >= 0
    assert tune.schedule_key(b) == key  # another name and other buffers, the same kernel
    assert tune.schedule_key(c) != key  # K = 64
    # the knobs are not part of the key, and schedule_key leaves them in place
    knobs = DictionaryAttr({"bm": IntegerAttr(16, i64)})
    b.attributes[SCHEDULE_ATTR] = knobs
    assert tune.schedule_key(b) == key
    assert b.attributes[SCHEDULE_ATTR] == knobs
    # equal across parses (the key is what the committed tables are looked up by)
    assert tune.schedule_key(_tune_kernels()["a"]) == key
    assert tune.describe(a) == "1x32x128x256"


def test_candidates_fit_and_come_most_promising_first() -> None:
    kernels = _tune_kernels()
    cands = tune.candidates(kernels["a"], "sm_90")
    # every tile of at least 4 outputs a thread dividing 32x128, with 1 or 2 K slices (4
    # slices would be 64 long)
    assert {(c["bm"], c["bn"], c["tm"], c["tn"], c["split_k"]) for c in cands} == {
        (t[0], t[1], t[2], t[3], s) for t in ((32, 64, 2, 4), (32, 32, 2, 2), (16, 64, 1, 4))
        for s in (1, 2)}
    costs = []
    for c in cands:
        t = RegisterTile(c["bm"], c["bn"], c["tm"], c["tn"])
        assert t.fits(32, 128) and t.tm * t.tn >= 4
        assert 256 % c["split_k"] == 0 and c["bk"] in (16, 32)
        blocks = (32 // t.bm) * (128 // t.bn) * c["split_k"]
        costs.append(tile_cost(t, blocks, SM90) / c["split_k"])
    assert costs == sorted(costs)
    # K = 64: no split
    assert {c["split_k"] for c in tune.candidates(kernels["c"], "sm_90")} == {1}


def test_candidates_of_other_kernels() -> None:
    module = llmopt.parse("""
func.func @forward(%x: memref<64x64x16xf32>, %a: memref<256x512xf32>, %g: memref<1024x512xf32>,
                   %u: memref<1024x512xf32>) {
  %s = memref.alloc() : memref<64x64xf32>
  tile.kernel @rowsum grid [16, 1, 1] block [256, 1, 1] (%o = %s : memref<64x64xf32>,
      %in = %x : memref<64x64x16xf32>) {
    tile.forall (%i, %j) in [64, 64] over threads {
      %acc = loop.reduce add %r = 0 to 16 : f32 {
        %v = loop.load %in[%i, %j, %r] : memref<64x64x16xf32>
        loop.yield %v : f32
      }
      loop.store %acc, %o[%i, %j] : memref<64x64xf32>
    }
  }
  %h = memref.alloc() : memref<256x1024xf32>
  tile.kernel @gate_up grid [16, 1, 1] block [256, 1, 1] (%o = %h : memref<256x1024xf32>,
      %in = %a : memref<256x512xf32>, %wg = %g : memref<1024x512xf32>,
      %wu = %u : memref<1024x512xf32>) {
    tile.forall (%i, %j) in [256, 1024] over threads {
      %s1 = loop.reduce add %r = 0 to 512 : f32 {
        %p = loop.load %in[%i, %r] : memref<256x512xf32>
        %q = loop.load %wg[%j, %r] : memref<1024x512xf32>
        %pq = arith.mulf %p, %q : f32
        loop.yield %pq : f32
      }
      %s2 = loop.reduce add %r = 0 to 512 : f32 {
        %p = loop.load %in[%i, %r] : memref<256x512xf32>
        %q = loop.load %wu[%j, %r] : memref<1024x512xf32>
        %pq = arith.mulf %p, %q : f32
        loop.yield %pq : f32
      }
      %m = arith.mulf %s1, %s2 : f32
      loop.store %m, %o[%i, %j] : memref<256x1024xf32>
    }
  }
  func.return
}
""")
    kernels = {op.sym_name.data: op for op in module.walk() if isinstance(op, tile.KernelOp)}
    assert tune.candidates(kernels["rowsum"], "sm_90") == []  # a plain sum
    cands = tune.candidates(kernels["gate_up"], "sm_90")
    assert cands
    for c in cands:  # two accumulators: at most 64 registers of them
        assert 2 * c["tm"] * c["tn"] <= 64
        assert RegisterTile(c["bm"], c["bn"], c["tm"], c["tn"]).fits(256, 1024)
    # split-k splits both reductions, so slices are candidates too (each >= 128 of K = 512)
    assert {c["split_k"] for c in cands} == {1, 2, 4}


def test_one_kernel_module_runs_the_kernel_alone() -> None:
    kernels = _tune_kernels()
    a = kernels["a"]
    before = str(a)
    module = tune.one_kernel_module(a, {"bm": 16, "bn": 64, "tm": 1, "tn": 4})
    assert str(a) == before  # a copy: the program is left as it was
    module.verify()
    (fn,) = [op for op in module.walk() if op.name == "func.func"]
    assert fn.sym_name.data == "tune"
    assert [str(t) for t in fn.function_type.inputs.data] == [
        "memref<32x128xf32>", "memref<128x256xf32>", "memref<32x256xf32>"]
    (copy,) = [op for op in module.walk() if isinstance(op, tile.KernelOp)]
    assert list(copy.operands) == list(fn.body.block.args)
    assert kernel_knobs(copy) == {"bm": 16, "bn": 64, "tm": 1, "tn": 4}
    assert tune.written_args(copy) == [0]
    # None: the heuristics, with any knobs the kernel had removed
    a.attributes[SCHEDULE_ATTR] = DictionaryAttr({"bm": IntegerAttr(32, i64)})
    plain = tune.one_kernel_module(a, None)
    assert all(SCHEDULE_ATTR not in op.attributes for op in plain.walk())


def _returning(module: ModuleOp, index: int) -> ModuleOp:
    """``module`` (a :func:`tune.one_kernel_module`) with its function returning argument
    ``index``, the buffer the kernel writes, so that the interpreter shows it."""
    from xdsl.dialects import func
    from xdsl.dialects.builtin import FunctionType

    (fn,) = [op for op in module.walk() if isinstance(op, func.FuncOp)]
    block = fn.body.block
    old = block.last_op
    assert isinstance(old, func.ReturnOp)
    arg = block.args[index]
    block.insert_op_before(func.ReturnOp(arg), old)
    old.detach()
    old.erase()
    fn.function_type = FunctionType.from_lists(list(fn.function_type.inputs.data), [arg.type])
    module.verify()
    return module


def test_candidates_lower_compile_and_compute_the_same() -> None:
    """A split and an unsplit candidate, lowered by the tuner's pipeline and compiled by
    NVRTC (no GPU needed); their Kernel IR, interpreted, agrees with the unscheduled kernel."""
    kernel = _tune_kernels()["a"]
    scheduled = tune.SCHEDULED.format(arch="sm_90")
    (out,) = tune.written_args(kernel)
    base = _returning(tune.one_kernel_module(kernel, None), out)
    inputs = random_inputs(base, seed=5)
    (want,) = run(base, inputs)
    for knobs in ({"bm": 32, "bn": 64, "tm": 2, "tn": 4, "bk": 32, "split_k": 1},
                  {"bm": 16, "bn": 64, "tm": 1, "tn": 4, "bk": 16, "split_k": 2}):
        text = tune.lower_candidate(str(tune.one_kernel_module(kernel, knobs)), scheduled,
                                    "sm_90")
        lowered = llmopt.parse(text)
        kernels = [op for op in lowered.walk() if op.name == "cuda.kernel"]
        assert len(kernels) == (2 if knobs["split_k"] == 2 else 1), text
        source = llmopt.cuda_source(lowered)
        assert "__shared__" in source and f"acc[{knobs['tm'] * knobs['tn']}]" in source
        at_kernel = llmopt.lower(_returning(tune.one_kernel_module(kernel, knobs), out),
                                 scheduled.rsplit(",", 1)[0])
        assert [op for op in at_kernel.walk() if op.name == "kernel.local"]
        (got,) = run(at_kernel, inputs)
        _, rel = compare([got], [want])
        assert rel <= tolerance(base), (knobs, rel)


def test_lower_all_reports_failures_instead_of_raising() -> None:
    kernel = _tune_kernels()["c"]
    good = tune.one_kernel_module(kernel, {"bm": 32, "bn": 64, "tm": 2, "tn": 4, "bk": 32,
                                           "split_k": 1})
    results = tune.lower_all([good], "tile-to-kernel,no-such-pass", "sm_90", jobs=1)
    assert len(results) == 1 and isinstance(results[0], Exception)
    (text,) = tune.lower_all([good], tune.UNSCHEDULED, "sm_90", jobs=1)
    assert isinstance(text, str) and "cuda.kernel" in text


def test_tuning_table_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "tuned.json"
    key = "0123456789abcdef0123"
    table = {
        tune.entry_key(key, "GPU A", "12.8"): {"arch": "sm_90", "knobs": {"bm": 64, "bk": "32"}},
        tune.entry_key(key, "GPU B", "12.8"): {"arch": "sm_80", "knobs": {"bm": 32}},
        tune.entry_key("ffff", "GPU A", "12.8"): {"arch": "sm_90", "knobs": {"bm": 16}},
    }
    assert tune.entry_key(key, "GPU A", "12.8") == f"{key}|GPU A|nvrtc-12.8"
    tune.save_table(path, table)
    assert json.loads(path.read_text()) == table
    assert not list(path.parent.glob("*.tmp*"))  # written atomically, nothing left behind
    loaded = tune.load_table(path)
    assert loaded == table
    assert tune.lookup(key, "sm_90", [loaded]) == {"bm": 64, "bk": 32}
    assert tune.lookup(key, "sm_80", [loaded]) == {"bm": 32}
    assert tune.lookup(key, "sm_86", [loaded]) is None
    assert tune.lookup("0000", "sm_90", [loaded]) is None
    # the first table with an entry wins (the user's cache before the committed table)
    other = {tune.entry_key(key, "GPU C", "13.0"): {"arch": "sm_90", "knobs": {"bm": 128}}}
    assert tune.lookup(key, "sm_90", [other, loaded]) == {"bm": 128}
    assert tune.lookup(key, "sm_90", [{}, loaded]) == {"bm": 64, "bk": 32}
    assert tune.lookup(key, "sm_80", [other, loaded]) == {"bm": 32}
    # an entry without knobs is no entry
    broken = {tune.entry_key(key, "GPU D", "13.0"): {"arch": "sm_90", "knobs": [64]}}
    assert tune.lookup(key, "sm_90", [broken]) is None


def test_load_table_of_missing_or_bad_files(tmp_path: Path) -> None:
    assert tune.load_table(tmp_path / "missing.json") == {}
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert tune.load_table(bad) == {}
    bad.write_text("[1, 2]")
    assert tune.load_table(bad) == {}


def test_cache_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``llmopt tune`` writes ``$LLMOPT_TUNE_CACHE`` or the home directory's cache;
    ``apply-tuned`` reads the first always, the second only with ``user=1``."""
    monkeypatch.setenv("LLMOPT_TUNE_CACHE", str(tmp_path / "t.json"))
    assert tune.cache_path() == tmp_path / "t.json"
    assert tune.user_cache(False) == tune.user_cache(True) == tmp_path / "t.json"
    monkeypatch.delenv("LLMOPT_TUNE_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert tune.cache_path() == tmp_path / ".cache" / "llmopt" / "tuned.json"
    assert tune.user_cache(False) is None
    assert tune.user_cache(True) == tune.cache_path()


def test_apply_tuned_reads_the_user_cache_before_the_committed_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = llmopt.parse(TUNE_TEXT)
    key = tune.schedule_key(_tune_kernels()["a"])
    committed = tmp_path / "tuned"
    tune.save_table(committed / "sm_90.json", {
        tune.entry_key(key, "H", "1.0"): {"arch": "sm_90", "knobs": {"bm": 16, "bn": 64,
                                                                      "tm": 1, "tn": 4}}})
    user = tmp_path / "user.json"
    tune.save_table(user, {
        tune.entry_key(key, "H", "1.0"): {"arch": "sm_90", "knobs": {"bm": 32, "bn": 32,
                                                                      "tm": 2, "tn": 2}}})
    monkeypatch.setattr(tune, "TABLE_DIR", committed)
    monkeypatch.setenv("LLMOPT_TUNE_CACHE", str(user))

    def knobs_after(pipeline: str) -> dict[str, dict[str, int]]:
        done = llmopt.lower(module.clone(), pipeline)
        return {op.sym_name.data: kernel_knobs(op) for op in done.walk()
                if isinstance(op, tile.KernelOp)}

    assert knobs_after("apply-tuned") == {"a": {"bm": 32, "bn": 32, "tm": 2, "tn": 2},
                                          "b": {"bm": 32, "bn": 32, "tm": 2, "tn": 2},
                                          "c": {}}
    assert knobs_after("apply-tuned{arch=sm_80}")["a"] == {}
    # the home directory's cache only when asked for (user=1)
    home = tmp_path / "home"
    tune.save_table(home / ".cache" / "llmopt" / "tuned.json", tune.load_table(user))
    monkeypatch.delenv("LLMOPT_TUNE_CACHE")
    monkeypatch.setenv("HOME", str(home))
    assert knobs_after("apply-tuned")["a"] == {"bm": 16, "bn": 64, "tm": 1, "tn": 4}
    assert knobs_after("apply-tuned{user=0}")["a"] == {"bm": 16, "bn": 64, "tm": 1, "tn": 4}
    assert knobs_after("apply-tuned{user=1}")["a"] == {"bm": 32, "bn": 32, "tm": 2, "tn": 2}
    monkeypatch.setenv("LLMOPT_TUNE_CACHE", str(user))
    # the knobs drive register-tile: 32x32 tiles of 2x2 for a and b, the heuristic for c
    tiled = llmopt.lower(module.clone(), "apply-tuned,register-tile")
    shapes = {op.parent_op().parent_op().sym_name.data: op.results[0].type.get_shape()
              for op in tiled.walk() if isinstance(op, tile.AllocOp)}
    assert shapes == {"a": (16, 16, 2, 2), "b": (16, 16, 2, 2), "c": (16, 16, 2, 4)}


def test_tune_command_needs_a_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: llmopt tune would run")
    from llmopt.tools.llmopt_cli import main

    program = tmp_path / "p.mlir"
    program.write_text(TUNE_TEXT)
    assert main(["tune", str(program), "--jobs", "1"]) == 1
    err = capsys.readouterr().err
    assert "llmopt: error: tune needs a CUDA GPU" in err
    assert "Traceback" not in err


def test_register_tile_never_changes_a_type() -> None:
    """The accumulators have the reduction's element type (f64 stays f64)."""
    module = llmopt.parse(TUNE_TEXT.replace("f32", "f64"))
    tiled = llmopt.lower(module, "register-tile")
    for op in tiled.walk():
        if isinstance(op, tile.AllocOp):
            typ = op.results[0].type
            assert isinstance(typ, MemRefType) and str(typ.element_type) == "f64"


def test_a_failing_reference_skips_the_kernel_not_the_run(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """When the unscheduled reference of one kernel fails on the GPU, the tuner logs why and
    goes on with the next kernel instead of stopping."""
    torch = pytest.importorskip("torch")
    module = llmopt.parse(TUNE_TEXT)
    calls: list[str] = []

    def fake_trials(kernel: tile.KernelOp, trials: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(kernel.sym_name.data)
        if len(calls) == 1:
            raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS")
        return [tune.Trial(t, 1.0 if t is None else 0.5) for t in trials]

    monkeypatch.setattr(tune, "run_trials", fake_trials)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    lines: list[str] = []
    entries = tune.tune_module(module, "sm_90", reps=1, limit=2, log=lines.append)
    assert len(set(calls)) == 2  # a and c (b is a's structural twin)
    assert any("skipped: the unscheduled reference failed (RuntimeError: "
               "CUDA_ERROR_ILLEGAL_ADDRESS)" in line for line in lines), lines
    assert len(entries) == 1 and None not in entries.values()


def test_a_kernel_the_heuristics_win_loses_its_old_entry(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """When no candidate beats the heuristic schedule, an earlier entry of the kernel (tuned
    before the heuristics improved) is dropped from the table instead of being applied on."""
    torch = pytest.importorskip("torch")
    module = llmopt.parse(TUNE_TEXT)
    monkeypatch.setattr(tune, "run_trials", lambda kernel, trials, *a, **k: [
        tune.Trial(t, 0.5 if t is None else 1.0) for t in trials])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    entries = tune.tune_module(module, "sm_90", reps=1, limit=2, log=lambda line: None)
    assert entries and all(entry is None for entry in entries.values())
    stale = next(iter(entries))
    table = {stale: {"knobs": {"bm": 64}}, "other|Fake GPU|nvrtc-13.0": {"knobs": {"bm": 32}}}
    tune.merge_entries(table, entries)
    assert list(table) == ["other|Fake GPU|nvrtc-13.0"]


def test_recorded_knobs_are_timed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel's knobs already in the table are a candidate of the new run even when
    ``limit`` cuts the list before them, so a shorter run cannot replace them with slower
    ones; here they stay the fastest and are kept."""
    torch = pytest.importorskip("torch")
    module = llmopt.parse(TUNE_TEXT)
    kernel = next(k for k in module.walk() if isinstance(k, tile.KernelOp))
    key = tune.schedule_key(kernel)
    old = {"bm": 16, "bn": 16, "tm": 1, "tn": 1, "bk": 16, "split_k": 1}
    assert old not in tune.candidates(kernel, "sm_90")[:2]
    timed: list[Any] = []

    def fake_trials(kernel: tile.KernelOp, trials: Any, *args: Any, **kwargs: Any) -> Any:
        timed.extend(trials)
        return [tune.Trial(t, 0.25 if t == old else 1.0) for t in trials]

    monkeypatch.setattr(tune, "run_trials", fake_trials)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    recorded = {f"{key}|Fake GPU|nvrtc-13.0": {"arch": "sm_90", "knobs": old}}
    entries = tune.tune_module(module, "sm_90", reps=1, limit=2, log=lambda line: None,
                               recorded=recorded)
    assert old in timed
    assert [e["knobs"] for e in entries.values() if e is not None][:1] == [old]


def test_the_winner_is_refined_with_two_blocks_a_multiprocessor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After the candidates, the fastest one is timed again beside itself with ``min_blocks
    = 2`` and with ``kv_order = 2``; the refined knobs are kept only when they are faster."""
    torch = pytest.importorskip("torch")
    module = llmopt.parse(TUNE_TEXT)
    batches: list[list[Any]] = []

    def fake_trials(faster: bool) -> Any:
        def run(kernel: tile.KernelOp, trials: Any, *args: Any, **kwargs: Any) -> Any:
            batches.append(list(trials))
            return [tune.Trial(t, 2.0 if t is None else
                               0.5 if faster and t.get("min_blocks") == 2 else 1.0)
                    for t in trials]
        return run

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    for faster in (True, False):
        batches.clear()
        monkeypatch.setattr(tune, "run_trials", fake_trials(faster))
        entries = tune.tune_module(module, "sm_90", reps=1, limit=2, log=lambda line: None)
        first, refined = batches[0][1], batches[1]
        assert refined == [first, first | {"min_blocks": 2}, first | {"kv_order": 2}]
        kept = next(e["knobs"] for e in entries.values() if e is not None)
        assert kept == (first | {"min_blocks": 2} if faster else first)


def test_min_blocks_reaches_the_launch_bounds() -> None:
    """``kernel-to-cuda{min_blocks=2}`` (or a kernel's ``min_blocks`` knob) prints
    ``__launch_bounds__(threads, 2)``; without it only the thread count is printed."""
    module = llmopt.parse(TUNE_TEXT)
    plain = llmopt.cuda_source(llmopt.lower(module.clone(), tune.UNSCHEDULED))
    two = llmopt.cuda_source(llmopt.lower(
        module.clone(), tune.UNSCHEDULED.replace("kernel-to-cuda", "kernel-to-cuda{min_blocks=2}")))
    assert "__launch_bounds__(256)" in plain and ", 2)" not in plain
    assert "__launch_bounds__(256, 2)" in two
    kernel = next(k for k in module.walk() if isinstance(k, tile.KernelOp))
    knobbed = llmopt.parse(str(tune.one_kernel_module(kernel, {"min_blocks": 3})))
    assert "__launch_bounds__(256, 3)" in llmopt.cuda_source(
        llmopt.lower(knobbed, tune.UNSCHEDULED))


def test_trial_inputs_follow_the_buffer_types() -> None:
    """A kernel with a fused embedding gather (a first layer's residual) reads its i64 ids as
    indices: the tuner fills them with small valid integers, not float bits."""
    torch = pytest.importorskip("torch")
    module = llmopt.parse("""
func.func @forward(%ids: memref<8xi64>, %table: memref<32x16xf32>) -> memref<8x16xf32> {
  %y = memref.alloc() : memref<8x16xf32>
  tile.kernel @gather grid [1, 1, 1] block [128, 1, 1] (%i = %ids : memref<8xi64>,
      %t = %table : memref<32x16xf32>, %o = %y : memref<8x16xf32>) {
    tile.forall (%r, %c) in [8, 16] over threads {
      %id = loop.load %i[%r] : memref<8xi64>
      %row = arith.index_cast %id : i64 to index
      %v = loop.load %t[%row, %c] : memref<32x16xf32>
      loop.store %v, %o[%r, %c] : memref<8x16xf32>
    }
  }
  func.return %y : memref<8x16xf32>
}
""")
    kernel = _ops(module, "tile.kernel")[0]
    ids, table, out = tune.trial_inputs(kernel, "cpu")
    assert ids.dtype == torch.int64 and ids.shape == (8,)
    assert 0 <= int(ids.min()) and int(ids.max()) < tune.INDEX_HIGH
    assert len(set(ids.tolist())) > 1  # random, not all one value
    assert table.dtype == out.dtype == torch.float32 and table.std() > 0.5


def test_the_tuner_sets_the_knobs_the_passes_read() -> None:
    knobs = {k for c in tune.candidates(_tune_kernels()["a"], "sm_90") for k in c}
    assert knobs == {"bm", "bn", "tm", "tn", "bk", "split_k"}
    assert SCHEDULE_ATTR == "llmopt.schedule"
    assert all(len(c) == 4 for c in TILE_CANDIDATES)


# --- bugs found by these tests, fixed ---------------------------------------------------------

PROLOGUE_AFTER_STORE = """
func.func @forward(%x: memref<32x64xf32>, %w: memref<128x64xf32>, %s: memref<32x128xf32>)
    -> memref<32x128xf32> {
  %y = memref.alloc() : memref<32x128xf32>
  tile.kernel @k grid [16, 1, 1] block [256, 1, 1] (%a = %x : memref<32x64xf32>,
      %b = %w : memref<128x64xf32>, %sc = %s : memref<32x128xf32>, %o = %y : memref<32x128xf32>) {
    tile.forall (%i, %j) in [32, 128] over threads {
      %two = arith.constant 2.0 : f32
      loop.store %two, %sc[%i, %j] : memref<32x128xf32>
      %f = loop.load %sc[%i, %j] : memref<32x128xf32>
      %r = loop.reduce add %k = 0 to 64 : f32 {
        %u = loop.load %a[%i, %k] : memref<32x64xf32>
        %v = loop.load %b[%j, %k] : memref<128x64xf32>
        %p = arith.mulf %u, %v : f32
        %q = arith.mulf %p, %f : f32
        loop.yield %q : f32
      }
      loop.store %r, %o[%i, %j] : memref<32x128xf32>
    }
  }
  func.return %y : memref<32x128xf32>
}
"""


@pytest.mark.parametrize("pipeline", ["register-tile", "split-k{split_k=2}"])
def test_prologue_reading_a_buffer_the_forall_writes(pipeline: str) -> None:
    module = llmopt.parse(PROLOGUE_AFTER_STORE)
    report = llmopt.check_numerics(module, f"{pipeline},tile-to-kernel")
    assert report.ok, str(report)


K_MAJOR_BUDGET = """
func.func @forward(%x: memref<16x320xf32>, %w: memref<16x320xf32>) -> memref<16x16xf32> {
  %y = memref.alloc() : memref<16x16xf32>
  tile.kernel @k grid [1, 1, 1] block [256, 1, 1] (%a = %x : memref<16x320xf32>,
      %b = %w : memref<16x320xf32>, %o = %y : memref<16x16xf32>) {
    tile.forall (%i, %j) in [16, 16] over threads {
      %r = loop.reduce add %k = 0 to 320 : f32 {
        %u = loop.load %a[%i, %k] : memref<16x320xf32>
        %v = loop.load %b[%j, %k] : memref<16x320xf32>
        %p = arith.mulf %u, %v : f32
        loop.yield %p : f32
      }
      loop.store %r, %o[%i, %j] : memref<16x16xf32>
    }
  }
  func.return %y : memref<16x16xf32>
}
"""


def _staged_bytes(pipeline: str) -> int:
    module = llmopt.lower(llmopt.parse(K_MAJOR_BUDGET), pipeline)
    total = 0
    for op in module.walk():
        if isinstance(op, tile.AllocOp) and op.space.data == "shared":
            typ = op.results[0].type
            total += 4 * math.prod(typ.get_shape())
    return total


def test_staged_tiles_in_buffer_order_fit_static_shared_memory() -> None:
    """bk = 320 with 16-row tiles, kept in the buffers' order (kmajor=2): two 16x321 tiles,
    41 088 bytes, within the 48 KiB a block may declare statically."""
    pipeline = "register-tile{bm=16 bn=16 tm=1 tn=1},stage-inputs{bk=320 kmajor=2},pad-shared"
    assert 0 < _staged_bytes(pipeline) <= SM90.static_smem


def test_staged_k_major_tiles_fit_static_shared_memory() -> None:
    pipeline = "register-tile{bm=16 bn=16 tm=1 tn=1},stage-inputs{bk=320},pad-shared"
    staged = _staged_bytes(pipeline)
    assert staged == 0 or staged <= SM90.static_smem, f"{staged} bytes of shared tiles"


def test_a_chunk_asked_for_that_does_not_fit_is_an_error() -> None:
    """``stage-inputs{bk=N}`` whose tiles exceed a block's shared-memory budget is an error
    naming the kernel, not a product silently left reading global memory; without ``bk``
    the chunk is halved until its tiles fit."""
    text = (K_MAJOR_BUDGET.replace("16x320", "128x2048").replace("16x16", "128x128")
            .replace("[16, 16]", "[128, 128]").replace("0 to 320", "0 to 2048"))
    pre = "register-tile{bm=128 bn=128 tm=8 tn=8},"
    with pytest.raises(PassFailedException, match=r"stage-inputs: bk=2048 needs \d+ bytes "
                       r"of shared tiles in kernel 'k', more than a block's budget"):
        llmopt.lower(llmopt.parse(text), pre + "stage-inputs{bk=2048}")
    module = llmopt.lower(llmopt.parse(text), pre + "stage-inputs")
    assert any(isinstance(op, tile.AllocOp) and op.space.data == "shared"
               for op in module.walk())


# --- the lit tests of these passes --------------------------------------------------------------


def _lit(*args: str) -> subprocess.CompletedProcess[str]:
    candidate = Path(sys.executable).parent / "lit"
    command = [str(candidate)] if candidate.is_file() else [shutil.which("lit") or "lit"]
    return subprocess.run([*command, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def _pass_lit_tests() -> list[str]:
    """The lit tests below ``test/passes`` (this directory's and the other passes'), as lit
    names them relative to ``test/``."""
    return sorted(str(p.relative_to(ROOT / "test")) for p in (ROOT / "test" / "passes").rglob(
        "*.mlir") if "Output" not in p.parts and "Inputs" not in p.parts)


def _undiscovered() -> list[str]:
    listed = _lit("--show-tests", "test/").stdout
    return [t for t in _pass_lit_tests() if f"llmopt :: {t}" not in listed]


def test_the_lit_suite_discovers_the_pass_tests() -> None:
    """Every lit test below test/passes is found by ``lit test/`` (so test/test_lit.py runs
    it), although test/passes also holds Python tests."""
    assert _pass_lit_tests()
    assert _undiscovered() == []


def test_split_k_that_does_not_divide_k_warns() -> None:
    """A kernel whose own schedule asks for a slice count that does not divide K stays
    whole, with a warning naming it; the pass option applies only where it divides."""
    module, _ = _capture("linear")
    to_tile = ("torch-to-prim,canonicalize,prim-to-loop,fuse-kernels{recompute_limit=0},"
               "canonicalize,cse,loop-to-tile")
    llmopt.lower(module, to_tile)
    (kernel,) = [op for op in module.walk() if isinstance(op, tile.KernelOp)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        llmopt.lower(module.clone(), "split-k{split_k=5}")  # no warning: the option
    kernel.attributes["llmopt.schedule"] = DictionaryAttr({"split_k": IntegerAttr(5, i64)})
    with pytest.warns(UserWarning, match=r"@\w+ keeps its K loop of 256 whole: its split_k=5"):
        llmopt.lower(module, "split-k")
    assert not [op for op in module.walk() if isinstance(op, tile.KernelOp)
                and "llmopt.split" in op.attributes]


def test_tune_layer_tunes_the_layer_the_blocks_benchmark_times(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``llmopt tune M --layer`` hands the tuner decoder layer 0 captured alone (no lm_head;
    at full size its o and down projections end in the layer's output, kernels the whole
    model does not have, so ``apply-tuned`` needs entries of their own); it says how to
    use the cache it wrote, and the attention tuner gets the same program at Loop IR."""
    pytest.importorskip("torch")
    from llmopt.tools import llmopt_cli, tune_attention

    seen: list[set[str]] = []
    attention: list[list[str]] = []

    def fake_tune_module(module: ModuleOp, *args: Any, **kwargs: Any) -> dict[str, Any]:
        seen.append({tune.describe(k) for k in module.walk() if isinstance(k, tile.KernelOp)
                     and tune.match_contraction(k) is not None})
        return {}

    def fake_tune_attention(module: ModuleOp, *args: Any, **kwargs: Any) -> dict[str, Any]:
        attention.append([tune_attention.describe(c)
                          for c in tune_attention.attention_chains(module)])
        return {}

    monkeypatch.setattr(llmopt_cli, "_cuda_available", lambda: True)
    monkeypatch.setattr(tune, "tune_module", fake_tune_module)
    monkeypatch.setattr(tune_attention, "tune_attention", fake_tune_attention)
    monkeypatch.setenv("LLMOPT_TUNE_CACHE", str(tmp_path / "tuned.json"))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 176, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 128, "rms_norm_eps": 1e-5,
        "max_position_embeddings": 256}))
    assert llmopt_cli.main(["tune", str(config), "--layer", "--seqs", "32", "--jobs", "1"]) == 0
    assert llmopt_cli.main(["tune", str(config), "--seqs", "32", "--jobs", "1"]) == 0
    hint = f"set LLMOPT_TUNE_CACHE={tmp_path / 'tuned.json'} (or give apply-tuned{{user=1}})"
    assert hint in capsys.readouterr().err
    layer, whole = seen
    assert "1x32x176x64" in layer  # the fused gate/up
    assert "1x32x128x64" in whole and "1x32x128x64" not in layer  # lm_head: the model's only
    # attention is tuned at Loop IR, before flash-attention makes it one kernel
    assert attention == [["4x32x32x16 causal"]] * 2


def test_tune_layer_refuses_an_ir_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from llmopt.tools import llmopt_cli

    monkeypatch.setattr(llmopt_cli, "_cuda_available", lambda: True)
    program = tmp_path / "p.mlir"
    program.write_text(TUNE_TEXT)
    assert llmopt_cli.main(["tune", str(program), "--layer"]) == 1
    assert "--layer captures a decoder layer" in capsys.readouterr().err


@pytest.mark.parametrize("factors,arch,expected", [
    ((), "sm_90", True),                       # f32 factors: three TF32 products
    ((bf16, bf16), "sm_90", True),             # bf16 factors summed in f32: m16n8k16
    ((f16, f16), "sm_80", True),
    ((bf16, f32), "sm_90", False),             # mixed factors: no fragment layout fits both
    ((bf16, f16), "sm_90", False),
    ((bf16, bf16), "sm_75", False),            # no m16n8k16 before sm_80
])
def test_tensor_cores_follow_the_factor_types(factors: tuple, arch: str,
                                              expected: bool) -> None:
    assert has_tensor_cores(arch, f32, factors) is expected
    assert not has_tensor_cores(arch, bf16, factors)  # sums stay f32


def test_tune_tries_64_by_64_warp_tiles_on_16_bit_products() -> None:
    """``llmopt tune``'s tensor-core candidates of a bf16 product: the 16-bit tiles, with
    warps of 64 × 64, and no ``mma-fragments`` product orders (16-bit fragments have none)."""
    text = (ROOT / "test/passes/tile/Inputs/linear-bf16.mlir").read_text()
    module = llmopt.lower(llmopt.parse(text), "torch-to-prim,canonicalize,prim-to-loop,"
                          "fuse-kernels{recompute_limit=0},canonicalize,cse,loop-to-tile")
    (kernel,) = [op for op in module.walk() if isinstance(op, tile.KernelOp)]
    cands = tune.mma_candidates(kernel, "sm_90", 100)
    tiles = {(c["bm"], c["bn"], c["tm"], c["tn"]) for c in cands}
    assert {(128, 256, 8, 16), (256, 128, 8, 16), (128, 128, 8, 16), (128, 64, 8, 4)} <= tiles
    assert all(c["blocked"] == 3 and "mma_order" not in c for c in cands)


@pytest.mark.parametrize(("m", "n", "k", "one", "two"), [
    (512, 18944, 3584, (64, 128, 1), (128, 192, 1)),
    (2047, 2048, 5632, (128, 128, 1), (128, 256, 1)),
    (512, 3584, 3584, (128, 128, 1), (128, 112, 1)),
])
def test_two_role_products_rank_the_wide_tiles_first(
        m: int, n: int, k: int, one: tuple[int, int, int], two: tuple[int, int, int]) -> None:
    """A 16-bit product on sm_90a scheduled as one of two roles (a producer warpgroup, one
    block a multiprocessor) weighs its warpgroup tiles by what such blocks measured: the
    128 × 256 tile where its blocks fill the waves as well as 128 × 128's, or a tile of
    128 rows whose width fills them (192, 112: :data:`WGMMA_WAVE_TILES`), where one role
    took 64 × 128 or 128 × 128."""
    gpu = limits("sm_90a")
    for roles, (bm, bn, split) in ((1, one), (2, two)):
        chosen = choose_product_schedule(m, n, k, 1, gpu, 1, (0, 0), True, True, roles)
        assert chosen is not None
        assert (chosen.tile.bm, chosen.tile.bn, chosen.split) == (bm, bn, split), roles


_BF16_PRODUCT = """
func.func @forward(%w: tensor<1024x{k}xbf16> {{llmopt.param = "w"}},
                   %x: tensor<1x{m}x{k}xbf16> {{llmopt.input = "x"}}) -> tensor<1x{m}x1024xbf16> {{
  %0 = torch.linear %x, %w
      : tensor<1x{m}x{k}xbf16>, tensor<1024x{k}xbf16> -> tensor<1x{m}x1024xbf16>
  func.return %0 : tensor<1x{m}x1024xbf16>
}}
"""


@pytest.mark.parametrize(("m", "k", "pipeline", "roles"), [
    (512, 1024, "lower-to-cuda{arch=sm_90a}", 2),
    (512, 1024, "lower-to-cuda{arch=sm_90a roles=1}", None),
    (512, 1024, "lower-to-cuda{arch=sm_90}", None),
    (512, 256, "lower-to-cuda{arch=sm_90a}", None),
])
def test_async_copy_gives_long_static_16_bit_products_two_roles(
        m: int, k: int, pipeline: str, roles: int | None) -> None:
    """``async-copy`` marks a bf16 product on sm_90a with ``roles = 2`` (and four slots)
    when its K loop has at least eight chunks of 64; not with ``roles=1``, on sm_90 (no
    warpgroup products) or with four chunks."""
    text = _BF16_PRODUCT.format(m=m, k=k)
    passes = registry.expand_pipeline(pipeline)
    upto = passes[:passes.index(",prefetch-stages")]
    module = llmopt.lower(llmopt.parse(text), upto)
    knobs = [kernel_knobs(op) for op in module.walk() if isinstance(op, tile.KernelOp)]
    assert knobs
    assert {kn.get("roles") for kn in knobs} == {roles}
    if roles is not None:
        assert '"async4"' in str(module)


_BF16_SYMBOLIC_PRODUCT = """
func.func @forward(%w: tensor<1024x1024xbf16> {llmopt.param = "w"},
                   %x: tensor<1x?x1024xbf16> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                   %seq: index {llmopt.symbol = "seq", llmopt.max = 600}
                   ) -> tensor<1x?x1024xbf16> {
  %0 = torch.linear %x, %w : tensor<1x?x1024xbf16>, tensor<1024x1024xbf16> -> tensor<1x?x1024xbf16>
  func.return %0 : tensor<1x?x1024xbf16>
}
"""


def test_async_copy_gives_symbolic_length_16_bit_products_two_roles() -> None:
    """A product over a runtime number of rows is marked as a static one is: the length
    bucket of 600 rows (16 chunks of 64, one slice) gets ``roles = 2``, its ragged last
    rows being clamped to the runtime length, which bulk copies replace by their zero fill;
    ``roles=1`` marks none."""
    def knobs(pipeline: str) -> dict[int, int | None]:
        passes = registry.expand_pipeline(pipeline)
        upto = passes[:passes.index(",prefetch-stages")]
        module = llmopt.lower(llmopt.parse(_BF16_SYMBOLIC_PRODUCT), upto)
        return {op.attributes["llmopt.bucket"].value.data: kernel_knobs(op).get("roles")
                for op in module.walk() if isinstance(op, tile.KernelOp)
                and "llmopt.bucket" in op.attributes and "llmopt.split" not in op.attributes}

    default = knobs("lower-to-cuda{arch=sm_90a}")
    assert default[600] == 2
    assert set(knobs("lower-to-cuda{arch=sm_90a roles=1}").values()) == {None}
