"""A decode step whose RMSNorms run inside the projections (``recompute-into-products``):
at Kernel IR, race-checked, it computes what the default pipeline's step computes, with two
launches fewer a layer; ``warp-gemv`` stages the normalised row once a block, which the
fused query, key and value projections share, and every projection block asks for its
weight rows before it waits on the kernel in front."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import llmopt  # noqa: E402
from llmopt import registry  # noqa: E402
from llmopt.dialects import kernel  # noqa: E402
from llmopt.frontend.decode import cache_names, cache_shape, capture_decode  # noqa: E402
from llmopt.frontend.models import build_model  # noqa: E402
from llmopt.interp.host import interpreter_arrays  # noqa: E402

BASE = "lower-to-cuda{arch=sm_90a}"
PREFETCH = 32768
"""Bytes of weight rows a block prefetches in the tests that ask for prefetches."""


def _kernel_ir(module: object, pipeline: str) -> object:
    return llmopt.lower(module, ",".join(registry.split_at_level(pipeline, "kernel")[0]))


def _launches(module: object) -> list[str]:
    return [op.kernel.root_reference.data for op in module.walk()  # type: ignore[attr-defined]
            if isinstance(op, kernel.LaunchOp)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norms_inside_the_projections(dtype: torch.dtype) -> None:
    config = transformers.LlamaConfig(
        hidden_size=128, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, vocab_size=101, max_position_embeddings=64)
    model = build_model(config, seed=0, dtype=dtype)
    prog = capture_decode(model, 32)
    # With weight prefetches (off by default), which the norms' staging must not displace.
    inside = registry.with_options(
        registry.insert_before(BASE, "hoist-reduce-factors", "recompute-into-products"),
        f"warp-gemv{{prefetch_bytes={PREFETCH}}}")
    plain = _kernel_ir(prog.module.clone(), BASE)
    normed = _kernel_ir(prog.module.clone(), inside)
    # Both norms of every layer go (the first layer's with the embedding gather it was
    # fused with, now inside the projections too); the rotary tables are one launch of their
    # own either way. The first layer's value projection then waits for no launch, while its
    # query and key projections (their rotary embeddings inside) wait for the tables: two
    # launches where the other layers have one.
    assert len(_launches(normed)) == len(_launches(plain)) - 2 * config.num_hidden_layers + 1

    fused = [op for op in normed.walk() if isinstance(op, kernel.FuncOp)  # type: ignore[attr-defined]
             and op.sym_name.data.count("__") >= 2]  # the query, key and value projections
    assert fused
    for fn in fused:
        staged = [op for op in fn.body.block.ops if isinstance(op, kernel.SharedOp)
                  and op.result.name_hint == "xs"]
        assert len(staged) == 1, fn.sym_name.data  # one normalised row for the three
        first = next(op for op in fn.walk()
                     if isinstance(op, kernel.PrefetchOp | kernel.WaitPriorGridsOp))
        assert isinstance(first, kernel.PrefetchOp)

    gen = torch.Generator().manual_seed(4)
    ids = torch.randint(0, 101, (1, 1), generator=gen)
    caches = [torch.randn(cache_shape(model, 21), generator=gen).to(dtype)
              for _ in cache_names(config.num_hidden_layers)]
    args = interpreter_arrays(prog.arguments(ids, *caches))
    want = llmopt.interp.run(plain, [np.copy(a) for a in args])
    got = llmopt.interp.run(normed, [np.copy(a) for a in args], check_races=True)
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        # bf16: the staged row is the norm kernel's output, rounded alike; the sums differ
        # only in the order the statistics' partial sums are added.
        tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * np.abs(w).max())


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
@pytest.mark.parametrize("norms_inside", [False, True])
def test_decode_step_with_prefetches_compiles(arch: str, norms_inside: bool) -> None:
    """The decode step's CUDA — weight prefetches before the grid wait, the staged row —
    compiles with NVRTC for the Hopper targets (ptxas accepts the bulk prefetch)."""
    from llmopt.codegen.nvrtc import compile_cuda

    config = transformers.LlamaConfig(
        hidden_size=128, intermediate_size=192, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, vocab_size=101, max_position_embeddings=64)
    model = build_model(config, seed=0, dtype=torch.bfloat16)
    pipeline = f"lower-to-cuda{{arch={arch}}}"
    if norms_inside:
        pipeline = registry.insert_before(pipeline, "hoist-reduce-factors",
                                          "recompute-into-products")
    pipeline = registry.insert_before(pipeline, "kernel-to-cuda", "lengths-in-memory")
    pipeline = registry.with_options(pipeline, f"warp-gemv{{prefetch_bytes={PREFETCH}}}")
    source = llmopt.cuda_source(llmopt.lower(capture_decode(model, 32).module, pipeline))
    assert "cp.async.bulk.prefetch.L2.global" in source
    assert compile_cuda(source, arch=arch)[:4] == b"\x7fELF"
