"""``llmopt.plugins``: plugins loaded by path, by module, and as installed entry points.

Installed plugins are simulated with a distribution written into a temporary directory
(``<name>.dist-info`` with ``entry_points.txt``) put on ``PYTHONPATH`` of a subprocess, so
this test process's registry and plugin cache stay untouched.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from llmopt import plugins

LLM_OPT = str(Path(sys.executable).parent / "llm-opt")

PLUGIN = '''
"""A plugin registering one pass and counting how often it was set up."""
from dataclasses import dataclass

from xdsl.dialects import builtin, func
from xdsl.passes import ModulePass

from llmopt.registry import register_pass

CALLS = []


@dataclass(frozen=True)
class Rename(ModulePass):
    name = "fake-rename"

    def apply(self, ctx, op):
        for f in op.walk():
            if isinstance(f, func.FuncOp):
                f.sym_name = builtin.StringAttr("renamed")


def register():
    CALLS.append(1)
    register_pass(Rename)
'''

BROKEN = '''
SETTINGS = {}
SETTINGS["threads"] += 1
'''

FUNC = "func.func @f() {\n  func.return\n}\n"


def _distribution(root: Path, name: str, entry: str, module: str, source: str) -> Path:
    """Write module ``module`` and an installed distribution declaring ``entry``."""
    (root / f"{module}.py").write_text(source)
    info = root / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[llmopt.plugins]\n{entry}\n")
    return root


def _run(args: list[str], path: Path | None, stdin: str = FUNC, **env: str
         ) -> subprocess.CompletedProcess[str]:
    """Run ``args`` with ``path`` on ``PYTHONPATH`` and installed plugins enabled."""
    environ = {k: v for k, v in os.environ.items() if k != plugins.DISABLE_VARIABLE}
    if path is not None:
        environ["PYTHONPATH"] = str(path)
    environ.update(env)
    return subprocess.run(args, input=stdin, capture_output=True, text=True, env=environ,
                          timeout=120)


def test_llm_opt_loads_installed_plugin(tmp_path: Path) -> None:
    """An entry point naming ``module:function`` is imported and called; its pass works."""
    root = _distribution(tmp_path, "fake-plugin", "fake = fakeplug:register", "fakeplug", PLUGIN)
    result = _run([LLM_OPT, "-p", "fake-rename"], root)
    assert result.returncode == 0, result.stderr
    assert "func.func @renamed()" in result.stdout


def test_installed_plugins_can_be_switched_off(tmp_path: Path) -> None:
    """``LLMOPT_NO_PLUGINS=1`` skips installed plugins."""
    root = _distribution(tmp_path, "fake-plugin", "fake = fakeplug:register", "fakeplug", PLUGIN)
    result = _run([LLM_OPT, "-p", "fake-rename"], root, LLMOPT_NO_PLUGINS="1")
    assert result.returncode == 1
    assert "unknown pass 'fake-rename'" in result.stderr


def test_broken_installed_plugin_is_named(tmp_path: Path) -> None:
    """A plugin failing at import is a clean error naming it, its distribution and line."""
    root = _distribution(tmp_path, "broken-plugin", "broken = brokenplug", "brokenplug", BROKEN)
    result = _run([LLM_OPT], root)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0] == (
        "llm-opt: error: failed to load plugin 'broken' (entry point 'broken = brokenplug' of "
        "broken-plugin 1.0): KeyError: 'threads'"
    )
    assert lines[1].endswith("brokenplug.py:3: SETTINGS[\"threads\"] += 1")
    assert "LLMOPT_NO_PLUGINS=1" in lines[2]
    assert "Traceback" not in result.stderr


def test_missing_module_of_installed_plugin(tmp_path: Path) -> None:
    """An entry point naming a module that is not there says so."""
    root = _distribution(tmp_path, "gone-plugin", "gone = no_such_module_here", "other", "")
    result = _run([LLM_OPT], root)
    assert result.returncode == 1
    assert ("failed to load plugin 'gone' (entry point 'gone = no_such_module_here' of "
            "gone-plugin 1.0): no module named 'no_such_module_here'") in result.stderr


def test_api_loads_entry_points_once(tmp_path: Path) -> None:
    """``llmopt.lower`` and ``llmopt.parse`` load installed plugins on first use, once."""
    root = _distribution(tmp_path, "fake-plugin", "fake = fakeplug:register", "fakeplug", PLUGIN)
    script = textwrap.dedent("""
        import sys
        import llmopt
        from llmopt import plugins
        assert "fakeplug" not in sys.modules      # import llmopt loads no plugin
        module = llmopt.parse(sys.stdin.read())
        llmopt.lower(module, "fake-rename")
        plugins.load_entry_points()
        import fakeplug
        print(len(fakeplug.CALLS), [ep.name for ep in plugins.load_entry_points()])
        print(module)
    """)
    result = _run([sys.executable, "-c", script], root)
    assert result.returncode == 0, result.stderr
    count, names = result.stdout.split("\n")[0].split(" ", 1)
    assert count == "1" and "'fake'" in names
    assert "@renamed" in result.stdout


def test_load_plugin_file_module_and_function(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    """``load_plugin`` takes a path, a module name, or ``module:function``."""
    (tmp_path / "plug_a.py").write_text("LOADED = True\n")
    (tmp_path / "plug_b.py").write_text("CALLS = []\ndef setup():\n    CALLS.append(1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert plugins.load_plugin(str(tmp_path / "plug_a.py")).LOADED
    assert plugins.load_plugin("plug_a").LOADED
    module = plugins.load_plugin("plug_b:setup")
    assert module.CALLS == [1]


@pytest.mark.parametrize(
    ("plugin", "message"),
    [
        ("no_such_dir/plugin.py", "failed to load plugin 'no_such_dir/plugin.py': no such file"),
        ("no_such_plugin_module", "failed to load plugin 'no_such_plugin_module': no module "
         "named 'no_such_plugin_module'"),
        ("plug_c:missing", "failed to load plugin 'plug_c:missing': module 'plug_c' has no "
         "attribute 'missing'"),
        ("plug_c:VALUE", "failed to load plugin 'plug_c:VALUE': 3 is not a module or a callable"),
        ("plug_c:fail", "failed to load plugin 'plug_c:fail': ValueError: no"),
    ],
)
def test_load_plugin_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plugin: str,
                            message: str) -> None:
    """Every way a plugin can fail to load is a :class:`PluginError` naming it."""
    (tmp_path / "plug_c.py").write_text("VALUE = 3\ndef fail():\n    raise ValueError('no')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(plugins.PluginError) as info:
        plugins.load_plugin(plugin)
    assert str(info.value).splitlines()[0] == message
    assert info.value.plugin == plugin
