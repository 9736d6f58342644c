"""The ``mma`` dialect: ``mma.sync`` (one warp's ``m16n8k8`` TF32 product) and
``mma.to_tf32`` in the interpreter, as inline PTX in CUDA, and on the GPU (tests marked
``gpu``). The fragment layout is written out here independently of the interpreter: thread
``4·g + t`` holds ``A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]``, ``B[t][g], B[t+4][g]``
and ``C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from test_kernel_to_cuda import body as flat
from test_kernel_to_cuda import lower
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

import llmopt
from llmopt.api import make_context
from llmopt.codegen.cache import KernelCache
from llmopt.codegen.cuda_printer import cuda_source
from llmopt.codegen.nvrtc import compile_cuda
from llmopt.frontend.capture import capture
from llmopt.interp import run

NO_CACHE = KernelCache("/nonexistent", enabled=False)

WARP_MMA = """
func.func @main(%a: memref<16x8xf32>, %b: memref<8x8xf32>, %c: memref<16x8xf32>)
    -> memref<16x8xf32> {
  %d = memref.alloc() : memref<16x8xf32>
  kernel.launch @mma grid [1, 1, 1] block [32, 1, 1] smem 0 (%a, %b, %c, %d)
      : memref<16x8xf32>, memref<8x8xf32>, memref<16x8xf32>, memref<16x8xf32>
  func.return %d : memref<16x8xf32>
}
kernel.func @mma(%a: memref<16x8xf32>, %b: memref<8x8xf32>, %c: memref<16x8xf32>,
                 %d: memref<16x8xf32>) block [32, 1, 1] {
  %lane = kernel.thread_id x
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %g = arith.divui %lane, %c4 : index
  %t = arith.remui %lane, %c4 : index
  %g8 = arith.addi %g, %c8 : index
  %t4 = arith.addi %t, %c4 : index
  %n0 = arith.muli %t, %c2 : index
  %n1 = arith.addi %n0, %c1 : index
  %a0 = kernel.load %a[%g, %t] : memref<16x8xf32>
  %a1 = kernel.load %a[%g8, %t] : memref<16x8xf32>
  %a2 = kernel.load %a[%g, %t4] : memref<16x8xf32>
  %a3 = kernel.load %a[%g8, %t4] : memref<16x8xf32>
  %b0 = kernel.load %b[%t, %g] : memref<8x8xf32>
  %b1 = kernel.load %b[%t4, %g] : memref<8x8xf32>
  %x0 = kernel.load %c[%g, %n0] : memref<16x8xf32>
  %x1 = kernel.load %c[%g, %n1] : memref<16x8xf32>
  %x2 = kernel.load %c[%g8, %n0] : memref<16x8xf32>
  %x3 = kernel.load %c[%g8, %n1] : memref<16x8xf32>
  %d0, %d1, %d2, %d3 = mma.sync (%a0, %a1, %a2, %a3) * (%b0, %b1) + (%x0, %x1, %x2, %x3)
  kernel.store %d0, %d[%g, %n0] : memref<16x8xf32>
  kernel.store %d1, %d[%g, %n1] : memref<16x8xf32>
  kernel.store %d2, %d[%g8, %n0] : memref<16x8xf32>
  kernel.store %d3, %d[%g8, %n1] : memref<16x8xf32>
  kernel.return
}
"""
"""One warp: ``D = A·B + C`` with each thread loading and storing its fragment elements."""

ROUND = """
func.func @main(%x: memref<64xf32>) -> memref<64xf32> {
  %y = memref.alloc() : memref<64xf32>
  kernel.launch @round grid [2, 1, 1] block [32, 1, 1] smem 0 (%x, %y)
      : memref<64xf32>, memref<64xf32>
  func.return %y : memref<64xf32>
}
kernel.func @round(%x: memref<64xf32>, %y: memref<64xf32>) block [32, 1, 1] {
  %t = kernel.thread_id x
  %b = kernel.block_id x
  %c32 = arith.constant 32 : index
  %o = arith.muli %b, %c32 : index
  %i = arith.addi %o, %t : index
  %v = kernel.load %x[%i] : memref<64xf32>
  %h = mma.to_tf32 %v
  kernel.store %h, %y[%i] : memref<64xf32>
  kernel.return
}
"""


def _tf32_truncated(x: np.ndarray) -> np.ndarray:
    """What the tensor core reads of an ``f32``: its 13 low mantissa bits cleared."""
    return (x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def _warp_inputs(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for shape in ((16, 8), (8, 8),
                                                                        (16, 8))]


def _warp_reference(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    return (_tf32_truncated(a).astype(np.float64) @ _tf32_truncated(b).astype(np.float64)
            + c.astype(np.float64))


def test_interpreter_places_each_fragment_element() -> None:
    """The interpreter's ``mma.sync`` computes ``A·B + C`` from the layout above."""
    module = Parser(make_context(), WARP_MMA).parse_module()
    a, b, c = _warp_inputs()
    (d,) = run(module, [a, b, c])
    np.testing.assert_allclose(d, _warp_reference(a, b, c), rtol=1e-6, atol=1e-6)


def test_to_tf32_rounds_to_nearest_ties_away() -> None:
    """``cvt.rna.tf32.f32``: 10 mantissa bits kept, halfway cases away from zero."""
    ulp = 2.0 ** -10
    x = np.array([1 + ulp / 2, 1 + ulp / 4, -(1 + ulp / 2), 1 + ulp * 0.75, 3.0, np.inf,
                  -np.inf, 0.0] + [0.0] * 56, np.float32)
    x[8] = np.nan
    module = Parser(make_context(), ROUND).parse_module()
    (y,) = run(module, [x])
    np.testing.assert_array_equal(y[:8], [1 + ulp, 1.0, -(1 + ulp), 1 + ulp, 3.0, np.inf,
                                          -np.inf, 0.0])
    assert np.isnan(y[8])


def test_cuda_is_inline_ptx() -> None:
    """Each op is one ``asm`` statement; TF32 operands are passed as their bits."""
    text = flat(cuda_source(lower(WARP_MMA)))
    assert ('asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, '
            '{%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};" : "=f"(') in text
    assert '"r"(__float_as_uint(a[g * 8 + t]))' in text
    rounded = flat(cuda_source(lower(ROUND)))
    assert 'asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(tf32_bits) : "f"(' in rounded
    assert "__uint_as_float(tf32_bits)" in rounded
    for text in (WARP_MMA, ROUND):
        cubin = compile_cuda(cuda_source(lower(text)), arch="sm_90", cache=NO_CACHE)
        assert cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("text,message", [
    ("%d0, %d1, %d2, %d3 = mma.sync (%x, %x, %x) * (%x, %x) + (%x, %x, %x, %x)",
     "mma.sync takes 4 'a' values per thread"),
    ("%d0, %d1, %d2, %d3 = mma.sync (%x, %x, %x, %x) * (%x, %x) + (%x, %x, %x)",
     "mma.sync takes 4 'c' values per thread"),
])
def test_fragment_counts_are_verified(text: str, message: str) -> None:
    source = f"func.func @f(%x: f32) {{\n  {text}\n  func.return\n}}"
    module = Parser(make_context(), source).parse_module()
    with pytest.raises(VerifyException, match=message):
        module.verify()


@pytest.mark.parametrize("constraints,message", [
    ('["r", "f"]', "bad asm constraint 'r' for an output"),
    ('["=r", "=f"]', "bad asm constraint '=f' for an input"),
    ('["=r"]', "cuda.asm needs one constraint per operand"),
])
def test_asm_constraints_are_verified(constraints: str, message: str) -> None:
    source = f"""
cuda.kernel @k(x : f32) {{
  cuda.decl b : ui32
  %0 = cuda.var b : ui32
  %1 = cuda.var x : f32
  cuda.asm "cvt.rna.tf32.f32 %0, %1;" outs(%0 : ui32) ins(%1 : f32) {constraints}
}}"""
    module = Parser(make_context(), source).parse_module()
    with pytest.raises(VerifyException, match=message):
        module.verify()


def _linear_program(blocked: int, m: int = 128, n: int = 192, k: int = 256, split: int = 3):
    """``x @ W^T`` through the register-tile pipeline (``blocked=3``: on the tensor cores,
    operands split as ``mma-fragments{split}`` says) and its float64 reference."""
    proj = torch.nn.Linear(k, n, bias=False)
    x = torch.randn(1, m, k)
    captured = capture(proj, (x,))
    last = f"mma-fragments{{split={split}}}" if blocked == 3 else "vector-fragments"
    passes = ("torch-to-prim,canonicalize,prim-to-loop,fuse-kernels{recompute_limit=0},"
              "canonicalize,cse,loop-to-tile,split-k{split_k=1},"
              f"register-tile{{bm=64 bn=64 tm=4 tn=4 blocked={blocked}}},stage-inputs,"
              f"async-copy,pad-shared,{last},tile-to-kernel,canonicalize,cse,kernel-to-cuda")
    lowered = llmopt.lower(captured.module, passes)
    reference = x.double() @ proj.weight.detach().double().T
    return lowered, captured.params, x, reference


def test_a_tensor_core_linear_lowers_to_mma() -> None:
    """``register-tile{blocked=3}`` + ``mma-fragments`` give three ``mma.sync`` per product
    and the chunk's sums added in ``f32`` (CPU: the CUDA text)."""
    lowered, *_ = _linear_program(3)
    text = cuda_source(lowered)
    assert text.count("mma.sync.aligned.m16n8k8") == 3
    assert "cvt.rna" not in text
    assert text.count("& -8192)") == 2  # hi of each operand: its low 13 bits cleared
    rounded = cuda_source(_linear_program(3, split=1)[0])
    assert rounded.count("cvt.rna.tf32.f32") == 4  # hi and lo of each operand


@pytest.mark.gpu
def test_gpu_warp_mma_matches_numpy() -> None:
    """On the GPU the tensor core computes what the layout above says."""
    from llmopt.codegen.executor import CompiledProgram

    a, b, c = _warp_inputs(1)
    program = CompiledProgram(lower(WARP_MMA))
    (d,) = program(*(torch.from_numpy(v).cuda() for v in (a, b, c)))
    ref = _warp_reference(a, b, c)
    assert np.abs(d.cpu().numpy() - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.gpu
def test_gpu_to_tf32_matches_the_interpreter_bit_for_bit() -> None:
    from llmopt.codegen.executor import CompiledProgram

    x = np.random.default_rng(2).standard_normal(64).astype(np.float32) * 1000
    module = Parser(make_context(), ROUND).parse_module()
    (expected,) = run(module, [x])
    (y,) = CompiledProgram(lower(ROUND))(torch.from_numpy(x).cuda())
    np.testing.assert_array_equal(y.cpu().numpy().view(np.uint32), expected.view(np.uint32))


@pytest.mark.gpu
@pytest.mark.parametrize("split", [1, 2, 3])
def test_gpu_tensor_core_linear_is_as_accurate_as_fma(split: int) -> None:
    """3×TF32 with each chunk's sums added in ``f32``, each way of splitting the operands:
    within float64 as closely as the FMA schedule (measured on the H200 at K = 5632: 2e-7
    with ``split=1``, 3e-7 with ``split=3``, against 9e-7)."""
    from llmopt.codegen.executor import CompiledProgram

    errors = {}
    for blocked in (2, 3):
        torch.manual_seed(0)
        lowered, params, x, reference = _linear_program(blocked, split=split)
        program = CompiledProgram(lowered, params={k: v.cuda() for k, v in params.items()})
        (y,) = program(x.cuda())
        errors[blocked] = float((y.cpu().double() - reference).abs().max()
                                / reference.abs().max())
    assert errors[3] <= max(2 * errors[2], 1e-6), errors


def _heuristic_linear(m: int, n: int, k: int, arch: str):
    """``x @ W^T`` (``m × n × k``) lowered by ``lower-to-cuda`` for ``arch`` with no tuned
    entry (``apply-tuned`` reads only the committed table, which has none for these)."""
    proj = torch.nn.Linear(k, n, bias=False)
    x = torch.randn(1, m, k)
    captured = capture(proj, (x,))
    lowered = llmopt.lower(captured.module, f"lower-to-cuda{{arch={arch}}}")
    return lowered, captured.params, x, x.double() @ proj.weight.detach().double().T


@pytest.mark.parametrize("m,n,split", [(512, 3584, False), (128, 1024, True)])
def test_the_heuristics_put_large_f32_products_on_the_tensor_cores(m: int, n: int,
                                                                    split: bool) -> None:
    """Without a tuned entry a large ``f32`` product runs on the tensor cores for sm_90 —
    whole (112 blocks of 128 × 128) or in K slices, whose kernel ``split-k`` marks
    ``blocked = 3`` — and keeps the FMA loop for sm_75, which has no TF32 ``mma.sync``."""
    text = cuda_source(_heuristic_linear(m, n, 1024, "sm_90")[0])
    assert "mma.sync.aligned.m16n8k8" in text
    assert ("_split(" in text) == split
    assert "mma.sync" not in cuda_source(_heuristic_linear(m, n, 1024, "sm_75")[0])


@pytest.mark.gpu
def test_gpu_heuristic_tensor_core_product_is_accurate() -> None:
    """The heuristics' tensor-core schedule of a 512 × 1024 × 2048 product on the GPU:
    within float64 as closely as ``f32`` sums (measured on the H200: 3–4e-7)."""
    from llmopt.codegen.executor import CompiledProgram

    torch.manual_seed(0)
    lowered, params, x, reference = _heuristic_linear(512, 1024, 2048, "sm_90")
    assert "mma.sync" in cuda_source(lowered)
    program = CompiledProgram(lowered, params={k: v.cuda() for k, v in params.items()})
    (y,) = program(x.cuda())
    assert float((y.cpu().double() - reference).abs().max() / reference.abs().max()) < 1e-6


WARP_PRODUCT = Path(__file__).parents[1] / "lowering" / "kernel-to-cuda-mma.mlir"
"""One warp a block: ``A·B + C`` from shared tiles, fragments by ``ldmatrix`` (``B``'s
transposed), one bf16 ``m16n8k16`` ``mma.sync`` (the lit test of its CUDA)."""


def _warp_product(name: str) -> str:
    """:data:`WARP_PRODUCT` with ``name`` (``bf16`` or ``f16``) values."""
    return WARP_PRODUCT.read_text().replace("xbf16>", f"x{name}>")


@pytest.mark.parametrize("name", ["bf16", "f16"])
def test_half_warp_product_compiles_to_cubin(name: str) -> None:
    """``ldmatrix`` and ``m16n8k16`` ``mma.sync`` are one inline-PTX statement each, which
    NVRTC assembles for sm_80 and sm_90."""
    source = cuda_source(lower(_warp_product(name)))
    assert f"m16n8k16.row.col.f32.{name}.{name}.f32" in source
    assert source.count("asm volatile(\"ldmatrix.sync.aligned.m8n8.") == 2
    for arch in ("sm_80", "sm_90"):
        cubin = compile_cuda(source, arch=arch, cache=NO_CACHE)
        assert cubin[:4] == b"\x7fELF"


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["bf16", "f16"])
def test_gpu_half_warp_product_matches_the_interpreter(name: str) -> None:
    """On the GPU, ``ldmatrix`` and the bf16/f16 tensor core place and multiply the
    fragments as the interpreter does (its model: exact products, one rounding)."""
    from llmopt.codegen.executor import CompiledProgram

    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[name]
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(2, 16, 16, generator=gen).to(dtype)
    w = torch.randn(2, 8, 16, generator=gen).to(dtype)
    c = torch.randn(2, 16, 8, generator=gen)
    module = Parser(make_context(), _warp_product(name)).parse_module()
    (expected,) = run(module, [a.float().numpy().astype(_np_half(name)), w.float().numpy()
                               .astype(_np_half(name)), c.numpy()])
    (d,) = CompiledProgram(lower(_warp_product(name)))(a.cuda(), w.cuda(), c.cuda())
    np.testing.assert_allclose(d.cpu().numpy(), expected, rtol=1e-5, atol=1e-5)


def _np_half(name: str) -> np.dtype:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16) if name == "bf16" else np.dtype(np.float16)
