"""A symbolic decoder layer on the GPU: compiled once (one set of CUBINs, buffers planned for
the maximum) and run at lengths 1, 17, 100, 128 and 200 against PyTorch in float64, within
:func:`llmopt.numerics.tolerance` at that length; with ``cuda_graph`` one graph per length,
replayed when the length repeats; a length above the maximum is an error naming the argument
and the bound. A tiny layer (hidden 64) and a real-size TinyLlama layer."""

from __future__ import annotations

import copy
import functools
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.gpu

sys.path.insert(0, str(Path(__file__).parent.parent / "frontend"))
from test_models import tiny_model  # noqa: E402

import llmopt  # noqa: E402
from llmopt.numerics import compare, tolerance  # noqa: E402

LENGTHS = (1, 17, 100, 128, 200)
MAX = 256


@functools.cache
def compiled(which: str, cuda_graph: bool = False) -> tuple[Any, Any, Any]:
    """(model, symbolic module at Tensor IR for the tolerance, CompiledProgram)."""
    from llmopt.codegen.executor import CompiledProgram
    from llmopt.frontend.models import build_model, capture_layer
    from llmopt.target import current_target

    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    if which == "tiny":
        model = tiny_model("llama")
        model.config.max_position_embeddings = MAX
    else:
        model = build_model("tinyllama", dtype=torch.float32, seed=0, layers=1)
    program = capture_layer(model, 7, dynamic=True, max_seq=MAX)
    module = llmopt.lower(program.module.clone(),
                          llmopt.registry.with_arch("lower-to-cuda", current_target().arch))
    params = {k: v.cuda() for k, v in program.params.items()}
    return model, program.module, CompiledProgram(module, params=params, cuda_graph=cuda_graph)


def reference(model: Any, length: int) -> tuple[tuple[Any, ...], Any]:
    from llmopt.frontend.models import decoder_layers, position_embeddings

    hidden = model.config.hidden_size
    x = torch.randn(1, length, hidden, generator=torch.Generator().manual_seed(length))
    cos, sin = position_embeddings(model, length)
    layer = copy.deepcopy(decoder_layers(model)[0]).double()
    with torch.no_grad():
        out = layer(x.double(), attention_mask=None,
                    position_embeddings=(cos.double(), sin.double()))
    want = out[0] if isinstance(out, tuple) else out
    return (x, cos, sin), want.numpy()


@pytest.mark.parametrize("cuda_graph", [False, True])
@pytest.mark.parametrize("which", ["tiny", "tinyllama"])
def test_symbolic_layer_at_every_length(which: str, cuda_graph: bool) -> None:
    model, module, program = compiled(which, cuda_graph)
    for length in (*LENGTHS, 17):  # 17 twice: a replayed graph
        inputs, want = reference(model, length)
        (got,) = program(*(t.cuda() for t in inputs))
        torch.cuda.synchronize()
        assert tuple(got.shape) == want.shape
        _, rel = compare([got.double().cpu().numpy()], [want])
        assert rel <= tolerance(module, length), (length, rel)


def test_symbolic_layer_length_above_the_maximum() -> None:
    from llmopt.codegen.executor import ExecutorError

    model, _, program = compiled("tiny", cuda_graph=True)
    good, _ = reference(model, 5)
    program(*(t.cuda() for t in good))  # a length remembered by the call's cache
    inputs, _ = reference(model, MAX + 1)
    for _ in range(2):  # a failed call is not remembered
        with pytest.raises(ExecutorError, match=rf"dim 1 is {MAX + 1}, outside \[1, {MAX}\]"):
            program(*(t.cuda() for t in inputs))
    x, cos, sin = good
    mismatch = "'cos' dim 1 is 4, but input 'hidden_states' dim 1 binds symbol 'seq' to 5"
    with pytest.raises(ExecutorError, match=mismatch):  # cos shorter than x
        program(x.cuda(), cos[:, :4].cuda(), sin[:, :4].cuda())
