"""A tour of llmopt's Python API on the RMSNorm of rms.mlir; no GPU and no torch needed."""

from pathlib import Path

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

import llmopt

module = llmopt.parse(Path("docs/examples/rms.mlir").read_text())  # Torch IR, verified


def show(pass_: ModulePass, mod: ModuleOp) -> None:  # called after every pass
    kernels = [op.sym_name.data for op in mod.walk() if op.name == "loop.kernel"]
    print(f"after {pass_.name:14s} {len(kernels):2d} loop.kernel ops")


loop_ir = llmopt.lower(module.clone(), "torch-to-prim,prim-to-loop,fuse-kernels,canonicalize",
                       callback=show)

# The interpreters run every level but CUDA IR on numpy arrays (weights first, then inputs).
weight = np.ones(256, np.float32)
x = np.random.default_rng(0).standard_normal((1, 8, 256)).astype(np.float32)
(want,) = llmopt.interp.run(module, [weight, x])
(got,) = llmopt.interp.run(loop_ir, [weight, x])
print(f"Loop IR vs Torch IR: max relative error {np.max(np.abs(got - want)) / np.max(want):.1e}")

report = llmopt.check_numerics(module, "lower-to-cuda")  # every pass, on random inputs
print("check_numerics:", "ok" if report.ok else report.first_failure)

source = llmopt.cuda_source(module)  # lowers a copy with lower-to-cuda
print(source.splitlines()[0])
