"""``llmopt tune`` for attention: the block sizes of ``flash-attention``, measured.

``flash-attention`` builds its kernel from the four Loop-IR kernels of attention (a
*chain*, :func:`~llmopt.passes.tile._attention_chain.match_chain`), before the Tile-IR tuner sees
any kernel; so attention is tuned at Loop IR. For every distinct chain of a program,
identified by its **structural hash** (:func:`chain_key`: the chain's kernels, in order, up
to names and locations), the chain alone becomes a program (:func:`chain_module`: its
outside buffers the function's arguments), and each candidate — ``bm``, ``bn``, ``warps``
and ``stages`` (:func:`attention_candidates`), written as the ``llmopt.schedule`` of the
chain's scores kernel, which ``flash-attention`` reads — is lowered by ``flash-attention``
and the Tile-IR schedule, compiled and timed against the unfused kernels' result, as
:func:`~llmopt.tools.tune.time_modules` does for the products. The fastest correct
candidate, when it beats the heuristics, goes into the same tuning tables (the user's
cache, or ``--table``'s committed one), keyed on the chain's hash, the GPU and the NVRTC
version; ``flash-attention`` looks it up there (its option ``tuned = 0`` does not).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import itertools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp, i64
from xdsl.ir import Block, Region, SSAValue

from llmopt.dialects import loop
from llmopt.passes.tile._attention_chain import Chain, match_chain
from llmopt.passes.tile._schedule import SCHEDULE_ATTR
from llmopt.passes.tile._schedule_attention import AttentionBlocks, choose_attention_blocks
from llmopt.target import for_arch as limits
from llmopt.tools.tune import (
    SCHEDULED,
    Trial,
    cache_path,
    committed_tables,
    entry_key,
    load_table,
    lookup,
    spawn_pool,
    table_entry,
    time_modules,
)

FLASH = "flash-attention{{tuned=0 arch={arch}}},loop-to-tile{{arch={arch}}}," + SCHEDULED
"""How a candidate is lowered: its knobs are on the scores kernel, no table is read."""
UNFUSED = "loop-to-tile,tile-to-kernel,canonicalize,cse,kernel-to-cuda"
"""How the reference is lowered: attention's kernels as they are, unscheduled."""
BLOCK_ROWS = (64, 32, 16, 128)
BLOCK_KEYS = (64, 32, 128)
WARPS = (8, 4)
STAGES = (2, 3)
"""The knob values :func:`attention_candidates` combines."""


def tuning_tables(arch: str, user: bool = True) -> list[dict[str, Any]]:
    """The tables ``flash-attention`` and ``apply-tuned`` read, first match winning: the
    user's tuning cache (unless ``user`` is false), then the committed tables of ``arch``
    (:func:`llmopt.tools.tune.committed_tables`)."""
    tables = [load_table(cache_path())] if user else []
    return [*tables, *committed_tables(arch)]


def attention_chains(module: ModuleOp) -> list[Chain]:
    """The attention chains of a Loop-IR ``module``, in program order."""
    chains: list[Chain] = []
    for kernel in module.walk():
        if isinstance(kernel, loop.KernelOp):
            chain = match_chain(kernel)
            if chain is not None:
                chains.append(chain)
    return chains


def chain_key(chain: Chain) -> str:
    """The structural hash of ``chain``: its kernels' ops, types and properties, the bound
    buffers numbered by first appearance, names, locations and schedules left out — equal
    for every layer's attention of one model and length."""
    from llmopt.passes.kernel.dedup_kernels import _Keyer

    keyer = _Keyer()
    parts = []
    for kernel in chain.kernels:
        for value in kernel.operands:
            if value not in keyer.values:
                keyer.define(value)
        saved = kernel.attributes.pop(SCHEDULE_ATTR, None)
        try:
            parts.append(keyer.op(kernel, skip=frozenset({"sym_name"})))
        finally:
            if saved is not None:
                kernel.attributes[SCHEDULE_ATTR] = saved
    return "attention-" + hashlib.sha256(repr(parts).encode()).hexdigest()[:20]


def describe(chain: Chain) -> str:
    """``rows x queries x keys x head_dim`` (and ``causal``) of a chain."""
    rows, queries, keys, head_dim = chain.dims
    return f"{rows}x{queries}x{keys}x{head_dim}" + (" causal" if chain.exp.causal else "")


def chain_module(chain: Chain, knobs: dict[str, int] | None) -> ModuleOp:
    """A module whose function passes its arguments (the buffers the chain shares with the
    rest of the program) to copies of the chain's kernels, with the chain's own buffers
    allocated inside; ``knobs`` become the scores kernel's ``llmopt.schedule``."""
    outside: list[SSAValue] = []
    for kernel in chain.kernels:
        outside += [b for b in kernel.buffers if b not in chain.internal and b not in outside]
    block = Block(arg_types=[b.type for b in outside])
    mapping: dict[SSAValue, SSAValue] = dict(zip(outside, block.args, strict=True))
    for buffer in chain.internal:
        alloc = buffer.owner.clone()  # type: ignore[union-attr]
        block.add_op(alloc)
        mapping[buffer] = alloc.results[0]
    for kernel in chain.kernels:
        copy = kernel.clone(value_mapper=mapping)
        copy.attributes.pop(SCHEDULE_ATTR, None)
        if knobs is not None and kernel is chain.scores.kernel:
            copy.attributes[SCHEDULE_ATTR] = DictionaryAttr(
                {k: IntegerAttr(v, i64) for k, v in knobs.items()})
        block.add_op(copy)
    block.add_op(func.ReturnOp())
    fn = func.FuncOp("tune", ([b.type for b in outside], []), Region(block))
    return ModuleOp([fn])


def attention_candidates(chain: Chain, arch: str, limit: int) -> list[dict[str, int]]:
    """Knob sets worth timing for ``chain``, at most ``limit``: the combinations of
    :data:`BLOCK_ROWS`, :data:`BLOCK_KEYS`, :data:`WARPS` (and the heuristics' warps) and
    :data:`STAGES` that ``flash-attention`` can build
    (:func:`~llmopt.passes.tile._schedule_attention.choose_attention_blocks`; more query rows
    a block than the heuristics' only where every multiprocessor still gets a block),
    nearest the heuristics' blocks first, two slots before three."""
    rows, queries, keys, head_dim = chain.dims
    sms = limits(arch).sms
    heuristic = choose_attention_blocks(rows, queries, keys, head_dim, sms)
    if heuristic is None:
        return []

    def distance(b: AttentionBlocks) -> float:
        return (abs(math.log2(b.bm / heuristic.bm)) + abs(math.log2(b.bn / heuristic.bn))
                + (b.warps != heuristic.warps))

    scored: list[tuple[float, int, dict[str, int]]] = []
    warp_counts = sorted({*WARPS, heuristic.warps}, reverse=True)
    for bm, bn, warps in itertools.product(BLOCK_ROWS, BLOCK_KEYS, warp_counts):
        blocks = choose_attention_blocks(rows, queries, keys, head_dim, sms, bm, bn, warps)
        if blocks is None or rows * -(-queries // bm) < sms and bm > heuristic.bm:
            continue
        for stages in STAGES:
            knobs = {"bm": bm, "bn": bn, "warps": warps, "stages": stages}
            scored.append((distance(blocks), stages, knobs))
    scored.sort(key=lambda t: (t[0], t[1]))
    return [knobs for *_, knobs in scored][:limit]


def run_attention_trials(chain: Chain, trials: Sequence[dict[str, int] | None], arch: str,
                         reps: int = 30, log: Callable[[str], None] = print, jobs: int = 1,
                         pool: concurrent.futures.Executor | None = None) -> list[Trial]:
    """Compile and time each knob set (``None``: the heuristics) of ``chain`` on the GPU,
    against the unfused kernels' result."""
    return time_modules(chain_module(chain, None), UNFUSED,
                        [chain_module(chain, knobs) for knobs in trials],
                        FLASH.format(arch=arch), trials, arch, reps, log, jobs, pool)


def tune_attention(module: ModuleOp, arch: str, reps: int, limit: int,
                   log: Callable[[str], None] = print, jobs: int = 1,
                   save: Callable[[dict[str, Any]], None] | None = None,
                   recorded: dict[str, Any] | None = None) -> dict[str, Any]:
    """Tune every distinct attention chain of the Loop-IR ``module``; returns the new table
    entries (``None`` where the heuristics were fastest), also handed to ``save`` after each
    chain. Knobs recorded for a chain in ``recorded`` are timed again beside the new
    candidates (as :func:`~llmopt.tools.tune.tune_module` does)."""
    import torch

    from llmopt.codegen.nvrtc import nvrtc_version

    gpu = torch.cuda.get_device_name()
    nvrtc = ".".join(map(str, nvrtc_version()))
    entries: dict[str, Any] = {}
    seen: set[str] = set()
    pool: concurrent.futures.Executor | None = None
    with contextlib.ExitStack() as stack:
        for chain in attention_chains(module):
            key = chain_key(chain)
            if key in seen:
                continue
            seen.add(key)
            cands = attention_candidates(chain, arch, limit)
            before = lookup(key, arch, [recorded]) if recorded else None
            if before is not None and before not in cands:
                cands.insert(0, before)
            log(f"attention [{describe(chain)}] {key}: {len(cands)} candidates")
            began = time.perf_counter()
            if pool is None and jobs > 1:
                pool = stack.enter_context(spawn_pool(jobs))  # type: ignore[arg-type]
            try:
                trials = run_attention_trials(chain, [None, *cands], arch, reps, log,
                                              pool=pool)
            except Exception as exc:  # the unfused reference failed: nothing to check
                log(f"  skipped: the unfused reference failed ({type(exc).__name__}: "
                    f"{str(exc)[:300]})")
                continue
            good = [t for t in trials[1:] if t.ms is not None]
            if not good:
                log("  no candidate survived; keeping the heuristic")
                continue
            best = min(good, key=lambda t: t.ms)  # type: ignore[arg-type, return-value]
            entries[entry_key(key, gpu, nvrtc)] = table_entry(
                trials, best, arch, gpu, nvrtc, describe(chain), began, log)
            if save is not None:
                save(entries)
    return entries
