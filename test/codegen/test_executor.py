"""The executor's plan and weight binding (no GPU needed).

Arguments marked ``{llmopt.param = "..."}`` are weights bound by ``state_dict`` name; the
others are call inputs. :func:`bind_weights` checks and places the weights; the GPU tests
in ``test_executor_gpu.py`` run whole programs with bound weights and CUDA graphs.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import llmopt  # noqa: E402
from llmopt.codegen.executor import (  # noqa: E402
    ZEROED_ATTR,
    AllocStep,
    ExecutorError,
    LaunchStep,
    argument_names,
    bind_weights,
    plan_host_function,
)

HOST = """
kernel.func @scale(%out: memref<4x8xf32>, %w: memref<8xf32>, %x: memref<4x8xf32>) block [32, 1, 1] {
  %t = kernel.thread_id x
  %c0 = arith.constant 0 : index
  %v = kernel.load %x[%c0, %t] : memref<4x8xf32>
  %s = kernel.load %w[%t] : memref<8xf32>
  %m = arith.mulf %v, %s : f32
  kernel.store %m, %out[%c0, %t] : memref<4x8xf32>
  kernel.return
}
func.func @forward(%w: memref<8xf32> {llmopt.param = "norm.weight"},
                   %x: memref<4x8xf32> {llmopt.input = "x"}) -> memref<4x8xf32> {
  %0 = memref.alloc() : memref<4x8xf32>
  kernel.launch @scale grid [1, 1, 1] block [32, 1, 1] smem 0 (%0, %w, %x)
      : memref<4x8xf32>, memref<8xf32>, memref<4x8xf32>
  func.return %0 : memref<4x8xf32>
}
"""


def _plan(pipeline: str = "kernel-to-cuda"):  # noqa: ANN202 - HostPlan
    module = llmopt.parse(HOST)
    llmopt.lower(module, pipeline)
    return plan_host_function(module)


@pytest.mark.parametrize(("pipeline", "programmatic", "carveout"), [
    ("kernel-to-cuda", False, None),
    ("programmatic-launch,kernel-to-cuda", True, None),
    ("programmatic-launch{carveout=100},kernel-to-cuda", True, 100),
    ("programmatic-launch{carveout=0},kernel-to-cuda", True, 0),
])
def test_launch_steps_carry_the_launch_attributes(pipeline: str, programmatic: bool,
                                                  carveout: int | None) -> None:
    """A launch step is programmatic and has a preferred carveout exactly when its
    ``kernel.launch`` says so (``programmatic-launch`` and its ``carveout`` option)."""
    (launch,) = [s for s in _plan(pipeline).steps if isinstance(s, LaunchStep)]
    assert (launch.programmatic, launch.carveout) == (programmatic, carveout)


def test_plan_names_the_weights() -> None:
    """``plan.params`` holds the state_dict name of each weight argument, None for inputs."""
    plan = _plan()
    assert plan.params == ("norm.weight", None)
    assert [name for name, _ in plan.inputs] == ["w", "x"]


def test_argument_names_of_a_captured_program() -> None:
    """Captured weights keep their state_dict names down to the host function."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
    module = llmopt.capture(model, (torch.randn(2, 8),))
    llmopt.lower(module, "lower-to-cuda")
    from xdsl.dialects import func

    host = next(op for op in module.ops if isinstance(op, func.FuncOp))
    assert argument_names(host) == ["0.weight", "0.bias", None]
    assert plan_host_function(module).params == ("0.weight", "0.bias", None)


def test_bind_weights_by_name() -> None:
    """Weights are found by name (extra names ignored), placed and made contiguous."""
    plan = _plan()
    weight = torch.randn(16)[::2]  # not contiguous
    bound = bind_weights(plan, {"norm.weight": weight, "unused": torch.zeros(3)}, "cpu")
    assert list(bound) == [0]
    assert bound[0].is_contiguous() and torch.equal(bound[0], weight)


@pytest.mark.parametrize("params,message", [
    ({}, "1 weight\\(s\\) missing from params: 'norm.weight'"),
    ({"norm.weight": torch.empty(8, device="meta")}, "meta tensor"),
    ({"norm.weight": torch.zeros(9)}, "the program takes torch.float32 \\(8,\\)"),
    ({"norm.weight": torch.zeros(8, dtype=torch.float64)}, "torch.float64"),
    ({"norm.weight": [0.0] * 8}, "must be a tensor"),
])
def test_bind_weights_rejects(params: dict, message: str) -> None:
    """Missing, meta, misshapen, mistyped and non-tensor weights are errors naming them."""
    with pytest.raises(ExecutorError, match=message):
        bind_weights(_plan(), params, "cpu")


ZEROED = """
func.func @forward() -> (memref<1xi32>, memref<4xf32>) {
  %c = memref.alloc() {llmopt.zeroed} : memref<1xi32>
  %b = memref.alloc() : memref<4xf32>
  func.return %c, %b : memref<1xi32>, memref<4xf32>
}
"""


def test_zeroed_allocations_are_planned_as_zeroed() -> None:
    """A ``memref.alloc {llmopt.zeroed}`` is a zeroed allocation step (``torch.zeros``);
    an allocation without the attribute stays ``torch.empty``."""
    assert ZEROED_ATTR == "llmopt.zeroed"
    from xdsl.dialects.builtin import f32, i32

    steps = plan_host_function(llmopt.parse(ZEROED)).steps
    assert steps == (AllocStep(0, (1,), i32, zeroed=True), AllocStep(1, (4,), f32))
    assert not steps[1].zeroed


def test_a_zeroed_alloca_is_an_error() -> None:
    """Only ``memref.alloc`` can be zeroed: a zeroed ``memref.alloca`` is refused."""
    module = llmopt.parse(ZEROED.replace("memref.alloc() {llmopt.zeroed}",
                                         "memref.alloca() {llmopt.zeroed}"))
    with pytest.raises(ExecutorError, match="only memref.alloc can be zeroed"):
        plan_host_function(module)
