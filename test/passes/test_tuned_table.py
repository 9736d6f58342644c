"""The committed tuning tables: well-formed, and every entry a schedule the passes accept."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from xdsl.dialects.builtin import f32

from llmopt.passes.tile._schedule import RegisterTile
from llmopt.passes.tile.register_tile import mma_fits
from llmopt.target import TARGETS
from llmopt.tools.tune import TABLE_DIR, load_table

TABLES = sorted(TABLE_DIR.glob("*.json"))
KNOBS = {"bm", "bn", "tm", "tn", "bk", "split_k", "blocked", "kmajor", "stages", "prefetch",
         "carry", "min_blocks", "kv_order", "mma_order", "mma_terms",
         "mma_promote", "mma_split"}


def test_there_is_a_table_for_the_h200() -> None:
    assert TABLE_DIR / "sm_90.json" in TABLES


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.name)
def test_entries_are_valid_schedules(path) -> None:  # noqa: ANN001 - a pytest parameter
    table = load_table(path)
    assert table == json.loads(path.read_text())
    assert table, f"{path.name} is empty"
    arch = path.stem
    assert arch in TARGETS
    for name, entry in table.items():
        key, gpu, nvrtc = name.split("|")
        assert re.fullmatch(r"[0-9a-f]{20}", key)
        assert gpu == entry["gpu"] and nvrtc == f"nvrtc-{entry['nvrtc']}"
        assert entry["arch"] == arch
        knobs = entry["knobs"]
        assert set(knobs) <= KNOBS
        assert knobs.get("kv_order", 1) in (1, 2) and knobs.get("min_blocks", 1) >= 1
        batch, m, n, k = (int(v) for v in entry["shape"].split("x"))
        tile = RegisterTile(knobs["bm"], knobs["bn"], knobs["tm"], knobs["tn"])
        assert tile.fits(m, n), (name, knobs, entry["shape"])
        assert knobs.get("blocked", 2) in (1, 2, 3) and knobs.get("mma_order", 1) in (1, 2)
        if knobs.get("blocked") == 3:  # tensor cores: whole m16n8k8 fragments, f32 sums
            assert mma_fits(tile, f32) and knobs.get("mma_terms", 3) == 3
            assert (knobs["bk"] // 8) % knobs.get("mma_promote", 1) == 0
        split = knobs.get("split_k", 1)
        assert k % split == 0 and (k // split) % knobs["bk"] == 0
        assert batch >= 1 and math.isfinite(entry["ms"]) and entry["ms"] > 0
        # The tuner records a schedule only when it beat the heuristics' own.
        assert entry["heuristic_ms"] is None or entry["ms"] < entry["heuristic_ms"]


def test_the_install_tests_kernel_has_an_entry() -> None:
    """The kernel the install test lowers (``test/tools/Inputs/tuned-q-proj.mlir``) is in
    the table of sm_90, so an installed llmopt that finds the table gives it a schedule."""
    import llmopt
    from llmopt.dialects import tile
    from llmopt.tools.tune import lookup, schedule_key

    text = (Path(__file__).resolve().parents[1] / "tools" / "Inputs" / "tuned-q-proj.mlir"
            ).read_text()
    (kernel,) = [op for op in llmopt.parse(text).walk() if isinstance(op, tile.KernelOp)]
    knobs = lookup(schedule_key(kernel), "sm_90", [load_table(TABLE_DIR / "sm_90.json")])
    assert knobs, "pick a kernel of the committed table for tuned-q-proj.mlir"
