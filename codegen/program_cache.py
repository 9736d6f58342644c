"""Whole lowered programs in the compile cache: a second build of the same program reads
what it needs instead of capturing and lowering again.

:func:`program_cache_key` is a SHA-256 over everything that determines a lowered program —
what was captured (a model's configuration, the length, the dtype), the pass pipeline, the
versions of torch, transformers and xDSL, the registered passes and dialects, llmopt's own
sources and the tuning tables — so a changed pass or config is a miss. :func:`cached_program`
looks a key up in the kernel cache (:mod:`llmopt.codegen.cache`, the same directory and
rules: ``LLMOPT_NO_CACHE=1`` bypasses it); on a miss it builds the module and stores it.

An entry holds up to three parts, each compressed on its own so that a hit decompresses and
parses only the part its caller asks for (:class:`LoweredProgram`):

* ``ir``: the printed module, whole (what ``llmopt compile --emit <level>`` writes);
* ``host``: for a module lowered to CUDA IR, its :func:`~llmopt.codegen.plan.host_side`
  (the host function and the kernels' signatures), what
  :class:`~llmopt.codegen.executor.CompiledProgram` plans from, encoded by
  :func:`~llmopt.codegen.ir_encoding.encode_module` so that a hit rebuilds it without the
  text parser (a whole model's host function has thousands of ops);
* ``cuda``: for such a module, its printed CUDA translation unit, which goes to NVRTC (and
  its cache, keyed on that text) as it is.

The parts are written together, from one module, in one checksummed entry bound to its key;
a part that does not decompress or parse makes the program rebuilt and stored anew, never
half-used.
"""

from __future__ import annotations

import contextlib
import struct
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xdsl.dialects.builtin import ModuleOp

__all__ = ["LoweredProgram", "cached_lowering", "cached_program", "code_fingerprint",
           "program_cache_key", "split_parts"]

_MAGIC = b"llmopt-program-2\n"
# after the magic: the compressed lengths of the ir, host and cuda parts (u64, little
# endian; 0: absent), then the parts in that order
_LENGTHS = struct.Struct("<3Q")
_PARTS = ("ir", "host", "cuda")


def code_fingerprint() -> str:
    """A hash of llmopt's own Python sources (a changed pass must miss the program cache)."""
    import hashlib

    import llmopt

    root = Path(llmopt.__file__).resolve().parent
    files: list[Path] = []
    packages = [root]
    while packages:  # llmopt and its sub-packages: directories with an __init__.py
        package = packages.pop()
        files += sorted(package.glob("*.py"))
        packages += sorted(p.parent for p in package.glob("*/__init__.py"))
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        with contextlib.suppress(OSError):
            digest.update(path.read_bytes())
    return digest.hexdigest()


def program_cache_key(identity: str, seq: int, dtype: str, elements: Sequence[str]) -> str:
    """The compile-cache key of a whole model lowered by the pipeline ``elements``: the
    model's ``identity`` (:func:`model_identity`, or a config's JSON), the sequence length
    and dtype, the pipeline, the versions of torch, transformers and xDSL, the registered
    passes and dialects, a hash of llmopt's sources and one of the tuning tables."""
    import hashlib
    from importlib.metadata import PackageNotFoundError, version

    from llmopt import registry
    from llmopt.plugins import load_entry_points
    from llmopt.tools.tune import tables_fingerprint

    load_entry_points()  # as lowering will: the registry below is then complete
    versions = []
    for package in ("torch", "transformers", "xdsl"):
        try:
            versions.append(f"{package}={version(package)}")
        except PackageNotFoundError:
            versions.append(f"{package}=none")
    parts = [
        "llmopt-program-2", identity, f"seq={seq}", f"dtype={dtype}", ",".join(elements),
        *versions, ",".join(sorted(registry.PASSES)), ",".join(sorted(registry.DIALECTS)),
        code_fingerprint(), f"tuned={tables_fingerprint()}",
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def split_parts(module: ModuleOp, on_source: Callable[[str], None] | None = None
                ) -> dict[str, str]:
    """The texts an entry holds for ``module``: ``ir`` always; ``cuda`` and ``host`` (unless
    the encoding cannot express the host side) when it is lowered to CUDA IR (it has
    ``cuda.kernel`` ops and no ``kernel.func`` left). The CUDA source is printed first and
    handed to ``on_source`` before the other parts are printed (NVRTC can start on it)."""
    from llmopt.codegen.cuda_printer import cuda_source
    from llmopt.codegen.ir_encoding import EncodingError, encode_module
    from llmopt.codegen.plan import host_side
    from llmopt.dialects import cuda, kernel

    parts: dict[str, str] = {}
    ops = list(module.ops)
    if (any(isinstance(op, cuda.KernelOp) for op in ops)
            and not any(isinstance(op, kernel.FuncOp) for op in ops)):
        parts["cuda"] = cuda_source(module)
        if on_source is not None:
            on_source(parts["cuda"])
        with contextlib.suppress(EncodingError):  # then a hit plans from the whole IR
            parts["host"] = encode_module(host_side(module))
    parts["ir"] = str(module)
    return parts


def _pack(parts: dict[str, str]) -> bytes:
    """The payload of an entry holding ``parts`` (each compressed on its own)."""
    blobs = [zlib.compress(parts[name].encode(), 6) if name in parts else b""
             for name in _PARTS]
    return _MAGIC + _LENGTHS.pack(*map(len, blobs)) + b"".join(blobs)


def _unpack(payload: bytes) -> dict[str, bytes] | None:
    """The compressed parts of an entry's payload, or ``None`` if it is not one."""
    if not payload.startswith(_MAGIC) or len(payload) < len(_MAGIC) + _LENGTHS.size:
        return None
    lengths = _LENGTHS.unpack_from(payload, len(_MAGIC))
    offset = len(_MAGIC) + _LENGTHS.size
    if not lengths[0] or offset + sum(lengths) != len(payload):
        return None
    parts = {}
    for name, length in zip(_PARTS, lengths, strict=True):
        if length:
            parts[name] = payload[offset:offset + length]
        offset += length
    return parts


class LoweredProgram:
    """A whole lowered program: built on a miss, or read part by part from the compile cache
    on a hit (see the module docstring). Each of :attr:`module`, :attr:`host` and
    :attr:`source` is produced on first use; a part of the entry that turns out damaged
    rebuilds the program (``build()``) and stores it anew.

    Attributes:
        key: the entry's key (:func:`program_cache_key`).
        hit: whether the program came from the cache (``False`` once it had to be built).
        read_seconds: the seconds spent decompressing and parsing cached parts so far.
    """

    def __init__(self, key: str, build: Callable[[], ModuleOp],
                 before_store: Callable[[], None] | None = None,
                 on_source: Callable[[str], None] | None = None) -> None:
        """Look ``key`` up; on a miss (or an entry of another layout), build and store.
        ``before_store`` runs after a built module's parts are printed and before they are
        stored (it may raise: then nothing is stored); ``on_source`` gets a built module's
        CUDA source as soon as it is printed (see :func:`split_parts`)."""
        from llmopt.codegen.cache import default_cache

        self.key = key
        self._build = build
        self._before_store = before_store
        self._on_source = on_source
        self._module: ModuleOp | None = None
        self._host: ModuleOp | None = None
        self._source: str | None = None
        self._parts: dict[str, bytes] = {}
        self.read_seconds = 0.0
        began = time.perf_counter()
        blob = default_cache().get(key)
        parts = _unpack(blob) if blob is not None else None
        self.read_seconds = time.perf_counter() - began
        self.hit = parts is not None
        if parts is None:
            self._rebuild()
        else:
            self._parts = parts

    def _rebuild(self) -> None:
        """Build the module, store its parts and serve everything from it from now on."""
        from llmopt.codegen.cache import default_cache

        module = self._build()
        parts = split_parts(module, self._on_source)
        if self._before_store is not None:
            self._before_store()
        default_cache().put(self.key, _pack(parts))
        self._module, self._host, self._source = module, module, parts.get("cuda")
        self._parts = {}
        self.hit = False

    def _text(self, name: str) -> str | None:
        """A cached part's text, or ``None`` when the entry does not hold it."""
        blob = self._parts.get(name)
        return None if blob is None else zlib.decompress(blob).decode()

    def _read(self, read: Callable[[], object]) -> bool:
        """Run ``read`` on the cached parts (timed); ``False`` if they do not decompress,
        decode or parse (the program is then rebuilt)."""
        began = time.perf_counter()
        try:
            read()
        except Exception:  # a damaged or foreign entry: build anew
            self.read_seconds += time.perf_counter() - began
            self._rebuild()
            return False
        self.read_seconds += time.perf_counter() - began
        return True

    @property
    def module(self) -> ModuleOp:
        """The whole module (on a hit, its full text parsed)."""
        if self._module is None:
            from llmopt.api import parse

            def read() -> None:
                text = self._text("ir")
                assert text is not None
                self._module = parse(text)

            self._read(read)
        assert self._module is not None
        return self._module

    @property
    def host(self) -> ModuleOp:
        """What :class:`~llmopt.codegen.executor.CompiledProgram` plans from: on a hit, the
        cached :func:`~llmopt.codegen.plan.host_side` module (decoded; no kernel code is
        read) when the entry holds one, else :attr:`module`. Give it :attr:`source` too."""
        if self._host is None:
            if "host" not in self._parts:
                return self.module
            from llmopt.codegen.ir_encoding import decode_module
            from llmopt.codegen.plan import is_host_side

            def read() -> None:
                text = self._text("host")
                assert text is not None
                host = decode_module(text)
                if not is_host_side(host):
                    raise ValueError("the host part is not a host-side module")
                self._host = host

            self._read(read)
        assert self._host is not None
        return self._host

    @property
    def source(self) -> str:
        """The module's printed CUDA source (on a hit, the cached text as it is)."""
        if self._source is None and "cuda" in self._parts:

            def read() -> None:
                self._source = self._text("cuda")

            self._read(read)
        if self._source is None:  # a module without kernels: print it
            from llmopt.codegen.cuda_printer import cuda_source

            self._source = cuda_source(self.module)
        return self._source


def cached_program(key: str, build: Callable[[], ModuleOp],
                   before_store: Callable[[], None] | None = None,
                   on_source: Callable[[str], None] | None = None) -> LoweredProgram:
    """The program cached under ``key``, or ``build()``'s, then cached (see
    :class:`LoweredProgram`: a hit reads only the parts asked for). ``before_store`` runs
    between printing a built program's parts and storing them: the verification of its
    last passes can finish meanwhile, and a failure stores nothing. ``on_source`` receives
    a built program's CUDA source before its other parts are printed: its compilation can
    start meanwhile."""
    return LoweredProgram(key, build, before_store, on_source)


def cached_lowering(key: str, build: Callable[[], ModuleOp]) -> tuple[ModuleOp, float | None]:
    """The whole module cached under ``key``, or ``build()``'s, then cached. Returns it and
    the seconds a hit took to read and parse it (``None`` when it was built)."""
    program = cached_program(key, build)
    module = program.module
    return module, program.read_seconds if program.hit else None
