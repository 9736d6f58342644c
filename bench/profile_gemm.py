"""Run one llmopt-compiled linear layer a few times (for a profiler such as Nsight Compute).

Usage (GPU host): ``ncu --clock-control none -k regex:elementwise python bench/profile_gemm.py
M N K [pipeline] [--dtype bfloat16]``; the default pipeline is ``lower-to-cuda``, the
default dtype ``float32``. ``--torch`` runs PyTorch's own ``x @ W^T + r`` instead (cuBLAS,
for a profile to set beside). Prints the median time of the call so the run also works
without a profiler.
"""

from __future__ import annotations

import argparse

import torch
from sweep_gemm import Linear

import llmopt


def main() -> None:
    """Compile ``y = x @ W^T + r`` for the given sizes and run it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("m", type=int)
    parser.add_argument("n", type=int)
    parser.add_argument("k", type=int)
    parser.add_argument("pipeline", nargs="?", default="lower-to-cuda")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--torch", action="store_true", help="run PyTorch's product instead")
    args = parser.parse_args()
    m, n, k, dtype = args.m, args.n, args.k, getattr(torch, args.dtype)
    torch.backends.cuda.matmul.allow_tf32 = False
    block = Linear(k, n).cuda().to(dtype)
    x = torch.randn(1, m, k, device="cuda", dtype=dtype)
    r = torch.randn(1, m, n, device="cuda", dtype=dtype)
    fn = block if args.torch else llmopt.compile(block, (x, r), args.pipeline)
    got = fn(x, r)
    ref = (x.double() @ block.proj.weight.double().t()) + r.double()
    print(f"max rel err {((got.double() - ref).abs().max() / ref.abs().max()).item():.2e}")
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
