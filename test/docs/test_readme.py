"""The README's commands copy-paste from the repository root: every file or directory a
shell block of it names exists (outputs such as ``-o FILE`` excepted)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

#: options whose value is a file the command writes
OUTPUTS = frozenset({"-o", "--output", "--ir-dump-dir"})
SUFFIXES = (".mlir", ".py", ".sh", ".json", ".toml", ".md")


def shell_commands(text: str) -> list[str]:
    """The commands of the ``sh`` blocks of a Markdown text: comments cut, continued lines
    joined."""
    commands: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(shlex.join(words))
    return commands


def named_paths(command: str) -> list[str]:
    """The words of ``command`` that name a file or directory of the repository."""
    words = shlex.split(command)
    paths = []
    for previous, word in zip(["", *words], words, strict=False):
        if previous in OUTPUTS or word.startswith("-") or "://" in word:
            continue
        if "/" in word or word.endswith(SUFFIXES):
            paths.append(word)
    return paths


def test_readme_commands_name_files_that_exist() -> None:
    commands = shell_commands(README.read_text())
    assert any(c.startswith("llm-opt ") for c in commands)
    missing = [(path, c) for c in commands for path in named_paths(c)
               if not (ROOT / path).exists()]
    assert not missing, "\n".join(f"{path!r} in: {c}" for path, c in missing)


def test_named_paths() -> None:
    command = ("llm-opt docs/examples/rms.mlir -p a,b --ir-dump-dir dump/ -o out.mlir "
               "--index-url https://example.org/x --load-plugin my/plugin.py")
    assert named_paths(command) == ["docs/examples/rms.mlir", "my/plugin.py"]
