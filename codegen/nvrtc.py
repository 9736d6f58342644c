"""Compile CUDA C++ source to CUBIN with NVRTC (through ``cuda.bindings.nvrtc``).

The binary is built for exactly one real architecture (``--gpu-architecture=sm_XY``): shipping
CUBIN rather than PTX means the driver never has to JIT code produced by a newer NVRTC than it
knows. Fast math is off unless asked for, so kernels keep IEEE semantics. Results go through the
persistent :mod:`llmopt.codegen.cache`.

CUDA libraries are imported when first needed, so importing this module is cheap. The
architecture to compile for defaults to the GPU's (:func:`llmopt.target.default_arch`).
Without cuda-python, or when it cannot load the NVRTC library, compiling raises
:class:`~llmopt.deps.MissingDependency` (an ``ImportError`` that says what to install).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from llmopt.codegen.cache import KernelCache, cache_key, default_cache
from llmopt.deps import CUDA, MissingDependency
from llmopt.target import DEFAULT_ARCH, default_arch, for_arch, normalize_arch

__all__ = [
    "DEFAULT_ARCH",
    "DEFAULT_OPTIONS",
    "NvrtcError",
    "compile_cuda",
    "default_arch",
    "enclosing_kernel",
    "include_dirs",
    "kernel_cache_key",
    "nvrtc_version",
]

#: Options passed to every compilation (before the caller's options).
DEFAULT_OPTIONS: tuple[str, ...] = ("-std=c++17",)

#: Header packages whose include directories are added with ``-I`` when installed.
_HEADER_LIBS: tuple[str, ...] = ("cudart", "cccl", "crt")

_ERROR_RE = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?:catastrophic )?error\b.*$", re.M)
_CALL_RE = re.compile(r"([A-Za-z_]\w*)\s*\(")
# Identifiers followed by "(" between "__global__" and the kernel's name that are not the name.
_NOT_A_NAME = frozenset(
    {
        "__launch_bounds__",
        "__maxnreg__",
        "__cluster_dims__",
        "__attribute__",
        "__declspec",
        "__align__",
        "alignas",
        "decltype",
    }
)


class NvrtcError(Exception):
    """NVRTC failed to compile a program.

    Attributes:
        log: the NVRTC program log (or the failing NVRTC call, for non-compilation errors).
        kernel_names: the ``__global__`` functions enclosing the reported error lines, in order
            of first appearance (empty when errors lie outside any kernel or in headers).
        source: the source text that was compiled.
    """

    def __init__(self, message: str, *, log: str, kernel_names: list[str], source: str) -> None:
        super().__init__(message)
        self.log = log
        self.kernel_names = kernel_names
        self.source = source


def _nvrtc() -> Any:
    """``cuda.bindings.nvrtc`` (:class:`MissingDependency` without cuda-python)."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as err:
        raise MissingDependency("cuda-python", CUDA) from err
    return nvrtc


def _check(result: Any, what: str, source: str = "") -> None:
    """Raise :class:`NvrtcError` unless ``result`` is ``NVRTC_SUCCESS``."""
    nvrtc = _nvrtc()
    if result == nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return
    name = getattr(result, "name", str(result))
    raise NvrtcError(f"{what} failed: {name}", log=name, kernel_names=[], source=source)


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> tuple[int, int]:
    """Return the ``(major, minor)`` version of the NVRTC library in use (the first call
    loads the library: :class:`MissingDependency` when cuda-python cannot find it)."""
    nvrtc = _nvrtc()
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except RuntimeError as failure:  # cuda.pathfinder's DynamicLibNotFoundError
        raise MissingDependency("the NVRTC library (nvidia-cuda-nvrtc)",
                                "pip install nvidia-cuda-nvrtc") from failure
    _check(err, "nvrtcVersion")
    return int(major), int(minor)


@functools.lru_cache(maxsize=1)
def include_dirs() -> tuple[str, ...]:
    """Return the CUDA header directories found by ``cuda.pathfinder`` (possibly none)."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory
    except ImportError:
        return ()
    found: list[str] = []
    for lib in _HEADER_LIBS:
        try:
            path = find_nvidia_header_directory(lib)
        except Exception:  # unknown library name or not installed
            continue
        if path and path not in found:
            found.append(str(path))
    return tuple(found)


def _normalize_arch(arch: str | None) -> str:
    return default_arch() if arch is None else normalize_arch(arch)


def _compile_options(arch: str, options: Sequence[str]) -> list[str]:
    """The options that determine the binary (``-I`` paths excluded)."""
    return [for_arch(arch).nvrtc_option, *DEFAULT_OPTIONS, *options]


def _speed_options() -> list[str]:
    """Options that change how fast NVRTC compiles, not what it produces (so they are not
    part of the cache key): ``--split-compile=0`` runs its optimisation passes on every
    core (NVRTC 12.1 and later), which matters for a whole model's source."""
    return ["--split-compile=0"] if nvrtc_version() >= (12, 1) else []


def kernel_cache_key(source: str, *, arch: str | None = None, options: Sequence[str] = ()) -> str:
    """Return the cache key :func:`compile_cuda` uses for these arguments."""
    arch = _normalize_arch(arch)
    return cache_key(source, arch, nvrtc_version(), _compile_options(arch, options))


def compile_cuda(
    source: str,
    *,
    arch: str | None = None,
    options: Sequence[str] = (),
    name: str = "llmopt.cu",
    cache: KernelCache | None = None,
) -> bytes:
    """Compile ``source`` to a CUBIN for exactly ``arch``.

    Args:
        source: CUDA C++ source; kernels should be ``extern "C"`` so their names are unmangled.
        arch: real architecture such as ``"sm_90"`` (default: the GPU's,
            :func:`llmopt.target.default_arch`).
        options: extra NVRTC options, appended after ``--gpu-architecture`` and ``-std=c++17``.
        name: the program name NVRTC uses in diagnostics.
        cache: the kernel cache to use (default: :func:`~llmopt.codegen.cache.default_cache`).

    Returns:
        The CUBIN image (an ELF file).

    Raises:
        NvrtcError: compilation failed; the message holds the log and the offending lines.
        ValueError: ``arch`` is not of the form ``sm_XY``.
        MissingDependency: cuda-python, the NVRTC library or the CUDA headers the source
            includes are not installed.
    """
    arch = _normalize_arch(arch)
    opts = _compile_options(arch, options)
    if cache is None:
        cache = default_cache()
    key = cache_key(source, arch, nvrtc_version(), opts)
    cubin = cache.get(key)
    if cubin is not None:
        return cubin
    headers = include_dirs()
    try:
        cubin = _nvrtc_compile(source, [*opts, *_speed_options(),
                                        *(f"-I{d}" for d in headers)], name, arch)
    except NvrtcError as err:
        if not headers and "cannot open source file" in err.log:
            raise MissingDependency("the CUDA headers (cuda-toolkit)",
                                    "pip install 'cuda-toolkit[cudart,cccl,crt]'") from err
        raise
    cache.put(key, cubin)
    return cubin


def _nvrtc_compile(source: str, options: list[str], name: str, arch: str) -> bytes:
    """Run NVRTC once (no cache) and return the CUBIN."""
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check(err, "nvrtcCreateProgram", source)
    try:
        encoded = [o.encode() for o in options]
        (compile_err,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        if compile_err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            log = _program_log(prog, source)
            if compile_err == nvrtc.nvrtcResult.NVRTC_ERROR_COMPILATION:
                raise _compilation_error(source, log, name, arch)
            _check(compile_err, f"nvrtcCompileProgram ({log.strip()})", source)
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(err, "nvrtcGetCUBINSize", source)
        # A fresh mutable buffer: NVRTC writes into it.
        buf = bytearray(size)
        (err,) = nvrtc.nvrtcGetCUBIN(prog, buf)
        _check(err, "nvrtcGetCUBIN", source)
        return bytes(buf)
    finally:
        (err,) = nvrtc.nvrtcDestroyProgram(prog)
        _check(err, "nvrtcDestroyProgram", source)


def _program_log(prog: Any, source: str) -> str:
    nvrtc = _nvrtc()
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    _check(err, "nvrtcGetProgramLogSize", source)
    buf = bytearray(max(int(size), 1))
    (err,) = nvrtc.nvrtcGetProgramLog(prog, buf)
    _check(err, "nvrtcGetProgramLog", source)
    return bytes(buf).rstrip(b"\0").decode(errors="replace")


def enclosing_kernel(source: str, line: int) -> str | None:
    """Return the name of the ``__global__`` function whose text contains 1-based ``line``."""
    lines = source.splitlines(keepends=True)
    if not 1 <= line <= len(lines):
        return None
    end = sum(len(text) for text in lines[:line])
    start = source.rfind("__global__", 0, end)
    if start < 0:
        return None
    name: str | None = None
    body = -1
    for match in _CALL_RE.finditer(source, start + len("__global__"), end):
        if match.group(1) not in _NOT_A_NAME:
            name = match.group(1)
            body = match.end()
            break
    if name is None:
        # The signature runs past the error line: the error is in the signature itself.
        for match in _CALL_RE.finditer(source, start + len("__global__")):
            if match.group(1) not in _NOT_A_NAME:
                return match.group(1)
        return None
    # The error line is inside the kernel unless the kernel's body closed before it.
    close = _body_end(source, body)
    if close is not None and close < end - len(lines[line - 1]):
        return None
    return name


def _body_end(source: str, pos: int) -> int | None:
    """Return the offset of the ``}`` closing the first ``{...}`` block at or after ``pos``."""
    depth = 0
    i = pos
    n = len(source)
    while i < n:
        c = source[i]
        if source.startswith("//", i):
            nl = source.find("\n", i)
            i = n if nl < 0 else nl
            continue
        if source.startswith("/*", i):
            close = source.find("*/", i + 2)
            i = n if close < 0 else close + 2
            continue
        if c in "\"'":
            j = i + 1
            while j < n and source[j] != c:
                j += 2 if source[j] == "\\" else 1
            i = j + 1
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        elif c == ";" and depth == 0:
            return i  # a declaration without a body
        i += 1
    return None


def _compilation_error(source: str, log: str, name: str, arch: str) -> NvrtcError:
    """Build an :class:`NvrtcError` that shows each error with its source context."""
    src_lines = source.splitlines()
    width = len(str(len(src_lines)))
    kernels: list[str] = []
    excerpts: list[str] = []
    for match in _ERROR_RE.finditer(log):
        if match.group("file") != name:
            continue
        lineno = int(match.group("line"))
        kernel = enclosing_kernel(source, lineno)
        if kernel is not None and kernel not in kernels:
            kernels.append(kernel)
        where = f" in kernel '{kernel}'" if kernel else ""
        parts = [f"{name}:{lineno}{where}: {match.group(0).split(': ', 1)[1]}"]
        for i in range(max(1, lineno - 2), min(len(src_lines), lineno + 2) + 1):
            marker = ">" if i == lineno else " "
            parts.append(f"  {marker} {i:>{width}} | {src_lines[i - 1]}")
        excerpts.append("\n".join(parts))
    message = f"NVRTC failed to compile {name} for {arch}:\n{log.rstrip()}"
    if excerpts:
        message += "\n\n" + "\n\n".join(excerpts)
    return NvrtcError(message, log=log, kernel_names=kernels, source=source)
