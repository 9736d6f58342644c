"""``llmopt tune``: search the schedule knobs of each matrix-product kernel on the GPU.

For every kernel of a program that ``register-tile`` would tile (after ``loop-to-tile``),
identified by its **structural hash** (:func:`schedule_key`: the kernel's ops, types and
properties, not its name), each candidate knob set (register tile ``bm × bn`` / ``tm × tn``,
K chunk ``bk``, ``split_k``) is applied to a one-kernel program, lowered by the scheduling
passes, compiled and run on random inputs. A candidate that fails to compile or launch, or
whose outputs differ from the unscheduled kernel's by more than the numerics tolerance, is
discarded. The fastest survivor (median of CUDA-event timings of CUDA-graph replays), when
it beats the heuristics' own schedule, is written to the **tuning cache**, keyed on the
structural hash, the GPU's name and the NVRTC version; the ``apply-tuned`` pass reads the
committed table of the target architecture, and the cache before it when asked to, and
sets the kernel's ``llmopt.schedule``.

A symbolic program (``llmopt tune MODEL --dynamic --max-seq N``) is tuned after
``length-buckets``: each bucket's kernel, whose rows are the runtime length up to the
bucket's bound, is its own structural hash, and is timed as a one-kernel program with that
length as its symbol, run at the bound (:func:`one_kernel_module`, :func:`call_types`); its
candidates may overhang the bound, since the lengths it serves are mostly below it.

The cache is ``$LLMOPT_TUNE_CACHE`` or ``~/.cache/llmopt/tuned.json``. So that a program
lowers the same for everyone, ``apply-tuned`` reads it only when told to: with
``$LLMOPT_TUNE_CACHE`` set, or with ``apply-tuned{user=1}`` (:func:`user_cache`).
``--table`` writes the results to a committed table instead
(``passes/tile/tuned/<arch>.json``), which ``apply-tuned`` always reads.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import math
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    i64,
)
from xdsl.ir import Block, Region, SSAValue

from llmopt.dialects import loop, tile
from llmopt.dialects._symbols import (
    DYNAMIC,
    DYNAMIC_ATTR,
    INPUT_ATTR,
    MAX_ATTR,
    SYMBOL_ATTR,
    argument_dynamic,
    function_symbols,
)
from llmopt.passes.kernel._index_expr import ExprBuilder, index_expr
from llmopt.passes.tile._schedule import SCHEDULE_ATTR, RegisterTile
from llmopt.passes.tile._schedule_tiles import (
    HALF_KINDS,
    fitting_tiles,
    mma_accumulators,
    mma_tiles,
    tensor_core_kind,
    tile_cost,
    warpgroup_chunk,
)
from llmopt.passes.tile.register_tile import (
    Contraction,
    factor_types,
    match_contraction,
    tile_periods,
)
from llmopt.target import base_arch, for_arch

TABLE_DIR = Path(__file__).resolve().parent.parent / "passes" / "tile" / "tuned"
SCHEDULED = ("split-k{{arch={arch}}},register-tile{{arch={arch}}},stage-inputs{{arch={arch}}},"
             "async-copy{{arch={arch}}},prefetch-stages,wgmma-fragments{{arch={arch}}},"
             "pad-shared,mma-fragments,vector-fragments,"
             "tile-to-kernel,canonicalize,cse,kernel-to-cuda{{arch={arch}}}")
UNSCHEDULED = "tile-to-kernel,canonicalize,cse,kernel-to-cuda"


def schedule_key(kernel: tile.KernelOp) -> str:
    """The structural hash of a Tile-IR kernel before scheduling: equal for kernels that are
    identical up to their symbol name, value names, locations and schedule knobs. The
    kernel's operand segment sizes are left out too: they only split its operands into bound
    buffers and runtime grid extents, and a static kernel (the only kind a table holds) has
    none of the latter, so keys stay those the committed tables were written with."""
    from llmopt.passes.kernel.dedup_kernels import _Keyer

    saved = kernel.attributes.pop(SCHEDULE_ATTR, None)
    try:
        keyer = _Keyer()
        for value in kernel.operands:  # the bound buffers, numbered by first appearance
            if value not in keyer.values:
                keyer.define(value)
        key = keyer.op(kernel, skip=frozenset({"sym_name", "operandSegmentSizes"}))
    finally:
        if saved is not None:
            kernel.attributes[SCHEDULE_ATTR] = saved
    return hashlib.sha256(repr(key).encode()).hexdigest()[:20]


def describe(kernel: tile.KernelOp) -> str:
    """``batch×M×N×K`` of a matched kernel."""
    found = match_contraction(kernel)
    assert found is not None
    ext = found.extents
    batch = math.prod(ext[d] for d in found.batch)
    return f"{batch}x{ext[found.m]}x{ext[found.n]}x{found.reduce.trip_count}"


def product_dims(found: Contraction) -> tuple[int, int, int, int]:
    """``(m, n, k, batch points)`` of a matched product."""
    ext = found.extents
    return (ext[found.m], ext[found.n], found.reduce.trip_count,
            math.prod(ext[d] for d in found.batch))


def block_count(tile_: RegisterTile, split: int, dims: tuple[int, int, int, int]) -> int:
    """Blocks of ``tile_`` over a product of ``dims`` (:func:`product_dims`) cut in ``split``
    K slices (a ragged edge block counted whole)."""
    m, n, _, batch = dims
    return batch * -(-m // tile_.bm) * -(-n // tile_.bn) * split


def runtime_rows(found: Contraction) -> bool:
    """Whether the product's rows are a runtime length (a length bucket's variant, its rows
    at most the bucket's bound): every tile is then a ragged one, and tiles that do not
    divide the bound compete (its lengths are mostly below it)."""
    return found.length is not None


def candidates(kernel: tile.KernelOp, arch: str) -> list[dict[str, int]]:
    """Knob sets worth timing for ``kernel``, most promising first: every register tile that
    divides the output (at least 4 outputs a thread, at most 64 accumulators), with K slices
    that keep each slice at least 128 long and the blocks at most eight waves, K chunks of
    16 and 32 (``async-copy`` keeps fewer slots of the longer chunks in shared memory);
    ordered by the heuristics' cost model (:func:`~llmopt.passes.tile._schedule_tiles.tile_cost`
    of the slices' blocks, per slice), then by outputs per thread."""
    found = match_contraction(kernel)
    if found is None:
        return []
    m, n, k, batch = dims = product_dims(found)
    gpu = for_arch(arch)
    accs = len(found.reduces)
    scored: list[tuple[float, int, int, dict[str, int]]] = []
    for tile_ in fitting_tiles(m, n, accs, tile_periods(found), runtime_rows(found)):
        bm, bn, tm, tn = tile_.bm, tile_.bn, tile_.tm, tile_.tn
        if tm * tn < 4:
            continue
        for split in (1, 2, 4, 8, 16):
            blocks = block_count(tile_, split, dims)
            if k % split or (split > 1 and (k // split < 128 or blocks > 8 * gpu.sms)):
                continue
            score = tile_cost(tile_, blocks, gpu) / split
            for rank, bk in enumerate((16, 32)):
                if (k // split) % bk == 0:
                    knobs = {"bm": bm, "bn": bn, "tm": tm, "tn": tn, "bk": bk,
                             "split_k": split}
                    scored.append((score, -tm * tn, rank, knobs))
    scored.sort(key=lambda t: (t[0], t[1], t[2]))
    return [knobs for *_, knobs in scored]


MMA_VARIANTS = ({"mma_order": 1}, {"mma_order": 2}, {"mma_order": 2, "mma_promote": 2})
"""``mma-fragments`` knobs tried with each tile: both product orders with the default
promotion (the sums of four 8-steps added in ``f32``), and order 2 adding every two — on
the H200 each was the fastest for some of the layers' products."""


def mma_candidates(kernel: tile.KernelOp, arch: str, limit: int) -> list[dict[str, int]]:
    """Tensor-core schedules worth timing for a product with ``f32`` sums
    (:func:`~llmopt.passes.tile._schedule_tiles.mma_tiles` of its factors' type with K slices as
    in :func:`candidates`, chunks of 32; of ``f32`` factors each product order of
    ``mma-fragments``, whose knobs 16-bit factors do not have), the ``limit`` best by the
    cost model; none where the tensor cores do not apply (TF32 and ``m16n8k16`` need
    sm_80)."""
    found = match_contraction(kernel)
    if found is None:
        return []
    kind = tensor_core_kind(arch, found.reduce.result.type, factor_types(found))
    if kind is None:
        return []
    halves = kind in HALF_KINDS
    most = mma_accumulators(halves, len(found.reduces))
    m, n, k, _ = dims = product_dims(found)
    gpu = for_arch(arch)
    scored: list[tuple[float, dict[str, int]]] = []
    for tile_ in mma_tiles(halves, arch):
        bm, bn, tm, tn = tile_.bm, tile_.bn, tile_.tm, tile_.tn
        if (not tile_.fits(m, n, tile_periods(found), runtime_rows(found))
                or tm * tn * len(found.reduces) > most):
            continue
        bk = warpgroup_chunk(tile_, halves, arch) or 32
        if k % bk:
            continue
        for split in (1, 2, 4):
            blocks = block_count(tile_, split, dims)
            if k % split or (k // split) % bk or (split > 1 and k // split < 256):
                continue
            score = tile_cost(tile_, blocks, gpu) / split
            knobs = {"bm": bm, "bn": bn, "tm": tm, "tn": tn, "bk": bk, "split_k": split,
                     "blocked": 3}
            scored += [(score, knobs | extra) for extra in ([{}] if halves else MMA_VARIANTS)]
    scored.sort(key=lambda t: t[0])
    return [knobs for _, knobs in scored][:limit]


def one_kernel_module(kernel: tile.KernelOp, knobs: dict[str, int] | None) -> ModuleOp:
    """A module whose function passes its arguments straight to a copy of ``kernel``.

    A kernel over a runtime length (a length bucket's variant) gets a function with that
    length as the symbol ``seq``, at most the rows the kernel may run (its bucket's bound);
    each ``?`` of its buffers is ``seq``, and its runtime grid is computed again from it, as
    the program around the kernel computed it."""
    types = [b.type for b in kernel.buffers]
    block = Block(arg_types=types)
    copy = kernel.clone()
    grid = [] if kernel.grid_size is None else [_grid_again(kernel, block)]
    copy.operands = [*block.args, *grid]  # type: ignore[assignment]
    if knobs is not None:
        copy.attributes[SCHEDULE_ATTR] = DictionaryAttr(
            {k: IntegerAttr(v, i64) for k, v in knobs.items()})
    else:
        copy.attributes.pop(SCHEDULE_ATTR, None)
    block.add_ops([copy, func.ReturnOp()])
    fn = func.FuncOp("tune", (types, []), Region(block))
    found = match_contraction(kernel)
    if found is not None and found.length is not None:
        fn.arg_attrs = ArrayAttr([_symbolic_attrs(t, k, found) for k, t in enumerate(types)])
    return ModuleOp([fn])


SYMBOL = "seq"
"""The symbol of a tuned kernel's runtime length."""


def _symbolic_attrs(typ: Any, k: int, found: Contraction) -> DictionaryAttr:
    """The argument attributes of buffer ``k`` of a kernel over a runtime length (see
    :func:`one_kernel_module`)."""
    if isinstance(typ, IndexType):
        return DictionaryAttr({SYMBOL_ATTR: StringAttr(SYMBOL),
                               MAX_ATTR: IntegerAttr(found.extents[found.m], 64)})
    entries: dict[str, Any] = {INPUT_ATTR: StringAttr(f"arg{k}")}
    if isinstance(typ, MemRefType) and DYNAMIC in typ.get_shape():
        dims = sum(e == DYNAMIC for e in typ.get_shape())
        entries[DYNAMIC_ATTR] = ArrayAttr([StringAttr(SYMBOL)] * dims)
    return DictionaryAttr(entries)


def _grid_again(kernel: tile.KernelOp, block: Block) -> SSAValue:
    """``kernel``'s runtime grid computed in ``block`` (whose arguments are the kernel's
    buffers) by the index arithmetic that computed it from those buffers before the
    kernel."""
    position = {value: k for k, value in enumerate(kernel.buffers)}
    assert kernel.grid_size is not None
    expr = index_expr(kernel.grid_size,
                      lambda v: ("arg", position[v]) if v in position else None)
    if expr is None:
        raise ValueError(f"the grid of @{kernel.sym_name.data} is not index arithmetic of "
                         "its buffers")
    builder = ExprBuilder(lambda _, leaf: block.args[int(leaf[1])])  # type: ignore[arg-type]
    grid = builder.value(expr)
    block.add_ops(builder.take())
    return grid


def written_args(kernel: tile.KernelOp) -> list[int]:
    """Positions of the buffers ``kernel`` stores to."""
    args = list(kernel.body.block.args)
    return sorted({args.index(op.buffer) for op in kernel.walk()
                   if isinstance(op, loop.StoreOp) and op.buffer in args})


@dataclass
class Trial:
    """The outcome of one candidate."""

    knobs: dict[str, int] | None
    ms: float | None
    error: str | None = None


def lower_candidate(text: str, pipeline: str, arch: str) -> str:
    """Parse a one-kernel module, lower it by ``pipeline`` (its elements that name no
    architecture get ``arch``, as :func:`llmopt.compile` does) and compile its CUDA (into the
    kernel cache); returns the lowered module's text. Runs in worker processes."""
    from llmopt.api import cuda_source, lower, parse
    from llmopt.codegen.nvrtc import compile_cuda
    from llmopt.registry import with_arch

    module = lower(parse(text), with_arch(pipeline, arch))
    compile_cuda(cuda_source(module), arch=arch)
    return str(module)


def spawn_pool(jobs: int) -> concurrent.futures.Executor | None:
    """A pool of ``jobs`` fresh worker processes (spawned: the parent may hold a CUDA
    context), or ``None`` for ``jobs <= 1``."""
    if jobs <= 1:
        return None
    return concurrent.futures.ProcessPoolExecutor(
        jobs, mp_context=multiprocessing.get_context("spawn"))


def lower_all(modules: Sequence[ModuleOp], pipeline: str, arch: str, jobs: int = 1,
              pool: concurrent.futures.Executor | None = None) -> list[str | Exception]:
    """:func:`lower_candidate` for each module: on ``pool`` when given, else on a pool of
    ``jobs`` processes made for this call (in this process when ``jobs <= 1``)."""
    texts = [str(m) for m in modules]
    if pool is None and jobs > 1:
        with spawn_pool(jobs) as own:  # type: ignore[union-attr]
            return lower_all(modules, pipeline, arch, pool=own)
    results: list[str | Exception] = []
    if pool is None:
        for text in texts:
            try:
                results.append(lower_candidate(text, pipeline, arch))
            except Exception as exc:
                results.append(exc)
        return results
    futures = [pool.submit(lower_candidate, t, pipeline, arch) for t in texts]
    for f in futures:
        try:
            results.append(f.result())
        except Exception as exc:
            results.append(exc)
    return results


INDEX_HIGH = 16
"""Integer buffers of a tuned kernel hold values in ``[0, INDEX_HIGH)``: they may be the
indices of a gather fused into it (a model's first layer reads its residual from the token
embedding), whose tables have at least that many rows."""


def trial_inputs(kernel: tile.KernelOp, device: str, seed: int = 0) -> list[Any]:
    """Seeded random tensors for ``kernel``'s buffers (:func:`typed_inputs`)."""
    return typed_inputs([b.type for b in kernel.buffers], device, seed)


def typed_inputs(types: Sequence[Any], device: str, seed: int = 0) -> list[Any]:
    """Seeded random tensors of the buffer ``types``, of their element types: floats
    standard-normal, integers uniform in ``[0, INDEX_HIGH)``, booleans fair coins."""
    import torch

    from llmopt.codegen.executor import torch_dtype

    gen = torch.Generator(device=device).manual_seed(seed)
    tensors = []
    for typ in types:
        assert isinstance(typ, MemRefType)
        shape, dtype = tuple(typ.get_shape()), torch_dtype(typ.element_type)
        if dtype.is_floating_point:
            tensors.append(torch.randn(shape, device=device, generator=gen, dtype=dtype))
        elif dtype == torch.bool:
            tensors.append(torch.randint(0, 2, shape, device=device, generator=gen) == 1)
        else:
            tensors.append(torch.randint(0, INDEX_HIGH, shape, device=device, generator=gen,
                                         dtype=dtype))
    return tensors


def call_types(fn: func.FuncOp) -> tuple[list[MemRefType], list[int]]:
    """The buffer types a call of ``fn`` passes (a symbol is not passed: it follows from the
    shapes), each ``?`` at its symbol's maximum, and the positions of those arguments."""
    symbols = function_symbols(fn)
    largest = {name: symbol.max for name, symbol in symbols.items()}
    passed = [k for k in range(len(fn.body.block.args))
              if k not in {symbol.arg for symbol in symbols.values()}]
    types: list[MemRefType] = []
    for k in passed:
        typ = fn.body.block.args[k].type
        assert isinstance(typ, MemRefType)
        sizes = iter(largest[name] for name in argument_dynamic(fn, k) or ())
        types.append(MemRefType(typ.element_type,
                                [next(sizes) if e == DYNAMIC else e for e in typ.get_shape()]))
    return types, passed


def written_arguments(fn: func.FuncOp) -> list[int]:
    """Positions of ``fn``'s arguments that a kernel of it stores to."""
    args = list(fn.body.block.args)
    written: set[int] = set()
    for kern in fn.walk():
        if isinstance(kern, tile.KernelOp | loop.KernelOp):
            bound = dict(zip(kern.body.block.args, kern.buffers, strict=True))  # not the grid
            written |= {args.index(bound[op.buffer]) for op in kern.walk()
                        if isinstance(op, loop.StoreOp) and bound.get(op.buffer) in args}
    return sorted(written)


def run_trials(kernel: tile.KernelOp, trials: Sequence[dict[str, int] | None], arch: str,
               reps: int = 30, log: Callable[[str], None] = print, jobs: int = 1,
               pool: concurrent.futures.Executor | None = None) -> list[Trial]:
    """Compile (on ``pool``, or ``jobs`` processes) and time each knob set (``None``: the
    scheduling heuristics) on the GPU."""
    return time_modules(one_kernel_module(kernel, None), UNSCHEDULED,
                        [one_kernel_module(kernel, knobs) for knobs in trials],
                        SCHEDULED.format(arch=arch), trials, arch, reps, log, jobs, pool)


def time_modules(base: ModuleOp, reference_pipeline: str, modules: Sequence[ModuleOp],
                 pipeline: str, trials: Sequence[dict[str, int] | None], arch: str,
                 reps: int = 30, log: Callable[[str], None] = print, jobs: int = 1,
                 pool: concurrent.futures.Executor | None = None) -> list[Trial]:
    """Run ``base`` lowered by ``reference_pipeline`` (the reference), then each of
    ``modules`` lowered by ``pipeline`` (compiled on ``pool``, or ``jobs`` processes), on the
    same seeded inputs (the arguments of the one function they have): a candidate whose
    outputs are within ``base``'s tolerance of the reference is timed (the median of ``reps``
    CUDA-graph replays); one that fails or differs is discarded. The results carry the
    ``trials`` entry of each module."""
    import torch

    from llmopt.api import lower, parse
    from llmopt.codegen.executor import CompiledProgram
    from llmopt.numerics import tolerance

    (fn,) = [op for op in base.walk() if isinstance(op, func.FuncOp)]
    types, slots = call_types(fn)
    inputs = typed_inputs(types, "cuda")
    outs = [slots.index(k) for k in written_arguments(fn)]

    def run(module: ModuleOp, graph: bool) -> tuple[list[torch.Tensor], float | None]:
        args = [t.clone() for t in inputs]
        program = CompiledProgram(module, check=False, cuda_graph=graph)
        program(*args)
        torch.cuda.synchronize()
        result = [args[i].clone() for i in outs]
        if not graph:
            return result, None
        static = program.static_inputs  # replays without copying the inputs in
        for _ in range(3):
            program(*static)
        times = []
        for _ in range(reps):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            program(*static)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return result, sorted(times)[len(times) // 2]

    tol = tolerance(base)
    reference, _ = run(lower(base.clone(), reference_pipeline), False)
    lowered = lower_all(modules, pipeline, arch, jobs, pool)
    results = []
    for knobs, text in zip(trials, lowered, strict=True):
        try:
            if isinstance(text, Exception):
                raise text
            got, ms = run(parse(text), True)
            err = max(float((g - r).abs().max() / r.abs().max().clamp_min(1e-30))
                      for g, r in zip(got, reference, strict=True))
            if not err <= tol:
                results.append(Trial(knobs, None, f"wrong result: rel err {err:.2e} > {tol:.2e}"))
            else:
                results.append(Trial(knobs, ms))
        except Exception as exc:  # a crashing candidate is discarded, never kept
            results.append(Trial(knobs, None, f"{type(exc).__name__}: {str(exc)[:200]}"))
        trial = results[-1]
        log(f"  {knobs or 'heuristic'}: " + (f"{trial.ms:.4f} ms" if trial.ms is not None
                                               else f"discarded ({trial.error})"))
    return results


# --- the cache -------------------------------------------------------------------------------


def cache_path() -> Path:
    """The user's tuning cache, which ``llmopt tune`` writes: ``$LLMOPT_TUNE_CACHE``, else
    ``~/.cache/llmopt/tuned.json``."""
    env = os.environ.get("LLMOPT_TUNE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "llmopt" / "tuned.json"


def user_cache(user: bool) -> Path | None:
    """The tuning cache ``apply-tuned`` reads (before the committed table), if any: the
    :func:`cache_path` when ``user`` asks for it or ``$LLMOPT_TUNE_CACHE`` names it; else
    none, so that what was tuned in a home directory never changes a program unasked."""
    return cache_path() if user or os.environ.get("LLMOPT_TUNE_CACHE") else None


def load_table(path: Path) -> dict[str, Any]:
    """A tuning table (empty when missing or unreadable)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def table_arches(arch: str) -> tuple[str, ...]:
    """The architectures whose tuned entries hold for ``arch``: itself, then its base (a
    variant such as ``sm_90a`` runs on the GPUs its base's entries were measured on)."""
    return tuple(dict.fromkeys((arch, base_arch(arch))))


def committed_tables(arch: str) -> list[dict[str, Any]]:
    """The tables committed with llmopt for ``arch`` (:func:`table_arches`), in that order."""
    return [load_table(TABLE_DIR / f"{a}.json") for a in table_arches(arch)]


def save_table(path: Path, table: dict[str, Any]) -> None:
    """Write ``table`` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def merge_entries(table: dict[str, Any], entries: dict[str, Any]) -> None:
    """Put :func:`tune_module`'s ``entries`` into ``table``: an entry of ``None`` (the
    heuristics were fastest) removes the kernel's earlier entry, which ``apply-tuned`` would
    otherwise go on applying."""
    for key, entry in entries.items():
        if entry is None:
            table.pop(key, None)
        else:
            table[key] = entry


def record_entries(path: Path, table: dict[str, Any], entries: dict[str, Any]) -> None:
    """Merge :func:`tune_module`'s ``entries`` into ``table`` and write it to ``path``."""
    merge_entries(table, entries)
    save_table(path, table)


def tables_fingerprint() -> str:
    """A hash of the tuning tables ``apply-tuned`` may read (the user's cache and the
    committed tables): part of the compile-cache key of lowered programs, so tuning anew
    recompiles."""
    digest = hashlib.sha256()
    for path in [cache_path(), *sorted(TABLE_DIR.glob("*.json"))]:
        with contextlib.suppress(OSError):
            digest.update(str(path).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def entry_key(key: str, gpu: str, nvrtc: str) -> str:
    """A cache entry's key: structural hash, GPU, NVRTC version."""
    return f"{key}|{gpu}|nvrtc-{nvrtc}"


def lookup(key: str, arch: str | Sequence[str],
           tables: Sequence[dict[str, Any]]) -> dict[str, int] | None:
    """The tuned knobs of the kernel with structural hash ``key`` for ``arch`` (or for any of
    several architectures: a variant and its base): the first table with a valid entry wins
    (an entry of a hand-edited or damaged table whose knobs are not integers, or out of
    range (:func:`llmopt.options.knob_problems`), is skipped)."""
    from llmopt.options import knob_problems

    arches = {arch} if isinstance(arch, str) else set(arch)
    for table in tables:
        for name, entry in sorted(table.items()):
            if not isinstance(entry, dict) or name.split("|")[0] != key:
                continue
            knobs = entry.get("knobs")
            if entry.get("arch") not in arches or not isinstance(knobs, dict):
                continue
            try:
                values = {k: int(v) for k, v in knobs.items()}
            except (TypeError, ValueError):
                continue
            if not knob_problems(values):
                return values
    return None


REFINEMENTS: tuple[dict[str, int], ...] = ({"min_blocks": 2}, {"kv_order": 2})
"""Knobs tried, one at a time, on top of the fastest candidate (:func:`refine`):
``min_blocks = 2`` asks NVRTC for registers enough for two blocks a multiprocessor
(``__launch_bounds__(threads, 2)``): faster for some products in their heuristic tiles,
slower for others, whose accumulators spill. ``kv_order = 2`` runs a fragment's elements
innermost (:class:`~llmopt.passes.tile.vector_fragments.VectorFragments`): faster for some
of TinyLlama's layer kernels, slower for Qwen2.5-7B's 8×7 tiles. Choices per kernel, hence
measured rather than predicted (timings: ``bench/results/schedule-constants.md``,
``REFINEMENTS``)."""


def refine(kernel: tile.KernelOp, best: Trial, arch: str, reps: int,
           log: Callable[[str], None] = print,
           pool: concurrent.futures.Executor | None = None) -> Trial:
    """The faster of ``best`` and ``best`` with each of :data:`REFINEMENTS` added, all timed
    again in one batch (so that they compare under the same conditions)."""
    assert best.knobs is not None
    extra = [best.knobs | r for r in REFINEMENTS if not r.items() <= best.knobs.items()
             and not ("kv_order" in r and best.knobs.get("blocked") == 3)]  # no fragments
    if not extra:
        return best
    try:
        trials = run_trials(kernel, [best.knobs, *extra], arch, reps, log, pool=pool)
    except Exception as exc:  # the reference failed this time: keep what was measured
        log(f"  not refined: {type(exc).__name__}: {str(exc)[:300]}")
        return best
    timed = [t for t in trials if t.ms is not None]
    return min(timed, key=lambda t: t.ms) if timed else best  # type: ignore[arg-type, return-value]


def tune_module(module: ModuleOp, arch: str, reps: int, limit: int,
                log: Callable[[str], None] = print, jobs: int = 1,
                save: Callable[[dict[str, Any]], None] | None = None,
                recorded: dict[str, Any] | None = None) -> dict[str, Any]:
    """Tune every distinct matrix-product kernel of ``module`` (at Tile IR, before the
    scheduling passes); returns the new table entries (also handed to ``save`` after each
    kernel, so an interrupted run keeps what it measured), ``None`` for a kernel whose
    heuristic schedule was fastest (see :func:`merge_entries`). A kernel's knobs in the
    ``recorded`` table (the one the entries will replace) are timed again beside the new
    candidates, so a run with a smaller ``limit`` cannot replace them with slower ones."""
    import torch

    from llmopt.codegen.nvrtc import nvrtc_version

    gpu = torch.cuda.get_device_name()
    nvrtc = ".".join(map(str, nvrtc_version()))
    seen: set[str] = set()
    entries: dict[str, Any] = {}
    pool: concurrent.futures.Executor | None = None
    with contextlib.ExitStack() as stack:
        for kernel in [op for op in module.walk() if isinstance(op, tile.KernelOp)]:
            if match_contraction(kernel) is None:
                continue
            key = schedule_key(kernel)
            if key in seen:
                continue
            seen.add(key)
            shape = describe(kernel)
            cands = (list(candidates(kernel, arch))[:limit]
                     + mma_candidates(kernel, arch, 2 * limit))
            before = lookup(key, arch, [recorded]) if recorded else None
            if before is not None and before not in cands:
                cands.insert(0, before)
            log(f"{kernel.sym_name.data} [{shape}] {key}: {len(cands)} candidates")
            began = time.perf_counter()
            if pool is None and jobs > 1:  # one pool for every kernel, not one per kernel
                pool = stack.enter_context(spawn_pool(jobs))  # type: ignore[arg-type]
            try:
                trials = run_trials(kernel, [None, *cands], arch, reps, log, pool=pool)
            except Exception as exc:  # the unscheduled reference failed: nothing to check
                log(f"  skipped: the unscheduled reference failed ({type(exc).__name__}: "
                    f"{str(exc)[:300]})")
                continue
            good = [t for t in trials[1:] if t.ms is not None]
            if not good:
                log("  no candidate survived; keeping the heuristic" if cands
                    else "  no candidate fits this shape; keeping the heuristic")
                continue
            best = min(good, key=lambda t: t.ms)  # type: ignore[arg-type, return-value]
            best = refine(kernel, best, arch, reps, log, pool)
            entries[entry_key(key, gpu, nvrtc)] = table_entry(trials, best, arch, gpu, nvrtc,
                                                              shape, began, log)
            if save is not None:
                save(entries)
    return entries


def table_entry(trials: Sequence[Trial], best: Trial, arch: str, gpu: str, nvrtc: str,
                shape: str, began: float, log: Callable[[str], None]) -> dict[str, Any] | None:
    """The table entry of a tuned kernel whose fastest candidate is ``best``: ``None`` when
    the heuristics' schedule (``trials[0]``) was at least as fast (see
    :func:`merge_entries`)."""
    heuristic = trials[0].ms
    if heuristic is not None and heuristic <= best.ms:  # type: ignore[operator]
        log(f"  the heuristic's schedule is fastest ({heuristic:.4f} ms); no entry")
        return None
    log(f"  best {best.knobs}: {best.ms:.4f} ms (heuristic {heuristic} ms)")
    return {"arch": arch, "gpu": gpu, "nvrtc": nvrtc, "shape": shape, "knobs": best.knobs,
            "ms": best.ms, "heuristic_ms": heuristic,
            "discarded": sum(t.ms is None for t in trials[1:]),
            "seconds": round(time.perf_counter() - began, 1)}
