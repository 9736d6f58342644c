"""Whole programs in the compile cache, without a GPU.

An entry holds a program's whole IR, its host side (:func:`host_side`: the host function and
the kernels' signatures, encoded by :func:`encode_module`) and its printed CUDA source. What
:class:`~llmopt.codegen.executor.CompiledProgram` builds from the host side and the cached
source — the host plan, the symbolic host's layouts, the kernels launched, the CUDA source —
must be what it builds from the whole module; a hit must parse no kernel; a damaged or
foreign entry must be rebuilt. Running a program needs a GPU (test/codegen/test_executor_gpu.py).
"""

from __future__ import annotations

import functools
import zlib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from xdsl.dialects.builtin import ModuleOp  # noqa: E402

import llmopt  # noqa: E402
from llmopt import api, registry  # noqa: E402
from llmopt.codegen.cache import default_cache  # noqa: E402
from llmopt.codegen.cuda_printer import cuda_source  # noqa: E402
from llmopt.codegen.executor import CompiledProgram, ExecutorError  # noqa: E402
from llmopt.codegen.graph import length_free  # noqa: E402
from llmopt.codegen.ir_encoding import decode_module, encode_module  # noqa: E402
from llmopt.codegen.plan import (  # noqa: E402
    LaunchStep,
    host_function,
    host_side,
    is_host_side,
    plan_host_function,
)
from llmopt.codegen.program_cache import (  # noqa: E402
    LoweredProgram,
    cached_lowering,
    cached_program,
)
from llmopt.codegen.symbolic import SymbolicHost, layout_call  # noqa: E402
from llmopt.dialects import cuda  # noqa: E402

MAX = 64
KEY = "ab" * 32
LENGTHS_IN_MEMORY = registry.insert_before("lower-to-cuda", "kernel-to-cuda",
                                           "lengths-in-memory")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMOPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LLMOPT_NO_CACHE", raising=False)


def mlp(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(x @ w) + x.softmax(-1)


def _mlp(dynamic: bool, pipeline: str) -> ModuleOp:
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(1, 5, 16, generator=gen), torch.randn(16, 16, generator=gen)
    symbolic = {"dynamic": {"x": {1: "seq"}}, "max": {"seq": MAX}} if dynamic else {}
    return llmopt.lower(llmopt.capture(mlp, (x, w), **symbolic), pipeline)


def _model() -> ModuleOp:
    """A one-layer Llama with a symbolic length: length buckets put launches under host
    ``scf.if``."""
    from transformers import AutoConfig

    from llmopt.frontend.models import build_model, capture_model

    config = AutoConfig.for_model("llama", hidden_size=36, intermediate_size=50,
                                  num_hidden_layers=1, num_attention_heads=3,
                                  num_key_value_heads=1, vocab_size=101,
                                  max_position_embeddings=MAX)
    meta = build_model(config, device="meta", dtype=torch.float32)
    program = capture_model(meta, 6, dynamic=True, max_seq=MAX)
    return llmopt.lower(program.module, registry.with_arch("lower-to-cuda", "sm_90"))


PROGRAMS = {
    "static": lambda: _mlp(False, "lower-to-cuda"),
    "symbolic": lambda: _mlp(True, "lower-to-cuda"),
    "lengths-in-memory": lambda: _mlp(True, LENGTHS_IN_MEMORY),
    "model": _model,
}


@functools.cache
def lowered(name: str) -> str:
    """The text of program ``name`` lowered to CUDA IR (each test parses its own copy)."""
    return str(PROGRAMS[name]())


def _built(name: str, calls: list[str]) -> ModuleOp:
    calls.append(name)
    return llmopt.parse(lowered(name))


def _same_host(full: ModuleOp, host: ModuleOp) -> None:
    """``host`` plans, lays out and launches exactly as ``full`` does."""
    plan = plan_host_function(full)
    assert plan_host_function(host) == plan
    if not plan.symbols:
        return
    want, got = SymbolicHost(host_function(full, None)), SymbolicHost(host_function(host, None))
    assert got.max_shapes() == want.max_shapes()
    assert length_free(plan, got) == length_free(plan, want)
    for length in (1, 2, 7, 32, 33, MAX):
        symbols = {"seq": length}
        assert layout_call(plan, got, symbols) == layout_call(plan, want, symbols)
        assert got.evaluate(symbols) == want.evaluate(symbols)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_host_side_plans_like_the_whole_module(name: str) -> None:
    """The host-side module, printed and parsed back, gives the plan, the layouts at every
    length and the launched kernels of the whole module; its kernels have no code."""
    full = llmopt.parse(lowered(name))
    text = str(host_side(full))
    host = llmopt.parse(text)
    assert str(decode_module(encode_module(host_side(full)))) == text
    assert is_host_side(host) and not is_host_side(full)
    kernels = [op for op in host.ops if isinstance(op, cuda.KernelOp)]
    assert kernels and all(not op.body.block.ops for op in kernels)
    signatures = [(op.properties, op.attributes) for op in full.ops
                  if isinstance(op, cuda.KernelOp)]
    assert [(op.properties, op.attributes) for op in kernels] == signatures
    assert len(text) < len(lowered(name)) / 2
    _same_host(full, host)
    if name == "model":  # launches chosen on the host, by length
        assert "scf.if" in text
        plan = plan_host_function(host)
        launched = {s.kernel for s in plan.steps if isinstance(s, LaunchStep)}
        assert launched == {op.sym_name.data for op in kernels}
    if name == "lengths-in-memory":
        assert "memref.store" in text


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_a_hit_parses_no_kernel(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A miss builds and stores; a hit gives the same host plan and CUDA source while parsing
    only the host side, and the whole IR only when asked for."""
    calls: list[str] = []
    cold = cached_program(KEY, lambda: _built(name, calls))
    assert calls == [name] and not cold.hit
    parsed: list[str] = []
    real_parse = api.parse
    monkeypatch.setattr(api, "parse", lambda text: parsed.append(text) or real_parse(text))
    warm = cached_program(KEY, lambda: _built(name, calls))
    source, host = warm.source, warm.host
    assert warm.hit and calls == [name]
    assert not parsed and is_host_side(host)  # decoded, not parsed
    assert str(host) == str(host_side(cold.module))
    assert source == cold.source == cuda_source(cold.module)
    _same_host(cold.module, host)
    assert str(warm.module) == str(cold.module)  # now the whole text, parsed
    assert len(parsed) == 1 and warm.hit and warm.read_seconds > 0


def test_a_program_not_at_cuda_ir_is_kept_whole() -> None:
    """A module that still has ``kernel.func`` (Kernel IR) is stored whole: its host is the
    module and its source is printed from it."""
    calls: list[str] = []
    to_kernel, _ = registry.split_at_level("lower-to-cuda", "kernel")
    text = str(_mlp(False, ",".join(to_kernel)))
    assert "kernel.func" in text and "cuda.kernel" not in text

    def build() -> ModuleOp:
        calls.append("built")
        return llmopt.parse(text)

    cached_program(KEY, build)
    warm = cached_program(KEY, build)
    assert warm.hit and calls == ["built"]
    assert warm.host is warm.module and str(warm.module) == text


def test_before_store_runs_before_the_entry_is_stored() -> None:
    """``before_store`` runs once a built program's parts are printed; when it raises (a
    verification of the last passes failed) nothing is stored."""
    calls: list[str] = []
    to_kernel, _ = registry.split_at_level("lower-to-cuda", "kernel")
    text = str(_mlp(False, ",".join(to_kernel)))

    def build() -> ModuleOp:
        calls.append("built")
        return llmopt.parse(text)

    def refuse() -> None:
        assert default_cache().get(KEY) is None  # not stored yet
        calls.append("refused")
        raise RuntimeError("the last verification failed")

    with pytest.raises(RuntimeError):
        cached_program(KEY, build, before_store=refuse)
    assert default_cache().get(KEY) is None
    program = cached_program(KEY, build, before_store=lambda: calls.append("checked"))
    assert not program.hit and calls == ["built", "refused", "built", "checked"]
    assert cached_program(KEY, build).hit


def _damage(part: int) -> None:
    """Replace part ``part`` (0: ir, 1: host, 2: cuda) of the entry under ``KEY`` with
    bytes that do not decompress, keeping the entry well-formed and checksummed."""
    from llmopt.codegen import program_cache

    cache = default_cache()
    payload = cache.get(KEY)
    assert payload is not None
    parts = program_cache._unpack(payload)
    assert parts is not None
    blobs = [parts.get(name, b"") for name in program_cache._PARTS]
    blobs[part] = b"not zlib" + blobs[part][8:]
    cache.put(KEY, program_cache._MAGIC + program_cache._LENGTHS.pack(*map(len, blobs))
              + b"".join(blobs))


@pytest.mark.parametrize("part, read", [(0, "module"), (1, "host"), (2, "source")])
def test_a_damaged_part_is_rebuilt(part: int, read: str) -> None:
    """A part that does not decompress rebuilds the program and stores it anew: the next
    lookup is a clean hit."""
    calls: list[str] = []
    cold = cached_program(KEY, lambda: _built("symbolic", calls))
    _damage(part)
    damaged = cached_program(KEY, lambda: _built("symbolic", calls))
    assert damaged.hit and len(calls) == 1
    getattr(damaged, read)
    assert not damaged.hit and len(calls) == 2
    assert damaged.source == cold.source
    _same_host(cold.module, damaged.host)
    again = cached_program(KEY, lambda: _built("symbolic", calls))
    assert again.hit and again.source == cold.source and len(calls) == 2
    _same_host(cold.module, again.host)


@pytest.mark.parametrize("payload", [
    zlib.compress(b"builtin.module {}"),  # the layout of an older cache
    b"llmopt-program-2\n" + b"\0" * 24,  # no IR part
    b"llmopt-program-2\n" + b"\1" + b"\0" * 23 + b"xy",  # lengths that do not add up
])
def test_a_foreign_entry_is_rebuilt(payload: bytes) -> None:
    default_cache().put(KEY, payload)
    calls: list[str] = []
    program = cached_program(KEY, lambda: _built("symbolic", calls))
    assert not program.hit and calls == ["symbolic"]
    assert cached_program(KEY, lambda: _built("symbolic", calls)).hit


def test_a_host_part_that_is_a_whole_module_is_rebuilt() -> None:
    """The host part must be a host-side module: a whole module there is not trusted."""
    from llmopt.codegen import program_cache

    text = lowered("symbolic")
    full = llmopt.parse(text)
    parts = {"ir": text, "host": encode_module(full), "cuda": cuda_source(full)}
    default_cache().put(KEY, program_cache._pack(parts))
    calls: list[str] = []
    program = cached_program(KEY, lambda: _built("symbolic", calls))
    assert program.hit
    assert not is_host_side(program.host)  # the module, built anew
    assert not program.hit and calls == ["symbolic"]


def test_cached_lowering_gives_the_whole_module(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    module, seconds = cached_lowering(KEY, lambda: _built("symbolic", calls))
    assert seconds is None
    again, seconds = cached_lowering(KEY, lambda: _built("symbolic", calls))
    assert seconds is not None and calls == ["symbolic"]
    assert str(again) == str(module)
    monkeypatch.setenv("LLMOPT_NO_CACHE", "1")
    assert not LoweredProgram(KEY, lambda: _built("symbolic", calls)).hit


def test_a_host_side_module_needs_its_source() -> None:
    """A host-side module has no kernel code to print: CompiledProgram refuses it without
    the program's CUDA source (before touching a GPU)."""
    host = host_side(llmopt.parse(lowered("static")))
    with pytest.raises(ExecutorError, match="only the host side .* pass its CUDA source"):
        CompiledProgram(host)
