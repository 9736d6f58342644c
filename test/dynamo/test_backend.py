"""``torch.compile(backend="llmopt")`` on the CPU: the Kernel-IR interpreter runs the pieces.

References are the same modules evaluated in float64 (copies) on the same inputs; llmopt runs
float32. Tolerance: errors relative to the largest reference value stay below ``TOL = 1e-4``
(float32 rounding over reductions of at most a few hundred terms, as in the model tests).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import llmopt  # noqa: E402
from llmopt.dynamo import (  # noqa: E402
    CompiledGraph,
    LlmoptFallbackWarning,
    LlmoptInterpreterWarning,
    backend,
    symbolic_dims,
)
from llmopt.dynamo import compiler as backend_module  # noqa: E402
from llmopt.dynamo.runner import PartitionRunner  # noqa: E402

TOL = 1e-4
SIZES: dict[str, Any] = {
    "hidden_size": 64, "intermediate_size": 48, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 61, "max_position_embeddings": 64,
    "num_hidden_layers": 1,
}  # fmt: skip
"""Heads of 16: the smallest head dimension ``flash-attention`` fuses."""
MASK_OPS = ["aten.index.Tensor", "aten.diff.default", "aten.cumsum.default"]
"""What transformers' default (SDPA) mask builds from under ``torch.compile``
(``masking_utils``: packed-sequence detection), none with a Torch IR translation."""


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).abs().max() / want.abs().max())


def hf_model(model_type: str, attention: str | None = None) -> Any:
    """A seeded one-layer model with transformers' default attention, or ``attention``."""
    from llmopt.frontend.models import build_model, register_attention

    model = build_model({"model_type": model_type, **SIZES}, seed=4)
    if attention is not None:
        register_attention()
        model.config._attn_implementation = attention
    return model


def runners(graph: CompiledGraph) -> list[PartitionRunner]:
    """The compiled pieces of every shape of ``graph``."""
    return [m for spec in graph.cache.values() for m in spec.module.modules()
            if isinstance(m, PartitionRunner)]


class Recorder:
    """A backend that counts the graphs Dynamo compiles and hands them to llmopt's."""

    def __init__(self) -> None:
        self.graphs: list[CompiledGraph] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> CompiledGraph:
        self.graphs.append(backend(gm, example_inputs))
        return self.graphs[-1]


class CumsumMlp(torch.nn.Module):
    """linear -> cumsum (not in Torch IR) -> silu -> linear."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(5)
        self.up = torch.nn.Parameter(torch.randn(24, 16, generator=gen) / 4)
        self.down = torch.nn.Parameter(torch.randn(16, 24, generator=gen) / 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.linear(x, self.up)
        h = torch.cumsum(h, dim=-1)
        return torch.nn.functional.linear(torch.nn.functional.silu(h), self.down)


def test_registered_through_the_entry_point() -> None:
    from torch._dynamo.backends.registry import lookup_backend

    assert "llmopt" in torch._dynamo.list_backends()
    assert lookup_backend("llmopt") is backend


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_hf_model_matches_eager(model_type: str) -> None:
    """transformers' default attention, what a user gets: under ``torch.compile`` it builds
    an explicit boolean mask (``MASK_OPS`` run in PyTorch, the comparisons and ``and``s in
    llmopt) and calls SDPA with it at 7 tokens, which no attention block divides; the
    attention is one flash kernel reading that mask."""
    model = hf_model(model_type)
    ids = torch.randint(0, SIZES["vocab_size"], (1, 7), generator=torch.Generator().manual_seed(6))
    recorder = Recorder()
    compiled = torch.compile(model, backend=recorder)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        got = compiled(input_ids=ids, use_cache=False).logits
        want = copy.deepcopy(model).double()(input_ids=ids, use_cache=False).logits
    said = [w for w in caught if issubclass(w.category, LlmoptFallbackWarning)]
    assert len(said) == 1 and "aten.cumsum.default x1" in str(said[0].message)
    (graph,) = recorder.graphs
    assert sorted(f.op for f in graph.fallbacks) == sorted(MASK_OPS)
    assert all("masking_utils.py" in (f.where or "") for f in graph.fallbacks)
    flash = [r for r in runners(graph) if "llmopt.flash" in r.ir]
    assert len(flash) == 1 and "xi1>" in flash[0].ir  # the mask, an input of the kernel
    assert rel_error(got, want) < TOL
    assert (got.argmax(-1) == want.argmax(-1)).all()


def test_hf_model_with_llmopt_attention_is_one_piece() -> None:
    """``llmopt_sdpa`` (transformers' SDPA with ``is_causal`` for prefill without padding)
    builds no mask: nothing falls back and the whole model is one llmopt program."""
    from llmopt.frontend.models import ATTENTION

    model = hf_model("llama", ATTENTION)
    ids = torch.randint(0, SIZES["vocab_size"], (1, 9), generator=torch.Generator().manual_seed(13))
    recorder = Recorder()
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        got = torch.compile(model, backend=recorder)(input_ids=ids, use_cache=False).logits
        want = copy.deepcopy(model).double()(input_ids=ids, use_cache=False).logits
    assert not [w for w in caught if issubclass(w.category, LlmoptFallbackWarning)]
    (graph,) = recorder.graphs
    (spec,) = graph.cache.values()
    assert spec.partitions == 1 and not graph.fallbacks
    assert rel_error(got, want) < TOL


def test_unsupported_op_runs_in_pytorch() -> None:
    model = CumsumMlp()
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(7))
    recorder = Recorder()
    with pytest.warns(LlmoptFallbackWarning, match=r"aten\.cumsum\.default x1"), \
            torch.no_grad():
        got = torch.compile(model, backend=recorder)(x)
    want = copy.deepcopy(model).double()(x.double()).detach()
    assert rel_error(got, want) < TOL
    (graph,) = recorder.graphs
    (spec,) = graph.cache.values()
    assert spec.partitions == 2  # the linear before the cumsum, silu and linear after it
    assert [f.op for f in graph.fallbacks] == ["aten.cumsum.default"]

    explanation = llmopt.explain(model, (x,))
    assert explanation.fallback_ops == ["aten.cumsum.default"]
    assert explanation.graphs == 1 and explanation.partitions == 2
    assert "test_backend.py" in (explanation.fallbacks[0].where or "")


def test_fallback_warning_comes_once() -> None:
    model = CumsumMlp()
    compiled = torch.compile(model, backend="llmopt", dynamic=True)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        for length in (3, 4, 3):
            compiled(torch.randn(1, length, 16))
    fallbacks = [w for w in caught if issubclass(w.category, LlmoptFallbackWarning)]
    assert len(fallbacks) == 1, [str(w.message) for w in fallbacks]


def test_graph_break() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = torch.softmax(x @ w, dim=-1)
        print("between the graphs")  # a graph break: Dynamo compiles two graphs
        return torch.nn.functional.silu(h * 3.0 + x)

    gen = torch.Generator().manual_seed(8)
    x, w = torch.randn(4, 8, generator=gen), torch.randn(8, 8, generator=gen)
    recorder = Recorder()
    with torch.no_grad():
        got = torch.compile(fn, backend=recorder)(x, w)
    want = fn(x.double(), w.double())
    assert len(recorder.graphs) == 2
    assert all(g.cache and not g.fallbacks for g in recorder.graphs)
    assert rel_error(got, want) < TOL
    assert llmopt.explain(fn, (x, w)).graphs == 2


def test_new_length_does_not_recompile() -> None:
    """With ``dynamic=True`` Dynamo traces one symbolic graph and the backend compiles one
    symbolic program: lengths 5, 9 and 5 again are one Dynamo compile and one llmopt
    program, whose symbol (export's, for Dynamo's) is bounded by ``max_seq``."""
    norm = torch.nn.RMSNorm(16, eps=1e-5)
    proj = torch.nn.Linear(16, 12)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(16) + 0.5)
    model = torch.nn.Sequential(norm, proj)
    recorder = Recorder()
    compiled = torch.compile(model, backend=recorder, dynamic=True)
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    gen = torch.Generator().manual_seed(9)
    with torch.no_grad():
        for length in (5, 9, 5):
            x = torch.randn(1, length, 16, generator=gen)
            want = copy.deepcopy(model).double()(x.double())
            assert rel_error(compiled(x), want) < TOL
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - frames == 1
    (graph,) = recorder.graphs
    assert graph.symbolic_error is None
    assert len(graph.cache) == 1
    (runner,) = runners(graph)
    assert list(runner.program.symbols.values()) == [(2, 2048)]
    (dims,) = graph.symbolic.values()
    assert list(dims) == [1]  # the length, Dynamo's symbol (mapped as capture's dynamic=)
    assert symbolic_dims(graph.gm) == graph.symbolic


def test_options() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 2.0, dim=-1)

    x = torch.randn(3, 10, generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        got = torch.compile(fn, backend="llmopt", options={"dtype": "float64"})(x)
    assert got.dtype == torch.float32  # results in the graph's dtype
    assert rel_error(got, fn(x.double())) < 1e-6  # computed in float64, rounded once
    with pytest.raises(ValueError, match="unknown llmopt backend option"):
        backend_module.BackendOptions.parse({"cuda_grpah": True})
    with pytest.raises(ValueError, match="floating-point"):
        backend_module.BackendOptions.parse({"dtype": torch.int32})


def test_cpu_interpreter_said_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend_module, "_SAID", set())

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x) + 1.0

    x = torch.randn(6, generator=torch.Generator().manual_seed(11))
    compiled = torch.compile(fn, backend="llmopt", dynamic=True)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        for n in (6, 7):
            out = compiled(x[:n] if n <= 6 else torch.randn(n))
            assert out.shape == (n,)
    said = [w for w in caught if issubclass(w.category, LlmoptInterpreterWarning)]
    assert len(said) == 1 and "Kernel-IR interpreter" in str(said[0].message)


def test_refused_translation_falls_back() -> None:
    """``div`` has a converter but refuses a rounding mode: that node alone runs in PyTorch
    (the graph is partitioned again without it), the rest is compiled."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.div(torch.exp(x) * 7.0, 2.0, rounding_mode="floor") + torch.tanh(x)

    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(12))
    recorder = Recorder()
    with pytest.warns(LlmoptFallbackWarning, match=r"aten\.div\.Tensor_mode x1 \(translation "
                      r"failed: division with rounding_mode='floor'"), torch.no_grad():
        got = torch.compile(fn, backend=recorder)(x)
    assert rel_error(got, fn(x.double())) < TOL
    (graph,) = recorder.graphs
    (spec,) = graph.cache.values()
    assert spec.partitions == 2 and [f.op for f in spec.fallbacks] == ["aten.div.Tensor_mode"]


def test_hf_model_one_program_for_every_length() -> None:
    """A tiny Llama with llmopt's attention under ``dynamic=True``: one Dynamo graph, one
    symbolic llmopt program in one piece (nothing left to PyTorch), within ``TOL`` of
    float64 at every length; a length above ``max_seq`` gets a program of its own."""
    from llmopt.frontend.models import ATTENTION

    model = hf_model("llama", ATTENTION)
    wide = copy.deepcopy(model).double()
    graphs: list[CompiledGraph] = []

    def short(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> CompiledGraph:
        graphs.append(backend(gm, example_inputs, options={"max_seq": 16}))
        return graphs[-1]

    compiled = torch.compile(model, backend=short, dynamic=True)
    with torch.no_grad():
        for length in (7, 12, 7, 20):
            ids = torch.randint(0, SIZES["vocab_size"], (1, length),
                                generator=torch.Generator().manual_seed(length))
            got = compiled(input_ids=ids, use_cache=False).logits
            want = wide(input_ids=ids, use_cache=False).logits
            assert rel_error(got, want) < TOL, length
    (graph,) = graphs
    assert graph.symbolic_error is None and not graph.fallbacks
    keys = list(graph.cache)
    assert len(keys) == 2 and keys[0][0] == "symbolic" and keys[1][0] != "symbolic"
    symbolic = [r for r in graph.cache[keys[0]].module.modules()
                if isinstance(r, PartitionRunner)]
    assert len(symbolic) == 1 and list(symbolic[0].program.symbols.values()) == [(2, 16)]


@pytest.mark.parametrize("bad", [1, 0, "long", True])
def test_max_seq_option_is_checked(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_seq"):
        backend_module.BackendOptions.parse({"max_seq": bad})
