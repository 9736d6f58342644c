"""The ranges of pass options and schedule knobs (``llmopt/options.py``): the table names
real options, rejects what the passes cannot use when the pipeline is built, and accepts
every schedule that the heuristics, the tuner and the committed tuning table produce."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from llmopt import options, registry
from llmopt.passes.tile import _schedule_tiles


@pytest.mark.parametrize("pass_name", sorted(options.OPTIONS))
def test_every_listed_option_is_a_field_of_its_pass(pass_name: str) -> None:
    """The table cannot drift from the passes: each option is a dataclass field."""
    cls = registry.PASSES[pass_name]()
    fields = {f.name for f in dataclasses.fields(cls)}
    missing = set(options.OPTIONS[pass_name]) - fields
    assert not missing, f"{pass_name} has no option(s) {sorted(missing)}"


def test_every_integer_option_of_llmopt_has_a_range() -> None:
    """An integer option missing from the table would reach its pass unchecked (a huge
    ``warps`` once made ``flash-attention`` loop for hours)."""
    unlisted = []
    for name, factory in sorted(registry.PASSES.items()):
        cls = factory()
        if not cls.__module__.startswith("llmopt."):
            continue  # xDSL's own passes check their own options
        unlisted += [f"{name}{{{f.name}}}" for f in dataclasses.fields(cls)
                     if f.type in (int, "int") and f.name not in options.OPTIONS.get(name, {})]
    assert not unlisted, f"integer options without a range in llmopt.options: {unlisted}"


def test_warp_gemv_rows_range_is_its_maximum() -> None:
    from llmopt.passes.tile.warp_gemv import MAX_ROWS

    assert options.OPTIONS["warp-gemv"]["rows"].range.high == MAX_ROWS


def _cases() -> list[tuple[str, str, int]]:
    """For every listed option: a value just below and just above its range."""
    cases = []
    for pass_name, table in sorted(options.OPTIONS.items()):
        for option, spec in sorted(table.items()):
            allowed = spec.range
            if allowed.choices:
                cases += [(pass_name, option, max(allowed.choices) + 1), (pass_name, option, -1)]
            else:
                cases.append((pass_name, option, allowed.high + 1 if allowed.high < 2**62
                              else -1))
                if allowed.low > 0 and not (spec.unset and allowed.low == 1):
                    cases.append((pass_name, option, allowed.low - 1))
                cases.append((pass_name, option, -7))
    return cases


@pytest.mark.parametrize(("pass_name", "option", "value"), _cases())
def test_out_of_range_option_is_a_pipeline_error(pass_name: str, option: str, value: int
                                                 ) -> None:
    with pytest.raises(registry.PipelineError) as err:
        registry.build_pipeline(f"{pass_name}{{{option}={value}}}")
    message = str(err.value)
    assert message.startswith(f"invalid options for pass '{pass_name}': {option} must be")
    assert message.endswith(f"got {value}")


@pytest.mark.parametrize("pass_name", sorted(options.OPTIONS))
def test_defaults_and_range_ends_are_accepted(pass_name: str) -> None:
    """A pass with its default options builds; so does each option at its range's ends."""
    registry.build_pipeline(pass_name)
    for option, spec in options.OPTIONS[pass_name].items():
        allowed = spec.range
        ends = allowed.choices or tuple(v for v in (allowed.low, allowed.high) if v < 2**40)
        for value in ends:
            if pass_name == "register-tile" and option in ("tm", "tn") and value > 16:
                continue  # alone, fine; the cross checks are tested below
            registry.build_pipeline(f"{pass_name}{{{option}={value}}}")


def test_arch_is_checked_for_every_pass_that_has_one() -> None:
    for name in ("loop-to-tile", "split-k", "register-tile", "stage-inputs", "async-copy",
                 "flash-attention", "apply-tuned", "kernel-to-cuda"):
        for bad in ("sm_1", "foo", "sm90", "sm_69"):
            with pytest.raises(registry.PipelineError, match=f"pass '{name}': arch: GPU "):
                registry.build_pipeline(f"{name}{{arch={bad}}}")
        registry.build_pipeline(f"{name}{{arch=sm_75}}")
        registry.build_pipeline(f"{name}{{arch=sm_90a}}")


@pytest.mark.parametrize(("knobs", "problem"), [
    ({"bm": 64, "tm": 6}, "tm=6 does not divide bm=64"),
    ({"bm": 16, "bn": 16, "tm": 4, "tn": 4}, "make 16 threads per block"),
    ({"tm": 32, "tn": 16}, "32 x 16 = 512 outputs per thread"),
    ({"stages": 0}, "knob 'stages' must be an integer from 1 to 16, got 0"),
    ({"blocked": 4}, "knob 'blocked' must be one of 1, 2, 3, got 4"),
])
def test_knob_problems(knobs: dict[str, int], problem: str) -> None:
    problems = options.knob_problems(knobs)
    assert problems and problem in problems[0], problems


def test_unknown_knobs_are_left_alone() -> None:
    """A pass may add a knob without this table knowing it."""
    assert options.knob_problems({"a_new_knob": -5, "bm": 64}) == []


def test_every_schedule_the_compiler_makes_is_accepted() -> None:
    """The heuristics' tiles, the tensor-core tiles and the committed tuning table's knobs
    are all within range (the verifier would otherwise reject the compiler's own output)."""
    for bm, bn, tm, tn in _schedule_tiles.TILE_CANDIDATES:
        assert options.knob_problems({"bm": bm, "bn": bn, "tm": tm, "tn": tn}) == []
    for t in _schedule_tiles.MMA_TILES:
        assert options.knob_problems({"bm": t.bm, "bn": t.bn, "tm": t.tm, "tn": t.tn,
                                      "blocked": 3}) == []
    tables = Path(_schedule_tiles.__file__).parent / "tuned"
    for table in sorted(tables.glob("*.json")):
        for key, entry in json.loads(table.read_text()).items():
            assert options.knob_problems(entry.get("knobs", {})) == [], (table.name, key)


def test_tuning_table_entries_out_of_range_are_skipped() -> None:
    """``apply-tuned`` never writes a schedule the verifier rejects: a hand-edited or damaged
    entry (knobs not integers, or out of range) is passed over for the next valid one."""
    from llmopt.tools import tune

    bad = {"k|gpu|nvrtc-13.0": {"arch": "sm_90", "knobs": {"bm": 64, "tm": 0}}}
    text = {"k|gpu|nvrtc-13.0": {"arch": "sm_90", "knobs": {"bm": "sixty-four"}}}
    junk = {"k|gpu|nvrtc-13.0": "not an entry"}
    good = {"k|gpu|nvrtc-13.0": {"arch": "sm_90", "knobs": {"bm": 64, "tm": 4}}}
    assert tune.lookup("k", "sm_90", [bad, text, junk]) is None
    assert tune.lookup("k", "sm_90", [bad, text, junk, good]) == {"bm": 64, "tm": 4}
