"""The compile cache binds each entry to its key, replaces whatever else it finds at an
entry's path, and warns once when it cannot write (``codegen/cache.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llmopt.codegen import cache as cache_mod
from llmopt.codegen.cache import KernelCache, cache_key


def _keys() -> tuple[str, str]:
    return (cache_key("a", "sm_90", (13, 0), []), cache_key("b", "sm_90", (13, 0), []))


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no directory warned about."""
    monkeypatch.setattr(cache_mod, "_WARNED", set())


def test_swapped_entries_are_misses(tmp_path: Path) -> None:
    """Two well-formed entries swapped on disk give misses, not each other's payloads."""
    kc = KernelCache(tmp_path)
    a, b = _keys()
    kc.put(a, b"payload of a")
    kc.put(b, b"payload of b")
    pa, pb = kc.path_for(a), kc.path_for(b)
    blob_a, blob_b = pa.read_bytes(), pb.read_bytes()
    pa.write_bytes(blob_b)
    pb.write_bytes(blob_a)
    assert kc.get(a) is None
    assert kc.get(b) is None
    assert not pa.exists() and not pb.exists()  # removed, so the next put rebuilds them
    kc.put(a, b"payload of a")
    assert kc.get(a) == b"payload of a"


def test_entry_copied_under_another_key_is_a_miss(tmp_path: Path) -> None:
    kc = KernelCache(tmp_path)
    a, b = _keys()
    kc.put(a, b"x" * 100)
    kc.path_for(b).parent.mkdir(parents=True, exist_ok=True)
    kc.path_for(b).write_bytes(kc.path_for(a).read_bytes())
    assert kc.get(b) is None
    assert kc.get(a) == b"x" * 100


def test_old_format_entry_is_a_miss(tmp_path: Path) -> None:
    """An entry of the previous layout (magic ``LLMOPTK1``, no key) is not trusted."""
    import hashlib
    import struct

    kc = KernelCache(tmp_path)
    a, _ = _keys()
    data = b"old payload"
    old = struct.pack("<8sQ32s", b"LLMOPTK1", len(data), hashlib.sha256(data).digest()) + data
    kc.path_for(a).parent.mkdir(parents=True)
    kc.path_for(a).write_bytes(old)
    assert kc.get(a) is None


@pytest.mark.parametrize("thing", ["directory", "garbage", "symlink"])
def test_anything_else_at_the_path_is_replaced(tmp_path: Path, thing: str) -> None:
    """A directory, garbage or a link where an entry belongs is removed on read and
    replaced by the next write."""
    kc = KernelCache(tmp_path)
    a, _ = _keys()
    path = kc.path_for(a)
    path.parent.mkdir(parents=True)
    if thing == "directory":
        (path / "inner").mkdir(parents=True)
        (path / "inner" / "file").write_text("x")
    elif thing == "garbage":
        path.write_bytes(os.urandom(200))
    else:
        target = tmp_path / "elsewhere.bin"
        target.write_bytes(b"not an entry")
        path.symlink_to(target)
    assert kc.get(a) is None
    kc.put(a, b"fresh")
    assert path.is_file() and not path.is_symlink()
    assert kc.get(a) == b"fresh"


def test_directory_in_place_of_an_entry_is_replaced_on_write(tmp_path: Path) -> None:
    """A put over a directory (no get before it) still writes the entry."""
    kc = KernelCache(tmp_path)
    a, _ = _keys()
    kc.path_for(a).mkdir(parents=True)
    kc.put(a, b"fresh")
    assert kc.get(a) == b"fresh"


def test_file_in_place_of_the_shard_directory_is_replaced(tmp_path: Path) -> None:
    kc = KernelCache(tmp_path)
    a, _ = _keys()
    kc.path_for(a).parent.write_text("a file where the shard directory belongs")
    kc.put(a, b"fresh")
    assert kc.get(a) == b"fresh"


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root writes into read-only directories")
def test_unwritable_cache_warns_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A read-only cache directory: one warning naming it, then silence; gets still miss
    cleanly and nothing raises."""
    directory = tmp_path / "ro"
    directory.mkdir()
    directory.chmod(0o500)
    try:
        kc = KernelCache(directory)
        a, b = _keys()
        kc.put(a, b"one")
        kc.put(b, b"two")
        KernelCache(directory).put(a, b"three")
        assert kc.get(a) is None
    finally:
        directory.chmod(0o700)
    err = capsys.readouterr().err
    assert err.count("warning: cannot write the compile cache") == 1, err
    assert str(directory) in err


def test_cache_path_under_a_file_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    """A cache directory that cannot exist (its parent is a file) warns instead of failing."""
    (tmp_path / "file").write_text("x")
    kc = KernelCache(tmp_path / "file" / "cache")
    a, _ = _keys()
    kc.put(a, b"one")
    assert kc.get(a) is None
    assert "cannot write the compile cache" in capsys.readouterr().err


def test_format_version_is_in_the_key() -> None:
    """Keys of this layout differ from those of any earlier one."""
    assert cache_mod.CACHE_FORMAT_VERSION >= 2
    assert cache_mod._MAGIC == b"LLMOPTK2"


def test_write_failure_warns_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A write refused by the file system (as in a read-only directory, also where the tests
    run with privileges that ignore permissions) warns once and raises nothing."""

    def refuse(*args: object, **kwargs: object) -> tuple[int, str]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(cache_mod.tempfile, "mkstemp", refuse)
    kc = KernelCache(tmp_path)
    a, b = _keys()
    kc.put(a, b"one")
    kc.put(b, b"two")
    assert kc.get(a) is None
    err = capsys.readouterr().err
    assert err.count("llmopt: warning: cannot write the compile cache") == 1, err
    assert f"in {tmp_path} (Permission denied)" in err
