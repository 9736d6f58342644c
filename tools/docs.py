"""Generated blocks of llmopt's documentation: ``python -m llmopt.tools.docs --update|--check``.

Every IR snippet, command output, op table and API signature in ``docs/`` is produced by the
tools, between a directive and an end marker::

    <!-- llmopt:run lang=mlir op=loop.kernel $ llm-opt docs/examples/rms.mlir -p prim-to-loop -->
    ```mlir
    ... (generated) ...
    ```
    <!-- llmopt:end -->

``--update`` rewrites what stands between each directive and its ``<!-- llmopt:end -->``;
``--check`` regenerates everything and exits with status 1, printing a diff, if any block
differs from what the files hold (``test/docs/test_docs.py`` runs it, so docs cannot drift).

Directives:

``llmopt:run [OPTIONS] $ COMMAND``
    Runs ``COMMAND`` with ``bash`` from the repository root and shows it (as ``$ COMMAND``,
    a comment in ``mlir``/``cuda`` blocks) followed by its output. Options, before ``$``:
    ``lang=L`` (fence language, default ``text``); ``op=NAME`` or ``op=NAME#K`` (only the
    first, or K-th, op called ``NAME``, with its regions); ``from=RE`` and ``to=RE`` (only the
    lines from the first match of ``RE`` to the next match of the other, inclusive);
    ``grep=RE`` (only matching lines); ``mask=RE`` (each match replaced by ``…``, for what
    varies from run to run; a match starting with blanks keeps its width; repeatable);
    ``stream=stdout|stderr|all`` (default ``all``: stdout, then stderr);
    ``exit=N`` (the expected exit status, default 0); ``nocmd`` (do not show the command);
    ``max=N`` (the most lines a block may have, default 60: keep blocks small).
``llmopt:include [OPTIONS] PATH``
    The text of a file of the repository, in a fenced block (``lang``, ``from``, ``to``,
    ``grep`` as above; the language defaults from the extension).
``llmopt:ops DIALECT``
    A table of the dialect's ops, each with the first paragraph of its docstring.
``llmopt:api NAME ...``
    The signatures and docstrings of public functions and classes (``llmopt.lower``,
    ``llmopt.numerics.NumericsReport``), as Python source.
``llmopt:passes``
    A table of llmopt's passes and named pipelines.

Commands run with the virtual environment's ``bin`` first on ``PATH``, ``COLUMNS=100``,
``LLMOPT_NO_PLUGINS=1`` (output must not depend on what happens to be installed),
``PYTHONWARNINGS=ignore`` and the example plugin's ``src`` on ``PYTHONPATH`` (so that
``--load-plugin llmopt_example`` works whether or not it is installed). The repository's path
is cut from outputs, so they read the same in every checkout.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import importlib
import inspect
import os
import re
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The repository root (``llmopt`` is installed from it with ``package-dir``)."""

DIRECTIVE = re.compile(r"^<!-- llmopt:(?P<kind>[a-z]+)(?P<args>.*?)-->\s*$")
END = "<!-- llmopt:end -->"
DEFAULT_MAX_LINES = 60
TIMEOUT = 600
_COMMENT = {"mlir": "// ", "cuda": "// ", "c": "// ", "cpp": "// ", "python": "# "}
_LANG_OF_SUFFIX = {".py": "python", ".mlir": "mlir", ".cu": "cuda", ".toml": "toml",
                   ".cfg": "ini", ".sh": "sh", ".md": "markdown"}


class DocsError(Exception):
    """A directive is malformed, or producing its block failed."""


@dataclass
class Directive:
    """One directive of a Markdown file and the lines it owns."""

    path: Path
    line: int
    """1-based line number of the directive."""
    kind: str
    options: dict[str, list[str]]
    argument: str
    """The command (``run``) or the positional arguments of the other directives."""
    start: int = 0
    """Index of the first generated line (the line after the directive)."""
    end: int = 0
    """Index of the end marker."""
    flags: set[str] = field(default_factory=set)

    def where(self) -> str:
        """``docs/file.md:12``."""
        return f"{_relative(self.path)}:{self.line}"

    def option(self, name: str, default: str | None = None) -> str | None:
        """The last value of option ``name``."""
        values = self.options.get(name)
        return values[-1] if values else default


def _relative(path: Path) -> str:
    """``path`` relative to the repository root, if it is inside it."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def parse_directive(path: Path, line: int, kind: str, text: str) -> Directive:
    """Split a directive's text into options and its argument."""
    if kind == "run":
        match = re.match(r"(?P<head>(?:.*?\s)?)\$\s+(?P<command>\S.*)$", text)
        if match is None:
            raise DocsError(f"{_relative(path)}:{line}: llmopt:run needs '$ COMMAND'")
        words, argument = shlex.split(match["head"]), match["command"].strip()
    else:
        words, argument = shlex.split(text), ""
    options: dict[str, list[str]] = {}
    flags: set[str] = set()
    positional: list[str] = []
    for word in words:
        key, eq, value = word.partition("=")
        if eq and re.fullmatch(r"[a-z]+", key):
            options.setdefault(key, []).append(value)
        elif kind == "run":
            flags.add(word)
        else:
            positional.append(word)
    if kind != "run":
        argument = " ".join(positional)
    return Directive(path, line, kind, options, argument, flags=flags)


def find_directives(path: Path, lines: Sequence[str]) -> list[Directive]:
    """The directives of a Markdown file, each with the span of its generated lines."""
    found: list[Directive] = []
    index = 0
    while index < len(lines):
        match = DIRECTIVE.match(lines[index])
        if match is None or match["kind"] == "end":
            if lines[index].strip() == END:
                raise DocsError(f"{_relative(path)}:{index + 1}: {END} without a directive")
            index += 1
            continue
        directive = parse_directive(path, index + 1, match["kind"], match["args"].strip())
        end = index + 1
        while end < len(lines) and lines[end].strip() != END:
            if DIRECTIVE.match(lines[end]) is not None:
                break
            end += 1
        if end >= len(lines) or lines[end].strip() != END:
            raise DocsError(f"{directive.where()}: llmopt:{directive.kind} has no {END}")
        directive.start, directive.end = index + 1, end
        found.append(directive)
        index = end + 1
    return found


# --- output filters -----------------------------------------------------------------------------


def extract_op(lines: list[str], name: str) -> list[str]:
    """The lines of the K-th op called ``name`` (``name#K``, default the first) with its
    regions, dedented."""
    name, _, nth = name.partition("#")
    wanted = int(nth or 1)
    pattern = re.compile(rf"^(\s*)(?:%[^=]*=\s*)?(?:\"{re.escape(name)}\"|{re.escape(name)})\b")
    seen = 0
    for index, line in enumerate(lines):
        match = pattern.match(line)
        if match is None:
            continue
        seen += 1
        if seen < wanted:
            continue
        indent = match[1]
        stop = index
        if line.rstrip().endswith(("{", "({")):
            stop = next((k for k in range(index + 1, len(lines))
                         if lines[k].startswith(indent + "}")), len(lines) - 1)
        return _dedent(lines[index : stop + 1])
    raise DocsError(f"no op '{name}'" + (f" #{wanted}" if nth else "") + " in the output")


def _dedent(lines: list[str]) -> list[str]:
    """Remove the common leading whitespace."""
    return textwrap.dedent("\n".join(lines)).split("\n")


def between(lines: list[str], start: str | None, stop: str | None) -> list[str]:
    """The lines from the first match of ``start`` to the next match of ``stop``."""
    first = 0
    if start is not None:
        first = next((k for k, line in enumerate(lines) if re.search(start, line)), -1)
        if first < 0:
            raise DocsError(f"from={start!r} matches no line of the output")
    last = len(lines) - 1
    if stop is not None:
        last = next((k for k in range(first, len(lines)) if re.search(stop, lines[k])), -1)
        if last < 0:
            raise DocsError(f"to={stop!r} matches no line after from={start!r}")
    return _dedent(lines[first : last + 1])


def _masked(match: re.Match[str]) -> str:
    """``…`` for a masked match; a match starting with blanks (a column of a table) keeps
    its width, the ``…`` aligned right."""
    text = match[0]
    return "…".rjust(len(text)) if text[:1].isspace() else "…"


def apply_filters(text: str, directive: Directive) -> list[str]:
    """The output lines after ``op``, ``from``/``to``, ``grep`` and ``mask``."""
    lines = text.rstrip("\n").split("\n")
    op = directive.option("op")
    if op is not None:
        lines = extract_op(lines, op)
    if directive.option("from") is not None or directive.option("to") is not None:
        lines = between(lines, directive.option("from"), directive.option("to"))
    grep = directive.option("grep")
    if grep is not None:
        lines = _dedent([line for line in lines if re.search(grep, line)])
        if lines == [""]:
            raise DocsError(f"grep={grep!r} matches no line of the output")
    for mask in directive.options.get("mask", []):
        lines = [re.sub(mask, _masked, line) for line in lines]
    return [line.rstrip() for line in lines]


# --- producing blocks ---------------------------------------------------------------------------


def environment() -> dict[str, str]:
    """The environment commands run in (see the module docstring)."""
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
    example = str(ROOT / "examples" / "llmopt-example-plugin" / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in [example, env.get("PYTHONPATH", "")] if p)
    env.update(COLUMNS="100", LINES="50", LLMOPT_NO_PLUGINS="1", PYTHONWARNINGS="ignore",
               NO_COLOR="1", TERM="dumb", LC_ALL="C.UTF-8")
    return env


@dataclass(frozen=True)
class Result:
    """What a command printed."""

    status: int
    stdout: str
    stderr: str


def run_command(command: str) -> Result:
    """Run ``command`` with bash from the repository root; cut the root's path from output."""
    try:
        done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=environment(), text=True,
                              capture_output=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return Result(124, "", f"timed out after {TIMEOUT} s")
    root = str(ROOT) + os.sep
    return Result(done.returncode, done.stdout.replace(root, ""), done.stderr.replace(root, ""))


def fence(lang: str, lines: Sequence[str]) -> list[str]:
    """A fenced code block."""
    ticks = "````" if any(line.startswith("```") for line in lines) else "```"
    return [f"{ticks}{lang}", *lines, ticks]


def block_run(directive: Directive, result: Result) -> list[str]:
    """The block of ``llmopt:run``."""
    expected = int(directive.option("exit", "0") or 0)
    if result.status != expected:
        tail = "\n".join((result.stdout + result.stderr).rstrip().split("\n")[-20:])
        raise DocsError(f"{directive.where()}: '{directive.argument}' exited with status "
                        f"{result.status}, expected {expected}:\n{tail}")
    stream = directive.option("stream", "all")
    if stream not in ("all", "stdout", "stderr"):
        raise DocsError(f"{directive.where()}: stream must be stdout, stderr or all")
    parts = []
    if stream in ("all", "stdout") and result.stdout.strip():
        parts.append(result.stdout.rstrip("\n"))
    if stream in ("all", "stderr") and result.stderr.strip():
        parts.append(result.stderr.rstrip("\n"))
    try:
        lines = apply_filters("\n".join(parts), directive)
    except DocsError as err:
        raise DocsError(f"{directive.where()}: {err}") from None
    lang = directive.option("lang", "text") or "text"
    if "nocmd" not in directive.flags:
        lines = [f"{_COMMENT.get(lang, '')}$ {directive.argument}", *lines]
    return _limited(directive, fence(lang, lines))


def _limited(directive: Directive, lines: list[str]) -> list[str]:
    """``lines``, or an error if the block is longer than ``max``."""
    limit = int(directive.option("max", str(DEFAULT_MAX_LINES)) or DEFAULT_MAX_LINES)
    if len(lines) - 2 > limit:
        raise DocsError(f"{directive.where()}: the block has {len(lines) - 2} lines, more "
                        f"than max={limit}: trim it with op=, from=, to= or grep=")
    return lines


def block_include(directive: Directive) -> list[str]:
    """The block of ``llmopt:include``."""
    path = ROOT / directive.argument
    if not directive.argument or not path.is_file():
        raise DocsError(f"{directive.where()}: no file '{directive.argument}'")
    text = path.read_text()
    lines = text.rstrip("\n").split("\n")
    if any(directive.option(k) is not None for k in ("from", "to", "grep")):
        try:
            lines = apply_filters(text, directive)
        except DocsError as err:
            raise DocsError(f"{directive.where()}: {err}") from None
    lang = directive.option("lang") or _LANG_OF_SUFFIX.get(path.suffix, "text")
    return _limited(directive, fence(lang, lines))


def _summary(doc: str | None) -> str:
    """The first paragraph of a docstring, on one line, safe in a Markdown table."""
    if not doc:
        return ""
    paragraph = " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())
    if paragraph.endswith("::"):  # reStructuredText: a literal block follows
        paragraph = paragraph[:-2] + "."
    return paragraph.replace("|", "\\|")


def block_ops(directive: Directive) -> list[str]:
    """The table of ``llmopt:ops DIALECT``."""
    from llmopt import registry

    factory = registry.DIALECTS.get(directive.argument)
    if factory is None:
        raise DocsError(f"{directive.where()}: no dialect '{directive.argument}'")
    dialect = factory()
    rows = ["| op | what it does |", "|---|---|"]
    for op in sorted(dialect.operations, key=lambda o: o.name):
        rows.append(f"| `{op.name}` | {_summary(op.__doc__)} |")
    return rows


def block_passes(directive: Directive) -> list[str]:
    """The table of ``llmopt:passes``."""
    from llmopt import registry

    rows = ["| pass | what it does |", "|---|---|"]
    for name in sorted(registry.PASSES):
        cls = registry.PASSES[name]()
        module_doc = sys.modules[cls.__module__].__doc__ or ""
        # One pass, one file: the file's docstring starts with ````name``: what it does``.
        doc = module_doc if module_doc.startswith(f"``{name}``") else cls.__doc__
        rows.append(f"| `{name}` | {_summary(doc)} |")
    rows += ["", "| named pipeline | expands to (default options) |", "|---|---|"]
    for name, (defaults, _) in sorted(registry.PIPELINES.items()):
        options = ",".join(f"{k}={v}" for k, v in defaults.items())
        expansion = registry.expand_pipeline(name).replace(",", ", ")
        rows.append(f"| `{name}{{{options}}}` | `{expansion}` |" if options
                    else f"| `{name}` | `{expansion}` |")
    return rows


def _resolve(name: str) -> object:
    """The object named by a dotted path (``llmopt.lower``, ``llmopt.numerics.PassCheck``)."""
    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attr in parts[split:]:
            obj = getattr(obj, attr)
        return obj
    raise DocsError(f"cannot import '{name}'")


class _Source:
    """A parsed Python file: definitions rendered as their source spells them."""

    def __init__(self, path: Path) -> None:
        self.text = path.read_text()
        self.tree = ast.parse(self.text)

    def code(self, node: ast.AST) -> str:
        """The source of an expression, on one line."""
        segment = ast.get_source_segment(self.text, node)
        return " ".join(segment.split()) if segment else ast.unparse(node)

    def parameters(self, args: ast.arguments) -> list[str]:
        """The public parameters of a function (those not starting with ``_``)."""
        out: list[str] = []
        positional = [*args.posonlyargs, *args.args]
        defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)

        def one(arg: ast.arg, default: ast.expr | None) -> str:
            text = arg.arg + (f": {self.code(arg.annotation)}" if arg.annotation else "")
            if default is not None:
                text += (" = " if arg.annotation else "=") + self.code(default)
            return text

        for k, (arg, default) in enumerate(zip(positional, defaults, strict=True)):
            if not arg.arg.startswith("_"):
                out.append(one(arg, default))
            if args.posonlyargs and k == len(args.posonlyargs) - 1:
                out.append("/")
        if args.vararg is not None:
            out.append("*" + one(args.vararg, None))
        elif args.kwonlyargs:
            out.append("*")
        out += [one(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                if not a.arg.startswith("_")]
        if args.kwarg is not None:
            out.append("**" + one(args.kwarg, None))
        return out

    def function(self, node: ast.FunctionDef, indent: str = "", doc: str = "full") -> list[str]:
        """Decorators, signature and docstring (``doc``: ``full`` or ``first`` paragraph)."""
        out = [f"{indent}@{self.code(d)}" for d in node.decorator_list]
        params = self.parameters(node.args)
        returns = f" -> {self.code(node.returns)}" if node.returns else ""
        head = f"{indent}def {node.name}("
        line = head + ", ".join(params) + f"){returns}:"
        if len(line) <= 96:
            out.append(line)
        else:
            out.append(head)
            out += [f"{indent}    {p}," for p in params]
            out.append(f"{indent}){returns}:")
        text = ast.get_docstring(node)
        if text and doc == "first":
            text = " ".join(text.split("\n\n")[0].split())
        return out + (_docstring(text, indent + "    ") or [f"{indent}    ..."])

    def klass(self, node: ast.ClassDef) -> list[str]:
        """Header, docstring, public fields and public methods (their first paragraph)."""
        bases = [self.code(b) for b in node.bases]
        out = [f"@{self.code(d)}" for d in node.decorator_list]
        out.append(f"class {node.name}" + (f"({', '.join(bases)})" if bases else "") + ":")
        out += _docstring(ast.get_docstring(node), "    ")
        fields = [item for item in node.body if isinstance(item, ast.AnnAssign)
                  and isinstance(item.target, ast.Name) and not item.target.id.startswith("_")]
        if fields:
            out.append("")
            out += ["    " + " ".join(self.code(item).split()) for item in fields]
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and not item.name.startswith("_"):
                out += ["", *self.function(item, "    ", doc="first")]
        return out

    def definition(self, line: int) -> ast.FunctionDef | ast.ClassDef | None:
        """The function or class whose first line (decorators included) is ``line``."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
                if first == line:
                    return node
        return None


def _docstring(doc: str | None, indent: str) -> list[str]:
    """A docstring as source lines."""
    if not doc:
        return []
    lines = doc.split("\n")
    if len(lines) == 1:
        return [f'{indent}"""{lines[0]}"""']
    return [f'{indent}"""{lines[0]}', *[(indent + line).rstrip() for line in lines[1:]],
            f'{indent}"""']


def block_api(directive: Directive) -> list[str]:
    """The block of ``llmopt:api NAME ...``."""
    out: list[str] = []
    for name in directive.argument.split():
        obj = _resolve(name)
        try:
            source_file = inspect.getsourcefile(obj)  # type: ignore[arg-type]
            _, first_line = inspect.getsourcelines(obj)  # type: ignore[arg-type]
        except (OSError, TypeError) as err:
            raise DocsError(f"{directive.where()}: no source for '{name}': {err}") from None
        assert source_file is not None
        source = _Source(Path(source_file))
        node = source.definition(first_line)
        if node is None:
            raise DocsError(f"{directive.where()}: cannot find the definition of '{name}'")
        if out:
            out.append("")
        out += source.klass(node) if isinstance(node, ast.ClassDef) else source.function(node)
    return fence("python", out)


# --- the files ----------------------------------------------------------------------------------


def markdown_files(paths: Sequence[str]) -> list[Path]:
    """The Markdown files to process: ``paths`` or every ``docs/**/*.md``."""
    if paths:
        return [Path(p).resolve() for p in paths]
    return sorted((ROOT / "docs").rglob("*.md"))


def _generate(files: Sequence[Path], jobs: int) -> Iterator[tuple[Path, list[str], list[str]]]:
    """For each file: its lines and its lines with every block regenerated."""
    parsed: list[tuple[Path, list[str], list[Directive]]] = []
    for path in files:
        lines = path.read_text().split("\n")
        parsed.append((path, lines, find_directives(path, lines)))
    commands = sorted({d.argument for _, _, ds in parsed for d in ds if d.kind == "run"})
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = dict(zip(commands, pool.map(run_command, commands), strict=True))
    makers: dict[str, Callable[[Directive], list[str]]] = {
        "run": lambda d: block_run(d, results[d.argument]),
        "include": block_include, "ops": block_ops, "api": block_api, "passes": block_passes,
    }
    for path, lines, directives in parsed:
        new: list[str] = []
        position = 0
        for directive in directives:
            maker = makers.get(directive.kind)
            if maker is None:
                raise DocsError(f"{directive.where()}: unknown directive llmopt:{directive.kind}")
            new += lines[position : directive.start]
            new += maker(directive)
            position = directive.end
        new += lines[position:]
        yield path, lines, new


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``--update`` or ``--check`` the generated blocks of the docs."""
    parser = argparse.ArgumentParser(prog="python -m llmopt.tools.docs",
                                     description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--update", action="store_true", help="rewrite the generated blocks")
    mode.add_argument("--check", action="store_true",
                      help="exit 1 with a diff if a generated block is out of date")
    parser.add_argument("files", nargs="*", help="Markdown files (default: docs/**/*.md)")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                        help="commands run at once (default: the CPU count)")
    args = parser.parse_args(argv)
    stale: list[str] = []
    try:
        for path, old, new in _generate(markdown_files(args.files), args.jobs):
            if old == new:
                continue
            stale.append(_relative(path))
            if args.update:
                path.write_text("\n".join(new))
                print(f"updated {_relative(path)}")
            else:
                sys.stdout.writelines(difflib.unified_diff(
                    [line + "\n" for line in old], [line + "\n" for line in new],
                    f"a/{_relative(path)}", f"b/{_relative(path)}"))
    except DocsError as err:
        print(f"docs: error: {err}", file=sys.stderr)
        return 2
    if args.check and stale:
        print(f"docs: {len(stale)} file(s) out of date: {', '.join(stale)}\n"
              "docs: run python -m llmopt.tools.docs --update", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
