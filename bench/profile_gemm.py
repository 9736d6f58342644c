"""Run one llmopt-compiled linear layer a few times (for a profiler such as Nsight Compute).

Usage (GPU host): ``ncu --clock-control none -k regex:elementwise python bench/profile_gemm.py
M N K [pipeline]``; the default pipeline is ``lower-to-cuda``. Prints the median time of the
call so the run also works without a profiler.
"""

from __future__ import annotations

import sys

import torch

import llmopt


def main() -> None:
    """Compile ``y = x @ W^T + r`` for the given sizes and run it."""
    m, n, k = (int(a) for a in sys.argv[1:4])
    pipeline = sys.argv[4] if len(sys.argv) > 4 else "lower-to-cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    linear = torch.nn.Linear(k, n, bias=False).cuda()

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = linear

        def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
            return self.proj(x) + r

    x = torch.randn(1, m, k, device="cuda")
    r = torch.randn(1, m, n, device="cuda")
    fn = llmopt.compile(Block(), (x, r), pipeline)
    got = fn(x, r)
    ref = linear(x) + r
    print(f"max rel err {((got - ref).abs().max() / ref.abs().max()).item():.2e}")
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(x, r)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    ms = sorted(times)[len(times) // 2]
    print(f"{m}x{n}x{k}: {ms:.4f} ms, {2 * m * n * k / ms / 1e9:.1f} TFLOP/s")


if __name__ == "__main__":
    main()
