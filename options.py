"""What values the pass options, the schedule knobs and the GPU architecture may take.

A value out of range is an input error caught before anything runs, never a crash deep in
a pass:

* a **pass option** (``register-tile{bm=-8}``, ``kernel-to-cuda{min_blocks=100000}``) when
  the pipeline is built (:func:`llmopt.registry.build_pipeline` calls :func:`check_pass`):
  ``llm-opt: error: invalid options for pass 'register-tile': bm must be ...``;
* a **schedule knob** in a kernel's ``llmopt.schedule`` dictionary (what ``llmopt tune`` and
  ``apply-tuned`` write, or a user) when the kernel is verified (:func:`check_schedule`);
* a **GPU architecture** (``sm_90``; any pass option named ``arch``, the ``--arch`` of the
  command lines) by :func:`arch_problem`.

Knobs and the pass options that set them share one range: an option may also be 0, which
means "not set" (the kernel's knob, else the heuristic). Knobs this module does not list are
left alone, so a pass can add one without touching this table; a plugin pass checks its own
options in its dataclass' ``__post_init__`` (a ``ValueError`` there is reported the same way).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from llmopt.target import MAX_CLUSTER

__all__ = [
    "KNOBS",
    "OPTIONS",
    "IntRange",
    "arch_problem",
    "check_pass",
    "knob_problems",
]

I64_MAX = 2**63 - 1


def arch_problem(arch: object) -> str | None:
    """Why ``arch`` is not a GPU architecture llmopt compiles for (``None`` when it is)."""
    from llmopt.target import ARCH, MIN_ARCH, arch_number

    if not isinstance(arch, str) or not ARCH.fullmatch(arch):
        return f"GPU architecture '{arch}' is not of the form sm_XY (e.g. sm_90)"
    if arch_number(arch) < MIN_ARCH:
        return (f"GPU architecture '{arch}' is older than sm_{MIN_ARCH}, the oldest llmopt "
                "compiles for")
    return None


@dataclass(frozen=True)
class IntRange:
    """An integer from ``low`` to ``high`` that is a multiple of ``multiple``, or, when
    ``choices`` are given, one of them."""

    low: int = 0
    high: int = I64_MAX
    multiple: int = 1
    choices: tuple[int, ...] = ()

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, int) or isinstance(value, bool):
            return False
        if self.choices:
            return value in self.choices
        return self.low <= value <= self.high and value % self.multiple == 0

    def describe(self) -> str:
        """``one of 1, 2, 3`` / ``an integer from 32 to 1024, a multiple of 32``."""
        if self.choices:
            return "one of " + ", ".join(map(str, self.choices))
        upper = "" if self.high == I64_MAX else f" to {self.high}"
        text = f"an integer from {self.low}{upper}" if upper else f"an integer >= {self.low}"
        return text + (f", a multiple of {self.multiple}" if self.multiple > 1 else "")


def _one_of(*choices: int) -> IntRange:
    return IntRange(choices=choices)


KNOBS: dict[str, IntRange] = {
    "bm": IntRange(1, 4096), "bn": IntRange(1, 4096),
    "tm": IntRange(1, 64), "tn": IntRange(1, 64),
    "blocked": _one_of(1, 2, 3),
    "raster": _one_of(1, 2),
    "bk": IntRange(2, 4096),
    "kmajor": _one_of(1, 2),
    "stages": IntRange(1, 16),
    "carry": _one_of(1, 2),
    "prefetch": _one_of(0, 1),
    "split_k": IntRange(1, 65535),
    "kv_order": _one_of(1, 2),
    "mma_terms": _one_of(1, 3),
    "mma_order": _one_of(1, 2),
    "mma_promote": IntRange(1, 64),
    "mma_split": _one_of(1, 2, 3),
    "min_blocks": IntRange(0, 32),
    "roles": _one_of(1, 2),
    "multicast": IntRange(1, MAX_CLUSTER),
}  # fmt: skip
"""The ``llmopt.schedule`` knobs of the Tile-IR passes and ``kernel-to-cuda`` (see
:mod:`llmopt.passes.tile._schedule`) and their ranges: register tiles (``bm × bn`` per
block, ``tm × tn`` per thread), K chunks (``bk``), shared-memory slots (``stages``), split-K
slices, ``__launch_bounds__``' minimum blocks per multiprocessor (0: none; 32 is the most
any GPU keeps resident), the roles of a product's threads (2: a producer warpgroup issues
the copies), the blocks of a cluster that ``register-tile`` asks ``warp-specialize`` for
(``multicast``)."""

MAX_ACCUMULATORS = 256
"""The largest register tile ``tm × tn`` (a thread has at most 255 registers)."""

_ZERO = "0 (not set)"


@dataclass(frozen=True)
class Option:
    """A pass option's range; ``unset``: 0 is also allowed and means "not set"."""

    range: IntRange
    unset: bool = True


def _knob(name: str) -> Option:
    return Option(KNOBS[name])


OPTIONS: dict[str, dict[str, Option]] = {
    "loop-to-tile": {"block_size": Option(IntRange(32, 1024, 32), unset=False),
                     "coop_threshold": Option(IntRange(0)),
                     "coop_min": Option(IntRange(1), unset=False),
                     "max_grid": Option(IntRange(1, 2**31 - 1), unset=False)},
    "fuse-kernels": {"recompute_limit": Option(IntRange(0))},
    "index-set-split": {"max_rows": Option(IntRange(0, 1 << 20), unset=False)},
    "recompute-into-products": {"min_bits": Option(_one_of(0, 8, 16, 32, 64))},
    "length-buckets": {"coop_rows": Option(IntRange(0, 64))},
    "flash-attention": {"bm": Option(IntRange(16, 1024, 16)),
                        "bn": Option(IntRange(16, 1024, 16)),
                        "warps": Option(IntRange(1, 32)), "stages": _knob("stages"),
                        "splits": Option(IntRange(1, 1024)), "tuned": Option(_one_of(0, 1)),
                        "min_blocks": _knob("min_blocks"),
                        # p stays below 2^N: f16's largest value is below 2^16
                        "rescale_margin": Option(IntRange(-1, 15), unset=False)},
    "warp-gemv": {"rows": Option(IntRange(1, 8)),  # warp_gemv.MAX_ROWS
                  "chunks": Option(IntRange(1, 32), unset=False),
                  "prefetch_bytes": Option(IntRange(0, 1 << 20, 16), unset=False),
                  "slices": Option(IntRange(1, 8))},
    "fuse-launches": {"shared_slack": Option(IntRange(0, 1 << 20))},
    "fuse-tails": {"max_rounds": Option(IntRange(1, 1024), unset=False),
                   "shared_slack": Option(IntRange(0, 1 << 20))},
    "programmatic-launch": {"spread": Option(_one_of(0, 1), unset=False),
                            "carveout": Option(IntRange(-1, 100), unset=False),
                            "prefetch_after": Option(IntRange(-1, 1 << 31), unset=False)},
    "apply-tuned": {"user": Option(_one_of(0, 1))},
    "split-k": {"split_k": _knob("split_k"), "roles": _knob("roles")},
    "register-tile": {name: _knob(name)
                      for name in ("bm", "bn", "tm", "tn", "blocked", "raster", "roles")},
    "stage-inputs": {"bk": _knob("bk"), "kmajor": _knob("kmajor"),
                     "chunk_unroll": Option(IntRange(0, 64))},
    "async-copy": {"stages": _knob("stages"), "carry": _knob("carry"), "roles": _knob("roles"),
                   "lag": Option(_one_of(0, 1)), "alone": Option(_one_of(0, 1))},
    "prefetch-stages": {"prefetch": _knob("prefetch")},
    "pad-shared": {"pad": Option(IntRange(0, 64))},
    "mma-fragments": {"terms": _knob("mma_terms"), "order": _knob("mma_order"),
                      "promote": _knob("mma_promote"), "split": _knob("mma_split")},
    "vector-fragments": {"kv_order": _knob("kv_order")},
    "vector-elementwise": {"bytes": Option(_one_of(0, 4, 8, 16))},
    "vector-rows": {"bytes": Option(_one_of(0, 4, 8, 16))},
    "warp-specialize": {"pending": Option(_one_of(0, 1)),
                        "producer_registers": Option(IntRange(24, 256, 8)),
                        "consumer_registers": Option(IntRange(24, 256, 8)),
                        "cluster": Option(IntRange(1, MAX_CLUSTER)),
                        "max_blocks": Option(IntRange(1, 2**31 - 1))},
    "wgmma-fragments": {"pending": Option(_one_of(0, 1)),
                        "atoms": Option(_one_of(1, 2), unset=False)},
    "kernel-to-cuda": {"index_bitwidth": Option(_one_of(32, 64)),
                       "min_blocks": _knob("min_blocks")},
}
"""The options of llmopt's passes and their ranges, by pass name."""


def _text(value: object) -> str:
    """A value as the pipeline and the IR write it (``true``, not ``True``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _tile_problems(values: Mapping[str, int]) -> list[str]:
    """What is wrong with a register tile (``bm``, ``bn``, ``tm``, ``tn``, those given and
    non-zero) as a whole: the thread tile divides the block tile, the block has 32 to 1024
    threads in whole warps, a thread holds at most :data:`MAX_ACCUMULATORS` outputs."""
    bm, bn, tm, tn = (values.get(k) or 0 for k in ("bm", "bn", "tm", "tn"))
    problems = []
    for block, thread, bname, tname in ((bm, tm, "bm", "tm"), (bn, tn, "bn", "tn")):
        if block and thread and block % thread:
            problems.append(f"{tname}={thread} does not divide {bname}={block}")
    if problems:
        return problems
    if tm and tn and tm * tn > MAX_ACCUMULATORS:
        problems.append(f"a register tile of tm x tn = {tm} x {tn} = {tm * tn} outputs per "
                        f"thread is more than {MAX_ACCUMULATORS}")
    if bm and bn and tm and tn:
        threads = (bm // tm) * (bn // tn)
        if not 32 <= threads <= 1024 or threads % 32:
            problems.append(f"bm={bm} bn={bn} tm={tm} tn={tn} make {threads} threads per "
                            "block; a block has 32 to 1024 threads, a multiple of 32")
    return problems


def knob_problems(knobs: Mapping[str, object]) -> list[str]:
    """What is wrong with a ``llmopt.schedule`` dictionary (name → value): each known knob
    an integer in its range, and the register tile consistent (empty when all is well)."""
    problems = []
    for name, value in knobs.items():
        allowed = KNOBS.get(name)
        if allowed is not None and value not in allowed:
            problems.append(f"knob '{name}' must be {allowed.describe()}, got {_text(value)}")
    if problems:
        return problems
    return _tile_problems({k: v for k, v in knobs.items() if isinstance(v, int)})


def check_pass(instance: object, name: str) -> None:
    """Raise ``ValueError`` naming the first option of pass ``name`` (an instance of its
    dataclass) whose value is out of range; options named ``arch`` are GPU architectures."""
    if not dataclasses.is_dataclass(instance):
        return
    values = {f.name: getattr(instance, f.name) for f in dataclasses.fields(instance)}
    ranges = OPTIONS.get(name, {})
    for option, value in values.items():
        if option == "arch":
            problem = arch_problem(value)
            if problem is not None:
                raise ValueError(f"arch: {problem}")
            continue
        spec = ranges.get(option)
        if spec is None or (spec.unset and value == 0) or value in spec.range:
            continue
        zero = spec.unset and 0 not in spec.range
        allowed = spec.range.describe() + (f" or {_ZERO}" if zero else "")
        raise ValueError(f"{option} must be {allowed}, got {_text(value)}")
    if name == "register-tile":
        problems = _tile_problems({k: v for k, v in values.items() if isinstance(v, int)})
        if problems:
            raise ValueError(problems[0])
