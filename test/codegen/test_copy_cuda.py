"""Vector copies: ``tile.copy`` → ``kernel.copy`` → one ``float4``/``uint2``/… access on each
side. The interpreters at both levels are checked against numpy (race checks on), the CUDA
text and its PTX on the CPU (NVRTC, sm_90), and the test marked ``gpu`` runs it."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_kernel_to_cuda import body as flat
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

from llmopt.api import lower, make_context
from llmopt.codegen.cuda_printer import cuda_source
from llmopt.codegen.nvrtc import _nvrtc, include_dirs
from llmopt.interp import RaceError, random_inputs, run

REVERSE = """
func.func @main(%a: memref<8x64xf32>, %h: memref<8x64xf16>)
    -> (memref<8x64xf32>, memref<8x64xf16>) {
  %o = memref.alloc() : memref<8x64xf32>
  %oh = memref.alloc() : memref<8x64xf16>
  tile.kernel @reverse grid [4, 1, 1] block [16, 1, 1] (%x = %a : memref<8x64xf32>,
      %y = %o : memref<8x64xf32>, %xh = %h : memref<8x64xf16>, %yh = %oh : memref<8x64xf16>) {
    tile.forall (%b) in [8] over blocks {
      %s = tile.alloc shared : memref<64xf32>
      tile.forall (%t) in [16] over block_threads {
        tile.copy %x[%b, %t * 4] to %s[%t * 4] count 4 : memref<8x64xf32> to memref<64xf32>
      }
      %r = tile.alloc registers : memref<16x2x4xf32>
      %rh = tile.alloc registers : memref<16x4xf16>
      tile.forall (%t) in [16] over block_threads {
        loop.for %i = 0 to 2 {
          tile.copy %s[(15 - %t) * 4] to %r[%t, %i, 0] count 4
              : memref<64xf32> to memref<16x2x4xf32>
        }
        tile.copy %r[%t, 1, 0] to %y[%b, %t * 4] count 4 : memref<16x2x4xf32> to memref<8x64xf32>
        tile.copy %xh[%b, (15 - %t) * 4] to %rh[%t, 0] count 4
            : memref<8x64xf16> to memref<16x4xf16>
        tile.copy %rh[%t, 0] to %yh[%b, %t * 4] count 4 : memref<16x4xf16> to memref<8x64xf16>
      }
    }
  }
  func.return %o, %oh : memref<8x64xf32>, memref<8x64xf16>
}
"""
"""Each block stages its row of ``a`` in shared memory with 16-byte copies, then every thread
copies the 4-element piece mirrored from its own into registers (twice, through a loop) and
out; ``h`` goes through registers with 8-byte copies. Both outputs are the rows with their
4-element pieces in reverse order."""


def _parse(text: str) -> ModuleOp:
    module = Parser(make_context(), text).parse_module()
    module.verify()
    return module


def _expected(x: np.ndarray) -> np.ndarray:
    return x.reshape(8, 16, 4)[:, ::-1, :].reshape(8, 64)


@pytest.mark.parametrize("pipeline", ["", "tile-to-kernel", "tile-to-kernel,canonicalize,cse"])
def test_interpreted(pipeline: str) -> None:
    """Tile IR and the Kernel IR it lowers to (race-checked) move the right elements."""
    module = _parse(REVERSE)
    if pipeline:
        lower(module, pipeline)
    a, h = random_inputs(module, seed=1)
    y, yh = run(module, [a, h])
    np.testing.assert_array_equal(y, _expected(a))
    np.testing.assert_array_equal(yh, _expected(h))


def test_missing_barrier_is_a_race() -> None:
    """Reading another thread's piece right after the staging copy, with no barrier, is
    caught by the Kernel-IR race checker."""
    module = _parse(REVERSE)
    lower(module, "tile-to-kernel")
    for op in list(module.walk()):
        if op.name == "kernel.barrier":
            op.detach()
            op.erase()
    with pytest.raises(RaceError):
        run(module, random_inputs(module, seed=1))


def test_misaligned_copy_is_refused() -> None:
    """A copy whose first element is not a multiple of its count stops the interpreter."""
    module = _parse(REVERSE.replace("tile.copy %s[(15 - %t) * 4] to",
                                    "tile.copy %s[(%t mod 8) * 4 + 2] to"))
    with pytest.raises(Exception, match="misaligned copy"):
        run(module, random_inputs(module, seed=1))


@pytest.mark.parametrize("bad,message", [
    ("count 4 : memref<8x64xf32> to memref<64xf32>", "moves 20 bytes"),
])
def test_verifier(bad: str, message: str) -> None:
    """The copy size must be 4, 8 or 16 bytes."""
    text = REVERSE.replace("%s[%t * 4] count 4 : memref<8x64xf32> to memref<64xf32>",
                           "%s[%t * 4] count 5 : memref<8x64xf32> to memref<64xf32>")
    with pytest.raises(VerifyException, match=message):
        _parse(text)


def _source() -> str:
    module = _parse(REVERSE)
    lower(module, "tile-to-kernel,canonicalize,cse,kernel-to-cuda")
    return cuda_source(module)


def test_cuda_text() -> None:
    """f32 copies are ``float4`` accesses, f16 ones ``uint2``; registers are a private
    array, and a barrier separates the staging copy from the mirrored reads."""
    text = flat(_source())
    assert "((float4*)&s[v0])[0] = ((const float4*)&x[b * 64 + v0])[0]; __syncthreads();" in text
    assert "((float4*)&r[" in text and "((uint2*)&rh[0])[0] = ((const uint2*)&xh[" in text
    assert "__align__(16) float r[8];" in text


def test_ptx_has_vector_accesses() -> None:
    """NVRTC turns the copies into 128-bit (shared, global) and 64-bit accesses."""
    source = _source()
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"copy.cu", 0, [], [])
    options = [b"--gpu-architecture=sm_90", b"-std=c++17",
               *(f"-I{d}".encode() for d in include_dirs())]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    err, size = nvrtc.nvrtcGetPTXSize(prog)
    buf = bytearray(size)
    nvrtc.nvrtcGetPTX(prog, buf)
    nvrtc.nvrtcDestroyProgram(prog)
    ptx = bytes(buf).decode(errors="replace")
    assert re.search(r"st\.shared\.v4\.", ptx) and re.search(r"ld\.shared\.v4\.", ptx)
    assert re.search(r"ld\.global\.nc\.v2\.", ptx)


@pytest.mark.gpu
def test_gpu_reverse() -> None:
    """The compiled kernel moves the same elements on the GPU."""
    import torch

    from llmopt.codegen.executor import CompiledProgram

    module = _parse(REVERSE)
    lower(module, "tile-to-kernel,canonicalize,cse,kernel-to-cuda")
    program = CompiledProgram(module)
    a = torch.randn(8, 64, device="cuda")
    h = torch.randn(8, 64, device="cuda", dtype=torch.float16)
    y, yh = program(a, h)
    torch.testing.assert_close(y, a.reshape(8, 16, 4).flip(1).reshape(8, 64), rtol=0, atol=0)
    torch.testing.assert_close(yh, h.reshape(8, 16, 4).flip(1).reshape(8, 64), rtol=0, atol=0)
