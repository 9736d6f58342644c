"""A persistent, content-addressed on-disk cache for compiled kernels.

Entries are keyed by :func:`cache_key`, a SHA-256 over everything that determines the compiled
binary (source text, GPU architecture, NVRTC version, compiler options). Each entry is one file::

    <cache dir>/<key[:2]>/<key>.bin

holding a fixed-size header (magic, key length, payload length, SHA-256 over the key and the
payload), the key itself and then the payload. The key in the header binds an entry to its
name: an entry copied or renamed to another key's path (or two entries swapped) is a miss,
never another key's payload. Writes are atomic (temporary file in the same directory,
``fsync``, ``os.replace``), so concurrent writers never expose a half-written entry; a
truncated, corrupted or foreign entry (say, from a crash of the file system or a manual edit),
and anything else found at an entry's path (a directory, a link to elsewhere), is removed on
read and reported as a miss, so that the next write rebuilds it.

A cache that cannot be written (a read-only or unwritable directory) or read says so once, as
a warning on stderr naming the directory, and then behaves like an empty one: compilation never
fails because of the cache.

The directory is ``$LLMOPT_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/llmopt/kernels``, else
``~/.cache/llmopt/kernels``. Setting ``LLMOPT_NO_CACHE=1`` disables the cache. ``llmopt
cache`` prints where it is and what it holds (``--clear`` empties it). A hit returns what a
compilation with the same key returned, so the cache makes no result depend on the
directory it lives in.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import struct
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "CACHE_FORMAT_VERSION",
    "KernelCache",
    "cache_disabled",
    "cache_key",
    "default_cache",
    "default_cache_dir",
]

#: Bumped whenever the key derivation or the entry layout changes.
CACHE_FORMAT_VERSION = 2

_MAGIC = b"LLMOPTK2"
# magic (8 bytes) | key length (u32) | payload length (u64) | sha256(key + payload) (32 bytes),
# little endian; then the key (ASCII) and the payload.
_HEADER = struct.Struct("<8sIQ32s")

#: The directories (and what failed there) already warned about, so each is reported once.
_WARNED: set[tuple[str, str]] = set()


def cache_key(
    source: str,
    arch: str,
    nvrtc_version: tuple[int, int] | str,
    options: Iterable[str],
) -> str:
    """Return the hex SHA-256 cache key for one compilation.

    Args:
        source: the complete CUDA source text.
        arch: the target architecture, e.g. ``"sm_90"``.
        nvrtc_version: the NVRTC version as ``(major, minor)`` (or any string form of it).
        options: compiler options; their order does not matter (they are sorted).

    Returns:
        A 64-character lowercase hexadecimal string.
    """
    if isinstance(nvrtc_version, tuple):
        version = ".".join(str(part) for part in nvrtc_version)
    else:
        version = str(nvrtc_version)
    h = hashlib.sha256()
    fields = [
        f"llmopt-kernel-cache-v{CACHE_FORMAT_VERSION}",
        arch,
        version,
        *sorted(options),
    ]
    for field in fields:
        data = field.encode("utf-8")
        # Length-prefix every field so that no two different field lists hash alike.
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    data = source.encode("utf-8")
    h.update(len(data).to_bytes(8, "little"))
    h.update(data)
    return h.hexdigest()


def default_cache_dir() -> Path:
    """Return the cache directory chosen by the environment (see the module docstring)."""
    explicit = os.environ.get("LLMOPT_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "llmopt" / "kernels"
    return Path.home() / ".cache" / "llmopt" / "kernels"


def cache_disabled() -> bool:
    """Whether ``LLMOPT_NO_CACHE`` asks for the cache to be bypassed."""
    value = os.environ.get("LLMOPT_NO_CACHE", "").strip().lower()
    return value not in ("", "0", "false", "no", "off")


class KernelCache:
    """A directory of checksummed binary blobs addressed by :func:`cache_key` keys.

    I/O errors never fail a compilation: a cache that cannot be read or written behaves like
    an empty one, after a one-time warning on stderr (see the module docstring).
    """

    def __init__(self, directory: str | os.PathLike[str], *, enabled: bool = True) -> None:
        """Create a cache rooted at ``directory`` (created lazily on the first ``put``)."""
        self.directory = Path(directory)
        self.enabled = enabled

    def __repr__(self) -> str:
        return f"KernelCache({str(self.directory)!r}, enabled={self.enabled})"

    @staticmethod
    def _check_key(key: str) -> None:
        if len(key) < 3 or not all(c in "0123456789abcdef" for c in key):
            raise ValueError(f"invalid cache key {key!r}: expected a lowercase hex digest")

    def path_for(self, key: str) -> Path:
        """Return the file that holds (or would hold) the entry for ``key``."""
        self._check_key(key)
        return self.directory / key[:2] / f"{key}.bin"

    def get(self, key: str) -> bytes | None:
        """Return the payload stored under ``key``, or ``None`` on a miss.

        A damaged entry (bad magic, wrong length, checksum mismatch), an entry written for
        another key, and anything at the entry's path that is not a regular file are removed
        and reported as a miss.
        """
        if not self.enabled:
            return None
        path = self.path_for(key)
        try:
            info = path.lstat()
        except FileNotFoundError:
            return None
        except OSError as err:
            self._warn("read", err)
            return None
        if not stat.S_ISREG(info.st_mode):
            _remove(path)
            return None
        try:
            blob = path.read_bytes()
        except OSError as err:
            self._warn("read", err)
            return None
        payload = _decode(blob, key)
        if payload is None:
            _remove(path)
            return None
        return payload

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` atomically, replacing whatever is at its path (a no-op
        when the cache is disabled; a warning, once, when it cannot be written)."""
        if not self.enabled:
            return
        path = self.path_for(key)
        header = _encode_header(key, data)
        tmp_name: str | None = None
        try:
            _make_directory(path.parent)
            fd, tmp_name = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(header)
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            os.replace(tmp_name, path)
            tmp_name = None
        except OSError as err:
            self._warn("write", err)
        finally:
            if tmp_name is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp_name)

    def entries(self) -> list[Path]:
        """The files of this cache's entries (none when the directory does not exist)."""
        if not self.directory.is_dir():
            return []
        return sorted(self.directory.glob("??/*.bin"))

    def clear(self) -> None:
        """Delete every entry of this cache (leaves unrelated files alone)."""
        for entry in self.entries():
            with contextlib.suppress(OSError):
                entry.unlink()

    def _warn(self, action: str, err: OSError) -> None:
        """Say once per directory and action that the cache cannot be read or written."""
        tag = (str(self.directory), action)
        if tag in _WARNED:
            return
        _WARNED.add(tag)
        reason = err.strerror or type(err).__name__
        print(f"llmopt: warning: cannot {action} the compile cache in {self.directory} "
              f"({reason}); compiling without it", file=sys.stderr)


def _encode_header(key: str, data: bytes) -> bytes:
    """The header and key that precede ``data`` in the entry for ``key``."""
    name = key.encode("ascii")
    digest = hashlib.sha256(name + data).digest()
    return _HEADER.pack(_MAGIC, len(name), len(data), digest) + name


def _decode(blob: bytes, key: str) -> bytes | None:
    """Return the payload of a cache file written for ``key``, or ``None`` if the file is
    damaged or holds another key's entry."""
    if len(blob) < _HEADER.size:
        return None
    magic, key_length, length, digest = _HEADER.unpack_from(blob)
    name = blob[_HEADER.size : _HEADER.size + key_length]
    payload = blob[_HEADER.size + key_length :]
    if magic != _MAGIC or name != key.encode("ascii") or length != len(payload):
        return None
    if hashlib.sha256(name + payload).digest() != digest:
        return None
    return payload


def _remove(path: Path) -> None:
    """Delete whatever is at ``path`` (a file, a link or a directory tree), if it can."""
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def _make_directory(directory: Path) -> None:
    """Create ``directory`` (and its parents), replacing a file that stands in its place."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        if not directory.parent.is_dir() or directory.is_dir():
            raise
        _remove(directory)
        directory.mkdir(parents=True, exist_ok=True)


def default_cache() -> KernelCache:
    """Return the cache configured by the environment (re-read on every call).

    The result is disabled (every ``get`` misses, every ``put`` is dropped) when
    ``LLMOPT_NO_CACHE`` is set.
    """
    return KernelCache(default_cache_dir(), enabled=not cache_disabled())
