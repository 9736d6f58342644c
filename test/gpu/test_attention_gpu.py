"""Attention (``flash-attention``) on the GPU against PyTorch, at lengths no block divides.

Causal GQA attention with its heads concatenated, as a decoder layer computes it, in the
head configurations of TinyLlama (32 query heads, 4 KV heads of 64) and Qwen2.5-7B (28 and 4
of 128), at 17, 100, 200, 512 and 1000 tokens. Each case is one flash kernel whose products
run as ``mma.sync`` and whose K and V tiles are filled by ``cp.async`` (where there is
more than one key block to fetch ahead and two slots of them fit); its result is
compared with PyTorch's ``scaled_dot_product_attention`` in float64 on the same float32
inputs (and PyTorch's own float32 result is reported beside it). The tolerance is the
op tests' float32 bound for sums of ``seq`` terms, ``16 · eps32 · sqrt(seq)`` relative to
the largest output. In 16 bits, the row-warps flash kernel (``flash-attention{row_warps}``)
is held to the half-precision error goal beside PyTorch's own 16-bit result.

Run on a GPU host: ``python -m pytest -m gpu test/gpu/test_attention_gpu.py -q -s``.
"""

from __future__ import annotations

import math
import warnings

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

EPS32 = 2.0**-23
HEADS = {"tinyllama": (32, 4, 64), "qwen2.5-7b": (28, 4, 128)}
SEQS = (17, 100, 200, 512, 1000)


def merged_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal GQA attention, heads concatenated: ``[batch, seq, heads · head_dim]``."""
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                           enable_gqa=True)
    return out.transpose(1, 2).reshape(q.shape[0], q.shape[2], q.shape[1] * q.shape[3])


@pytest.mark.parametrize("seq", SEQS)
@pytest.mark.parametrize("model", list(HEADS))
def test_attention_matches_pytorch(model: str, seq: int) -> None:
    import llmopt

    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    heads, kv_heads, head_dim = HEADS[model]
    gen = torch.Generator(device="cuda").manual_seed(seq * 7 + head_dim)
    q = torch.randn(1, heads, seq, head_dim, device="cuda", generator=gen)
    k, v = (torch.randn(1, kv_heads, seq, head_dim, device="cuda", generator=gen)
            for _ in range(2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = llmopt.compile(merged_sdpa, [q, k, v])
    source = compiled.program.source
    assert source.count("__global__") == 1, "attention is not one kernel"
    assert "mma.sync" in source, "the products are not on the tensor cores"
    out = compiled(q, k, v)
    torch.cuda.synchronize()
    ref = merged_sdpa(q.double(), k.double(), v.double())
    torch.backends.cuda.matmul.allow_tf32 = False
    eager = merged_sdpa(q, k, v)
    assert out.shape == ref.shape and torch.isfinite(out).all()
    scale = ref.abs().max().item()
    err = (out.double() - ref).abs().max().item() / scale
    eager_err = (eager.double() - ref).abs().max().item() / scale
    tol = 16 * EPS32 * math.sqrt(seq)
    print(f"{model:11s} seq {seq:5d}: llmopt {err:.2e}, PyTorch float32 {eager_err:.2e} "
          f"(tol {tol:.1e})")
    assert err <= tol
    # More than one key block: K and V are fetched ahead — except for Qwen2.5-7B's heads of
    # 128 at 100 to 255 tokens, whose small query blocks run two a multiprocessor: two slots
    # of K and V beside them exceed the shared-memory budget and the fills stay synchronous.
    if seq > 64 and not (head_dim == 128 and seq < 256):
        assert "__pipeline_memcpy_async" in source, "K and V are not filled by cp.async"


@pytest.mark.parametrize("options", ["bm=64 warps=4 row_warps=true",
                                     "bm=128 warps=4 row_warps=true",
                                     "bm=64 warps=4 row_warps=true; register_a=true"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("seq", (100, 1000))
@pytest.mark.parametrize("model", list(HEADS))
def test_row_warps_attention_in_half_precision(model: str, seq: int, dtype: str,
                                               options: str) -> None:
    """16-bit attention with ``flash-attention{row_warps}``: warps own whole rows, the row
    statistics combine by quad shuffles and ``P`` reaches ``P·V`` from registers
    (``mma.pack``, no shared ``pb``); the error against float64 meets the 16-bit goal beside
    PyTorch's own (the benchmark suite's :func:`within_error_goal`). After ``;``,
    ``wgmma-fragments`` options: ``register_a=true`` puts ``P·V`` on warpgroup products
    whose ``A`` is those registers (sm_90a)."""
    import sys
    from pathlib import Path

    import llmopt
    from llmopt import registry

    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from suite import half_errors, within_error_goal

    heads, kv_heads, head_dim = HEADS[model]
    half = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(seq + head_dim)
    args = [torch.randn(1, h, seq, head_dim, device="cuda", generator=gen).to(half)
            for h in (heads, kv_heads, kv_heads)]
    flash, _, wgmma = options.partition(";")
    overrides = [f"flash-attention{{{flash}}}"] + ([f"wgmma-fragments{{{wgmma.strip()}}}"]
                                                   if wgmma else [])
    pipeline = registry.with_options("lower-to-cuda", *overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = llmopt.compile(merged_sdpa, args, pipeline=pipeline)
    source = compiled.program.source
    assert source.count("__global__") == 1 and "__shfl_xor_sync" in source
    packs = ("cvt.rn.bf16x2.f32", "cvt.rn.f16x2.f32", "__bfloat16_as_ushort", "__half_as_ushort")
    assert any(form in source for form in packs), "P is not packed"
    if wgmma and "sm_90a" in pipeline:  # P·V's A from registers: no ldmatrix is left
        assert "ldmatrix" not in source and "p, 1, 1, 1; }" in source
    ours, theirs = half_errors(merged_sdpa, args, compiled)
    print(f"{model:11s} seq {seq:5d} {dtype} {options}: llmopt {ours:.2e}, PyTorch {theirs:.2e}")
    assert within_error_goal(ours, theirs, dtype), (ours, theirs)
