"""``argmax``/``argmin`` and ``x.max(dim)``/``x.min(dim)`` (values and indices) through every
pass of ``lower-to-cuda``, against PyTorch.

The frontend captures them as ``amax``/``amin``, ``eq``, ``ne``, ``logical_or``, ``arange``,
``where`` and an integer ``amin`` of the indices. Each program is lowered with
``check_numerics`` (every pass interpreted on the CPU and compared with the result before
it); then its Kernel IR runs on inputs full of ties (small integers), NaNs and infinities,
and must give PyTorch's values and indices exactly: the first index of the extreme, or of
the first NaN. Every generated kernel compiles with NVRTC (no GPU needed).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import llmopt  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent.parent / "frontend"))
from test_capture import ties_nan_and_inf  # noqa: E402

TO_KERNEL = ("torch-to-prim,canonicalize,prim-to-loop,fuse-kernels,canonicalize,cse,"
             "loop-to-tile,tile-to-kernel,canonicalize,cse")

CASES: list[tuple[str, Callable[..., Any], tuple[int, ...]]] = [
    ("argmax-last", lambda x: x.argmax(-1), (7, 33)),
    ("argmin-dim0-keepdim", lambda x: x.argmin(0, keepdim=True), (7, 33)),
    ("argmax-middle", lambda x: torch.argmax(x, 1), (4, 9, 12)),
    ("argmax-all", lambda x: x.argmax(), (7, 33)),
    ("argmin-all-keepdim", lambda x: torch.argmin(x, keepdim=True), (7, 33)),
    ("max-dim", lambda x: x.max(1), (7, 100)),
    ("min-dim-keepdim", lambda x: x.min(-2, keepdim=True), (7, 33)),
    ("max-dim-values", lambda x: x.max(-1).values * 2.0, (7, 33)),
    ("min-dim-indices", lambda x: torch.min(x, dim=0).indices + 1, (7, 33)),
]
"""Name, function, shape of the one input."""

HALF_CASES = [c for c in CASES if c[0] in ("argmax-last", "argmax-all", "max-dim",
                                           "min-dim-keepdim")]
INT_CASES = [c for c in CASES if c[0] != "max-dim-values"]


def _inputs(name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Ties, NaNs and infinities (:func:`test_capture.ties_nan_and_inf`), seeded by the
    case's name."""
    return ties_nan_and_inf(*shape, seed=sum(map(ord, name)), dtype=dtype)


def _numpy(tensor: Any) -> np.ndarray:
    """A tensor's values as a numpy array of its dtype (``bf16`` as ``ml_dtypes.bfloat16``)."""
    if tensor.dtype == torch.bfloat16:
        import ml_dtypes

        return tensor.detach().float().numpy().astype(ml_dtypes.bfloat16)
    return tensor.detach().numpy()


def _check(fn: Callable[..., Any], x: torch.Tensor) -> None:
    """Lower ``fn`` captured on ``x`` with ``check_numerics``, run its Kernel IR on ``x``
    and require PyTorch's results exactly (NaN for NaN, ``int64`` indices); the CUDA source
    compiles for sm_90."""
    from llmopt.codegen.nvrtc import compile_cuda

    module = llmopt.capture(fn, [x])
    report = llmopt.check_numerics(module, "lower-to-cuda", seed=3)
    assert report.ok, f"{report}"
    got = llmopt.interp.run(llmopt.lower(module.clone(), TO_KERNEL), [_numpy(x)])
    want = fn(x)
    want = [want] if isinstance(want, torch.Tensor) else list(want)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        w = _numpy(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_array_equal(g, w)
    assert compile_cuda(llmopt.cuda_source(module), arch="sm_90")[:4] == b"\x7fELF"


@pytest.mark.parametrize("name,fn,shape", CASES, ids=[c[0] for c in CASES])
def test_argmax_and_max_dim_match_pytorch(name: str, fn: Callable[..., Any],
                                          shape: tuple[int, ...]) -> None:
    x = _inputs(name, shape, torch.float32)
    assert x.isnan().any() and x.isinf().any()
    _check(fn, x)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name,fn,shape", HALF_CASES, ids=[c[0] for c in HALF_CASES])
def test_half_argmax_and_max_dim_match_pytorch(name: str, fn: Callable[..., Any],
                                               shape: tuple[int, ...], dtype: str) -> None:
    """16-bit inputs compare in their own type (exact): PyTorch's indices and values."""
    _check(fn, _inputs(name, shape, getattr(torch, dtype)))


@pytest.mark.parametrize("dtype", ["int64", "int32"])
@pytest.mark.parametrize("name,fn,shape", INT_CASES, ids=[c[0] for c in INT_CASES])
def test_integer_argmax_and_max_dim_match_pytorch(name: str, fn: Callable[..., Any],
                                                  shape: tuple[int, ...], dtype: str) -> None:
    """Integer inputs (no NaN test): an integer ``amax``/``amin`` of the values."""
    _check(fn, _inputs(name, shape, getattr(torch, dtype)))
