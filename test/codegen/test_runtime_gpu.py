"""Loading CUBIN and launching kernels with the driver API, directly and in CUDA graphs."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from llmopt.codegen.nvrtc import compile_cuda, default_arch  # noqa: E402
from llmopt.codegen.runtime import CudaError, CudaModule  # noqa: E402
from llmopt.target import DEVICE_VARIANTS, base_arch  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]

# Hand-written kernels are fine here: these tests exercise loading and launching only.
SOURCE = """\
extern "C" __global__ void __launch_bounds__(128)
saxpy(float* __restrict__ y, const float* __restrict__ x, float a, float b, long long n)
{
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + b;
    }
}

// Reverses each row of a (rows x cols) matrix through dynamic shared memory.
extern "C" __global__ void reverse_rows(float* y, const float* x, int cols)
{
    extern __shared__ float row[];
    const float* src = x + (long long)blockIdx.x * cols;
    float* dst = y + (long long)blockIdx.x * cols;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) row[j] = src[j];
    __syncthreads();
    for (int j = threadIdx.x; j < cols; j += blockDim.x) dst[j] = row[cols - 1 - j];
}
"""

BLOCK = 128


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CudaModule:
    """The test kernels, compiled for this GPU into a private cache and loaded."""
    monkeypatch.setenv("LLMOPT_CACHE_DIR", str(tmp_path / "kernels"))
    return CudaModule(compile_cuda(SOURCE, arch=default_arch()))


def _blocks(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK


def test_default_arch_matches_device() -> None:
    major, minor = torch.cuda.get_device_capability()
    assert default_arch() == DEVICE_VARIANTS.get(f"sm_{major}{minor}", f"sm_{major}{minor}")


def test_the_target_is_the_device() -> None:
    """What the driver says of the device is what torch says of it."""
    from llmopt.target import current_target

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    got = current_target()
    assert base_arch(got.arch) == f"sm_{props.major}{props.minor}"
    assert got.sms == props.multi_processor_count
    assert got.name == props.name
    assert got.static_smem == 48 * 1024 <= got.max_smem


def test_saxpy_matches_torch(module: CudaModule) -> None:
    n = 10_007  # not a multiple of the block size
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n + 64, device="cuda", generator=gen)
    y = torch.full_like(x, float("nan"))
    saxpy = module.function("saxpy")
    assert module.function("saxpy") is saxpy
    saxpy.launch((_blocks(n), 1, 1), (BLOCK, 1, 1), [y, x, 1.5, -0.25, n])
    torch.cuda.synchronize()
    torch.testing.assert_close(y[:n], 1.5 * x[:n] - 0.25, rtol=1e-6, atol=1e-6)
    assert torch.isnan(y[n:]).all()  # the tail guard held


def test_dynamic_shared_above_48k(module: CudaModule) -> None:
    rows, cols = 7, 20_000  # 80 000 bytes of shared memory per block
    x = torch.randn(rows, cols, device="cuda")
    y = torch.empty_like(x)
    fn = module.function("reverse_rows")
    fn.launch((rows, 1, 1), (256, 1, 1), [y, x, ctypes.c_int(cols)], shared_bytes=cols * 4)
    torch.cuda.synchronize()
    assert fn.max_dynamic_shared >= cols * 4
    torch.testing.assert_close(y, x.flip(1), rtol=0, atol=0)


def test_cuda_graph_capture_and_replay(module: CudaModule) -> None:
    n = 4_099
    saxpy = module.function("saxpy")
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    z = torch.empty_like(x)

    def step() -> None:
        saxpy.launch((_blocks(n), 1, 1), (BLOCK, 1, 1), [y, x, 2.0, 1.0, n])
        saxpy.launch((_blocks(n), 1, 1), (BLOCK, 1, 1), [z, y, -3.0, 0.5, n])

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()

    for seed in range(3):
        x.copy_(torch.randn(n, device="cuda", generator=torch.Generator("cuda").manual_seed(seed)))
        z.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(z, -3.0 * (2.0 * x + 1.0) + 0.5, rtol=1e-5, atol=1e-5)


def test_launch_on_explicit_stream(module: CudaModule) -> None:
    n = 1_000
    x = torch.randn(n, device="cuda")
    y = torch.zeros_like(x)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    module["saxpy"].launch(_blocks(n), BLOCK, [y, x, 1.0, 2.0, n], stream=stream.cuda_stream)
    stream.synchronize()
    torch.testing.assert_close(y, x + 2.0)


def test_errors(module: CudaModule) -> None:
    with pytest.raises(CudaError, match="CUDA_ERROR_NOT_FOUND"):
        module.function("no_such_kernel")
    with pytest.raises(TypeError, match="not on CUDA"):
        module["saxpy"].launch(1, 1, [torch.zeros(4), torch.zeros(4, device="cuda"), 1.0, 1.0, 4])
    with pytest.raises(CudaError, match="cuLaunchKernel"):
        module["saxpy"].launch(1, 4096, [torch.zeros(1, device="cuda")] * 2 + [1.0, 1.0, 1])
