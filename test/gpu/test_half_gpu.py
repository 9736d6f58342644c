"""The op suite and a decoder layer in bf16 and f16 on the GPU, against float64 and against
PyTorch's own 16-bit result.

Every case runs the same 16-bit inputs (and weights) three ways: llmopt's kernels, PyTorch
in the 16-bit dtype on the GPU, and PyTorch in float64 from the same 16-bit values. The
errors are ``max |x - ref64| / max |ref64|``. llmopt computes in f32 and rounds where
PyTorch rounds, so its error should be PyTorch's: the goal, asserted here, is at most twice
PyTorch's error plus one epsilon of the dtype (``2**-7`` bf16, ``2**-10`` f16: where
PyTorch's own error is 0, e.g. a data movement, llmopt may still differ by one rounding).
The measure and the goal are the benchmark suite's (``bench/suite.py``: :func:`half_errors`,
:func:`within_error_goal`), which judges every case of its 16-bit runs so.
Products also report cuBLAS's time (``torch.matmul`` in the 16-bit dtype) beside llmopt's.

Run on a GPU host: ``python -m pytest -m gpu test/gpu/test_half_gpu.py -q -s``; set
``LLMOPT_REPORT=path.json`` to also write the measured errors and times. The comparison
itself (:func:`half_errors`) runs on the CPU here, through the Kernel-IR interpreter, on
tiny shapes.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from suite import HALF_EPS as EPS  # noqa: E402
from suite import half_errors, within_error_goal  # noqa: E402
from test_ops_gpu import CASES  # noqa: E402

import llmopt  # noqa: E402

HALF_CASES = [c for c in CASES if c[0] in {
    "add-broadcast", "mul", "div", "exp", "rsqrt", "silu", "sigmoid", "tanh", "sum", "mean",
    "amax", "softmax", "rmsnorm-1x128x2048", "rmsnorm-1x512x3584", "rms_norm-1x128x2048",
    "linear-bias-128x2048x5632", "linear-512x3584x18944", "linear-odd", "silu-mul-1x128x5632",
    "matmul", "bmm", "rotate-half", "sdpa-causal-1x32x512x64", "sdpa-causal-1x28x128x128"}]
PRODUCTS = ("linear", "matmul", "bmm")
RESULTS: list[dict[str, Any]] = []


def _inputs(name: str, shapes: list[tuple[int, ...]], dtype: Any, device: str) -> list[Any]:
    gen = torch.Generator().manual_seed(sum(map(ord, name)))
    return [torch.randn(s, generator=gen).to(dtype).to(device) for s in shapes]


def _module(fn: Any, dtype: Any, device: str) -> Any:
    return copy.deepcopy(fn).to(dtype).to(device) if isinstance(fn, torch.nn.Module) else fn


def _interpreted(fn: Any, args: list[Any]) -> Callable[..., Any]:
    """``fn`` run by llmopt's Kernel-IR interpreter (16-bit values travel as float32)."""
    module = llmopt.capture(fn, args)
    llmopt.lower(module, "torch-to-prim,canonicalize,prim-to-loop,fuse-kernels,canonicalize,"
                         "cse,loop-to-tile,tile-to-kernel,canonicalize,cse")
    params = list(fn.parameters()) if isinstance(fn, torch.nn.Module) else []

    def run(*inputs: Any) -> Any:
        values = [t.detach().float().numpy() for t in [*params, *inputs]]
        return torch.from_numpy(llmopt.interp.run(module, values)[0].astype("float32"))

    return run


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name,fn,shapes", [
    ("silu-mul", lambda a, b: torch.nn.functional.silu(a) * b, [(3, 20), (3, 20)]),
    ("linear-odd", torch.nn.Linear(24, 10), [(1, 5, 24)]),
    ("softmax", lambda x: torch.softmax(x, -1), [(2, 5, 17)]),
], ids=["silu-mul", "linear-odd", "softmax"])
def test_half_errors_on_the_cpu(name: str, fn: Any, shapes: list[tuple[int, ...]],
                                dtype: str) -> None:
    """The comparison of the GPU test on tiny shapes, llmopt's side interpreted: llmopt's
    error against float64 meets the goal against PyTorch's own 16-bit error."""
    half = getattr(torch, dtype)
    fn = _module(fn, half, "cpu")
    args = _inputs(name, shapes, half, "cpu")
    ours, theirs = half_errors(fn, args, _interpreted(fn, args))
    assert 0 < theirs < 8 * EPS[dtype], theirs
    assert within_error_goal(ours, theirs, dtype), (ours, theirs)
    assert not within_error_goal(2.5 * theirs + EPS[dtype], theirs, dtype)  # it can fail


def _milliseconds(fn: Callable[[], Any], repeat: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeat):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name,fn,shapes,n", HALF_CASES, ids=[c[0] for c in HALF_CASES])
def test_op_in_half_precision(name: str, fn: Any, shapes: list[tuple[int, ...]], n: int,
                              dtype: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    half = getattr(torch, dtype)
    fn = _module(fn, half, "cuda")
    args = _inputs(name, shapes, half, "cuda")
    compiled = llmopt.compile(fn, args)
    ours, theirs = half_errors(fn, args, compiled)
    row: dict[str, Any] = {"op": name, "dtype": dtype, "shapes": [list(s) for s in shapes],
                           "llmopt_err": ours, "torch_err": theirs}
    if name.startswith(PRODUCTS):
        row["llmopt_ms"] = _milliseconds(lambda: compiled(*args))
        if name.startswith("linear"):
            weight = fn.weight
            row["cublas_ms"] = _milliseconds(lambda: torch.matmul(args[0], weight.T))
        else:
            row["cublas_ms"] = _milliseconds(lambda: torch.matmul(*args))
    RESULTS.append(row)
    print(f"{name:28s} {dtype:9s} llmopt {ours:.2e}  PyTorch {theirs:.2e}"
          + (f"  {row['llmopt_ms']:.3f} ms vs cuBLAS {row['cublas_ms']:.3f} ms"
             if "cublas_ms" in row else ""))
    assert within_error_goal(ours, theirs, dtype), (ours, theirs)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("model_name,seq", [("tinyllama", 128), ("qwen2.5-7b", 512)])
def test_decoder_layer_in_half_precision(model_name: str, seq: int, dtype: str) -> None:
    """One decoder layer at the real dimensions, 16-bit weights: llmopt against float64
    beside PyTorch's own 16-bit error on the same inputs."""
    pytest.importorskip("transformers")
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    from llmopt.codegen.executor import CompiledProgram
    from llmopt.frontend.models import build_model, capture_layer, position_embeddings

    half = getattr(torch, dtype)
    model = build_model(model_name, device="cuda", dtype=half, seed=0, layers=1)
    program = capture_layer(model, seq)
    llmopt.lower(program.module, "lower-to-cuda")
    compiled = CompiledProgram(program.module)
    layer = model.model.layers[0]
    cos, sin = position_embeddings(model, seq)
    cos, sin = cos.cuda(), sin.cuda()
    params = [program.params[name].detach() for name in program.param_names]

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, x: Any, c: Any, s: Any) -> Any:
            out = self.layer(x, attention_mask=None, position_embeddings=(c, s))
            return out[0] if isinstance(out, tuple) else out

    x = _inputs(model_name, [(1, seq, model.config.hidden_size)], half, "cuda")[0]
    ours, theirs = half_errors(Layer(), [x, cos, sin],
                               lambda *a: compiled(*params, *a)[0])
    RESULTS.append({"layer": model_name, "seq": seq, "dtype": dtype, "llmopt_err": ours,
                    "torch_err": theirs})
    print(f"{model_name} layer seq {seq} {dtype}: llmopt {ours:.2e}  PyTorch {theirs:.2e}")
    assert within_error_goal(ours, theirs, dtype), (ours, theirs)


def teardown_module() -> None:
    path = os.environ.get("LLMOPT_REPORT")
    if path and RESULTS:
        with open(path, "w") as f:
            json.dump(RESULTS, f, indent=1)
