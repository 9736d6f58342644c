"""Programmatic dependent launch on the GPU: a chain of kernels, each reading what the one
before it wrote, gives the interpreter's results when every launch may overlap its
predecessor (``programmatic-launch``), launched from the host and replayed from a CUDA
graph; and the decode step of a Generator launches its kernels programmatically."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import llmopt  # noqa: E402

N = 1 << 20
"""Elements of each buffer: many waves of blocks, so a kernel that did not wait would read
its input before the previous grid had written it."""
STEPS = 12


def _chain() -> str:
    """``STEPS`` launches of one grid-stride kernel, ``b = a * 1.5 - 1`` back and forth
    between two buffers, then the sum kernel of both."""
    launches = []
    for k in range(STEPS):
        src, dst = ("%a", "%b") if k % 2 == 0 else ("%b", "%a")
        launches.append(f"  kernel.launch @step grid [264, 1, 1] block [256, 1, 1] smem 0 "
                        f"({dst}, {src}) : memref<{N}xf32>, memref<{N}xf32>")
    body = "\n".join(launches)
    return f"""
kernel.func @step(%out: memref<{N}xf32>, %in: memref<{N}xf32>) block [256, 1, 1] {{
  %b = kernel.block_id x
  %g = kernel.grid_dim x
  %t = kernel.thread_id x
  %n = kernel.block_dim x
  %size = arith.constant {N} : index
  %k = arith.constant 1.5 : f32
  %one = arith.constant 1.0 : f32
  %base = arith.muli %b, %n : index
  %first = arith.addi %base, %t : index
  %stride = arith.muli %g, %n : index
  scf.for %i = %first to %size step %stride {{
    %v = kernel.load %in[%i] : memref<{N}xf32>
    %w = arith.mulf %v, %k : f32
    %u = arith.subf %w, %one : f32
    kernel.store %u, %out[%i] : memref<{N}xf32>
  }}
  kernel.return
}}
func.func @main(%x: memref<{N}xf32>) -> memref<{N}xf32> {{
  %a = memref.alloc() : memref<{N}xf32>
  "memref.copy"(%x, %a) : (memref<{N}xf32>, memref<{N}xf32>) -> ()
  %b = memref.alloc() : memref<{N}xf32>
{body}
  func.return %a : memref<{N}xf32>
}}
"""


@pytest.mark.parametrize("carveout", [None, 100])
@pytest.mark.parametrize("cuda_graph", [False, True])
def test_a_chain_of_programmatic_launches_reads_each_result(cuda_graph: bool,
                                                            carveout: int | None) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    from llmopt.codegen.executor import CompiledProgram, LaunchStep

    option = "" if carveout is None else f"{{carveout={carveout}}}"
    module = llmopt.lower(llmopt.parse(_chain()), f"programmatic-launch{option},kernel-to-cuda")
    program = CompiledProgram(module, cuda_graph=cuda_graph)
    launches = [s for s in program.plan.steps if isinstance(s, LaunchStep)]
    assert len(launches) == STEPS and all(s.programmatic for s in launches)
    assert {s.carveout for s in launches} == {carveout}
    if carveout is not None:  # the executor gave the kernel its preferred carveout
        step = program.module.function("step")
        assert step.get_attribute("PREFERRED_SHARED_MEMORY_CARVEOUT") == carveout
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal(N).astype(np.float32)
        want = x.astype(np.float64)
        for _ in range(STEPS):
            want = want * 1.5 - 1.0
        (got,) = program(torch.from_numpy(x).cuda())
        # float32 rounding of 12 multiply-subtracts: a few ulps of values up to ~150.
        np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-5, atol=1e-4)


def test_the_decode_step_launches_programmatically() -> None:
    """A Generator's programs are lowered by ``lower-to-cuda``, which marks every launch."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    import sys
    from pathlib import Path

    from llmopt.codegen.executor import LaunchStep

    sys.path.insert(0, str(Path(__file__).parent.parent / "frontend"))
    from test_models import tiny_model

    model = tiny_model("llama").cuda()
    gen = llmopt.Generator(model, max_ctx=24, device="cuda")
    _, decode = gen._programs
    launches = [s for s in decode.plan.steps if isinstance(s, LaunchStep)]
    assert launches and all(s.programmatic for s in launches)
    prompt = torch.randint(0, model.config.vocab_size, (1, 6), device="cuda")
    with torch.no_grad():
        want = model.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False)
    assert gen.generate(prompt, 8).tokens == want[0, 6:].tolist()
