"""Run every kernel llmopt generates for TinyLlama-1.1B and Qwen2.5-7B once, for
compute-sanitizer: real dimensions, the first ``--layers`` decoder layers (every layer
compiles to the same kernel set), the lm_head, seeded random weights, at each of the
sequence lengths ``--seqs`` (lengths that take the tiled and tensor-core paths, 128 and 512,
and ragged ones that no tile divides, such as 200 and 17). With ``--dynamic`` one symbolic
program (at most ``--max-seq`` tokens) runs at every length, so each length bucket's kernel
variants run; ``--dtype bfloat16`` or ``float16`` runs the 16-bit kernels.

Usage (GPU host): ``compute-sanitizer --tool memcheck python3 bench/sanitize_models.py
--seqs 128 512 200 17`` (likewise ``--tool racecheck``). Only llmopt's kernels run; the
script prints each model's kernel count and whether the logits are finite, per length.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The options; ``--seq N`` (one length) is kept as a spelling of ``--seqs N``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tinyllama", "qwen2.5-7b"])
    parser.add_argument("--layers", type=_positive, default=2)
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"],
                        default="float32")
    parser.add_argument("--dynamic", action="store_true",
                        help="one symbolic program for every length (default: one per length)")
    parser.add_argument("--max-seq", type=_positive, default=None,
                        help="with --dynamic, the largest length (default: the longest of "
                        "--seqs)")
    lengths = parser.add_mutually_exclusive_group()
    lengths.add_argument("--seqs", type=_positive, nargs="+", default=[33],
                         help="sequence lengths, each run in turn (default 33)")
    lengths.add_argument("--seq", type=_positive, help="one sequence length")
    args = parser.parse_args(argv)
    if args.seq is not None:
        args.seqs = [args.seq]
    if args.max_seq is not None and not args.dynamic:
        parser.error("--max-seq bounds a symbolic length: add --dynamic")
    if args.dynamic:
        args.max_seq = args.max_seq or max(args.seqs)
        if args.max_seq < 2:
            parser.error("--dynamic needs --max-seq of at least 2 (export traces a length >= 2)")
        if max(args.seqs) > args.max_seq:
            parser.error(f"--seqs go up to {max(args.seqs)}, above --max-seq {args.max_seq}")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    import torch

    import llmopt
    from llmopt.codegen.executor import CompiledProgram
    from llmopt.codegen.nvrtc import default_arch
    from llmopt.frontend.models import build_model, capture_model

    args = parse_args(argv)
    pipeline = f"lower-to-cuda{{arch={default_arch()}}}"
    dtype = getattr(torch, args.dtype)

    def compiled(model: torch.nn.Module, seq: int) -> CompiledProgram:
        example = max(2, min(16, args.max_seq)) if args.dynamic else seq  # export needs >= 2
        captured = capture_model(model, example, dynamic=args.dynamic, max_seq=args.max_seq)
        llmopt.lower(captured.module, pipeline)
        return CompiledProgram(captured.module, params=captured.params)

    with torch.no_grad():
        for name in args.models:
            model = build_model(name, device="cuda", dtype=dtype, seed=0, layers=args.layers)
            program = compiled(model, args.seqs[0]) if args.dynamic else None
            for seq in args.seqs:
                run = program or compiled(model, seq)
                ids = torch.randint(0, model.config.vocab_size, (1, seq), device="cuda")
                logits = run(ids)[0]
                torch.cuda.synchronize()
                print(f"{name} {args.dtype} seq {seq}{' (symbolic)' if args.dynamic else ''}: "
                      f"{len(run.kernel_names)} kernels loaded, "
                      f"finite logits: {bool(torch.isfinite(logits).all())}", flush=True)
                del run
                torch.cuda.empty_cache()
            del model, program
            torch.cuda.empty_cache()

if __name__ == "__main__":
    main()
