"""Run every kernel llmopt generates for TinyLlama-1.1B and Qwen2.5-7B once, for
compute-sanitizer: real dimensions, the first ``--layers`` decoder layers (every layer
compiles to the same kernel set), the lm_head, seeded random weights.

**Whole-model programs** (the default): one program per sequence length of ``--seqs``
(lengths that take the tiled and tensor-core paths, 128 and 512, and ragged ones that no tile
divides, such as 200 and 17). With ``--dynamic`` one symbolic program (at most ``--max-seq``
tokens) runs at every length, so each length bucket's kernel variants run.

**Decode** (``--decode``): the :class:`llmopt.Generator` of each model (what ``llmopt
generate`` runs): its prefill, symbolic in the prompt's length, then ``--new`` - 1 steps of
its decode program over the KV cache (warp-per-output products, flash-decoding with split
keys and the merge of the splits), after a random prompt of each of ``--contexts`` tokens.
The caches hold ``--max-ctx`` positions; the split of the keys is chosen for that length
(at the default 520, nine 64-key blocks split four ways for both models, so the steps after
a prompt of 300 tokens leave one split a ragged last block and one split no key at all). Every
decode step after the first replays the step's CUDA graph; ``--no-graph`` launches each
kernel from the host instead (a decode program that takes its length as an argument).

``--dtypes`` runs each in 32 and/or 16 bits. The sanitized process should spend its time in
llmopt's kernels: the weights are made by the seeded initialisation on the CPU
(``--init-device``) and copied to the GPU, inputs are drawn and logits checked on the CPU
(torch kernels left: the Generator's own argmax and token copies), and the programs come
from the compile cache (``LLMOPT_CACHE_DIR``), so that no capture, lowering or NVRTC
compilation runs there. ``--prebuild``, run first
without the sanitizer and with the same options, lowers and compiles everything the run
needs into that cache, ``--jobs`` programs at a time, each in its own process: a
whole-model program is captured on the meta device and needs no GPU; a Generator is built
(on the GPU, where its programs are loaded). With ``--require-cached`` a whole-model program
missing from the cache is an error rather than lowered in the sanitized run; a Generator's
programs cannot be looked up before it is built, so its line says whether they were cached.

Usage (GPU host, from the repository root)::

    python3 bench/sanitize_models.py --prebuild --layers 1 --seqs 128 200 512
    compute-sanitizer --tool racecheck python3 bench/sanitize_models.py --layers 1 \\
        --seqs 128 200 512 --require-cached
    python3 bench/sanitize_models.py --prebuild --decode --layers 1 --dtypes float32 bfloat16
    compute-sanitizer --tool memcheck python3 bench/sanitize_models.py --decode --layers 1 \\
        --dtypes float32 bfloat16 --require-cached

``bench/sanitize.sh`` runs the prebuild and both tools in time-limited steps. Each line the
script prints starts with the seconds since it started and says what ran: per length the
kernels loaded, whether the program came from the compile cache and whether the logits are
finite; per context whether every generated token is in the vocabulary.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from llmopt.codegen.program_cache import LoweredProgram

PIPELINE = "lower-to-cuda"
"""The pipeline every program is lowered by (for the GPU's architecture)."""
DEFAULT_MAX_CTX = 520
"""The cache length of ``--decode`` unless a longer one is needed (see the module docstring)."""
DEFAULT_CONTEXT = 300
"""The prompt length of ``--decode`` by default."""
_STARTED = time.perf_counter()
_KERNEL_HEAD = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(")
"""The start of a kernel in printed CUDA: its name is group 1."""


class CacheMiss(RuntimeError):
    """A whole-model program the run needs is not in the compile cache (``--require-cached``)."""


def say(text: str) -> None:
    """Print ``text`` after the seconds since the script started, flushed at once (a run
    stopped by a time limit keeps every line printed before)."""
    print(f"[{time.perf_counter() - _STARTED:7.1f} s] {text}", flush=True)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The options; ``--seq N`` (one length) is kept as a spelling of ``--seqs N`` and
    ``--dtype`` as one of ``--dtypes``. Decode options without ``--decode``, whole-model ones
    with it, and ``--prebuild`` with ``--require-cached`` are usage errors."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tinyllama", "qwen2.5-7b"],
                        help="presets or config.json paths (default: tinyllama qwen2.5-7b)")
    parser.add_argument("--layers", type=_positive, default=2)
    parser.add_argument("--dtypes", "--dtype", nargs="+", dest="dtypes",
                        choices=["float32", "bfloat16", "float16"], default=["float32"])
    parser.add_argument("--seed", type=int, default=0, help="weights and inputs (default 0)")
    parser.add_argument("--dynamic", action="store_true",
                        help="one symbolic program for every length (default: one per length)")
    parser.add_argument("--max-seq", type=_positive, default=None,
                        help="with --dynamic, the largest length (default: the longest of "
                        "--seqs)")
    lengths = parser.add_mutually_exclusive_group()
    lengths.add_argument("--seqs", type=_positive, nargs="+", default=None,
                         help="sequence lengths, each run in turn (default 33)")
    lengths.add_argument("--seq", type=_positive, help="one sequence length")
    parser.add_argument("--decode", action="store_true",
                        help="run each model's Generator (prefill and decode steps) instead")
    parser.add_argument("--contexts", type=_positive, nargs="+", default=None,
                        help=f"--decode: prompt lengths (default {DEFAULT_CONTEXT})")
    parser.add_argument("--new", type=_positive, default=None,
                        help="--decode: tokens generated after each prompt, the first by the "
                        "prefill (default 4: three decode steps)")
    parser.add_argument("--max-ctx", type=_positive, default=None,
                        help=f"--decode: the caches' length (default {DEFAULT_MAX_CTX}, or "
                        "what the longest context and --new need)")
    parser.add_argument("--no-graph", action="store_true",
                        help="--decode: launch every decode kernel from the host (no CUDA "
                        "graph)")
    parser.add_argument("--init-device", choices=["cpu", "cuda"], default="cpu",
                        help="where the seeded random weights are made (default cpu: no "
                        "initialisation kernel runs on the GPU)")
    parser.add_argument("--prebuild", action="store_true",
                        help="lower and compile everything these options run into the "
                        "compile cache, run nothing (not under the sanitizer)")
    parser.add_argument("--jobs", type=_positive, default=None,
                        help="--prebuild: programs built at once, each in its own process "
                        "(default: as many as the cores, at most one per program)")
    parser.add_argument("--list-kernels", action="store_true",
                        help="run nothing: print each kernel that uses shared memory (the only "
                        "ones racecheck can fault) with the options that run its program "
                        "alone, a line each, for a race check kernel by kernel")
    parser.add_argument("--no-prefill", action="store_true",
                        help="--decode: run the decode steps on caches of random values, "
                        "without the prefill (so that the first launch of a kernel's name is "
                        "the decode program's)")
    parser.add_argument("--require-cached", action="store_true",
                        help="a whole-model program missing from the compile cache is an "
                        "error (exit 2) instead of lowered in this run")
    args = parser.parse_args(argv)
    if args.seq is not None:
        args.seqs = [args.seq]
    decode_only = {"--contexts": args.contexts is not None, "--new": args.new is not None,
                   "--max-ctx": args.max_ctx is not None, "--no-graph": args.no_graph,
                   "--no-prefill": args.no_prefill}
    if args.decode:
        whole = {"--seqs": args.seqs is not None, "--dynamic": args.dynamic,
                 "--max-seq": args.max_seq is not None}
        given = [name for name, used in whole.items() if used]
        if given:
            parser.error(f"{given[0]} is for whole-model programs, not --decode")
        args.contexts = args.contexts or [DEFAULT_CONTEXT]
        args.new = args.new or 4
        if args.new < 2:
            parser.error("--new must be at least 2 (the first token comes from the prefill, "
                         "the others from decode steps)")
        needed = max(args.contexts) + args.new - 1
        if args.max_ctx is None:
            args.max_ctx = max(DEFAULT_MAX_CTX, needed)
        elif args.max_ctx < needed:
            parser.error(f"--max-ctx {args.max_ctx} is below the {needed} positions a "
                         f"context of {max(args.contexts)} and --new {args.new} need")
    else:
        given = [name for name, used in decode_only.items() if used]
        if given:
            parser.error(f"{given[0]} needs --decode")
        args.seqs = args.seqs or [33]
    if args.max_seq is not None and not args.dynamic:
        parser.error("--max-seq bounds a symbolic length: add --dynamic")
    if args.dynamic:
        args.max_seq = args.max_seq or max(args.seqs)
        if args.max_seq < 2:
            parser.error("--dynamic needs --max-seq of at least 2 (export traces a length >= 2)")
        if max(args.seqs) > args.max_seq:
            parser.error(f"--seqs go up to {max(args.seqs)}, above --max-seq {args.max_seq}")
    if args.list_kernels and args.prebuild:
        parser.error("--list-kernels reads the compile cache: run --prebuild before it")
    if args.prebuild and args.require_cached:
        parser.error("--prebuild fills the compile cache: --require-cached is for the run after")
    if args.jobs is not None and not args.prebuild:
        parser.error("--jobs is for --prebuild")
    return args


# --- what a run needs ---------------------------------------------------------------------


def prebuild_jobs(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """Every program (for ``--decode``: every Generator) the options run, each as a name and
    the arguments of this script that prebuild only it (with ``--prebuild``)."""
    common = ["--layers", str(args.layers), "--seed", str(args.seed)]
    jobs: list[tuple[str, list[str]]] = []
    for model in args.models:
        for dtype in args.dtypes:
            base = [*common, "--models", model, "--dtypes", dtype]
            if args.decode:
                graph = ["--no-graph"] if args.no_graph else []
                jobs.append((f"{model} {dtype} Generator(max_ctx={args.max_ctx})",
                             [*base, "--decode", "--contexts", *map(str, args.contexts),
                              "--new", str(args.new), "--max-ctx", str(args.max_ctx),
                              *graph]))
            elif args.dynamic:
                jobs.append((f"{model} {dtype} symbolic seq <= {args.max_seq}",
                             [*base, "--dynamic", "--max-seq", str(args.max_seq),
                              "--seqs", *map(str, args.seqs)]))
            else:
                jobs += [(f"{model} {dtype} seq {seq}", [*base, "--seqs", str(seq)])
                         for seq in dict.fromkeys(args.seqs)]
    return jobs


def whole_model_program(name: str, layers: int, seq: int, dtype: str, arch: str, *,
                        max_seq: int | None = None, require_cached: bool = False
                        ) -> LoweredProgram:
    """Model ``name``'s first ``layers`` decoder layers and head at length ``seq`` (with
    ``max_seq``: symbolic up to it, ``seq`` the example), lowered for ``arch`` through the
    compile cache as ``llmopt compile --layers`` keys it: a hit reads it, a miss captures it
    on the meta device and lowers it (or, with ``require_cached``, raises
    :class:`CacheMiss`)."""
    from llmopt.frontend.models import model_config
    from llmopt.registry import with_arch
    from llmopt.tools.llmopt_cli import lowered_program, model_identity, split_pipeline

    elements, _ = split_pipeline(with_arch(PIPELINE, arch), "cuda")
    what = f"{name} {dtype} " + (f"symbolic seq <= {max_seq}" if max_seq else f"seq {seq}")

    def config() -> Any:  # called on a miss only
        if require_cached:
            raise CacheMiss(f"{what} is not in the compile cache "
                            f"(run with --prebuild first, with the same LLMOPT_CACHE_DIR)")
        return model_config(name, layers=layers)

    program, _ = lowered_program(name, model_identity(name, layers), config, seq, dtype,
                                 elements, f"lowering {what}", max_seq=max_seq)
    return program


def _example_seq(max_seq: int) -> int:
    """The length a symbolic program is captured at (export needs one of at least 2)."""
    return max(2, min(16, max_seq))


def make_model(name: str, layers: int, dtype: str, seed: int, init_device: str
               ) -> PreTrainedModel:
    """Model ``name`` (its first ``layers`` decoder layers) with seeded random weights made
    on ``init_device``, on the GPU."""
    import torch

    from llmopt.frontend.models import build_model

    model = build_model(name, device=init_device, dtype=getattr(torch, dtype), seed=seed,
                        layers=layers)
    on_gpu: PreTrainedModel = model.to("cuda")
    return on_gpu


def _release() -> None:
    import torch

    gc.collect()
    torch.cuda.empty_cache()


# --- prebuild -----------------------------------------------------------------------------


def prebuild(args: argparse.Namespace) -> int:
    """Lower and compile every program the options run into the compile cache, ``--jobs``
    at a time in processes of their own (or here, for one job); 1 if any failed."""
    jobs = prebuild_jobs(args)
    width = args.jobs or min(len(jobs), os.cpu_count() or 1)
    if width == 1 or len(jobs) == 1:
        prebuild_here(args)
        return 0
    say(f"prebuilding {len(jobs)} programs, {width} at a time")
    script = str(Path(__file__).resolve())
    waiting = list(jobs)
    running: list[tuple[str, subprocess.Popen[bytes], float]] = []
    failed: list[str] = []
    while waiting or running:
        while waiting and len(running) < width:
            name, argv = waiting.pop(0)
            proc = subprocess.Popen([sys.executable, script, "--prebuild", "--jobs", "1",
                                     *argv])
            running.append((name, proc, time.perf_counter()))
        time.sleep(0.2)
        for entry in list(running):
            name, proc, began = entry
            code = proc.poll()
            if code is None:
                continue
            running.remove(entry)
            took = time.perf_counter() - began
            if code:
                failed.append(name)
                say(f"prebuild of {name} FAILED (exit {code}) after {took:.1f} s")
            else:
                say(f"prebuild of {name} done in {took:.1f} s")
    say(f"prebuilt {len(jobs) - len(failed)} of {len(jobs)}"
        + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def prebuild_here(args: argparse.Namespace) -> None:
    """``prebuild`` in this process, one program after the other."""
    from llmopt.codegen.cache import default_cache_dir
    from llmopt.codegen.nvrtc import compile_cuda
    from llmopt.target import default_arch

    say(f"compile cache: {default_cache_dir()}")
    if args.decode:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("--prebuild --decode builds Generators, which needs a GPU")
        for name in args.models:
            for dtype in args.dtypes:
                build_generator(args, name, dtype, init_device="cuda")
                _release()
        return
    arch = default_arch()
    for name in args.models:
        for dtype in args.dtypes:
            if args.dynamic:
                lengths: list[tuple[int, int | None]] = [(_example_seq(args.max_seq),
                                                          args.max_seq)]
            else:
                lengths = [(seq, None) for seq in dict.fromkeys(args.seqs)]
            for seq, max_seq in lengths:
                began = time.perf_counter()
                program = whole_model_program(name, args.layers, seq, dtype, arch,
                                              max_seq=max_seq)
                source = program.source
                lowered = time.perf_counter()
                compile_cuda(source, arch=arch)
                what = f"symbolic seq <= {max_seq}" if max_seq else f"seq {seq}"
                say(f"prebuilt {name} {dtype} {what} for {arch}: "
                    f"{'found in the compile cache' if program.hit else 'lowered'} in "
                    f"{lowered - began:.1f} s, NVRTC (or its cache) "
                    f"{time.perf_counter() - lowered:.1f} s, "
                    f"{source.count('__global__')} kernels")


# --- sanitized runs -----------------------------------------------------------------------


def build_generator(args: argparse.Namespace, name: str, dtype: str, init_device: str
                    ) -> tuple[Any, PreTrainedModel]:
    """Model ``name``'s Generator for ``--max-ctx`` positions (through the compile cache)
    and the model; says how long each took and whether both programs were cached."""
    import llmopt

    began = time.perf_counter()
    model = make_model(name, args.layers, dtype, args.seed, init_device)
    built = time.perf_counter()
    say(f"{name} {dtype}: weights made on {init_device} and on the GPU in "
        f"{built - began:.1f} s")
    gen = llmopt.Generator(model, max_ctx=args.max_ctx, device="cuda",
                           cuda_graph=not args.no_graph)
    missed = [which for which in ("prefill", "decode") if which in gen.timings]
    cache = ("both programs from the compile cache" if not missed else
             f"NOT in the compile cache: {' and '.join(missed)} lowered in this run")
    say(f"{name} {dtype} decode: Generator(max_ctx={args.max_ctx}"
        f"{', no CUDA graph' if args.no_graph else ''}) built in "
        f"{time.perf_counter() - built:.1f} s ({cache})")
    return gen, model


def run_decode(args: argparse.Namespace, name: str, dtype: str) -> bool:
    """Each context's prefill and decode steps through ``name``'s Generator; whether every
    token generated is in the vocabulary."""
    import torch

    gen, model = build_generator(args, name, dtype, args.init_device)
    vocab = model.config.vocab_size
    rng = torch.Generator().manual_seed(args.seed + 1)
    if args.no_prefill:
        return decode_without_prefill(args, gen, name, dtype, rng)
    ok = True
    for context in args.contexts:
        prompt = torch.randint(0, vocab, (context,), generator=rng).tolist()
        began = time.perf_counter()
        out = gen.generate(prompt, new_tokens=args.new)
        valid = len(out.tokens) == args.new and all(0 <= t < vocab for t in out.tokens)
        ok = ok and valid
        say(f"{name} {dtype} decode ctx {context}: prefill of {context} tokens and "
            f"{args.new - 1} decode steps (cache lengths {context + 1}..{context + args.new - 1}"
            f" of {args.max_ctx}) in {time.perf_counter() - began:.1f} s, tokens in the "
            f"vocabulary: {valid}")
    return ok


def decode_without_prefill(args: argparse.Namespace, gen: Any, name: str, dtype: str,
                           rng: Any) -> bool:
    """``--no-prefill``: ``--new`` - 1 decode steps at each context, on caches of random
    values and random tokens (the Generator's own programs, called as its ``generate`` calls
    them, without the prefill); whether every logit is finite."""
    import torch

    _, decode = gen._programs  # the compiled prefill and decode programs
    caches = gen._caches()
    for cache in caches:
        cache.copy_(torch.randn(cache.shape, generator=rng).to(cache.dtype))
    vocab = gen.model.config.vocab_size
    ok = True
    for context in args.contexts:
        began = time.perf_counter()
        finite = True
        for step in range(1, args.new):
            ctx = context + step
            token = torch.randint(0, vocab, (1, 1), generator=rng).to("cuda")
            (logits,) = decode(token, *(c[:ctx] for c in caches))
            finite = finite and bool(torch.isfinite(logits.cpu().float()).all())
        ok = ok and finite
        say(f"{name} {dtype} decode ctx {context}: {args.new - 1} decode steps without the "
            f"prefill (cache lengths {context + 1}..{context + args.new - 1} of "
            f"{args.max_ctx}, random caches) in {time.perf_counter() - began:.1f} s, finite "
            f"logits: {finite}")
    return ok


def shared_memory_kernels(source: str) -> list[str]:
    """The ``__global__`` functions of ``source`` that declare shared memory, in order:
    racecheck reports hazards on shared memory only, so the others cannot fault it."""
    heads = list(_KERNEL_HEAD.finditer(source))
    ends = [head.start() for head in heads[1:]] + [len(source)]
    return [head.group(1) for head, end in zip(heads, ends, strict=False)
            if "__shared__" in source[head.end():end]]


def list_kernels(args: argparse.Namespace) -> int:
    """``--list-kernels``: for every program the options run (from the compile cache), each
    kernel that uses shared memory, as a line ``KERNEL<tab>name<tab>options``: the options
    of this script that run that program alone (with ``--no-prefill`` for a Generator's
    decode program). A race check of one kernel is then ``compute-sanitizer --tool
    racecheck --kernel-name kne=NAME --launch-count 1 python3 bench/sanitize_models.py
    --require-cached OPTIONS``."""
    from llmopt.target import default_arch

    arch = default_arch()
    for what, argv in prebuild_jobs(args):
        one = parse_args(argv)
        if one.decode:
            import torch

            with torch.no_grad():
                gen, _ = build_generator(one, one.models[0], one.dtypes[0], "cuda")
            source = gen._programs[1].source  # the decode program
            argv = [*argv, "--no-prefill"]
            del gen
            _release()
        else:
            seq, max_seq = ((_example_seq(one.max_seq), one.max_seq) if one.dynamic
                            else (one.seqs[0], None))
            try:
                program = whole_model_program(one.models[0], one.layers, seq, one.dtypes[0],
                                              arch, max_seq=max_seq, require_cached=True)
            except CacheMiss as err:
                say(f"error: {err}")
                return 2
            source = program.source
        kernels = shared_memory_kernels(source)
        say(f"{what}: {len(kernels)} of {source.count('__global__')} kernels use shared "
            "memory")
        for kernel in kernels:
            print(f"KERNEL\t{kernel}\t{' '.join(argv)}", flush=True)
    return 0


def run_whole_model(args: argparse.Namespace, name: str, dtype: str, arch: str) -> bool:
    """``name``'s program at each of ``--seqs`` (one symbolic program with ``--dynamic``);
    whether every logit is finite."""
    import torch

    from llmopt.codegen.executor import CompiledProgram
    from llmopt.tools.llmopt_cli import model_weights

    began = time.perf_counter()
    model = make_model(name, args.layers, dtype, args.seed, args.init_device)
    say(f"{name} {dtype}: weights made on {args.init_device} and on the GPU in "
        f"{time.perf_counter() - began:.1f} s")
    weights = model_weights(model)
    vocab = model.config.vocab_size
    rng = torch.Generator().manual_seed(args.seed + 1)

    def load(seq: int, max_seq: int | None) -> tuple[CompiledProgram, str]:
        began = time.perf_counter()
        program = whole_model_program(name, args.layers, seq, dtype, arch, max_seq=max_seq,
                                      require_cached=args.require_cached)
        compiled = CompiledProgram(program.host, params=weights, arch=arch,
                                   source=program.source)
        cache = "compile cache hit" if program.hit else "NOT in the compile cache: lowered"
        return compiled, (f"{len(compiled.kernel_names)} kernels loaded in "
                          f"{time.perf_counter() - began:.1f} s ({cache})")

    symbolic = load(_example_seq(args.max_seq), args.max_seq) if args.dynamic else None
    ok = True
    for seq in args.seqs:
        compiled, how = symbolic or load(seq, None)
        ids = torch.randint(0, vocab, (1, seq), generator=rng).to("cuda")
        began = time.perf_counter()
        logits = compiled(ids)[0]
        torch.cuda.synchronize()
        ran = time.perf_counter() - began
        finite = bool(torch.isfinite(logits.cpu().float()).all())  # checked on the CPU
        ok = ok and finite
        say(f"{name} {dtype} seq {seq}{' (symbolic)' if args.dynamic else ''}: {how}, ran in "
            f"{ran:.1f} s, finite logits: {finite}")
        del compiled, logits
        if symbolic is None:
            _release()
    return ok


def run(args: argparse.Namespace) -> int:
    """The sanitized run: 0 if every output was sane, 1 if not, 2 for a cache miss with
    ``--require-cached``."""
    import torch

    from llmopt.codegen.cache import default_cache_dir
    from llmopt.target import default_arch

    say(f"compile cache: {default_cache_dir()}")
    if os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "") not in ("", "0"):
        say("torch's caching allocator is off: every tensor is its own CUDA allocation")
    torch.cuda.init()
    torch.empty(1, device="cuda")
    say(f"CUDA initialised: {torch.cuda.get_device_name()}")
    arch = default_arch()
    ok = True
    step: Callable[[str, str], bool] = (
        (lambda name, dtype: run_decode(args, name, dtype)) if args.decode
        else (lambda name, dtype: run_whole_model(args, name, dtype, arch)))
    with torch.no_grad():
        for name in args.models:
            for dtype in args.dtypes:
                try:
                    ok = step(name, dtype) and ok
                except CacheMiss as err:
                    say(f"error: {err}")
                    return 2
                _release()  # the model and its programs, gone with the step's frame
    say("done" if ok else "done: some outputs were NOT sane (see above)")
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list_kernels:
        return list_kernels(args)
    return prebuild(args) if args.prebuild else run(args)


if __name__ == "__main__":
    sys.exit(main())
