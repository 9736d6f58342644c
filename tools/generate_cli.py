"""``llmopt generate``: greedy generation with a KV cache, and how fast it went.

Builds the model (a name, a local Hugging Face directory or a ``config.json``; random
weights under ``--seed`` unless the directory holds a checkpoint), compiles its prefill and
decode programs once (:class:`llmopt.Generator`), runs the prompt — ``--prompt-ids FILE``
(token ids, separated by spaces, commas or newlines, or a JSON list) or ``--prompt-len N``
seeded random ids — and prints the new tokens, then ms/token, tok/s and, on a GPU, the
percentage of the device's measured copy bandwidth that a decode step's bytes (every
weight once, the cache of the context) took. ``--check`` also runs transformers'
``generate`` (greedy) and says whether the tokens agree; in 16 bits (``--dtype bfloat16`` or
``float16``), where they part it gives transformers' logit gap there, and a gap below the
dtype's rounding at the logits' scale (a near-tie) is not a failure. Without a GPU (or with
``--cpu``)
the programs run through the CPU interpreter on a shrunk config, as ``llmopt run`` does.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from llmopt.tools.llmopt_cli import (
    _SEED,
    CliError,
    _checkpoint,
    _cpu_model,
    _describe,
    _integer,
    _positive,
    check_pipeline,
)

__all__ = ["add_parser", "check_vocabulary", "generate_command", "read_prompt_ids"]

CPU_PROMPT = 6
"""The prompt length on the CPU interpreter (``--prompt-len``' default there)."""
CPU_NEW = 6


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """The ``generate`` subcommand of ``llmopt``."""
    g = sub.add_parser("generate", help="greedy generation with a KV cache: the tokens, "
                       "ms/token, tok/s and the share of the copy bandwidth",
                       parents=[common])
    g.add_argument("model", help="tinyllama, qwen2.5-7b, a local HF directory or a config.json")
    prompt = g.add_mutually_exclusive_group()
    prompt.add_argument("--prompt-len", type=_positive, default=None, metavar="N",
                        help="a seeded random prompt of N tokens (default 128 on a GPU, "
                        f"{CPU_PROMPT} on the CPU)")
    prompt.add_argument("--prompt-ids", type=Path, default=None, metavar="FILE",
                        help="the prompt's token ids (spaces, commas or newlines between "
                        "them, or a JSON list)")
    g.add_argument("--new-tokens", type=_positive, default=None, metavar="M",
                   help=f"tokens to generate (default 32 on a GPU, {CPU_NEW} on the CPU)")
    g.add_argument("--max-ctx", type=_positive, default=None, metavar="N",
                   help="the longest context the compiled programs serve (default: what "
                   "this prompt and --new-tokens need)")
    g.add_argument("--layers", type=_positive, default=None,
                   help="keep only the first N decoder layers")
    g.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32",
                   help="dtype of the weights, activations and caches (%(default)s); 16-bit "
                   "products and reductions accumulate in float32")
    g.add_argument("--pipeline", default="lower-to-cuda", help="the pass pipeline")
    g.add_argument("--seed", type=_SEED, default=0, help="seed of the weights and the prompt")
    g.add_argument("--check", action="store_true",
                   help="also run transformers' greedy generate and compare the tokens")
    g.add_argument("--no-graph", action="store_true",
                   help="on a GPU, launch each decode kernel from the host instead of "
                   "replaying one CUDA graph")
    g.add_argument("--steps-per-graph", type=_integer(0, 1024), default=8, metavar="N",
                   help="on a GPU, decode steps one graph replay runs at most, each picking "
                   "its token on the GPU (%(default)s; 0: one step a replay, the token "
                   "picked between replays)")
    g.add_argument("--allow-nonfinite", action="store_true",
                   help="run a checkpoint whose weights hold NaN or infinite values")
    g.add_argument("--cpu", action="store_true", help="use the CPU interpreter even with a GPU")
    g.set_defaults(run=generate_command, shrink=False, no_shrink=False, profile=0)


def read_prompt_ids(path: Path) -> list[int]:
    """Token ids from ``path``; a file that holds anything else (or a negative id) is a
    :class:`CliError` naming the file."""
    text = path.read_text()
    try:
        values = json.loads(text) if text.lstrip().startswith("[") else \
            text.replace(",", " ").split()
        ids = [int(v) for v in values]
    except (ValueError, TypeError):
        raise CliError(f"{path}: expected token ids (integers), separated by spaces, commas "
                       "or newlines, or a JSON list") from None
    if not ids:
        raise CliError(f"{path}: the prompt is empty")
    check_vocabulary(path, ids, None)
    return ids


def check_vocabulary(path: Path, ids: list[int], vocab: int | None) -> None:
    """A :class:`CliError` naming ``path`` for an id outside ``[0, vocab)`` (``None``: only
    negative ids)."""
    bad = [t for t in ids if t < 0 or (vocab is not None and t >= vocab)]
    if bad:
        upper = "" if vocab is None else f"[0, {vocab})"
        raise CliError(f"{path}: token id {bad[0]} is outside the vocabulary {upper}".rstrip())


def _model(args: argparse.Namespace, gpu: bool) -> tuple[Any, str]:
    import torch

    from llmopt.frontend.models import build_model

    if not gpu:
        return _cpu_model(args)
    checkpoint = _checkpoint(args.model)
    model = build_model(args.model, device="cuda", dtype=getattr(torch, args.dtype),
                        seed=args.seed,
                        layers=args.layers, allow_nonfinite=args.allow_nonfinite)
    weights = (f"weights from {checkpoint}" if checkpoint is not None
               else f"random weights (seed {args.seed})")
    return model, weights


def generate_command(args: argparse.Namespace) -> int:
    """``llmopt generate`` (see the module docstring)."""
    import torch

    import llmopt
    from llmopt.generation import (
        GenerationError,
        copy_bandwidth,
        divergence,
        float64_twin,
        step_bytes,
    )

    gpu = torch.cuda.is_available() and not args.cpu
    check_pipeline(args.pipeline)
    given = read_prompt_ids(args.prompt_ids) if args.prompt_ids is not None else None
    model, weights = _model(args, gpu)
    vocab = model.config.vocab_size
    if args.prompt_ids is not None and given is not None:
        check_vocabulary(args.prompt_ids, given, vocab)
        prompt = given
    else:
        length = args.prompt_len or (128 if gpu else CPU_PROMPT)
        g = torch.Generator().manual_seed(args.seed + 1)
        prompt = torch.randint(0, vocab, (length,), generator=g).tolist()
    new = args.new_tokens or (32 if gpu else CPU_NEW)
    needed = max(2, len(prompt) + new - 1)
    max_ctx = args.max_ctx or needed
    if max_ctx < needed:
        raise CliError(f"a prompt of {len(prompt)} tokens and --new-tokens {new} need a "
                       f"context of {needed}, above --max-ctx {max_ctx}")
    where = "GPU: " + torch.cuda.get_device_name() if gpu else "CPU interpreter"
    print(f"// {where}; {args.model} as {_describe(model.config)}, {weights}; prompt of "
          f"{len(prompt)} tokens, {new} new, max_ctx {max_ctx}")
    began = time.perf_counter()
    try:
        gen = llmopt.Generator(model, max_ctx=max_ctx, device="cuda" if gpu else "cpu",
                               pipeline=args.pipeline, cuda_graph=not args.no_graph,
                               steps_per_graph=args.steps_per_graph)
        if gpu:
            gen.generate(prompt, new)  # first launches and the graphs' captures
        out = gen.generate(prompt, new)
    except GenerationError as err:
        raise CliError(str(err)) from None
    print(f"// compiled in {time.perf_counter() - began:.1f} s; {gen.launches_per_step} "
          "kernel launches a decode step")
    print("tokens:", " ".join(map(str, out.tokens)))
    line = (f"prefill {out.prefill_seconds * 1e3:.2f} ms; decode {out.ms_per_token:.3f} "
            f"ms/token, {out.tok_s:.1f} tok/s")
    if gpu and len(out.tokens) > 1:
        nbytes = step_bytes(model, len(prompt) + new - 1)
        share = nbytes / (out.ms_per_token * 1e-3) / copy_bandwidth()
        line += f", {100 * share:.1f}% of the copy bandwidth ({nbytes / 1e9:.2f} GB a step)"
    print(line)
    if args.check:
        ids = torch.tensor([prompt], device=model.device)
        with torch.no_grad():
            want = model.generate(ids, max_new_tokens=new, min_new_tokens=new,
                                  do_sample=False)[0, len(prompt):].tolist()
        judge = args.dtype != "float32" and out.tokens != want  # float64 only if needed
        div = divergence(model, prompt, out.tokens, want, float64_twin(model) if judge else None)
        if div is None:
            print("transformers generate: the same tokens")
            return 0
        tie = ("a near-tie" if div["near_tie"] else "not a near-tie")
        judged = ""
        if "float64_gap" in div:
            winner = {"tokens": "llmopt's", "reference": "transformers'"}.get(
                div["float64_prefers"], "neither")
            judged = f"; in float64 {div['float64_gap']:.3g}: {winner} token"
        print(f"transformers generate: differs from token {div['step']} on (llmopt "
              f"{div['token']}, transformers {div['reference_token']}: logit gap "
              f"{div['logit_gap']:.3g} in {args.dtype}, bound {div['bound']:.3g}, {tie}"
              f"{judged})")
        return 0 if div["near_tie"] and args.dtype != "float32" else 1
    return 0
