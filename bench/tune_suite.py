"""Tune the matrix-product kernels of the benchmark suite's op cases (GPU host).

Usage: ``python bench/tune_suite.py [--models ...] [--seqs ...] [--ops ...] [--limit N]
[--table]``. Each selected case (see :mod:`bench.suite`) is captured, lowered to Tile IR and
handed to :func:`llmopt.tools.tune.tune_module`, which times the schedule candidates of each
distinct matrix-product kernel and records the fastest correct one when it beats the
heuristics, in the user's tuning cache (which ``apply-tuned`` reads only when
``$LLMOPT_TUNE_CACHE`` names it or ``user=1`` asks for it, so benchmark with it set) or,
with ``--table``, in the committed table of the GPU's architecture. ``llmopt tune MODEL``
does the same for a model's decoder layer.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from suite import MODELS, OP_SEQS, OPS, make_case  # noqa: E402

import llmopt  # noqa: E402
from llmopt.dialects import tile  # noqa: E402
from llmopt.passes.tile.register_tile import match_contraction  # noqa: E402
from llmopt.tools import tune as tuner  # noqa: E402

TILE_IR = ("torch-to-prim,canonicalize,prim-to-loop,fuse-kernels{recompute_limit=0},"
           "canonicalize,cse,loop-to-tile{arch=%s}")
"""``lower-to-cuda`` up to Tile IR: what the tuner keys kernels on."""


def main() -> int:
    """Tune the selected cases; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--seqs", nargs="+", type=int, default=list(OP_SEQS))
    p.add_argument("--ops", nargs="+", default=list(OPS), choices=list(OPS))
    p.add_argument("--limit", type=int, default=12, help="candidates per kernel at most")
    p.add_argument("--reps", type=int, default=20, help="timed replays per candidate")
    p.add_argument("--jobs", type=int, default=8, help="processes compiling candidates")
    p.add_argument("--table", action="store_true",
                   help="write the committed table of the GPU's architecture")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("tune_suite needs a CUDA GPU: candidates are timed on it", file=sys.stderr)
        return 2
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    path = tuner.TABLE_DIR / f"{arch}.json" if args.table else tuner.cache_path()
    table = tuner.load_table(path)

    seen: set[str] = set()  # kernels already tuned by this run (cases share shapes)

    for model in args.models:
        for seq in args.seqs:
            for op in args.ops:
                case = make_case(MODELS[model], seq, op)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    module = llmopt.capture(case.module, case.inputs)
                module = llmopt.lower(module, TILE_IR % arch)
                keys = {tuner.schedule_key(k) for k in module.walk()
                        if isinstance(k, tile.KernelOp) and match_contraction(k) is not None}
                if keys <= seen:
                    continue
                seen.update(keys)
                print(f"// {case.name}", flush=True)
                tuner.tune_module(module, arch, args.reps, args.limit, jobs=args.jobs,
                                  save=partial(tuner.record_entries, path, table),
                                  log=lambda line: print(line, flush=True),
                                  recorded=dict(table))
    print(f"// {len(table)} entries in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
