"""The example plugin's passes keep the meaning of programs, checked on llmopt's CPU
interpreters (:func:`llmopt.check_numerics`) and against PyTorch."""

from __future__ import annotations

import llmopt_example
import llmopt_example.interp  # noqa: F401  (registers the interpretation of ex.gelu_tanh)
import numpy as np
import pytest

import llmopt
from llmopt import plugins

LOOP = "torch-to-prim,canonicalize,prim-to-loop,fuse-kernels,canonicalize,cse"
TO_KERNEL = "loop-to-tile,tile-to-kernel,canonicalize,cse"

DOUBLE = """
func.func @forward(%x: tensor<4x64xf32>, %r: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %two = torch.constant 2.0 : tensor<f32>
  %0 = torch.mul %x, %two : tensor<4x64xf32>, tensor<f32> -> tensor<4x64xf32>
  %1 = torch.add %0, %r : tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x64xf32>
  func.return %1 : tensor<4x64xf32>
}
"""

GELU = """
func.func @forward(%x: tensor<3x100xf32>) -> tensor<3x100xf32> {
  %y = ex.gelu_tanh %x : tensor<3x100xf32>
  func.return %y : tensor<3x100xf32>
}
"""


def test_installed_through_the_entry_point() -> None:
    """The package declares itself in the ``llmopt.plugins`` entry-point group."""
    names = {ep.value for ep in plugins.installed_plugins()}
    assert "llmopt_example" in names
    assert llmopt.registry.PASSES["ex-strength-reduce"]() is (
        llmopt_example.strength_reduce.StrengthReduce
    )


def test_strength_reduce_rewrites_and_keeps_results() -> None:
    """``x * 2.0`` becomes ``x + x``, and every pass after it stays exact."""
    module = llmopt.parse(DOUBLE)
    lowered = llmopt.lower(module.clone(), f"{LOOP},ex-strength-reduce,canonicalize")
    names = [op.name for op in lowered.walk()]
    assert "arith.mulf" not in names and names.count("arith.addf") == 2
    report = llmopt.check_numerics(module, f"{LOOP},ex-strength-reduce,canonicalize,{TO_KERNEL}")
    assert report.ok, str(report)
    (check,) = [p for p in report.passes if p.name == "ex-strength-reduce"]
    assert check.max_abs == 0.0


def test_gelu_lowering_checked_pass_by_pass() -> None:
    """``ex-to-prim`` and all of ``lower-to-cuda`` after it agree with the reference."""
    report = llmopt.check_numerics(llmopt.parse(GELU), "ex-to-prim,lower-to-cuda")
    assert report.ok, str(report)
    assert report.passes[0].name == "ex-to-prim"


def test_gelu_kernel_matches_pytorch() -> None:
    """The Kernel IR that ``ex.gelu_tanh`` becomes computes PyTorch's
    ``gelu(x, approximate="tanh")``."""
    torch = pytest.importorskip("torch")
    module = llmopt.lower(llmopt.parse(GELU), f"ex-to-prim,{LOOP},{TO_KERNEL}")
    x = np.random.default_rng(0).standard_normal((3, 100)).astype(np.float32) * 4
    (got,) = llmopt.interp.run(module, [x])
    want = torch.nn.functional.gelu(torch.from_numpy(x).double(), approximate="tanh").numpy()
    assert np.max(np.abs(got - want)) <= 1e-5 * np.max(np.abs(want))


def test_gelu_cuda_source() -> None:
    """The generated CUDA is one kernel calling ``tanhf``."""
    source = llmopt.cuda_source(llmopt.lower(llmopt.parse(GELU), "ex-to-prim"))
    assert source.count("__global__") == 1
    assert "tanhf(" in source
