"""Kernels with more than 48 KiB of shared memory: ``kernel-to-cuda`` moves all of a kernel's
``kernel.shared`` buffers into dynamic shared memory (one ``extern __shared__`` byte array,
typed pointers at 16-byte-aligned offsets) and gives its launches the bytes as ``smem``. The
source compiles with NVRTC for sm_90 (no GPU needed); the Kernel-IR interpreter runs the
kernels whatever their launches' ``smem``; the tests marked ``gpu`` run them end to end
through the executor and compare with the interpreter."""

from __future__ import annotations

import numpy as np
import pytest
from test_kernel_to_cuda import body as flat
from test_kernel_to_cuda import lower
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.parser import Parser
from xdsl.utils.exceptions import PassFailedException, VerifyException

import llmopt
from llmopt.api import make_context
from llmopt.codegen.cache import KernelCache
from llmopt.codegen.cuda_printer import cuda_source
from llmopt.codegen.nvrtc import compile_cuda
from llmopt.dialects import cuda, kernel
from llmopt.interp import random_inputs, run
from llmopt.lowering.kernel_to_cuda import shared_layout

NO_CACHE = KernelCache("/nonexistent", enabled=False)

STAGES = """
func.func @main(%x: memref<4x6144xf32>) -> memref<4x6144xf32> {
  %y = memref.alloc() : memref<4x6144xf32>
  kernel.launch @stages grid [4, 1, 1] block [256, 1, 1] smem SMEM (%x, %y)
      : memref<4x6144xf32>, memref<4x6144xf32>
  func.return %y : memref<4x6144xf32>
}
kernel.func @stages(%x: memref<4x6144xf32>, %y: memref<4x6144xf32>) block [256, 1, 1] {
  %a = kernel.shared : memref<6144xf32>
  %b = kernel.shared : memref<24x256xf32>
  %c = kernel.shared : memref<6144xf32>
  %t = kernel.thread_id x
  %blk = kernel.block_id x
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c24 = arith.constant 24 : index
  %c256 = arith.constant 256 : index
  %last = arith.constant 6143 : index
  %one = arith.constant 1.0 : f32
  scf.for %r = %c0 to %c24 step %c1 {
    %p = arith.muli %r, %c256 : index
    %i = arith.addi %p, %t : index
    %v = kernel.load %x[%blk, %i] : memref<4x6144xf32>
    kernel.store %v, %a[%i] : memref<6144xf32>
    %sq = arith.mulf %v, %v : f32
    kernel.store %sq, %b[%r, %t] : memref<24x256xf32>
    %inc = arith.addf %v, %one : f32
    kernel.store %inc, %c[%i] : memref<6144xf32>
  }
  kernel.barrier
  scf.for %r = %c0 to %c24 step %c1 {
    %p = arith.muli %r, %c256 : index
    %i = arith.addi %p, %t : index
    %j = arith.subi %last, %i : index
    %u = kernel.load %a[%j] : memref<6144xf32>
    %w = kernel.load %b[%r, %t] : memref<24x256xf32>
    %z = kernel.load %c[%j] : memref<6144xf32>
    %s = arith.subf %u, %w : f32
    %o = arith.mulf %s, %z : f32
    kernel.store %o, %y[%blk, %i] : memref<4x6144xf32>
  }
  kernel.return
}
"""
"""Each block of 256 threads stages its row of ``x`` in three 24 KiB buffers (72 KiB in all):
``x``, ``x²`` and ``x + 1``; after a barrier, ``y[i] = (x[j] - x[i]²) · (x[j] + 1)`` with
``j = 6143 - i``, read by other threads than the ones that wrote it."""


def _reference(x: np.ndarray) -> np.ndarray:
    flipped = x[:, ::-1]
    return (flipped - x * x) * (flipped + np.float32(1))


def parse(text: str) -> ModuleOp:
    module = Parser(make_context(), text).parse_module()
    module.verify()
    return module




def launches(module: ModuleOp) -> list[kernel.LaunchOp]:
    return [op for op in module.walk() if isinstance(op, kernel.LaunchOp)]


# --- the layout ----------------------------------------------------------------------------------


def test_layout_rounds_to_16_bytes_in_declaration_order() -> None:
    """Offsets follow declaration order, each buffer rounded up to 16 bytes; more than 48 KiB
    is dynamic, exactly 48 KiB is not."""
    text = """
kernel.func @k(%x: memref<4xf32>) block [32, 1, 1] {
  %h = kernel.shared : memref<9xf16>
  %s = kernel.shared : memref<SIZExf32>
  %d = kernel.shared : memref<3xf64>
  %z = kernel.shared : memref<f32>
  kernel.return
}
"""
    (func,) = parse(text.replace("SIZE", "12288")).ops
    assert isinstance(func, kernel.FuncOp)
    layout = shared_layout(func)
    assert list(layout.offsets.values()) == [0, 32, 32 + 49152, 32 + 49152 + 32]
    assert layout.total == 32 + 49152 + 32 + 16
    assert layout.dynamic
    (small,) = parse(text.replace("SIZE", "12268")).ops
    assert isinstance(small, kernel.FuncOp)
    assert shared_layout(small).total == 49152 and not shared_layout(small).dynamic
    assert shared_layout(small, static_limit=1024).dynamic


# --- the CUDA IR and source ----------------------------------------------------------------------


def test_cuda_text() -> None:
    """One extern byte array; each buffer a const pointer at its offset, indexed as before;
    the launch gets the 73728 bytes."""
    module = lower(STAGES.replace("SMEM", "0"))
    (launch,) = launches(module)
    assert launch.shared_bytes == 73728
    (k,) = [op for op in module.ops if isinstance(op, cuda.KernelOp)]
    assert k.dynamic_shared_bytes == 73728
    text = flat(cuda_source(module))
    assert ("extern __shared__ __align__(16) unsigned char smem[]; "
            "float* const a = (float*)&smem[0]; "
            "float* const b = (float*)&smem[24576]; "
            "float* const c = (float*)&smem[49152]; ") in text
    assert "a[i] = v; b[r * 256 + t] = v * v; c[i] = v + 1.0f;" in text
    assert "y[blk * 6144 + i1] = (a[j] - b[r1 * 256 + t]) * c[j];" in text
    assert text.count("__shared__") == 1


def test_launch_asking_for_more_keeps_its_smem() -> None:
    """``smem`` is raised to what the kernel needs, never lowered."""
    module = lower(STAGES.replace("SMEM", "100000"))
    (launch,) = launches(module)
    assert launch.shared_bytes == 100000


def test_executor_plan_passes_the_bytes() -> None:
    """The executor's plan launches with the launch's ``smem`` (the runtime opts the kernel
    in to more than 48 KiB of dynamic shared memory before such a launch)."""
    from llmopt.codegen.executor import plan_host_function

    plan = plan_host_function(lower(STAGES.replace("SMEM", "0")))
    (step,) = plan.steps[1:]
    assert step.kernel == "stages" and step.shared_bytes == 73728  # type: ignore[union-attr]


def test_compiles_to_cubin() -> None:
    """NVRTC accepts the dynamic form for sm_90 (the static one is over its 48 KiB)."""
    cubin = compile_cuda(cuda_source(lower(STAGES.replace("SMEM", "0"))), arch="sm_90",
                         cache=NO_CACHE)
    assert cubin[:4] == b"\x7fELF"


def test_at_48_kib_nothing_changes() -> None:
    """48 KiB exactly (without ``b``): static arrays and smem 0, as always."""
    text = STAGES.replace("SMEM", "0").replace("%b = kernel.shared : memref<24x256xf32>\n", "")
    text = "\n".join(line for line in text.splitlines() if "%b[" not in line)
    text = text.replace("%s = arith.subf %u, %w", "%s = arith.subf %u, %u")
    module = lower(text)
    (launch,) = launches(module)
    assert launch.shared_bytes == 0
    (k,) = [op for op in module.ops if isinstance(op, cuda.KernelOp)]
    assert k.dynamic_shared is None
    source = flat(cuda_source(module))
    assert "{ __shared__ __align__(16) float a[6144]; __shared__ __align__(16) float c[6144]; " \
        "const long long t = (long long)threadIdx.x;" in source
    assert "extern" not in source.replace('extern "C"', "")
    assert compile_cuda(cuda_source(module), arch="sm_90", cache=NO_CACHE)[:4] == b"\x7fELF"


def test_half_buffers_bring_their_header() -> None:
    """A dynamic ``__half`` buffer is a pointer; ``cuda_fp16.h`` is still included."""
    text = """
func.func @main(%x: memref<64xf16>) -> memref<64xf16> {
  %y = memref.alloc() : memref<64xf16>
  kernel.launch @h grid [1, 1, 1] block [64, 1, 1] smem 0 (%x, %y)
      : memref<64xf16>, memref<64xf16>
  func.return %y : memref<64xf16>
}
kernel.func @h(%x: memref<64xf16>, %y: memref<64xf16>) block [64, 1, 1] {
  %big = kernel.shared : memref<12288xf32>
  %s = kernel.shared : memref<64xf16>
  %t = kernel.thread_id x
  %v = kernel.load %x[%t] : memref<64xf16>
  kernel.store %v, %s[%t] : memref<64xf16>
  kernel.barrier
  %c63 = arith.constant 63 : index
  %j = arith.subi %c63, %t : index
  %u = kernel.load %s[%j] : memref<64xf16>
  kernel.store %u, %y[%t] : memref<64xf16>
  kernel.return
}
"""
    source = cuda_source(lower(text))
    assert source.startswith("#include <cuda_fp16.h>\n")
    assert "__half* const s = (__half*)&smem[49152];" in source
    assert compile_cuda(source, arch="sm_90", cache=NO_CACHE)[:4] == b"\x7fELF"


def test_arch_limit() -> None:
    """More than a block may use on the arch is an error naming the kernel and the bytes."""
    text = STAGES.replace("SMEM", "0").replace("memref<24x256xf32>", "memref<120x256xf32>")
    func = next(op for op in parse(text).ops if isinstance(op, kernel.FuncOp))
    assert shared_layout(func).total == 172032
    lower(text, arch="sm_90")  # 176 KiB fit the 227 KiB of sm_90
    with pytest.raises(PassFailedException,
                       match=r"kernel @stages needs 172032 bytes of shared memory \(3 "
                             r"kernel.shared buffers\), more than the 166912 bytes a block may "
                             r"use on sm_80"):
        lower(text, arch="sm_80")
    with pytest.raises(PassFailedException, match="arch must look like 'sm_90'"):
        lower(text, arch="volta")


def test_lowered_ir_round_trips() -> None:
    """``dynamic_shared(n)`` and ``cuda.decl extern __shared__ smem : ui8[]`` print and parse
    back, in the custom and the generic form."""
    from io import StringIO

    from xdsl.printer import Printer

    def show(module: ModuleOp, generic: bool) -> str:
        out = StringIO()
        Printer(out, print_generic_format=generic).print_op(module)
        return out.getvalue()

    module = lower(STAGES.replace("SMEM", "0"))
    text = show(module, False)
    assert "dynamic_shared(73728)" in text
    assert "cuda.decl extern __shared__ smem : ui8[] align 16" in text
    for generic in (False, True):
        again = parse(show(module, generic))
        assert show(again, False) == text


@pytest.mark.parametrize("body,message", [
    ("cuda.decl extern smem : ui8[] align 16",
     r"only the dynamic shared memory is declared extern"),
    ("cuda.decl extern __shared__ smem : ui8[16] align 16",
     r"an extern __shared__ array has no bound \('\[\]'\)"),
    ("cuda.decl __shared__ smem : ui8[] align 16",
     r"array extent must be positive \(only an extern __shared__ array has no bound\)"),
    ("cuda.decl extern __shared__ smem : ui8",
     r"only the dynamic shared memory is declared extern"),
])
def test_extern_declarations_are_verified(body: str, message: str) -> None:
    """``extern`` is for the dynamic shared memory only: ``extern __shared__ T name[]``."""
    module = Parser(make_context(), f"cuda.kernel @k(n : index) dynamic_shared(16) {{\n"
                                    f"  {body}\n}}").parse_module()
    with pytest.raises(VerifyException, match=message):
        module.verify()


@pytest.mark.parametrize("head,message", [
    ("cuda.kernel @k(n : index)",
     r"kernel @k declares the extern __shared__ array 'smem' but no dynamic_shared\(bytes\)"),
    ("cuda.kernel @k(n : index) dynamic_shared(0)",
     r"dynamic_shared must be a positive number of bytes"),
])
def test_dynamic_shared_is_verified(head: str, message: str) -> None:
    """A kernel with an extern shared array states how many bytes its launches provide."""
    module = Parser(make_context(), f"{head} {{\n"
                                    "  cuda.decl extern __shared__ smem : ui8[] align 16\n"
                                    "}").parse_module()
    with pytest.raises(VerifyException, match=message):
        module.verify()


def test_launch_with_too_little_smem_is_rejected() -> None:
    """After ``kernel-to-cuda`` a launch must provide the kernel's dynamic shared memory."""
    module = lower(STAGES.replace("SMEM", "0"))
    (launch,) = launches(module)
    launch.smem = IntegerAttr(65536, i64)
    with pytest.raises(VerifyException, match=r"smem 65536 is less than the 73728 bytes of "
                                              r"dynamic shared memory that @stages needs"):
        module.verify()


# --- interpreted ---------------------------------------------------------------------------------


@pytest.mark.parametrize("smem", [0, 73728])
def test_interpreted_whatever_the_launch_smem(smem: int) -> None:
    """The Kernel-IR interpreter runs the kernel (race checks on) as written (``smem 0``) and
    as ``kernel-to-cuda`` makes its launch (``smem 73728``): shared buffers are buffers."""
    module = parse(STAGES.replace("SMEM", str(smem)))
    (x,) = random_inputs(module, seed=1)
    (y,) = run(module, [x])
    np.testing.assert_array_equal(y, _reference(x))


TILE = """
func.func @forward(%x: memref<4x6144xf32>) -> memref<4x6144xf32> {
  %y = memref.alloc() : memref<4x6144xf32>
  tile.kernel @flip grid [4, 1, 1] block [256, 1, 1] (%a = %x : memref<4x6144xf32>,
                                                     %o = %y : memref<4x6144xf32>) {
    tile.forall (%r) in [4] over blocks {
      %s = tile.alloc shared : memref<6144xf32>
      %q = tile.alloc shared : memref<2x6144xf32>
      tile.forall (%j) in [6144] over block_threads {
        %v = loop.load %a[%r, %j] : memref<4x6144xf32>
        loop.store %v, %s[%j] : memref<6144xf32>
        %w = arith.mulf %v, %v : f32
        loop.store %w, %q[0, %j] : memref<2x6144xf32>
        %one = arith.constant 1.0 : f32
        %inc = arith.addf %v, %one : f32
        loop.store %inc, %q[1, %j] : memref<2x6144xf32>
      }
      tile.forall (%j) in [6144] over block_threads {
        %u = loop.load %s[6143 - %j] : memref<6144xf32>
        %w = loop.load %q[0, %j] : memref<2x6144xf32>
        %z = loop.load %q[1, 6143 - %j] : memref<2x6144xf32>
        %d = arith.subf %u, %w : f32
        %p = arith.mulf %d, %z : f32
        loop.store %p, %o[%r, %j] : memref<4x6144xf32>
      }
    }
  }
  func.return %y : memref<4x6144xf32>
}
"""
"""The same computation in Tile IR: two ``tile.alloc shared`` of 24 and 48 KiB."""

TILE_PIPELINE = "tile-to-kernel,canonicalize,cse,kernel-to-cuda"


def test_tile_ir_lowers_to_dynamic_shared_memory() -> None:
    """Through ``tile-to-kernel`` (interpreted the same at Tile and Kernel IR) to CUDA that
    compiles: 72 KiB of dynamic shared memory."""
    module = parse(TILE)
    (x,) = random_inputs(module, seed=2)
    np.testing.assert_array_equal(run(module, [x])[0], _reference(x))
    llmopt.lower(module, "tile-to-kernel,canonicalize,cse")
    np.testing.assert_array_equal(run(module, [x])[0], _reference(x))
    llmopt.lower(module, "kernel-to-cuda")
    (launch,) = launches(module)
    assert launch.shared_bytes == 73728
    source = cuda_source(module)
    assert "float* const q = (float*)&smem[24576];" in source
    assert compile_cuda(source, arch="sm_90", cache=NO_CACHE)[:4] == b"\x7fELF"


# --- on the GPU ---------------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_kernel_ir_with_72_kib_of_shared_memory() -> None:
    """Three 24 KiB buffers in dynamic shared memory, on the GPU through the executor: the
    launch opts in above 48 KiB and the numbers match the Kernel-IR interpreter."""
    import torch

    from llmopt.codegen.executor import CompiledProgram

    text = STAGES.replace("SMEM", "0")
    (x,) = random_inputs(parse(text), seed=3)
    (want,) = run(parse(text), [x])
    program = CompiledProgram(lower(text))
    (y,) = program(torch.from_numpy(x).cuda())
    torch.cuda.synchronize()
    np.testing.assert_allclose(y.cpu().numpy(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
def test_gpu_tile_ir_end_to_end() -> None:
    """The Tile-IR version, lowered by ``llmopt.lower`` and run by ``llmopt``'s executor (also
    captured in a CUDA graph), matches the Tile-IR interpreter."""
    import torch

    from llmopt.codegen.executor import CompiledProgram

    module = parse(TILE)
    inputs = [random_inputs(module, seed=s)[0] for s in (4, 5)]
    wants = [run(module, [x])[0] for x in inputs]
    llmopt.lower(module, TILE_PIPELINE)
    for graph in (False, True):
        program = CompiledProgram(module, cuda_graph=graph)
        for x, want in zip(inputs, wants, strict=True):
            (y,) = program(torch.from_numpy(x).cuda())
            torch.cuda.synchronize()
            np.testing.assert_allclose(y.cpu().numpy(), want, rtol=1e-6, atol=1e-6)
