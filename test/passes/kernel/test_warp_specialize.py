"""``warp-specialize`` on a product whose eight K chunks reuse each of three slots: the
specialised kernel (its products left in flight across a step, or not) computes what the K
loop did, bit for bit, and each of its synchronisations is needed — the interpreter reports
the program without any one of them. With registers a role (``producer_registers``,
``consumer_registers``) the body splits into a branch per role, which the interpreter runs
beside each other: the same bits, the same checks; a pair the block's registers cannot hold
leaves the kernel alone, and the split kernel of two consumer warpgroups compiles for sm_90a.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from xdsl.utils.exceptions import PassFailedException, VerifyException

import llmopt
from llmopt import registry
from llmopt.dialects import kernel
from llmopt.interp import InterpretError, RaceError, random_inputs, run
from llmopt.passes.kernel._warp_split import consumer_share, fits, register_pool

INPUT = Path(__file__).parent / "Inputs" / "wgmma-k512.mlir"
TO_KERNEL = "wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel"


@pytest.fixture(scope="module", params=[1, 0], ids=["pending1", "pending0"])
def programs(request: pytest.FixtureRequest) -> tuple[str, str, list[np.ndarray]]:
    """The K-loop kernel, its specialised form (text, products left in flight across a
    step or not) and random inputs."""
    return _specialised(f"pending={request.param}")


def _specialised(options: str) -> tuple[str, str, list[np.ndarray]]:
    """The K-loop kernel before and after ``warp-specialize{options}`` (texts), and random
    inputs."""
    module = llmopt.parse(INPUT.read_text())
    llmopt.lower(module, TO_KERNEL)
    before = str(module)
    llmopt.lower(module, f"warp-specialize{{{options}}}")
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


def _bf16_layer() -> Any:
    """A small Llama layer in bf16 over 100 tokens, captured (skips without transformers)."""
    pytest.importorskip("transformers")
    import torch

    from llmopt.frontend.models import build_model, capture_layer, model_config

    config = model_config({"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 128,
                           "intermediate_size": 192, "num_attention_heads": 2,
                           "num_key_value_heads": 1, "head_dim": 64, "vocab_size": 64,
                           "max_position_embeddings": 128})
    return capture_layer(build_model(config, seed=3, dtype=torch.bfloat16), 100)


@pytest.mark.parametrize(("pipeline", "producer_fill"), [
    ("lower-to-cuda{arch=sm_90a roles=2}", "mbarrier.expect_bytes"),
    ("lower-to-cuda{arch=sm_90a warp_specialize=true tensor_copies=false}",
     "mbarrier.arrive_copies")])
def test_a_bf16_decoder_layer_keeps_its_meaning_with_warp_specialised_products(
        pipeline: str, producer_fill: str) -> None:
    """A small Llama layer in bf16 over 100 tokens (K of 128 and 192: two and three chunks,
    too few for two roles by default, so ``roles=2`` asks for them): every product on
    warpgroup products gets its producer (the query/key/value ones inside one fused
    launch), which fills the slots with bulk tensor copies (``mbarrier.expect_bytes`` a
    step), or with ``cp.async`` copies (``mbarrier.arrive_copies``) with
    ``warp_specialize=true tensor_copies=false``; with bulk copies every pass keeps the
    interpreted result."""
    program = _bf16_layer()
    to_kernel, _ = registry.split_at_level(registry.expand_pipeline(pipeline), "kernel")
    text = str(llmopt.lower(program.module.clone(), ",".join(to_kernel)))
    assert text.count(producer_fill) >= 4
    if producer_fill == "mbarrier.arrive_copies":
        return  # the cp.async producers' meaning: warp-specialize.mlir's --check-numerics
    report = llmopt.check_numerics(program.module, pipeline, seed=5)
    assert report.ok, f"{report}"


REGISTERS = "producer_registers=40 consumer_registers=232"

WIDE = """
func.func @forward(%proj.weight: tensor<256x512xbf16> {llmopt.param = "proj.weight"},
                   %x: tensor<1x128x512xbf16> {llmopt.input = "x"},
                   %r: tensor<1x128x256xbf16> {llmopt.input = "r"}) -> tensor<1x128x256xbf16> {
  %0 = torch.linear %x, %proj.weight
      : tensor<1x128x512xbf16>, tensor<256x512xbf16> -> tensor<1x128x256xbf16>
  %1 = torch.add %0, %r : tensor<1x128x256xbf16>, tensor<1x128x256xbf16> -> tensor<1x128x256xbf16>
  func.return %1 : tensor<1x128x256xbf16>
}
"""
"""A 128 × 256 × 512 bf16 product with a residual: one 128 × 256 tile, two consumer
warpgroups of 64 × 256 (C = 256), eight K chunks through three slots."""


@pytest.fixture(scope="module", params=[1, 0], ids=["pending1", "pending0"])
def split(request: pytest.FixtureRequest) -> tuple[str, str, list[np.ndarray]]:
    """The K-loop kernel, its specialised form split by role, and random inputs."""
    return _specialised(f"pending={request.param} {REGISTERS}")


@pytest.fixture(scope="module")
def wide() -> tuple[str, list[np.ndarray]]:
    """:data:`WIDE` as ``tile-to-kernel`` leaves it (no split-K), and random inputs."""
    pipeline = registry.with_options(
        "lower-to-cuda{arch=sm_90a}",
        "split-k{split_k=1},register-tile{bm=128 bn=256 tm=2 tn=64 blocked=3},"
        "async-copy{stages=3}")
    module = llmopt.parse(WIDE)
    llmopt.lower(module, pipeline.partition(",warp-specialize")[0])
    fn = next(op for op in module.walk() if op.name == "func.func")
    return str(module), random_inputs(fn, 3)


def test_the_split_kernel_computes_the_same_bits(split: tuple[str, str, list[np.ndarray]]
                                                 ) -> None:
    before, after, inputs = split
    assert "block [256, 1, 1]" in after and "min_blocks = 1" in after
    consumers, producer = after.split("} else {")
    assert "kernel.set_max_registers inc 232" in consumers and "wgmma.mma" in consumers
    assert "kernel.set_max_registers dec 40" in producer and "kernel.async_copy" in producer
    assert "kernel.async_copy" not in consumers and "wgmma" not in producer
    (want,) = run(llmopt.parse(before), inputs)
    (got,) = run(llmopt.parse(after), inputs)
    np.testing.assert_array_equal(got, want)


def test_a_split_producer_that_refills_a_slot_before_its_release_races(
        split: tuple[str, str, list[np.ndarray]]) -> None:
    """The consumers read a slot as soon as it is full, so the producer's refill without
    its wait for the release writes after their reads."""
    _, after, inputs = split
    with pytest.raises(RaceError, match="write after read"):
        run(llmopt.parse(_without(after, "mbarrier.wait", 1)), inputs)


@pytest.mark.parametrize(("pattern", "occurrence"),
                         [(r"mbarrier.arrive %", 0), ("mbarrier.arrive_copies", 0),
                          ("mbarrier.wait", 0)],
                         ids=["no-release", "no-full-arrival", "no-consumer-wait"])
def test_a_broken_handshake_between_the_roles_is_reported(
        split: tuple[str, str, list[np.ndarray]], pattern: str, occurrence: int) -> None:
    """Without a release or an arrival one role waits for a phase the other never
    completes; consumers that do not wait run ahead and release slots the producer has not
    filled, so its wait looks for a phase already passed. Both branches have run as far as
    they could when the wait is reported."""
    _, after, inputs = split
    with pytest.raises(InterpretError, match="has not completed"):
        run(llmopt.parse(_without(after, pattern, occurrence)), inputs)


@pytest.mark.parametrize(("action", "count"), [("inc", 236), ("inc", 16), ("dec", 264),
                                               ("dec", 0), ("add", 64)])
def test_set_max_registers_takes_multiples_of_8_from_24_to_256(action: str, count: int
                                                              ) -> None:
    with pytest.raises(VerifyException, match="must be"):
        kernel.SetMaxRegistersOp(action, count).verify()


def test_set_max_registers_accepts_the_ends_of_its_range() -> None:
    for action, count in (("inc", 256), ("dec", 24), ("inc", 232), ("dec", 40)):
        kernel.SetMaxRegistersOp(action, count).verify()


def test_the_register_budget_is_the_block_share_of_one_multiprocessor() -> None:
    """168 registers a thread for 384 threads; every pair fits 256 threads."""
    assert register_pool(384) == 168 * 384 == 64512
    assert register_pool(256) == 65536
    assert fits(256, 40, 232) and not fits(256, 48, 232) and not fits(256, 24, 256)
    assert fits(128, 256, 256)


def test_computing_warpgroups_get_the_registers_that_fit() -> None:
    """Two computing warpgroups keep the 232 asked for; three (a 192-row tile) get the most
    that fits beside a producer of 40 (152, a multiple of 8); a producer too greedy for even
    the block's share leaves none."""
    assert consumer_share(256, 40, 232) == 232
    assert consumer_share(384, 40, 232) == 152
    assert fits(384, 40, 152) and not fits(384, 40, 160)
    assert consumer_share(384, 256, 232) == 0


def test_two_consumer_warpgroups_split_and_keep_their_bits(
        wide: tuple[str, list[np.ndarray]]) -> None:
    before, inputs = wide
    module = llmopt.parse(before)
    llmopt.lower(module, f"warp-specialize{{{REGISTERS}}}")
    after = str(module)
    assert "block [384, 1, 1]" in after
    assert after.count("kernel.set_max_registers") == 2
    (want,) = run(llmopt.parse(before), inputs)
    (got,) = run(llmopt.parse(after), inputs)
    np.testing.assert_array_equal(got, want)


def test_an_over_budget_pair_gives_the_consumers_what_fits(
        wide: tuple[str, list[np.ndarray]]) -> None:
    """48 · 128 + 232 · 256 = 65 536 registers, above the 64 512 that 384 threads start
    with: the consumers get 224 each; a producer of 200 leaves them no more than their even
    share (168), and the kernel is not specialised at all."""
    before, _ = wide
    module = llmopt.parse(before)
    llmopt.lower(module, "warp-specialize{producer_registers=48 consumer_registers=232}")
    assert "inc 224" in str(module) and "dec 48" in str(module)
    module = llmopt.parse(before)
    llmopt.lower(module, "warp-specialize{producer_registers=200 consumer_registers=232}")
    assert str(module) == before


def test_nvrtc_compiles_the_split_kernel_of_two_consumer_warpgroups(
        wide: tuple[str, list[np.ndarray]], capfd: pytest.CaptureFixture[str]) -> None:
    from llmopt.codegen.cache import KernelCache
    from llmopt.codegen.cuda_printer import cuda_source
    from llmopt.codegen.nvrtc import compile_cuda

    module = llmopt.parse(wide[0])
    llmopt.lower(module, f"warp-specialize{{{REGISTERS}}},canonicalize,cse,plan-buffers,"
                 "kernel-to-cuda{arch=sm_90a}")
    source = cuda_source(module)
    assert "__launch_bounds__(384, 1)" in source
    inc = source.index('asm volatile("setmaxnreg.inc.sync.aligned.u32 232;" ::: "memory");')
    dec = source.index('asm volatile("setmaxnreg.dec.sync.aligned.u32 40;" ::: "memory");')
    assert inc < source.index("} else {") < dec
    cubin = compile_cuda(source, arch="sm_90a", cache=KernelCache("/nonexistent", enabled=False))
    assert cubin[:4] == b"\x7fELF"
    assert "setmaxnreg" not in capfd.readouterr().err  # ptxas: "'setmaxnreg' ignored; ..."


def test_split_products_of_a_decoder_layer_stay_launches_of_their_own(
        capfd: pytest.CaptureFixture[str]) -> None:
    """``fuse-launches`` leaves kernels that set registers alone (the query, key and value
    products would otherwise share a kernel, each role's branch followed by the other
    members' code), so ptxas honours every ``setmaxnreg``."""
    from llmopt.codegen.cache import KernelCache
    from llmopt.codegen.nvrtc import compile_cuda

    pipeline = registry.with_options("lower-to-cuda{arch=sm_90a warp_specialize=true}",
                                     f"warp-specialize{{{REGISTERS}}}")
    source = llmopt.cuda_source(_bf16_layer().module, pipeline)
    kernels = source.split('extern "C" __global__')[1:]
    split = [k for k in kernels if "setmaxnreg" in k]
    assert len(split) >= 5
    assert all(k.count("setmaxnreg.inc") == 1 and "__launch_bounds__(256, 1)" in k
               for k in split)
    compile_cuda(source, arch="sm_90a", cache=KernelCache("/nonexistent", enabled=False))
    assert "setmaxnreg" not in capfd.readouterr().err


def test_a_split_kernel_is_not_capped_for_two_resident_blocks(
        wide: tuple[str, list[np.ndarray]]) -> None:
    """Its warpgroups trade registers within one block's share of the multiprocessor."""
    module = llmopt.parse(wide[0])
    llmopt.lower(module, f"warp-specialize{{{REGISTERS}}}")
    with pytest.raises(PassFailedException, match="min_blocks is 2"):
        llmopt.lower(module, "kernel-to-cuda{arch=sm_90a min_blocks=2}")


BARE = """
func.func @forward(%w: tensor<{n}x512xbf16> {{llmopt.param = "w"}},
                   %x: tensor<1x{m}x512xbf16> {{llmopt.input = "x"}}) -> tensor<1x{m}x{n}xbf16> {{
  %0 = torch.linear %x, %w : tensor<1x{m}x512xbf16>, tensor<{n}x512xbf16> -> tensor<1x{m}x{n}xbf16>
  func.return %0 : tensor<1x{m}x{n}xbf16>
}}
"""
"""A bare bf16 ``x @ Wᵀ`` of K = 512 (eight chunks: a two-role product by default)."""


@pytest.mark.parametrize(("m", "n", "bn"), [(128, 352, 176), (200, 400, 176), (128, 224, 112)])
def test_a_tile_whose_chunks_are_not_whole_rounds_of_the_block_is_copied_whole(
        m: int, n: int, bn: int) -> None:
    """A ``bn``-row weight tile of 8·``bn`` chunks is not a whole number of rounds of the
    256 consumers, so ``tile-to-kernel`` copies it in a loop strided by the block
    (``p += blockDim``). The producer warpgroup makes the block 384 threads; the stride
    stays the 256 the loop was written for (else a third of the chunks are never
    copied and the products read uninitialised shared memory), and the loop is one box,
    filled by ``tma.load``. The result is within a bf16 rounding of float64."""
    pipeline = registry.with_options(
        "lower-to-cuda{arch=sm_90a}",
        f"split-k{{split_k=1}},register-tile{{bm=128 bn={bn} tm=2 tn={bn // 4} blocked=3}}")
    module = llmopt.parse(BARE.format(m=m, n=n))
    llmopt.lower(module, pipeline.partition(",kernel-to-cuda")[0])
    text = str(module)
    assert "block [384, 1, 1]" in text and "kernel.block_dim" not in text
    assert text.count("tma.load") == 2 and "kernel.async_copy" not in text
    fn = next(op for op in module.walk() if op.name == "func.func")
    inputs = random_inputs(fn, 5)
    (got,) = run(llmopt.parse(text), inputs)
    w, x = (np.asarray(a, dtype=np.float64) for a in inputs)
    ref = x @ w.T
    err = np.abs(np.asarray(got, dtype=np.float64) - ref).max() / np.abs(ref).max()
    assert err <= 2 ** -7, err
