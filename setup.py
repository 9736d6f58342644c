"""The package list of llmopt, computed; the rest of the configuration is in pyproject.toml.

The repository root is the import package ``llmopt`` (``package-dir = {"llmopt" = "."}`` in
pyproject.toml), so each directory below it with an ``__init__.py`` (in every directory on
the way) is the sub-package ``llmopt.<path>``. Finding them here instead of listing them in
pyproject.toml means a new sub-package is installed without editing a list; setuptools'
``packages.find`` cannot do it alone, as it names packages after their directories, not
after the ``llmopt`` they are mapped into. Tests, benchmarks, documentation, examples and
build outputs are not part of the package, and neither is this file, which lies in the
package's directory.
"""

from __future__ import annotations

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

EXCLUDED = ("test", "bench", "docs", "examples", "build", "dist")


class BuildPy(build_py):
    """``build_py`` without ``setup.py`` among the modules of ``llmopt`` itself."""

    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        modules = super().find_package_modules(package, package_dir)
        return [m for m in modules if not (package == "llmopt" and m[1] == "setup")]


subpackages = find_packages(where=".", exclude=[p for d in EXCLUDED for p in (d, f"{d}.*")])
setup(
    packages=["llmopt", *(f"llmopt.{name}" for name in subpackages)],
    cmdclass={"build_py": BuildPy},
)
