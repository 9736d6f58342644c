"""``llmopt tune`` for attention (:mod:`llmopt.tools.tune_attention`) without a GPU: the chain
programs it times, its structural key, its candidates, how ``flash-attention`` takes the
knobs it records, and the table entries it writes (with the trials faked)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp, i64

import llmopt
from llmopt.tools import tune, tune_attention
from llmopt.tools.tune import Trial

LOOP_IR = ("torch-to-prim,canonicalize,prim-to-loop,fuse-kernels{recompute_limit=0},"
           "canonicalize,cse,hoist-reduce-factors")


def _attention(q: Any, k: Any, v: Any) -> Any:
    import torch.nn.functional as F

    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return out.transpose(1, 2).reshape(q.shape[0], q.shape[2], q.shape[1] * q.shape[3])


def _two_attentions(q: Any, k: Any, v: Any, q2: Any, k2: Any, v2: Any) -> Any:
    return _attention(q, k, v), _attention(q2, k2, v2)


def _loop_ir(seq: int, head_dim: int = 16, twice: bool = False) -> ModuleOp:
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(seq)
    shapes = [(1, 4, seq, head_dim), (1, 2, seq, head_dim), (1, 2, seq, head_dim)] * (
        2 if twice else 1)
    args = [torch.randn(s, generator=gen) for s in shapes]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = llmopt.capture(_two_attentions if twice else _attention, args)
    return llmopt.lower(module, LOOP_IR)


@pytest.fixture(autouse=True)
def _private_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty user cache and no committed table: nothing tuned leaks in."""
    monkeypatch.setenv("LLMOPT_TUNE_CACHE", str(tmp_path / "tuned.json"))
    monkeypatch.setattr(tune, "TABLE_DIR", tmp_path / "tables")


def _flash(module: ModuleOp, options: str = "") -> str:
    lowered = llmopt.lower(module.clone(), f"flash-attention{options}")
    (kernel,) = [op for op in lowered.walk() if "llmopt.flash" in op.attributes]
    return kernel.attributes["llmopt.flash"].data  # type: ignore[attr-defined]


def test_every_layer_has_the_same_key_and_lengths_differ() -> None:
    chains = tune_attention.attention_chains(_loop_ir(32, twice=True))
    assert len(chains) == 2
    assert tune_attention.chain_key(chains[0]) == tune_attention.chain_key(chains[1])
    (other,) = tune_attention.attention_chains(_loop_ir(48))
    assert tune_attention.chain_key(other) != tune_attention.chain_key(chains[0])
    assert tune_attention.describe(other) == "4x48x48x16 causal"


def test_a_chain_alone_computes_what_it_computed_in_the_program() -> None:
    """The chain's program (its outside buffers as arguments, its own allocated inside)
    fuses into one flash kernel with the knobs of its scores kernel, and keeps its result
    through flash-attention and the schedule to Kernel IR."""
    (chain,) = tune_attention.attention_chains(_loop_ir(40))
    module = tune_attention.chain_module(chain, {"bm": 16, "bn": 32, "warps": 2})
    assert _flash(module, "{tuned=0}") == "16x32"
    assert _flash(tune_attention.chain_module(chain, None), "{tuned=0}") == "16x64"
    report = llmopt.check_numerics(module, tune_attention.FLASH.format(arch="sm_90")
                                   .split(",tile-to-kernel")[0] + ",tile-to-kernel")
    assert report.ok, str(report)


def test_flash_attention_takes_the_knobs_of_the_scores_kernel_then_the_tables() -> None:
    module = _loop_ir(64)
    (chain,) = tune_attention.attention_chains(module)
    key = tune_attention.chain_key(chain)
    assert _flash(module) == "16x64"  # the heuristics
    table = {tune.entry_key(key, "Some GPU", "13.0"): {"arch": "sm_90",
                                                       "knobs": {"bm": 32, "bn": 32}}}
    tune.cache_path().write_text(json.dumps(table))
    assert _flash(module) == "32x32"
    assert _flash(module, "{tuned=0}") == "16x64"
    assert _flash(module, "{bm=16}") == "16x32"  # an option wins over the table
    chain.scores.kernel.attributes["llmopt.schedule"] = DictionaryAttr(
        {"bm": IntegerAttr(64, i64), "bn": IntegerAttr(16, i64)})
    assert _flash(module) == "64x16"  # the kernel's own schedule wins over the table
    assert tune_attention.chain_key(chain) == key  # and is no part of the key


def test_attention_candidates() -> None:
    (chain,) = tune_attention.attention_chains(_loop_ir(64))
    cands = tune_attention.attention_candidates(chain, "sm_90", 100)
    assert cands and len(cands) == len({json.dumps(c, sort_keys=True) for c in cands})
    assert cands[0] == {"bm": 16, "bn": 64, "warps": 2, "stages": 2}  # the heuristics' blocks
    from llmopt.passes.tile._schedule_attention import choose_attention_blocks

    for c in cands:
        assert choose_attention_blocks(*chain.dims, 132, c["bm"], c["bn"], c["warps"]) is not None
    assert len(tune_attention.attention_candidates(chain, "sm_90", 3)) == 3


def test_tune_attention_records_the_fastest_correct_candidate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    module = _loop_ir(32, twice=True)
    timed: list[list[Any]] = []

    def fake_trials(chain: Any, trials: list[Any], *args: Any, **kwargs: Any) -> list[Trial]:
        timed.append(list(trials))
        return [Trial(knobs, None if k == 2 else 1.0 / (k + 1), None)
                for k, knobs in enumerate(trials)]

    monkeypatch.setattr(tune_attention, "run_attention_trials", fake_trials)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    lines: list[str] = []
    entries = tune_attention.tune_attention(module, "sm_90", reps=1, limit=3,
                                            log=lines.append)
    assert len(timed) == 1 and timed[0][0] is None  # one chain for both, heuristics first
    (entry,) = entries.values()
    assert entry is not None and entry["knobs"] == timed[0][3] and entry["ms"] == 0.25
    assert entry["shape"] == "4x32x32x16 causal" and entry["discarded"] == 1
    assert any(line.startswith("attention [4x32x32x16 causal]") for line in lines)
