"""Tensor maps for ``tma.load``: what the host passes a kernel that makes bulk tensor copies
(sm_90).

``kernel-to-cuda`` gives such a kernel one ``!cuda.tensor_map<arg K : memref<…>, box […],
swizzle S>`` parameter per map, after the parameters its ``kernel.launch`` passes. Each
launch (:mod:`llmopt.codegen.executor`) appends one 128-byte map per such parameter, encoded
by the driver's ``cuTensorMapEncodeTiled`` from the address of the buffer the launch passes
as argument ``K``: the memref's element type, its extents and byte strides (those of the
memref type, whatever view the launch passes; a row-major buffer with ``?`` extents takes
them from the tensor passed), the box's extents and the shared-memory swizzle. Elements of a
box outside the buffer are read as zeros. The map is a kernel parameter passed by value
(``const __grid_constant__``), so a CUDA graph that captures the launch keeps it.

:func:`tiled_arguments` computes the encoder's arguments in the driver's order — dimension 0
the innermost (contiguous) one, the reverse of the memref's — as plain numbers and names,
without the driver; :func:`encode` hands them to the driver; :class:`TensorMapEncoder` does
both for one parameter of a launch, and remembers the maps of the buffers it has seen (a map
depends only on the address and the extents), so that a launch of a program called again
costs a dictionary lookup per map.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, NoneAttr

from llmopt.codegen.plan import ExecutorError
from llmopt.dialects import cuda

__all__ = ["GLOBAL_ALIGN", "TensorMapEncoder", "TensorMapStruct", "TiledArguments", "encode",
           "tiled_arguments"]

GLOBAL_ALIGN = 16
"""Bytes the buffer's address and each of its strides must be a multiple of."""
MAX_EXTENT = 1 << 32
"""The largest extent of a buffer a map describes."""
MAX_STRIDE = 1 << 40
"""Byte strides must stay below this."""
REMEMBERED = 64
"""Maps an encoder keeps (by address and extents) before it forgets them all."""

_DATA_TYPES = (
    (BFloat16Type, "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", 2),
    (Float16Type, "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", 2),
    (Float32Type, "CU_TENSOR_MAP_DATA_TYPE_FLOAT32", 4),
)
_SWIZZLES = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 128: "CU_TENSOR_MAP_SWIZZLE_128B"}


class TensorMapStruct(ctypes.Structure):
    """The 128 bytes of an encoded map (``CUtensorMap``, ``llmopt_tensor_map`` in the
    kernel), as a kernel argument passed by value."""

    _fields_ = [("bits", ctypes.c_uint64 * (cuda.TENSOR_MAP_BYTES // 8))]


@dataclass(frozen=True)
class TiledArguments:
    """The arguments of ``cuTensorMapEncodeTiled``, dimension 0 the innermost: the data
    type's and the swizzle's enum member names, the buffer's address, its extents
    (``globalDim``), the byte strides of dimensions 1 and up (``globalStrides``; dimension
    0 is contiguous), the box (``boxDim``) and the traversal strides (``elementStrides``,
    all 1). The interleave is none, L2 promotion 256 bytes, and elements outside the buffer
    are zeros."""

    data_type: str
    address: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    swizzle: str
    interleave: str = "CU_TENSOR_MAP_INTERLEAVE_NONE"
    l2_promotion: str = "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"
    oob_fill: str = "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE"


def _data_type(typ: cuda.TensorMapType) -> tuple[str, int]:
    """The map's data type name and the bytes of an element."""
    element = typ.buffer.element_type
    for kind, name, size in _DATA_TYPES:
        if isinstance(element, kind):
            return name, size
    raise ExecutorError(f"no tensor map for elements of {element} (bf16, f16 or f32)")


def tiled_arguments(typ: cuda.TensorMapType, address: int,
                    shape: Sequence[int] | None = None) -> TiledArguments:
    """The encoder's arguments for the map ``typ`` of the buffer at ``address``; ``shape``:
    the extents of the buffer passed (only read for the ``?`` extents of a row-major
    buffer, whose strides then follow from them).

    Raises:
        ExecutorError: the address or a stride is not a multiple of 16 bytes, an extent or
            a stride is out of the map's range, the element type has no map, or ``?``
            extents come without ``shape``.
    """
    data_type, size = _data_type(typ)
    buffer = typ.buffer
    extents = buffer.get_shape()
    if any(e < 0 for e in extents):
        if shape is None or len(shape) != len(extents):
            raise ExecutorError(f"a tensor map of {buffer} needs the extents of the buffer "
                                f"passed, got {shape}")
        extents = tuple(s if e < 0 else e for e, s in zip(extents, shape, strict=True))
    if isinstance(buffer.layout, NoneAttr):
        strides = tuple(prod(extents[k + 1:]) for k in range(len(extents)))
    else:
        found = buffer.get_strides()
        assert found is not None and None not in found, f"{buffer} has no static strides"
        strides = tuple(int(s) for s in found if s is not None)
    if strides[-1] != 1:
        raise ExecutorError(f"a tensor map needs a contiguous last dimension, {buffer} has "
                            f"stride {strides[-1]}")
    if address % GLOBAL_ALIGN:
        raise ExecutorError(f"a tensor map of {buffer}: the address 0x{address:x} is not a "
                            f"multiple of {GLOBAL_ALIGN} bytes")
    byte_strides = tuple(s * size for s in reversed(strides[:-1]))
    bad = [s for s in byte_strides if s % GLOBAL_ALIGN or not 0 < s < MAX_STRIDE]
    if bad:
        raise ExecutorError(f"a tensor map of {buffer}: byte strides {list(byte_strides)} "
                            f"must be multiples of {GLOBAL_ALIGN} below 2^40")
    if not all(0 < e <= MAX_EXTENT for e in extents):
        raise ExecutorError(f"a tensor map of {buffer}: extents {list(extents)} must be 1 "
                            f"to 2^32")
    swizzle = _SWIZZLES.get(typ.swizzle.data)
    if swizzle is None:
        raise ExecutorError(f"no tensor map with a {typ.swizzle.data}-byte swizzle")
    return TiledArguments(data_type, address, tuple(reversed(extents)), byte_strides,
                          tuple(reversed(typ.box_shape)), (1,) * len(extents), swizzle)


def encode(args: TiledArguments) -> TensorMapStruct:
    """The map ``cuTensorMapEncodeTiled`` makes of ``args``, copied into a
    :class:`TensorMapStruct`.

    Raises:
        llmopt.codegen.runtime.CudaError: the driver rejected the arguments.
    """
    from llmopt.codegen.runtime import _check, _driver

    driver = _driver()
    u64, u32 = driver.cuuint64_t, driver.cuuint32_t
    tensor_map: Any = _check(driver.cuTensorMapEncodeTiled(
        getattr(driver.CUtensorMapDataType, args.data_type), len(args.dims), args.address,
        [u64(d) for d in args.dims], [u64(s) for s in args.strides],
        [u32(b) for b in args.box], [u32(e) for e in args.element_strides],
        getattr(driver.CUtensorMapInterleave, args.interleave),
        getattr(driver.CUtensorMapSwizzle, args.swizzle),
        getattr(driver.CUtensorMapL2promotion, args.l2_promotion),
        getattr(driver.CUtensorMapFloatOOBfill, args.oob_fill),
    ), f"cuTensorMapEncodeTiled({args})")
    struct = TensorMapStruct()
    ctypes.memmove(ctypes.addressof(struct), tensor_map.getPtr(), ctypes.sizeof(struct))
    return struct


class TensorMapEncoder:
    """The map of one tensor-map parameter ``typ`` of a launch, for the tensor passed as its
    argument: encoded on first sight of the tensor's address (and extents, for a buffer
    with ``?`` extents), then remembered."""

    def __init__(self, typ: cuda.TensorMapType) -> None:
        self.type = typ
        self.dynamic = any(e < 0 for e in typ.buffer.get_shape())
        self._maps: dict[object, TensorMapStruct] = {}

    def __call__(self, tensor: Any) -> TensorMapStruct:
        """The map of ``tensor`` (a CUDA tensor)."""
        address = tensor.data_ptr()
        shape = tuple(tensor.shape) if self.dynamic else None
        key = (address, shape)
        found = self._maps.get(key)
        if found is None:
            if len(self._maps) >= REMEMBERED:
                self._maps.clear()
            found = self._maps[key] = encode(tiled_arguments(self.type, address, shape))
        return found
