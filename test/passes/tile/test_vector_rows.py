"""``vector-rows`` (opt-in) on the row kernels ``lower-to-cuda`` schedules: an RMSNorm and a
softmax captured from PyTorch read and write their rows 16 bytes a thread, and compute what
the pipeline without the pass computes (the reductions' association changes, so within the
rounding of their sums) and what PyTorch computes in float64 (within bf16's rounding)."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.ir import BlockArgument

torch = pytest.importorskip("torch")

import llmopt  # noqa: E402
from llmopt import registry  # noqa: E402
from llmopt.dialects import kernel  # noqa: E402
from llmopt.interp import run  # noqa: E402

PIPELINE = "lower-to-cuda{arch=sm_90a}"
HIDDEN = 448
"""Not a multiple of the 256 threads × 8 halves: 56 chunks a row, so a thread folds one
chunk or none, and the map's threads past the row's chunks do nothing."""


class NormSoftmax(torch.nn.Module):
    """An RMSNorm of the rows, then a softmax along them."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(3)
        self.weight = torch.nn.Parameter(1.0 + 0.1 * torch.randn(HIDDEN, generator=gen))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.float().pow(2).mean(-1, keepdim=True)
        normed = (x.float() * torch.rsqrt(var + 1e-5)).to(x.dtype)
        return torch.softmax(self.weight * normed, dim=-1)


def _kernel_ir(module: object, pipeline: str) -> object:
    return llmopt.lower(module, ",".join(registry.split_at_level(pipeline, "kernel")[0]))


def _global_loads(module: object) -> list[kernel.LoadOp]:
    """The scalar loads of kernel arguments (global memory) in ``module``'s kernels."""
    return [op for op in module.walk()  # type: ignore[attr-defined]
            if isinstance(op, kernel.LoadOp) and isinstance(op.buffer, BlockArgument)
            and isinstance(op.buffer.owner.parent_op(), kernel.FuncOp)]


def test_rows_move_sixteen_bytes_and_keep_their_values() -> None:
    module = NormSoftmax().to(torch.bfloat16)
    x = torch.randn(1, 5, HIDDEN, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(4))
    captured = llmopt.capture(module, (x,))
    rows = _kernel_ir(captured.clone(), registry.insert_before(PIPELINE, "tile-to-kernel",
                                                               "vector-rows"))
    without = _kernel_ir(captured.clone(), PIPELINE)
    # every global access of the row kernels is a 16-byte copy (8 halves) once the pass ran
    copies = [op for op in rows.walk() if isinstance(op, kernel.CopyOp)]
    assert copies and all(op.count.value.data == 8 for op in copies)
    assert not _global_loads(rows)
    assert _global_loads(without)

    inputs = [module.weight.detach().float().numpy(), x.float().numpy()]
    (got,) = run(rows, inputs)
    (want,) = run(without, inputs)
    with torch.no_grad():
        exact = module.double()(x.double()).numpy()
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = np.abs(exact).max()
    # bf16 results of the same inputs: the sums' rounding moves them by a few bf16 ulps at most
    assert np.abs(got - want).max() <= 4 * 2.0**-8 * scale
    assert np.abs(got - exact).max() <= 8 * 2.0**-8 * scale
