"""``llmopt.target``: the architecture table, what reads it, and reading a device (faked
here; the GPU tests compare it with torch's view of the real one)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from llmopt import registry, target
from llmopt.target import (
    DEFAULT_ARCH,
    MMA_SHAPES,
    TARGETS,
    TF32_MMA,
    Target,
    current_target,
    for_arch,
    smem_budget,
)


def test_every_architecture_has_its_figures() -> None:
    assert list(TARGETS) == ["sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]
    h200 = TARGETS["sm_90"]
    assert (h200.sms, h200.max_smem, h200.static_smem) == (132, 227 * 1024, 48 * 1024)
    assert (h200.regs_per_thread, h200.regs_per_sm, h200.max_threads) == (255, 65536, 1024)
    assert TARGETS["sm_80"].sms == 108 and TARGETS["sm_86"].max_smem == 99 * 1024
    for arch, t in TARGETS.items():
        assert t.arch == arch and t.name
        assert t.static_smem <= t.max_smem <= t.smem_per_sm
        assert t.nvrtc_option == f"--gpu-architecture={arch}"
        assert t.has_mma(TF32_MMA) and t.mma_shapes == MMA_SHAPES  # all are sm_80 or newer


def test_the_shared_memory_budget_is_half_a_block_at_least_48_kib() -> None:
    assert smem_budget(TARGETS["sm_90"]) == 227 * 1024 // 2
    assert smem_budget(TARGETS["sm_86"]) == 99 * 1024 // 2
    assert smem_budget(Target("sm_75", 40, 64 * 1024)) == 48 * 1024


def test_architectures_not_in_the_table() -> None:
    """A variant keeps its name and its base's figures; an unknown architecture has the
    default's figures but only its own ``mma`` shapes."""
    variant = for_arch("sm_90a")
    assert variant.arch == "sm_90a" and variant.sm == 90
    assert variant.nvrtc_option == "--gpu-architecture=sm_90a"
    assert dataclasses.replace(variant, arch="sm_90", name=TARGETS["sm_90"].name) == TARGETS[
        "sm_90"]
    turing = for_arch("sm_75")
    assert turing.sms == TARGETS[DEFAULT_ARCH].sms
    assert not turing.has_mma() and turing.mma_shapes == ()
    assert for_arch("sm_999").has_mma()
    assert target.arch_number("sm_100a") == 100 and target.arch_number("x") == 0


def test_normalize_arch() -> None:
    assert target.normalize_arch("90") == "sm_90"
    assert target.normalize_arch("sm_90a") == "sm_90a"
    assert target.base_arch("sm_90a") == target.base_arch("sm_90") == "sm_90"
    assert target.base_arch("sm_100f") == "sm_100"
    with pytest.raises(ValueError, match="expected e.g. 'sm_90'"):
        target.normalize_arch("hopper")


def _fake_device(monkeypatch: pytest.MonkeyPatch, found: dict[str, Any] | None) -> list[int]:
    """Make :func:`target._query_device` answer ``found`` (a copy per call); returns the
    devices asked for."""
    asked: list[int] = []

    def query(device: int) -> dict[str, Any] | None:
        asked.append(device)
        return None if found is None else dict(found)

    monkeypatch.setattr(target, "_query_device", query)
    target._current.cache_clear()
    return asked


H100_PCIE = {"major": 9, "minor": 0, "sms": 114, "max_smem": 227 * 1024,
             "smem_per_sm": 228 * 1024, "static_smem": 48 * 1024, "regs_per_sm": 65536,
             "max_threads": 1024, "threads_per_sm": 2048, "name": "NVIDIA H100 PCIe"}


def test_from_device_reads_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device's figures replace the table's; what the driver does not say (registers a
    thread) comes from the table; an sm_90 GPU compiles for its variant sm_90a (its
    warpgroup products); no device gives the default."""
    asked = _fake_device(monkeypatch, H100_PCIE)
    got = Target.from_device(3)
    assert asked == [3]
    assert got.arch == "sm_90a" and got.sms == 114 and got.name == "NVIDIA H100 PCIe"
    assert got.regs_per_thread == 255 and got.has_mma()
    _fake_device(monkeypatch, {**H100_PCIE, "major": 8, "minor": 7, "sms": 16})
    orin = Target.from_device(0)  # not in the table: every figure from the device
    assert orin.arch == "sm_87" and orin.sms == 16 and orin.has_mma()
    _fake_device(monkeypatch, None)
    assert Target.from_device(0) == TARGETS[DEFAULT_ARCH]


def test_current_target_reads_each_device_once(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _fake_device(monkeypatch, H100_PCIE)
    try:
        assert current_target(0).sms == 114
        assert current_target(0) is current_target(0)
        assert current_target(1).sms == 114
        assert asked == [0, 1]
        assert target.default_arch() == "sm_90a"
    finally:
        target._current.cache_clear()


def test_without_a_gpu_the_default() -> None:
    """The real driver query, where there is no GPU: the sm_90 default."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: see test/codegen/test_runtime_gpu.py")
    target._current.cache_clear()
    assert Target.from_device() == TARGETS[DEFAULT_ARCH]
    assert target.default_arch() == DEFAULT_ARCH


def test_with_arch_fills_every_element_that_takes_one() -> None:
    """Named pipelines and passes with an ``arch`` option get the architecture unless they
    set one; other elements stay as they are."""
    assert registry.with_arch("lower-to-cuda", "sm_80") == "lower-to-cuda{arch=sm_80}"
    assert registry.with_arch("lower-to-cuda{arch=sm_86},dce", "sm_80") == (
        "lower-to-cuda{arch=sm_86},dce")
    assert registry.with_arch("canonicalize,register-tile{bm=32 bn=64},kernel-to-cuda",
                              "sm_89") == ("canonicalize,register-tile{bm=32 bn=64 arch=sm_89},"
                                           "kernel-to-cuda{arch=sm_89}")
    assert registry.with_arch("no-such-pass", "sm_80") == "no-such-pass"
    assert registry.with_arch("", "sm_80") == ""
    expanded = registry.expand_pipeline(registry.with_arch("lower-to-cuda", "sm_80"))
    assert "kernel-to-cuda{arch=sm_80}" in expanded and "sm_90" not in expanded


def test_without_leaves_one_pass_out_of_the_expanded_pipeline() -> None:
    """``without`` is the expanded pipeline less every element of that pass; a pass the
    pipeline does not run is an error."""
    full = registry.expand_pipeline(registry.for_device("lower-to-cuda"))
    less = registry.without("lower-to-cuda", "programmatic-launch")
    assert "programmatic-launch" in full and "programmatic-launch" not in less
    assert less.split(",") == [e for e in full.split(",") if "programmatic" not in e]
    assert registry.without("canonicalize,cse,canonicalize", "canonicalize") == "cse"
    with pytest.raises(registry.PipelineError, match="has no 'dce' pass"):
        registry.without("lower-to-cuda", "dce")


def test_with_options_sets_knobs_of_the_expanded_pipeline() -> None:
    """``with_options`` puts an override's options on top of every element of that pass,
    leaves the others as the expansion has them, and refuses a pass the pipeline lacks."""
    full = registry.expand_pipeline("lower-to-cuda{arch=sm_90a}").split(",")
    got = registry.with_options("lower-to-cuda{arch=sm_90a}", "async-copy{stages=4 lag=1}",
                                "wgmma-fragments{pending=1}").split(",")
    assert len(got) == len(full)
    changed = {a: b for a, b in zip(full, got, strict=True) if a != b}
    assert changed == {"async-copy{arch=sm_90a roles=0}":
                       "async-copy{arch=sm_90a roles=0 stages=4 lag=1}",
                       "wgmma-fragments{arch=sm_90a}":
                       "wgmma-fragments{arch=sm_90a pending=1}"}
    assert registry.with_options("cse,canonicalize{max_iterations=2}",
                                 "canonicalize{max_iterations=3}") == (
        "cse,canonicalize{max_iterations=3}")
    with pytest.raises(registry.PipelineError, match="has no 'dce' pass"):
        registry.with_options("lower-to-cuda", "dce{x=1}")


def test_with_options_and_without_lower_for_this_machines_gpu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A bare ``lower-to-cuda`` expanded would pin its default ``sm_90``; ``with_options`` and
    ``without`` give it the GPU's architecture first, as ``llmopt.compile`` does, and keep
    an architecture the spec names."""
    monkeypatch.setattr(target, "default_arch", lambda: "sm_90a")
    got = registry.with_options("lower-to-cuda", "wgmma-fragments{pending=1}").split(",")
    assert "wgmma-fragments{arch=sm_90a pending=1}" in got
    assert "kernel-to-cuda{arch=sm_90a}" in got
    less = registry.without("lower-to-cuda", "programmatic-launch").split(",")
    assert "kernel-to-cuda{arch=sm_90a}" in less
    assert "kernel-to-cuda{arch=sm_80}" in registry.without("lower-to-cuda{arch=sm_80}",
                                                            "programmatic-launch").split(",")


def test_the_executor_checks_launches_against_the_target() -> None:
    """A launch with more shared memory or threads than the device allows is refused with
    the kernel's name, before anything is compiled."""
    pytest.importorskip("torch")
    import llmopt
    from llmopt.codegen.executor import (
        ExecutorError,
        LaunchStep,
        check_launches,
        plan_host_function,
    )

    module = llmopt.parse("""
    func.func @f(%x: memref<64xf32>) -> memref<64xf32> {
      %y = memref.alloc() : memref<64xf32>
      tile.kernel @k grid [1, 1, 1] block [64, 1, 1] (%a = %x : memref<64xf32>,
                                                       %b = %y : memref<64xf32>) {
        tile.forall (%i) in [64] over threads {
          %v = loop.load %a[%i] : memref<64xf32>
          loop.store %v, %b[%i] : memref<64xf32>
        }
      }
      func.return %y : memref<64xf32>
    }""")
    llmopt.lower(module, "tile-to-kernel,kernel-to-cuda")
    plan = plan_host_function(module, None)
    check_launches(plan, TARGETS["sm_90"])
    with pytest.raises(ExecutorError, match="kernel 'k' is launched with 64 threads"):
        check_launches(plan, Target("sm_90", 132, max_threads=32))
    (launch,) = [s for s in plan.steps if isinstance(s, LaunchStep)]
    big = dataclasses.replace(plan, steps=(dataclasses.replace(launch, shared_bytes=10**6),))
    with pytest.raises(ExecutorError, match=r"lower-to-cuda\{arch=sm_86\}"):
        check_launches(big, TARGETS["sm_86"])


def test_a_pipeline_names_its_architecture_and_a_program_compiles_for_it() -> None:
    """``pipeline_arch`` reads the first ``arch`` a pipeline sets; ``program_arch`` compiles
    a program for it when it is a variant of the GPU's (sm_90a on sm_90), for the GPU's when
    the pipeline names none, and refuses another family."""
    from llmopt.api import program_arch
    from llmopt.registry import pipeline_arch

    assert pipeline_arch("lower-to-cuda") is None
    assert pipeline_arch("canonicalize,lower-to-cuda{arch=sm_90a},dce") == "sm_90a"
    assert program_arch("lower-to-cuda", "sm_90") == "sm_90"
    assert program_arch("lower-to-cuda{arch=sm_90a}", "sm_90") == "sm_90a"
    assert program_arch("lower-to-cuda{arch=sm_90}", "sm_90a") == "sm_90"
    with pytest.raises(ValueError, match=r"\(sm_90a\); name sm_90 or a variant such as sm_90a"):
        program_arch("lower-to-cuda{arch=sm_80}", "sm_90a")
    with pytest.raises(ValueError, match=r"the pipeline is for sm_80, which does not run on "
                                         r"this GPU \(sm_90\)"):
        program_arch("lower-to-cuda{arch=sm_80}", "sm_90")
