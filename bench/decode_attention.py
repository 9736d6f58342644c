"""A decode step's attention alone on the GPU: llmopt's schedules against PyTorch.

One query a head over a cache of ``ctx`` positions, laid out as the decode program keeps it
(``[ctx, kv_heads, head_dim]``, grouped-query heads), at TinyLlama's or Qwen2.5-7B's head
counts: ``sdpa(q, cache_k.permute(1, 0, 2)[None], cache_v..., enable_gqa=True)``. llmopt
compiles it with ``lower-to-cuda`` and each ``--variant`` (options of ``flash-attention``,
e.g. ``splits=1`` or ``tensor_cores=false``), every program replayed from a CUDA graph;
PyTorch runs eagerly and from a CUDA graph. Each time is the median of CUDA-event-timed
replays; every llmopt result is checked against float64.

    python3 bench/decode_attention.py --models tinyllama --dtypes float32 bfloat16 \\
        --contexts 512 2000 --variant "" --variant splits=1 --variant tensor_cores=false
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
from suite import build_eager_graph, cuda_time_ms  # the op suite's graph and timing

HEADS = {"tinyllama": (32, 4, 64), "qwen2.5-7b": (28, 4, 128)}
"""Query heads, key/value heads and the head dim of each model."""
REPS, WARMUP = 200, 10


def attention(q: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor) -> torch.Tensor:
    """One decode step's attention over the whole cache (no mask: every position is past)."""
    keys = cache_k.permute(1, 0, 2).unsqueeze(0)
    values = cache_v.permute(1, 0, 2).unsqueeze(0)
    return torch.nn.functional.scaled_dot_product_attention(q, keys, values, enable_gqa=True)


def pipeline_with(variant: str, arch: str) -> str:
    """``lower-to-cuda`` for ``arch`` with ``variant`` added to flash-attention's options."""
    from llmopt import registry

    spec = registry.expand_pipeline(registry.with_arch("lower-to-cuda", arch))
    if not variant:
        return spec
    return spec.replace(f"flash-attention{{arch={arch}}}",
                        f"flash-attention{{arch={arch} {variant}}}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", choices=list(HEADS), default=["tinyllama"])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--contexts", nargs="+", type=int, default=[512, 2000])
    parser.add_argument("--variant", action="append", default=None,
                        help="flash-attention options, e.g. 'splits=1' ('' = the default)")
    parser.add_argument("--out", type=Path, help="write the records here as JSON")
    args = parser.parse_args()
    import llmopt
    from llmopt.target import current_target

    arch = current_target().arch
    variants = args.variant if args.variant is not None else [""]
    records = []
    for model in args.models:
        heads, kv, dim = HEADS[model]
        for dtype_name in args.dtypes:
            dtype = getattr(torch, dtype_name)
            for ctx in args.contexts:
                g = torch.Generator(device="cuda").manual_seed(ctx)
                inputs = [torch.randn(s, generator=g, device="cuda").to(dtype)
                          for s in ((1, heads, 1, dim), (ctx, kv, dim), (ctx, kv, dim))]
                exact = attention(*(a.double() for a in inputs))
                rec: dict[str, Any] = {"model": model, "dtype": dtype_name, "ctx": ctx,
                                       "kv_bytes": 2 * inputs[1].numel() * inputs[1].element_size()}
                graph = build_eager_graph(attention, tuple(inputs)).replay
                assert graph is not None
                rec["eager_ms"] = cuda_time_ms(lambda inputs=inputs: attention(*inputs),
                                               REPS, WARMUP)
                rec["eager_graph_ms"] = cuda_time_ms(graph, REPS, WARMUP)
                torch_err = float((attention(*inputs).double() - exact).abs().max())
                rec["torch_err"] = torch_err
                for variant in variants:
                    began = time.perf_counter()
                    fn = llmopt.compile(attention, inputs, pipeline_with(variant, arch),
                                        cuda_graph=True)
                    build = time.perf_counter() - began
                    (out,) = fn(*inputs)
                    err = float((out.double() - exact).abs().max())
                    ms = cuda_time_ms(lambda fn=fn, inputs=inputs: fn(*inputs), REPS, WARMUP)
                    rec[f"llmopt[{variant}]"] = {"ms": ms, "err": err, "build_s": build}
                records.append(rec)
                cells = "  ".join(f"{k} {v['ms'] * 1e3:.1f} us (err {v['err']:.1e})"
                                  for k, v in rec.items() if k.startswith("llmopt"))
                print(f"{model} {dtype_name} ctx {ctx}: eager {rec['eager_ms'] * 1e3:.1f} us, "
                      f"eager graph {rec['eager_graph_ms'] * 1e3:.1f} us (err "
                      f"{torch_err:.1e}); {cells}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
