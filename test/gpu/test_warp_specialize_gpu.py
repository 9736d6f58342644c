"""Warp-specialised bf16 products on the GPU (sm_90a): ``lower-to-cuda{warp_specialize=true}``
gives the same bits as the default pipeline, with the products left in flight across a step
(``pending=1``) or not (the products and their order are the same; only who copies and how
the slots are handed over differ) and PyTorch's error against
float64, at row counts no tile divides and at K-long products.

Run on a GPU host: ``python -m pytest -m gpu test/gpu/test_warp_specialize_gpu.py -q``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from sweep_gemm import Linear  # noqa: E402  (x @ W^T + r, as the product benchmark)

import llmopt  # noqa: E402
from llmopt import registry  # noqa: E402


def _product(m: int, n: int, k: int, seed: int) -> tuple[Linear, torch.Tensor, torch.Tensor]:
    """A bf16 ``x @ W^T + r`` on the GPU, seeded: the block, ``x`` and ``r``."""
    gen = torch.Generator().manual_seed(seed)
    block = Linear(k, n)
    with torch.no_grad():
        block.proj.weight.copy_(torch.randn(n, k, generator=gen) / k ** 0.5)
    block = block.to(torch.bfloat16).cuda()
    x = torch.randn(1, m, k, generator=gen).to(torch.bfloat16).cuda()
    r = torch.randn(1, m, n, generator=gen).to(torch.bfloat16).cuda()
    return block, x, r


def _check_against_plain_and_float64(special: Any, plain: Any, block: Linear,
                                     x: torch.Tensor, r: torch.Tensor) -> None:
    """The specialised program's bits equal the plain one's, and its error against float64
    is at most twice PyTorch's own (plus a bf16 rounding)."""
    got, want = special(x, r), plain(x, r)
    assert torch.equal(got, want)
    ref = x.double() @ block.proj.weight.double().t() + r.double()
    err = ((got.double() - ref).abs().max() / ref.abs().max()).item()
    torch_err = ((block(x, r).double() - ref).abs().max() / ref.abs().max()).item()
    assert err <= 2 * torch_err + 2 ** -7


SHAPES = [(512, 2048, 2048), (100, 2048, 2048), (200, 3584, 3584), (2047, 2048, 5632),
          (512, 3584, 18944)]


@pytest.mark.gpu
@pytest.mark.parametrize("pending", [1, 0])
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_warp_specialised_product_matches_the_default_and_float64(m: int, n: int, k: int,
                                                                 pending: int) -> None:
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("warpgroup products need sm_90a")
    block, x, r = _product(m, n, k, seed=m + n + k)
    special = llmopt.compile(block, (x, r), registry.with_options(
        "lower-to-cuda{arch=sm_90a warp_specialize=true}", f"warp-specialize{{pending={pending}}}"))
    plain = llmopt.compile(block, (x, r), "lower-to-cuda{arch=sm_90a}")
    assert "mbarrier.try_wait.parity" in special.program.source
    _check_against_plain_and_float64(special, plain, block, x, r)


WIDE_TILE = "register-tile{bm=128 bn=256 tm=2 tn=64 blocked=3},async-copy{stages=3}"
"""128 × 256 block tiles: two consumer warpgroups of 64 × 256 accumulators (C = 256)."""


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), [(512, 3584, 3584), (200, 2048, 2048),
                                           (2047, 2048, 5632)])
def test_two_consumer_warpgroups_with_registers_a_role_match_the_default_and_float64(
        m: int, n: int, k: int) -> None:
    """``warp-specialize{producer_registers=40 consumer_registers=232}`` on 128 × 256 tiles
    (384 threads: the producer gives registers to the consumers with ``setmaxnreg``) gives
    the bits of the same tiles without a producer, and PyTorch's error against float64."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("warpgroup products need sm_90a")
    block, x, r = _product(m, n, k, seed=m + n + k + 1)
    special = llmopt.compile(block, (x, r), registry.with_options(
        "lower-to-cuda{arch=sm_90a warp_specialize=true}",
        f"{WIDE_TILE},warp-specialize{{producer_registers=40 consumer_registers=232}}"))
    plain = llmopt.compile(block, (x, r), registry.with_options(
        "lower-to-cuda{arch=sm_90a}", WIDE_TILE))
    source = special.program.source
    assert "__launch_bounds__(384, 1)" in source
    assert "setmaxnreg.dec.sync.aligned.u32 40;" in source
    _check_against_plain_and_float64(special, plain, block, x, r)


@pytest.mark.gpu
@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_tensor_copies_match_the_default_and_float64(m: int, n: int, k: int,
                                                     wide: bool) -> None:
    """``lower-to-cuda{warp_specialize=true tensor_copies=true}``: the producer fills each
    slot with one bulk tensor copy a tile (``cp.async.bulk.tensor``, the tensor maps made on
    the host), ragged rows read as zeros past the end instead of clamped, and the bits are
    the default pipeline's (the same tiles without a producer), on 64 × 128 tiles and on
    128 × 256 tiles with registers a role."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("bulk tensor copies and warpgroup products need sm_90a")
    block, x, r = _product(m, n, k, seed=m + n + k + 2)
    tiles = WIDE_TILE if wide else ""
    roles = "producer_registers=40 consumer_registers=232" if wide else ""
    special = llmopt.compile(block, (x, r), registry.with_options(
        "lower-to-cuda{arch=sm_90a warp_specialize=true tensor_copies=true}",
        ",".join(p for p in (tiles, f"warp-specialize{{{roles}}}" if roles else "") if p)))
    plain = llmopt.compile(block, (x, r), registry.with_options(
        "lower-to-cuda{arch=sm_90a}", tiles) if tiles else "lower-to-cuda{arch=sm_90a}")
    assert "cp.async.bulk.tensor" in special.program.source
    _check_against_plain_and_float64(special, plain, block, x, r)


@pytest.mark.gpu
@pytest.mark.parametrize("cuda_graph", [False, True])
def test_symbolic_length_product_gets_two_roles_and_matches_float64(cuda_graph: bool) -> None:
    """A bf16 product over a symbolic number of rows (at most 600; 2048 × 2048, 32 chunks of
    64) is compiled once with the default pipeline: its length buckets' products get a
    producer warpgroup with bulk tensor copies (a map of the rows passed each call, zeros
    past them), and every length (one row, no tile divides, a tile exactly, the bound) is
    within PyTorch's error against float64 and equal to ``lower-to-cuda{roles=1}``'s
    results up to the order of the sums."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("bulk tensor copies and warpgroup products need sm_90a")
    block, x, r = _product(600, 2048, 2048, seed=7)
    shapes = {"dynamic": {"x": {1: "seq"}, "r": {1: "seq"}}, "max": {"seq": 600}}
    two = llmopt.compile(block, (x, r), "lower-to-cuda{arch=sm_90a}", cuda_graph=cuda_graph,
                         **shapes)
    one = llmopt.compile(block, (x, r), "lower-to-cuda{arch=sm_90a roles=1}", **shapes)
    assert "cp.async.bulk.tensor" in two.program.source
    assert "cp.async.bulk.tensor" not in one.program.source
    for m in (1, 100, 517, 64, 600, 100):
        xs, rs = x[:, :m].contiguous(), r[:, :m].contiguous()
        got = two(xs, rs)
        ref = xs.double() @ block.proj.weight.double().t() + rs.double()
        scale = ref.abs().max()
        err = ((got.double() - ref).abs().max() / scale).item()
        torch_err = ((block(xs, rs).double() - ref).abs().max() / scale).item()
        assert err <= 2 * torch_err + 2 ** -7, m
        other = ((one(xs, rs).double() - ref).abs().max() / scale).item()
        assert err <= 2 * other + 2 ** -7, m


PLAIN_SHAPES = [(512, 2048, 2048), (128, 5632, 2048), (512, 3584, 3584), (128, 2048, 2048),
                (512, 5632, 2048), (512, 18944, 3584), (128, 18944, 3584)]
"""Bare ``x @ Wᵀ`` (no bias, no residual) of the op suite's projections: the first three
were outside tolerance in its H100 run at a3c90c7 (``bench/results/ops-bfloat16-h100.md``),
the next two within it; 512 × 3584 and 512 × 5632 take the 112- and 176-column warpgroup
tiles, the last two the 192- and 176-column ones overhanging 18944 columns."""


@pytest.mark.gpu
@pytest.mark.parametrize("cuda_graph", [False, True])
@pytest.mark.parametrize(("m", "n", "k"), PLAIN_SHAPES)
def test_bare_product_of_the_default_pipeline_matches_float64(m: int, n: int, k: int,
                                                              cuda_graph: bool) -> None:
    """A bias-free ``nn.Linear`` in bf16 with the default pipeline (its product two-role,
    bulk tensor copies, the result stored with nothing added), called three times: each
    result within twice PyTorch's own error against float64, as the residual form above."""
    _check_bare_product(m, n, k, cuda_graph, "lower-to-cuda{arch=sm_90a}")


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), PLAIN_SHAPES[:3])
def test_bare_product_with_products_in_flight_matches_float64(m: int, n: int, k: int) -> None:
    """``warp-specialize{pending=1}`` on the bare products it got wrong when its last wait
    followed the loop (ptxas scheduled the epilogue's reads of the last group's
    accumulators before that wait)."""
    _check_bare_product(m, n, k, False, registry.with_options(
        "lower-to-cuda{arch=sm_90a}", "warp-specialize{pending=1}"))


def _check_bare_product(m: int, n: int, k: int, cuda_graph: bool, pipeline: str) -> None:
    """A bias-free bf16 ``nn.Linear`` compiled with ``pipeline``, called three times: each
    result within twice PyTorch's own error against float64."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("bulk tensor copies and warpgroup products need sm_90a")
    gen = torch.Generator().manual_seed(m + n + k + 3)
    linear = torch.nn.Linear(k, n, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(n, k, generator=gen) / k ** 0.5)
    linear = linear.to(torch.bfloat16).cuda()
    x = torch.randn(1, m, k, generator=gen).to(torch.bfloat16).cuda()
    compiled = llmopt.compile(linear, (x,), pipeline, cuda_graph=cuda_graph)
    ref = x.double() @ linear.weight.double().t()
    scale = ref.abs().max()
    torch_err = ((linear(x).double() - ref).abs().max() / scale).item()
    for call in range(3):
        err = ((compiled(x).double() - ref).abs().max() / scale).item()
        assert err <= 2 * torch_err + 2 ** -7, (call, err, torch_err)


CLUSTER_SHAPES = [(512, 18944, 3584), (512, 5632, 2048), (512, 3584, 3584), (500, 2048, 5632),
                  (1000, 5632, 2048), (200, 18944, 3584), (128, 18944, 3584)]
"""Products in clusters of two blocks sharing a tile: 512 rows (four row bands, the weight
tile shared), 500 and 1000 (ragged last band), 200 (two bands) and 128 (one band: pairs of
column bands share the activations' tile, if any kernel takes the cluster)."""


@pytest.mark.gpu
@pytest.mark.parametrize("pending", [0, 1])
@pytest.mark.parametrize(("m", "n", "k"), CLUSTER_SHAPES)
def test_clustered_products_match_the_default_and_float64(m: int, n: int, k: int,
                                                          pending: int) -> None:
    """``lower-to-cuda{cluster=2}``: the shared tile multicast to both blocks of a cluster
    changes who copies it, not the products, so the bits equal the default pipeline's (and
    are within twice PyTorch's error against float64), with products in flight or not."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("clusters and bulk tensor copies need sm_90a")
    block, x, r = _product(m, n, k, seed=m + n + k + pending)
    base = "lower-to-cuda{arch=sm_90a cluster=2}"
    special = llmopt.compile(block, (x, r), registry.with_options(
        base, f"warp-specialize{{pending={pending}}}") if pending else base)
    plain = llmopt.compile(block, (x, r), registry.with_options(
        "lower-to-cuda{arch=sm_90a}", f"warp-specialize{{pending={pending}}}")
        if pending else "lower-to-cuda{arch=sm_90a}")
    for _ in range(3):
        _check_against_plain_and_float64(special, plain, block, x, r)


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), PLAIN_SHAPES[4:6])
def test_clustered_bare_products_match_float64(m: int, n: int, k: int) -> None:
    """Bare products in clusters, in and out of a CUDA graph."""
    for graph in (False, True):
        _check_bare_product(m, n, k, graph, "lower-to-cuda{arch=sm_90a cluster=2}")
