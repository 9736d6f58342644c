"""Whole Hugging Face models (Llama, Qwen2) and single decoder layers through every level.

Tiny configs (hidden 64, 4 heads, 2 key/value heads, head dim 16, vocabulary 97, two layers)
with seeded weights, perturbed so that norm weights and Qwen2's q/k/v biases are not their
trivial initial values. Sequence lengths 7 and 33 divide no tile or block. For each program:

* ``llmopt.check_numerics`` interprets it after every pass of ``lower-to-cuda`` on the CPU;
* the Kernel-IR program, interpreted, matches the Hugging Face module evaluated in float64
  within :func:`llmopt.numerics.tolerance`, and the logits' argmax agrees;
* every generated kernel compiles with NVRTC for sm_90 (no GPU needed).

The real TinyLlama / Qwen2.5-7B dimensions are captured on the ``meta`` device (no weight in
memory); their weights bind later.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import llmopt  # noqa: E402
from llmopt.frontend.capture import CapturedProgram, CaptureError, capture  # noqa: E402
from llmopt.frontend.models import (  # noqa: E402
    PRESETS,
    build_model,
    capture_layer,
    capture_model,
    load_weights,
    model_config,
    position_embeddings,
)
from llmopt.numerics import NumericsChecker, compare, tolerance  # noqa: E402

TO_KERNEL = ("torch-to-prim,canonicalize,prim-to-loop,fuse-kernels,canonicalize,cse,"
             "loop-to-tile,tile-to-kernel,canonicalize,cse")
TINY: dict[str, Any] = {
    "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 97, "max_position_embeddings": 128,
}  # fmt: skip


def tiny_config(kind: str) -> Any:
    """A two-layer Llama (intermediate 96, head dim 16) or Qwen2 (intermediate 100, q/k/v
    bias, rope theta 1e6) config."""
    if kind == "llama":
        return transformers.LlamaConfig(**TINY, intermediate_size=96, head_dim=16,
                                        rms_norm_eps=1e-5)
    return transformers.Qwen2Config(**TINY, intermediate_size=100, rms_norm_eps=1e-6,
                                    rope_theta=1e6)


@functools.cache
def tiny_model(kind: str, dtype: torch.dtype = torch.float32) -> Any:
    """A seeded tiny model whose every parameter is perturbed by N(0, 0.1) noise."""
    model = build_model(tiny_config(kind), dtype=dtype, seed=1)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=gen, dtype=torch.float64)
                       .to(param.dtype) * 0.1)
    return model


def compile_all(source: str) -> None:
    from llmopt.codegen.nvrtc import compile_cuda

    assert source.count("__global__") >= 1
    assert compile_cuda(source, arch="sm_90")[:4] == b"\x7fELF"


def numpy_args(program: CapturedProgram, inputs: Sequence[Any]) -> list[np.ndarray]:
    return [a.detach().numpy() for a in program.arguments(*inputs)]


def lower_checked(program: CapturedProgram) -> tuple[Any, Any]:
    """The program lowered to Kernel IR with every pass checked numerically (as
    ``check_numerics`` does), and the report."""
    module = program.module.clone()
    checker = NumericsChecker(module, seed=3)
    llmopt.lower(module, TO_KERNEL, callback=lambda p, m: checker.after(p.name, m))
    assert checker.report.ok, str(checker.report)
    return module, checker.report


def op_names(program: CapturedProgram) -> list[str]:
    return [op.name for op in program.func.body.block.ops]


# --- what the captured graphs hold --------------------------------------------------------------


def test_layer_graph_is_causal_gqa_attention() -> None:
    program = capture_layer(tiny_model("llama"), 7)
    names = op_names(program)
    assert names.count("torch.sdpa") == 1
    assert names.count("torch.linear") == 7
    assert not {"torch.where", "torch.le", "torch.logical_and"} & set(names)
    (sdpa,) = [op for op in program.func.body.block.ops if op.name == "torch.sdpa"]
    text = str(sdpa)
    assert "is_causal = true" in text and "enable_gqa = true" in text and "scale = 0.25" in text
    assert "tensor<1x4x7x16xf32>, tensor<1x2x7x16xf32>, tensor<1x2x7x16xf32>" in text
    assert program.input_names == ["hidden_states", "cos", "sin"]
    assert program.param_names[0] == "model.layers.0.self_attn.q_proj.weight"
    assert set(program.param_names) <= set(tiny_model("llama").state_dict())


def test_model_graph_has_embedding_rope_and_two_attentions() -> None:
    model = tiny_model("qwen2")
    program = capture_model(model, 7)
    names = op_names(program)
    for op, count in (("torch.embedding", 1), ("torch.arange", 1), ("torch.cos", 1),
                      ("torch.sin", 1), ("torch.sdpa", 2), ("torch.linear", 15)):
        assert names.count(op) == count, (op, names.count(op))
    assert program.input_names == ["input_ids"]
    fn_type = program.func.function_type
    assert str(fn_type.inputs.data[-1]) == "tensor<1x7xi64>"
    assert str(fn_type.outputs.data[0]) == "tensor<1x7x97xf32>"
    # Every weight is an argument named after its state_dict key; unused buffers are not.
    assert "model.layers.1.self_attn.q_proj.bias" in program.param_names
    assert "model.rotary_emb.inv_freq" in program.param_names
    assert "model.rotary_emb.original_inv_freq" not in program.param_names
    assert model.config._attn_implementation == "sdpa"  # restored after the capture
    assert "forward" not in model.__dict__


# --- every level against Hugging Face -----------------------------------------------------------


def hf_layer(model: Any, x: torch.Tensor) -> np.ndarray:
    """Layer 0 of ``model`` in float64 on ``x`` (causal, rotary for positions 0..n-1)."""
    wide = copy.deepcopy(model).double()
    cos, sin = position_embeddings(wide, x.shape[1])
    with torch.no_grad():
        out = wide.model.layers[0](x.double(), attention_mask=None,
                                   position_embeddings=(cos, sin))
    return (out[0] if isinstance(out, tuple) else out).numpy()


def hf_logits(model: Any, ids: torch.Tensor) -> np.ndarray:
    wide = copy.deepcopy(model).double()
    with torch.no_grad():
        return wide(input_ids=ids, use_cache=False).logits.numpy()


@pytest.mark.parametrize("seq", [7, 33])
@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_decoder_layer_every_level(kind: str, seq: int) -> None:
    model = tiny_model(kind)
    program = capture_layer(model, seq)
    report = llmopt.check_numerics(program.module, "lower-to-cuda", seed=3)
    assert report.ok, str(report)
    assert [p.name for p in report.passes][-1] == "kernel-to-cuda"

    kernel = llmopt.lower(program.module.clone(), TO_KERNEL)
    x = torch.randn(1, seq, 64, generator=torch.Generator().manual_seed(seq))
    cos, sin = position_embeddings(model, seq)
    (got,) = llmopt.interp.run(kernel, numpy_args(program, (x, cos, sin)))
    _, rel = compare([got], [hf_layer(model, x)])
    assert rel <= tolerance(program.module), (rel, tolerance(program.module))
    compile_all(llmopt.cuda_source(kernel))


@pytest.mark.parametrize("seq", [7, 32, 33])
@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_whole_model_every_level(kind: str, seq: int) -> None:
    """At every length each layer's attention is one flash-attention kernel (at 7 and 33
    tokens its last query and key blocks overhang the sequence)."""
    model = tiny_model(kind)
    program = capture_model(model, seq)
    tiled = llmopt.lower(program.module.clone(), "torch-to-prim,canonicalize,prim-to-loop,"
                         "fuse-kernels{recompute_limit=0},canonicalize,cse,hoist-reduce-factors,"
                         "flash-attention")
    flash = [op for op in tiled.walk() if "llmopt.flash" in op.attributes]
    layers = model.config.num_hidden_layers
    assert len(flash) == layers, flash
    kernel, report = lower_checked(program)
    assert {"fuse-kernels", "tile-to-kernel"} <= {p.name for p in report.passes}

    ids = torch.randint(0, 97, (1, seq), generator=torch.Generator().manual_seed(seq))
    (got,) = llmopt.interp.run(kernel, numpy_args(program, (ids,)))
    want = hf_logits(model, ids)
    _, rel = compare([got], [want])
    assert rel <= tolerance(program.module), (rel, tolerance(program.module))
    assert (got.argmax(-1) == want.argmax(-1)).all()
    compile_all(llmopt.cuda_source(kernel))


def test_whole_model_check_numerics_to_cuda() -> None:
    program = capture_model(tiny_model("llama"), 7)
    report = llmopt.check_numerics(program.module, "lower-to-cuda", seed=5)
    assert report.ok, str(report)


def test_float64_layer() -> None:
    model = tiny_model("qwen2", torch.float64)
    program = capture_layer(model, 7)
    assert "f64" in str(program.func.function_type)
    kernel, _ = lower_checked(program)
    x = torch.randn(1, 7, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    cos, sin = position_embeddings(model, 7)
    (got,) = llmopt.interp.run(kernel, numpy_args(program, (x, cos, sin)))
    assert got.dtype == np.float64
    _, rel = compare([got], [hf_layer(model, x)])
    # Hugging Face normalises in float32 even in a float64 model: float32's tolerance.
    assert rel <= tolerance(program.module) <= 1e-4


def test_float64_model_batch_two() -> None:
    model = tiny_model("llama", torch.float64)
    program = capture_model(model, 5, batch=2)
    assert str(program.func.function_type.outputs.data[0]) == "tensor<2x5x97xf64>"
    kernel, _ = lower_checked(program)
    ids = torch.randint(0, 97, (2, 5), generator=torch.Generator().manual_seed(1))
    (got,) = llmopt.interp.run(kernel, numpy_args(program, (ids,)))
    want = hf_logits(model, ids)
    _, rel = compare([got], [want])
    assert rel <= tolerance(program.module), rel
    assert (got.argmax(-1) == want.argmax(-1)).all()


# --- attention at the real head shapes ----------------------------------------------------------


@pytest.mark.parametrize("heads,kv_heads,head_dim,seq", [
    (32, 4, 64, 9),   # TinyLlama: GQA group 8
    (28, 4, 128, 5),  # Qwen2.5-7B: GQA group 7
    (8, 1, 64, 7),
])  # fmt: skip
def test_sdpa_real_head_shapes(heads: int, kv_heads: int, head_dim: int, seq: int) -> None:
    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        F = torch.nn.functional
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    gen = torch.Generator().manual_seed(heads)
    args = [torch.randn(1, h, seq, head_dim, generator=gen) for h in (heads, kv_heads, kv_heads)]
    program = capture(attention, tuple(args))
    kernel, _ = lower_checked(program)
    (got,) = llmopt.interp.run(kernel, [a.numpy() for a in args])
    want = attention(*[a.double() for a in args]).numpy()
    _, rel = compare([got], [want])
    assert rel <= tolerance(program.module), rel


@pytest.mark.parametrize("mask", ["bool", "float", "none"])
def test_sdpa_masks_and_scale(mask: str) -> None:
    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor
                  ) -> torch.Tensor:
        F = torch.nn.functional
        return F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask == "none" else m,
                                              scale=0.3)

    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=gen) for _ in range(3))
    keep = torch.arange(5)[None, :] <= torch.arange(5)[:, None] + 1
    m = keep if mask == "bool" else torch.randn(1, 5, 5, generator=gen)
    program = capture(attention, (q, k, v, m))
    kernel, _ = lower_checked(program)
    (got,) = llmopt.interp.run(kernel, [t.numpy() for t in (q, k, v, m)])
    want = attention(q.double(), k.double(), v.double(),
                     m if mask == "bool" else m.double()).numpy()
    _, rel = compare([got], [want])
    assert rel <= tolerance(program.module), rel


# --- meta capture and binding -------------------------------------------------------------------


def test_real_dimensions_capture_on_meta() -> None:
    model = build_model("qwen2.5-7b", device="meta", layers=2)
    assert next(model.parameters()).is_meta
    program = capture_model(model, 16)
    assert program.unbound == program.param_names  # names and shapes only
    types = dict(zip(program.param_names, program.func.function_type.inputs.data, strict=False))
    assert str(types["model.embed_tokens.weight"]) == "tensor<152064x3584xf32>"
    assert str(types["model.layers.1.self_attn.k_proj.bias"]) == "tensor<512xf32>"
    assert str(program.func.function_type.outputs.data[0]) == "tensor<1x16x152064xf32>"
    (sdpa, _) = [op for op in program.func.body.block.ops if op.name == "torch.sdpa"]
    assert "tensor<1x28x16x128xf32>, tensor<1x4x16x128xf32>" in str(sdpa)
    with pytest.raises(CaptureError, match="bind real tensors"):
        program.arguments(torch.zeros(1, 16, dtype=torch.long))

    layer = capture_layer(build_model("tinyllama", device="meta", layers=1), 8)
    assert "tensor<1x32x8x64xf32>, tensor<1x4x8x64xf32>" in str(layer.module)
    assert layer.param_names[0] == "model.layers.0.self_attn.q_proj.weight"


def test_bind_weights_from_a_checkpoint(tmp_path: Path) -> None:
    config = tiny_config("llama")
    real = build_model(config, seed=7)
    real.save_pretrained(tmp_path)  # config.json + model.safetensors, all local
    loaded = build_model(tmp_path)
    for name, tensor in real.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name

    meta = build_model(tmp_path / "config.json", device="meta")
    program = capture_model(meta, 7)
    with pytest.raises(CaptureError, match="still unbound"):
        program.bind({})
    bound = load_weights(program, tmp_path, model=meta)
    assert not bound.unbound and program.unbound  # bind returns a new program

    ids = torch.randint(0, 97, (1, 7), generator=torch.Generator().manual_seed(0))
    (got,) = llmopt.interp.run(bound.module, numpy_args(bound, (ids,)))
    _, rel = compare([got], [hf_logits(real, ids)])
    assert rel <= tolerance(bound.module)
    # A module binds by its parameter and buffer names too.
    same = program.bind(real)
    assert all(torch.equal(same.params[n], bound.params[n]) for n in program.param_names)


def test_bind_checks_shapes() -> None:
    program = capture_model(build_model(tiny_config("llama"), device="meta"), 7)
    with pytest.raises(CaptureError, match="model.norm.weight"):
        program.bind({"model.norm.weight": torch.zeros(3)}, strict=False)
    partial = program.bind({"model.norm.weight": torch.ones(64)}, strict=False)
    assert "model.norm.weight" not in partial.unbound


def test_presets_and_configs(tmp_path: Path) -> None:
    tiny = model_config("tinyllama")
    assert (tiny.hidden_size, tiny.num_key_value_heads, tiny.head_dim, tiny.vocab_size) == \
        (2048, 4, 64, 32000)
    qwen = model_config("qwen2.5-7b", layers=3)
    assert (qwen.num_hidden_layers, len(qwen.layer_types), qwen.rope_parameters["rope_theta"]) \
        == (3, 3, 1e6)
    assert set(PRESETS) == {"tinyllama", "qwen2.5-7b"}
    tiny_config("qwen2").save_pretrained(tmp_path)
    model = build_model(tmp_path / "config.json", seed=0)  # no weights there: seeded init
    again = build_model(tmp_path, seed=0)
    assert torch.equal(model.lm_head.weight, again.lm_head.weight)
    with pytest.raises(CaptureError, match="neither a preset"):
        model_config("no-such-model")


# --- what capture still rejects -----------------------------------------------------------------


def test_unsupported_op_names_op_and_line() -> None:
    """Under torch.export, transformers' own SDPA path materialises a mask of packed-sequence
    ops (cumsum, diff, advanced indexing); capture names the first unsupported one and the
    user's line that led to it."""
    model = tiny_model("llama")

    class Plain(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=input_ids, use_cache=False).logits

    line = inspect.getsourcelines(Plain.forward)[1] + 1
    with pytest.raises(CaptureError) as info:
        capture(Plain(), (torch.zeros(1, 7, dtype=torch.long),))
    message = str(info.value)
    assert "unsupported op aten.diff.default" in message
    assert f"{__file__}:{line}" in message
