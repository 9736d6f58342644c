"""Bulk tensor copies (``tma.load``) end to end: the CUDA ``kernel-to-cuda`` writes for them
(the copy, the barrier's transaction count, the tensor-map parameter), NVRTC compiling it for
sm_90a, the host's plan and the arguments of the tensor-map encoder (no GPU needed), and on
the GPU (tests marked ``gpu``) a kernel that copies boxes of a buffer through swizzled or
plain shared tiles, compared with torch: a coordinate in the wrong order, a swizzle that
disagreed with the one the kernel reads, or a map with wrong strides would move elements.

The kernel: block ``(bx, by, bz)`` copies the ``64 × 64`` box at ``x[bz, 64·by, 64·bx]`` into
tile ``bx mod 2`` of a shared buffer with one ``tma.load`` (thread 0 announces the bytes on
the barrier first), every thread waits for the barrier and copies the tile to the same place
of ``y``, whose rows run past ``x``'s: those rows of the box are zeros."""

from __future__ import annotations

import re
from collections.abc import Sequence
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest
import torch
from test_kernel_to_cuda import lower
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    BFloat16Type,
    Float16Type,
    Float32Type,
    MemRefType,
    StridedLayoutAttr,
)
from xdsl.parser import Parser
from xdsl.utils.exceptions import PassFailedException, VerifyException

import llmopt
from llmopt.api import make_context
from llmopt.codegen import tensor_map
from llmopt.codegen.cache import KernelCache
from llmopt.codegen.cuda_printer import cuda_source
from llmopt.codegen.ir_encoding import decode_module, encode_module
from llmopt.codegen.nvrtc import compile_cuda
from llmopt.codegen.plan import ExecutorError, LaunchStep, host_side, plan_host_function
from llmopt.codegen.tensor_map import TensorMapEncoder, TiledArguments, tiled_arguments
from llmopt.dialects import cuda
from llmopt.interp import run

NO_CACHE = KernelCache("/nonexistent", enabled=False)
ARCH = "sm_90a"
BATCH, ROWS, COLS, OUT_ROWS = 2, 100, 192, 128
"""``x`` is ``BATCH × ROWS × COLS``, ``y`` ``BATCH × OUT_ROWS × COLS``."""


def program(swizzle: bool, copy: bool = True, tile: str = "2x64x64") -> str:
    """The copy kernel of the module docstring and its host function; ``swizzle``: the tiles
    are swizzled (128 bytes); without ``copy`` the kernel announces the bytes but copies
    nothing (for the CUDA of a kernel with barriers but no ``tma.load``); ``tile``: the
    shared buffer's shape (``slots × rows × columns``)."""
    attr = " {llmopt.swizzle = 128 : i64}" if swizzle else ""
    x_type = f"memref<{BATCH}x{ROWS}x{COLS}xbf16>"
    y_type = f"memref<{BATCH}x{OUT_ROWS}x{COLS}xbf16>"
    t_type = f"memref<{tile}xbf16>"
    load = (f"    tma.load %x[%bz, %row, %col] to %tile[%s] on %bars[%c0] : {x_type} to "
            f"{t_type}, memref<1xi64>") if copy else ""
    return f"""
func.func @main(%x: {x_type}) -> {y_type} {{
  %y = memref.alloc() : {y_type}
  kernel.launch @tma_copy grid [3, 2, {BATCH}] block [128, 1, 1] smem 0 (%x, %y)
      : {x_type}, {y_type}
  func.return %y : {y_type}
}}
kernel.func @tma_copy(%x: {x_type}, %y: {y_type}) block [128, 1, 1] {{
  %tile = kernel.shared{attr} : {t_type}
  %bars = kernel.shared : memref<1xi64>
  %tid = kernel.thread_id x
  %bx = kernel.block_id x
  %by = kernel.block_id y
  %bz = kernel.block_id z
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %c4096 = arith.constant 4096 : index
  %s = arith.remui %bx, %c2 : index
  %first = arith.cmpi eq, %tid, %c0 : index
  scf.if %first {{
    mbarrier.init %bars[%c0] count 1 : memref<1xi64>
  }}
  kernel.barrier
  %row = arith.muli %by, %c64 : index
  %col = arith.muli %bx, %c64 : index
  scf.if %first {{
    mbarrier.expect_bytes %bars[%c0] bytes 8192 : memref<1xi64>
{load}
  }}
  mbarrier.wait %bars[%c0] parity %c0 : memref<1xi64>
  scf.for %i = %tid to %c4096 step %c128 {{
    %r = arith.divui %i, %c64 : index
    %c = arith.remui %i, %c64 : index
    %v = kernel.load %tile[%s, %r, %c] : {t_type}
    %gr = arith.addi %row, %r : index
    %gc = arith.addi %col, %c : index
    kernel.store %v, %y[%bz, %gr, %gc] : {y_type}
  }}
  kernel.return
}}
"""


def expected(x: np.ndarray) -> np.ndarray:
    """``x`` with rows of zeros below it, up to ``OUT_ROWS``."""
    out = np.zeros((BATCH, OUT_ROWS, COLS), dtype=x.dtype)
    out[:, :ROWS] = x
    return out


def one_line(source: str) -> str:
    return re.sub(r"\s+", " ", source)


# --- CUDA -------------------------------------------------------------------------------------


@pytest.mark.parametrize("swizzle", [True, False])
def test_cuda_copies_the_box_and_compiles_for_sm_90a(swizzle: bool) -> None:
    """The copy is one ``cp.async.bulk.tensor.3d`` of the tile's first element, through the
    address of the map parameter, its coordinates innermost first, completing on the
    barrier; the barrier is fenced for the bulk copies after its initialisation and
    announced the tile's bytes; the map's struct is declared once."""
    source = cuda_source(lower(program(swizzle), ARCH))
    text = one_line(source)
    assert source.count("struct __align__(64) llmopt_tensor_map "
                        "{ unsigned long long bits[16]; };") == 1
    assert "__nv_bfloat16* __restrict__ y, const __grid_constant__ llmopt_tensor_map tmap0)" in (
        text)
    assert ('asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" : : '
            '"r"((unsigned int)__cvta_generic_to_shared(&bars[0])), "r"(1) : "memory"); '
            'asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");') in text
    assert ('asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" : : '
            '"r"((unsigned int)__cvta_generic_to_shared(&bars[0])), "r"(8192) : "memory");'
            ) in text
    assert ('asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile'
            '.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" : : '
            '"r"((unsigned int)__cvta_generic_to_shared(&tile[s * 4096])), '
            '"l"((unsigned long long)&tmap0), "r"((int)col), "r"((int)row), "r"((int)bz), '
            '"r"((unsigned int)__cvta_generic_to_shared(&bars[0])) : "memory");') in text
    # the tiles: 1024-byte aligned when swizzled (and read swizzled), else 128
    assert f"extern __shared__ __align__({1024 if swizzle else 128}) unsigned char" in text
    assert ("(c ^ ((r & 7) * 8))" in text) == swizzle
    cubin = compile_cuda(source, arch=ARCH, cache=NO_CACHE)
    assert cubin[:4] == b"\x7fELF"


def test_a_kernel_without_tensor_copies_takes_no_map_and_no_fence() -> None:
    """Barriers alone need neither the fence nor a map; the transaction count is there."""
    source = cuda_source(lower(program(True, copy=False), ARCH))
    assert "mbarrier.arrive.expect_tx.shared::cta.b64" in source
    for absent in ("fence.mbarrier_init", "llmopt_tensor_map", "cp.async.bulk.tensor"):
        assert absent not in source


def test_unaligned_tiles_are_an_error_naming_the_alignment() -> None:
    """Tiles of a plain buffer start 128 bytes apart at least (``cp.async.bulk.tensor``'s
    alignment): a buffer of 64-byte tiles is refused."""
    text = program(False, tile="2x4x8").replace("bytes 8192", "bytes 64")
    with pytest.raises(PassFailedException, match="multiples of 128 bytes"):
        lower(text, ARCH)


def test_interpreter_copies_the_boxes() -> None:
    """The interpreter agrees with the reference, ragged rows read as zeros."""
    x = np.random.default_rng(3).standard_normal((BATCH, ROWS, COLS)).astype(
        ml_dtypes.bfloat16)
    for swizzle in (True, False):
        (y,) = run(llmopt.parse(program(swizzle)), [x])
        np.testing.assert_array_equal(y.astype(np.float32), expected(x).astype(np.float32))


# --- CUDA IR and the plan -----------------------------------------------------------------------


def test_lowered_module_round_trips_as_text_and_encoding() -> None:
    """The tensor-map parameter, its address and the struct declaration print, parse back
    and encode for the compile cache unchanged."""
    module = lower(program(True), ARCH)
    text = str(module)
    assert ("tmap0 : !cuda.tensor_map<arg 0 : memref<2x100x192xbf16>, box [1, 64, 64], "
            "swizzle 128> const __grid_constant__") in text
    assert "cuda.tensor_map_struct" in text
    parsed = Parser(make_context(), text).parse_module()
    parsed.verify()
    assert str(parsed) == text
    assert str(decode_module(encode_module(module))) == text


@pytest.mark.parametrize("swizzle", [True, False])
def test_plan_passes_the_launch_arguments_then_the_maps(swizzle: bool) -> None:
    """The launch step's parameters are the two pointers; its one map describes argument 0
    with the box ``1 × 64 × 64`` (the kernel's only map, on its host side too)."""
    plan = plan_host_function(host_side(lower(program(swizzle), ARCH)))
    (launch,) = [s for s in plan.steps if isinstance(s, LaunchStep)]
    assert len(launch.params) == len(launch.args) == 2
    assert all(isinstance(p, cuda.PtrType) for p in launch.params)
    (found,) = launch.tensor_maps
    assert (found.arg.data, found.box_shape, found.swizzle.data) == (
        0, (1, 64, 64), 128 if swizzle else 0)
    assert found.buffer == MemRefType(BFloat16Type(), [BATCH, ROWS, COLS])


def _kernel(params: str) -> str:
    return f"cuda.kernel @k({params}) {{\n}}"


MAP = "!cuda.tensor_map<arg 0 : memref<64x64xf32>, box [8, 64], swizzle 0>"


@pytest.mark.parametrize(("params", "message"), [
    (f"x : !cuda.ptr<f32, const>, m : {MAP} const", "const __grid_constant__"),
    (f"x : !cuda.ptr<f32, const>, m : {MAP} const __grid_constant__, n : index",
     "follows a tensor map"),
    (f"n : index, m : {MAP} const __grid_constant__", "not a pointer parameter"),
    (f"x : !cuda.ptr<bf16, const>, m : {MAP} const __grid_constant__", "describes a pointer"),
    ("x : !cuda.ptr<f32, const> const", "only tensor maps are const __grid_constant__"),
])
def test_tensor_map_parameters_are_checked(params: str, message: str) -> None:
    """A map is ``const __grid_constant__``, comes last, and describes a pointer parameter
    before it of its element type; only maps take those qualifiers."""
    module = Parser(make_context(), _kernel(params)).parse_module()
    with pytest.raises(VerifyException, match=message):
        module.verify()


# --- the encoder's arguments ------------------------------------------------------------------


def _map(buffer: MemRefType, box: Sequence[int], swizzle: int = 0, arg: int = 0
         ) -> cuda.TensorMapType:
    return cuda.TensorMapType(arg, buffer, box, swizzle)


def test_arguments_are_innermost_first() -> None:
    """Extents, byte strides (dimension 0's implicit) and the box are the memref's reversed;
    a bf16 map with the 128-byte swizzle names those enum members."""
    typ = _map(MemRefType(BFloat16Type(), [2, 100, 192]), [1, 64, 64], 128)
    assert tiled_arguments(typ, 0x7F0000001000) == TiledArguments(
        data_type="CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", address=0x7F0000001000,
        dims=(192, 100, 2), strides=(384, 38400), box=(64, 64, 1),
        element_strides=(1, 1, 1), swizzle="CU_TENSOR_MAP_SWIZZLE_128B")


def test_arguments_follow_the_types_strides_and_element() -> None:
    """A strided memref's strides (a view of wider rows) are the map's; f16 and f32 name
    their data types; no swizzle is ``SWIZZLE_NONE``."""
    strided = MemRefType(Float32Type(), [64, 32], StridedLayoutAttr([256, 1], 0))
    args = tiled_arguments(_map(strided, [16, 32]), 4096)
    assert (args.dims, args.strides, args.box) == ((32, 64), (1024,), (32, 16))
    assert (args.data_type, args.swizzle) == ("CU_TENSOR_MAP_DATA_TYPE_FLOAT32",
                                              "CU_TENSOR_MAP_SWIZZLE_NONE")
    half = tiled_arguments(_map(MemRefType(Float16Type(), [8]), [8]), 4096)
    assert (half.data_type, half.dims, half.strides) == ("CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
                                                         (8,), ())


def test_unknown_extents_come_from_the_buffer_passed() -> None:
    """A row-major buffer with a ``?`` extent takes it, and its strides, from the launch's
    tensor; without the tensor's shape there is no map."""
    typ = _map(MemRefType(BFloat16Type(), [1, DYNAMIC_INDEX, 64]), [1, 128, 64], 128)
    args = tiled_arguments(typ, 4096, (1, 300, 64))
    assert (args.dims, args.strides) == ((64, 300, 1), (128, 38400))
    with pytest.raises(ExecutorError, match="needs the extents"):
        tiled_arguments(typ, 4096)


@pytest.mark.parametrize(("shape", "address", "message"), [
    ([10, 6], 4096, "must be multiples of 16"),  # 12-byte rows of f16
    ([10, 8], 4104, "is not a multiple of 16 bytes"),
])
def test_misaligned_buffers_are_refused(shape: list[int], address: int, message: str) -> None:
    """Byte strides and the address are multiples of 16, or the driver would refuse them."""
    typ = _map(MemRefType(Float16Type(), shape), [2, shape[1]])
    with pytest.raises(ExecutorError, match=message):
        tiled_arguments(typ, address)


def test_encoder_remembers_the_maps_it_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """One encoding per address (and extents, for ``?`` ones): a launch of a buffer seen
    before reuses its map."""
    made: list[TiledArguments] = []

    def fake(args: TiledArguments) -> tensor_map.TensorMapStruct:
        made.append(args)
        return tensor_map.TensorMapStruct()

    monkeypatch.setattr(tensor_map, "encode", fake)
    encoder = TensorMapEncoder(_map(MemRefType(BFloat16Type(), [DYNAMIC_INDEX, 64]),
                                    [128, 64]))

    def tensor(address: int, rows: int) -> SimpleNamespace:
        return SimpleNamespace(data_ptr=lambda: address, shape=(rows, 64))

    first = encoder(tensor(4096, 300))
    assert encoder(tensor(4096, 300)) is first
    encoder(tensor(4096, 200))
    encoder(tensor(8192, 200))
    assert [(a.address, a.dims) for a in made] == [(4096, (64, 300)), (4096, (64, 200)),
                                                   (8192, (64, 200))]
    assert tensor_map.ctypes.sizeof(first) == cuda.TENSOR_MAP_BYTES


# --- on the GPU -------------------------------------------------------------------------------


def _input(seed: int) -> torch.Tensor:
    x = np.random.default_rng(seed).standard_normal((BATCH, ROWS, COLS)).astype(
        ml_dtypes.bfloat16)
    return torch.from_numpy(x.view(np.uint16)).view(torch.bfloat16).cuda()


@pytest.mark.gpu
@pytest.mark.parametrize("swizzle", [True, False])
def test_gpu_tensor_copies_match_torch(swizzle: bool) -> None:
    """Every box lands where the kernel reads it (swizzled or not), the rows past ``x``
    are zeros; replays of a CUDA graph, which captured the map, copy new inputs."""
    from llmopt.codegen.executor import CompiledProgram

    module = lower(program(swizzle), ARCH)
    compiled = CompiledProgram(module, arch=ARCH)
    x = _input(1)
    (y,) = compiled(x)
    reference = torch.nn.functional.pad(x, (0, 0, 0, OUT_ROWS - ROWS))
    assert torch.equal(y, reference)
    graphed = CompiledProgram(lower(program(swizzle), ARCH), arch=ARCH, cuda_graph=True)
    for seed in (2, 3):
        x = _input(seed)
        (y,) = graphed(x)
        torch.cuda.synchronize()
        assert torch.equal(y, torch.nn.functional.pad(x, (0, 0, 0, OUT_ROWS - ROWS)))
