"""Asynchronous copies in CUDA: ``kernel.async_copy``/``async_commit``/``async_wait`` become
the primitives of ``<cuda_pipeline_primitives.h>``; the source compiles with NVRTC for sm_90
(no GPU needed), and the test marked ``gpu`` runs it against torch."""

from __future__ import annotations

from collections.abc import Callable
from io import StringIO

import numpy as np
import pytest
from test_kernel_to_cuda import body as flat
from test_kernel_to_cuda import lower
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from llmopt.api import make_context
from llmopt.codegen.cache import KernelCache
from llmopt.codegen.cuda_printer import cuda_source
from llmopt.codegen.nvrtc import compile_cuda
from llmopt.interp import random_inputs, run

NO_CACHE = KernelCache("/nonexistent", enabled=False)

STAGED = """
func.func @main(%x: memref<4x64xf32>, %h: memref<4x64xf16>) -> memref<4x64xf32> {
  %y = memref.alloc() : memref<4x64xf32>
  kernel.launch @staged grid [4, 1, 1] block [16, 1, 1] smem 0 (%x, %h, %y)
      : memref<4x64xf32>, memref<4x64xf16>, memref<4x64xf32>
  func.return %y : memref<4x64xf32>
}
kernel.func @staged(%x: memref<4x64xf32>, %h: memref<4x64xf16>, %y: memref<4x64xf32>)
    block [16, 1, 1] {
  %s = kernel.shared : memref<64xf32>
  %sh = kernel.shared : memref<64xf16>
  %t = kernel.thread_id x
  %b = kernel.block_id x
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c16 = arith.constant 16 : index
  %i = arith.muli %t, %c4 : index
  %i2 = arith.addi %i, %c2 : index
  kernel.async_copy %x[%b, %i] to %s[%i] count 4 : memref<4x64xf32> to memref<64xf32>
  kernel.async_commit
  kernel.async_copy %h[%b, %i] to %sh[%i] count 2 : memref<4x64xf16> to memref<64xf16>
  kernel.async_copy %h[%b, %i2] to %sh[%i2] count 2 : memref<4x64xf16> to memref<64xf16>
  kernel.async_commit
  kernel.async_wait 1
  kernel.barrier
  scf.for %k = %c0 to %c4 step %c1 {
    %p = arith.muli %k, %c16 : index
    %j = arith.addi %p, %t : index
    %v = kernel.load %s[%j] : memref<64xf32>
    kernel.store %v, %y[%b, %j] : memref<4x64xf32>
  }
  kernel.async_wait 0
  kernel.barrier
  scf.for %k = %c0 to %c4 step %c1 {
    %p = arith.muli %k, %c16 : index
    %j = arith.addi %p, %t : index
    %u = kernel.load %sh[%j] : memref<64xf16>
    %w = arith.extf %u : f16 to f32
    %v = kernel.load %y[%b, %j] : memref<4x64xf32>
    %r = arith.addf %v, %w : f32
    kernel.store %r, %y[%b, %j] : memref<4x64xf32>
  }
  kernel.return
}
"""
"""Each block stages its row of ``x`` (16-byte copies) and of ``h`` (two 4-byte copies of
f16 a thread) in shared memory, in two groups; ``y = x + h``."""

GUARDED = STAGED.replace(
    "kernel.async_copy %x[%b, %i] to %s[%i] count 4 :",
    "%ok = arith.cmpi ult, %t, %c2 : index\n"
    "  kernel.async_copy %x[%b, %i] to %s[%i] count 4 if %ok :").replace(
    "kernel.async_copy %h[%b, %i2] to %sh[%i2] count 2 :",
    "%low = arith.cmpi ult, %b, %c2 : index\n"
    "  kernel.async_copy %h[%b, %i2] to %sh[%i2] count 2 if %low :")
"""``STAGED`` with conditions: threads 0 and 1 copy ``x`` (the rest of each row is zeros),
and only blocks 0 and 1 copy their second halves of ``h`` (16-byte and 4-byte copies that
read nothing and write zeros where the condition is false)."""


def _guarded_want(x: np.ndarray, h: np.ndarray) -> np.ndarray:
    """What :data:`GUARDED` computes."""
    xs = np.zeros_like(x)
    xs[:, :8] = x[:, :8]
    hs = h.astype(np.float32).reshape(4, 16, 2, 2)
    hs[2:, :, 1] = 0
    return xs + hs.reshape(4, 64)




def test_interpreted_result() -> None:
    """The Kernel-IR interpreter computes ``x + h`` (race checks on)."""
    module = Parser(make_context(), STAGED).parse_module()
    x, h = random_inputs(module, seed=0)
    (y,) = run(module, [x, h])
    np.testing.assert_array_equal(y, x + h.astype(np.float32))


def test_guarded_copies_interpreted() -> None:
    """A copy whose condition is false writes zeros (race checks on)."""
    module = Parser(make_context(), GUARDED).parse_module()
    x, h = random_inputs(module, seed=1)
    (y,) = run(module, [x, h])
    np.testing.assert_array_equal(y, _guarded_want(x, h))


def test_guarded_copies_cuda() -> None:
    """A guarded copy is ``cp.async`` with a source size of ``ok ? bytes : 0`` (``.cg`` for
    16 bytes, ``.ca`` for 4), and compiles with NVRTC for sm_90."""
    source = cuda_source(lower(GUARDED))
    text = flat(source)
    assert ('asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" : : '
            '"r"((unsigned int)__cvta_generic_to_shared(&s[i])), '
            '"l"(__cvta_generic_to_global(&x[b * 64 + i])), '
            '"r"(((unsigned long long)t < 2ull) ? 16 : 0) : "memory");') in text
    assert '"cp.async.ca.shared.global [%0], [%1], 4, %2;"' in text
    assert "__pipeline_memcpy_async(&sh[i], &h[b * 64 + i], 4);" in text  # unguarded
    cubin = compile_cuda(source, arch="sm_90", cache=NO_CACHE)
    assert cubin[:4] == b"\x7fELF"


def test_cuda_text() -> None:
    """The pipeline header comes first; copies take element addresses and a byte count."""
    source = cuda_source(lower(STAGED))
    assert source.startswith("#include <cuda_fp16.h>\n#include <cuda_pipeline_primitives.h>\n")
    text = flat(source)
    assert "const float* __restrict__ x, const __half* __restrict__ h" in text
    assert "__shared__ __align__(16) float s[64]; __shared__ __align__(16) __half sh[64];" in text
    assert ("__pipeline_memcpy_async(&s[i], &x[b * 64 + i], 16); __pipeline_commit(); "
            "__pipeline_memcpy_async(&sh[i], &h[b * 64 + i], 4); "
            "__pipeline_memcpy_async(&sh[i2], &h[b * 64 + i2], 4); __pipeline_commit(); "
            "__pipeline_wait_prior(1); __syncthreads();") in text
    assert "__pipeline_wait_prior(0); __syncthreads();" in text


def test_compiles_to_cubin() -> None:
    """NVRTC finds the header and compiles the kernel for sm_90."""
    cubin = compile_cuda(cuda_source(lower(STAGED)), arch="sm_90", cache=NO_CACHE)
    assert cubin[:4] == b"\x7fELF"


def _print(module: ModuleOp, generic: bool) -> str:
    out = StringIO()
    Printer(out, print_generic_format=generic).print_op(module)
    return out.getvalue()


def test_lowered_ir_round_trips() -> None:
    """The CUDA IR (with ``cuda.unary "&"``) prints and parses back, generic form included."""
    module = lower(STAGED)
    text = _print(module, False)
    assert 'cuda.unary "&"' in text
    for generic in (False, True):
        again = Parser(make_context(), _print(module, generic)).parse_module()
        again.verify()
        assert _print(again, False) == text


@pytest.mark.parametrize("text,message", [
    ("""
cuda.kernel @k(n : index) {
  cuda.decl v : f32
  %0 = cuda.var v : f32
  %1 = cuda.unary "&" %0 : f32
  cuda.expr_stmt %1 : !cuda.ptr<f32>
}""", r"'&' takes the address of an element \(a cuda.index\), not of a value defined by "
      r"'cuda.var'"),
    ("""
cuda.kernel @k(x : !cuda.ptr<f32, const>) {
  %0 = cuda.var x : !cuda.ptr<f32, const>
  %1 = cuda.literal 0 : index
  %2 = cuda.index %0[%1] : !cuda.ptr<f32, const>, index
  %3 = "cuda.unary"(%2) <{operator = "&"}> : (f32) -> !cuda.ptr<f32>
  cuda.expr_stmt %3 : !cuda.ptr<f32>
}""", r"the address of a f32 element is !cuda.ptr<f32, const>, not !cuda.ptr<f32>"),
])
def test_address_of_is_verified(text: str, message: str) -> None:
    """``cuda.unary "&"`` takes an element's address, typed like the element's pointer."""
    module = Parser(make_context(), text).parse_module()
    with pytest.raises(VerifyException, match=message):
        module.verify()


# --- on the GPU ---------------------------------------------------------------------------------


def _staged_want(x: np.ndarray, h: np.ndarray) -> np.ndarray:
    """What :data:`STAGED` computes."""
    return x + h.astype(np.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("text,want", [(STAGED, _staged_want), (GUARDED, _guarded_want)],
                         ids=["staged", "guarded"])
def test_gpu_staged_copies(text: str, want: Callable[[np.ndarray, np.ndarray], np.ndarray]
                           ) -> None:
    """The staged kernel matches torch on the GPU, and the guarded one the interpreter's
    zeros."""
    import torch

    from llmopt.codegen.executor import CompiledProgram

    program = CompiledProgram(lower(text))
    x = torch.randn(4, 64, device="cuda")
    h = torch.randn(4, 64, device="cuda", dtype=torch.float16)
    (y,) = program(x, h)
    expected = torch.from_numpy(want(x.cpu().numpy(), h.cpu().numpy()))
    torch.testing.assert_close(y.cpu(), expected, rtol=0, atol=0)
