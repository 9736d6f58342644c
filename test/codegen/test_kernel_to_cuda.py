"""``kernel-to-cuda``, the CUDA printer and the executor on hand-written Kernel IR.

Every kernel is lowered, printed and compiled to CUBIN with NVRTC for ``sm_90`` (no GPU
needed); tests marked ``gpu`` also run the programs and compare with torch.
"""

from __future__ import annotations

import math
import re

import pytest
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    Signedness,
    f32,
    f64,
    i1,
    i32,
    i64,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import PassFailedException

from llmopt.api import make_context
from llmopt.codegen.cache import KernelCache
from llmopt.codegen.cuda_printer import c_literal, c_type, cuda_source
from llmopt.codegen.executor import (
    AllocStep,
    ExecutorError,
    LaunchStep,
    plan_host_function,
)
from llmopt.codegen.nvrtc import compile_cuda
from llmopt.dialects import cuda
from llmopt.lowering.kernel_to_cuda import KernelToCuda

# --- hand-written Kernel IR -----------------------------------------------------------------

ELEMENTWISE = """
func.func @main(%x: memref<1000xf32>) -> memref<1000xf32> {
  %y = memref.alloc() : memref<1000xf32>
  kernel.launch @scale_exp grid [4, 1, 1] block [256, 1, 1] smem 0 (%x, %y)
      : memref<1000xf32>, memref<1000xf32>
  func.return %y : memref<1000xf32>
}
kernel.func @scale_exp(%x: memref<1000xf32>, %y: memref<1000xf32>) block [256, 1, 1] {
  %tid = kernel.thread_id x
  %bid = kernel.block_id x
  %bdim = kernel.block_dim x
  %gdim = kernel.grid_dim x
  %c1000 = arith.constant 1000 : index
  %t0 = arith.muli %bid, %bdim : index
  %start = arith.addi %t0, %tid : index
  %stride = arith.muli %gdim, %bdim : index
  scf.for %i = %start to %c1000 step %stride {
    %v = kernel.load %x[%i] : memref<1000xf32>
    %c2 = arith.constant 2.0 : f32
    %w = arith.mulf %v, %c2 : f32
    %e = math.exp %w : f32
    kernel.store %e, %y[%i] : memref<1000xf32>
  }
  kernel.return
}
"""

REDUCTION = """
func.func @main(%x: memref<8x1000xf32>) -> memref<8xf32> {
  %y = memref.alloc() : memref<8xf32>
  kernel.launch @rowsum grid [8, 1, 1] block [256, 1, 1] smem 0 (%x, %y)
      : memref<8x1000xf32>, memref<8xf32>
  func.return %y : memref<8xf32>
}
kernel.func @rowsum(%x: memref<8x1000xf32>, %y: memref<8xf32>) block [256, 1, 1] {
  %red = kernel.shared : memref<8xf32>
  %tid = kernel.thread_id x
  %row = kernel.block_id x
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %c32 = arith.constant 32 : index
  %c256 = arith.constant 256 : index
  %c1000 = arith.constant 1000 : index
  %zero = arith.constant 0.0 : f32
  %part = scf.for %j = %tid to %c1000 step %c256 iter_args(%acc = %zero) -> (f32) {
    %v = kernel.load %x[%row, %j] : memref<8x1000xf32>
    %s = arith.addf %acc, %v : f32
    scf.yield %s : f32
  }
  %s16 = kernel.shuffle_xor %part, 16 : f32
  %a16 = arith.addf %part, %s16 : f32
  %s8 = kernel.shuffle_xor %a16, 8 : f32
  %a8 = arith.addf %a16, %s8 : f32
  %s4 = kernel.shuffle_xor %a8, 4 : f32
  %a4 = arith.addf %a8, %s4 : f32
  %s2 = kernel.shuffle_xor %a4, 2 : f32
  %a2 = arith.addf %a4, %s2 : f32
  %s1 = kernel.shuffle_xor %a2, 1 : f32
  %a1 = arith.addf %a2, %s1 : f32
  %lane = arith.remsi %tid, %c32 : index
  %warp = arith.divsi %tid, %c32 : index
  %is0 = arith.cmpi eq, %lane, %c0 : index
  scf.if %is0 {
    kernel.store %a1, %red[%warp] : memref<8xf32>
  }
  kernel.barrier
  %first = arith.cmpi slt, %tid, %c8 : index
  %p = scf.if %first -> (f32) {
    %q = kernel.load %red[%tid] : memref<8xf32>
    scf.yield %q : f32
  } else {
    scf.yield %zero : f32
  }
  %t4 = kernel.shuffle_xor %p, 4 : f32
  %b4 = arith.addf %p, %t4 : f32
  %t2 = kernel.shuffle_xor %b4, 2 : f32
  %b2 = arith.addf %b4, %t2 : f32
  %t1 = kernel.shuffle_xor %b2, 1 : f32
  %b1 = arith.addf %b2, %t1 : f32
  %t0 = arith.cmpi eq, %tid, %c0 : index
  scf.if %t0 {
    kernel.store %b1, %y[%row] : memref<8xf32>
  }
  kernel.return
}
"""

F64 = """
func.func @main(%x: memref<4x33xf64>, %w: memref<33xf64>) -> memref<4x33xf64> {
  %y = memref.alloc() : memref<4x33xf64>
  kernel.launch @rmsnorm64 grid [4, 1, 1] block [32, 1, 1] smem 0 (%x, %w, %y)
      : memref<4x33xf64>, memref<33xf64>, memref<4x33xf64>
  func.return %y : memref<4x33xf64>
}
kernel.func @rmsnorm64(%x: memref<4x33xf64>, %w: memref<33xf64>, %y: memref<4x33xf64>)
    block [32, 1, 1] {
  %tid = kernel.thread_id x
  %row = kernel.block_id x
  %c32 = arith.constant 32 : index
  %c33 = arith.constant 33 : index
  %zero = arith.constant 0.0 : f64
  %eps = arith.constant 1.0e-6 : f64
  %n = arith.constant 33.0 : f64
  %ss = scf.for %j = %tid to %c33 step %c32 iter_args(%acc = %zero) -> (f64) {
    %v = kernel.load %x[%row, %j] : memref<4x33xf64>
    %sq = arith.mulf %v, %v : f64
    %s = arith.addf %acc, %sq : f64
    scf.yield %s : f64
  }
  %s16 = kernel.shuffle_xor %ss, 16 : f64
  %a16 = arith.addf %ss, %s16 : f64
  %s8 = kernel.shuffle_xor %a16, 8 : f64
  %a8 = arith.addf %a16, %s8 : f64
  %s4 = kernel.shuffle_xor %a8, 4 : f64
  %a4 = arith.addf %a8, %s4 : f64
  %s2 = kernel.shuffle_xor %a4, 2 : f64
  %a2 = arith.addf %a4, %s2 : f64
  %s1 = kernel.shuffle_xor %a2, 1 : f64
  %a1 = arith.addf %a2, %s1 : f64
  %mean = arith.divf %a1, %n : f64
  %me = arith.addf %mean, %eps : f64
  %r = math.rsqrt %me : f64
  scf.for %j = %tid to %c33 step %c32 {
    %v = kernel.load %x[%row, %j] : memref<4x33xf64>
    %g = kernel.load %w[%j] : memref<33xf64>
    %t = arith.mulf %v, %r : f64
    %u = arith.mulf %t, %g : f64
    %th = math.tanh %u : f64
    %mx = arith.maximumf %th, %u : f64
    %inf = arith.constant 0x7FF0000000000000 : f64
    %mn = arith.minimumf %mx, %inf : f64
    %sqrt = math.sqrt %eps : f64
    %out = arith.addf %mn, %sqrt : f64
    kernel.store %out, %y[%row, %j] : memref<4x33xf64>
  }
  kernel.return
}
"""

# Negative-safe integer division: floordivsi/ceildivsi, remsi fixed up to a modulo, unsigned
# ops, i1 extensions and casts. Column c of row t (k = t - 50) holds:
# 0 k floordiv b, 1 k mod b, 2 k ceildiv nb, 3 k floordiv nb, 4 k divsi nb, 5 k remsi nb,
# 6 max(k, 0), 7 floor(k * 0.5) + (k <u 0) + sext(k <u 0)  with b = d[0], nb = d[1].
INTOPS = """
func.func @main(%d: memref<3xi64>) -> memref<100x8xi64> {
  %y = memref.alloc() : memref<100x8xi64>
  kernel.launch @intops grid [1, 1, 1] block [128, 1, 1] smem 0 (%d, %y)
      : memref<3xi64>, memref<100x8xi64>
  func.return %y : memref<100x8xi64>
}
kernel.func @intops(%d: memref<3xi64>, %y: memref<100x8xi64>) block [128, 1, 1] {
  %tid = kernel.thread_id x
  %c100 = arith.constant 100 : index
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c5 = arith.constant 5 : index
  %c6 = arith.constant 6 : index
  %c7 = arith.constant 7 : index
  %in = arith.cmpi slt, %tid, %c100 : index
  scf.if %in {
    %c50 = arith.constant 50 : index
    %k = arith.subi %tid, %c50 : index
    %ki = arith.index_cast %k : index to i64
    %b = kernel.load %d[%c0] : memref<3xi64>
    %nb = kernel.load %d[%c1] : memref<3xi64>
    %zero = arith.constant 0 : i64
    %q = arith.floordivsi %ki, %b : i64
    kernel.store %q, %y[%tid, %c0] : memref<100x8xi64>
    %r = arith.remsi %ki, %b : i64
    %neg = arith.cmpi slt, %r, %zero : i64
    %rb = arith.addi %r, %b : i64
    %mod = arith.select %neg, %rb, %r : i64
    kernel.store %mod, %y[%tid, %c1] : memref<100x8xi64>
    %cd = arith.ceildivsi %ki, %nb : i64
    kernel.store %cd, %y[%tid, %c2] : memref<100x8xi64>
    %fq = arith.floordivsi %ki, %nb : i64
    kernel.store %fq, %y[%tid, %c3] : memref<100x8xi64>
    %dv = arith.divsi %ki, %nb : i64
    kernel.store %dv, %y[%tid, %c4] : memref<100x8xi64>
    %rm = arith.remsi %ki, %nb : i64
    kernel.store %rm, %y[%tid, %c5] : memref<100x8xi64>
    %mx = arith.maxsi %ki, %zero : i64
    kernel.store %mx, %y[%tid, %c6] : memref<100x8xi64>
    %t32 = arith.trunci %ki : i64 to i32
    %f = arith.sitofp %t32 : i32 to f32
    %h = arith.constant 0.5 : f32
    %fh = arith.mulf %f, %h : f32
    %fl = math.floor %fh : f32
    %back = arith.fptosi %fl : f32 to i64
    %ult = arith.cmpi ult, %ki, %zero : i64
    %ue = arith.extui %ult : i1 to i64
    %se = arith.extsi %ult : i1 to i64
    %s1 = arith.addi %back, %ue : i64
    %s2 = arith.addi %s1, %se : i64
    kernel.store %s2, %y[%tid, %c7] : memref<100x8xi64>
  }
  kernel.return
}
"""

# In-place (both parameters get one buffer) and a loop whose iter_args are assigned in
# parallel: (p, q) <- (q, p + q).
INPLACE = """
func.func @main(%x: memref<64xf32>) -> memref<64xf32> {
  kernel.launch @inplace grid [1, 1, 1] block [64, 1, 1] smem 0 (%x, %x)
      : memref<64xf32>, memref<64xf32>
  func.return %x : memref<64xf32>
}
kernel.func @inplace(%a: memref<64xf32>, %b: memref<64xf32>) block [64, 1, 1] {
  %t = kernel.thread_id x
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c10 = arith.constant 10 : index
  %one = arith.constant 1.0 : f32
  %two = arith.constant 2.0 : f32
  %r:2 = scf.for %i = %c0 to %c10 step %c1 iter_args(%p = %one, %q = %two) -> (f32, f32) {
    %s = arith.addf %p, %q : f32
    scf.yield %q, %s : f32, f32
  }
  %v = kernel.load %a[%t] : memref<64xf32>
  kernel.store %r#0, %b[%t] : memref<64xf32>
  %w = arith.addf %v, %r#1 : f32
  kernel.store %w, %b[%t] : memref<64xf32>
  kernel.return
}
"""

HALF = """
func.func @main(%x: memref<4x8xf16>) -> memref<4x8xf16> {
  %y = memref.alloc() : memref<4x8xf16>
  kernel.launch @halve grid [1, 1, 1] block [32, 1, 1] smem 0 (%x, %y)
      : memref<4x8xf16>, memref<4x8xf16>
  func.return %y : memref<4x8xf16>
}
kernel.func @halve(%x: memref<4x8xf16>, %y: memref<4x8xf16>) block [32, 1, 1] {
  %t = kernel.thread_id x
  %c8 = arith.constant 8 : index
  %i = arith.divui %t, %c8 : index
  %j = arith.remui %t, %c8 : index
  %v = kernel.load %x[%i, %j] : memref<4x8xf16>
  %f = arith.extf %v : f16 to f32
  %h = arith.constant 0.5 : f32
  %m = arith.mulf %f, %h : f32
  %n = arith.negf %m : f32
  %o = arith.truncf %n : f32 to f16
  kernel.store %o, %y[%i, %j] : memref<4x8xf16>
  kernel.return
}
"""

KERNELS = {
    "elementwise": ELEMENTWISE, "reduction": REDUCTION, "f64": F64, "intops": INTOPS,
    "inplace": INPLACE, "half": HALF,
}  # fmt: skip

NO_CACHE = KernelCache("/nonexistent", enabled=False)


def lower(text: str, arch: str = "sm_90", index_bitwidth: int = 64) -> ModuleOp:
    """Parse Kernel IR, run ``kernel-to-cuda`` for ``arch``, verify. The texts these tests
    check are of ``long long`` indices (``index_bitwidth=64``; 0 is the pass's default)."""
    ctx = make_context()
    module = Parser(ctx, text).parse_module()
    module.verify()
    KernelToCuda(arch=arch, index_bitwidth=index_bitwidth).apply(ctx, module)
    module.verify()
    return module


def body(source: str) -> str:
    """The source with whitespace runs collapsed, for substring checks across lines."""
    return re.sub(r"\s+", " ", source)


# --- lowering, printing, compiling ------------------------------------------------------------


@pytest.mark.parametrize("bits", [64, 0])
@pytest.mark.parametrize("name", list(KERNELS))
def test_every_kernel_compiles(name: str, bits: int) -> None:
    """Each lowered kernel prints to CUDA that NVRTC compiles to an sm_90 CUBIN, with
    ``long long`` indices and with the pass's default widths."""
    module = lower(KERNELS[name], index_bitwidth=bits)
    assert not any(op.name.startswith("kernel.func") for op in module.ops)
    source = cuda_source(module)
    assert 'extern "C" __global__ void __launch_bounds__(' in source
    cubin = compile_cuda(source, arch="sm_90", cache=NO_CACHE)
    assert cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("name", list(KERNELS))
def test_lowered_ir_round_trips(name: str) -> None:
    """The lowered module prints, in custom and generic form, to text that parses back to the
    same module."""
    module = lower(KERNELS[name])
    ctx = make_context()
    for generic in (False, True):
        text = _print(module, generic)
        again = Parser(ctx, text).parse_module()
        again.verify()
        assert _print(again, False) == _print(module, False)


def _print(module: ModuleOp, generic: bool) -> str:
    from io import StringIO

    out = StringIO()
    Printer(out, print_generic_format=generic).print_op(module)
    return out.getvalue()


def test_elementwise_text() -> None:
    """Read-only buffers are const, every buffer restrict; a single-use load inlines."""
    source = body(cuda_source(lower(ELEMENTWISE)))
    assert ('extern "C" __global__ void __launch_bounds__(256) scale_exp( '
            "const float* __restrict__ x, float* __restrict__ y) {") in source
    assert "const long long bdim = (long long)blockDim.x;" in source
    assert "const long long stride = (long long)gridDim.x * bdim;" in source
    assert ("for (long long i = (long long)blockIdx.x * bdim + (long long)threadIdx.x; "
            "i < 1000; i += stride) {") in source
    assert "y[i] = expf(x[i] * 2.0f);" in source


def test_reduction_text() -> None:
    """Shared buffer, warp shuffles, barrier, loop-carried and branch-carried values."""
    source = body(cuda_source(lower(REDUCTION)))
    assert "__shared__ __align__(16) float red[8];" in source
    assert "float acc = 0.0f;" in source
    assert "for (long long j = tid; j < 1000; j += 256) { acc = acc + x[row * 1000 + j]; }" in (
        source)
    assert "const float s16 = __shfl_xor_sync(0xffffffffu, acc, 16);" in source
    assert "if ((tid % 32) == 0) { red[warp] = a1; }" in source or (
        "if (tid % 32 == 0) { red[warp] = a1; }" in source)
    assert "__syncthreads();" in source
    assert "float p; if (tid < 8) { p = red[tid]; } else { p = 0.0f; }" in source
    assert "if (tid == 0) { y[row] = b1; }" in source


def test_f64_text() -> None:
    """Double math functions, NaN-propagating max/min, an exact infinity."""
    source = body(cuda_source(lower(F64)))
    assert "const double* __restrict__ w" in source
    assert "double acc = 0.0;" in source
    assert "const double r = rsqrt((a2 + s1) / 33.0 + 1e-06);" in source
    assert "(th != th || u != u) ? th + u : fmax(th, u)" in source
    assert "__longlong_as_double(0x7ff0000000000000LL)" in source
    assert "sqrt(1e-06)" in source


def test_integer_division_text() -> None:
    """floordiv/ceildiv round towards -inf/+inf with one exact C expression each."""
    source = body(cuda_source(lower(INTOPS)))
    assert "const long long ki = (long long)(tid - 50);" in source
    assert "y[tid * 8] = ki / b - (long long)(ki % b != 0 && (ki ^ b) < 0);" in source
    assert "y[tid * 8 + 2] = ki / nb + (long long)(ki % nb != 0 && (ki ^ nb) >= 0);" in source
    assert "y[tid * 8 + 5] = ki % nb;" in source
    assert "max(ki, 0LL)" in source
    assert "(unsigned long long)ki < 0ull" in source


def test_parallel_assignment_and_aliasing() -> None:
    """``(p, q) <- (q, p + q)`` saves ``p + q`` first; buffers passed twice and written lose
    ``__restrict__``; a load is not moved past a store that may clobber it."""
    source = body(cuda_source(lower(INPLACE)))
    assert "inplace(const float* a, float* b)" in source
    assert "const float q_next = p + q; p = q; q = q_next;" in source
    assert "const float v = a[t]; b[t] = p; b[t] = v + q;" in source


def test_half_includes_its_header() -> None:
    """A kernel on f16 buffers includes cuda_fp16.h."""
    source = cuda_source(lower(HALF))
    assert source.startswith("#include <cuda_fp16.h>\n\n")
    assert "const __half* __restrict__ x" in body(source)
    assert "(unsigned long long)t / 8ull" in source


def test_unsupported_op_is_reported() -> None:
    """An op the pass cannot lower fails the pass with the op's name."""
    text = """
    kernel.func @k(%a: memref<4xi32>) block [32, 1, 1] {
      %c0 = arith.constant 0 : index
      %v = kernel.load %a[%c0] : memref<4xi32>
      %w = math.ipowi %v, %v : i32
      kernel.store %w, %a[%c0] : memref<4xi32>
      kernel.return
    }
    """
    with pytest.raises(PassFailedException, match="math.ipowi"):
        lower(text)


# --- the printer's spelling -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "converted", "text"),
    [
        (FloatAttr(0.1, f32), False, "0.1f"),
        (FloatAttr(1.0, f32), False, "1.0f"),
        (FloatAttr(-2.5, f32), False, "-2.5f"),
        (FloatAttr(1e-5, f32), False, "1e-05f"),
        (FloatAttr(3.4028234663852886e38, f32), False, "3.4028235e+38f"),
        (FloatAttr(math.inf, f32), False, "__int_as_float(0x7f800000)"),
        (FloatAttr(-math.inf, f32), False, "-__int_as_float(0x7f800000)"),
        (FloatAttr(0.1, f64), False, "0.1"),
        (FloatAttr(1 / 3, f64), False, "0.3333333333333333"),
        (FloatAttr(-math.inf, f64), False, "-__longlong_as_double(0x7ff0000000000000LL)"),
        (IntegerAttr(5, i32), False, "5"),
        (IntegerAttr(5, i64), False, "5LL"),
        (IntegerAttr(5, IndexType()), True, "5"),
        (IntegerAttr(1 << 40, IndexType()), True, "1099511627776LL"),
        (IntegerAttr(-(1 << 63), i64), True, "(-9223372036854775807LL - 1LL)"),
        (IntegerAttr(1, i1), False, "true"),
        (IntegerAttr(0xFFFFFFFF, IntegerType(32, Signedness.UNSIGNED)), False, "0xffffffffu"),
        (IntegerAttr(8, IntegerType(64, Signedness.UNSIGNED)), False, "8ull"),
    ],
)
def test_literal_spelling(value: IntegerAttr | FloatAttr, converted: bool, text: str) -> None:
    """Literals print exactly, with the suffix their type needs."""
    assert c_literal(value, converted)[0] == text


def test_f32_literals_read_back_exactly() -> None:
    """The shortest f32 spelling reads back to the same float for awkward values."""
    import struct

    for bits in (0x3DCCCCCD, 0x00000001, 0x7F7FFFFF, 0x3F800001, 0xBEAAAAAB):
        value = struct.unpack("<f", struct.pack("<I", bits))[0]
        text = c_literal(FloatAttr(value, f32))[0]
        back = struct.unpack("<f", struct.pack("<f", float(text.rstrip("f").lstrip("-"))))[0]
        assert back == abs(value), (hex(bits), text)


def test_type_spelling() -> None:
    """Types print as their C names."""
    assert c_type(cuda.PtrType(f32, constant=True)) == "const float*"
    assert c_type(cuda.PtrType(f64)) == "double*"
    assert c_type(IndexType()) == "long long"
    assert c_type(i1) == "bool"
    assert c_type(IntegerType(32, Signedness.UNSIGNED)) == "unsigned int"
    assert c_type(Float16Type()) == "__half"
    assert c_type(BFloat16Type()) == "__nv_bfloat16"


# --- the executor's plan (no GPU) ---------------------------------------------------------------


def test_plan_of_host_function() -> None:
    """The host function becomes an allocation and a launch; results are slots."""
    plan = plan_host_function(lower(REDUCTION))
    assert plan.name == "main"
    assert [name for name, _ in plan.inputs] == ["x"]
    alloc, launch = plan.steps
    assert isinstance(alloc, AllocStep) and alloc.shape == (8,)
    assert isinstance(launch, LaunchStep)
    assert (launch.kernel, launch.grid, launch.block, launch.args) == (
        "rowsum", (8, 1, 1), (256, 1, 1), (0, alloc.slot))
    assert plan.results == (alloc.slot,)
    assert plan.written_inputs == frozenset()
    assert lower(INPLACE) and plan_host_function(lower(INPLACE)).written_inputs == {0}


def test_plan_rejects_unlowered_module() -> None:
    """Kernels must be lowered before a module can run."""
    module = Parser(make_context(), ELEMENTWISE).parse_module()
    with pytest.raises(ExecutorError, match="run kernel-to-cuda"):
        plan_host_function(module)


# --- on the GPU ---------------------------------------------------------------------------------


def _program(text: str):  # noqa: ANN202 - torch types are imported lazily
    from llmopt.codegen.executor import CompiledProgram

    return CompiledProgram(lower(text))


@pytest.mark.gpu
def test_gpu_elementwise_and_graph_capture() -> None:
    """``exp(2x)`` matches torch, directly and replayed from a CUDA graph."""
    import torch

    program = _program(ELEMENTWISE)
    x = torch.randn(1000, device="cuda")
    (y,) = program(x)
    torch.testing.assert_close(y, torch.exp(2 * x))
    graph = torch.cuda.CUDAGraph()
    program(x)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        (static_y,) = program(x)
    x.copy_(torch.randn(1000, device="cuda"))
    graph.replay()
    torch.testing.assert_close(static_y, torch.exp(2 * x))


@pytest.mark.gpu
def test_gpu_reduction() -> None:
    """Block reduction through shuffles and shared memory matches torch.sum."""
    import torch

    x = torch.randn(8, 1000, device="cuda")
    (y,) = _program(REDUCTION)(x)
    torch.testing.assert_close(y, x.sum(dim=1), rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
def test_gpu_f64() -> None:
    """The f64 kernel matches a float64 torch reference."""
    import torch

    x = torch.randn(4, 33, device="cuda", dtype=torch.float64)
    w = torch.randn(33, device="cuda", dtype=torch.float64)
    (y,) = _program(F64)(x, w)
    u = x * torch.rsqrt((x * x).sum(dim=1, keepdim=True) / 33 + 1e-6) * w
    expected = torch.maximum(torch.tanh(u), u) + math.sqrt(1e-6)
    torch.testing.assert_close(y, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize(("b", "nb"), [(7, -3), (3, 5), (-4, 4)])
def test_gpu_integer_division(b: int, nb: int) -> None:
    """floordiv, ceildiv, remsi and friends on negative operands follow MLIR's semantics."""
    import torch

    d = torch.tensor([b, nb, 0], dtype=torch.int64, device="cuda")
    (y,) = _program(INTOPS)(d)
    rows = []
    for k in range(-50, 50):
        trunc_div = int(k / nb)
        rows.append([k // b, 0, -((-k) // nb), k // nb, trunc_div, k - trunc_div * nb,
                     max(k, 0), math.floor(k * 0.5)])
    expected = torch.tensor(rows, dtype=torch.int64)
    got = y.cpu()
    columns = [0, 2, 3, 4, 5, 6, 7]
    torch.testing.assert_close(got[:, columns], expected[:, columns])
    remsi = torch.fmod(torch.arange(-50, 50), b)
    torch.testing.assert_close(got[:, 1], torch.where(remsi < 0, remsi + b, remsi))


@pytest.mark.gpu
def test_gpu_in_place_and_half() -> None:
    """An in-place kernel (one buffer, two parameters) and an f16 kernel match torch."""
    import torch

    x = torch.randn(64, device="cuda")
    expected = x.clone()
    p, q = 1.0, 2.0
    for _ in range(10):
        p, q = q, p + q
    (out,) = _program(INPLACE)(x)
    torch.testing.assert_close(out, expected + q)
    h = torch.randn(4, 8, device="cuda", dtype=torch.float16)
    (y,) = _program(HALF)(h)
    torch.testing.assert_close(y, -(h.float() * 0.5).half())


@pytest.mark.gpu
def test_gpu_argument_checks() -> None:
    """Wrong shapes, dtypes and devices are reported by argument name."""
    import torch

    program = _program(ELEMENTWISE)
    with pytest.raises(ExecutorError, match=r"\('x'\) has shape \(999,\), expected \(1000,\)"):
        program(torch.zeros(999, device="cuda"))
    with pytest.raises(ExecutorError, match=r"\('x'\) has dtype torch.float64"):
        program(torch.zeros(1000, device="cuda", dtype=torch.float64))
    with pytest.raises(ExecutorError, match=r"\('x'\) is on cpu"):
        program(torch.zeros(1000))
    with pytest.raises(ExecutorError, match="takes 1 arguments"):
        program()
