"""``torch.compile(backend="llmopt")`` on the GPU, for both models at their real dimensions.

Each model (random weights, seeded, float32 with TF32 off, llmopt's causal attention) runs
under the backend and under ``llmopt.compile`` (both replayed from CUDA graphs) at a prompt
length no tile divides. Logits must match eager PyTorch in float64 within ``TOL`` (relative to
the largest logit) and agree on the argmax; the backend's median time must be within 10% of
``llmopt.compile``'s on the same model (the backend adds a shape-key lookup per call and the
graph's argument handling). Run on a GPU host: ``python -m pytest -m gpu
test/gpu/test_torch_compile_gpu.py -q -s``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.gpu

TOL = 2e-3
SEQ = 100


def _median_ms(fn: Callable[[], Any], reps: int = 20, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


@pytest.mark.parametrize("preset", ["tinyllama", "qwen2.5-7b"])
def test_backend_logits_and_time_against_llmopt_compile(preset: str) -> None:
    import llmopt
    from llmopt.frontend.models import ATTENTION, build_model, register_attention

    torch.backends.cuda.matmul.allow_tf32 = False
    model = build_model(preset, device="cuda", seed=0)
    register_attention()
    model.config._attn_implementation = ATTENTION
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (1, SEQ), generator=gen).cuda()

    def logits(input_ids: torch.Tensor) -> torch.Tensor:
        return model(input_ids=input_ids, use_cache=False).logits

    torch._dynamo.reset()
    with torch.no_grad():
        compiled = torch.compile(logits, backend="llmopt", options={"cuda_graph": True})
        got = compiled(ids).clone()
        reference = llmopt.compile(logits, (ids,), cuda_graph=True)
        baseline = reference(ids).clone()
        wide = copy.deepcopy(model).double()
        want = wide(input_ids=ids, use_cache=False).logits
        del wide
        rel = float((got.double() - want).abs().max() / want.abs().max())
        rel_compile = float((baseline.double() - want).abs().max() / want.abs().max())
        assert rel < TOL, (rel, rel_compile)
        assert (got.argmax(-1) == want.argmax(-1)).float().mean() > 0.99

        backend_ms = _median_ms(lambda: compiled(ids))
        compile_ms = _median_ms(lambda: reference(ids))
    print(f"{preset}: backend {backend_ms:.3f} ms, llmopt.compile {compile_ms:.3f} ms, "
          f"rel error {rel:.2e} (llmopt.compile {rel_compile:.2e})")
    assert backend_ms <= 1.10 * compile_ms, (backend_ms, compile_ms)


def test_backend_one_symbolic_program_on_the_gpu() -> None:
    """``dynamic=True`` on the GPU: two layers of TinyLlama at its real dimensions, called at
    lengths no tile divides, are one Dynamo graph and one symbolic llmopt program (tensor
    cores and flash attention over the runtime length), each length's logits within ``TOL``
    of float64 with the same argmax."""
    from llmopt.dynamo import CompiledGraph, backend
    from llmopt.dynamo.runner import PartitionRunner
    from llmopt.frontend.models import ATTENTION, build_model, register_attention

    torch.backends.cuda.matmul.allow_tf32 = False
    model = build_model("tinyllama", device="cuda", seed=0, layers=2)
    register_attention()
    model.config._attn_implementation = ATTENTION
    wide = copy.deepcopy(model).double()
    graphs: list[CompiledGraph] = []

    def recording(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> CompiledGraph:
        graphs.append(backend(gm, example_inputs, options={"max_seq": 512}))
        return graphs[-1]

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=recording, dynamic=True)
    with torch.no_grad():
        for length in (37, 100, 300):
            ids = torch.randint(0, model.config.vocab_size, (1, length),
                                generator=torch.Generator().manual_seed(length)).cuda()
            got = compiled(input_ids=ids, use_cache=False).logits
            want = wide(input_ids=ids, use_cache=False).logits
            rel = float((got.double() - want).abs().max() / want.abs().max())
            assert rel < TOL, (length, rel)
            assert (got.argmax(-1) == want.argmax(-1)).float().mean() > 0.99
    (graph,) = graphs
    assert graph.symbolic_error is None and len(graph.cache) == 1
    (spec,) = graph.cache.values()
    pieces = [m for m in spec.module.modules() if isinstance(m, PartitionRunner)]
    assert len(pieces) == 1 and pieces[0].compiled is not None
    assert list(pieces[0].program.symbols.values()) == [(2, 512)]
