"""Plugins: code outside llmopt that extends it, loaded by path, by module name or installed.

A plugin is a Python module that, when imported (or a callable that, when called), registers
passes, dialects, named pipelines or targets through :mod:`llmopt.registry`
(``register_pass``, ``register_dialect``, ``register_pipeline``, ``register_target``). There
are two ways to load one:

* **Installed**: a package declares an entry point in the group ``llmopt.plugins``; its value
  names a module (imported) or a callable (``module:function``, called with no arguments)::

      [project.entry-points."llmopt.plugins"]
      example = "llmopt_example"

  :func:`load_entry_points` loads every installed one, the first time ``llm-opt``,
  :func:`llmopt.make_context`, :func:`llmopt.parse` or :func:`llmopt.lower` runs (never at
  ``import llmopt``), and only once per process. ``LLMOPT_NO_PLUGINS=1`` skips them.
* **Explicitly**: :func:`load_plugin` (``llm-opt --load-plugin PATH_OR_MODULE``) loads a
  ``.py`` file, a module, or a ``module:function``.

A plugin that fails to load raises :class:`PluginError`, whose message names the plugin (and,
for an entry point, the distribution that declares it) and the line that failed.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import threading
import traceback
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType

ENTRY_POINT_GROUP = "llmopt.plugins"
"""The entry-point group that installed plugins declare."""

DISABLE_VARIABLE = "LLMOPT_NO_PLUGINS"
"""Set this environment variable to ``1`` to skip installed plugins."""


class PluginError(Exception):
    """A plugin could not be found, or failed while it was imported or called."""

    def __init__(self, message: str, plugin: str) -> None:
        super().__init__(message)
        self.plugin = plugin
        """The plugin as it was named: a path, a module, or an entry point's name."""


def _failure(plugin: str, err: BaseException, path: Path | None, what: str = "") -> PluginError:
    """A :class:`PluginError` describing why ``plugin`` failed to load, with the failing line."""
    message = f"failed to load plugin '{plugin}'{what}: {type(err).__name__}: {err}"
    frames = traceback.extract_tb(err.__traceback__)
    if path is not None:
        frames = [f for f in frames if Path(f.filename).resolve() == path.resolve()] or frames
    else:
        frames = [f for f in frames if "importlib" not in f.filename] or frames
    frames = [f for f in frames if Path(f.filename).resolve() != Path(__file__).resolve()]
    if frames and not isinstance(err, SyntaxError):
        message += f"\n  at {frames[-1].filename}:{frames[-1].lineno}"
        if frames[-1].line:
            message += f": {frames[-1].line}"
    return PluginError(message, plugin)


def _load_file(plugin: str, path: Path) -> ModuleType:
    """Execute a ``.py`` file as the module ``llmopt_plugin_<stem>``."""
    if not path.is_file():
        raise PluginError(f"failed to load plugin '{plugin}': no such file", plugin)
    module_name = "llmopt_plugin_" + re.sub(r"\W", "_", path.stem)
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"failed to load plugin '{plugin}': not a Python file", plugin)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as err:
        del sys.modules[module_name]
        raise _failure(plugin, err, path) from err
    return module


def _import(plugin: str, module_name: str) -> ModuleType:
    """Import ``module_name``, turning failures into a :class:`PluginError` for ``plugin``."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name is not None and module_name.startswith(err.name):
            message = f"failed to load plugin '{plugin}': no module named '{err.name}'"
            raise PluginError(message, plugin) from None
        raise _failure(plugin, err, None) from err
    except (Exception, SystemExit) as err:
        raise _failure(plugin, err, None) from err


def _call(plugin: str, function: object, what: str = "") -> None:
    """Call a plugin's registration function."""
    if not callable(function):
        raise PluginError(f"failed to load plugin '{plugin}'{what}: {function!r} is not a "
                          "module or a callable", plugin)
    try:
        function()
    except (Exception, SystemExit) as err:
        raise _failure(plugin, err, None, what) from err


def load_plugin(plugin: str) -> ModuleType:
    """Load a plugin: a ``.py`` file given by path, a module given by dotted name, or
    ``module:function`` (the module is imported, then ``function()`` is called).

    Returns the module. Raises :class:`PluginError` naming the plugin if it cannot be found
    or fails.
    """
    path = Path(plugin)
    if plugin.endswith(".py") or os.sep in plugin or path.is_file():
        return _load_file(plugin, path)
    module_name, _, function = plugin.partition(":")
    module = _import(plugin, module_name)
    if function:
        target: object = module
        for part in function.split("."):
            if not hasattr(target, part):
                raise PluginError(
                    f"failed to load plugin '{plugin}': module '{module_name}' has no "
                    f"attribute '{function}'", plugin)
            target = getattr(target, part)
        _call(plugin, target)
    return module


def installed_plugins() -> list[EntryPoint]:
    """The entry points of group ``llmopt.plugins`` of the installed distributions, by name."""
    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return [found[name] for name in sorted(found)]


def _describe(ep: EntryPoint) -> str:
    """`` (entry point 'name = value' of dist version)``."""
    dist = getattr(ep, "dist", None)
    owner = f" of {dist.name} {dist.version}" if dist is not None else ""
    return f" (entry point '{ep.name} = {ep.value}'{owner})"


def load_entry_point(ep: EntryPoint) -> None:
    """Load one installed plugin: import its module and, for ``module:function``, call it."""
    what = _describe(ep)
    try:
        loaded = ep.load()
    except ModuleNotFoundError as err:
        if err.name is not None and ep.module.startswith(err.name):
            message = f"failed to load plugin '{ep.name}'{what}: no module named '{err.name}'"
            raise PluginError(message, ep.name) from None
        raise _failure(ep.name, err, None, what) from err
    except (Exception, SystemExit) as err:
        raise _failure(ep.name, err, None, what) from err
    if not isinstance(loaded, ModuleType):
        _call(ep.name, loaded, what)


_lock = threading.RLock()
_loaded: list[EntryPoint] | None = None
_error: PluginError | None = None


def load_entry_points() -> list[EntryPoint]:
    """Load every installed plugin (entry-point group ``llmopt.plugins``), once.

    Later calls return the same list without loading anything again; if a plugin failed, they
    raise the same :class:`PluginError`. Returns an empty list, loading nothing, when the
    environment variable ``LLMOPT_NO_PLUGINS`` is set to a non-empty value other than ``0``.
    """
    global _loaded, _error
    with _lock:
        if _error is not None:
            raise _error
        if _loaded is not None:
            return list(_loaded)
        if os.environ.get(DISABLE_VARIABLE, "") not in ("", "0"):
            _loaded = []
            return []
        loaded: list[EntryPoint] = []
        for ep in installed_plugins():
            try:
                load_entry_point(ep)
            except PluginError as err:
                err.args = (f"{err}\n  (set {DISABLE_VARIABLE}=1 to run without installed "
                            "plugins)",)
                _error = err
                raise
            loaded.append(ep)
        _loaded = loaded
        return list(loaded)
