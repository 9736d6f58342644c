"""Decode with a KV cache on the GPU: the Generator's tokens equal Hugging Face greedy
``generate`` with every decode step replayed from one CUDA graph (the cache length read
from memory) and with the steps launched from the host; the program the graph replays is
lowered once and serves every length. A ``lengths-in-memory`` program gives the CPU
interpreter's results at every length, eagerly and from one graph."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.gpu

sys.path.insert(0, str(Path(__file__).parent.parent / "frontend"))
from test_models import tiny_model  # noqa: E402

import llmopt  # noqa: E402

LIT = Path(__file__).parent.parent / "passes" / "kernel" / "lengths-in-memory.mlir"


def _needs_gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")


def _reference(model: object, prompt: torch.Tensor, new: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=new, min_new_tokens=new,  # type: ignore[attr-defined]
                             do_sample=False)
    return out[0, prompt.shape[1]:].tolist()


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("cuda_graph", [True, False])
def test_generator_matches_generate(kind: str, cuda_graph: bool) -> None:
    _needs_gpu()
    model = tiny_model(kind)
    gen = llmopt.Generator(model, max_ctx=48, device="cuda", cuda_graph=cuda_graph)
    decode = gen._programs[1]
    assert decode.one_graph == cuda_graph
    prompt = torch.randint(0, 97, (1, 7), generator=torch.Generator().manual_seed(5))
    assert gen.generate(prompt, 30).tokens == _reference(model, prompt, 30)
    graph = decode._graph
    # Another prompt length: the same programs, and the same graph.
    assert gen.generate(prompt[:, :2], 12).tokens == _reference(model, prompt[:, :2], 12)
    assert decode._graph is graph


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("steps", [0, 1, 3, 8])
def test_several_steps_a_replay_keep_generate_s_tokens(kind: str, steps: int) -> None:
    """With ``steps_per_graph`` one replay runs up to that many decode steps, each picking
    its token on the GPU for the next: the tokens of every count are Hugging Face's, across
    prompts of other lengths, and only graphs of powers of two steps are captured."""
    _needs_gpu()
    model = tiny_model(kind)
    gen = llmopt.Generator(model, max_ctx=48, device="cuda", steps_per_graph=steps)
    prompt = torch.randint(0, 97, (1, 7), generator=torch.Generator().manual_seed(15))
    assert gen.generate(prompt, 30).tokens == _reference(model, prompt, 30)
    assert gen.generate(prompt[:, :3], 21).tokens == _reference(model, prompt[:, :3], 21)
    assert gen.generate(prompt[:, :5], 2).tokens == _reference(model, prompt[:, :5], 2)
    counts = sorted(gen._steps_graphs)
    assert all(c & (c - 1) == 0 and c <= max(steps, 1) for c in counts), counts
    assert bool(counts) == (steps > 0)


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_norms_inside_the_projections_match_generate(kind: str) -> None:
    """With ``recompute-into-products`` each RMSNorm runs inside the projections after it
    (``warp-gemv`` staging the normalised row in shared memory): the same tokens."""
    _needs_gpu()
    from llmopt import registry

    model = tiny_model(kind)
    pipeline = registry.insert_before("lower-to-cuda", "hoist-reduce-factors",
                                      "recompute-into-products")
    gen = llmopt.Generator(model, max_ctx=40, device="cuda", pipeline=pipeline)
    prompt = torch.randint(0, 97, (1, 5), generator=torch.Generator().manual_seed(9))
    assert gen.generate(prompt, 24).tokens == _reference(model, prompt, 24)


def test_a_second_generator_parses_the_cached_programs(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _needs_gpu()
    monkeypatch.setenv("LLMOPT_CACHE_DIR", str(tmp_path))
    model = tiny_model("llama")
    first = llmopt.Generator(model, max_ctx=24, device="cuda")
    second = llmopt.Generator(model, max_ctx=24, device="cuda")
    assert set(first.timings) == {"prefill", "decode", "compile"}
    assert set(second.timings) == {"prefill_cached", "decode_cached", "compile"}
    assert not second._captured  # nothing was captured
    prompt = [3, 1, 4, 1, 5]
    assert second.generate(prompt, 9).tokens == first.generate(prompt, 9).tokens \
        == _reference(model, torch.tensor([prompt]), 9)


def _lit_module() -> object:
    return llmopt.parse(LIT.read_text().split("// ERRORS BELOW")[0])


@pytest.mark.parametrize("cuda_graph", [False, True])
def test_lengths_in_memory_program_at_every_length(cuda_graph: bool) -> None:
    _needs_gpu()
    import llmopt.interp
    from llmopt.codegen.executor import CompiledProgram

    module = llmopt.lower(_lit_module(), "lengths-in-memory")
    program = CompiledProgram(llmopt.lower(module.clone(), "kernel-to-cuda"),
                              cuda_graph=cuda_graph)
    assert program.one_graph
    rng = np.random.default_rng(0)
    for ctx in (5, 64, 1, 33, 5):
        cache = rng.standard_normal((ctx, 4)).astype(np.float32)
        want = llmopt.interp.run(module, [cache.copy()], check_races=False)
        got = program(torch.from_numpy(cache).cuda())
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g.cpu().numpy(), w)
    if cuda_graph:
        assert program.graph_captured and not program._graphs


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_bfloat16_generator_matches_generate_or_parts_at_a_near_tie(kind: str) -> None:
    """bf16 weights and caches: HF's bf16 greedy tokens, or a divergence where HF's own
    logits are within the bf16 rounding of a tie (reported with the gap)."""
    _needs_gpu()
    from llmopt.generation import divergence

    model = tiny_model(kind, torch.bfloat16).cuda()
    gen = llmopt.Generator(model, max_ctx=48, device="cuda")
    prompt = torch.randint(0, 97, (1, 7), generator=torch.Generator().manual_seed(6))
    tokens = gen.generate(prompt.cuda(), 24).tokens
    want = _reference(model, prompt.cuda(), 24)
    div = divergence(model, prompt[0].tolist(), tokens, want)
    assert div is None or div["near_tie"], div


@pytest.mark.parametrize("options", ["", " shuffle=true prefetch_bytes=32768"])
def test_warp_gemv_kernels_match_the_interpreter(options: str) -> None:
    """The matrix-vector products of warp-gemv's lit test (ragged rows, a K the lanes do
    not divide, bf16 16-byte fragments) run on the GPU as the Kernel-IR interpreter runs
    them: rows finished through shared memory (the default) and by warp shuffles with
    weight prefetches."""
    _needs_gpu()
    import llmopt.interp
    from llmopt.codegen.executor import CompiledProgram

    text = (Path(__file__).parent.parent / "passes" / "tile" / "warp-gemv.mlir").read_text()
    rng = np.random.default_rng(1)
    for chunk in text.split("// -----"):
        module = llmopt.lower(llmopt.parse(chunk), f"warp-gemv{{rows=4{options}}},tile-to-kernel")
        program = CompiledProgram(llmopt.lower(module.clone(), "kernel-to-cuda"))
        fn = next(op for op in module.walk() if op.name == "func.func")
        args = []
        for arg in fn.args:
            shape = arg.type.get_shape()
            half = "bf16" in str(arg.type.element_type)
            value = rng.standard_normal(shape).astype(np.float32)
            args.append(torch.from_numpy(value).to(torch.bfloat16) if half
                        else torch.from_numpy(value))
        want = llmopt.interp.run(module, [a.float().numpy() if a.dtype == torch.bfloat16
                                          else a.numpy() for a in args])
        got = program(*(a.cuda() for a in args))
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g.float().cpu().numpy(), np.asarray(w, np.float32),
                                       rtol=1e-2, atol=1e-2)


TAILS = Path(__file__).parent.parent / "passes" / "kernel" / "fuse-tails.mlir"


@pytest.mark.parametrize("rounds", [1, 2])
@pytest.mark.parametrize("cuda_graph", [False, True])
def test_tails_run_in_the_last_block_as_interpreted(rounds: int, cuda_graph: bool) -> None:
    """fuse-tails' lit program (a sum in the last block, a chain, a tail of two blocks in a
    loop, one of twice the block's threads strided) gives the interpreter's results on the
    GPU, call after call (the counter is back at zero after every launch), eagerly and from
    a CUDA graph."""
    _needs_gpu()
    import llmopt.interp
    from llmopt.codegen.executor import CompiledProgram

    module = llmopt.lower(llmopt.parse(TAILS.read_text()), f"fuse-tails{{max_rounds={rounds}}}")
    program = CompiledProgram(llmopt.lower(module.clone(), "kernel-to-cuda"),
                              cuda_graph=cuda_graph)
    rng = np.random.default_rng(1)
    for _ in range(4):
        x, y = (rng.standard_normal(64).astype(np.float32) for _ in range(2))
        want = llmopt.interp.run(module, [x.copy(), y.copy()])
        got = program(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda())
        for g, w in zip(got, want, strict=True):
            # the interpreter poisons what no kernel writes (a sum's second, unused slot)
            # with NaN; every written element must match. The sums run in the same order
            # on both: equal up to fused multiply-adds.
            written = ~np.isnan(w)
            assert written.any()
            np.testing.assert_allclose(g.cpu().numpy()[written], w[written],
                                       rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("rounds", [1, 16])
def test_tails_keep_generate_s_tokens_on_the_gpu(kind: str, rounds: int) -> None:
    """``fuse-tails`` in both programs (the RMSNorms in their products' last blocks; with
    16 rounds the rotary embeddings and the attention's merge too): the tokens stay."""
    _needs_gpu()
    from llmopt import registry

    model = tiny_model(kind)
    pipeline = registry.insert_before("lower-to-cuda", "plan-buffers",
                                      f"fuse-tails{{max_rounds={rounds}}}")
    gen = llmopt.Generator(model, max_ctx=40, device="cuda", pipeline=pipeline)
    prompt = torch.randint(0, 97, (1, 6), generator=torch.Generator().manual_seed(8))
    assert gen.generate(prompt, 24).tokens == _reference(model, prompt, 24)


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_128_new_tokens_from_a_checkpoint(kind: str, tmp_path: Path) -> None:
    """A tiny model saved as a Hugging Face checkpoint and loaded back: 128 greedy FP32
    tokens from one decode graph, every one ``model.generate``'s."""
    _needs_gpu()
    from llmopt.frontend.models import build_model

    source = tiny_model(kind)
    source.config.max_position_embeddings = 256
    source.save_pretrained(tmp_path)
    model = build_model(tmp_path)
    gen = llmopt.Generator(model, max_ctx=4 + 127, device="cuda")
    prompt = torch.randint(0, 97, (1, 4), generator=torch.Generator().manual_seed(11))
    assert gen.generate(prompt, 128).tokens == _reference(model, prompt, 128)
