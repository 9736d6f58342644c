"""The executor's plan of a symbolic program on the CPU: a small function captured with a
symbolic length and lowered to CUDA IR plans with ``?`` extents kept, and each call's layout
(:func:`~llmopt.codegen.symbolic.layout_call`: allocation shapes, launch grids, the length and
the host's index arithmetic) follows the length; a length above the maximum names the argument
and the bound. Running the plan needs a GPU (test/gpu/test_symbolic_gpu.py)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from xdsl.dialects import func  # noqa: E402
from xdsl.dialects.builtin import ModuleOp  # noqa: E402

import llmopt  # noqa: E402
from llmopt.codegen.executor import (  # noqa: E402
    AllocStep,
    ExecutorError,
    LaunchStep,
    plan_host_function,
)
from llmopt.codegen.symbolic import SymbolicHost, layout_call  # noqa: E402

MAX = 64


def mlp(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(x @ w) + x.softmax(-1)


@functools.cache
def lowered() -> ModuleOp:
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(1, 5, 16, generator=gen), torch.randn(16, 16, generator=gen)
    module = llmopt.capture(mlp, (x, w), dynamic={"x": {1: "seq"}}, max={"seq": MAX})
    return llmopt.lower(module, "lower-to-cuda")


def host_of(module: ModuleOp) -> SymbolicHost:
    (fn,) = [op for op in module.ops if isinstance(op, func.FuncOp) and op.body.blocks]
    return SymbolicHost(fn)


def test_plan_keeps_the_symbolic_extents() -> None:
    plan = plan_host_function(lowered())
    names = [name for name, _ in plan.inputs]
    assert plan.symbols == (names.index("seq"),)
    allocs = [s for s in plan.steps if isinstance(s, AllocStep)]
    assert allocs and all(s.shape.count(-(2**63)) == 1 for s in allocs)
    assert any(isinstance(s, LaunchStep) for s in plan.steps)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_layout_follows_the_length(seed: int) -> None:
    length = int(np.random.default_rng(seed).integers(1, MAX + 1))
    module = lowered()
    plan, host = plan_host_function(module), host_of(module)
    x = np.random.default_rng(seed).standard_normal((1, length, 16)).astype(np.float32)
    symbols = host.bind([x, x[0, :16, :].copy() if length >= 16 else np.ones((16, 16))])
    assert symbols == {"seq": length}
    layout = layout_call(plan, host, symbols)
    assert layout.scalars[plan.symbols[0]] == length
    allocs = [s for s in plan.steps if isinstance(s, AllocStep)]
    for step in allocs:
        want = tuple(length if d < 0 else d for d in step.shape)
        assert layout.shapes[step.slot] == want
    launches = [k for k, s in enumerate(plan.steps) if isinstance(s, LaunchStep)]
    assert sorted(layout.grids) == launches
    for k in launches:
        step = plan.steps[k]
        assert isinstance(step, LaunchStep)
        grid = layout.grids[k]
        assert 1 <= grid[0] <= step.grid[0] and grid[1:] == step.grid[1:]
    # the grids grow with the length and reach the launch's maximum at the maximum
    at_max = layout_call(plan, host, {"seq": MAX})
    assert all(at_max.grids[k] == plan.steps[k].grid for k in launches)  # type: ignore[union-attr]
    assert set(at_max.scalars) == {plan.symbols[0], *plan.computed}


def test_length_above_the_maximum_is_an_error() -> None:
    host = host_of(lowered())
    x = np.random.default_rng(5).standard_normal((1, MAX + 1, 16)).astype(np.float32)
    with pytest.raises(ExecutorError, match=rf"input 'x' dim 1 is {MAX + 1}, outside "
                                            rf"\[1, {MAX}\], the bounds of symbol 'seq'"):
        host.bind([x, np.ones((16, 16), np.float32)])
