"""KV-cache steps: the prefill and decode programs of tiny Llama and Qwen2 models.

Captured once each (symbolic in the prompt length and in the cache length), checked
against the model itself: the Torch-IR prefill's logits at the last position, the caches it
writes (the keys and values transformers' own cache holds), and greedy tokens through
:class:`llmopt.Generator` on the CPU (Kernel IR interpreted, with the decode step's
independent launches fused) equal to ``model.generate``.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_models import tiny_model  # noqa: E402

import llmopt  # noqa: E402
from llmopt.dialects import kernel  # noqa: E402
from llmopt.dialects._updates import UPDATES_ATTR, updated_results  # noqa: E402
from llmopt.frontend.capture import CaptureError  # noqa: E402
from llmopt.frontend.decode import (  # noqa: E402
    cache_names,
    cache_shape,
    capture_decode,
    capture_prefill,
)
from llmopt.generation import GenerationError  # noqa: E402
from llmopt.interp import run  # noqa: E402

KINDS = ("llama", "qwen2")


def arrays(args: list) -> list:
    """A program's arguments for the interpreter: tensors as arrays, symbols as ints."""
    return [a.numpy() if isinstance(a, torch.Tensor) else a for a in args]


@pytest.mark.parametrize("kind", KINDS)
def test_steps_write_the_caches_and_match_the_model(kind: str) -> None:
    model = tiny_model(kind)
    prefill, decode = capture_prefill(model, 24), capture_decode(model, 24)
    names = cache_names(2)
    assert prefill.updated_inputs == names and decode.updated_inputs == names
    assert len(updated_results(decode.func)) == 4
    assert UPDATES_ATTR in str(decode.module)
    ids = torch.randint(0, 97, (1, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = model(ids, use_cache=True)
    caches = [np.random.default_rng(k).standard_normal(cache_shape(model, 9), np.float32)
              for k in range(4)]  # garbage: prefill overwrites every row
    out = run(prefill.module, arrays(prefill.arguments(
        ids[:, :8], *(torch.from_numpy(c[:8]) for c in caches))))
    np.testing.assert_allclose(out[0], want.logits[0, 7:8].numpy(), atol=2e-5)
    layers = want.past_key_values.layers
    for layer in range(2):  # transformers' cache: [1, kv_heads, seq, head_dim]
        for kind_k, (got, ref) in enumerate(zip(out[1 + 2 * layer:3 + 2 * layer],
                                                (layers[layer].keys, layers[layer].values),
                                                strict=True)):
            np.testing.assert_allclose(got, ref[0, :, :8].transpose(0, 1).numpy(),
                                       atol=1e-5, err_msg=f"layer {layer} {'kv'[kind_k]}")
    grown = [np.concatenate([c, np.zeros_like(c[:1])]) for c in out[1:]]
    step = run(decode.module, arrays(decode.arguments(
        ids[:, 8:9], *(torch.from_numpy(c) for c in grown))))
    np.testing.assert_allclose(step[0], want.logits[0, 8:9].numpy(), atol=2e-5)
    np.testing.assert_array_equal(step[1][:8], grown[0][:8])  # earlier rows untouched


@pytest.mark.parametrize("kind", KINDS)
def test_generator_on_the_cpu_matches_generate(kind: str) -> None:
    model = tiny_model(kind)
    gen = llmopt.Generator(model, max_ctx=20, device="cpu")
    prompt = torch.randint(0, 97, (1, 6), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        want = model.generate(prompt, max_new_tokens=10, min_new_tokens=10, do_sample=False)
    out = gen.generate(prompt, 10)
    assert out.tokens == want[0, 6:].tolist()
    launched = [op.kernel.root_reference.data for op in gen.decode.module.walk()
                if isinstance(op, kernel.LaunchOp)]
    fused = [name for name in launched if "__" in name]  # fuse-launches' kernels
    assert len(fused) >= 2, launched  # a layer's rotary embeddings of q and k, at least
    assert out.compile_seconds > 0 and out.decode_seconds > 0
    again = gen.generate(prompt[:, :3], 4)  # the same programs, another prompt length
    with torch.no_grad():
        want = model.generate(prompt[:, :3], max_new_tokens=4, min_new_tokens=4,
                              do_sample=False)
    assert again.tokens == want[0, 3:].tolist() and again.compile_seconds == 0


def test_generator_refuses_what_it_cannot_serve() -> None:
    gen = llmopt.Generator(tiny_model("llama"), max_ctx=8, device="cpu")
    with pytest.raises(GenerationError, match="above max_ctx 8"):
        gen.generate([1, 2, 3, 4], 6)
    with pytest.raises(GenerationError, match="empty"):
        gen.generate([], 2)
    with pytest.raises(GenerationError, match="outside the vocabulary"):
        gen.generate([1, 97], 2)
    with pytest.raises(CaptureError, match="at least 2"):
        capture_decode(tiny_model("llama"), 1)
    with pytest.raises(GenerationError, match="steps_per_graph must be 0 or more, got -1"):
        llmopt.Generator(tiny_model("llama"), max_ctx=8, device="cpu", steps_per_graph=-1)


@pytest.mark.parametrize("kind", KINDS)
def test_tails_keep_the_generator_s_tokens(kind: str) -> None:
    """``fuse-tails`` in the decode step: by default each RMSNorm after a residual sum runs
    in the last block of the product before it; with many rounds allowed, chains and
    strided tails too (the rotary embeddings, the attention's merge), and the tokens stay
    ``model.generate``'s (Kernel IR interpreted with its race checks)."""
    from llmopt import registry

    model = tiny_model(kind)
    # The rotary embeddings as a kernel of their own (``index-set-split`` puts them inside
    # the projections), so that they can be a strided tail.
    base = registry.without("lower-to-cuda", "index-set-split")
    default = registry.insert_before(base, "plan-buffers", "fuse-tails")
    step = capture_decode(model, 20).module
    to_kernel, _ = registry.split_at_level(default, "kernel")
    llmopt.lower(step, ",".join(to_kernel))
    tails = [op for op in step.walk() if isinstance(op, kernel.LastBlockOp)]
    assert len(tails) >= 2, "no RMSNorm joined a product"
    many = registry.insert_before(base, "plan-buffers", "fuse-tails{max_rounds=16}")
    gen = llmopt.Generator(model, max_ctx=16, device="cpu", pipeline=many)
    prompt = torch.randint(0, 97, (1, 5), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        want = model.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False)
    assert gen.generate(prompt, 8).tokens == want[0, 5:].tolist()
    chained = [op for op in gen.decode.module.walk() if isinstance(op, kernel.LastBlockOp)]
    assert len(chained) > len(tails)
    launched = sum(isinstance(op, kernel.LaunchOp) for op in step.walk())
    assert gen.launches_per_step < launched  # the longer tails take more launches in


@pytest.mark.parametrize("kind", KINDS)
def test_128_new_tokens_from_a_checkpoint_on_the_cpu(kind: str, tmp_path: object) -> None:
    """A tiny model saved as a Hugging Face checkpoint (safetensors) and loaded back by
    ``build_model``: 128 greedy tokens in FP32, every one ``model.generate``'s, the cache
    growing through 131 lengths of one decode program."""
    from pathlib import Path

    from llmopt.frontend.models import build_model

    source = tiny_model(kind)
    source.config.max_position_embeddings = 256
    source.save_pretrained(Path(str(tmp_path)))
    model = build_model(Path(str(tmp_path)))
    prompt = torch.randint(0, 97, (1, 4), generator=torch.Generator().manual_seed(11))
    with torch.no_grad():
        want = model.generate(prompt, max_new_tokens=128, min_new_tokens=128, do_sample=False)
    gen = llmopt.Generator(model, max_ctx=4 + 127, device="cpu")
    assert gen.generate(prompt, 128).tokens == want[0, 4:].tolist()
