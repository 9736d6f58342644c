"""``flash-attention`` on captured attention: numerics through every later pass (Tile- and
Kernel-IR interpreters), which shapes it takes, and its block sizes."""

from __future__ import annotations

import re
import warnings
from typing import Any

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

import llmopt
from llmopt import registry
from llmopt.interp import run
from llmopt.passes.tile._schedule_attention import AttentionBlocks as Blocks
from llmopt.passes.tile._schedule_attention import choose_attention_blocks as choose_blocks
from llmopt.passes.tile._schedule_attention import warp_grid

LOOP_IR = ("torch-to-prim,canonicalize,prim-to-loop,fuse-kernels{recompute_limit=0},"
           "canonicalize,cse,hoist-reduce-factors")


def _attention(q: Any, k: Any, v: Any) -> Any:
    import torch.nn.functional as F

    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return out.transpose(1, 2).reshape(q.shape[0], q.shape[2], q.shape[1] * q.shape[3])


def _capture(heads: tuple[int, int], seq: int, head_dim: int, seed: int = 0) -> ModuleOp:
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, heads[0], seq, head_dim, generator=gen)
    k, v = (torch.randn(1, heads[1], seq, head_dim, generator=gen) for _ in range(2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return llmopt.capture(_attention, [q, k, v])


def _kernels(module: ModuleOp, name: str) -> list[Any]:
    return [op for op in module.walk() if op.name == name]


@pytest.mark.parametrize("heads,seq,head_dim,options", [
    ((4, 2), 64, 32, ""),                # bm 16 (few rows), bn 64: one key block
    ((4, 2), 64, 32, "{bm=16 bn=16}"),   # four key blocks, rescaled three times
    ((2, 1), 48, 16, "{bm=16 bn=16}"),   # 3 query blocks on one KV head
])
def test_flash_attention_matches_the_unfused_program(heads: tuple[int, int], seq: int,
                                                     head_dim: int, options: str) -> None:
    """Every pass from ``flash-attention`` to ``tile-to-kernel`` keeps the result within the
    float32 tolerance (the interpreters run the online softmax block by block)."""
    module = _capture(heads, seq, head_dim)
    pipeline = registry.expand_pipeline("lower-to-cuda").replace(
        "flash-attention{arch=sm_90}", f"flash-attention{options}")
    assert f"flash-attention{options}" in pipeline
    report = llmopt.check_numerics(module, pipeline.rsplit(",", 1)[0])
    assert report.ok, str(report)
    fused = llmopt.lower(_capture(heads, seq, head_dim), LOOP_IR + f",flash-attention{options}")
    flash = [k for k in _kernels(fused, "tile.kernel") if "llmopt.flash" in k.attributes]
    assert len(flash) == 1 and not _kernels(fused, "loop.kernel"), fused


def _masked(q: Any, k: Any, v: Any, mask: Any) -> Any:
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _written_out(q: Any, k: Any, v: Any, mask: Any) -> Any:
    import torch

    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5 + mask
    return torch.softmax(scores, -1) @ v


def _unmasked(q: Any, k: Any, v: Any) -> Any:
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("name", ["mask", "written-out causal", "no mask"])
def test_flash_attention_takes_other_forms_of_attention(name: str) -> None:
    """A float mask read in the softmax, attention written out with a causal mask tensor
    (``-inf`` above the diagonal: every key block is visited, the fully masked ones add
    nothing), and attention without a mask (whose softmax kernel divides by the sums
    itself) are each one flash kernel and keep their results."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 32, 16, generator=gen) for _ in range(3))
    mask = torch.randn(1, 1, 32, 32, generator=gen)
    causal = torch.triu(torch.full((32, 32), float("-inf")), 1)
    fn, args = {"mask": (_masked, [q, k, v, mask]),
                "written-out causal": (_written_out, [q, k, v, causal]),
                "no mask": (_unmasked, [q, k, v])}[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = llmopt.capture(fn, args)
    fused = llmopt.lower(module.clone(), LOOP_IR + ",flash-attention{bm=16 bn=16}")
    flash = [k for k in _kernels(fused, "tile.kernel") if "llmopt.flash" in k.attributes]
    assert len(flash) == 1, fused
    report = llmopt.check_numerics(module, registry.expand_pipeline("lower-to-cuda")
                                   .rsplit(",", 1)[0])
    assert report.ok, str(report)


def test_causal_flash_attention_stops_at_the_diagonal() -> None:
    """The loop over key blocks ends at ``min(blocks, (qb·bm + bm - 1) floordiv bn + 1)``:
    query block ``qb`` of 16 rows visits ``qb + 1`` key blocks of 16."""
    fused = llmopt.lower(_capture((2, 1), 64, 16), LOOP_IR + ",flash-attention{bm=16 bn=16}")
    (kb_loop,) = [op for op in fused.walk() if op.name == "scf.for"
                  and getattr(op.attributes.get("llmopt.role"), "data", None) == "key_blocks"]
    bound = kb_loop.operands[1].owner
    assert bound.name == "arith.minui", bound
    divided = bound.operands[0].owner
    assert divided.name == "arith.divui"
    assert [o.owner.value.value.data for o in (divided.operands[1], bound.operands[1])] == [16, 4]


@pytest.mark.parametrize("seq,options", [(20, ""), (37, "{bm=16 bn=16}"), (100, "")])
def test_flash_attention_takes_lengths_no_block_divides(seq: int, options: str) -> None:
    """20, 37 and 100 queries and keys: the last query block overhangs the queries (clamped
    loads of Q, stores guarded by an ``scf.if``), the last key block the keys (its extra
    keys masked to -inf), and every pass keeps the result."""
    module = _capture((2, 1), seq, 16, seed=seq)
    pipeline = registry.expand_pipeline("lower-to-cuda").replace(
        "flash-attention{arch=sm_90}", f"flash-attention{options}")
    report = llmopt.check_numerics(module, pipeline.rsplit(",", 1)[0])
    assert report.ok, str(report)
    fused = llmopt.lower(_capture((2, 1), seq, 16), LOOP_IR + f",flash-attention{options}")
    flash = [k for k in _kernels(fused, "tile.kernel") if "llmopt.flash" in k.attributes]
    assert len(flash) == 1 and not _kernels(fused, "loop.kernel"), fused
    text = str(flash[0])
    assert " clamp :" in text and "scf.if" in text and "arith.select" in text


@pytest.mark.parametrize("head_dim", [64, 128])
def test_flash_attention_in_the_models_blocks(head_dim: int) -> None:
    """64 query rows and 64 keys a block, 8 warps — what TinyLlama's and Qwen2.5-7B's
    attention get from seq 512 — here at 70 tokens (both blocks ragged): the schedule puts
    both products on the tensor cores (three ``mma.sync`` each) and fills K and V with
    ``cp.async``, and every pass to Kernel IR keeps the result."""
    pipeline = registry.expand_pipeline("lower-to-cuda").replace(
        "flash-attention{arch=sm_90}", "flash-attention{bm=64 bn=64}")
    tiled = llmopt.lower(_capture((1, 1), 70, head_dim), pipeline.split(",tile-to-kernel")[0])
    (flash,) = [k for k in _kernels(tiled, "tile.kernel") if "llmopt.flash" in k.attributes]
    assert flash.block_shape[0] == 256
    assert len(_kernels(flash, "mma.sync")) == 6 and _kernels(flash, "tile.async_copy")
    report = llmopt.check_numerics(_capture((1, 1), 70, head_dim),
                                   pipeline.split(",dedup-kernels")[0])
    assert report.ok, str(report)


def test_flash_attention_leaves_attention_it_cannot_tile() -> None:
    """A head dimension of 24 is no multiple of the 16 threads along it: the unfused
    kernels stay."""
    before = llmopt.lower(_capture((2, 1), 32, 24), LOOP_IR)
    after = llmopt.lower(_capture((2, 1), 32, 24), LOOP_IR + ",flash-attention")
    assert len(_kernels(after, "loop.kernel")) == len(_kernels(before, "loop.kernel")) == 4
    assert not _kernels(after, "tile.kernel")


def test_choose_blocks() -> None:
    # enough query blocks of 64 rows for every multiprocessor: 32 heads x 8
    assert choose_blocks(32, 512, 512, 64, 132) == Blocks(64, 64, 8)
    assert choose_blocks(28, 512, 512, 128, 132) == Blocks(64, 64, 8)
    # 32 heads x 128 queries: blocks of 64 would make 64 blocks, of 32 128, of 16 256
    assert choose_blocks(32, 128, 128, 64, 132) == Blocks(16, 64, 8)
    # a 16 x 16 score tile and a 16 x 16 output tile: two warps of 16 x 8 fragments
    assert choose_blocks(4, 48, 48, 16, 132) == Blocks(16, 16, 2)
    # no block divides 20 queries: the blocks overhang them, the key block covers them
    assert choose_blocks(4, 20, 20, 16, 132) == Blocks(16, 32, 2)
    assert choose_blocks(32, 200, 200, 64, 132) == Blocks(32, 64, 8)  # 32 x 7 blocks of 32
    assert choose_blocks(4, 64, 64, 16, 132, 32, 32) == Blocks(32, 32, 4)
    assert choose_blocks(4, 64, 64, 16, 132, 24, 0) is None  # not a multiple of 16
    # a decode step's keys, a cache of runtime length up to 2032: 64 keys a block, though
    # only 16 divides the maximum (every length is ragged)
    assert choose_blocks(32, 1, 2032, 64, 132) == Blocks(16, 16, 2)
    assert choose_blocks(32, 1, 2032, 64, 132, runtime_keys=True) == Blocks(16, 64, 8)
    # ... and 32 keys a block where those keys split over blocks (a decode step's few
    # query blocks): twice the splits share a short cache
    assert choose_blocks(4, 8, 544, 64, 132, runtime_keys=True,
                         split_keys=True) == Blocks(16, 32, 4)
    assert choose_blocks(4, 8, 544, 64, 132, 0, 64, runtime_keys=True,
                         split_keys=True) == Blocks(16, 64, 8)  # the option wins
    assert choose_blocks(4, 64, 64, 16, 132, 32, 32, 8) is None  # 8 warps: a D of 16 < 64


def test_warp_grid() -> None:
    """Warp tiles of whole 16 x 8 fragments, each thread an even number of columns, the
    fewest operand loads."""
    assert warp_grid(64, 64, 8) == (4, 2)     # 16 x 32 a warp
    assert warp_grid(64, 128, 8) == (2, 4)    # 32 x 32
    assert warp_grid(16, 64, 8) == (1, 8)     # 16 x 8
    assert warp_grid(16, 16, 4) is None


KERNEL_IR = registry.expand_pipeline("lower-to-cuda").rsplit(",", 1)[0]
MASK_TOL = 2e-5
"""float32 against float64: products of 16 terms, softmax sums of at most 100, relative to
the largest reference value."""


def _mask(kind: str, heads: int, seq: int, seed: int) -> Any:
    """A random boolean mask (each query sees itself, so no row is fully masked; random
    ones read in the last, ragged key block), or an additive float mask with ``-inf`` where
    that boolean mask is false; shaped ``[1, 1, seq, seq]`` (transformers' broadcast form)
    for one head pattern, ``[1, heads, seq, seq]`` otherwise."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(seed)
    shape = (1, 1 if heads == 0 else heads, seq, seq)
    allowed = (torch.rand(shape, generator=gen) < 0.6) | torch.eye(seq, dtype=torch.bool)
    if kind == "bool":
        return allowed
    bias = torch.randn(shape, generator=gen)
    return torch.where(allowed, bias, torch.tensor(float("-inf")))


def _gqa_masked(q: Any, k: Any, v: Any, mask: Any) -> Any:
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("heads,mask_heads", [((4, 2), 0), ((2, 2), 2)], ids=["gqa", "mha"])
@pytest.mark.parametrize("seq", [7, 17, 32, 37, 100])
def test_flash_attention_with_an_explicit_mask_at_any_length(
        seq: int, heads: tuple[int, int], mask_heads: int, kind: str) -> None:
    """An explicit mask (boolean, as transformers builds it under ``torch.compile``, or
    additive) at lengths no block divides (7, 17, 37, 100) and one they do (32), with GQA
    and without: the flash kernel reads the mask like ``K`` and ``V`` in the last key
    block — clamped, its keys past the end masked to -inf after it — and the Kernel-IR
    interpreter's result matches PyTorch in float64."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(100 + seq)
    q = torch.randn(1, heads[0], seq, 16, generator=gen)
    k, v = (torch.randn(1, heads[1], seq, 16, generator=gen) for _ in range(2))
    mask = _mask(kind, mask_heads, seq, seed=seq)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = llmopt.capture(_gqa_masked, [q, k, v, mask])
    fused = llmopt.lower(module.clone(), LOOP_IR + ",flash-attention")
    (flash,) = [k for k in _kernels(fused, "tile.kernel") if "llmopt.flash" in k.attributes]
    assert not _kernels(fused, "loop.kernel"), fused
    bm, bn = (int(b) for b in flash.attributes["llmopt.flash"].data.split("x"))
    mask_loads = [op for op in flash.walk() if op.name == "loop.load"
                  and list(op.buffer.type.get_shape()) == list(mask.shape)]
    assert mask_loads and all(op.clamped == bool(seq % bm or seq % bn) for op in mask_loads)
    (got,) = run(llmopt.lower(module, KERNEL_IR), [t.numpy() for t in (q, k, v, mask)])
    want = _gqa_masked(q.double(), k.double(), v.double(),
                       mask if kind == "bool" else mask.double())
    err = float(np.abs(got - want.numpy()).max() / want.abs().max())
    assert err < MASK_TOL, err


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("written_out", [False, True], ids=["sdpa", "written-out"])
@pytest.mark.parametrize("stats", ["registers", "shared", "quads"])
def test_half_attention_meets_the_error_goal(dtype: str, written_out: bool, stats: str) -> None:
    """16-bit causal GQA attention (150 tokens: three key blocks, the last ragged), as
    ``sdpa`` and as eager attention writes it out (repeated heads, ``masked_fill``,
    softmax, ``@ v``), goes to one flash kernel with 16-bit tiles and ``P`` rounded to 16
    bits, its row statistics in registers with partials through shared memory
    (``row_warps=false``: 8 warps, 4 × 2), or by default (``row_warps``: 4 warps, each owning
    16 whole rows) combined by the shuffles of a quad, or (``register_stats=false``) all
    through shared memory, interpreted at Kernel IR with the
    race checker: its error against float64 meets the goal beside PyTorch's own in the same
    dtype."""
    torch = pytest.importorskip("torch")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
    from suite import NaiveAttention, half_errors, within_error_goal

    half = getattr(torch, dtype)
    heads, kv_heads, seq, head_dim = 4, 2, 150, 32

    def sdpa(q: Any, k: Any, v: Any) -> Any:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                enable_gqa=True)

    fn = NaiveAttention(heads, kv_heads, seq, head_dim).to(half) if written_out else sdpa
    gen = torch.Generator().manual_seed(3)
    args = [torch.randn(1, h, seq, head_dim, generator=gen).to(half)
            for h in (heads, kv_heads, kv_heads)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = llmopt.capture(fn, args)
    options = {"registers": "bm=64 row_warps=false", "shared": "bm=64 register_stats=false",
               "quads": "bm=64"}[stats]
    pipeline = registry.with_options("lower-to-cuda{arch=sm_90a}", f"flash-attention{{{options}}}")
    to_kernel, _ = registry.split_at_level(pipeline, "kernel")
    llmopt.lower(module, ",".join(to_kernel))
    text = str(module)
    assert text.count("llmopt.flash") == 1
    assert ("%pmax = kernel.shared" in text) == (stats == "registers")
    assert ("kernel.shuffle_xor" in text) == (stats == "quads")
    # with whole rows a warp, P goes from the exponentials' registers to P·V's A fragments
    assert ("%pb = kernel.shared" in text) == (stats != "quads")
    assert ("mma.pack" in text) == (stats == "quads")
    assert re.search(r"mma.ldmatrix x[24] trans %vs\[", text), "V is not read by ldmatrix.trans"
    params = [b.detach() for b in fn.buffers()] if written_out else []

    def interpreted(*inputs: Any) -> Any:
        values = [t.float().numpy() if t.is_floating_point() else t.numpy()
                  for t in [*params, *inputs]]
        return torch.from_numpy(np.asarray(run(module, values, check_races=True)[0],
                                           dtype=np.float32))

    ours, theirs = half_errors(fn, args, interpreted)
    assert 0 < theirs and within_error_goal(ours, theirs, dtype), (ours, theirs)


def _bf16_sdpa(heads: tuple[int, int], seq: int, head_dim: int, seed: int
               ) -> tuple[Any, list[Any]]:
    """Causal GQA ``sdpa`` and its bf16 inputs (``heads``: query and key/value heads)."""
    torch = pytest.importorskip("torch")

    def sdpa(q: Any, k: Any, v: Any) -> Any:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                enable_gqa=True)

    gen = torch.Generator().manual_seed(seed)
    q_heads, kv_heads = heads
    args = [torch.randn(1, h, seq, head_dim, generator=gen).to(torch.bfloat16)
            for h in (q_heads, kv_heads, kv_heads)]
    return sdpa, args


def _kernel_ir(fn: Any, args: list[Any], *overrides: str) -> Any:
    """``fn`` captured and lowered to Kernel IR by ``lower-to-cuda{arch=sm_90a}`` with
    ``overrides``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = llmopt.capture(fn, args)
    pipeline = registry.with_options("lower-to-cuda{arch=sm_90a}", *overrides)
    to_kernel, _ = registry.split_at_level(pipeline, "kernel")
    return llmopt.lower(module, ",".join(to_kernel))


def _assert_bf16_error_goal(module: Any, fn: Any, args: list[Any]) -> None:
    """``module`` interpreted with the race checker meets the bf16 error goal beside
    PyTorch's own on ``args``."""
    import sys
    from pathlib import Path

    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
    from suite import half_errors, within_error_goal

    def interpreted(*inputs: Any) -> Any:
        return torch.from_numpy(np.asarray(run(module, [t.float().numpy() for t in inputs],
                                               check_races=True)[0], dtype=np.float32))

    ours, theirs = half_errors(fn, args, interpreted)
    assert 0 < theirs and within_error_goal(ours, theirs, "bfloat16"), (ours, theirs)


def test_heads_of_128_on_warpgroup_products() -> None:
    """With ``wgmma-fragments{atoms=2}`` (the default) a bf16 flash kernel for heads of 128
    (Qwen2.5-7B's) runs ``Q·Kᵀ`` as warpgroup products over chunks of two swizzle atoms
    (eight ``wgmma.mma`` of ``k`` 16 a key block); ``atoms=1`` leaves it to ``mma.sync``.
    Interpreted at Kernel IR with the race checker (100 tokens: two key blocks, the last
    ragged), its error against float64 meets the goal beside PyTorch's own."""
    sdpa, args = _bf16_sdpa((2, 1), 100, 128, seed=5)
    one = _kernel_ir(sdpa, args, "flash-attention{bm=64}", "wgmma-fragments{atoms=1}")
    assert "wgmma.mma" not in str(one)
    module = _kernel_ir(sdpa, args, "flash-attention{bm=64}")
    assert str(module).count("wgmma.mma %qs") == 8, "Q·Kᵀ is not eight warpgroup products"
    _assert_bf16_error_goal(module, sdpa, args)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_both_products_on_warpgroup_products_with_p_from_registers(head_dim: int) -> None:
    """With ``wgmma-fragments{register_a=true}`` a bf16 flash kernel with whole rows a warp
    runs ``P·V`` as warpgroup products too: ``A`` the four ``mma.pack`` pairs of ``P`` a
    thread, from the registers that rounded it (no shared ``pb``, no ``ldmatrix``), ``V`` read
    N-major; interpreted at Kernel IR with the race checker (150 tokens: three key blocks,
    the last ragged), its error against float64 meets the goal beside PyTorch's own."""
    sdpa, args = _bf16_sdpa((4, 2), 150, head_dim, seed=7)
    module = _kernel_ir(sdpa, args, "flash-attention{bm=64}", "wgmma-fragments{register_a=true}")
    text = str(module)
    assert text.count("wgmma.mma (") == 4, "P·V is not four products with A in registers"
    assert text.count("wgmma.mma %qs") == head_dim // 16
    assert "mma.ldmatrix" not in text and "%pb = kernel.shared" not in text
    _assert_bf16_error_goal(module, sdpa, args)


def test_a_decode_step_splits_its_cache_in_key_blocks_of_32() -> None:
    """A decode step's attention (one query a head, a cache of runtime length): key blocks
    of 32, so the keys of a short cache split over twice the blocks of 64-key blocks."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from llmopt.frontend.decode import capture_decode
    from llmopt.frontend.models import build_model

    config = transformers.LlamaConfig(
        hidden_size=128, intermediate_size=192, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, vocab_size=101, max_position_embeddings=256)
    model = build_model(config, seed=0, dtype=torch.bfloat16)
    tile_level = registry.split_at_level("lower-to-cuda{arch=sm_90a}", "tile")[0]
    tiled = llmopt.lower(capture_decode(model, 256).module, ",".join(tile_level))
    (flash,) = [k for k in _kernels(tiled, "tile.kernel") if "llmopt.flash" in k.attributes]
    assert flash.attributes["llmopt.flash"].data == "16x32"
