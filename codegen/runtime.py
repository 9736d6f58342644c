"""Load CUBIN images and launch their kernels with the CUDA driver API.

Modules are loaded into the primary context of torch's current device, the context torch itself
uses, and kernels are launched on torch's current stream by default, so they order correctly with
surrounding torch work and are captured by ``torch.cuda.graph``. :meth:`CudaFunction.launch`
never synchronises.

Keep a :class:`CudaModule` alive for as long as any of its kernels may run, including replays of
CUDA graphs that captured them.

Example::

    module = CudaModule(compile_cuda(source))
    saxpy = module.function("saxpy")
    saxpy.launch((blocks, 1, 1), (256, 1, 1), [y, x, 2.0, 1.0, n])
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from llmopt.target import STATIC_SMEM

if TYPE_CHECKING:
    import torch

__all__ = ["CudaError", "CudaFunction", "CudaModule", "Dim3", "KernelArg"]

#: Grid or block extents: ``(x, y, z)``; shorter tuples and plain ints are padded with 1.
Dim3: TypeAlias = "int | tuple[int] | tuple[int, int] | tuple[int, int, int]"
#: A kernel argument: a CUDA tensor (passed as its device pointer), an ``int`` (passed as a
#: ``long long``), a ``float`` (passed as a ``float``), or an explicit ctypes value such as
#: ``ctypes.c_double(x)`` or ``ctypes.c_int(n)`` for other parameter types.
KernelArg: TypeAlias = "torch.Tensor | int | float | ctypes._SimpleCData | ctypes.Structure"

class CudaError(RuntimeError):
    """A CUDA driver API call failed.

    Attributes:
        result: the ``CUresult`` returned by the driver.
        name: its name, e.g. ``"CUDA_ERROR_INVALID_VALUE"``.
    """

    def __init__(self, what: str, result: Any) -> None:
        name = getattr(result, "name", str(result))
        super().__init__(f"{what} failed: {name}")
        self.result = result
        self.name = name


_DRIVER: Any = None
_RAW_STREAM: Any = None


def _driver() -> Any:
    """``cuda.bindings.driver``, imported on first use."""
    global _DRIVER
    if _DRIVER is None:
        from cuda.bindings import driver

        _DRIVER = driver
    return _DRIVER


def _current_stream(device: int) -> int:
    """The raw ``cudaStream_t`` of torch's current stream on ``device``."""
    global _RAW_STREAM
    if _RAW_STREAM is None:
        import torch

        # The accessor torch's own generated code uses; fall back to the public API.
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is None:

            def raw(index: int) -> int:
                return int(torch.cuda.current_stream(index).cuda_stream)

        _RAW_STREAM = raw
    return _RAW_STREAM(device)


def _check(ret: Any, what: str) -> Any:
    """Unpack a ``(CUresult, *values)`` tuple; raise :class:`CudaError` unless it succeeded.

    Returns ``None`` for no values, the value for one, and the tuple of values otherwise.
    """
    driver = _driver()
    err, *values = ret if isinstance(ret, tuple) else (ret,)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise CudaError(what, err)
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _dim3(value: Dim3, what: str) -> tuple[int, int, int]:
    if type(value) is tuple and len(value) == 3 and min(value) >= 1:
        return value  # the common case, checked cheaply
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"{what} must have 1 to 3 extents, got {value!r}")
    x, y, z = (*dims, 1, 1)[:3]
    if min(x, y, z) < 1:
        raise ValueError(f"{what} extents must be positive, got {value!r}")
    return int(x), int(y), int(z)


_C_FLOAT = ctypes.c_float
_C_LONGLONG = ctypes.c_longlong
_C_VOID_P = ctypes.c_void_p


def _kernel_params(args: Sequence[KernelArg]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Return ``kernelParams`` in cuda-bindings' ``(values, ctypes types)`` form.

    cuda-bindings converts each value to its ctypes type and builds the ``void**`` array itself
    (see "Preparing kernel arguments" in the cuda-bindings overview); a ``None`` type passes a
    ``ctypes.Structure`` by address.
    """
    values: list[Any] = []
    types: list[Any] = []
    for i, arg in enumerate(args):
        kind = type(arg)
        if kind is float:
            values.append(arg)
            types.append(_C_FLOAT)
        elif kind is int:
            values.append(arg)
            types.append(_C_LONGLONG)
        elif hasattr(arg, "data_ptr"):
            if not arg.is_cuda:
                raise TypeError(f"kernel argument {i}: tensor is on {arg.device}, not on CUDA")
            values.append(arg.data_ptr())
            types.append(_C_VOID_P)
        elif isinstance(arg, ctypes.Structure):
            values.append(arg)
            types.append(None)
        elif isinstance(arg, ctypes._SimpleCData):
            values.append(arg)
            types.append(kind)
        elif isinstance(arg, bool):
            raise TypeError(f"kernel argument {i}: bool is ambiguous; pass ctypes.c_bool(...)")
        elif isinstance(arg, int):
            values.append(int(arg))
            types.append(_C_LONGLONG)
        elif isinstance(arg, float):
            values.append(float(arg))
            types.append(_C_FLOAT)
        else:
            raise TypeError(
                f"kernel argument {i}: unsupported type {kind.__name__} "
                "(expected a CUDA tensor, int, float or ctypes value)"
            )
    return tuple(values), tuple(types)


def _programmatic_config(grid: tuple[int, int, int], block: tuple[int, int, int],
                         shared_bytes: int, stream: int) -> Any:
    """A ``CUlaunchConfig`` with programmatic stream serialization allowed."""
    driver = _driver()
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = shared_bytes
    config.hStream = driver.CUstream(stream)
    config.attrs = [_programmatic_attribute()]
    config.numAttrs = 1
    return config


@functools.cache
def _programmatic_attribute() -> Any:
    """The launch attribute allowing programmatic stream serialization (made once)."""
    driver = _driver()
    attr = driver.CUlaunchAttribute()
    attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.programmaticStreamSerializationAllowed = 1
    return attr


def _context_for(device: int) -> Any:
    """Make the primary context of ``device`` current in this thread and return it."""
    driver = _driver()
    current = _check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
    cu_device = _check(driver.cuDeviceGet(device), "cuDeviceGet")
    if int(current) != 0:
        current_device = _check(driver.cuCtxGetDevice(), "cuCtxGetDevice")
        if int(current_device) == int(cu_device):
            return current
    # Retaining the primary context gives the one the CUDA runtime (and torch) uses; it stays
    # retained for the life of the process, like torch's own.
    ctx = _check(driver.cuDevicePrimaryCtxRetain(cu_device), "cuDevicePrimaryCtxRetain")
    _check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


class CudaModule:
    """A CUBIN image loaded into the primary CUDA context of one device.

    Args:
        cubin: the image, e.g. from :func:`llmopt.codegen.nvrtc.compile_cuda`.
        device: CUDA device index (default: torch's current device).
    """

    def __init__(self, cubin: bytes, *, device: int | None = None) -> None:
        """Load ``cubin`` into the primary context of ``device``."""
        import torch

        driver = _driver()
        self._handle: Any = None
        torch.cuda.init()
        self.device = torch.cuda.current_device() if device is None else int(device)
        _check(driver.cuInit(0), "cuInit")
        with torch.cuda.device(self.device):
            self._context = _context_for(self.device)
            self._handle = _check(driver.cuModuleLoadData(bytes(cubin)), "cuModuleLoadData")
        self._functions: dict[str, CudaFunction] = {}

    @property
    def handle(self) -> Any:
        """The driver's ``CUmodule`` handle."""
        if self._handle is None:
            raise CudaError("CudaModule", "module is closed")
        return self._handle

    @property
    def context(self) -> Any:
        """The ``CUcontext`` the module was loaded into."""
        return self._context

    def function(self, name: str) -> CudaFunction:
        """Return the kernel ``name`` (an ``extern "C"`` name or a mangled one); cached."""
        fn = self._functions.get(name)
        if fn is None:
            handle = _check(
                _driver().cuModuleGetFunction(self.handle, name.encode()),
                f"cuModuleGetFunction({name!r})",
            )
            fn = CudaFunction(self, name, handle)
            self._functions[name] = fn
        return fn

    def __getitem__(self, name: str) -> CudaFunction:
        return self.function(name)

    def close(self) -> None:
        """Unload the module; its functions become unusable."""
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        self._functions.clear()
        _check(_driver().cuModuleUnload(handle), "cuModuleUnload")

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown or a context already torn down
            pass

    def __repr__(self) -> str:
        state = "closed" if self._handle is None else f"device={self.device}"
        return f"<CudaModule {state} functions={sorted(self._functions)}>"


class CudaFunction:
    """One kernel of a :class:`CudaModule`; obtain it with :meth:`CudaModule.function`."""

    def __init__(self, module: CudaModule, name: str, handle: Any) -> None:
        """Wrap the driver handle ``handle`` of kernel ``name`` in ``module``."""
        self.module = module
        self.name = name
        self.handle = handle
        self._max_dynamic_shared: int | None = None
        self._carveout: int | None = None

    def get_attribute(self, attribute: Any) -> int:
        """Return a ``CUfunction_attribute`` (an enum member or its name without prefix)."""
        driver = _driver()
        if isinstance(attribute, str):
            attribute = getattr(driver.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{attribute}")
        value = _check(driver.cuFuncGetAttribute(attribute, self.handle), "cuFuncGetAttribute")
        return int(value)

    @property
    def max_dynamic_shared(self) -> int:
        """The current limit on dynamic shared memory per launch, in bytes."""
        if self._max_dynamic_shared is None:
            self._max_dynamic_shared = self.get_attribute("MAX_DYNAMIC_SHARED_SIZE_BYTES")
        return self._max_dynamic_shared

    def set_max_dynamic_shared(self, nbytes: int) -> None:
        """Allow launches with up to ``nbytes`` of dynamic shared memory (needed > 48 KiB)."""
        driver = _driver()
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _check(
            driver.cuFuncSetAttribute(self.handle, attr, int(nbytes)),
            f"cuFuncSetAttribute({self.name!r}, MAX_DYNAMIC_SHARED_SIZE_BYTES, {nbytes})",
        )
        self._max_dynamic_shared = int(nbytes)

    def set_preferred_carveout(self, percent: int) -> None:
        """Prefer ``percent`` (0-100) of each multiprocessor's unified L1/shared memory as
        shared memory for this kernel (a hint the driver follows where it can); a kernel
        launched several times asks the driver once."""
        if self._carveout == percent:
            return
        driver = _driver()
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
        _check(
            driver.cuFuncSetAttribute(self.handle, attr, int(percent)),
            f"cuFuncSetAttribute({self.name!r}, PREFERRED_SHARED_MEMORY_CARVEOUT, {percent})",
        )
        self._carveout = percent

    def launch(
        self,
        grid: Dim3,
        block: Dim3,
        args: Sequence[KernelArg],
        shared_bytes: int = 0,
        stream: int | None = None,
        programmatic: bool = False,
    ) -> None:
        """Enqueue one launch of this kernel; returns without synchronising.

        Args:
            grid: blocks in x, y, z.
            block: threads per block in x, y, z.
            args: the kernel's arguments in order: CUDA tensors go as their ``data_ptr()``,
                ``int`` as ``long long``, ``float`` as ``float``, ctypes values as themselves.
                The driver copies them during this call.
            shared_bytes: dynamic shared memory per block. Above the current limit (48 KiB by
                default) the limit is raised first with :meth:`set_max_dynamic_shared`.
            stream: a raw ``cudaStream_t`` handle; default torch's current stream.
            programmatic: launch with programmatic stream serialization (sm_90+): the
                kernel's blocks may start before the previous kernel in the stream has
                finished, so the kernel must wait for it (``griddepcontrol.wait``) before
                touching memory; ``cuLaunchKernelEx`` instead of ``cuLaunchKernel``.

        Raises:
            CudaError: the driver rejected the launch.
            TypeError: an argument has an unsupported type or is a tensor not on CUDA.
        """
        driver = _driver()
        gx, gy, gz = _dim3(grid, "grid")
        bx, by, bz = _dim3(block, "block")
        if shared_bytes > STATIC_SMEM and shared_bytes > self.max_dynamic_shared:
            self.set_max_dynamic_shared(shared_bytes)
        if stream is None:
            stream = _current_stream(self.module.device)
        params = _kernel_params(args)
        if programmatic:
            config = _programmatic_config((gx, gy, gz), (bx, by, bz), shared_bytes, stream)
            launch: tuple[Any, ...] = (config, self.handle, params, 0)
            start, what = driver.cuLaunchKernelEx, "cuLaunchKernelEx"
        else:
            launch = (self.handle, gx, gy, gz, bx, by, bz, shared_bytes, stream, params, 0)
            start, what = driver.cuLaunchKernel, "cuLaunchKernel"
        (err,) = start(*launch)
        if err == driver.CUresult.CUDA_ERROR_INVALID_CONTEXT:
            # This thread has no (or another) current context: use the module's and retry.
            _check(driver.cuCtxSetCurrent(self.module.context), "cuCtxSetCurrent")
            (err,) = start(*launch)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise CudaError(
                f"{what}({self.name!r}, grid={(gx, gy, gz)}, block={(bx, by, bz)}, "
                f"shared={shared_bytes})",
                err,
            )

    def __call__(
        self,
        grid: Dim3,
        block: Dim3,
        *args: KernelArg,
        shared_bytes: int = 0,
        stream: int | None = None,
    ) -> None:
        """Shorthand for :meth:`launch` with the kernel arguments given positionally."""
        self.launch(grid, block, args, shared_bytes=shared_bytes, stream=stream)

    def __repr__(self) -> str:
        return f"<CudaFunction {self.name!r}>"
