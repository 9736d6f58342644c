"""Shared memory of CUDA kernels: where each ``kernel.shared`` buffer lives, and the bytes
each launch asks for (used by ``kernel-to-cuda``).

CUDA declares at most 48 KiB of ``__shared__`` arrays statically. When the ``kernel.shared``
buffers of a kernel total more (each rounded up to :data:`SHARED_ALIGN` bytes), or one of
them is swizzled or the destination of a ``tma.load``, all of them move into dynamic shared
memory, at 16-byte-aligned offsets in declaration order (a swizzled one at a 1024-byte
boundary, another ``tma.load`` destination at a 128-byte one; :func:`shared_layout`), and every
``kernel.launch`` of the kernel gets ``smem`` of at least
their total (:func:`size_launches`). A kernel or a launch that needs more than a block may use
on the target is an error naming both byte counts. Kernel IR does not know the 48 KiB limit
(it is CUDA's), so the choice is made here, where the declarations are written.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from xdsl.dialects.builtin import IntegerAttr, MemRefType, ModuleOp, i64
from xdsl.ir import Attribute

from llmopt.dialects import kernel, tma
from llmopt.dialects.wgmma import SWIZZLE_BYTES, SWIZZLE_ROWS, swizzle
from llmopt.lowering._cuda_types import bit_width
from llmopt.passes._rewrite import fail
from llmopt.target import STATIC_SMEM, for_arch

__all__ = ["SHARED_ALIGN", "SWIZZLE_ALIGN", "TMA_ALIGN", "SharedLayout", "shared_layout",
           "shared_layouts", "size_launches"]

SHARED_ALIGN = 16
"""Bytes every shared buffer is aligned to (and its size rounded up to)."""
SWIZZLE_ALIGN = SWIZZLE_BYTES * SWIZZLE_ROWS
"""Bytes a swizzled buffer (``llmopt.swizzle``) is aligned to: its swizzle atom, whose
address bits the swizzle permutes; such a kernel's shared memory is always dynamic."""
TMA_ALIGN = 128
"""Bytes the destination of a bulk tensor copy (``tma.load``) is aligned to, as
``cp.async.bulk.tensor`` requires of a tile without swizzle."""


@dataclass
class SharedLayout:
    """Where the ``kernel.shared`` buffers of one kernel live. ``total``: their bytes, each
    rounded up to :data:`SHARED_ALIGN`; ``offsets``: each buffer's byte offset when they are
    laid out one after another in declaration order; ``dynamic``: whether they go into the
    kernel's dynamic shared memory at those offsets (else each is a ``__shared__`` array)."""

    total: int
    offsets: dict[kernel.SharedOp, int]
    dynamic: bool
    align: int = SHARED_ALIGN
    """The alignment of the dynamic shared memory (:data:`SWIZZLE_ALIGN` with a swizzled
    buffer)."""


def _element_bytes(t: Attribute) -> int:
    return (bit_width(t) + 7) // 8


def shared_layout(func: kernel.FuncOp, static_limit: int = STATIC_SMEM) -> SharedLayout:
    """The layout of ``func``'s shared buffers: dynamic when they total more than
    ``static_limit`` bytes (CUDA's 48 KiB of static shared memory), or when one of them must
    start at a boundary above 16 bytes (swizzled, or written by ``tma.load``)."""
    offsets: dict[kernel.SharedOp, int] = {}
    total = 0
    align = SHARED_ALIGN
    copied = {op.dst for op in func.walk() if isinstance(op, tma.LoadOp)}
    for op in func.body.block.ops:  # kernel.shared sits at the top level of its kernel
        if isinstance(op, kernel.SharedOp):
            typ = op.result.type
            assert isinstance(typ, MemRefType)
            nbytes = max(1, prod(typ.get_shape())) * _element_bytes(typ.element_type)
            boundary = (SWIZZLE_ALIGN if swizzle(op.result) is not None
                        else TMA_ALIGN if op.result in copied else SHARED_ALIGN)
            total = -(-total // boundary) * boundary
            align = max(align, boundary)
            offsets[op] = total
            total += -(-nbytes // SHARED_ALIGN) * SHARED_ALIGN
    if align > SHARED_ALIGN:  # dynamic, so that the buffer's address is known to be aligned
        return SharedLayout(total, offsets, True, align)
    return SharedLayout(total, offsets, total > static_limit)


def shared_layouts(module: ModuleOp, arch: str) -> dict[str, SharedLayout]:
    """Every kernel's shared-memory layout; raises when a kernel needs more shared memory
    than a block may use on ``arch``."""
    gpu = for_arch(arch)
    layouts: dict[str, SharedLayout] = {}
    for func in module.ops:
        if not isinstance(func, kernel.FuncOp):
            continue
        layout = shared_layout(func, gpu.static_smem)
        if layout.total > gpu.max_smem:
            raise fail(func, f"kernel @{func.sym_name.data} needs {layout.total} bytes of "
                             f"shared memory ({len(layout.offsets)} kernel.shared buffers), "
                             f"more than the {gpu.max_smem} bytes a block may use on {arch}")
        layouts[func.sym_name.data] = layout
    return layouts


def size_launches(module: ModuleOp, layouts: dict[str, SharedLayout], arch: str) -> None:
    """Give every launch of a kernel with dynamic shared memory at least the bytes its
    buffers take (``smem``), and check each launch's total against ``arch``'s limit."""
    limit = for_arch(arch).max_smem
    for launch in module.walk():
        if not isinstance(launch, kernel.LaunchOp):
            continue
        name = launch.kernel.root_reference.data
        layout = layouts.get(name)
        if layout is None:
            continue
        static = 0 if layout.dynamic else layout.total
        smem = max(launch.shared_bytes, layout.total) if layout.dynamic else launch.shared_bytes
        if static + smem > limit:
            what = (f"smem {smem}" if layout.dynamic
                    else f"{static} bytes of static shared memory and smem {smem}")
            raise fail(launch, f"the launch of @{name} asks for {what}, more than the "
                               f"{limit} bytes a block may use on {arch}")
        if smem != launch.shared_bytes:
            launch.smem = IntegerAttr(smem, i64)
