"""The capture translates export's first (pre-dispatch) graph when it is a pure ATen graph,
and falls back to the decomposed graph otherwise; both give the same program."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from llmopt.frontend import predispatch  # noqa: E402
from llmopt.frontend.capture import capture  # noqa: E402
from llmopt.interp import run  # noqa: E402


class Rotary(torch.nn.Module):
    """A no_grad region (as HF's rotary embeddings compute cos/sin) between pure ops."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("freq", torch.rand(4), persistent=False)
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            angles = torch.arange(x.shape[1], dtype=torch.float32)[:, None] * self.freq
            cos = torch.cat([angles.cos(), angles.cos()], dim=-1)
        return self.proj(x) * cos.to(x.dtype)


class InPlace(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y.add_(1)
        return y.relu()


def _exported(module: torch.nn.Module, x: torch.Tensor) -> Any:
    return torch.export.export(module.eval(), (x,), strict=False)


def _captures(monkeypatch: pytest.MonkeyPatch) -> Callable[[torch.nn.Module, torch.Tensor],
                                                          tuple[str, str, list[bool]]]:
    """Capture twice, with and without the direct path; the Torch IR of each and whether
    the direct path was taken."""
    taken: list[bool] = []
    original = predispatch.prepare_direct

    def spy(exported: Any) -> bool:
        taken.append(original(exported))
        return taken[-1]

    def both(module: torch.nn.Module, x: torch.Tensor) -> tuple[str, str, list[bool]]:
        monkeypatch.setattr(predispatch, "prepare_direct", spy)
        direct = capture(module, (x,))
        monkeypatch.setattr(predispatch, "prepare_direct", lambda exported: False)
        decomposed = capture(module, (x,))
        got = run(direct.module, [*direct.params.values(), x])[0]
        assert np.allclose(got, module(x).detach().numpy(), atol=1e-5)
        return str(direct.module), str(decomposed.module), taken

    return both


def test_grad_mode_region_is_inlined_and_translated_directly(
        monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    module, x = Rotary(), torch.randn(1, 5, 8)
    exported = _exported(module, x)
    regions = [n for n in exported.graph.nodes if str(n.target) == predispatch.GRAD_MODE_REGION]
    assert regions, "the no_grad region should be a higher-order op before decomposition"
    assert predispatch.prepare_direct(exported)
    assert not [n for n in exported.graph.nodes
                if str(n.target) == predispatch.GRAD_MODE_REGION]
    direct, decomposed, taken = _captures(monkeypatch)(module, x)
    assert taken == [True]
    assert direct.count("torch.") == decomposed.count("torch.")


def test_in_place_op_falls_back_to_the_decomposed_graph(
        monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    module, x = InPlace(), torch.randn(3, 4)
    assert not predispatch.prepare_direct(_exported(module, x))
    direct, decomposed, taken = _captures(monkeypatch)(module, x)
    assert taken == [False]
    assert direct == decomposed
