"""Every pass of ``lower-to-cuda``, checked numerically on a corpus of small programs.

Each program is captured from PyTorch, lowered with ``check_numerics`` (every pass
interpreted on the CPU and compared with the result before it), then:

* the Kernel-IR result is compared with PyTorch evaluated in float64 on the same inputs,
  within the dtype-derived tolerance of :func:`llmopt.numerics.tolerance`;
* every generated kernel is compiled by NVRTC to CUBIN for sm_90 (no GPU needed).

:data:`HALF` runs a subset of both in ``bf16`` and ``f16`` (weights and inputs in the 16-bit
type, the float64 reference computed from the same 16-bit values): the tolerance is then
that of the ``f32`` arithmetic plus ``HALF_ULPS`` (4) times the storage type's epsilon
(``2**-7`` for ``bf16``, ``2**-10`` for ``f16``), relative to the largest output; PyTorch's own
16-bit result on the CPU must be within the same bound.

Sizes 7, 33, 100 and 1000 divide no tile and no block. The ``ragged`` cases are products
large enough to be register-tiled by tiles that overhang them (7 to 1000 rows; K and N no
multiples of 32 among them), attention with query and key blocks overhanging the sequence,
and a decoder layer of a small Llama at 37 tokens (:data:`RAGGED`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import llmopt  # noqa: E402
from llmopt.numerics import compare, tolerance  # noqa: E402

TO_KERNEL = ("torch-to-prim,canonicalize,prim-to-loop,fuse-kernels,canonicalize,cse,"
             "loop-to-tile,tile-to-kernel,canonicalize,cse")
TO_TILE = ("torch-to-prim,canonicalize,prim-to-loop,fuse-kernels{recompute_limit=0},"
           "canonicalize,cse,hoist-reduce-factors,flash-attention,loop-to-tile,split-k,"
           "register-tile")
F = torch.nn.functional


class RMSNorm(torch.nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


class Fused(torch.nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, 1e-6)


def linear(n_in: int, n_out: int, bias: bool) -> torch.nn.Module:
    torch.manual_seed(n_in * 7 + n_out)
    return torch.nn.Linear(n_in, n_out, bias=bias)


CORPUS: list[tuple[str, Callable[..., Any], list[tuple[int, ...]]]] = [
    ("add", torch.add, [(7, 33), (7, 33)]),
    ("add-broadcast", torch.add, [(3, 7, 33), (33,)]),
    ("sub", torch.sub, [(100,), (100,)]),
    ("mul", torch.mul, [(7, 100), (7, 1)]),
    ("div", lambda a, b: a / (b * b + 0.5), [(33,), (33,)]),
    ("neg", torch.neg, [(1000,)]),
    ("exp", torch.exp, [(7, 33)]),
    ("rsqrt", lambda x: torch.rsqrt(x * x + 0.1), [(100,)]),
    ("sqrt", lambda x: torch.sqrt(x * x + 0.1), [(100,)]),
    ("pow", lambda x: x.pow(2) + x.pow(3.0), [(33,)]),
    ("silu", F.silu, [(7, 100)]),
    ("sigmoid", torch.sigmoid, [(7, 33)]),
    ("relu", torch.relu, [(1000,)]),
    ("tanh", torch.tanh, [(7, 33)]),
    ("maximum", torch.maximum, [(7, 33), (7, 33)]),
    ("sum", lambda x: x.sum(-1), [(7, 1000)]),
    ("sum-dims", lambda x: x.sum((0, 2), keepdim=True), [(3, 7, 33)]),
    ("mean", lambda x: x.mean(-1, keepdim=True), [(7, 100)]),
    ("amax", lambda x: x.amax(-1), [(33, 100)]),
    ("softmax", lambda x: torch.softmax(x, -1), [(2, 7, 100)]),
    ("softmax-dim0", lambda x: torch.softmax(x, 0), [(33, 7)]),
    ("rmsnorm", RMSNorm(100), [(1, 7, 100)]),
    ("rmsnorm-1000", RMSNorm(1000), [(1, 7, 1000)]),
    ("rms_norm", Fused(33), [(7, 33)]),
    ("linear-bias", linear(100, 33, True), [(1, 7, 100)]),
    ("linear", linear(33, 7, False), [(1, 100, 33)]),
    ("matmul", torch.matmul, [(7, 33), (33, 100)]),
    ("matmul-batched", torch.matmul, [(2, 7, 33), (33, 7)]),
    ("bmm", torch.bmm, [(3, 7, 33), (3, 33, 7)]),
    ("matmul-transposed", lambda x, w: x @ w.t(), [(7, 33), (100, 33)]),
    ("bmm-transposed", lambda a, b: a @ b.transpose(1, 2), [(3, 7, 33), (3, 5, 33)]),
    ("silu-mul", lambda a, b: F.silu(a) * b, [(7, 100), (7, 100)]),
    ("transpose", lambda x: x.transpose(0, 1) * 2.0, [(7, 33)]),
    ("permute", lambda x: x.permute(2, 0, 1) + 1.0, [(7, 3, 33)]),
    ("reshape", lambda x: x.reshape(7, 4, 25) * 3.0, [(7, 100)]),
    ("unsqueeze-expand", lambda x: x.unsqueeze(1).expand(7, 3, 33) * 1.5, [(7, 33)]),
    ("slice", lambda x: x[:, 10:60:3] + 1.0, [(7, 100)]),
    ("cat", lambda a, b: torch.cat([a, b], -1) * 2.0, [(7, 33), (7, 7)]),
    ("rotate-half", lambda x: torch.cat([-x[..., 50:], x[..., :50]], -1), [(7, 100)]),
    ("mlp", lambda x, a, b, c: (F.silu(x @ a) * (x @ b)) @ c,
     [(7, 33), (33, 100), (33, 100), (100, 33)]),
]


def _sdpa(q: Any, k: Any, v: Any) -> Any:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def _sdpa_plain(q: Any, k: Any, v: Any) -> Any:
    return F.scaled_dot_product_attention(q, k, v)


RAGGED: list[tuple[str, Callable[..., Any], list[tuple[int, ...]]]] = [
    ("linear-ragged-7", linear(100, 600, False), [(1, 7, 100)]),
    ("linear-ragged-17", linear(96, 272, True), [(1, 17, 96)]),
    ("linear-ragged-100", linear(64, 200, False), [(1, 100, 64)]),
    ("linear-ragged-200", linear(256, 40, True), [(1, 200, 256)]),
    ("linear-ragged-255", linear(128, 72, False), [(1, 255, 128)]),
    ("matmul-ragged-1000", torch.matmul, [(1000, 32), (32, 40)]),
    ("matmul-transposed-ragged-100", lambda x, w, r: x @ w.T + r, [(100, 64), (72, 64), (100, 72)]),
    ("mlp-ragged-100", lambda x, a, b, c: (F.silu(x @ a) * (x @ b)) @ c,
     [(100, 64), (64, 96), (64, 96), (96, 64)]),
    ("sdpa-ragged-37", _sdpa, [(1, 4, 37, 16), (1, 2, 37, 16), (1, 2, 37, 16)]),
    ("sdpa-ragged-100", _sdpa_plain, [(1, 2, 100, 32), (1, 2, 100, 32), (1, 2, 100, 32)]),
]
"""Products and attention on tiles no size divides (see the module docstring)."""
RAGGED_NAMES = {c[0] for c in RAGGED}


HALF_NAMES = ("add-broadcast", "div", "exp", "silu", "sum", "amax", "softmax", "rmsnorm",
              "rms_norm", "linear-bias", "matmul-batched", "rotate-half", "mlp",
              "linear-ragged-17", "sdpa-ragged-37", "matmul-transposed-ragged-100")
"""The cases also run in ``bf16`` and ``f16``."""
HALF = [(name, fn, shapes, dtype) for name, fn, shapes in CORPUS + RAGGED if name in HALF_NAMES
        for dtype in ("bfloat16", "float16")]


def to_numpy(tensor: Any) -> np.ndarray:
    """A tensor's values as a numpy array of its dtype (``bf16`` as ``ml_dtypes.bfloat16``)."""
    if tensor.dtype == torch.bfloat16:
        import ml_dtypes

        return tensor.detach().float().numpy().astype(ml_dtypes.bfloat16)
    return tensor.detach().numpy()


def _reference(fn: Any, args: list[Any]) -> list[np.ndarray]:
    if isinstance(fn, torch.nn.Module):
        import copy

        out = copy.deepcopy(fn).double()(*[a.double() for a in args])
    else:
        out = fn(*[a.double() for a in args])
    return [out.detach().numpy()]


@pytest.mark.parametrize("name,fn,shapes", CORPUS + RAGGED,
                         ids=[c[0] for c in CORPUS + RAGGED])
def test_every_pass_keeps_the_meaning(name: str, fn: Any, shapes: list[tuple[int, ...]]) -> None:
    from llmopt.codegen.nvrtc import compile_cuda

    gen = torch.Generator().manual_seed(sum(map(ord, name)))
    args = [torch.randn(s, generator=gen) for s in shapes]
    captured_module = llmopt.capture(fn, args)

    report = llmopt.check_numerics(captured_module, "lower-to-cuda", seed=3)
    assert report.ok, f"{report}"
    names = [p.name for p in report.passes]
    for expected in ("torch-to-prim", "prim-to-loop", "fuse-kernels", "loop-to-tile",
                     "tile-to-kernel", "kernel-to-cuda"):
        assert expected in names

    # The Kernel-IR program against PyTorch in float64, on the same inputs.
    kernel_module = llmopt.lower(captured_module.clone(), TO_KERNEL)
    params = [p.detach().numpy() for p in (fn.parameters() if isinstance(fn, torch.nn.Module)
                                           else [])]
    got = llmopt.interp.run(kernel_module, [*params, *[a.numpy() for a in args]])
    _, rel = compare(got, _reference(fn, args))
    assert rel <= tolerance(captured_module), (rel, tolerance(captured_module))

    # Every generated kernel compiles.
    source = llmopt.cuda_source(captured_module)
    assert source.count("__global__") >= 1
    if name in RAGGED_NAMES:  # tiled by tiles that overhang: clamped reads, guarded writes
        assert "min(" in source and "if (" in source, source
    cubin = compile_cuda(source, arch="sm_90")
    assert cubin[:4] == b"\x7fELF"


def test_decoder_layer_at_a_ragged_length() -> None:
    """A Llama decoder layer (hidden 128, 4 heads of 32 on 2 KV heads) at 37 tokens: every
    product register-tiled by overhanging tiles, attention one flash kernel whose last
    blocks overhang the sequence; every pass keeps the meaning, and the Kernel IR matches
    the layer in float64."""
    pytest.importorskip("transformers")
    import copy

    from llmopt.frontend.models import build_model, capture_layer, model_config

    config = model_config({"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 128,
                           "intermediate_size": 192, "num_attention_heads": 4,
                           "num_key_value_heads": 2, "vocab_size": 64,
                           "max_position_embeddings": 64})
    model = build_model(config, seed=3)
    program = capture_layer(model, 37)
    module = program.module
    report = llmopt.check_numerics(module, "lower-to-cuda", seed=5)
    assert report.ok, f"{report}"
    tile_ir = llmopt.lower(module.clone(), TO_TILE)
    flash = [op for op in tile_ir.walk() if "llmopt.flash" in op.attributes]
    assert len(flash) == 1 and " clamp :" in str(flash[0])
    tiled = [op for op in tile_ir.walk() if op.name == "tile.kernel" and "registers" in str(op)
             and " clamp :" in str(op)]
    assert len(tiled) >= 4, tile_ir  # q/k/v, o, gate/up and down projections, ragged
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(1, 37, 128, generator=gen)
    from llmopt.frontend.models import position_embeddings

    cos, sin = position_embeddings(model, 37)
    kernel_module = llmopt.lower(module.clone(), TO_KERNEL)
    params = [program.params[name].detach().numpy() for name in program.param_names]
    got = llmopt.interp.run(kernel_module, [*params, x.numpy(), cos.numpy(), sin.numpy()])
    layer = copy.deepcopy(model.model.layers[0]).double()
    want = layer(x.double(), attention_mask=None,
                 position_embeddings=(cos.double(), sin.double()))
    want = want[0] if isinstance(want, tuple) else want
    _, rel = compare(got, [want.detach().numpy()])
    assert rel <= tolerance(module), (rel, tolerance(module))


@pytest.mark.parametrize("name,fn,shapes,dtype", HALF, ids=[f"{c[0]}-{c[3]}" for c in HALF])
def test_half_precision_keeps_the_meaning(name: str, fn: Any, shapes: list[tuple[int, ...]],
                                          dtype: str) -> None:
    """The program in ``bf16``/``f16``: every pass keeps the meaning, the Kernel-IR result is
    within the 16-bit tolerance of float64 (and so is PyTorch's own 16-bit result, which
    the tolerance must admit), and the kernels compile, with 16-bit pointers and conversions."""
    import copy

    from llmopt.codegen.nvrtc import compile_cuda

    half = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(sum(map(ord, name)) + len(dtype))
    args = [torch.randn(s, generator=gen).to(half) for s in shapes]
    fn = copy.deepcopy(fn).to(half) if isinstance(fn, torch.nn.Module) else fn
    captured_module = llmopt.capture(fn, args)
    report = llmopt.check_numerics(captured_module, "lower-to-cuda", seed=3)
    assert report.ok, f"{report}"

    kernel_module = llmopt.lower(captured_module.clone(), TO_KERNEL)
    params = [to_numpy(p) for p in (fn.parameters() if isinstance(fn, torch.nn.Module) else [])]
    got = llmopt.interp.run(kernel_module, [*params, *[to_numpy(a) for a in args]])
    want = _reference(fn, args)
    limit = tolerance(captured_module)
    eps = 2.0**-7 if dtype == "bfloat16" else 2.0**-10
    assert 4 * eps <= limit < 4 * eps + 0.05, limit  # the storage term dominates
    _, rel = compare(got, want)
    _, torch_rel = compare([fn(*args).detach().double().numpy()], want)
    assert rel <= limit, (rel, limit)
    assert torch_rel <= limit, (torch_rel, limit)

    source = llmopt.cuda_source(captured_module)
    spelled = "__nv_bfloat16" if dtype == "bfloat16" else "__half"
    assert spelled in source and ("cuda_bf16.h" if dtype == "bfloat16" else "cuda_fp16.h") in source
    assert compile_cuda(source, arch="sm_90")[:4] == b"\x7fELF"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_decoder_layer_in_half_precision(dtype: str) -> None:
    """The small Llama layer of :func:`test_decoder_layer_at_a_ragged_length` with weights and
    activations in ``bf16``/``f16``: every pass keeps the meaning, the Kernel IR is within
    the 16-bit tolerance of the layer in float64 (from the same 16-bit weights and inputs),
    no worse than twice PyTorch's own 16-bit error plus one ulp, and the CUDA compiles."""
    pytest.importorskip("transformers")
    import copy

    from llmopt.codegen.nvrtc import compile_cuda
    from llmopt.frontend.models import (
        build_model,
        capture_layer,
        model_config,
        position_embeddings,
    )

    half = getattr(torch, dtype)
    config = model_config({"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 128,
                           "intermediate_size": 192, "num_attention_heads": 4,
                           "num_key_value_heads": 2, "vocab_size": 64,
                           "max_position_embeddings": 64})
    model = build_model(config, seed=3).to(half)
    program = capture_layer(model, 37)
    module = program.module
    report = llmopt.check_numerics(module, "lower-to-cuda", seed=5)
    assert report.ok, f"{report}"
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(1, 37, 128, generator=gen).to(half)
    cos, sin = position_embeddings(model, 37)
    kernel_module = llmopt.lower(module.clone(), TO_KERNEL)
    params = [to_numpy(program.params[name]) for name in program.param_names]
    got = llmopt.interp.run(kernel_module, [*params, *(to_numpy(v) for v in (x, cos, sin))])
    layer = model.model.layers[0]
    want = copy.deepcopy(layer).double()(x.double(), attention_mask=None,
                                         position_embeddings=(cos.double(), sin.double()))
    own = layer(x, attention_mask=None, position_embeddings=(cos, sin))
    want, own = (w[0] if isinstance(w, tuple) else w for w in (want, own))
    _, rel = compare(got, [want.detach().numpy()])
    _, torch_rel = compare([own.detach().double().numpy()], [want.detach().numpy()])
    eps = 2.0**-7 if dtype == "bfloat16" else 2.0**-10
    assert rel <= tolerance(module), (rel, tolerance(module))
    assert rel <= 2 * torch_rel + eps, (rel, torch_rel)
    source = llmopt.cuda_source(module)
    assert compile_cuda(source, arch="sm_90")[:4] == b"\x7fELF"
