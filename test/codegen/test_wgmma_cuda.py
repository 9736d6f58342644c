"""The ``wgmma`` dialect end to end: one warpgroup's ``64 × N × K`` bf16 product, its tiles
copied into swizzled shared memory and multiplied ``K / 16`` times by ``wgmma.mma``, in the
interpreter, as CUDA that NVRTC compiles for sm_90a, and on the GPU (tests marked ``gpu``:
the swizzled copies and the descriptors must agree with the hardware's 128-byte swizzle for
the product to be right). The accumulator layout is written out here independently of the
interpreter: value ``i`` of lane ``4·g + t`` of warp ``w`` is ``D[16·w + g + 8·((i / 2) mod
2)][8·(i / 4) + 2·t + i mod 2]``."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from test_kernel_to_cuda import lower
from xdsl.parser import Parser

from llmopt.api import make_context
from llmopt.codegen.cache import KernelCache
from llmopt.codegen.cuda_printer import cuda_source
from llmopt.codegen.nvrtc import compile_cuda
from llmopt.interp import run

NO_CACHE = KernelCache("/nonexistent", enabled=False)
ARCH = "sm_90a"


def program(n: int, k: int) -> str:
    """``x[64, k] · w[n, k]ᵀ`` by one warpgroup: each thread copies 16-byte chunks of both
    operands into swizzled tiles, then ``k / 16`` chained ``wgmma.mma`` and one wait; each
    thread stores its ``n / 2`` values where the layout above puts them."""
    values = n // 2
    lines = [
        f"func.func @main(%x: memref<64x{k}xbf16>, %w: memref<{n}x{k}xbf16>)"
        f" -> memref<64x{n}xf32> {{",
        f"  %o = memref.alloc() : memref<64x{n}xf32>",
        "  kernel.launch @wg grid [1, 1, 1] block [128, 1, 1] smem 0 (%x, %w, %o)"
        f" : memref<64x{k}xbf16>, memref<{n}x{k}xbf16>, memref<64x{n}xf32>",
        f"  func.return %o : memref<64x{n}xf32>",
        "}",
        f"kernel.func @wg(%x: memref<64x{k}xbf16>, %w: memref<{n}x{k}xbf16>,"
        f" %o: memref<64x{n}xf32>) block [128, 1, 1] {{",
    ]
    tiles = k // 64
    for s in range(tiles):
        lines += [f"  %a{s} = kernel.shared {{llmopt.swizzle = 128 : i64}} : memref<64x64xbf16>",
                  f"  %b{s} = kernel.shared {{llmopt.swizzle = 128 : i64}} : memref<{n}x64xbf16>"]
    consts = sorted({0, 1, 2, 4, 8, 16, 32, 48, 128, 512, n * 8, *(64 * s for s in range(tiles))})
    lines += [f"  %c{c} = arith.constant {c} : index" for c in consts]
    lines += [
        "  %t = kernel.thread_id x",
        "  %z = arith.constant 0.0 : f32",
    ]
    # copies: chunk p (of 8 elements) of a tile with `rows` rows: row p / 8, column 8·(p % 8)
    for s in range(tiles):
        for name, src, rows in ((f"%a{s}", "%x", 64), (f"%b{s}", "%w", n)):
            chunks = rows * 8
            tag = f"{name[1:]}"
            lines += [
                f"  scf.for %p{tag} = %t to %c{chunks} step %c128 {{",
                f"    %r{tag} = arith.divui %p{tag}, %c8 : index",
                f"    %q{tag} = arith.remui %p{tag}, %c8 : index",
                f"    %col{tag} = arith.muli %q{tag}, %c8 : index",
                f"    %g{tag} = arith.addi %col{tag}, %c{64 * s} : index",
                f"    kernel.copy {src}[%r{tag}, %g{tag}] to {name}[%r{tag}, %col{tag}] count 8"
                f" : memref<{rows if src == '%w' else 64}x{k}xbf16> to memref<{rows}x64xbf16>",
                "  }",
            ]
    lines += ["  kernel.barrier", "  wgmma.fence"]
    acc = ", ".join(["%z"] * values)
    step = 0
    for s in range(tiles):
        for kk in (0, 16, 32, 48):
            out = ", ".join(f"%d{step}_{i}" for i in range(values))
            lines.append(f"  {out} = wgmma.mma %a{s}[%c0, %c{kk}], %b{s}[%c0, %c{kk}] + ({acc})"
                         f" : memref<64x64xbf16>, memref<{n}x64xbf16>")
            acc = out
            step += 1
    waited = ", ".join(f"%e{i}" for i in range(values))
    lines += ["  wgmma.commit", f"  {waited} = wgmma.wait 0 ({acc})"]
    lines += [
        "  %lane = arith.remui %t, %c32 : index",
        "  %warp = arith.divui %t, %c32 : index",
        "  %g = arith.divui %lane, %c4 : index",
        "  %tq = arith.remui %lane, %c4 : index",
        "  %w16 = arith.muli %warp, %c16 : index",
        "  %row0 = arith.addi %w16, %g : index",
        "  %row1 = arith.addi %row0, %c8 : index",
        "  %t2 = arith.muli %tq, %c2 : index",
        "  %t21 = arith.addi %t2, %c1 : index",
    ]
    for i in range(values):
        row = "%row1" if (i // 2) % 2 else "%row0"
        lines += [f"  %n{i} = arith.constant {8 * (i // 4)} : index",
                  f"  %col_{i} = arith.addi %n{i}, {'%t21' if i % 2 else '%t2'} : index",
                  f"  kernel.store %e{i}, %o[{row}, %col_{i}] : memref<64x{n}xf32>"]
    lines += ["  kernel.return", "}"]
    return "\n".join(lines)


def inputs(n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, k)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((n, k)).astype(ml_dtypes.bfloat16)
    return x, w


def reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) @ w.astype(np.float64).T


SHAPES = [(64, 64), (16, 128), (256, 64)]


@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_interpreter_computes_the_product(n: int, k: int) -> None:
    x, w = inputs(n, k, n + k)
    module = Parser(make_context(), program(n, k)).parse_module()
    module.verify()
    (out,) = run(module, [x, w])
    ref = reference(x, w)
    assert np.abs(out - ref).max() <= 1e-6 * np.abs(ref).max()


@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_cuda_compiles_for_sm_90a(n: int, k: int) -> None:
    source = cuda_source(lower(program(n, k), ARCH))
    assert source.count("wgmma.mma_async.sync.aligned") == k // 16
    assert "__align__(1024)" in source
    cubin = compile_cuda(source, arch=ARCH, cache=NO_CACHE)
    assert cubin[:4] == b"\x7fELF"


@pytest.mark.gpu
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_gpu_wgmma_product_matches_the_interpreter(n: int, k: int) -> None:
    """On the GPU the swizzled tiles and descriptors give the product the interpreter does:
    a swizzle that disagreed with the hardware's would permute ``A``'s or ``B``'s columns."""
    from llmopt.codegen.executor import CompiledProgram

    x, w = inputs(n, k, 7 * n + k)
    module = Parser(make_context(), program(n, k)).parse_module()
    (expected,) = run(module, [x, w])
    compiled = CompiledProgram(lower(program(n, k), ARCH), arch=ARCH)
    (got,) = compiled(*(torch.from_numpy(v.view(np.uint16)).view(torch.bfloat16).cuda()
                        for v in (x, w)))
    ref = reference(x, w)
    assert np.abs(got.cpu().numpy() - ref).max() <= 1e-5 * np.abs(ref).max()
    assert np.abs(got.cpu().numpy() - expected).max() <= 1e-5 * np.abs(ref).max()
