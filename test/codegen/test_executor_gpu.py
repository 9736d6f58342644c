"""Whole programs on the GPU: weights bound by name, the plain path and CUDA graphs.

Marked ``gpu`` (skipped without one). A stack of identical RMSNorm + gated-MLP layers is
lowered by ``lower-to-cuda`` (so with ``dedup-kernels`` and ``plan-buffers``) and compared
with PyTorch in float64.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

sys.path.insert(0, str(Path(__file__).parent.parent / "models"))
from test_layer_stack import Stack  # noqa: E402

import llmopt  # noqa: E402


def _lowered(layers: int = 3):  # noqa: ANN202 - (model, module)
    model = Stack(layers)
    x = torch.randn(1, 7, 33)
    module = llmopt.capture(model, (x,))
    llmopt.lower(module, "lower-to-cuda")
    return model, module


def _reference(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return copy.deepcopy(model).cpu().double()(x.double().cpu()).detach()


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    err = ((got.double().cpu() - want).abs().max() / want.abs().max()).item()
    assert err < 1e-5, err


def test_gpu_weights_by_name_and_plain_path() -> None:
    """Weights bound from a state_dict; a call passes only the input. Without params a call
    passes every argument, as before."""
    from llmopt.codegen.executor import CompiledProgram

    model, module = _lowered()
    x = torch.randn(1, 7, 33, device="cuda")
    program = CompiledProgram(module, params=model.state_dict())
    assert program.input_names == ["x"]
    assert program.param_names == list(model.state_dict())
    (y,) = program(x)
    _close(y, _reference(model, x))
    plain = CompiledProgram(module)
    (y2,) = plain(*[p.detach().cuda() for p in model.parameters()], x)
    torch.testing.assert_close(y, y2, rtol=0, atol=0)


def test_gpu_cuda_graph_capture_and_replay() -> None:
    """The first call captures, later calls replay on new inputs into static outputs."""
    from llmopt.codegen.executor import CompiledProgram

    model, module = _lowered()
    program = CompiledProgram(module, params=model.state_dict(), cuda_graph=True)
    outputs = []
    for seed in range(3):
        gen = torch.Generator("cuda").manual_seed(seed)
        x = torch.randn(1, 7, 33, device="cuda", generator=gen)
        (y,) = program(x)
        torch.cuda.synchronize()
        assert program.graph_captured
        _close(y, _reference(model, x))
        outputs.append(y)
    assert outputs[0] is outputs[1] is outputs[2]  # the graph's static output
    program.reset_graph()
    assert not program.graph_captured


def test_gpu_rebinding_weights_recaptures() -> None:
    """New weights drop the captured graph; the next call uses them."""
    from llmopt.codegen.executor import CompiledProgram

    model, module = _lowered(2)
    program = CompiledProgram(module, params=model.state_dict(), cuda_graph=True)
    x = torch.randn(1, 7, 33, device="cuda")
    program(x)
    other = Stack(2)
    other.load_state_dict({k: v * 0.5 for k, v in model.state_dict().items()})
    program.bind_params(other.state_dict())
    assert not program.graph_captured
    (y,) = program(x)
    _close(y, _reference(other, x))


def test_gpu_llmopt_compile_with_graph() -> None:
    """``llmopt.compile(..., cuda_graph=True)`` binds the weights and replays a graph."""
    model = Stack(2).cuda()
    x = torch.randn(1, 7, 33, device="cuda")
    fn = llmopt.compile(model, (x,), cuda_graph=True)
    for _ in range(2):
        x = torch.randn(1, 7, 33, device="cuda")
        _close(fn(x), _reference(model, x))


COUNTER = """
kernel.func @count(%out: memref<4xi32>, %c: memref<4xi32>) block [4, 1, 1] {
  %t = kernel.thread_id x
  %v = kernel.load %c[%t] : memref<4xi32>
  kernel.store %v, %out[%t] : memref<4xi32>
  %one = arith.constant 1 : i32
  %w = arith.addi %v, %one : i32
  kernel.store %w, %c[%t] : memref<4xi32>
  kernel.return
}
func.func @forward() -> memref<4xi32> {
  %c = memref.alloc() {llmopt.zeroed} : memref<4xi32>
  %out = memref.alloc() : memref<4xi32>
  kernel.launch @count grid [1, 1, 1] block [4, 1, 1] smem 0 (%out, %c)
      : memref<4xi32>, memref<4xi32>
  func.return %out : memref<4xi32>
}
"""


@pytest.mark.parametrize("cuda_graph", [False, True])
def test_gpu_zeroed_allocation_reaches_the_kernel_as_zeros(cuda_graph: bool) -> None:
    """A ``memref.alloc {llmopt.zeroed}`` is zeros at its launch on every call (a memset in
    a CUDA graph), although the kernel leaves it at one: a plain ``torch.empty`` would get
    the previous call's freed block back."""
    from llmopt.codegen.executor import CompiledProgram

    module = llmopt.parse(COUNTER)
    llmopt.lower(module, "kernel-to-cuda")
    program = CompiledProgram(module, cuda_graph=cuda_graph)
    for _ in range(3):
        (out,) = program()
        assert out.tolist() == [0, 0, 0, 0]
