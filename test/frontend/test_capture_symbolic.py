"""Symbolic sequence lengths: one captured program for every length up to a maximum.

Each program is captured once with ``dynamic=`` (``torch.export.Dim``), then run by the Torch-
and Tensor-IR interpreters at lengths 1, 7, 100 and the maximum against PyTorch evaluated in
float64, within :func:`llmopt.numerics.tolerance`: an RMSNorm followed by a linear and a
softmax, size arithmetic (flatten, the last token, a dropped first token, ``arange``), a
Llama and a Qwen2 decoder layer and a whole tiny Llama (logits and their argmax). Bad
lengths and shapes are errors that name the argument and the bound.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_models import tiny_model  # noqa: E402

import llmopt  # noqa: E402
from llmopt.dialects._symbols import function_symbols  # noqa: E402
from llmopt.frontend.capture import CapturedProgram, CaptureError, capture  # noqa: E402
from llmopt.frontend.models import (  # noqa: E402
    capture_layer,
    capture_model,
    decoder_layers,
    position_embeddings,
)
from llmopt.interp import InterpretError, run  # noqa: E402
from llmopt.numerics import compare, tolerance  # noqa: E402

MAX = 128
"""The maximum length of the programs here (the tiny models' max_position_embeddings)."""
LENGTHS = (1, 7, 100, MAX)


def arrays(program: CapturedProgram, inputs: Sequence[Any]) -> list[Any]:
    """The program's arguments as numpy arrays (weights, inputs) and ints (symbols)."""
    return [a.detach().numpy() if isinstance(a, torch.Tensor) else a
            for a in program.arguments(*inputs)]


_LOWERED: dict[int, Any] = {}


def lowered(program: CapturedProgram) -> Any:
    """The program at Tensor IR (lowered once per program)."""
    if id(program) not in _LOWERED:
        module = program.module.clone()
        llmopt.lower(module, "torch-to-prim")
        assert not [op for op in module.walk() if op.name.startswith("torch.")]
        _LOWERED[id(program)] = module
    return _LOWERED[id(program)]


def check_both_levels(program: CapturedProgram, inputs: Sequence[Any],
                      want: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run ``program`` at Torch and Tensor IR; both within tolerance of ``want``."""
    args = arrays(program, inputs)
    tol = tolerance(program.module, int(args[-1]))  # the last argument: the length
    results = []
    for module in (program.module, lowered(program)):
        got = run(module, args)
        _, rel = compare(got, want)
        assert rel <= tol, f"relative error {rel:.2e} > {tol:.2e}"
        results.append(got)
    return results[-1]


# --- small programs ---------------------------------------------------------------------------


class NormLinearSoftmax(torch.nn.Module):
    """An HF-style RMSNorm, a linear with bias and a softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(1.0 + 0.1 * torch.randn(32))
        self.proj = torch.nn.Linear(32, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        normed = self.weight * (x * torch.rsqrt(variance + 1e-6))
        return torch.softmax(self.proj(normed), dim=-1)


@functools.cache
def norm_linear_softmax() -> tuple[torch.nn.Module, CapturedProgram]:
    torch.manual_seed(0)
    module = NormLinearSoftmax()
    program = capture(module, (torch.randn(1, 5, 32),), dynamic={"x": {1: "seq"}},
                      max={"seq": MAX})
    return module, program


def test_captured_types_are_symbolic() -> None:
    _, program = norm_linear_softmax()
    text = str(program.module)
    assert 'tensor<1x?x32xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]}' in text
    assert '%seq: index {llmopt.symbol = "seq", llmopt.max = 128 : i64}' in text
    assert "-> tensor<1x?x24xf32>" in text
    assert program.symbols == {"seq": (1, MAX)}
    assert program.input_names == ["x"]
    assert set(function_symbols(program.func)) == {"seq"}
    # The symbol is the last argument; the caller's shapes bind it.
    args = program.arguments(torch.zeros(1, 9, 32))
    assert args[-1] == 9


@pytest.mark.parametrize("length", LENGTHS)
def test_norm_linear_softmax_at_any_length(length: int) -> None:
    module, program = norm_linear_softmax()
    x = torch.randn(1, length, 32, generator=torch.Generator().manual_seed(length))
    with torch.no_grad():
        want = copy.deepcopy(module).double()(x.double()).numpy()
    (got,) = check_both_levels(program, (x,), [want])
    assert got.shape == (1, length, 24)


def sizes(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Sizes the length determines: a flatten, the last token, all but the first, positions,
    a fill of twice the length."""
    n = x.shape[1]
    return (x.reshape(-1), x[:, -1], x[:, 1:] * 2.0, torch.arange(1, n + 1, 2),
            torch.ones(n * 2, 3), x.view(1, n, 2, 4))


@functools.cache
def sizes_program() -> CapturedProgram:
    return capture(sizes, (torch.randn(1, 6, 8),), dynamic={"x": {1: "seq"}},
                   max={"seq": 64}, min={"seq": 3})


def test_size_arithmetic_becomes_index_operands() -> None:
    text = str(sizes_program().module)
    assert "llmopt.min = 3 : i64" in text
    assert "arith.muli" in text and "arith.floordivsi" in text
    assert "torch.reshape %x [%" in text
    assert "torch.slice %x [%" in text and "{dim = 1, step = 1}" in text
    assert "torch.arange [%" in text and "{start = 1, step = 2} : tensor<?xi64>" in text
    assert "torch.expand %" in text and "-> tensor<?x3xf32>" in text


@pytest.mark.parametrize("length", (3, 7, 64))
def test_size_arithmetic_at_any_length(length: int) -> None:
    program = sizes_program()
    x = torch.randn(1, length, 8)
    want = [t.numpy() for t in sizes(x.double())]
    got = check_both_levels(program, (x,), want)
    assert [g.shape for g in got] == [w.shape for w in want]


def test_length_outside_the_bounds_is_an_error() -> None:
    program = sizes_program()
    for length, bound in ((65, "64"), (2, "3")):
        with pytest.raises(CaptureError, match=rf"input 'x' dim 1 is {length}, outside "
                           rf"\[3, 64\], the bounds of symbol 'seq'"):
            program.arguments(torch.zeros(1, length, 8))
        args = [a.detach().numpy() for a in program.params.values()] + [
            np.zeros((1, length, 8), np.float32)]
        with pytest.raises(InterpretError, match=f"outside .*{bound}"):
            run(program.module, args)


def test_static_extent_mismatch_names_the_argument() -> None:
    program = sizes_program()
    with pytest.raises(CaptureError, match=r"input 'x' has shape \[1, 7, 9\], the function "
                       r"takes tensor<1x\?x8xf32> \(dim 2 must be 8\)"):
        program.arguments(torch.zeros(1, 7, 9))


@pytest.mark.parametrize("kwargs, message", [
    ({"dynamic": {"x": {1: "seq"}}}, "symbol 'seq' needs a maximum"),
    ({"dynamic": {"y": {1: "seq"}}, "max": {"seq": 8}}, "dynamic names input 'y'"),
    ({"dynamic": {"x": {3: "seq"}}, "max": {"seq": 8}}, "out of range for its rank 3"),
    ({"dynamic": {"x": {1: "2seq"}}, "max": {"seq": 8}}, "must be a name"),
    ({"dynamic": {"x": {1: "seq"}}, "max": {"seq": 8}, "min": {"seq": 9}},
     r"bounds \[9, 8\] must satisfy 1 <= min <= max"),
    ({"max": {"seq": 8}}, "no dim is dynamic"),
    ({"dynamic": {"x": {1: "seq"}}, "max": {"seq": 4}}, "within"),
])
def test_capture_options_are_checked(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(CaptureError, match=message):
        capture(sizes, (torch.randn(1, 6, 8),), **kwargs)


def test_example_length_one_is_rejected() -> None:
    with pytest.raises(CaptureError, match="at least 2"):
        capture(sizes, (torch.randn(1, 1, 8),), dynamic={"x": {1: "seq"}}, max={"seq": 8})


def test_export_constraints_are_reported() -> None:
    # x[:, 1:] is empty at length 1: export asks for min >= 2 (sizes needs min 3).
    with pytest.raises(CaptureError, match="torch.export failed"):
        capture(sizes, (torch.randn(1, 6, 8),), dynamic={"x": {1: "seq"}}, max={"seq": 8})


def test_api_capture_takes_the_options() -> None:
    module = llmopt.capture(torch.nn.functional.silu, (torch.randn(4, 6),),
                            dynamic={"input": {0: "rows"}}, max={"rows": 32})
    assert "tensor<?x6xf32>" in str(module)
    assert 'llmopt.symbol = "rows"' in str(module)


# --- Hugging Face models ----------------------------------------------------------------------


@functools.cache
def symbolic_layer(kind: str) -> CapturedProgram:
    return capture_layer(tiny_model(kind), 7, dynamic=True, max_seq=MAX)


@functools.cache
def symbolic_model(kind: str) -> CapturedProgram:
    return capture_model(tiny_model(kind), 7, dynamic=True, max_seq=MAX)


def test_layer_is_one_program_for_every_length() -> None:
    program = symbolic_layer("llama")
    text = str(program.module)
    for name in ("hidden_states", "cos", "sin"):
        assert f'llmopt.input = "{name}", llmopt.dynamic = ["seq"]' in text
    assert "torch.reshape %linear [%seq] : tensor<1x?x64xf32> -> tensor<1x?x4x16xf32>" in text
    sdpa = next(op for op in program.func.body.block.ops if op.name == "torch.sdpa")
    assert "tensor<1x4x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32>" in str(sdpa)
    assert "is_causal = true" in str(sdpa)


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("length", LENGTHS)
def test_decoder_layer_at_any_length(kind: str, length: int) -> None:
    model = tiny_model(kind)
    program = symbolic_layer(kind)
    x = torch.randn(1, length, 64, generator=torch.Generator().manual_seed(length))
    cos, sin = position_embeddings(model, length)
    layer = copy.deepcopy(decoder_layers(model)[0]).double()
    with torch.no_grad():
        out = layer(x.double(), attention_mask=None,
                    position_embeddings=(cos.double(), sin.double()))
    want = (out[0] if isinstance(out, tuple) else out).numpy()
    check_both_levels(program, (x, cos, sin), [want])


@pytest.mark.parametrize("length", LENGTHS)
def test_whole_model_at_any_length(length: int) -> None:
    model = tiny_model("llama")
    program = symbolic_model("llama")
    ids = torch.randint(0, 97, (1, length), generator=torch.Generator().manual_seed(length))
    with torch.no_grad():
        want = copy.deepcopy(model).double()(input_ids=ids, use_cache=False).logits.numpy()
    (logits,) = check_both_levels(program, (ids,), [want])
    assert (logits.argmax(-1) == want.argmax(-1)).all()


def test_layer_inputs_must_agree_on_the_length() -> None:
    model = tiny_model("llama")
    program = symbolic_layer("llama")
    cos, sin = position_embeddings(model, 8)
    with pytest.raises(CaptureError, match=r"input 'cos' dim 1 is 8, but input "
                       r"'hidden_states' dim 1 binds symbol 'seq' to 7"):
        program.arguments(torch.zeros(1, 7, 64), cos, sin)
    cos, sin = position_embeddings(model, MAX + 1)
    with pytest.raises(CaptureError, match=r"is 129, outside \[1, 128\]"):
        program.arguments(torch.zeros(1, MAX + 1, 64), cos, sin)


def test_dynamic_capture_options_of_models() -> None:
    with pytest.raises(CaptureError, match="pass dynamic=True"):
        capture_model(tiny_model("llama"), 7, max_seq=64)
    with pytest.raises(CaptureError, match=r"example length in \[2, 4\]"):
        capture_layer(tiny_model("llama"), 7, dynamic=True, max_seq=4)
