"""``warp-specialize`` on a product whose eight K chunks reuse each of three slots: the
specialised kernel (its products left in flight across a step, or not) computes what the K
loop did, bit for bit, and each of its synchronisations is needed — the interpreter reports
the program without any one of them.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import llmopt
from llmopt.interp import InterpretError, RaceError, random_inputs, run

INPUT = Path(__file__).parent / "Inputs" / "wgmma-k512.mlir"
TO_KERNEL = "wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel"


@pytest.fixture(scope="module", params=[1, 0], ids=["pending1", "pending0"])
def programs(request: pytest.FixtureRequest) -> tuple[str, str, list[np.ndarray]]:
    """The K-loop kernel, its specialised form (text, products left in flight across a
    step or not) and random inputs."""
    module = llmopt.parse(INPUT.read_text())
    llmopt.lower(module, TO_KERNEL)
    before = str(module)
    llmopt.lower(module, f"warp-specialize{{pending={request.param}}}")
    fn = next(op for op in module.walk() if op.name == "func.func")
    return before, str(module), random_inputs(fn, 3)


def _without(text: str, pattern: str, occurrence: int) -> str:
    lines = text.splitlines()
    hits = [i for i, line in enumerate(lines) if re.search(pattern, line)]
    del lines[hits[occurrence]]
    return "\n".join(lines)


def test_the_specialised_kernel_computes_the_same_bits(
        programs: tuple[str, str, list[np.ndarray]]) -> None:
    before, after, inputs = programs
    assert "block [256, 1, 1]" in after and "mbarrier.arrive_copies" in after
    (want,) = run(llmopt.parse(before), inputs)
    (got,) = run(llmopt.parse(after), inputs)
    np.testing.assert_array_equal(got, want)


def test_a_slot_refilled_before_its_release_is_a_race(
        programs: tuple[str, str, list[np.ndarray]]) -> None:
    _, after, inputs = programs
    with pytest.raises(RaceError, match="write after read"):
        run(llmopt.parse(_without(after, "mbarrier.wait", 1)), inputs)


def test_a_slot_read_before_its_copies_land_is_a_race(
        programs: tuple[str, str, list[np.ndarray]]) -> None:
    _, after, inputs = programs
    with pytest.raises(RaceError, match="read after write"):
        run(llmopt.parse(_without(after, "mbarrier.wait", 0)), inputs)


@pytest.mark.parametrize("arrival", [r"mbarrier.arrive %", "mbarrier.arrive_copies"])
def test_a_missing_arrival_stalls_the_other_side(
        programs: tuple[str, str, list[np.ndarray]], arrival: str) -> None:
    _, after, inputs = programs
    with pytest.raises(InterpretError, match="has not completed"):
        run(llmopt.parse(_without(after, arrival, 0)), inputs)


def test_nvrtc_compiles_the_specialised_kernel_for_sm_90a(
        programs: tuple[str, str, list[np.ndarray]]) -> None:
    from llmopt.codegen.cache import KernelCache
    from llmopt.codegen.cuda_printer import cuda_source
    from llmopt.codegen.nvrtc import compile_cuda

    module = llmopt.parse(programs[1])
    llmopt.lower(module, "canonicalize,cse,plan-buffers,kernel-to-cuda{arch=sm_90a}")
    source = cuda_source(module)
    assert source.count("mbarrier.init.shared::cta.b64") == 6
    assert source.count("mbarrier.try_wait.parity") == 2
    in_flight = "wgmma.wait 1" in programs[1]  # then the last slot's release is apart
    assert source.count("mbarrier.arrive.shared::cta.b64") == (2 if in_flight else 1)
    assert "__syncthreads();" in source and "__launch_bounds__(256)" in source
    cubin = compile_cuda(source, arch="sm_90a", cache=KernelCache("/nonexistent", enabled=False))
    assert cubin[:4] == b"\x7fELF"


def test_a_bf16_decoder_layer_keeps_its_meaning_with_warp_specialised_products() -> None:
    """A small Llama layer in bf16 over 100 tokens (K of 128 and 192: two and three chunks),
    through ``lower-to-cuda{arch=sm_90a warp_specialize=true}``: every product on warpgroup
    products gets its producer (the query/key/value ones inside one fused launch), and every
    pass keeps the interpreted result."""
    pytest.importorskip("transformers")
    import torch

    from llmopt import registry
    from llmopt.frontend.models import build_model, capture_layer, model_config

    config = model_config({"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 128,
                           "intermediate_size": 192, "num_attention_heads": 2,
                           "num_key_value_heads": 1, "head_dim": 64, "vocab_size": 64,
                           "max_position_embeddings": 128})
    program = capture_layer(build_model(config, seed=3, dtype=torch.bfloat16), 100)
    pipeline = "lower-to-cuda{arch=sm_90a warp_specialize=true}"
    to_kernel, _ = registry.split_at_level(registry.expand_pipeline(pipeline), "kernel")
    text = str(llmopt.lower(program.module.clone(), ",".join(to_kernel)))
    assert text.count("mbarrier.arrive_copies") >= 4
    report = llmopt.check_numerics(program.module, pipeline, seed=5)
    assert report.ok, f"{report}"
