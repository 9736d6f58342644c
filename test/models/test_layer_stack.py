"""Whole-program passes on stacks of identical layers: ``dedup-kernels`` and ``plan-buffers``.

A stack of N identical RMSNorm + gated-MLP layers lowers to N copies of one layer's
kernels; after ``dedup-kernels`` the CUDA source holds one layer's kernel set whatever N,
and after ``plan-buffers`` the host function allocates one layer's worth of temporaries.
Every pass of ``lower-to-cuda`` keeps the program's meaning (checked by interpretation),
and the Kernel-IR result matches PyTorch in float64.
"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import llmopt  # noqa: E402
from llmopt.numerics import compare, tolerance  # noqa: E402
from llmopt.passes.kernel.dedup_kernels import DedupKernels  # noqa: E402
from llmopt.passes.kernel.plan_buffers import allocated_bytes  # noqa: E402

F = torch.nn.functional
UP_TO_KERNEL = ("torch-to-prim,canonicalize,prim-to-loop,fuse-kernels,canonicalize,cse,"
                "loop-to-tile,tile-to-kernel,canonicalize,cse")


class RMSNorm(torch.nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


class Layer(torch.nn.Module):
    """RMSNorm, then a gated MLP (sizes 33 and 50 divide no tile)."""

    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.norm = RMSNorm(hidden)
        self.gate = torch.nn.Linear(hidden, inner, bias=False)
        self.up = torch.nn.Linear(hidden, inner, bias=False)
        self.down = torch.nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x)
        return self.down(F.silu(self.gate(y)) * self.up(y)) * 0.5


class Stack(torch.nn.Module):
    def __init__(self, layers: int, hidden: int = 33, inner: int = 50) -> None:
        super().__init__()
        torch.manual_seed(layers)
        self.layers = torch.nn.ModuleList([Layer(hidden, inner) for _ in range(layers)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def _captured(layers: int) -> tuple[Stack, torch.Tensor, object]:
    model = Stack(layers)
    x = torch.randn(1, 7, 33, generator=torch.Generator().manual_seed(1))
    return model, x, llmopt.capture(model, (x,))


def _host(module: object) -> object:
    from xdsl.dialects import func

    return next(op for op in module.ops if isinstance(op, func.FuncOp))  # type: ignore[attr-defined]


def _unnamed(source: str) -> str:
    """The source with kernel names replaced by their order of definition."""
    names = re.findall(r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(", source)
    assert names
    for k, name in enumerate(names):
        source = re.sub(rf"\b{name}\b", f"kernel{k}", source)
    return source


def test_identical_layers_share_one_kernel_set() -> None:
    """The CUDA source of 2 and of 5 layers holds the same kernels; launches grow with N."""
    sources, launches = [], []
    for layers in (2, 5):
        _, _, module = _captured(layers)
        llmopt.lower(module, "lower-to-cuda")  # type: ignore[arg-type]
        sources.append(llmopt.cuda_source(module))  # type: ignore[arg-type]
        launches.append(str(module).count("kernel.launch"))
    assert sources[0].count("__global__") == sources[1].count("__global__")
    assert _unnamed(sources[0]) == _unnamed(sources[1])
    assert launches[1] > launches[0]


def test_dedup_then_plan_keep_the_meaning_and_shrink_memory() -> None:
    """Every pass keeps the result; plan-buffers cuts the allocated bytes of a 4-layer stack
    to a size that does not grow with the number of layers."""
    model, x, module = _captured(4)
    report = llmopt.check_numerics(module, "lower-to-cuda", seed=5)  # type: ignore[arg-type]
    assert report.ok, str(report)
    assert [p.name for p in report.passes][-6:] == ["inline-repeated-kernels", "merge-branches",
                                                    "fuse-launches", "plan-buffers",
                                                    "programmatic-launch", "kernel-to-cuda"]
    planned = {}
    for layers in (2, 4):
        _, _, mod = _captured(layers)
        llmopt.lower(mod, UP_TO_KERNEL + ",dedup-kernels")  # type: ignore[arg-type]
        before = allocated_bytes(_host(mod))  # type: ignore[arg-type]
        llmopt.lower(mod, "plan-buffers")  # type: ignore[arg-type]
        after = allocated_bytes(_host(mod))  # type: ignore[arg-type]
        assert after < before
        planned[layers] = after
    assert planned[4] == planned[2]


def test_kernel_ir_matches_pytorch() -> None:
    """The planned, deduplicated Kernel IR of a 3-layer stack matches PyTorch in float64."""
    import copy

    model, x, module = _captured(3)
    tol = tolerance(module)  # type: ignore[arg-type]
    llmopt.lower(module, UP_TO_KERNEL + ",dedup-kernels,plan-buffers")  # type: ignore[arg-type]
    params = [p.detach().numpy() for p in model.parameters()]
    (got,) = llmopt.interp.run(module, [*params, x.numpy()])  # type: ignore[arg-type]
    want = copy.deepcopy(model).double()(x.double()).detach().numpy()
    _, rel = compare([got], [want])
    assert rel <= tol
    assert np.isfinite(got).all()


def test_dedup_is_fast_for_hundreds_of_kernels() -> None:
    """400 kernels (a 100-layer stack's worth) are keyed and merged in time linear in their
    number: four times the kernels take well under sixteen times as long (what a pairwise
    comparison would), measured on the same machine in the same test so that a loaded CI
    machine does not fail it; and under a few seconds in all."""
    body = """
kernel.func @k{n}(%out: memref<1x7x33xf32>, %w: memref<33xf32>, %x: memref<1x7x33xf32>)
    block [64, 1, 1] {{
  %b = kernel.block_id x
  %g = kernel.grid_dim x
  %c7 = arith.constant 7 : index
  %c33 = arith.constant 33 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0 : index
  scf.for %p = %b to %c7 step %g {{
    %t = kernel.thread_id x
    %d = kernel.block_dim x
    scf.for %j = %t to %c33 step %d {{
      %v = kernel.load %x[%zero, %p, %j] : memref<1x7x33xf32>
      %s = kernel.load %w[%j] : memref<33xf32>
      %m = arith.mulf %v, %s : f32
      %e = math.exp %m : f32
      %c = arith.constant {c}.0 : f32
      %r = arith.addf %e, %c : f32
      kernel.store %r, %out[%zero, %p, %j] : memref<1x7x33xf32>
    }}
  }}
  kernel.return
}}
"""
    def dedup_seconds(count: int) -> float:
        module = llmopt.parse("".join(body.format(n=n, c=n % 4) for n in range(count)))
        start = time.perf_counter()
        DedupKernels().apply(llmopt.api.make_context(), module)
        elapsed = time.perf_counter() - start
        assert [op.sym_name.data for op in module.ops] == ["k0", "k1", "k2", "k3"]  # type: ignore[attr-defined]
        return elapsed

    small = min(dedup_seconds(100) for _ in range(2))
    large = min(dedup_seconds(400) for _ in range(2))
    assert large < 8 * small, (small, large)
    assert large < 5.0
