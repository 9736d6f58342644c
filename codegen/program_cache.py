"""Whole lowered programs in the compile cache: a second build of the same program parses
its IR instead of capturing and lowering again.

:func:`program_cache_key` is a SHA-256 over everything that determines a lowered program —
what was captured (a model's configuration, the length, the dtype), the pass pipeline, the
versions of torch, transformers and xDSL, the registered passes and dialects, llmopt's own
sources and the tuning tables — so a changed pass or config is a miss. :func:`cached_lowering`
looks a key up in the kernel cache (:mod:`llmopt.codegen.cache`, the same directory and
rules: ``LLMOPT_NO_CACHE=1`` bypasses it) and stores the printed module, compressed, on a
miss; an entry that does not parse is rebuilt.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xdsl.dialects.builtin import ModuleOp

__all__ = ["cached_lowering", "code_fingerprint", "program_cache_key"]


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
        "llmopt-program-1", identity, f"seq={seq}", f"dtype={dtype}", ",".join(elements),
        *versions, ",".join(sorted(registry.PASSES)), ",".join(sorted(registry.DIALECTS)),
        code_fingerprint(), f"tuned={tables_fingerprint()}",
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def cached_lowering(key: str, build: Callable[[], ModuleOp]) -> tuple[ModuleOp, float | None]:
    """The module cached under ``key``, or ``build()``'s, then cached. Returns it and the
    seconds a hit took to parse (``None`` on a miss)."""
    import zlib

    from llmopt.api import parse
    from llmopt.codegen.cache import default_cache

    cache = default_cache()
    began = time.perf_counter()
    blob = cache.get(key)
    if blob is not None:
        with contextlib.suppress(Exception):  # a stale or foreign entry: build anew
            return parse(zlib.decompress(blob).decode()), time.perf_counter() - began
    module = build()
    cache.put(key, zlib.compress(str(module).encode(), 6))
    return module, None
