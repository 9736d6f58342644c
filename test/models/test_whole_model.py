"""Whole Hugging Face models as ``llmopt run`` compiles them, checked on the CPU.

The program is captured from the model's architecture on the ``meta`` device (no weight in
memory) and lowered by ``lower-to-cuda``; its weights are then bound by ``state_dict`` name
from a model with real weights. Here the Kernel IR of that program runs in the interpreter
with the weights found by name and is compared with the PyTorch model; the CUDA-level plan
binds the same names (what :class:`CompiledProgram` does on a GPU). A model of N identical
layers compiles to one layer's kernel set whatever N.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import llmopt  # noqa: E402
from llmopt.codegen.executor import argument_names, bind_weights, plan_host_function  # noqa: E402
from llmopt.tools.llmopt_cli import model_weights, split_pipeline  # noqa: E402

SIZES = {"hidden_size": 36, "intermediate_size": 50, "num_attention_heads": 3,
         "num_key_value_heads": 1, "vocab_size": 101, "max_position_embeddings": 64}


def _config(model_type: str, layers: int) -> Any:
    from llmopt.frontend.models import model_config

    return model_config({"model_type": model_type, "num_hidden_layers": layers, **SIZES})


def _meta_program(config: Any, seq: int, level: str) -> Any:
    from llmopt.frontend.models import build_model, capture_model

    program = capture_model(build_model(config, device="meta"), seq)
    first, _ = split_pipeline("lower-to-cuda", level)
    llmopt.lower(program.module, ",".join(first))
    return program.module


def _host(module: Any) -> Any:
    from xdsl.dialects import func

    return next(op for op in module.ops if isinstance(op, func.FuncOp))


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_meta_capture_binds_real_weights_by_name(model_type: str) -> None:
    """The Kernel IR of a meta capture, fed the real model's weights by name, gives the
    model's logits; the CUDA plan binds every weight argument from the same names."""
    from llmopt.frontend.models import build_model

    config = _config(model_type, 2)
    model = build_model(config, device="cpu", seed=3)
    seq = 5
    module = _meta_program(config, seq, "kernel")
    weights = model_weights(model)
    names = argument_names(_host(module))
    ids = torch.randint(0, config.vocab_size, (1, seq), generator=torch.Generator().manual_seed(0))
    args = [ids.numpy() if name is None else weights[name].detach().numpy() for name in names]
    assert names.count(None) == 1
    (got,) = llmopt.interp.run(module, args, check_races=False)
    with torch.no_grad():
        want = model(input_ids=ids, use_cache=False).logits
    err = (torch.from_numpy(got).double() - want.double()).abs().max() / want.abs().max()
    assert err.item() < 1e-5
    assert (torch.from_numpy(got).argmax(-1) == want.argmax(-1)).all()

    llmopt.lower(module, "kernel-to-cuda")
    plan = plan_host_function(module)
    bound = bind_weights(plan, weights, "cpu")
    assert sorted(bound) == [k for k, name in enumerate(plan.params) if name is not None]


def test_layers_share_one_kernel_set() -> None:
    """2 and 4 decoder layers compile to the same CUDA kernels (up to names)."""
    import re

    sources = []
    for layers in (2, 4):
        module = _meta_program(_config("qwen2", layers), 4, "cuda")
        source = llmopt.cuda_source(module)
        names = re.findall(r"__global__ void __launch_bounds__\(\d+\) (\w+)\(", source)
        for k, name in enumerate(names):
            source = re.sub(rf"\b{name}\b", f"kernel{k}", source)
        sources.append(source)
    assert sources[0] == sources[1]
