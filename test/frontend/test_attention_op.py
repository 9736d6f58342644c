"""``llmopt::sdpa``: attention is one opaque op during capture and PyTorch's attention eagerly."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from llmopt.frontend.attention_op import OP_NAME, sdpa, sdpa_as_leaf


class _Gqa(torch.nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def _inputs() -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(3)
    return (torch.randn(1, 8, 9, 4, generator=gen), torch.randn(1, 2, 9, 4, generator=gen),
            torch.randn(1, 2, 9, 4, generator=gen))


def test_export_keeps_one_opaque_attention_op_with_a_symbolic_length() -> None:
    seq = torch.export.Dim("seq", max=64)
    with sdpa_as_leaf():
        exported = torch.export.export(_Gqa(), _inputs(), strict=False,
                                       dynamic_shapes={n: {2: seq} for n in "qkv"})
    targets = [str(n.target) for n in exported.graph.nodes if n.op == "call_function"]
    assert targets == [OP_NAME]


def test_eager_op_is_pytorch_attention() -> None:
    q, k, v = _inputs()
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    assert torch.equal(sdpa(q, k, v, is_causal=True, enable_gqa=True), want)
