"""Every op of the foundation, compiled by llmopt and run on the GPU, against PyTorch.

The reference is the same function evaluated in float64 from the same float32 inputs.
Tolerance comes from float32 rounding: each output is a sum of at most ``n`` rounded terms
(``n`` = the reduction length, 1 for elementwise ops), so the error relative to the
largest reference value stays below ``c * eps32 * sqrt(n)`` for random data with
``c = 16`` covering the few-ulp error of CUDA's transcendental functions.

Run on a GPU host: ``python -m pytest -m gpu test/gpu -q -s`` (``-s`` shows the table).
Set ``LLMOPT_REPORT=path.json`` to also write the measured errors.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

EPS32 = 2.0**-23
RESULTS: list[dict[str, Any]] = []


class RMSNorm(torch.nn.Module):
    """Llama's RMSNorm as Hugging Face writes it (pow, mean, add, rsqrt, mul)."""

    def __init__(self, hidden: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


class FusedRMSNorm(torch.nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def _linear(n_in: int, n_out: int, bias: bool) -> torch.nn.Module:
    layer = torch.nn.Linear(n_in, n_out, bias=bias)
    torch.nn.init.normal_(layer.weight, std=n_in**-0.5)
    if bias:
        torch.nn.init.normal_(layer.bias)
    return layer


F = torch.nn.functional


def _merged_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal GQA attention with its heads concatenated, as a decoder layer computes it."""
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return out.transpose(1, 2).reshape(q.shape[0], q.shape[2], q.shape[1] * q.shape[3])


S = (1, 7, 100)  # an odd size that divides no tile
CASES: list[tuple[str, Callable[..., Any], list[tuple[int, ...]], int]] = [
    # name, function or module, input shapes, reduction length
    ("add", torch.add, [S, S], 1),
    ("add-broadcast", torch.add, [(1, 128, 2048), (2048,)], 1),
    ("sub", torch.sub, [S, S], 1),
    ("mul", torch.mul, [(1, 128, 5632), (1, 128, 5632)], 1),
    ("div", lambda a, b: a / (b * b + 0.5), [S, S], 1),
    ("neg", torch.neg, [S], 1),
    ("exp", torch.exp, [S], 1),
    ("rsqrt", lambda x: torch.rsqrt(x * x + 0.1), [S], 1),
    ("sqrt", lambda x: torch.sqrt(x * x), [S], 1),
    ("pow-2", lambda x: x.pow(2), [S], 1),
    ("pow-3", lambda x: x.pow(3.0), [S], 1),
    ("pow-1.5", lambda x: (x * x + 0.1).pow(1.5), [S], 1),
    ("silu", F.silu, [S], 1),
    ("sigmoid", torch.sigmoid, [S], 1),
    ("relu", torch.relu, [S], 1),
    ("tanh", torch.tanh, [S], 1),
    ("maximum", torch.maximum, [S, S], 1),
    ("sum", lambda x: x.sum(-1), [(1, 128, 2048)], 2048),
    ("sum-odd", lambda x: x.sum(-1, keepdim=True), [S], 100),
    ("mean", lambda x: x.mean(-1, keepdim=True), [(1, 512, 3584)], 3584),
    ("amax", lambda x: x.amax(-1), [(1, 128, 2048)], 1),
    ("softmax", lambda x: torch.softmax(x, -1), [(1, 32, 128, 128)], 128),
    ("softmax-odd", lambda x: torch.softmax(x, -1), [S], 100),
    ("rmsnorm-1x128x2048", RMSNorm(2048), [(1, 128, 2048)], 2048),
    ("rmsnorm-1x512x3584", RMSNorm(3584, 1e-6), [(1, 512, 3584)], 3584),
    ("rmsnorm-odd", RMSNorm(100), [S], 100),
    ("rms_norm-1x128x2048", FusedRMSNorm(2048), [(1, 128, 2048)], 2048),
    ("linear-bias-128x2048x5632", _linear(2048, 5632, True), [(1, 128, 2048)], 2048),
    ("linear-512x3584x18944", _linear(3584, 18944, False), [(1, 512, 3584)], 3584),
    ("linear-odd", _linear(100, 33, True), [S], 100),
    ("silu-mul-1x128x5632", lambda a, b: F.silu(a) * b, [(1, 128, 5632)] * 2, 1),
    ("silu-mul-odd", lambda a, b: F.silu(a) * b, [S, S], 1),
    ("matmul", torch.matmul, [(1, 128, 64), (1, 64, 96)], 64),
    ("bmm", torch.bmm, [(4, 33, 17), (4, 17, 7)], 17),
    ("transpose", lambda x: x.transpose(1, 2) * 2.0, [(1, 128, 64)], 1),
    ("permute", lambda x: x.permute(0, 2, 1, 3) + 1.0, [(1, 7, 4, 16)], 1),
    ("reshape", lambda x: x.reshape(1, 7, 4, 25) * 3.0, [S], 1),
    ("unsqueeze-expand", lambda x: x.unsqueeze(2).expand(1, 7, 3, 100) * 1.5, [S], 1),
    ("slice", lambda x: x[..., 10:60] + 1.0, [S], 1),
    ("cat", lambda a, b: torch.cat([a, b], -1) * 2.0, [S, (1, 7, 28)], 1),
    ("rotate-half", lambda x: torch.cat([-x[..., 32:], x[..., :32]], -1), [(1, 32, 7, 64)], 1),
    # causal GQA attention, heads concatenated: one flash-attention kernel
    ("sdpa-causal-1x32x512x64", lambda q, k, v: _merged_sdpa(q, k, v),
     [(1, 32, 512, 64), (1, 4, 512, 64), (1, 4, 512, 64)], 512),
    ("sdpa-causal-1x28x128x128", lambda q, k, v: _merged_sdpa(q, k, v),
     [(1, 28, 128, 128), (1, 4, 128, 128), (1, 4, 128, 128)], 128),
    ("sdpa-1x16x256x64", F.scaled_dot_product_attention, [(1, 16, 256, 64)] * 3, 256),
]


def _run_reference(fn: Any, args: list[Any]) -> Any:
    if isinstance(fn, torch.nn.Module):
        import copy

        return copy.deepcopy(fn).double()(*[a.double() for a in args])
    return fn(*[a.double() for a in args])


@pytest.mark.parametrize("name,fn,shapes,n", CASES, ids=[c[0] for c in CASES])
def test_op_matches_pytorch(name: str, fn: Any, shapes: list[tuple[int, ...]], n: int) -> None:
    import llmopt

    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    gen = torch.Generator().manual_seed(hash(name) % 2**31)
    args = [torch.randn(s, generator=gen) for s in shapes]
    if isinstance(fn, torch.nn.Module):
        fn = fn.cuda()
    compiled = llmopt.compile(fn, [a.cuda() for a in args])
    out = compiled(*[a.cuda() for a in args])
    torch.cuda.synchronize()
    ref = _run_reference(fn.cpu() if isinstance(fn, torch.nn.Module) else fn, args)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert torch.isfinite(out).all(), "non-finite output"
    err = (out.double().cpu() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
    tol = 16 * EPS32 * math.sqrt(n)
    RESULTS.append({"op": name, "shapes": [list(s) for s in shapes],
                    "max_rel_err": err, "tol": tol})
    print(f"{name:32s} {str(list(shapes[0])):18s} max|err|/max|ref| = {err:.2e} (tol {tol:.1e})")
    assert err <= tol


def teardown_module() -> None:
    path = os.environ.get("LLMOPT_REPORT")
    if path and RESULTS:
        with open(path, "w") as f:
            json.dump(RESULTS, f, indent=1)


NAN_CASES = [
    ("maximum", lambda x, y: torch.maximum(x, y)),
    ("amax", lambda x, y: x.amax(-1) + y.amax(-1)),
    ("relu", lambda x, y: torch.relu(x) * y),
    ("minimum", lambda x, y: torch.minimum(x, y)),
    ("amin", lambda x, y: x.amin(-1) + y.amin(-1)),
    ("amin-dim0", lambda x, y: y.amin(0, keepdim=True) - x[:1]),
    ("clamp", lambda x, y: x.clamp(-0.5, 0.5) * y),
    ("clamp-min-max", lambda x, y: x.clamp(min=0.25) - y.clamp(max=-0.25)),
    ("clamp-tensor", lambda x, y: x.clamp(y, y + 1.0)),
    ("clamp_min-clamp_max", lambda x, y: torch.clamp_min(x, y) - torch.clamp_max(y, 0.0)),
    ("hardtanh-relu6", lambda x, y: torch.nn.functional.hardtanh(x)
     + torch.nn.functional.relu6(y * 4.0)),
]


@pytest.mark.parametrize("nan_min_max", [True, False], ids=["min-max-NaN", "c-form"])
@pytest.mark.parametrize("name,fn", NAN_CASES, ids=[c[0] for c in NAN_CASES])
def test_max_propagates_nan(name: str, fn: Any, nan_min_max: bool) -> None:
    """``torch.maximum``/``minimum``, ``amax``/``amin``, ``relu`` and ``clamp`` (a maximum,
    then a minimum) are NaN wherever an operand (a row, a column) holds a NaN, as in
    PyTorch: sm_80 and newer compute their ``maximumf``/``minimumf`` as ``max.NaN``/
    ``min.NaN``, the C form elsewhere (``kernel-to-cuda{nan_min_max=false}``); both must
    keep PyTorch's answer."""
    import llmopt
    from llmopt.registry import with_options

    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    pipeline = ("lower-to-cuda" if nan_min_max
                else with_options("lower-to-cuda", "kernel-to-cuda{nan_min_max=false}"))
    gen = torch.Generator().manual_seed(7)
    x, y = (torch.randn(64, 96, generator=gen) for _ in range(2))
    x[3, 5] = y[10, 7] = y[3, 90] = float("nan")
    x[20, :] = float("nan")
    compiled = llmopt.compile(fn, [x.cuda(), y.cuda()], pipeline)
    out = compiled(x.cuda(), y.cuda()).cpu()
    ref = fn(x, y)
    assert torch.equal(torch.isnan(out), torch.isnan(ref))
    assert torch.isnan(ref).any()
    keep = ~torch.isnan(ref)
    assert torch.equal(out[keep], ref[keep])


ARG_CASES = [
    ("argmax", lambda x: x.argmax(-1)),
    ("argmin-dim0-keepdim", lambda x: x.argmin(0, keepdim=True)),
    ("argmax-all", lambda x: x.argmax()),
    ("max-dim", lambda x: x.max(-1)),
    ("min-dim-keepdim", lambda x: x.min(0, keepdim=True)),
]


@pytest.mark.parametrize("nan_min_max", [True, False], ids=["min-max-NaN", "c-form"])
@pytest.mark.parametrize("dtype,shape", [(torch.float32, (64, 96)), (torch.bfloat16, (4, 32000)),
                                         (torch.int64, (64, 96))], ids=["f32", "bf16-vocab", "i64"])
@pytest.mark.parametrize("name,fn", ARG_CASES, ids=[c[0] for c in ARG_CASES])
def test_argmax_and_max_dim_take_the_first_index(name: str, fn: Any, dtype: torch.dtype,
                                                 shape: tuple[int, int], nan_min_max: bool
                                                 ) -> None:
    """``argmax``/``argmin`` and ``max(dim)``/``min(dim)`` (an ``amax``, then an ``amin`` of
    the indices that hold it) give PyTorch's indices exactly on inputs full of ties: the
    first index of the extreme, or of the first NaN of a row; values NaN where PyTorch's
    are. Both forms of the NaN-propagating minimum and maximum."""
    import llmopt
    from llmopt.registry import with_options

    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    pipeline = ("lower-to-cuda" if nan_min_max
                else with_options("lower-to-cuda", "kernel-to-cuda{nan_min_max=false}"))
    gen = torch.Generator().manual_seed(9)
    x = torch.randint(-3, 4, shape, generator=gen).to(dtype)
    if dtype.is_floating_point:
        x[3, 5] = x[3, 2] = x[2, 7] = float("nan")
        x[1, 4] = x[1, 9] = float("inf")
        x[0, :] = float("-inf")
    compiled = llmopt.compile(fn, [x.cuda()], pipeline)
    got, want = compiled(x.cuda()), fn(x)
    got = [got] if isinstance(got, torch.Tensor) else list(got)
    want = [want] if isinstance(want, torch.Tensor) else list(want)
    for g, w in zip(got, want, strict=True):
        g = g.cpu()
        assert g.dtype == w.dtype and g.shape == w.shape
        if w.dtype.is_floating_point:
            assert torch.equal(torch.isnan(g), torch.isnan(w))
            keep = ~torch.isnan(w)
            assert torch.equal(g[keep], w[keep])
        else:
            assert torch.equal(g, w), (g, w)
