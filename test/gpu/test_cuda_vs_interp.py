"""CUDA IR checked on the GPU: every corpus kernel against the Kernel-IR interpreter.

The same Kernel-IR module is interpreted on the CPU and, after ``kernel-to-cuda``, compiled
by NVRTC and run on the GPU, on identical inputs. Both execute the same operations in the
same order (the interpreter follows the GPU's assignment of work and its reduction tree),
so they differ only by fused multiply-adds and the last-ulp behaviour of CUDA's math
functions: the dtype-derived tolerance of :func:`llmopt.numerics.tolerance` applies.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

sys.path.insert(0, str(Path(__file__).parent.parent / "numerics"))
from test_corpus import CORPUS, TO_KERNEL  # noqa: E402

import llmopt  # noqa: E402
from llmopt.numerics import compare, tolerance  # noqa: E402


@pytest.mark.parametrize("name,fn,shapes", CORPUS, ids=[c[0] for c in CORPUS])
def test_gpu_matches_kernel_interpreter(name: str, fn: Any, shapes: list[tuple[int, ...]]
                                        ) -> None:
    from llmopt.codegen.executor import CompiledProgram

    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    gen = torch.Generator().manual_seed(sum(map(ord, name)) + 1)
    args = [torch.randn(s, generator=gen) for s in shapes]
    module = llmopt.capture(fn, args)
    tol = tolerance(module)
    llmopt.lower(module, TO_KERNEL)
    params = [p.detach() for p in (fn.parameters() if isinstance(fn, torch.nn.Module) else [])]
    inputs = [*params, *args]
    want = llmopt.interp.run(module, [t.numpy() for t in inputs])
    llmopt.lower(module, "kernel-to-cuda")
    program = CompiledProgram(module)
    got = program(*[t.cuda().contiguous() for t in inputs])
    torch.cuda.synchronize()
    _, rel = compare([g.cpu().numpy() for g in got], want)
    print(f"{name:20s} GPU vs Kernel-IR interpreter: max rel {rel:.2e} (tol {tol:.1e})")
    assert rel <= tol
