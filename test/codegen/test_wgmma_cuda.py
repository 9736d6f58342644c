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


def program(n: int, k: int, form: str = "tiles") -> str:
    """``x[64, k] · w[n, k]ᵀ`` by one warpgroup: each thread copies 16-byte chunks of both
    operands into swizzled tiles, then ``k / 16`` chained ``wgmma.mma`` and one wait; each
    thread stores its ``n / 2`` values where the layout above puts them. ``form``:
    ``tiles``, ``k / 64`` tiles of 64 columns each; ``wide``, one tile of ``k`` columns,
    ``k / 64`` swizzle atoms side by side; ``n_major``, ``x[64, k] · w[k, n]``, ``B`` read
    N-major (``transposed``) from ``k / 64`` tiles of 64 rows of ``k`` and ``n`` columns;
    ``registers``, ``A`` from each thread's four pairs, loaded from ``x`` in the layout of
    ``mma.sync``'s ``A`` fragment (no ``a`` tile)."""
    values = n // 2
    width = k if form == "wide" else 64
    w_type = f"memref<{k}x{n}xbf16>" if form == "n_major" else f"memref<{n}x{k}xbf16>"
    lines = [
        f"func.func @main(%x: memref<64x{k}xbf16>, %w: {w_type}) -> memref<64x{n}xf32> {{",
        f"  %o = memref.alloc() : memref<64x{n}xf32>",
        "  kernel.launch @wg grid [1, 1, 1] block [128, 1, 1] smem 0 (%x, %w, %o)"
        f" : memref<64x{k}xbf16>, {w_type}, memref<64x{n}xf32>",
        f"  func.return %o : memref<64x{n}xf32>",
        "}",
        f"kernel.func @wg(%x: memref<64x{k}xbf16>, %w: {w_type}, %o: memref<64x{n}xf32>)"
        " block [128, 1, 1] {",
    ]
    tiles = k // width
    # per operand tile: (name, source, source type, rows, chunks a row, tile type, k along rows)
    operands = []
    for s in range(tiles):
        a_type = f"memref<64x{width}xbf16>"
        b_shape = (64, n) if form == "n_major" else (n, width)
        b_type = f"memref<{b_shape[0]}x{b_shape[1]}xbf16>"
        if form != "registers":
            operands.append((f"%a{s}", "%x", f"memref<64x{k}xbf16>", 64, width // 8, a_type,
                             False, s))
        operands.append((f"%b{s}", "%w", w_type, b_shape[0], b_shape[1] // 8, b_type,
                         form == "n_major", s))
    lines += [f"  {name} = kernel.shared {{llmopt.swizzle = 128 : i64}} : {typ}"
              for name, _, _, _, _, typ, _, _ in operands]
    consts = sorted({0, 1, 2, 4, 8, 16, 32, 48, 128, 512, *range(0, width, 16),
                     *(64 * s for s in range(tiles)),
                     *(c for o in operands for c in (o[4], o[3] * o[4]))})
    lines += [f"  %c{c} = arith.constant {c} : index" for c in consts]
    lines += [
        "  %t = kernel.thread_id x",
        "  %z = arith.constant 0.0 : f32",
    ]
    # copies: chunk p (of 8 elements) of a tile with `rows` rows of `per_row` chunks: row
    # p / per_row, column 8·(p % per_row); tile s starts at k = 64·s (at row 64·s of an
    # N-major w, else at column 64·s)
    for name, src, src_type, rows, per_row, typ, k_rows, s in operands:
        tag = name[1:]
        shift = (f"    %g{tag} = arith.addi %r{tag}, %c{64 * s} : index" if k_rows
                 else f"    %g{tag} = arith.addi %col{tag}, %c{64 * s} : index")
        at = f"%g{tag}, %col{tag}" if k_rows else f"%r{tag}, %g{tag}"
        lines += [
            f"  scf.for %p{tag} = %t to %c{rows * per_row} step %c128 {{",
            f"    %r{tag} = arith.divui %p{tag}, %c{per_row} : index",
            f"    %q{tag} = arith.remui %p{tag}, %c{per_row} : index",
            f"    %col{tag} = arith.muli %q{tag}, %c8 : index",
            shift,
            f"    kernel.copy {src}[{at}] to {name}[%r{tag}, %col{tag}] count 8"
            f" : {src_type} to {typ}",
            "  }",
        ]
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
    if form == "registers":  # a_q = x[16w + g + 8·(q mod 2)][k + 2t + 8·(q / 2) + {0, 1}]
        for kk in range(0, k, 16):
            for q in range(4):
                row = "%row1" if q % 2 else "%row0"
                at = f"{kk}_{q}"
                lines += [f"  %ck{at} = arith.constant {kk + 8 * (q // 2)} : index",
                          f"  %lo_c{at} = arith.addi %t2, %ck{at} : index",
                          f"  %hi_c{at} = arith.addi %t21, %ck{at} : index",
                          f"  %lo{at} = kernel.load %x[{row}, %lo_c{at}] : memref<64x{k}xbf16>",
                          f"  %hi{at} = kernel.load %x[{row}, %hi_c{at}] : memref<64x{k}xbf16>",
                          f"  %pa{at} = mma.pack %lo{at}, %hi{at} : bf16"]
    lines += ["  kernel.barrier", "  wgmma.fence"]
    acc = ", ".join(["%z"] * values)
    step = 0
    for s in range(tiles):
        b_type = operands[s if form == "registers" else 2 * s + 1][5]
        for kk in range(0, width, 16):
            out = ", ".join(f"%d{step}_{i}" for i in range(values))
            b_at = (f"%b{s}[%c{kk}, %c0] transposed" if form == "n_major"
                    else f"%b{s}[%c0, %c{kk}]")
            if form == "registers":
                at = f"{64 * s + kk}"
                a_at = ", ".join(f"%pa{at}_{q}" for q in range(4))
                lines.append(f"  {out} = wgmma.mma ({a_at}), {b_at} + ({acc})"
                             f" : vector<2xbf16>, {b_type}")
            else:
                lines.append(f"  {out} = wgmma.mma %a{s}[%c0, %c{kk}], {b_at} + ({acc})"
                             f" : {operands[2 * s][5]}, {b_type}")
            acc = out
            step += 1
    waited = ", ".join(f"%e{i}" for i in range(values))
    lines += ["  wgmma.commit", f"  {waited} = wgmma.wait 0 ({acc})"]
    for i in range(values):
        row = "%row1" if (i // 2) % 2 else "%row0"
        lines += [f"  %n{i} = arith.constant {8 * (i // 4)} : index",
                  f"  %col_{i} = arith.addi %n{i}, {'%t21' if i % 2 else '%t2'} : index",
                  f"  kernel.store %e{i}, %o[{row}, %col_{i}] : memref<64x{n}xf32>"]
    lines += ["  kernel.return", "}"]
    return "\n".join(lines)


def inputs(n: int, k: int, seed: int, form: str = "tiles") -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, k)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((k, n) if form == "n_major" else (n, k)).astype(ml_dtypes.bfloat16)
    return x, w


def reference(x: np.ndarray, w: np.ndarray, form: str = "tiles") -> np.ndarray:
    w64 = w.astype(np.float64)
    return x.astype(np.float64) @ (w64 if form == "n_major" else w64.T)


SHAPES = [(64, 64, "tiles"), (16, 128, "tiles"), (256, 64, "tiles"), (64, 128, "wide"),
          (16, 256, "wide"), (64, 128, "n_major"), (128, 64, "n_major"), (256, 64, "n_major"),
          (64, 64, "registers"), (128, 128, "registers")]
"""``(n, k, form)`` (:func:`program`); an N-major ``b`` of 128 or 256 columns spans atoms."""


@pytest.mark.parametrize(("n", "k", "form"), SHAPES)
def test_interpreter_computes_the_product(n: int, k: int, form: str) -> None:
    x, w = inputs(n, k, n + k, form)
    module = Parser(make_context(), program(n, k, form)).parse_module()
    module.verify()
    (out,) = run(module, [x, w])
    ref = reference(x, w, form)
    assert np.abs(out - ref).max() <= 1e-6 * np.abs(ref).max()


@pytest.mark.parametrize(("n", "k", "form"), SHAPES)
def test_cuda_compiles_for_sm_90a(n: int, k: int, form: str) -> None:
    source = cuda_source(lower(program(n, k, form), ARCH))
    assert source.count("wgmma.mma_async.sync.aligned") == k // 16
    assert "__align__(1024)" in source
    # a tile of several atoms: the column picks its atom first
    assert (">> 6" in source) == (form == "wide" or form == "n_major" and n > 64)
    # an N-major b: imm-trans-b set, the atoms 64 rows of 128 bytes apart (8192 / 16 = 512)
    assert source.count("p, 1, 1, 0, 1;") == (k // 16 if form == "n_major" else 0)
    # an a in registers: four pairs, then b's descriptor, and no imm-trans-a
    assert source.count("p, 1, 1, 0; }") == (k // 16 if form == "registers" else 0)
    assert ("0x4000004002000000ull" in source) == (form == "n_major")
    cubin = compile_cuda(source, arch=ARCH, cache=NO_CACHE)
    assert cubin[:4] == b"\x7fELF"


@pytest.mark.gpu
@pytest.mark.parametrize(("n", "k", "form"), SHAPES)
def test_gpu_wgmma_product_matches_the_interpreter(n: int, k: int, form: str) -> None:
    """On the GPU the swizzled tiles and descriptors give the product the interpreter does:
    a swizzle that disagreed with the hardware's would permute ``A``'s or ``B``'s columns."""
    from llmopt.codegen.executor import CompiledProgram

    x, w = inputs(n, k, 7 * n + k, form)
    module = Parser(make_context(), program(n, k, form)).parse_module()
    (expected,) = run(module, [x, w])
    compiled = CompiledProgram(lower(program(n, k, form), ARCH), arch=ARCH)
    (got,) = compiled(*(torch.from_numpy(v.view(np.uint16)).view(torch.bfloat16).cuda()
                        for v in (x, w)))
    ref = reference(x, w, form)
    assert np.abs(got.cpu().numpy() - ref).max() <= 1e-5 * np.abs(ref).max()
    assert np.abs(got.cpu().numpy() - expected).max() <= 1e-5 * np.abs(ref).max()
