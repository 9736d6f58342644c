"""``bench/sweep_gemm.py`` on the CPU: its arguments, and that a variant's pipeline lowers a
captured linear layer to CUDA."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import sweep_gemm  # noqa: E402

import llmopt  # noqa: E402
from llmopt.frontend.capture import capture  # noqa: E402


def test_arguments() -> None:
    assert sweep_gemm.parse_shapes("512x2048x2048,32x64x128") == [(512, 2048, 2048),
                                                                  (32, 64, 128)]
    assert sweep_gemm.parse_variant("a=split-k,register-tile") == ("a", "split-k,register-tile")
    with pytest.raises(ValueError, match="name=passes"):
        sweep_gemm.parse_variant("register-tile")
    assert sweep_gemm.variant_shapes("old@512x64x64+128x64x64") == (
        "old", [(512, 64, 64), (128, 64, 64)])
    assert sweep_gemm.variant_shapes("new") == ("new", None)
    assert sweep_gemm.pipeline("lower-to-cuda") == "lower-to-cuda"
    expanded = llmopt.registry.with_options("lower-to-cuda", "kernel-to-cuda{index_bitwidth=32}")
    assert sweep_gemm.pipeline(expanded) == expanded  # registry.with_options' form, whole


def test_a_bf16_product_lowers_to_the_tensor_cores() -> None:
    """``--dtype bfloat16``: the captured product's weights and inputs are bf16, and a
    variant may be the whole default pipeline."""
    captured = capture(sweep_gemm.Linear(64, 128).to(torch.bfloat16),
                       (torch.randn(1, 128, 64, dtype=torch.bfloat16),
                        torch.randn(1, 128, 128, dtype=torch.bfloat16)))
    module = llmopt.lower(captured.module, sweep_gemm.pipeline("lower-to-cuda"))
    source = llmopt.cuda_source(module, "")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in source


@pytest.mark.parametrize("form", ["transposed", "kn"])
def test_products_as_written_take_warpgroup_products(form: str) -> None:
    """On sm_90a ``x @ W.t()`` is one kernel reading ``W`` as ``F.linear`` does (K-major), and
    ``x @ W`` with ``W`` stored ``[K, N]`` reads it N-major (``imm-trans-b`` set)."""
    captured = capture(sweep_gemm.FORMS[form](128, 128).to(torch.bfloat16),
                       (torch.randn(1, 128, 128, dtype=torch.bfloat16),
                        torch.randn(1, 128, 128, dtype=torch.bfloat16)))
    source = llmopt.cuda_source(captured.module, "lower-to-cuda{arch=sm_90a}")
    assert source.count("__global__") == 1
    assert "wgmma.mma_async" in source and "mma.sync" not in source
    assert ("p, 1, 1, 0, 1;" in source) == (form == "kn")


def test_a_variant_lowers_to_async_copies() -> None:
    captured = capture(sweep_gemm.Linear(64, 128), (torch.randn(1, 32, 64),
                                                    torch.randn(1, 32, 128)))
    passes = ("split-k{split_k=1},register-tile{bm=32 bn=64 tm=2 tn=4},stage-inputs{bk=16},"
              "async-copy,pad-shared,vector-fragments")
    module = llmopt.lower(captured.module, sweep_gemm.pipeline(passes))
    source = llmopt.cuda_source(module, "")
    assert "__pipeline_memcpy_async" in source
    assert "((float4*)&stage" in source


def test_the_gate_up_variant_splits_both_reductions() -> None:
    """``--gate-up`` captures one kernel with two reductions; ``split-k`` writes partial sums
    for both and the summing kernel applies ``silu(g)·u``."""
    captured = capture(sweep_gemm.GateUp(64, 128), (torch.randn(1, 32, 64),))
    passes = "split-k{split_k=2},register-tile{bm=32 bn=64 tm=2 tn=4},stage-inputs"
    module = llmopt.lower(captured.module, sweep_gemm.pipeline(passes))
    source = llmopt.cuda_source(module, "")
    assert source.count("__global__") == 2
    assert "acc0" in source and "acc1" in source  # both reductions register-tiled
    assert "expf" in source  # silu, in the kernel summing the slices


def test_a_variant_may_bring_its_own_tail() -> None:
    """A variant naming ``tile-to-kernel`` ends the pipeline itself: here with 32-bit
    indices, which the captured 32×64×128 product allows in every kernel."""
    captured = capture(sweep_gemm.Linear(64, 128), (torch.randn(1, 32, 64),
                                                    torch.randn(1, 32, 128)))
    passes = ("split-k{split_k=1},register-tile{bm=32 bn=64 tm=2 tn=4},stage-inputs{bk=16},"
              "async-copy,pad-shared,vector-fragments,tile-to-kernel,canonicalize,cse,"
              "kernel-to-cuda{index_bitwidth=32}")
    assert sweep_gemm.pipeline(passes).count("kernel-to-cuda") == 1
    source = llmopt.cuda_source(llmopt.lower(captured.module, sweep_gemm.pipeline(passes)), "")
    assert "__pipeline_memcpy_async" in source
    assert "long long" not in source


def test_variants_lower_on_worker_processes() -> None:
    """``--jobs``: every (shape, variant) pair is lowered on a pool first; a variant that
    fails is kept as its exception, reported when it would be timed."""
    captured = capture(sweep_gemm.Linear(64, 128), (torch.randn(1, 32, 64),
                                                    torch.randn(1, 32, 128)))
    variants = [("a", None, "split-k{split_k=1},register-tile{bm=32 bn=64 tm=2 tn=4}"),
                ("b", [(32, 128, 64)], "register-tile{bm=-1}"),
                ("c", [(1, 2, 3)], "register-tile")]
    got = sweep_gemm.lower_variants({(32, 128, 64): str(captured.module)}, variants, 2)
    assert set(got) == {((32, 128, 64), "a"), ((32, 128, 64), "b")}
    assert "cuda.kernel" in str(got[(32, 128, 64), "a"])
    assert isinstance(got[(32, 128, 64), "b"], Exception)


@pytest.mark.parametrize(("gate_up", "form"), [(False, "linear"), (False, "transposed"),
                                             (False, "kn"), (True, "linear")])
def test_every_baseline_computes_the_case(gate_up: bool, form: str) -> None:
    """Each PyTorch baseline (``addmm`` and ``mm`` then ``+= r``; with ``--gate-up`` the eager
    form) computes the function its case's float64 reference does, however the module
    writes the product (``--form``), on fresh random inputs, and ``mm_add`` leaves the
    residual input as it was (it adds into the product)."""
    torch.manual_seed(3)
    module, inputs, ref, baselines, flop = sweep_gemm.case(8, 24, 16, gate_up, device="cpu",
                                                           form=form)
    kept = [t.clone() for t in inputs]
    assert set(baselines) == ({"eager"} if gate_up else {"addmm", "mm_add"})
    assert flop == (4 if gate_up else 2) * 8 * 24 * 16
    for fn in baselines.values():
        out = fn()
        assert out.shape[-2:] == ref.shape[-2:]
        torch.testing.assert_close(out.double().reshape(ref.shape), ref, rtol=1e-5, atol=1e-5)
    assert all(torch.equal(a, b) for a, b in zip(inputs, kept, strict=True))
    with torch.no_grad():
        torch.testing.assert_close(module(*inputs).double(), ref, rtol=1e-5, atol=1e-5)
