"""``flash-attention``: attention's kernels become one, products left for the schedule passes.

**Matches** the four ``loop.kernel`` ops (three without a mask) that ``fuse-kernels`` and
``hoist-reduce-factors`` leave of ``softmax(mask(scale · Q·Kᵀ)) · V``
(:func:`~llmopt.passes.tile._attention_chain.match_chain`): scores ``S = Q·Kᵀ``, the row maximum
of ``g(S)`` (``g``: scale, mask …) and ``E = exp(g(S) - max)``, the row sums ``l``, and
``O = h(E·V, l)``. Head-dimension extents must be multiples of 16; query and key extents may
be anything.

**Produces** one ``tile.kernel`` of ``32·W`` threads (``W`` warps, 8 for the big blocks)
whose ``tile.forall over blocks`` takes ``(batch…, query block)`` — causal: ``(query block,
batch…)`` with the last query blocks, which visit the most key blocks, dealt out first. A
block owns ``bm`` query rows::

    qs ← Q rows (clamped loads)                          // once
    scf.for %kb = 0 to n_kb (causal: to the diagonal's block) {
      ks ← K rows, vs ← V rows                           // fills (llmopt.role = "stage")
      s = 0; scf.for %kk = 0 to dk { s[…] += qs[row, kk] · ks[col, kk] }
      s ← g(s), keys past the end masked to -inf          // "scores", in registers
      row maxima m, p = exp(s - m) into P, row sums l     // online softmax
      acc *= exp(m_old - m); scf.for %jj = 0 to bn { acc[…] += P[row, jj] · vs[jj, col] }
    }
    O ← h(acc, l), rows inside the queries only           // "epilogue"

Both products are register tiles in ``register-tile``'s tensor-core thread layout (warps
``(wi, wj)``, lanes ``(g, t)``, each thread's outputs ``(i, rh, j, rl)``; see
:func:`~llmopt.passes.tile.register_tile.thread_layout`) over the ``bm × bn`` score tile and
the ``bm × D`` output tile, each chunk loop an ``scf.for`` around one forall of updates
``acc += a · b`` reading two shared tiles — exactly what ``mma-fragments`` turns into
three-term TF32 ``mma.sync`` products of ``f32`` accuracy when the forall is marked
``llmopt.layout = "mma"`` (on sm_80 or newer; elsewhere the same threads run ``f32``
multiply-adds). The loop over key blocks starts with the fills of ``ks`` and ``vs``, then
reads them only: ``async-copy`` fills them with ``cp.async``, chunks ahead (the causal
loop's bound is a value: its counters are carried). ``pad-shared`` pads ``qs``, ``ks`` and
``ps`` by 4 words (rows ≡ 4 mod 32: the fragments' 8 rows × 4 columns in distinct banks) and
``vs`` by 8 (read transposed: 4 rows × 8 columns). The row statistics
(:mod:`~llmopt.passes.tile._register_softmax`) stay in the registers of the threads that
hold the scores: each thread takes the maximum and the sum of its columns of each of its
rows, the ``4·WJ`` threads of a row combine theirs through a small shared tile of partials
(two barriers a key block), every thread keeps its rows' running maximum and sum, and ``P``
goes to a shared tile ``P·V`` reads (``ps`` in ``f32``; see *16-bit operands*). This needs
the output product to give every thread the rows it has in the score product (the same
warps, the same rows a warp) and a row to have at most 16 partials (a decode step's 16 rows
over 8 warps would have 32); where it does not, or with ``register_stats=false``, the masked
scores go to the shared ``ps`` and the statistics are taken from it, ``32·W / bm`` threads a
row in slices combined through shared memory
(:mod:`~llmopt.passes.tile._online_softmax`), with five barriers. The row maximum of a row whose
scores are all ``-inf`` so far counts as 0 in the exponents, so a fully masked block adds
nothing instead of making ``NaN``. A last query block that overhangs the queries reads
``Q`` clamped and stores only rows inside (an ``scf.if``); a last key block that overhangs
the keys reads ``K`` and ``V`` clamped and masks its extra keys (an ``arith.select``). The
loads of ``g`` (an explicit mask, boolean or additive, read at the tile's query and key) are
clamped alike: in the extra rows and keys they read the edge, whose values are then
discarded (keys masked after ``g``, rows stored nowhere).

**Whole rows a warp** (``row_warps``, default on, for 16-bit operands on the tensor cores
when the keys are not split, where the statistics stay in registers and ``bm`` is a multiple of
``16·W``; unless the warps are set, a block of a multiple of :data:`ROW_BLOCK` rows gets one
warp per 16 rows, at most 8): both products take one warp column (warps ``(W, 1)``), so a warp
owns whole rows of the scores and of the output. A row's partials are then the four lanes
of a quad, combined by shuffles (``tile.lane_reduce … lanes 4``) in one forall with no
shared partials and no barrier; with 16-bit operands ``mma-fragments`` reads ``P·V``'s
``P`` from the registers of the threads that rounded it
(:mod:`~llmopt.passes.tile._mma_forward`) instead of through ``pb``, so a key block waits at
one barrier, its fills'. Four warps of 64 rows are also one warpgroup's ``m64`` accumulator:
on sm_90a ``wgmma-fragments`` takes ``Q·Kᵀ`` (heads of 64, and of 128 over two swizzle
atoms), and leaves ``P·V``, whose ``P`` comes from registers, to ``mma-fragments``.

**16-bit operands** (``Q``, ``K`` and ``V`` all ``bf16`` or all ``f16``, widened by
``arith.extf`` inside the products' ``f32`` sums) with the tensor cores: ``qs``, ``ks`` and
``vs`` stay 16-bit — half the shared memory and the fills' bytes, ``cp.async`` moving eight
halves at a time — and the products load them widened, the form ``mma-fragments`` turns into
``ldmatrix`` and ``m16n8k16`` (``V``, read ``[key, d]``, with ``ldmatrix.trans``). The
scores stay ``f32`` in ``ps``; the exp step (``exp2(s · log2 e - m · log2 e)``) rounds ``p``
once into a 16-bit ``pb``, which is ``P·V``'s ``P``, as PyTorch's flash kernels round ``P``
for their second product; the row sums, the softmax's denominators, add ``p`` before the
rounding when the statistics are in registers (as PyTorch's do), ``pb`` itself when they
are shared. Without the tensor cores (``tensor_cores=false``, or an architecture without
``mma.sync``) the tiles are
``f32``, widened as they are staged.

**Why** the four kernels write and read the ``heads × seq × seq`` scores and probabilities
through global memory twice and launch four times; here they stay in shared memory, the
causal half of the key blocks is skipped rather than computed and masked, and the two
products — most of the arithmetic — run on the tensor cores while the next key block's
``K`` and ``V`` are in flight. Sums are taken in a different order (per key block,
rescaled, partly on the tensor cores), so results round differently: within the same
tolerance as the unfused kernels, not bit for bit.

**Runtime lengths** (a symbolic length): the queries and the keys may run to runtime bounds
(the kernels' length parameter; batch and head extents stay static). The blocks are chosen
for the maximum; the forall over blocks runs ``ceildiv(%n, bm)`` query blocks (the grid is
computed from the length before the launch, ``grid [%g max G, 1, 1]``), the loop over key
blocks runs to ``ceildiv(%n, bn)`` (causal: to the diagonal's block, at most that), and every
last block counts as ragged: ``Q``, ``K``, ``V`` clamped along the length, keys from ``%n``
on masked, rows from ``%n`` on stored nowhere.

**Split keys** (flash-decoding, :mod:`~llmopt.passes.tile._split_keys`): a chain without a
causal mask and with a static number of queries whose blocks do not fill the GPU — a
decode step, one query a head over a cache — gets a last grid dimension over ``S`` splits
of its key blocks (:func:`~llmopt.passes.tile._split_keys.choose_splits`, option
``splits``); each block stores its unnormalised accumulators and row statistics, and a
merge ``loop.kernel`` after it — the output kernel with its sum over the keys re-expressed
over the splits, weighted by ``exp(m_s - max_s m_s)`` — finishes the output.
``match_exp`` takes a decode step's form: with one query the row maximum stands outside
the query loop of extent 1.

**Copies in front** (attention written out, as Hugging Face's eager attention is: key/value
heads repeated by ``expand`` + ``reshape``, ``K`` transposed for ``Q @ Kᵀ``): a copy kernel
that alone writes a buffer the matched chain's scores or output alone read is inlined
(:mod:`~llmopt.passes.tile._attention_copies`), so the flash kernel reads ``K`` and ``V``
themselves and the copies' launches go.

**Grouped heads** (:mod:`~llmopt.passes.tile._group_heads`): with one query a head and
``G`` query heads reading each key/value head (grouped-query attention), a block's rows are
the ``G`` query heads of one key/value head instead of the queries of one head: each key
block is read once for the group and the grid has ``G`` times fewer head blocks (so more
splits of the keys).

Options: ``bm`` (query rows per block, a multiple of 16), ``bn`` (keys per block, a
multiple of 16), ``warps``, ``stages`` (written into the kernel's schedule for
``async-copy``), ``tensor_cores`` (mark the products for ``mma-fragments`` where ``arch`` has
TF32 ``mma.sync``; default on), ``splits`` (of the keys; 0 = chosen, 1 = none),
``group_heads`` (default on), ``register_stats`` (default on: the row statistics in
registers where the layouts allow), ``row_warps`` (default on: whole rows a warp, above),
``min_blocks`` (blocks a multiprocessor the kernel's registers are capped for,
``__launch_bounds__(threads, min_blocks)``; 0 = :data:`MIN_BLOCKS`, 1 = no cap),
``tuned`` (0: read no tuning table), ``arch``. Like every schedule knob,
``bm``, ``bn``, ``warps``, ``stages``, ``splits`` and ``min_blocks`` come from the pass
option when set, else from an ``llmopt.schedule`` on the chain's scores kernel (an IR file's, or a
candidate's of ``llmopt tune``), else from the tuning tables ``apply-tuned`` reads, keyed on
the chain's structural hash (:mod:`llmopt.tools.tune_attention`), else from the heuristics,
:func:`~llmopt.passes.tile._schedule_attention.choose_attention_blocks` (0 = unset). The kernel's
schedule also asks ``async-copy`` to carry its counters (``carry = 1``), as a causal loop
must: one form of the loop over key blocks, with or without a mask.

**Two blocks a multiprocessor.** The scheduling passes keep a block's shared memory within
half of what a multiprocessor has (``async-copy`` sizes the fills' slots to that), so that
two blocks fit; ``min_blocks = 2`` caps the registers so that they fit too. A block waits
at barriers every key block, and a second block on the multiprocessor works meanwhile; left
alone, NVRTC gives a 16-bit kernel with pipelined fills and shared statistics more than 128
registers a thread, and 256-thread blocks then run one at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp, i64
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from llmopt.dialects import loop, tile
from llmopt.passes.tile._attention_chain import Chain, match_chain
from llmopt.passes.tile._attention_copies import inline_operand_copies
from llmopt.passes.tile._flash_layout import half_operands
from llmopt.passes.tile._flash_steps import FlashKernel
from llmopt.passes.tile._group_heads import match_groups
from llmopt.passes.tile._schedule import SCHEDULE_ATTR, kernel_knobs
from llmopt.passes.tile._schedule_attention import choose_attention_blocks, shared_bytes
from llmopt.passes.tile._schedule_tiles import has_tensor_cores
from llmopt.passes.tile._split_keys import choose_splits, merge_kernel, splits_keys
from llmopt.target import for_arch as limits

MAX_GROUP = 16
"""The most query heads grouped into one block's rows (a block has at least 16 rows)."""
MIN_BLOCKS = 2
"""Blocks a multiprocessor the flash kernel's registers are capped for, by default."""
RESCALE_MARGIN = -1
"""``rescale_margin`` by default: every row's output is rescaled each key block. With ``N ≥
0`` a row's output is rescaled only when its factor is not 1, and its running maximum
moves only when a key block's exceeds it by more than ``N`` powers of two (``p`` stays
below ``2^N``; 8 is the margin of published flash kernels). Off: timed, it was slower
(``docs/performance.md``, *Attention's softmax, a second pass*)."""
ROW_BLOCK = 64
"""Query blocks of a multiple of this many rows get a warp per 16 whole rows (``row_warps``,
when the warps are not set): 64 rows, four warps — one warpgroup's ``m64`` accumulator."""


def _runtime_batch(chain: Chain) -> bool:
    """Whether a batch or head extent of ``chain`` is a runtime value (not fused: only the
    queries and keys may run to the length)."""
    return any(lp.bound is not None for lp in chain.exp.ivs[:-1])


@dataclass(frozen=True)
class FlashAttention(ModulePass):
    """Fuse attention into one flash kernel with an online softmax (see the module
    docstring). Options: ``bm``, ``bn``, ``warps``, ``splits`` (0 = chosen from the shape),
    ``group_heads``, ``register_stats``, ``row_warps``, ``tensor_cores``, ``stages``,
    ``min_blocks`` (0 = :data:`MIN_BLOCKS`, 1 = no cap), ``rescale_margin`` (-1: rescale
    every row each key block; ``N ≥ 0``: only rows whose maximum moved, and it moves only
    when exceeded by more than ``N`` powers of two; :data:`RESCALE_MARGIN`), ``tuned`` (0:
    ignore the tuning tables), ``arch``."""

    name = "flash-attention"

    bm: int = 0
    bn: int = 0
    warps: int = 0
    tensor_cores: bool = True
    stages: int = 0
    splits: int = 0
    group_heads: bool = True
    register_stats: bool = True
    row_warps: bool = True
    min_blocks: int = 0
    rescale_margin: int = RESCALE_MARGIN
    tuned: int = 1
    arch: str = "sm_90"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        gpu = limits(self.arch)
        tables: list[dict[str, Any]] | None = None
        for first in [k for k in op.walk() if isinstance(k, loop.KernelOp)]:
            if first.parent is None:
                continue  # erased with an earlier chain
            chain = match_chain(first)
            if chain is not None and inline_operand_copies(chain):
                chain = match_chain(first)  # K and V now read as sdpa reads them
            if chain is None or _runtime_batch(chain):
                continue
            knobs = kernel_knobs(chain.scores.kernel)
            if not knobs and self.tuned:
                from llmopt.tools.tune import lookup, table_arches
                from llmopt.tools.tune_attention import chain_key, tuning_tables

                tables = tuning_tables(self.arch) if tables is None else tables
                knobs = lookup(chain_key(chain), table_arches(self.arch), tables) or {}

            def setting(option: int, name: str, knobs: dict[str, int] = knobs) -> int:
                return option or knobs.get(name, 0)

            groups = match_groups(chain, MAX_GROUP) if self.group_heads else None
            rows, queries, keys, head_dim = chain.dims
            if groups is not None:  # the rows of a block are the heads of a group
                rows, queries = rows // groups.size, groups.size
            static_queries = chain.exp.ivs[-1].bound is None
            # Counted with the smallest query block (16 rows): the most blocks any bm gives.
            split_keys = splits_keys(rows * -(-queries // 16), gpu.sms, chain.exp.causal,
                                     static_queries)
            blocks = choose_attention_blocks(rows, queries, keys, head_dim, gpu.sms,
                                             setting(self.bm, "bm"), setting(self.bn, "bn"),
                                             setting(self.warps, "warps"),
                                             chain.exp.max.bound is not None, split_keys)
            if blocks is None or (groups is not None and groups.size > blocks.bm):
                continue
            anchor = chain.output.kernel
            mma = self.tensor_cores and has_tensor_cores(self.arch, chain.scores.reduce
                                                         .result.type)
            n_qb = -(-queries // blocks.bm)
            splits = choose_splits(rows * n_qb, -(-keys // blocks.bn), gpu.sms,
                                   chain.exp.causal, static_queries,
                                   setting(self.splits, "splits"))
            row_warps = (self.row_warps and mma and half_operands(chain) is not None
                         and splits == 1)
            if row_warps and not setting(self.warps, "warps") and blocks.bm % ROW_BLOCK == 0:
                blocks = replace(blocks, warps=min(blocks.bm // 16, 8))
            flash = FlashKernel(chain, blocks, anchor.sym_name.data, mma, splits, groups,
                                self.register_stats, row_warps, self.rescale_margin)
            new = flash.build()
            if shared_bytes(new) > gpu.max_smem:
                continue
            after = [] if flash.partials is None else [merge_kernel(chain, flash.partials,
                                                                    splits)]
            stages = setting(self.stages, "stages")
            schedule = {"carry": 1} | ({"stages": stages} if stages else {})
            min_blocks = setting(self.min_blocks, "min_blocks") or MIN_BLOCKS
            if min_blocks > 1:
                schedule["min_blocks"] = min_blocks
            new.attributes[SCHEDULE_ATTR] = DictionaryAttr(
                {k: IntegerAttr(v, i64) for k, v in schedule.items()})
            replace_chain(chain, new, flash.host_ops, after)


def replace_chain(chain: Chain, new: tile.KernelOp, host_ops: Sequence[Operation] = (),
                  after: Sequence[Operation] = ()) -> None:
    """Put ``new`` (after ``host_ops``, its runtime grid and buffers; before ``after``, the
    merge of split keys) where the chain's output kernel was; erase the chain's kernels and
    the buffers only they used."""
    anchor = chain.output.kernel
    for inner in new.walk():
        inner.location = anchor.location
    rewriter = Rewriter()
    rewriter.insert_op([*host_ops, new, *after], InsertPoint.before(anchor))
    for k in (anchor, chain.sums_kernel, chain.exp.kernel, chain.scores.kernel):
        if k is not None:
            rewriter.erase_op(k)
    for buf in (chain.sums, chain.exp.out, chain.scores.out):
        if buf is not None and not buf.uses:
            rewriter.erase_op(buf.owner)  # type: ignore[arg-type]
