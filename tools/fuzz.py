"""Fuzz ``llm-opt``: mutate the lit corpus and check that bad input never crashes the tool.

Every ``*.mlir`` file below ``test/`` is split at ``// -----`` into chunks, its comment lines
(``RUN:``, ``CHECK``, notes) dropped; each fuzz input is one chunk with one to three
mutations applied (:data:`MUTATORS`):

* syntax: truncations, token deletions/duplications/swaps, deleted or duplicated lines,
  lines spliced in from other chunks (often ops of another level);
* types and shapes: a wrong element type (``f32``↔``f64``↔``i32``…) once or throughout,
  ``tensor``↔``memref``, a changed, added, removed or dynamic dim, a number changed
  throughout (dims and extents alike, so shapes stay consistent);
* ops and values: unknown or swapped op names, changed integers (extents, offsets, launch
  shapes), changed floats, edge-case index expressions (division by zero, semi-affine,
  overflow), swapped or replaced operands, swapped keywords, symbols and values renamed to
  C/C++ keywords or CUDA built-ins;
* grammar-aware (:mod:`llmopt.tools.mutate`: the text is parsed, changed as IR and printed,
  so it still parses and reaches the verifiers and passes): the uses of two values swapped,
  an operand replaced by another value of its type, attribute and property edge values
  (extents, launch shapes, access maps, mappings, symbols, schedule knobs), ``unroll`` /
  ``llmopt.schedule`` / ``llmopt.pad`` attributes added, terminators deleted, ops
  duplicated or reordered, ops replaced by siblings of the same syntax.

One input in five also runs through a mutated pipeline (:func:`~llmopt.tools.mutate.
mutate_pipeline`: pass options in, at and beyond their ranges or of the wrong type, passes
dropped, repeated, reordered, the pipeline cut short).

Each input is written to a file and run through ``llm-opt`` *in process*
(:func:`llmopt.tools.llm_opt.run_tool`) as ``-p lower-to-cuda`` and as
``-p lower-to-cuda -t cuda``. A run passes when it exits 0 or 1 — bad input gets a
diagnostic (exit 1, an ``error`` on stderr) — and fails on an internal error (exit 2), an
exception escaping the tool, a Python traceback in the output, an exit 1 without a message,
or a run longer than ``--timeout`` seconds of CPU time (a hang).

The summary counts the runs by kind — ``ok`` (exit 0), ``diagnosed`` (exit 1 with an
error), ``internal error``, ``traceback``, ``hang``. ``--cli`` runs the command lines'
bad-input corpus instead (:mod:`llmopt.tools.fuzz_cli`).

Usage::

    python -m llmopt.tools.fuzz --count 5000 --seed 1              # ≥5,000 inputs, a summary
    python -m llmopt.tools.fuzz --cli                              # every CLI bad input
    python -m llmopt.tools.fuzz --count 200 --seed 7 --out fuzz/    # failing inputs in fuzz/
    python -m llmopt.tools.fuzz --replay fuzz/failure-0000-1a2b3c4d.mlir   # run one again

Inputs are deterministic: for a given corpus, input ``k`` of seed ``s`` is the same on every
machine and every run (``--start k --count 1`` regenerates it). The summary gives the number
of inputs and runs, the exit-status histogram of each command, the mutations applied, and
every distinct failure (grouped by pass, exception type and raising line) with the paths of
its saved inputs; the tool's own crash reproducer (``--crash-reproducer``) is saved next to
each as ``*.crash.mlir``. The exit status is 0 when nothing failed, 1 otherwise.

``test/fuzz/test_fuzz.py`` runs a fixed slice of this (and a hypothesis-driven variant) in
CI; ``test/fuzz/test_known_bugs.py`` keeps the inputs that still fail.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import random
import re
import shlex
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from llmopt.tools.mutate import IR_MUTATORS, mutate_pipeline

__all__ = [
    "COMMANDS",
    "Case",
    "Chunk",
    "MUTATORS",
    "Outcome",
    "apply_mutations",
    "command_args",
    "load_corpus",
    "main",
    "make_case",
    "make_chunk_case",
    "run_case",
    "run_llm_opt",
]

#: The repository's test directory: the default corpus.
TEST_ROOT = Path(__file__).resolve().parents[1] / "test"

#: The ``llm-opt`` arguments (after the input file) every fuzz input is run with.
COMMANDS: dict[str, tuple[str, ...]] = {
    "mlir": ("-p", "lower-to-cuda"),
    "cuda": ("-p", "lower-to-cuda", "-t", "cuda"),
}

# --- the corpus ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    """One ``// -----`` chunk of a corpus file, comment lines removed."""

    source: str
    """``path#k``: the file (relative to the corpus root) and the chunk's index in it."""
    text: str


_SPLIT = re.compile(r"^\s*//\s*-----\s*$", re.M)
_COMMENT_LINE = re.compile(r"^\s*//.*$\n?", re.M)


def load_corpus(root: Path = TEST_ROOT) -> list[Chunk]:
    """Every chunk of every ``*.mlir`` file below ``root`` (``Output/`` excluded), in a
    stable order; chunks with no IR left after removing comments are skipped."""
    chunks: list[Chunk] = []
    for path in sorted(root.rglob("*.mlir")):
        if "Output" in path.relative_to(root).parts:
            continue
        text = path.read_text(errors="replace")
        for k, part in enumerate(_SPLIT.split(text)):
            body = _COMMENT_LINE.sub("", part).strip("\n")
            if body.strip():
                chunks.append(Chunk(f"{path.relative_to(root).as_posix()}#{k}", body + "\n"))
    return chunks


# --- mutations -----------------------------------------------------------------------------------

#: A mutation: ``(text, rng, corpus)`` → the mutated text, or ``None`` where it does not apply.
Mutator = Callable[[str, random.Random, Sequence[Chunk]], str | None]

_TOKEN = re.compile(
    r"""%[\w.$-]+(?:\#\d+)?|@[\w.$-]+|\^[\w.$-]+|\#[\w.$-]+|!\w[\w.]*|"(?:[^"\\\n]|\\.)*"
    |-?\d+\.\d*(?:[eE][+-]?\d+)?|0x[0-9a-fA-F]+|-?\d+|[A-Za-z_][\w.$]*|->|::|\S""",
    re.X,
)
_TYPES = ("f16", "bf16", "f32", "f64", "i1", "i8", "i32", "i64", "index", "ui32")
_TYPE = re.compile(r"(?:(?<![\w.%@#$])|(?<=\dx))(f16|bf16|f32|f64|i1|i8|i16|i32|i64|index)(?![\w])")
_CONTAINER = re.compile(r"\b(tensor|memref|vector)<")
_SHAPE = re.compile(r"(?<=[<x])(\d+)(?=x)")
_OP_NAME = re.compile(r"\b(torch|prim|loop|tile|kernel|cuda|arith|math|scf|func|memref)"
                      r"\.([a-z_][a-z_0-9]*)\b")
_INT = re.compile(r"(?<![\w.%@#^$-])-?\d+(?![\w.])")
_FLOAT = re.compile(r"(?<![\w.%@#^$])-?\d+\.\d*(?:[eE][+-]?\d+)?")
_OPERAND_PAIR = re.compile(r"(%[\w.$-]+)(\s*,\s*)(%[\w.$-]+)")
_SSA = re.compile(r"%[\w.$-]+")
_WORD = re.compile(r"(?<![\w.%@#^$!])([a-z_][a-z_0-9]*)(?![\w.])")

_INT_EDGES = (0, 1, -1, 2, 3, 7, 31, 32, 33, 64, 255, 1024, 1025, 4096, 65536, 2**31 - 1, 2**31,
              2**32, 2**63 - 1, 2**63, -(2**31), 10**20)
_FLOAT_EDGES = ("0.0", "-0.0", "1.0", "-1.0", "nan", "inf", "-inf", "0x7FC00000", "1.0e+300",
                "1.0e-300", "3.4e+39", "1e5")


def _spans(pattern: re.Pattern[str], text: str) -> list[re.Match[str]]:
    return list(pattern.finditer(text))


def _replace(text: str, match: re.Match[str], new: str, group: int = 0) -> str:
    return text[: match.start(group)] + new + text[match.end(group):]


def truncate(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """Cut the text at a random token boundary (or, one time in four, a random character)."""
    if rng.random() < 0.25:
        return text[: rng.randrange(len(text))]
    tokens = _spans(_TOKEN, text)
    if len(tokens) < 2:
        return None
    return text[: tokens[rng.randrange(1, len(tokens))].start()]


def delete_token(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """Delete one token."""
    tokens = _spans(_TOKEN, text)
    return _replace(text, rng.choice(tokens), "") if tokens else None


def duplicate_token(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """Repeat one token."""
    tokens = _spans(_TOKEN, text)
    if not tokens:
        return None
    token = rng.choice(tokens)
    return _replace(text, token, f"{token.group()} {token.group()}")


def swap_tokens(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """Swap two tokens: neighbours half of the time, any two otherwise."""
    tokens = _spans(_TOKEN, text)
    if len(tokens) < 2:
        return None
    i = rng.randrange(len(tokens) - 1)
    j = i + 1 if rng.random() < 0.5 else rng.randrange(i + 1, len(tokens))
    a, b = tokens[i], tokens[j]
    return (text[: a.start()] + b.group() + text[a.end(): b.start()] + a.group()
            + text[b.end():])


def change_type(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """Replace one element type (``f32`` → ``f64``, ``i32``, ``index`` …) once, or everywhere
    in one line (so that a whole op changes type consistently)."""
    found = _spans(_TYPE, text)
    if not found:
        return None
    match = rng.choice(found)
    new = rng.choice([t for t in _TYPES if t != match.group(1)])
    if rng.random() < 0.5:
        return _replace(text, match, new, 1)
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    end = len(text) if end < 0 else end
    line = _TYPE.sub(lambda m: new if m.group(1) == match.group(1) else m.group(0),
                     text[start:end])
    return text[:start] + line + text[end:]


def swap_container(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """``tensor<…>`` ↔ ``memref<…>`` (or ``vector<…>``) once."""
    found = _spans(_CONTAINER, text)
    if not found:
        return None
    match = rng.choice(found)
    new = rng.choice([c for c in ("tensor", "memref", "vector") if c != match.group(1)])
    return _replace(text, match, new, 1)


def change_shape(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """Change one dim of a shaped type, drop it, or add one."""
    found = _spans(_SHAPE, text)
    if not found:
        return None
    match = rng.choice(found)
    dim = int(match.group(1))
    roll = rng.random()
    if roll < 0.2:
        return text[: match.start()] + text[match.end() + 1:]  # drop "Nx"
    if roll < 0.35:
        return _replace(text, match, f"{match.group(1)}x{rng.choice((1, 2, 8))}")
    new = rng.choice([0, 1, 2, 3, dim - 1, dim + 1, 2 * dim, dim // 2, 4096, 2**33, "?"])
    return _replace(text, match, str(new))


def _op_names(corpus: Sequence[Chunk]) -> list[str]:
    names = {m.group(0) for chunk in corpus for m in _OP_NAME.finditer(chunk.text)}
    return sorted(names)


_OP_NAME_CACHE: dict[int, list[str]] = {}


def change_op(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """Rename one op: to an unknown op of its dialect, or to another op of the corpus."""
    found = _spans(_OP_NAME, text)
    if not found:
        return None
    match = rng.choice(found)
    if rng.random() < 0.3:
        return _replace(text, match, f"{match.group(1)}.no_such_op")
    names = _OP_NAME_CACHE.setdefault(id(corpus), _op_names(corpus))
    return _replace(text, match, rng.choice(names))


def change_int(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """Replace one integer (an extent, a dim of a launch shape, an offset …) by an edge value
    or a neighbour."""
    found = _spans(_INT, text)
    if not found:
        return None
    match = rng.choice(found)
    n = int(match.group())
    new = rng.choice([*_INT_EDGES, n - 1, n + 1, 2 * n, -n, n // 2])
    return _replace(text, match, str(new))


def change_float(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """Replace one float literal by an edge value (NaN, infinities, out of range …)."""
    found = _spans(_FLOAT, text)
    if not found:
        return None
    return _replace(text, rng.choice(found), rng.choice(_FLOAT_EDGES))


_ACCESS = re.compile(r"(?<=\w)\[([^\[\]]*%[^\[\]]*)\]")
_INDEX_FORMS = (
    "{a} mod 0", "{a} floordiv 0", "{a} floordiv -2", "{a} mod -3", "{a} ceildiv 7", "{a} * {b}",
    "{a} mod {b}", "{a} - 9223372036854775807", "{a} * 4611686018427387904", "-{a}", "{a} - 1",
    "{a} + 1", "({a} - 5) floordiv 2", "({a} - 3) mod 4", "7", "-1",
)


def change_index(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """Replace one coordinate of an indexed access (``%x[%i, %j]``) by an edge case: division
    by zero or a negative constant, a semi-affine product, out-of-range constants, a
    negative or shifted coordinate."""
    found = _spans(_ACCESS, text)
    if not found:
        return None
    match = rng.choice(found)
    parts = match.group(1).split(",")
    names = _SSA.findall(match.group(1)) or ["%i"]
    k = rng.randrange(len(parts))
    form = rng.choice(_INDEX_FORMS).format(a=rng.choice(names), b=rng.choice(names))
    parts[k] = (" " if k else "") + form
    return _replace(text, match, ",".join(parts), 1)


def swap_operands(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """Swap two neighbouring operands ``%a, %b``."""
    found = _spans(_OPERAND_PAIR, text)
    if not found:
        return None
    m = rng.choice(found)
    return (text[: m.start()] + m.group(3) + m.group(2) + m.group(1) + text[m.end():])


def replace_value(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """Replace one SSA name by another of the same text (wrong type, use before def …)."""
    found = _spans(_SSA, text)
    names = sorted({m.group() for m in found})
    if len(names) < 2:
        return None
    match = rng.choice(found)
    return _replace(text, match, rng.choice([n for n in names if n != match.group()]))


_SYMBOL = re.compile(r'@(?:[\w.$-]+|"[^"\n]*")')
_NAMES = ("double", "int", "main", "expf", "threadIdx", "__syncthreads", "blockDim", "half",
          "_x", "__restrict__", "k0", "0k", "a.b", "v_v", "acc", "p", "i", "tid", "arg0")


def rename_symbol(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """Rename one symbol (``@kernel``) everywhere: to a C/C++ keyword, a CUDA built-in or
    function, a name with MLIR-only characters, or another symbol of the text."""
    found = sorted({m.group() for m in _SYMBOL.finditer(text)})
    if not found:
        return None
    old = rng.choice(found)
    new = rng.choice([*_NAMES, "my-kernel.v2", *[f[1:] for f in found]])
    new = f'@"{new}"' if re.search(r"[^\w.$-]|^\d", new) else f"@{new}"
    return re.sub(re.escape(old) + r"(?![\w.$-])", new, text)


def rename_value(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """Rename one SSA value everywhere (the name hints become C variable names): to a C/C++
    keyword, a CUDA built-in, or a name that the generated code also uses."""
    found = sorted({m.group() for m in _SSA.finditer(text)})
    if not found:
        return None
    old = rng.choice(found)
    new = "%" + rng.choice([n for n in _NAMES if re.fullmatch(r"[A-Za-z_][\w$.]*", n)])
    if new in found:
        return None
    return re.sub(re.escape(old) + r"(?![\w.$-])", new, text)


def swap_keyword(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """Replace one bare word (``add``, ``threads``, ``x``, ``to``, ``ult`` …) by another bare
    word of the corpus or the text."""
    found = _spans(_WORD, text)
    if not found:
        return None
    match = rng.choice(found)
    pool = [m.group(1) for m in found] + ["add", "mul", "max", "min", "xor", "blocks",
                                          "threads", "block_threads", "warps", "x", "y",
                                          "z", "w", "true", "false", "unit", "dense"]
    return _replace(text, match, rng.choice(pool), 1)


_NUMBER = re.compile(r"(?:(?<![\w.%@#^$-])|(?<=\dx))(\d+)(?=x\w|(?![\w.]))")


def retype_all(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """Replace one element type by another everywhere (``f32`` → ``f64`` throughout): a
    consistent program in another dtype, which reaches the lowerings."""
    found = sorted({m.group(1) for m in _TYPE.finditer(text)})
    if not found:
        return None
    old = rng.choice(found)
    new = rng.choice([t for t in _TYPES if t != old])
    return _TYPE.sub(lambda m: new if m.group(1) == old else m.group(0), text)


def resize_all(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """Replace one number everywhere (dims, extents, launch shapes, offsets alike): shapes
    stay consistent, so the lowerings meet odd, tiny or huge extents."""
    found = sorted({int(m.group(1)) for m in _NUMBER.finditer(text)})
    if not found:
        return None
    old = rng.choice(found)
    new = rng.choice([0, 1, 2, 3, 5, 7, 31, 33, 100, 1000, 1025, 4097, 65537, 2**31, old + 1,
                      max(old - 1, 0), 3 * old])
    if new == old:
        return None
    return _NUMBER.sub(lambda m: str(new) if int(m.group(1)) == old else m.group(0), text)


def delete_line(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """Delete one line (a terminator, a use's definition, a brace …)."""
    lines = text.split("\n")
    if len(lines) < 2:
        return None
    del lines[rng.randrange(len(lines))]
    return "\n".join(lines)


def duplicate_line(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """Repeat one line (a redefinition, a second terminator, a second kernel …)."""
    lines = text.split("\n")
    k = rng.randrange(len(lines))
    lines.insert(k, lines[k])
    return "\n".join(lines)


def splice_line(text: str, rng: random.Random, corpus: Sequence[Chunk]) -> str | None:
    """Insert a line of another chunk (often an op of another level) at a random line."""
    other = rng.choice(corpus).text.split("\n")
    candidates = [line for line in other if line.strip() and line.strip() not in "{}"]
    if not candidates:
        return None
    lines = text.split("\n")
    lines.insert(rng.randrange(len(lines) + 1), rng.choice(candidates))
    return "\n".join(lines)


#: The mutations, by name.
MUTATORS: dict[str, Mutator] = {
    "truncate": truncate,
    "delete_token": delete_token,
    "duplicate_token": duplicate_token,
    "swap_tokens": swap_tokens,
    "change_type": change_type,
    "swap_container": swap_container,
    "change_shape": change_shape,
    "change_op": change_op,
    "change_int": change_int,
    "retype_all": retype_all,
    "resize_all": resize_all,
    "change_float": change_float,
    "change_index": change_index,
    "swap_operands": swap_operands,
    "replace_value": replace_value,
    "swap_keyword": swap_keyword,
    "rename_symbol": rename_symbol,
    "rename_value": rename_value,
    "delete_line": delete_line,
    "duplicate_line": duplicate_line,
    "splice_line": splice_line,
    **IR_MUTATORS,
}

# Truncation destroys everything after it: rarer than the local mutations. The consistent
# rewrites keep the input valid most often, so they reach deepest.
_WEIGHTS: dict[str, float] = {name: 1.0 for name in MUTATORS} | {
    "truncate": 0.4, "retype_all": 2.0, "resize_all": 2.0,
} | {name: 1.5 for name in IR_MUTATORS}
#: How often an input also runs through a mutated pipeline (:func:`mutate_pipeline`).
PIPELINE_RATE = 0.2
# Chunks made to fail (verifier tests, parse errors) reach no lowering: picked less often.
_INVALID_SOURCE = re.compile(r"invalid|error|diagnostics")


def apply_mutations(text: str, steps: Sequence[tuple[str, int]],
                    corpus: Sequence[Chunk]) -> tuple[str, list[str]]:
    """Apply ``(mutator name, seed)`` steps in order; return the text and the names of the
    steps that applied (a step that does not apply to the text leaves it unchanged)."""
    applied: list[str] = []
    for name, seed in steps:
        new = MUTATORS[name](text, random.Random(seed), corpus)
        if new is not None and new != text:
            text = new
            applied.append(name)
    return text, applied


# --- cases ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One fuzz input: a corpus chunk with mutations applied."""

    index: int
    source: str
    mutations: tuple[str, ...]
    text: str
    pipeline: str | None = None
    """The pass pipeline to run instead of the commands' (a mutated one), if any."""


def make_case(corpus: Sequence[Chunk], seed: int, index: int) -> Case:
    """Input ``index`` of run ``seed``: deterministic, independent of the other inputs."""
    rng = random.Random(f"llmopt-fuzz:{seed}:{index}")
    chunk = rng.choices(corpus, [0.25 if _INVALID_SOURCE.search(c.source) else 1.0
                                 for c in corpus])[0]
    return _mutate(chunk, corpus, rng, index)


def make_chunk_case(corpus: Sequence[Chunk], chunk: Chunk, seed: int, k: int) -> Case:
    """Mutant ``k`` of ``chunk`` for ``seed``: it depends on the chunk and on ``corpus`` (the
    donors of spliced lines and swapped op names) only, not on the position of ``chunk`` in
    a corpus, so adding tests does not change the mutants of the other chunks."""
    return _mutate(chunk, corpus, random.Random(f"llmopt-fuzz:{seed}:{chunk.source}:{k}"), k)


def _mutate(chunk: Chunk, corpus: Sequence[Chunk], rng: random.Random, index: int) -> Case:
    """One to three mutation steps drawn from ``rng``, applied to ``chunk``."""
    names = list(MUTATORS)
    weights = [_WEIGHTS[n] for n in names]
    count = rng.choice((1, 1, 1, 2, 2, 3))
    steps = [(rng.choices(names, weights)[0], rng.randrange(2**32)) for _ in range(count)]
    text, applied = apply_mutations(chunk.text, steps, corpus)
    pipeline = None
    if rng.random() < PIPELINE_RATE:
        pipeline = ",".join(mutate_pipeline(random.Random(rng.randrange(2**32))))
        applied.append("pipeline")
    return Case(index, chunk.source, tuple(applied), text, pipeline)


# --- running llm-opt -----------------------------------------------------------------------------


class FuzzTimeout(BaseException):
    """A run took longer than allowed (a ``BaseException``, so the tool cannot catch it)."""


@dataclass
class Outcome:
    """What one ``llm-opt`` run did with one input."""

    command: str
    argv: list[str]
    status: int | None
    """The exit status; ``None`` when an exception escaped the tool or the run timed out."""
    stdout: str
    stderr: str
    seconds: float
    escaped: str | None = None
    """``Type: message`` of an exception that escaped ``run_tool`` (or of the timeout)."""

    @property
    def failure(self) -> str | None:
        """Why this run is a fuzzing failure, or ``None`` when it behaved."""
        if self.escaped is not None:
            return "timeout" if self.escaped.startswith("FuzzTimeout") else "uncaught exception"
        if self.status == 2 or re.search(r"^llm-opt: internal error", self.stderr, re.M):
            return "internal error"
        if self.status not in (0, 1):
            return f"exit status {self.status}"
        if "Traceback (most recent call last)" in self.stdout + self.stderr:
            return "traceback in the output"
        if self.status == 1 and "error" not in self.stderr:
            return "exit 1 without a diagnostic"
        return None

    @property
    def kind(self) -> str:
        """What the run was, for the counts: ``ok`` (exit 0), ``diagnosed`` (exit 1 with a
        diagnostic), ``internal error``, ``traceback`` (an exception escaped the tool or a
        traceback was printed), ``hang`` (a timeout), or another ``failure``."""
        reason = self.failure
        if reason is None:
            return "ok" if self.status == 0 else "diagnosed"
        return {"timeout": "hang", "uncaught exception": "traceback",
                "traceback in the output": "traceback"}.get(reason, reason)

    @property
    def signature(self) -> str:
        """A short key grouping failures with the same cause."""
        reason = self.failure or "ok"
        if reason in ("uncaught exception", "timeout"):
            return f"{reason}: {self.escaped}"[:200]
        header = re.search(r"internal error(?: in pass '([^']*)')?: (\w+)", self.stderr)
        raised = re.search(r"raised at (\S+):(\d+)", self.stderr)
        parts = [reason]
        if header:
            parts.append(f"pass '{header.group(1)}'" if header.group(1) else "no pass")
            parts.append(header.group(2))
        if raised:
            parts.append(f"at {Path(raised.group(1)).name}:{raised.group(2)}")
        invalid = re.search(r"does not verify after pass '([^']*)': ([^\n]{0,60})", self.stderr)
        if invalid:
            message = re.sub(r"\d+", "N", invalid.group(2))
            parts.append(f"invalid IR after '{invalid.group(1)}': {message}")
        return ", ".join(parts)


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise FuzzTimeout("run took too long")


def run_llm_opt(argv: Sequence[str], timeout: float = 0.0) -> tuple[int | None, str, str,
                                                                  str | None]:
    """Run ``llm-opt`` in process; return (status, stdout, stderr, escaped exception).

    ``timeout`` is in seconds of the process's CPU time (``ITIMER_PROF``), not of the wall
    clock: a run that only waits for a busy machine is not a hang, one that loops is."""
    from llmopt.tools.llm_opt import run_tool

    out, err = io.StringIO(), io.StringIO()
    escaped: str | None = None
    status: int | None = None
    use_alarm = timeout > 0 and hasattr(signal, "setitimer") and hasattr(signal, "SIGPROF")
    previous = signal.signal(signal.SIGPROF, _alarm) if use_alarm else None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if use_alarm:
                signal.setitimer(signal.ITIMER_PROF, timeout)
            try:
                status = run_tool(list(argv))
            finally:
                if use_alarm:
                    signal.setitimer(signal.ITIMER_PROF, 0)
    except (Exception, FuzzTimeout, SystemExit, RecursionError) as exc:
        escaped = f"{type(exc).__name__}: {exc}".split("\n")[0]
    finally:
        if use_alarm:
            signal.signal(signal.SIGPROF, previous)
    return status, out.getvalue(), err.getvalue(), escaped


def command_args(command: str, pipeline: str | None = None) -> list[str]:
    """The ``llm-opt`` arguments of ``command`` (:data:`COMMANDS`), with ``pipeline`` in
    place of its pipeline when given."""
    args = list(COMMANDS[command])
    if pipeline is not None:
        args[args.index("-p") + 1] = pipeline
    return args


def run_case(text: str, command: str, workdir: Path, timeout: float = 0.0,
             name: str = "input.mlir", pipeline: str | None = None) -> Outcome:
    """Write ``text`` to ``workdir/name`` and run ``llm-opt`` on it with ``COMMANDS[command]``
    (``pipeline`` in place of its pipeline, if given; crash reproducers go to
    ``workdir/name.crash.mlir``)."""
    path = workdir / name
    path.write_text(text)
    argv = [str(path), *command_args(command, pipeline), "--crash-reproducer",
            str(path) + ".crash.mlir"]
    start = time.perf_counter()
    status, stdout, stderr, escaped = run_llm_opt(argv, timeout)
    return Outcome(command, argv, status, stdout, stderr, time.perf_counter() - start, escaped)


# --- the driver ----------------------------------------------------------------------------------


@dataclass
class Summary:
    """Counts over a fuzzing run."""

    inputs: int = 0
    runs: int = 0
    statuses: dict[str, Counter[str]] = field(default_factory=dict)
    kinds: Counter[str] = field(default_factory=Counter)
    """:attr:`Outcome.kind` → runs"""
    mutations: Counter[str] = field(default_factory=Counter)
    failures: dict[str, list[str]] = field(default_factory=dict)
    """signature → reproducer paths"""
    seconds: float = 0.0

    def record(self, outcome: Outcome) -> None:
        """Count one run."""
        self.runs += 1
        key = "exception" if outcome.status is None else str(outcome.status)
        self.statuses.setdefault(outcome.command, Counter())[key] += 1
        self.kinds[outcome.kind] += 1

    def lines(self) -> Iterator[str]:
        """The printed summary."""
        yield f"inputs: {self.inputs}   runs: {self.runs}   time: {self.seconds:.1f} s"
        for command, counts in self.statuses.items():
            args = " ".join(COMMANDS[command])
            histogram = "  ".join(f"exit {k}: {v}" for k, v in sorted(counts.items()))
            yield f"  llm-opt INPUT {args}:  {histogram}"
        kinds = ("ok", "diagnosed", "internal error", "traceback", "hang")
        others = sorted(k for k in self.kinds if k not in kinds)
        yield "runs: " + ", ".join(f"{k} {self.kinds[k]}" for k in (*kinds, *others))
        yield "mutations applied: " + ", ".join(
            f"{k} {v}" for k, v in sorted(self.mutations.items()))
        total = sum(len(paths) for paths in self.failures.values())
        yield f"failures: {total} runs, {len(self.failures)} distinct"
        for signature, paths in sorted(self.failures.items()):
            yield f"  [{len(paths)}x] {signature}"
            for path in paths[:3]:
                yield f"      {path}"
            if len(paths) > 3:
                yield f"      ... and {len(paths) - 3} more"


#: The header line of a saved input that names its mutated pipeline (read by :func:`replay`).
_PIPELINE_HEADER = "// fuzz pipeline: "


def _save(out_dir: Path, case: Case, outcome: Outcome, seed: int, number: int) -> Path:
    """Write a failing input with a header that says how to reproduce it."""
    digest = hashlib.sha1(case.text.encode()).hexdigest()[:8]
    path = out_dir / f"failure-{number:04d}-{digest}.mlir"
    header = [
        f"// fuzz failure: {outcome.signature}",
        f"// input {case.index} of seed {seed}: {case.source}, mutations "
        f"{', '.join(case.mutations) or 'none'}",
        f"// reproduce: llm-opt {path.name} "
        f"{shlex.join(command_args(outcome.command, case.pipeline))}",
        "//   or: python -m llmopt.tools.fuzz --replay " + path.name,
        *([f"{_PIPELINE_HEADER}{case.pipeline}"] if case.pipeline else []),
        *("// " + line for line in outcome.stderr.strip().split("\n")[:8]),
        "",
    ]
    path.write_text("\n".join(header) + case.text)
    crash = Path(outcome.argv[0] + ".crash.mlir")
    if crash.is_file():
        crash.replace(path.with_suffix(".crash.mlir"))
    return path


def fuzz(count: int, seed: int, start: int = 0, out_dir: Path | None = None,
         timeout: float = 20.0, corpus: Sequence[Chunk] | None = None,
         commands: Sequence[str] = tuple(COMMANDS), progress: bool = False) -> Summary:
    """Run inputs ``start … start+count-1`` of ``seed``; failing inputs are saved in
    ``out_dir`` (a new temporary directory if ``None``)."""
    corpus = list(corpus) if corpus is not None else load_corpus()
    if out_dir is None:
        out_dir = Path(tempfile.mkdtemp(prefix="llmopt-fuzz-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = Summary()
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="llmopt-fuzz-run-") as tmp:
        workdir = Path(tmp)
        for index in range(start, start + count):
            case = make_case(corpus, seed, index)
            summary.inputs += 1
            summary.mutations.update(case.mutations)
            for command in commands:
                outcome = run_case(case.text, command, workdir, timeout,
                                   pipeline=case.pipeline)
                summary.record(outcome)
                if outcome.failure is not None:
                    number = sum(len(p) for p in summary.failures.values())
                    path = _save(out_dir, case, outcome, seed, number)
                    summary.failures.setdefault(outcome.signature, []).append(str(path))
            if progress and summary.inputs % 500 == 0:
                print(f"... {summary.inputs} inputs, "
                      f"{sum(len(p) for p in summary.failures.values())} failures",
                      file=sys.stderr, flush=True)
    summary.seconds = time.perf_counter() - began
    return summary


def replay(path: Path, commands: Sequence[str] = tuple(COMMANDS)) -> int:
    """Run a saved input with every command; print each outcome; 1 if any failed."""
    failed = False
    text = path.read_text()
    named = [line[len(_PIPELINE_HEADER):] for line in text.split("\n")
             if line.startswith(_PIPELINE_HEADER)]
    pipeline = named[0] if named else None
    with tempfile.TemporaryDirectory(prefix="llmopt-fuzz-replay-") as tmp:
        for command in commands:
            outcome = run_case(text, command, Path(tmp), name=path.name, pipeline=pipeline)
            print(f"llm-opt {path} {shlex.join(command_args(command, pipeline))}: exit "
                  f"{outcome.status}, {outcome.failure or 'ok'}")
            print(outcome.stderr.rstrip())
            failed |= outcome.failure is not None
    return int(failed)


def _run_cli(names: Sequence[str], out_dir: Path | None, progress: bool) -> int:
    """Run the command lines' bad-input corpus; 1 if any case misbehaved."""
    from llmopt.tools import fuzz_cli

    with tempfile.TemporaryDirectory(prefix="llmopt-cli-") as tmp:
        outcomes = fuzz_cli.run_cli_corpus(Path(out_dir or tmp), names, progress)
    for line in fuzz_cli.summary_lines(outcomes, verbose=bool(names)):
        print(line)
    return int(any(o.kind not in ("ok", "diagnosed") for o in outcomes))


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (``python -m llmopt.tools.fuzz``)."""
    parser = argparse.ArgumentParser(
        prog="python -m llmopt.tools.fuzz",
        description="Mutate the lit corpus and run llm-opt on every mutant; report crashes.",
    )
    parser.add_argument("--count", type=int, default=1000, help="inputs to run (default 1000)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the inputs (default 1)")
    parser.add_argument("--start", type=int, default=0, help="index of the first input")
    parser.add_argument("--out", type=Path, help="directory for failing inputs (default: a "
                        "new temporary directory)")
    parser.add_argument("--corpus", type=Path, default=TEST_ROOT,
                        help="directory whose *.mlir files are mutated (default: test/)")
    parser.add_argument("--timeout", type=float, default=20.0,
                        help="CPU seconds one run may take (default 20)")
    parser.add_argument("--command", choices=sorted(COMMANDS), action="append",
                        help="run only this command (repeatable; default: all)")
    parser.add_argument("--replay", type=Path, help="run one saved input and print the result")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument("--cli", action="store_true", help="run the command lines' bad-input "
                        "corpus (llmopt.tools.fuzz_cli) instead of mutating IR")
    parser.add_argument("--case", action="append", default=[],
                        help="with --cli: run only this case, and show its output "
                        "(repeatable)")
    args = parser.parse_args(argv)
    commands = tuple(args.command or COMMANDS)
    if args.cli:
        return _run_cli(args.case, args.out, not args.quiet)
    if args.replay is not None:
        return replay(args.replay, commands)
    corpus = load_corpus(args.corpus)
    if not corpus:
        parser.error(f"no *.mlir input below {args.corpus}")
    print(f"fuzzing llm-opt: seed {args.seed}, inputs {args.start}..{args.start + args.count - 1}"
          f", {len(corpus)} corpus chunks", flush=True)
    summary = fuzz(args.count, args.seed, args.start, args.out, args.timeout, corpus, commands,
                   progress=not args.quiet)
    for line in summary.lines():
        print(line)
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
