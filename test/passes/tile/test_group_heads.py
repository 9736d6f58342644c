"""``match_groups``: which query heads share a key/value head, proved from the loads."""

from __future__ import annotations

from pathlib import Path

import pytest

import llmopt.api as api
from llmopt.dialects import loop
from llmopt.passes.tile._attention_chain import Chain, match_chain
from llmopt.passes.tile._group_heads import HeadGroups, match_groups

DECODE = Path(__file__).with_name("flash-attention-decode.mlir")


def chain_of(text: str) -> Chain:
    module = api.parse(text)
    chains = [c for k in module.walk() if isinstance(k, loop.KernelOp)
              if (c := match_chain(k)) is not None]
    assert len(chains) == 1
    return chains[0]


def decode_step(kv_heads: int) -> str:
    """The lit test's decode step (4 query heads) with ``kv_heads`` key/value heads."""
    text = DECODE.read_text()
    group = 4 // kv_heads
    text = text.replace("?x2x16", f"?x{kv_heads}x16")
    text = text.replace("(%i1 floordiv 2)", "%i1" if group == 1 else f"(%i1 floordiv {group})")
    return text.replace("((%i2 floordiv 16) floordiv 2)", "(%i2 floordiv 16)" if group == 1
                        else f"((%i2 floordiv 16) floordiv {group})")


@pytest.mark.parametrize(("kv_heads", "expected"), [
    (2, HeadGroups(1, 2)),   # two query heads a key/value head
    (1, HeadGroups(1, 4)),   # all four on one (multi-query attention)
    (4, None),               # one key/value head a query head: nothing to group
])
def test_groups_come_from_the_key_and_value_loads(kv_heads: int,
                                                  expected: HeadGroups | None) -> None:
    assert match_groups(chain_of(decode_step(kv_heads)), 16) == expected


def test_groups_stay_within_a_block() -> None:
    chain = chain_of(decode_step(1))
    assert match_groups(chain, 2) == HeadGroups(1, 2)  # 4 heads share, at most 2 a block
