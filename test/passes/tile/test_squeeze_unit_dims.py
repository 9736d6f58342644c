"""``squeeze-unit-dims`` on a bf16 Llama layer through ``lower-to-cuda``: the query and key
projections' kept-dimension outputs (``[1, seq, n, 1]`` of ``f32``) reach their kernels as
``[1, seq, n]`` views, their epilogues and the rotary map then move several columns an
access, and the layer keeps its bits (at a fixed ragged length and as a symbolic program)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import llmopt  # noqa: E402
from llmopt import registry  # noqa: E402
from llmopt.dialects import kernel  # noqa: E402
from llmopt.frontend.models import build_model, capture_layer  # noqa: E402
from llmopt.interp import random_inputs, run  # noqa: E402

PIPELINE = "lower-to-cuda{arch=sm_90a}"


def _layer(dynamic: bool) -> object:
    config = transformers.LlamaConfig(
        hidden_size=128, intermediate_size=192, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, vocab_size=101, max_position_embeddings=64)
    model = build_model(config, seed=0, dtype=torch.bfloat16)
    return capture_layer(model, 37, dynamic=dynamic, max_seq=64 if dynamic else None)


def _kernel_ir(module: object, pipeline: str) -> object:
    return llmopt.lower(module, ",".join(registry.split_at_level(pipeline, "kernel")[0]))


def _squeezed_views(module: object) -> list[object]:
    """The collapse_shape views that drop a trailing unit dimension of an f32 buffer."""
    return [op for op in module.walk()  # type: ignore[attr-defined]
            if op.name == "memref.collapse_shape"
            and op.operands[0].type.get_shape()[-1] == 1
            and op.results[0].type.get_num_dims() == op.operands[0].type.get_num_dims() - 1]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "symbolic"])
def test_the_layer_reads_its_projections_columns_together(dynamic: bool) -> None:
    program = _layer(dynamic)
    squeezed = _kernel_ir(program.module.clone(), PIPELINE)
    plain = _kernel_ir(program.module.clone(), registry.without(PIPELINE, "squeeze-unit-dims"))
    assert _squeezed_views(squeezed) and not _squeezed_views(plain)

    def wide_f32(module: object) -> int:
        """Copies of two or more f32 elements between registers and global memory."""
        return sum(1 for op in module.walk()  # type: ignore[attr-defined]
                   if isinstance(op, kernel.CopyOp) and op.count.value.data >= 2
                   and "f32" in str(op.operands[0].type) + str(op.operands[1].type))

    assert wide_f32(squeezed) > wide_f32(plain)
    fn = next(op for op in program.module.walk() if op.name == "func.func")
    inputs = random_inputs(fn, 5, lengths={"seq": 37} if dynamic else None)
    np.testing.assert_array_equal(run(squeezed, inputs)[0], run(plain, inputs)[0])
