"""``torch.minimum``, ``amin`` and ``clamp`` (with ``clamp_min``/``clamp_max``, ``clip``,
``hardtanh``, ``relu6``) through every pass of ``lower-to-cuda``, against PyTorch.

Each program is captured from PyTorch and lowered with ``check_numerics`` (every pass
interpreted on the CPU and compared with the result before it). Then the Kernel-IR program
runs on inputs holding NaNs and infinities: minima, maxima and clamps are exact, so its
result must equal PyTorch's own, bit for bit and NaN for NaN, in ``f32``, ``bf16``, ``f16``
and the integer types. Every generated kernel compiles with NVRTC (no GPU needed), ``f32``
minima as ``min.NaN.f32`` on sm_90.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import llmopt  # noqa: E402

F = torch.nn.functional
TO_KERNEL = ("torch-to-prim,canonicalize,prim-to-loop,fuse-kernels,canonicalize,cse,"
             "loop-to-tile,tile-to-kernel,canonicalize,cse")

CASES: list[tuple[str, Callable[..., Any], list[tuple[int, ...]]]] = [
    ("minimum", torch.minimum, [(7, 33), (7, 33)]),
    ("minimum-broadcast", torch.minimum, [(7, 33), (33,)]),
    ("amin", lambda x: x.amin(-1), [(33, 100)]),
    ("amin-dim0-keepdim", lambda x: x.amin(0, keepdim=True), [(100, 7)]),
    ("amin-all", lambda x: x.amin((0, 1), keepdim=True), [(7, 33)]),
    ("amin-0d", lambda x: x.amin(), [(7, 33)]),
    ("clamp", lambda x: x.clamp(-0.5, 0.75), [(7, 100)]),
    ("clamp-min", lambda x: x.clamp(min=0.3), [(7, 33)]),
    ("clamp-max", lambda x: x.clamp(max=-0.2), [(7, 33)]),
    ("clamp-tensor", lambda x, lo, hi: x.clamp(lo, lo + hi * hi), [(7, 33), (33,), (7, 1)]),
    ("clamp-tensor-min", lambda x, lo: x.clamp(min=lo), [(7, 33), (7, 33)]),
    ("clamp_min-clamp_max", lambda x: torch.clamp_max(torch.clamp_min(x, -1.0), 1.0),
     [(7, 33)]),
    ("clip", lambda x: x.clip(-1, 1) * 2.0, [(7, 33)]),
    ("hardtanh-relu6", lambda x: F.hardtanh(x, -2.0, 3.0) + F.relu6(x * 4.0), [(7, 33)]),
]
"""Float cases: name, function, input shapes."""

INT_CASES: list[tuple[str, Callable[..., Any], list[torch.dtype]]] = [
    ("minimum-i64", torch.minimum, [torch.int64, torch.int64]),
    ("clamp-i64", lambda x: x.clamp(-3, 5), [torch.int64]),
    ("clamp-tensor-i32", lambda x, lo: x.clamp(lo, lo + 4), [torch.int32, torch.int32]),
    ("relu6-i64", F.relu6, [torch.int64]),
    ("amin-i64", lambda x: x.amin(-1), [torch.int64]),
    ("amin-i32-dim0", lambda x: x.amin(0, keepdim=True), [torch.int32]),
]
"""Integer cases (as ``torch.maximum``/``amax``, ``torch.minimum`` and ``amin`` take
integers): name, function, input dtypes, inputs of shape ``(7, 33)``."""


def _inputs(name: str, shapes: list[tuple[int, ...]], dtype: torch.dtype) -> list[Any]:
    """Random inputs of ``dtype``, seeded by the case's name, with NaNs and infinities: a
    NaN, +inf and -inf in the first input, a NaN in the last input when there are two, and a
    first input whose first row is all NaN (a whole row of a reduction)."""
    torch.manual_seed(sum(map(ord, name)))
    args = [torch.randn(s).to(dtype) for s in shapes]
    flat = args[0].view(-1)
    flat[3], flat[11], flat[-2] = float("nan"), float("inf"), float("-inf")
    if args[0].dim() == 2:
        args[0][0] = float("nan")
    if len(args) > 1:
        args[-1].view(-1)[5] = float("nan")
    return args


def _numpy(tensor: Any) -> np.ndarray:
    """A tensor's values as a numpy array of its dtype (``bf16`` as ``ml_dtypes.bfloat16``)."""
    if tensor.dtype == torch.bfloat16:
        import ml_dtypes

        return tensor.detach().float().numpy().astype(ml_dtypes.bfloat16)
    return tensor.detach().numpy()


def _check(name: str, fn: Callable[..., Any], args: list[Any], *, nan: bool) -> str:
    """Lower ``fn`` captured on ``args`` with ``check_numerics``, run its Kernel IR on
    ``args`` and require PyTorch's result exactly; the CUDA source compiles for sm_90 and is
    returned."""
    from llmopt.codegen.nvrtc import compile_cuda

    module = llmopt.capture(fn, args)
    report = llmopt.check_numerics(module, "lower-to-cuda", seed=3)
    assert report.ok, f"{report}"
    kernel_module = llmopt.lower(module.clone(), TO_KERNEL)
    (got,) = llmopt.interp.run(kernel_module, [_numpy(a) for a in args])
    want = _numpy(fn(*args))
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    if nan:
        assert np.isnan(want.astype(np.float32)).any(), name  # the case does test NaN
    np.testing.assert_array_equal(got, want)
    source = llmopt.cuda_source(module)
    assert compile_cuda(source, arch="sm_90")[:4] == b"\x7fELF"
    return source


@pytest.mark.parametrize("name,fn,shapes", CASES, ids=[c[0] for c in CASES])
def test_min_and_clamp_match_pytorch(name: str, fn: Callable[..., Any],
                                     shapes: list[tuple[int, ...]]) -> None:
    source = _check(name, fn, _inputs(name, shapes, torch.float32), nan=True)
    if "amin" in name or "minimum" in name:
        assert "min.NaN.f32" in source, source


HALF_CASES = [c for c in CASES if c[0] in ("minimum-broadcast", "amin", "amin-dim0-keepdim",
                                           "clamp", "clamp-tensor", "hardtanh-relu6")]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name,fn,shapes", HALF_CASES, ids=[c[0] for c in HALF_CASES])
def test_half_min_and_clamp_match_pytorch(name: str, fn: Callable[..., Any],
                                          shapes: list[tuple[int, ...]], dtype: str) -> None:
    """16-bit inputs: ``amin`` reduces the widened values and narrows, clamp bounds round to
    the 16-bit type; both are exact, so the result is PyTorch's 16-bit result."""
    _check(name, fn, _inputs(name, shapes, getattr(torch, dtype)), nan=True)


@pytest.mark.parametrize("name,fn,dtypes", INT_CASES, ids=[c[0] for c in INT_CASES])
def test_integer_min_and_clamp_match_pytorch(name: str, fn: Callable[..., Any],
                                             dtypes: list[torch.dtype]) -> None:
    torch.manual_seed(sum(map(ord, name)))
    args = [torch.randint(-10, 10, (7, 33), dtype=d) for d in dtypes]
    _check(name, fn, args, nan=False)
