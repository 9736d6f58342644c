"""The GPU a program is lowered for: one description of every architecture llmopt knows.

A :class:`Target` holds the facts of one GPU that the compiler's decisions depend on: how many
multiprocessors share the work (the scheduling heuristics count waves of blocks), how much
shared memory a block may use statically and in all (``stage-inputs`` and ``async-copy``
budget their tiles, ``kernel-to-cuda`` declares shared memory dynamic above the static limit
and refuses a kernel above the maximum), the registers and threads a block and a
multiprocessor have, which warp-level ``mma.sync`` shapes exist (the tensor-core schedules
need TF32 ``m16n8k8``, sm_80 and newer), and the architecture string NVRTC compiles for.

:data:`TARGETS` holds the published figures of each architecture for one representative GPU;
:meth:`Target.from_device` reads the GPU that is actually there through the CUDA driver
(``cuda-python``, imported only then), so that, for example, an H100 PCIe's 114
multiprocessors replace the table's 132. :func:`current_target` is what code that runs on
the device uses (``llmopt.compile``, the executor, ``llmopt tune``): the device's target, or
the sm_90 default where no GPU is visible. Importing this module imports nothing heavy: the
dialects and passes read it.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import sys
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ARCH",
    "DEFAULT_ARCH",
    "DEVICE_VARIANTS",
    "MIN_ARCH",
    "MAX_THREADS_PER_BLOCK",
    "GRID_DEPENDENCY_MIN_SM",
    "BULK_PREFETCH_MIN_SM",
    "LDMATRIX_MIN_SM",
    "MMA_SHAPES",
    "STATIC_SMEM",
    "TARGETS",
    "TF32_MMA",
    "WARP",
    "MmaShape",
    "Target",
    "arch_number",
    "base_arch",
    "current_target",
    "default_arch",
    "for_arch",
    "normalize_arch",
    "smem_budget",
]

ARCH = re.compile(r"sm_\d+[a-z]?")
"""What an architecture string looks like: ``sm_90``, ``sm_90a``, ``sm_100f``."""

DEFAULT_ARCH = "sm_90"
"""The architecture lowered and compiled for when none is given and no GPU is visible."""

MIN_ARCH = 70
"""The oldest GPU architecture llmopt generates code for (``sm_70``)."""

WARP = 32
"""Threads of a warp (every NVIDIA architecture)."""

MAX_THREADS_PER_BLOCK = 1024
"""Threads a block may have (every architecture since sm_20)."""

MAX_CLUSTER = 8
"""Blocks a cluster may portably have (sm_90+: ``__cluster_dims__``)."""

STATIC_SMEM = 48 * 1024
"""Bytes of shared memory a block may declare statically; more must be dynamic, opted into
per kernel (``cudaFuncAttributeMaxDynamicSharedMemorySize``)."""

REGS_PER_THREAD = 255
"""Registers a thread may have (every architecture since sm_35)."""

REGS_PER_SM = 64 * 1024
"""32-bit registers of a multiprocessor (sm_80 to sm_120)."""


@dataclass(frozen=True)
class MmaShape:
    """One warp-wide ``mma.sync`` shape: the 32 threads of a warp multiply an ``m × k``
    matrix by a ``k × n`` one, both of ``operands`` type, into an ``m × n`` accumulator of
    ``accumulator`` type; it exists on sm_``min_sm`` and newer."""

    m: int
    n: int
    k: int
    operands: str
    accumulator: str = "f32"
    min_sm: int = 80

    @property
    def name(self) -> str:
        """The PTX spelling of the shape and types, e.g. ``m16n8k8.tf32``."""
        return f"m{self.m}n{self.n}k{self.k}.{self.operands}"


TF32_MMA = MmaShape(16, 8, 8, "tf32")
"""The shape the ``mma`` dialect emits (``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32``):
three of them compute an ``f32`` product to ``f32`` accuracy (see :mod:`llmopt.dialects.mma`)."""

MMA_SHAPES = (TF32_MMA, MmaShape(16, 8, 16, "bf16"), MmaShape(16, 8, 16, "f16"))
"""Every ``mma.sync`` shape a target may offer. The ``bf16``/``f16`` ``m16n8k16`` shapes
multiply the half-precision storage types exactly, one ``mma.sync`` a product (see
:mod:`llmopt.dialects.mma`)."""

LDMATRIX_MIN_SM = 75
"""The first architecture with ``ldmatrix`` (sm_75)."""

GRID_DEPENDENCY_MIN_SM = 90
"""The first architecture with programmatic dependent launch (``griddepcontrol``, sm_90)."""

BULK_PREFETCH_MIN_SM = 90
"""The first architecture that prefetches a whole range into L2 with one instruction
(``cp.async.bulk.prefetch.L2``, sm_90)."""

NAN_MIN_MAX_ARCH = 80
"""The first architecture with a NaN-propagating ``f32`` maximum and minimum in one
instruction (``max.NaN``/``min.NaN``, sm_80)."""

WGMMA_ARCH = "sm_90a"
"""The one architecture with warpgroup products (``wgmma``): sm_90's arch-specific target."""

DEVICE_VARIANTS = {"sm_90": WGMMA_ARCH}
"""The architecture code for a GPU of each base architecture is compiled for by default
(:meth:`Target.from_device`): its arch-specific variant where that variant has instructions
llmopt uses (sm_90a: ``wgmma``). A variant's CUBIN runs only on GPUs of exactly that compute
capability, which is all a program compiled for the GPU it runs on needs; ``--arch sm_90``
(``lower-to-cuda{arch=sm_90}``) still compiles the portable base."""


@dataclass(frozen=True)
class Target:
    """The facts of one GPU that lowering depends on.

    ``arch`` is what NVRTC compiles for (``sm_90``); ``sms`` the multiprocessors;
    ``max_smem`` the shared memory one block may use in all (dynamic shared memory opted
    into above ``static_smem``), ``smem_per_sm`` what a multiprocessor has; ``regs_per_thread``
    and ``regs_per_sm`` the 32-bit registers; ``max_threads`` a block's threads at most,
    ``threads_per_sm`` a multiprocessor's resident threads at most; ``name`` the GPU the
    figures are of (the device's name when read from one). Sizes are bytes.
    """

    arch: str
    sms: int
    max_smem: int = STATIC_SMEM
    smem_per_sm: int = STATIC_SMEM
    static_smem: int = STATIC_SMEM
    regs_per_thread: int = REGS_PER_THREAD
    regs_per_sm: int = REGS_PER_SM
    max_threads: int = MAX_THREADS_PER_BLOCK
    threads_per_sm: int = 2048
    name: str = ""

    @property
    def sm(self) -> int:
        """The architecture's number (90 for ``sm_90`` and ``sm_90a``)."""
        return arch_number(self.arch)

    @property
    def mma_shapes(self) -> tuple[MmaShape, ...]:
        """The :data:`MMA_SHAPES` this target has."""
        return tuple(s for s in MMA_SHAPES if self.sm >= s.min_sm)

    def has_mma(self, shape: MmaShape = TF32_MMA) -> bool:
        """Whether ``shape`` (default: the ``mma`` dialect's TF32 ``m16n8k8``) exists here."""
        return shape in self.mma_shapes

    @property
    def nvrtc_option(self) -> str:
        """``--gpu-architecture=<arch>``: NVRTC makes CUBIN for exactly this architecture."""
        return f"--gpu-architecture={self.arch}"

    @classmethod
    def from_device(cls, device: int | None = None) -> Target:
        """Device ``device``'s target, read through the CUDA driver (see :func:`current_target`)."""
        found = _query_device(_default_device() if device is None else device)
        if found is None:
            return TARGETS[DEFAULT_ARCH]
        arch = f"sm_{found.pop('major')}{found.pop('minor')}"
        base = for_arch(DEVICE_VARIANTS.get(arch, arch))
        return dataclasses.replace(base, **found)


TARGETS: dict[str, Target] = {
    t.arch: t for t in (
        Target("sm_80", 108, 163 * 1024, 164 * 1024, name="A100"),
        Target("sm_86", 84, 99 * 1024, 100 * 1024, threads_per_sm=1536, name="RTX A6000"),
        Target("sm_89", 128, 99 * 1024, 100 * 1024, threads_per_sm=1536, name="RTX 4090"),
        Target("sm_90", 132, 227 * 1024, 228 * 1024, name="H100 SXM / H200"),
        Target("sm_100", 148, 227 * 1024, 228 * 1024, name="B200"),
        Target("sm_120", 170, 99 * 1024, 100 * 1024, threads_per_sm=1536, name="RTX 5090"),
    )
}
"""The architectures llmopt knows, each with the figures of one GPU of it (the CUDA
programming guide's per-compute-capability limits; the multiprocessors of the GPU named)."""


def arch_number(arch: str) -> int:
    """The number of an architecture string: 90 for ``sm_90`` or ``sm_90a``, 0 for text
    without digits."""
    digits = re.sub(r"\D", "", arch)
    return int(digits) if digits else 0


def base_arch(arch: str) -> str:
    """The base architecture of ``arch``: ``sm_90`` for ``sm_90a`` (and for ``sm_90``)."""
    number = arch_number(arch)
    return f"sm_{number}" if number else arch


def normalize_arch(arch: str) -> str:
    """``arch`` as ``sm_XY`` (``"90"`` becomes ``"sm_90"``).

    Raises:
        ValueError: ``arch`` is neither digits nor of the form ``sm_XY``.
    """
    if arch.isdigit():
        arch = f"sm_{arch}"
    if not ARCH.fullmatch(arch):
        raise ValueError(f"invalid GPU architecture {arch!r}: expected e.g. 'sm_90'")
    return arch


def for_arch(arch: str) -> Target:
    """The target of ``arch``: its :data:`TARGETS` entry; a variant (``sm_90a``) that of its
    base architecture under its own name; an architecture llmopt does not know the figures
    of has those of :data:`DEFAULT_ARCH` under its own name (so its ``mma`` shapes are its
    own: none before sm_80)."""
    known = TARGETS.get(arch)
    if known is not None:
        return known
    base = TARGETS.get(f"sm_{arch_number(arch)}", TARGETS[DEFAULT_ARCH])
    return dataclasses.replace(base, arch=arch, name="")


def smem_budget(gpu: Target) -> int:
    """Shared memory the scheduling passes give one block's tiles: half of what a block may
    use (two blocks still fit a multiprocessor), at least the static 48 KiB. Above 48 KiB
    ``kernel-to-cuda`` declares it dynamic."""
    return max(gpu.static_smem, gpu.max_smem // 2)


@functools.cache
def _current(device: int) -> Target:
    return Target.from_device(device)


def current_target(device: int | None = None) -> Target:
    """The target of the GPU code runs on, read once per device (:meth:`Target.from_device`):
    CUDA device ``device`` (default: torch's current device when torch has initialised CUDA,
    else device 0) as the CUDA driver describes it — its compute capability, multiprocessors,
    shared memory, registers and thread limits, the rest from :func:`for_arch` of its
    architecture; the :data:`DEFAULT_ARCH` target when there is no driver or no such
    device."""
    return _current(_default_device() if device is None else device)


def default_arch() -> str:
    """The architecture of :func:`current_target` (``sm_90`` without a GPU)."""
    return current_target().arch


def _default_device() -> int:
    """Torch's current CUDA device where torch has initialised CUDA (so that code following
    ``torch.cuda.set_device`` sees that device), else device 0; torch is not imported."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return int(torch.cuda.current_device())
    except (AttributeError, RuntimeError):
        pass
    return 0


_DEVICE_ATTRIBUTES = {
    "major": "COMPUTE_CAPABILITY_MAJOR",
    "minor": "COMPUTE_CAPABILITY_MINOR",
    "sms": "MULTIPROCESSOR_COUNT",
    "max_smem": "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "smem_per_sm": "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "static_smem": "MAX_SHARED_MEMORY_PER_BLOCK",
    "regs_per_sm": "MAX_REGISTERS_PER_MULTIPROCESSOR",
    "max_threads": "MAX_THREADS_PER_BLOCK",
    "threads_per_sm": "MAX_THREADS_PER_MULTIPROCESSOR",
}
""":class:`Target` fields (and the compute capability) by ``CU_DEVICE_ATTRIBUTE_*`` name."""


def _query_device(device: int) -> dict[str, Any] | None:
    """The :data:`_DEVICE_ATTRIBUTES` of ``device`` and its ``name``, read through the CUDA
    driver; ``None`` when cuda-python, the driver or the device is missing."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return None
    try:
        ok = driver.CUresult.CUDA_SUCCESS
        (err,) = driver.cuInit(0)
        if err != ok:
            return None
        err, handle = driver.cuDeviceGet(device)
        if err != ok:
            return None
        found: dict[str, Any] = {}
        for field, attribute in _DEVICE_ATTRIBUTES.items():
            err, value = driver.cuDeviceGetAttribute(
                getattr(driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{attribute}"), handle)
            if err != ok:
                return None
            found[field] = int(value)
        err, name = driver.cuDeviceGetName(256, handle)
        if err == ok:
            found["name"] = bytes(name).split(b"\0", 1)[0].decode(errors="replace")
        return found
    except Exception:  # no driver library, or a driver too old for these bindings
        return None
