"""``apply-tuned``: kernels the autotuner has measured get their tuned schedule knobs.

**Matches** every ``tile.kernel`` that ``register-tile`` would tile and that has no
``llmopt.schedule`` yet.

**Produces** the kernel with ``llmopt.schedule`` set to the knobs recorded for its
structural hash (:func:`llmopt.tools.tune.schedule_key`) and the target architecture, taken
from the table committed for the architecture (``passes/tile/tuned/<arch>.json``, installed
with llmopt; a variant such as ``sm_90a`` also takes its base's entries, measured on the same
GPUs) — or, when asked for, first from the user's tuning cache that ``llmopt tune``
writes: with ``$LLMOPT_TUNE_CACHE`` set (that file), or with ``user=1``
(``$LLMOPT_TUNE_CACHE``, else ``~/.cache/llmopt/tuned.json``). Kernels without an entry
keep the heuristics.

**Why** the heuristics see only shapes and limits; a measured choice is better where one
exists, and keeping it as a kernel attribute leaves it visible in the IR and overridable
(a pass option of the scheduling passes still wins over it). The user's cache is read only
on request so that a pipeline lowers a program the same way on every machine, whatever was
tuned in its home directory.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass

from llmopt.dialects import tile
from llmopt.passes.tile._schedule import SCHEDULE_ATTR
from llmopt.passes.tile.register_tile import match_contraction


@dataclass(frozen=True)
class ApplyTuned(ModulePass):
    """Set tuned schedule knobs (see the module docstring). Options: ``arch``; ``user``
    (1: read the user's tuning cache before the committed table; 0, the default: only
    where ``$LLMOPT_TUNE_CACHE`` names one)."""

    name = "apply-tuned"

    arch: str = "sm_90"
    user: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from llmopt.tools.tune import (
            committed_tables,
            load_table,
            lookup,
            schedule_key,
            table_arches,
            user_cache,
        )

        kernels = [k for k in op.walk() if isinstance(k, tile.KernelOp)
                   and SCHEDULE_ATTR not in k.attributes and match_contraction(k) is not None]
        if not kernels:
            return
        cache = user_cache(bool(self.user))
        tables = [load_table(cache)] if cache is not None else []
        tables += committed_tables(self.arch)
        if not any(tables):
            return
        for kernel in kernels:
            knobs = lookup(schedule_key(kernel), table_arches(self.arch), tables)
            if knobs:
                kernel.attributes[SCHEDULE_ATTR] = DictionaryAttr(
                    {k: IntegerAttr(v, i64) for k, v in sorted(knobs.items())})
