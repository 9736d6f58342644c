"""Time schedule variants of ``y = x @ W^T + r`` (``--form``: written ``F.linear``, ``x @
W.t()``, or ``x @ W`` with ``W`` stored ``[K, N]``; or, with ``--gate-up``, of the fused
``silu(x @ Wg^T) * (x @ Wu^T)``) against PyTorch's cuBLAS (GPU host).

Usage::

    python bench/sweep_gemm.py 512x3584x18944,128x18944x3584 \\
        "default=split-k,register-tile,stage-inputs,async-copy,pad-shared,vector-fragments" \\
        "scalar=split-k,register-tile,stage-inputs,async-copy,pad-shared" \\
        "s4=split-k{split_k=4},register-tile{bm=128 bn=64 tm=8 tn=4},stage-inputs,async-copy,\\
pad-shared"

Each shape is ``MxNxK``; each variant is ``name=passes``, the scheduling passes run between
``loop-to-tile`` and ``tile-to-kernel,…,kernel-to-cuda`` (``pad-shared`` and
``vector-fragments`` included, where wanted; a variant naming ``tile-to-kernel`` gives the
rest of the pipeline itself, one starting with ``lower-to-cuda`` is the whole pipeline,
e.g. ``heuristic=lower-to-cuda``). A variant named ``name@512x2048x2048+128x2048x2048``
runs on those shapes only (reported as ``name``): a schedule written out per shape. Every
variant is compiled into a CUDA-graph
program and checked against float64 (max error relative to the largest output); its time is
the median of CUDA-event-timed replays on its static inputs (``suite.cuda_time_ms``), beside
cuBLAS (TF32 off) in the same process: the faster of ``torch.addmm(r, x, W^T)`` and
``x @ W^T`` then ``+= r`` (``cublas``; each in ``cublas_systems``: cuBLAS's ``addmm`` with a
full-size ``r`` can run at half the speed of its plain product, which would flatter a
variant), and with ``--gate-up`` two ``x @ W^T`` and the ``silu`` and product in eager
PyTorch. ``--dtype bfloat16`` (or ``float16``) makes
the weights, inputs and every system's arithmetic 16-bit (cuBLAS with PyTorch's default
reduced-precision reductions), the float64 reference computed from the same 16-bit values.
``--jobs N`` lowers and compiles every variant of every shape first, on N processes, and
then times them one after another. Results also go to ``$OUT/sweep_gemm.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from suite import cuda_time_ms  # noqa: E402

import llmopt  # noqa: E402
from llmopt.codegen.executor import CompiledProgram  # noqa: E402
from llmopt.frontend.capture import capture  # noqa: E402
from llmopt.registry import with_arch  # noqa: E402
from llmopt.target import default_arch  # noqa: E402

REPS, WARMUP = 30, 5
"""Timed and untimed calls per measurement (:func:`suite.cuda_time_ms`)."""

TO_TILE = ("torch-to-prim,canonicalize,prim-to-loop,fuse-kernels{recompute_limit=0},"
           "canonicalize,cse,loop-to-tile,")
TO_CUDA = ",tile-to-kernel,canonicalize,cse,kernel-to-cuda"


def pipeline(passes: str) -> str:
    """The whole pipeline around a variant's scheduling ``passes``; a variant that names
    ``tile-to-kernel`` brings its own tail (e.g. ``kernel-to-cuda{index_bitwidth=32}``), one
    that starts with ``lower-to-cuda`` or ``torch-to-prim`` (an expanded one, as
    ``registry.with_options`` gives) is the whole pipeline."""
    if passes.startswith(("lower-to-cuda", "torch-to-prim")):
        return passes
    if "tile-to-kernel" in passes:
        return TO_TILE + passes
    return TO_TILE + passes + TO_CUDA


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """``"512x2048x2048,128x5632x2048"`` → ``[(512, 2048, 2048), (128, 5632, 2048)]``."""
    shapes = []
    for item in text.split(","):
        m, n, k = (int(v) for v in item.split("x"))
        shapes.append((m, n, k))
    return shapes


def parse_variant(text: str) -> tuple[str, str]:
    """``"name=passes"`` → ``(name, passes)``."""
    name, sep, passes = text.partition("=")
    if not sep or not name or not passes:
        raise ValueError(f"a variant is name=passes, got {text!r}")
    return name, passes


def variant_shapes(name: str) -> tuple[str, list[tuple[int, int, int]] | None]:
    """``"old@512x64x64+128x64x64"`` → ``("old", [(512, 64, 64), (128, 64, 64)])``; a name
    without ``@`` runs on every shape (``None``)."""
    base, sep, shapes = name.partition("@")
    if not sep:
        return name, None
    return base, parse_shapes(shapes.replace("+", ","))


class Linear(torch.nn.Module):
    """``x @ W^T + r``."""

    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(k, n, bias=False)

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return self.proj(x) + r


class Transposed(Linear):
    """``x @ W.t() + r`` as user code writes it: the weight transposed, then a product."""

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return x @ self.proj.weight.t() + r


class KN(torch.nn.Module):
    """``x @ W + r`` with the weight stored ``[K, N]`` (as GPT-2's ``Conv1D`` keeps it)."""

    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(k, n) / k ** 0.5)

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return x @ self.weight + r


FORMS = {"linear": Linear, "transposed": Transposed, "kn": KN}
"""How a case writes its product (``--form``)."""


class GateUp(torch.nn.Module):
    """``silu(x @ Wg^T) * (x @ Wu^T)``: one kernel with two reductions after fusion."""

    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.gate = torch.nn.Linear(k, n, bias=False)
        self.up = torch.nn.Linear(k, n, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(self.gate(x)) * self.up(x)


Baselines = dict[str, Callable[[], torch.Tensor]]
"""PyTorch's ways of computing a case, by name (the fastest is the one compared with)."""


def case(m: int, n: int, k: int, gate_up: bool, dtype: torch.dtype = torch.float32,
         device: str = "cuda", form: str = "linear"
         ) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], torch.Tensor, Baselines, int]:
    """The module, its inputs on ``device``, the float64 reference, PyTorch's baselines and
    the FLOPs, all in ``dtype`` (``form``: how the module writes the product, :data:`FORMS`;
    cuBLAS computes it from the weight as stored)."""
    x = torch.randn(1, m, k, device=device, dtype=dtype)
    if gate_up:
        module: torch.nn.Module = GateUp(k, n).to(dtype)
        wg, wu = (lin.weight.detach().to(device) for lin in (module.gate, module.up))
        ref = (torch.nn.functional.silu(x.double() @ wg.double().T)
               * (x.double() @ wu.double().T))

        def baseline() -> torch.Tensor:
            return torch.nn.functional.silu(x @ wg.T) * (x @ wu.T)

        return module, (x,), ref, {"eager": baseline}, 4 * m * n * k
    module = FORMS[form](k, n).to(dtype)
    r = torch.randn(1, m, n, device=device, dtype=dtype)
    w = (module.weight.detach().to(device).T if isinstance(module, KN)
         else module.proj.weight.detach().to(device))
    ref = x.double() @ w.double().T + r.double()

    def mm_add() -> torch.Tensor:
        return torch.mm(x[0], w.T).add_(r[0])

    return (module, (x, r), ref, {"addmm": partial(torch.addmm, r[0], x[0], w.T),
                                  "mm_add": mm_add}, 2 * m * n * k)


def main() -> int:
    """Run the sweep; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("shapes", help="MxNxK[,MxNxK...]")
    p.add_argument("variants", nargs="+", help="name=passes")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    p.add_argument("--gate-up", action="store_true",
                   help="time silu(x @ Wg^T) * (x @ Wu^T) instead of x @ W^T + r")
    p.add_argument("--form", choices=list(FORMS), default="linear",
                   help="how the product is written: F.linear(x, W) + r (linear), "
                        "x @ W.t() + r (transposed), or x @ W + r with W stored [K, N] (kn)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
                   help="the weights', inputs' and every system's dtype (float32)")
    p.add_argument("--arch", default=None,
                   help="the architecture NVRTC compiles for (default: the GPU's); sm_90a "
                        "on an H100/H200 also lets a variant's lower-to-cuda{arch=sm_90a} "
                        "use wgmma")
    p.add_argument("--jobs", type=int, default=1,
                   help="lower and compile the variants of every shape first, on this many "
                        "processes, then time them one after another (1: each in turn)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("sweep_gemm needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    variants = [(*variant_shapes(name), passes)
                for name, passes in (parse_variant(v) for v in args.variants)]
    dtype = getattr(torch, args.dtype)
    shapes = parse_shapes(args.shapes)
    cases: dict[tuple[int, int, int], tuple[Any, ...]] = {}
    for shape in shapes:
        module, inputs, ref, baselines, flop = case(*shape, args.gate_up, dtype,
                                                  form=args.form)
        captured = capture(module, tuple(t.cpu() for t in inputs))
        params = {name: t.detach().cuda() for name, t in captured.params.items()}
        cases[shape] = (inputs, ref, baselines, flop, str(captured.module), params)
    arch = args.arch or default_arch()
    lowered: dict[tuple[tuple[int, int, int], str], str | Exception] = {}
    if args.jobs > 1:
        began = time.perf_counter()
        lowered = lower_variants({s: c[4] for s, c in cases.items()}, variants, args.jobs,
                                 arch)
        print(f"lowered {len(lowered)} variants in {time.perf_counter() - began:.1f} s",
              flush=True)
    rows = []
    for shape in shapes:
        inputs, ref, baselines, flop, text, params = cases[shape]
        m, n, k = shape
        gflop = flop / 1e9
        systems = {name: cuda_time_ms(fn, REPS, WARMUP) for name, fn in baselines.items()}
        cublas = min(systems.values())
        row: dict[str, Any] = {"shape": f"{m}x{n}x{k}", "dtype": args.dtype, "cublas": cublas,
                               "cublas_systems": systems}
        for name, only, passes in variants:
            if only is not None and shape not in only:
                continue
            began = time.perf_counter()
            try:
                ready = lowered.get((shape, name))
                if isinstance(ready, Exception):
                    raise ready
                module = (llmopt.parse(ready) if ready is not None
                          else llmopt.lower(llmopt.parse(text),
                                            with_arch(pipeline(passes), arch)))
                program = CompiledProgram(module, params=params, cuda_graph=True,
                                          arch=arch)
                out = program(*inputs)[0]
                err = float((out.double() - ref).abs().max() / ref.abs().max())
                static = program.static_inputs
                ms = cuda_time_ms(partial(program, *static), REPS, WARMUP)
            except Exception as exc:  # a failing variant is reported, the sweep goes on
                print(f"{row['shape']} {name}: failed: {type(exc).__name__}: {exc}"[:400])
                continue
            row[name] = {"ms": ms, "err": err}
            print(f"{row['shape']} {name:14s} {ms:.4f} ms {gflop / ms:6.1f} TFLOP/s "
                  f"{cublas / ms:5.2f}x cuBLAS err {err:.1e} "
                  f"({time.perf_counter() - began:.1f} s)", flush=True)
        for name, ms in systems.items():
            print(f"{row['shape']} {'cublas ' + name:14s} {ms:.4f} ms "
                  f"{gflop / ms:6.1f} TFLOP/s", flush=True)
        rows.append(row)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sweep_gemm.json").write_text(json.dumps(rows, indent=1))
    return 0


def lower_variants(texts: dict[tuple[int, int, int], str],
                   variants: list[tuple[str, list[tuple[int, int, int]] | None, str]],
                   jobs: int, arch: str | None = None
                   ) -> dict[tuple[tuple[int, int, int], str], str | Exception]:
    """Each variant of each shape's captured program (``texts``) lowered to CUDA IR and
    compiled for ``arch`` (default: the GPU's) into the kernel cache on ``jobs`` fresh
    processes: by (shape, variant name),
    the lowered module's text, or what went wrong."""
    from llmopt.tools.tune import lower_candidate, spawn_pool

    arch = arch or default_arch()
    results: dict[tuple[tuple[int, int, int], str], str | Exception] = {}
    with spawn_pool(jobs) as pool:  # type: ignore[union-attr]
        futures = {(shape, name): pool.submit(lower_candidate, text, pipeline(passes), arch)
                   for shape, text in texts.items() for name, only, passes in variants
                   if only is None or shape in only}
        for key, future in futures.items():
            try:
                results[key] = future.result()
            except Exception as exc:  # reported when the variant is timed
                results[key] = exc
    return results


if __name__ == "__main__":
    sys.exit(main())
