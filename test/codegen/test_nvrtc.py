"""NVRTC driver and kernel cache: CUBIN output, diagnostics, cache hits and cache repair.

These tests need NVRTC but no GPU.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from llmopt.codegen import cache as cache_mod
from llmopt.codegen import nvrtc
from llmopt.codegen.cache import KernelCache, cache_key, default_cache

ELF_MAGIC = b"\x7fELF"

# A hand-written kernel is fine here: these tests exercise the NVRTC driver, not code generation.
SAXPY = """\
extern "C" __global__ void __launch_bounds__(128)
saxpy(float* __restrict__ y, const float* __restrict__ x, float a, float b, long long n)
{
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + b;
    }
}
"""

BROKEN = """\
extern "C" __global__ void fine(float* y) { y[0] = 1.0f; }

__device__ float twice(float v) { return 2.0f * v; }

extern "C" __global__ void
__launch_bounds__(256) scale_rows(float* y, const float* x, long long n)
{
    long long i = threadIdx.x;
    y[i] = twice(x[i]) * not_declared_anywhere;
}
"""


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private, empty kernel cache for the test."""
    directory = tmp_path / "kernels"
    monkeypatch.setenv("LLMOPT_CACHE_DIR", str(directory))
    monkeypatch.delenv("LLMOPT_NO_CACHE", raising=False)
    return directory


@pytest.fixture
def nvrtc_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the source of every real NVRTC compilation."""
    calls: list[str] = []
    real = nvrtc._nvrtc_compile

    def spy(source: str, options: list[str], name: str, arch: str) -> bytes:
        calls.append(source)
        return real(source, options, name, arch)

    monkeypatch.setattr(nvrtc, "_nvrtc_compile", spy)
    return calls


def test_nvrtc_version() -> None:
    major, minor = nvrtc.nvrtc_version()
    assert major >= 12 and minor >= 0


def test_default_arch_format() -> None:
    assert nvrtc.default_arch().startswith("sm_")


def test_module_import_does_not_import_torch() -> None:
    code = (
        "import sys, llmopt.codegen.nvrtc, llmopt.codegen.cache, llmopt.codegen.runtime;"
        "sys.exit(1 if 'torch' in sys.modules or 'cuda.bindings.nvrtc' in sys.modules else 0)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_compile_to_cubin(cache_dir: Path) -> None:
    cubin = nvrtc.compile_cuda(SAXPY, arch="sm_90")
    assert cubin[:4] == ELF_MAGIC
    assert b"saxpy" in cubin


def test_invalid_arch_rejected(cache_dir: Path) -> None:
    with pytest.raises(ValueError, match="sm_90"):
        nvrtc.compile_cuda(SAXPY, arch="compute_90")


def test_cuda_headers_found(cache_dir: Path) -> None:
    source = """\
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void to_half(__half* y, const float* x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2half(x[i]);
}
"""
    assert nvrtc.include_dirs()
    assert nvrtc.compile_cuda(source, arch="sm_90")[:4] == ELF_MAGIC


def test_syntax_error_reports_line_and_kernel(cache_dir: Path) -> None:
    with pytest.raises(nvrtc.NvrtcError) as info:
        nvrtc.compile_cuda(BROKEN, arch="sm_90")
    err = info.value
    message = str(err)
    assert "not_declared_anywhere" in err.log
    # The offending line, with its number and the kernel that encloses it.
    assert "y[i] = twice(x[i]) * not_declared_anywhere;" in message
    assert re.search(r"^\s*>\s+9 \| ", message, re.M)
    assert "scale_rows" in message
    assert err.kernel_names == ["scale_rows"]
    assert err.source == BROKEN
    # Nothing is cached for a failed compilation.
    assert not list(cache_dir.rglob("*.bin"))


def test_enclosing_kernel() -> None:
    assert nvrtc.enclosing_kernel(BROKEN, 1) == "fine"
    assert nvrtc.enclosing_kernel(BROKEN, 3) is None  # a __device__ helper
    assert nvrtc.enclosing_kernel(BROKEN, 6) == "scale_rows"
    assert nvrtc.enclosing_kernel(BROKEN, 9) == "scale_rows"
    assert nvrtc.enclosing_kernel(BROKEN, 99) is None


def test_second_compile_is_cache_hit(cache_dir: Path, nvrtc_calls: list[str]) -> None:
    first = nvrtc.compile_cuda(SAXPY, arch="sm_90")
    second = nvrtc.compile_cuda(SAXPY, arch="sm_90")
    assert first == second
    assert len(nvrtc_calls) == 1
    key = nvrtc.kernel_cache_key(SAXPY, arch="sm_90")
    assert default_cache().path_for(key).is_file()
    # Different options or architecture are different entries.
    nvrtc.compile_cuda(SAXPY, arch="sm_90", options=["-lineinfo"])
    nvrtc.compile_cuda(SAXPY, arch="sm_80")
    assert len(nvrtc_calls) == 3


def test_no_cache_env(
    cache_dir: Path, nvrtc_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMOPT_NO_CACHE", "1")
    nvrtc.compile_cuda(SAXPY, arch="sm_90")
    nvrtc.compile_cuda(SAXPY, arch="sm_90")
    assert len(nvrtc_calls) == 2
    assert not cache_dir.exists() or not list(cache_dir.rglob("*.bin"))


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_corrupted_entry_is_rebuilt(cache_dir: Path, nvrtc_calls: list[str], damage: str) -> None:
    good = nvrtc.compile_cuda(SAXPY, arch="sm_90")
    path = default_cache().path_for(nvrtc.kernel_cache_key(SAXPY, arch="sm_90"))
    blob = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(blob[: len(blob) // 2])
    elif damage == "flip":
        mutable = bytearray(blob)
        mutable[-10] ^= 0xFF
        path.write_bytes(bytes(mutable))
    elif damage == "garbage":
        path.write_bytes(b"not a cache entry at all")
    else:
        path.write_bytes(b"")

    rebuilt = nvrtc.compile_cuda(SAXPY, arch="sm_90")
    assert rebuilt == good
    assert len(nvrtc_calls) == 2
    # The entry on disk is valid again and serves the next compile.
    assert path.read_bytes() == blob
    assert nvrtc.compile_cuda(SAXPY, arch="sm_90") == good
    assert len(nvrtc_calls) == 2


def test_kernel_cache_roundtrip(tmp_path: Path) -> None:
    kc = KernelCache(tmp_path)
    key = cache_key("src", "sm_90", (13, 0), ["-std=c++17"])
    assert kc.get(key) is None
    kc.put(key, b"\x00payload\xff")
    assert kc.get(key) == b"\x00payload\xff"
    assert not list(tmp_path.rglob("*.tmp"))  # no leftover temporary files
    kc.path_for(key).write_bytes(b"short")
    assert kc.get(key) is None
    assert not kc.path_for(key).exists()  # the damaged entry was removed


def test_cache_key_properties() -> None:
    base = cache_key("src", "sm_90", (13, 0), ["-a", "-b"])
    assert len(base) == 64
    assert cache_key("src", "sm_90", (13, 0), ["-b", "-a"]) == base
    assert cache_key("src2", "sm_90", (13, 0), ["-a", "-b"]) != base
    assert cache_key("src", "sm_80", (13, 0), ["-a", "-b"]) != base
    assert cache_key("src", "sm_90", (13, 1), ["-a", "-b"]) != base
    assert cache_key("src", "sm_90", (13, 0), ["-a"]) != base


def test_cache_dir_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLMOPT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_mod.default_cache_dir() == tmp_path / "xdg" / "llmopt" / "kernels"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_mod.default_cache_dir() == tmp_path / "home" / ".cache" / "llmopt" / "kernels"
    monkeypatch.setenv("LLMOPT_CACHE_DIR", str(tmp_path / "explicit"))
    assert default_cache().directory == tmp_path / "explicit"
    monkeypatch.setenv("LLMOPT_NO_CACHE", "1")
    assert not default_cache().enabled
