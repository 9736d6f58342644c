"""Whole-model parity on a GPU: llmopt's kernels against a float64 PyTorch reference.

For each model and sequence length: one decoder layer and the whole model's logits, each
compared with the same module evaluated in float64 on the same inputs (max |error| over
max |reference|, mean |error|, argmax agreement per position; a disagreement is reported
with the reference's top-2 gap, which tells a tie from an error). Then greedy generation:
llmopt's logits pick each next token and must reproduce PyTorch eager FP32 token by token.
Greedy decoding recomputes the whole prefix each step; with causal attention the logits at
position ``p`` depend only on tokens ``<= p``, so one program compiled for the final length
serves every step (later positions hold placeholder tokens that cannot affect earlier ones).

With ``--dynamic`` the whole model is compiled once with a symbolic length (at most
``--max-seq``) and that one program runs every length of ``--seqs`` and every greedy step
(each step at its own length, without placeholders); the compile time is recorded once.

With ``--dtype bfloat16`` (or ``float16``) the model's weights and activations are 16-bit
(seeded in ``float32``, then cast): the float64 reference is computed from the same 16-bit
weights and inputs, PyTorch eager runs in the 16-bit type beside llmopt, and each logits row
reports both argmax agreements with the reference (``argmax_equal`` for llmopt,
``eager_vs_ref``'s for PyTorch), so llmopt's can be judged against PyTorch's own. Greedy
tokens are then compared with eager's in that type; a divergence at a near-tie is expected.

Usage (GPU host): ``python bench/model_parity.py --models tinyllama qwen2.5-7b --seqs 128 512
--out results.json`` (add ``--dynamic --max-seq 2048`` for the symbolic program). Weights
are seeded random (nothing is downloaded). Programs are lowered for the GPU's architecture,
as ``llmopt.compile`` lowers them (sm_90a on an H200: 16-bit products on ``wgmma``).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import time
import traceback
from collections.abc import Iterator
from typing import Any

import torch

import llmopt
from llmopt.codegen.executor import CompiledProgram
from llmopt.frontend.models import (
    build_model,
    capture_layer,
    capture_model,
    decoder_layers,
    position_embeddings,
)


def compile_captured(captured: Any, started: float | None = None
                     ) -> tuple[CompiledProgram, float]:
    """Lower and load ``captured``; the seconds since ``started`` (capture included), else
    since the call."""
    from llmopt.registry import for_device

    start = time.perf_counter() if started is None else started
    llmopt.lower(captured.module, for_device("lower-to-cuda"))
    program = CompiledProgram(captured.module, params=captured.params)
    return program, time.perf_counter() - start


def compare(got: torch.Tensor, ref: torch.Tensor) -> dict[str, Any]:
    got, ref = got.double(), ref.double()
    diff = (got - ref).abs()
    out: dict[str, Any] = {
        "max_err_rel": (diff.max() / ref.abs().max()).item(),
        "mean_err": diff.mean().item(),
    }
    if ref.dim() == 3 and ref.shape[-1] > 1000:  # logits: argmax per position
        a, b = got.argmax(-1), ref.argmax(-1)
        bad = (a != b).nonzero().tolist()
        top2 = ref.topk(2, dim=-1).values
        gaps = [(top2[i, j, 0] - top2[i, j, 1]).item() for i, j in bad]
        out |= {"argmax_equal": f"{int((a == b).sum())}/{a.numel()}",
                "mismatch_ref_top2_gaps": gaps}
    return out


def timed(fn: Any, reps: int = 5) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


@contextlib.contextmanager
def recording(row: dict[str, Any], results: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Fill ``row`` in the ``with`` block; an exception becomes its ``error`` (report and go
    on: one failure must not hide the rest). The row is then printed and kept."""
    try:
        yield row
    except Exception as err:
        row["error"] = f"{type(err).__name__}: {err}"
        traceback.print_exc()
    print(json.dumps(row), flush=True)
    results.append(row)


def logits_metrics(program: CompiledProgram, model: Any, ref_model: Any,
                   ids: torch.Tensor) -> dict[str, Any]:
    """``program``'s logits and eager's (in the model's dtype) against float64 on ``ids``,
    and both times."""
    ref = ref_model(input_ids=ids, use_cache=False).logits
    out = compare(program(ids)[0], ref)
    out["eager_vs_ref"] = compare(model(input_ids=ids, use_cache=False).logits, ref)
    out["llmopt_ms"] = timed(lambda: program(ids))
    out["eager_ms"] = timed(lambda: model(input_ids=ids, use_cache=False))
    return out


def models(name: str, dtype: torch.dtype) -> tuple[Any, Any]:
    """The seeded model in ``dtype`` (built in ``float32``, then cast) and its float64 copy
    (of the same ``dtype`` weights)."""
    model = build_model(name, device="cuda", dtype=torch.float32, seed=0).to(dtype)
    return model, copy.deepcopy(model).double()


@torch.no_grad()
def run_model(name: str, seqs: list[int], greedy: int, results: list[dict[str, Any]],
              dtype: torch.dtype = torch.float32) -> None:
    model, ref_model = models(name, dtype)
    vocab = model.config.vocab_size
    gen = torch.Generator(device="cuda").manual_seed(1)
    for seq in seqs:
        ids = torch.randint(0, vocab, (1, seq), device="cuda", generator=gen)
        with recording({"model": name, "seq": seq, "what": "layer 0", "dtype": str(dtype)},
                       results) as row:
            captured = capture_layer(model, seq)
            program, row["compile_s"] = compile_captured(captured)
            x = torch.randn(1, seq, model.config.hidden_size, device="cuda",
                            generator=gen).to(dtype)
            cos, sin = position_embeddings(model, seq)
            got = program(x, cos.cuda(), sin.cuda())[0]
            layer64 = decoder_layers(ref_model)[0]
            cos64, sin64 = position_embeddings(ref_model, seq)
            ref = layer64(x.double(), attention_mask=None,
                          position_embeddings=(cos64.cuda(), sin64.cuda()))
            ref = ref[0] if isinstance(ref, tuple) else ref
            row |= compare(got, ref)
        with recording({"model": name, "seq": seq, "what": "whole model logits",
                        "dtype": str(dtype)}, results) as row:
            program, row["compile_s"] = compile_captured(capture_model(model, seq))
            row |= logits_metrics(program, model, ref_model, ids)
    if greedy:
        with recording({"model": name, "what": f"greedy {greedy} tokens", "dtype": str(dtype)},
                       results) as row:
            prompt = 16
            total = prompt + greedy
            captured = capture_model(model, total)
            program, row["compile_s"] = compile_captured(captured)
            ids = torch.randint(0, vocab, (1, total), device="cuda", generator=gen)
            ours = ids.clone()
            theirs = ids[:, :prompt].clone()
            for step in range(greedy):
                p = prompt + step
                logits = program(ours)[0]
                ours[0, p] = logits[0, p - 1].argmax()
                eager = model(input_ids=theirs, use_cache=False).logits
                theirs = torch.cat([theirs, eager[:, -1:].argmax(-1)], dim=1)
            row["identical"] = bool(torch.equal(ours, theirs))
            row["llmopt_tokens"] = ours[0, prompt:].tolist()
            row["eager_tokens"] = theirs[0, prompt:].tolist()
    del model, ref_model
    torch.cuda.empty_cache()


@torch.no_grad()
def run_symbolic(name: str, seqs: list[int], max_seq: int, greedy: int,
                 results: list[dict[str, Any]], dtype: torch.dtype = torch.float32) -> None:
    """The whole model in ``dtype`` compiled once for every length up to ``max_seq``, run at
    each of ``seqs`` against float64, then ``greedy`` steps each at its own length."""
    model, ref_model = models(name, dtype)
    vocab = model.config.vocab_size
    gen = torch.Generator(device="cuda").manual_seed(1)
    started = time.perf_counter()
    program, compile_s = compile_captured(
        capture_model(model, 16, dynamic=True, max_seq=max_seq), started)  # any example >= 2
    print(json.dumps({"model": name, "what": "symbolic compile", "max_seq": max_seq,
                      "compile_s": compile_s}), flush=True)
    for seq in seqs:
        with recording({"model": name, "seq": seq, "max_seq": max_seq,
                        "what": "whole model logits, symbolic", "compile_s": compile_s,
                        "dtype": str(dtype)},
                       results) as row:
            ids = torch.randint(0, vocab, (1, seq), device="cuda", generator=gen)
            row |= logits_metrics(program, model, ref_model, ids)
    if greedy:
        with recording({"model": name, "what": f"greedy {greedy} tokens, symbolic",
                        "dtype": str(dtype)}, results) as row:
            ours = torch.randint(0, vocab, (1, 16), device="cuda", generator=gen)
            theirs = ours.clone()
            for _ in range(greedy):
                logits = program(ours)[0]
                ours = torch.cat([ours, logits[:, -1:].argmax(-1)], dim=1)
                eager = model(input_ids=theirs, use_cache=False).logits
                theirs = torch.cat([theirs, eager[:, -1:].argmax(-1)], dim=1)
            row["identical"] = bool(torch.equal(ours, theirs))
            row["llmopt_tokens"] = ours[0, 16:].tolist()
            row["eager_tokens"] = theirs[0, 16:].tolist()
    del model, ref_model, program
    torch.cuda.empty_cache()


def table(results: list[dict[str, Any]]) -> str:
    """The results as a Markdown table, one row each."""
    lines = ["| model | dtype | what | seq | compile s | max err / max | argmax | eager argmax "
             "| llmopt ms | eager ms |",
             "|---|---|---|---:|---:|---:|---|---|---:|---:|"]
    for r in results:
        def num(key: str, fmt: str, r: dict[str, Any] = r) -> str:
            return format(r[key], fmt) if isinstance(r.get(key), int | float) else ""
        argmax = r.get("argmax_equal") or ("identical" if r.get("identical") else
                                           "differ" if "identical" in r else "")
        eager = (r.get("eager_vs_ref") or {}).get("argmax_equal", "")
        dtype = str(r.get("dtype", "torch.float32")).removeprefix("torch.")
        lines.append(f"| {r['model']} | {dtype} | {r['what']} | {r.get('seq', '')} | "
                     f"{num('compile_s', '.1f')} | {num('max_err_rel', '.2e')} | {argmax}"
                     f"{' ' + r['error'][:60] if 'error' in r else ''} | {eager} | "
                     f"{num('llmopt_ms', '.3f')} | {num('eager_ms', '.3f')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tinyllama", "qwen2.5-7b"])
    parser.add_argument("--seqs", nargs="+", type=int, default=[128, 512])
    parser.add_argument("--greedy", type=int, default=32)
    parser.add_argument("--out", default="model-parity.json")
    parser.add_argument("--dynamic", action="store_true",
                        help="compile each model once with a symbolic length")
    parser.add_argument("--max-seq", type=int, default=2048)
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                        default="float32", help="the weights' and activations' dtype")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    if args.dynamic and max(args.seqs) > args.max_seq:
        parser.error(f"--seqs go up to {max(args.seqs)}, above --max-seq {args.max_seq}")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    results: list[dict[str, Any]] = []
    for name in args.models:  # the file is rewritten after each model: nothing is lost
        if args.dynamic:
            run_symbolic(name, args.seqs, args.max_seq, args.greedy, results, dtype)
        else:
            run_model(name, args.seqs, args.greedy, results, dtype)
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "results": results}, f, indent=1)
    print(table(results))


if __name__ == "__main__":
    main()
