"""Run every kernel llmopt generates for TinyLlama-1.1B and Qwen2.5-7B once, for
compute-sanitizer: real dimensions, the first ``--layers`` decoder layers (every layer
compiles to the same kernel set), the lm_head, seeded random weights.

Usage (GPU host): ``compute-sanitizer --tool memcheck python3 bench/sanitize_models.py``
(likewise ``--tool racecheck``). Only llmopt's kernels run; the script prints each model's
kernel count and whether the logits are finite.
"""

from __future__ import annotations

import argparse

import torch

import llmopt
from llmopt.codegen.executor import CompiledProgram
from llmopt.frontend.models import build_model, capture_model


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tinyllama", "qwen2.5-7b"])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seq", type=int, default=33)
    args = parser.parse_args()
    for name in args.models:
        model = build_model(name, device="cuda", dtype=torch.float32, seed=0,
                            layers=args.layers)
        captured = capture_model(model, args.seq)
        llmopt.lower(captured.module, "lower-to-cuda")
        program = CompiledProgram(captured.module, params=captured.params)
        ids = torch.randint(0, model.config.vocab_size, (1, args.seq), device="cuda")
        logits = program(ids)[0]
        torch.cuda.synchronize()
        print(f"{name}: {len(program.kernel_names)} kernels ran, "
              f"finite logits: {bool(torch.isfinite(logits).all())}", flush=True)
        del model, program, captured
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
