"""The bad-input corpus of the command lines: every way a user can hand ``llmopt`` or
``llm-opt`` something wrong, and what must happen.

Each :class:`CliCase` is a command line and the files it reads, made in a fresh directory
from a small Llama checkpoint (two layers, hidden size 32, saved by transformers) and its
config: configs that are not JSON objects, unknown or unsupported model types, sizes that
are zero, negative or do not divide, damaged safetensors files (truncated, garbage, bad
headers), tensors of the wrong shape or dtype, missing tensors, more layers asked for than
the checkpoint has, NaN weights, bad option values (sequence lengths, GPU architectures,
pass options), unreadable and unwritable files.

A case passes when the command (run in process) ends with the case's exit status, never an
internal error (2) nor a traceback; a bad input (exit 1) prints exactly one ``error:`` line
naming what it is about (the file, the tensor, the option or the op: :attr:`CliCase.names`),
and a case may list text that must not appear (``NaN`` logits must not report a perfect
match). Running it::

    python -m llmopt.tools.fuzz --cli                # every case, a summary
    python -m llmopt.tools.fuzz --cli --case ckpt-nan   # one case, its output

``test/fuzz/test_cli_corpus.py`` runs every case in CI.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CASES", "CliCase", "CliOutcome", "build_base", "run_cli_case"]

#: The small model every checkpoint case starts from.
BASE_CONFIG: dict[str, Any] = {
    "model_type": "llama", "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 64, "max_position_embeddings": 64, "tie_word_embeddings": False,
}  # fmt: skip

#: A tensor of the base checkpoint the damaging cases pick on.
VICTIM = "model.layers.1.mlp.up_proj.weight"


@dataclass(frozen=True)
class CliCase:
    """One command line of the corpus: ``tool`` (``llmopt`` or ``llm-opt``) with ``argv``
    (``{dir}`` is the case's directory, ``{ckpt}`` its copy of the base checkpoint),
    after ``setup`` has made its files. ``status``: the exit status it must end with;
    ``names``: text the error line must contain; ``forbid``: text the output must not."""

    name: str
    tool: str
    argv: tuple[str, ...]
    setup: Callable[[Path], None] | None = None
    status: int = 1
    names: tuple[str, ...] = ()
    forbid: tuple[str, ...] = ()


@dataclass
class CliOutcome:
    """What one case did."""

    case: CliCase
    status: int | None
    stdout: str
    stderr: str
    seconds: float
    escaped: str | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """``ok`` (exit 0 as expected), ``diagnosed`` (exit 1 as expected, one error line
        naming what it should), ``traceback``, ``internal error``, or ``wrong`` (anything
        else: another status, a missing or vague diagnostic, forbidden output)."""
        text = self.stdout + self.stderr
        if self.escaped is not None or "Traceback (most recent call last)" in text:
            return "traceback"
        if self.status == 2 or "internal error" in self.stderr:
            return "internal error"
        if self.problems:
            return "wrong"
        return "ok" if self.status == 0 else "diagnosed"


# --- the files ----------------------------------------------------------------------------------


def build_base(directory: Path) -> Path:
    """Save the base checkpoint (:data:`BASE_CONFIG`, seeded weights) in ``directory`` and
    return it."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    values = dict(BASE_CONFIG)
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config)
    directory.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(directory)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory


def _config(**changes: Any) -> Callable[[Path], None]:
    """Setup: ``{dir}/config.json`` of the base config with ``changes`` (``None`` deletes a
    key)."""

    def setup(directory: Path) -> None:
        values = {**BASE_CONFIG, **changes}
        values = {k: v for k, v in values.items() if v is not None}
        (directory / "config.json").write_text(json.dumps(values))

    return setup


def _text(name: str, content: str | bytes) -> Callable[[Path], None]:
    """Setup: ``{dir}/name`` holding ``content``."""

    def setup(directory: Path) -> None:
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)

    return setup


def _tensors(ckpt: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(ckpt / "model.safetensors"))


def _save(ckpt: Path, tensors: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    save_file(tensors, str(ckpt / "model.safetensors"), metadata={"format": "pt"})


def _edit_tensors(edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    """Setup: the case's checkpoint with its tensors changed by ``edit``."""

    def setup(directory: Path) -> None:
        ckpt = directory / "ckpt"
        tensors = _tensors(ckpt)
        edit(tensors)
        _save(ckpt, tensors)

    return setup


def _edit_bytes(edit: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    """Setup: the case's ``model.safetensors`` with its bytes changed by ``edit``."""

    def setup(directory: Path) -> None:
        path = directory / "ckpt" / "model.safetensors"
        path.write_bytes(edit(path.read_bytes()))

    return setup


def _bad_header_json(blob: bytes) -> bytes:
    (length,) = struct.unpack("<Q", blob[:8])
    return blob[:8] + b"{" + b"x" * (length - 1) + blob[8 + length:]


def _bad_offsets(blob: bytes) -> bytes:
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + length])
    entry = header[VICTIM]
    entry["data_offsets"] = [entry["data_offsets"][0], entry["data_offsets"][1] + 4]
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + blob[8 + length:]


def _set(name: str, make: Callable[[Any], Any]) -> Callable[[dict[str, Any]], None]:
    def edit(tensors: dict[str, Any]) -> None:
        tensors[name] = make(tensors[name])

    return edit


def _poison(value: float) -> Callable[[Any], Any]:
    def make(tensor: Any) -> Any:
        tensor = tensor.clone()
        tensor.view(-1)[3] = value
        return tensor

    return make


def _drop(name: str) -> Callable[[dict[str, Any]], None]:
    def edit(tensors: dict[str, Any]) -> None:
        del tensors[name]

    return edit


def _sharded(directory: Path) -> None:
    """A sharded checkpoint whose index names a shard that is not there."""
    ckpt = directory / "ckpt"
    tensors = _tensors(ckpt)
    (ckpt / "model.safetensors").unlink()
    names = sorted(tensors)
    half = len(names) // 2
    _save(ckpt, {k: tensors[k] for k in names[:half]})
    (ckpt / "model.safetensors").rename(ckpt / "model-00001-of-00002.safetensors")
    weight_map = {k: ("model-00001-of-00002.safetensors" if i < half
                      else "model-00002-of-00002.safetensors") for i, k in enumerate(names)}
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def _bin_checkpoint(directory: Path) -> None:
    ckpt = directory / "ckpt"
    (ckpt / "model.safetensors").unlink()
    (ckpt / "pytorch_model.bin").write_bytes(b"PK\x03\x04 not a zip archive at all")


def _output_directory(directory: Path) -> None:
    (directory / "out").mkdir()


# --- the cases ----------------------------------------------------------------------------------

_COMPILE = ("compile", "{dir}/config.json", "--emit", "torch", "-o", "{dir}/out.mlir",
            "--seq", "4")
_RUN = ("run", "{ckpt}", "--seq", "3", "--cpu")


def _config_case(name: str, setup: Callable[[Path], None], *names: str) -> CliCase:
    return CliCase(f"config-{name}", "llmopt", _COMPILE, setup, 1, ("config.json", *names))


CASES: tuple[CliCase, ...] = (
    # configs
    _config_case("invalid-json", _text("config.json", '{"model_type": "llama", '), "JSON"),
    _config_case("empty", _text("config.json", ""), "empty"),
    _config_case("list", _text("config.json", "[1, 2]"), "array"),
    _config_case("binary", _text("config.json", b"\xff\xfe\x00garbage"), "not a text file"),
    _config_case("no-model-type", _config(model_type=None), "model_type"),
    _config_case("unknown-model-type", _config(model_type="llama9"), "llama9"),
    _config_case("gpt2", _text("config.json", json.dumps({"model_type": "gpt2"})), "gpt2"),
    _config_case("hidden-not-divisible", _config(hidden_size=36, num_attention_heads=5),
                 "hidden_size"),
    _config_case("zero-heads", _config(num_attention_heads=0), "num_attention_heads"),
    _config_case("kv-heads-not-dividing", _config(num_key_value_heads=3),
                 "num_key_value_heads"),
    _config_case("negative-hidden", _config(hidden_size=-8), "hidden_size"),
    _config_case("negative-intermediate", _config(intermediate_size=-1), "intermediate_size"),
    _config_case("negative-layers", _config(num_hidden_layers=-2), "num_hidden_layers"),
    _config_case("zero-vocab", _config(vocab_size=0), "vocab_size"),
    _config_case("string-size", _config(hidden_size="big"), "hidden_size"),
    _config_case("float-size", _config(hidden_size=32.5), "hidden_size"),
    _config_case("bool-size", _config(hidden_size=True), "hidden_size"),
    _config_case("negative-eps", _config(rms_norm_eps=-1e-5), "rms_norm_eps"),
    CliCase("config-is-a-directory", "llmopt", _COMPILE,
            lambda d: (d / "config.json").mkdir(), 1, ("config.json",)),
    CliCase("model-missing", "llmopt", ("compile", "{dir}/nothing", "--emit", "torch", "-o",
                                        "-"), None, 1, ("nothing", "neither a preset")),
    CliCase("model-dir-without-config", "llmopt", ("run", "{dir}", "--cpu"), None, 1,
            ("neither a preset",)),
    # options
    CliCase("run-seq-negative", "llmopt", ("run", "{ckpt}", "--seq", "-5"), None, 1,
            ("--seq", "-5")),
    CliCase("run-seq-zero", "llmopt", ("run", "{ckpt}", "--seq", "0"), None, 1,
            ("--seq", "0")),
    CliCase("run-seq-text", "llmopt", ("run", "{ckpt}", "--seq", "ten"), None, 1,
            ("--seq", "ten")),
    CliCase("run-seq-beyond-positions", "llmopt", ("run", "{ckpt}", "--seq", "65", "--cpu"),
            None, 1, ("65", "max_position_embeddings")),
    CliCase("compile-seq-zero", "llmopt", ("compile", "tinyllama", "--seq", "0", "--emit",
                                           "torch", "-o", "-"), None, 1, ("--seq",)),
    CliCase("layers-zero", "llmopt", ("run", "{ckpt}", "--layers", "0"), None, 1,
            ("--layers",)),
    CliCase("layers-negative", "llmopt", ("compile", "tinyllama", "--layers", "-1", "--emit",
                                          "torch", "-o", "-"), None, 1, ("--layers",)),
    CliCase("arch-sm_1", "llmopt", ("compile", "tinyllama", "--arch", "sm_1", "--emit",
                                    "cuda-source", "-o", "-"), None, 1, ("--arch", "sm_1")),
    CliCase("arch-foo", "llmopt", ("run", "{ckpt}", "--arch", "foo"), None, 1,
            ("--arch", "foo")),
    CliCase("seed-negative", "llmopt", ("run", "{ckpt}", "--seed", "-1"), None, 1, ("--seed",)),
    CliCase("repeat-zero", "llmopt", ("run", "{ckpt}", "--repeat", "0"), None, 1,
            ("--repeat",)),
    CliCase("profile-negative", "llmopt", ("run", "{ckpt}", "--profile", "-3"), None, 1,
            ("--profile",)),
    CliCase("dtype-unknown", "llmopt", ("run", "{ckpt}", "--dtype", "float8"), None, 1,
            ("--dtype",)),
    CliCase("demo-shape-zero", "llmopt", ("demo", "--shape", "0", "8"), None, 1, ("--shape",)),
    CliCase("demo-shape-huge", "llmopt", ("demo", "--shape", "65536", "65536"), None, 1,
            ("--shape", "elements")),
    CliCase("demo-bad-pipeline", "llmopt", ("demo", "--pipeline", "torch-to-prim,bogus"), None,
            1, ("bogus",)),
    CliCase("tune-seqs-zero", "llmopt", ("tune", "tinyllama", "--seqs", "0"), None, 1,
            ("--seqs",)),
    CliCase("unknown-command", "llmopt", ("bogus",), None, 1, ("bogus",)),
    CliCase("pipeline-unknown-pass", "llmopt", ("compile", "{ckpt}", "--pipeline",
                                                "no-such-pass", "--emit", "cuda", "-o", "-"),
            None, 1, ("no-such-pass",)),
    CliCase("pipeline-bad-option", "llmopt", ("compile", "{ckpt}", "--pipeline",
                                              "torch-to-prim,register-tile{bm=-8}", "--emit",
                                              "prim", "-o", "-"),
            None, 1, ("register-tile", "bm")),
    CliCase("output-in-missing-directory", "llmopt", ("compile", "{ckpt}", "--seq", "3",
                                                      "--emit", "torch", "-o",
                                                      "{dir}/no/such/dir/out.mlir"),
            None, 1, ("no/such/dir",)),
    CliCase("output-is-a-directory", "llmopt", ("compile", "{ckpt}", "--seq", "3", "--emit",
                                                "torch", "-o", "{dir}/out"),
            _output_directory, 1, ("out",)),
    # checkpoints
    CliCase("ckpt-truncated", "llmopt", _RUN, _edit_bytes(lambda b: b[: len(b) // 2]), 1,
            ("model.safetensors", "truncated")),
    CliCase("ckpt-garbage", "llmopt", _RUN, _edit_bytes(lambda b: os.urandom(len(b))), 1,
            ("model.safetensors",)),
    CliCase("ckpt-empty", "llmopt", _RUN, _edit_bytes(lambda b: b""), 1,
            ("model.safetensors",)),
    CliCase("ckpt-header-too-long", "llmopt", _RUN,
            _edit_bytes(lambda b: struct.pack("<Q", 2**40) + b[8:]), 1,
            ("model.safetensors", "header")),
    CliCase("ckpt-header-not-json", "llmopt", _RUN, _edit_bytes(_bad_header_json), 1,
            ("model.safetensors", "header")),
    CliCase("ckpt-header-bad-offsets", "llmopt", _RUN, _edit_bytes(_bad_offsets), 1,
            ("model.safetensors", VICTIM)),
    CliCase("ckpt-wrong-shape", "llmopt", _RUN,
            _edit_tensors(_set(VICTIM, lambda t: t.t().contiguous())), 1, (VICTIM, "shape")),
    CliCase("ckpt-wrong-dtype", "llmopt", _RUN,
            _edit_tensors(_set(VICTIM, lambda t: (t * 100).int())), 1, (VICTIM, "I32")),
    CliCase("ckpt-missing-tensor", "llmopt", _RUN, _edit_tensors(_drop(VICTIM)), 1,
            (VICTIM, "no tensor")),
    CliCase("ckpt-missing-shard", "llmopt", _RUN, _sharded, 1,
            ("model-00002-of-00002.safetensors",)),
    CliCase("ckpt-bin-garbage", "llmopt", _RUN, _bin_checkpoint, 1, ("pytorch_model.bin",)),
    CliCase("ckpt-more-layers", "llmopt", (*_RUN, "--layers", "5"), None, 1,
            ("2 decoder layers", "5")),
    CliCase("ckpt-nan", "llmopt", _RUN, _edit_tensors(_set(VICTIM, _poison(float("nan")))), 1,
            (VICTIM, "non-finite", "--allow-nonfinite")),
    CliCase("ckpt-inf", "llmopt", _RUN, _edit_tensors(_set(VICTIM, _poison(float("inf")))), 1,
            (VICTIM, "non-finite")),
    CliCase("ckpt-nan-allowed", "llmopt", (*_RUN, "--allow-nonfinite"),
            _edit_tensors(_set("model.norm.weight", _poison(float("nan")))), 0, (),
            ("argmax agreement: 3/3",)),
    CliCase("ckpt-good", "llmopt", _RUN, None, 0, (), ("NON-FINITE",)),
    # llm-opt
    CliCase("llm-opt-missing-file", "llm-opt", ("{dir}/nothing.mlir",), None, 1,
            ("nothing.mlir",)),
    CliCase("llm-opt-directory", "llm-opt", ("{dir}",), None, 1, ("error",)),
    CliCase("llm-opt-binary", "llm-opt", ("{dir}/x.mlir",),
            _text("x.mlir", b"\x00\xff\xfe\x01\x02garbage\x00"), 1, ("x.mlir",)),
    CliCase("llm-opt-deep-nesting", "llm-opt", ("{dir}/x.mlir",),
            _text("x.mlir", "func.func @f() {\n" + "%0 = arith.constant dense<"
                  + "[" * 3000 + "1" + "]" * 3000 + "> : tensor<1xf32>\n}\n"), 1,
            ("x.mlir",)),
    CliCase("llm-opt-unknown-pass", "llm-opt", ("{dir}/x.mlir", "-p", "no-such-pass"),
            _text("x.mlir", "func.func @f() {\n  func.return\n}\n"), 1, ("no-such-pass",)),
    CliCase("llm-opt-pass-option-range", "llm-opt",
            ("{dir}/x.mlir", "-p", "kernel-to-cuda{min_blocks=-1}"),
            _text("x.mlir", "func.func @f() {\n  func.return\n}\n"), 1,
            ("kernel-to-cuda", "min_blocks")),
    CliCase("llm-opt-pass-option-type", "llm-opt",
            ("{dir}/x.mlir", "-p", "register-tile{bm=sixty}"),
            _text("x.mlir", "func.func @f() {\n  func.return\n}\n"), 1, ("register-tile",)),
    CliCase("llm-opt-pipeline-arch", "llm-opt",
            ("{dir}/x.mlir", "-p", "lower-to-cuda{arch=sm_1}"),
            _text("x.mlir", "func.func @f() {\n  func.return\n}\n"), 1, ("arch", "sm_1")),
    CliCase("llm-opt-output-missing-dir", "llm-opt", ("{dir}/x.mlir", "-o", "{dir}/a/b/c.mlir"),
            _text("x.mlir", "func.func @f() {\n  func.return\n}\n"), 1, ("a/b/c.mlir",)),
    CliCase("llm-opt-constant-out-of-bounds", "llm-opt", ("{dir}/x.mlir", "-p", "lower-to-cuda",
                                                          "-t", "cuda"),
            _text("x.mlir", "func.func @f(%x: memref<5xf32>) {\n"
                  "  loop.kernel @k (%a = %x : memref<5xf32>) {\n"
                  "    %v = loop.load %a[32000] : memref<5xf32>\n"
                  "    loop.store %v, %a[0] : memref<5xf32>\n  }\n  func.return\n}\n"), 1,
            ("x.mlir:3:", "32000")),
    CliCase("llm-opt-unroll-bool", "llm-opt", ("{dir}/x.mlir", "-p", "kernel-to-cuda"),
            _text("x.mlir", "kernel.func @k(%a: memref<8xf32>) block [32, 1, 1] {\n"
                  "  %c0 = arith.constant 0 : index\n  %c8 = arith.constant 8 : index\n"
                  "  %c1 = arith.constant 1 : index\n  scf.for %i = %c0 to %c8 step %c1 {\n"
                  "    %v = kernel.load %a[%i] : memref<8xf32>\n"
                  "    kernel.store %v, %a[%i] : memref<8xf32>\n  } {unroll = true}\n"
                  "  kernel.return\n}\n"), 1, ("x.mlir:5:", "unroll")),
)
"""Every case of the corpus (see the module docstring)."""


# --- running ------------------------------------------------------------------------------------


def _expand(argv: Sequence[str], directory: Path) -> list[str]:
    return [a.replace("{dir}", str(directory)).replace("{ckpt}", str(directory / "ckpt"))
            for a in argv]


@contextlib.contextmanager
def _environment(cache: Path) -> Iterator[None]:
    """A private compile cache and the offline switches the commands set, restored after."""
    saved = {k: os.environ.get(k) for k in ("LLMOPT_CACHE_DIR", "LLMOPT_NO_CACHE")}
    os.environ["LLMOPT_CACHE_DIR"] = str(cache)
    os.environ.pop("LLMOPT_NO_CACHE", None)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _run_tool(tool: str, argv: list[str]) -> tuple[int | None, str, str, str | None]:
    """Run ``llmopt`` (its ``main``) or ``llm-opt`` in process; (status, stdout, stderr,
    escaped exception)."""
    out, err = io.StringIO(), io.StringIO()
    status: int | None = None
    escaped: str | None = None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if tool == "llmopt":
                from llmopt.tools.llmopt_cli import main

                status = main(argv)
            else:
                from llmopt.tools.llm_opt import run_tool

                status = run_tool(argv)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # noqa: BLE001 - what escapes is what the corpus reports
        if isinstance(exc, KeyboardInterrupt):
            raise
        escaped = f"{type(exc).__name__}: {exc}".split("\n")[0]
    return status, out.getvalue(), err.getvalue(), escaped


def _problems(case: CliCase, status: int | None, stdout: str, stderr: str) -> list[str]:
    """What is wrong with a run of ``case`` besides tracebacks and internal errors."""
    problems = []
    if status != case.status:
        problems.append(f"exit status {status}, expected {case.status}")
    errors = [line for line in stderr.splitlines() if re.search(r"\berror:", line)]
    if case.status == 1:
        if len(errors) != 1:
            problems.append(f"{len(errors)} error lines, expected one")
        for text in case.names:
            if errors and text not in errors[0]:
                problems.append(f"the error line does not name {text!r}")
    for text in case.forbid:
        if text in stdout + stderr:
            problems.append(f"the output says {text!r}")
    return problems


def run_cli_case(case: CliCase, base: Path, workdir: Path) -> CliOutcome:
    """Run ``case`` in ``workdir/<name>`` (with a copy of the ``base`` checkpoint)."""
    directory = workdir / case.name
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    shutil.copytree(base, directory / "ckpt")
    if case.setup is not None:
        case.setup(directory)
    argv = _expand(case.argv, directory)
    began = time.perf_counter()
    with _environment(directory / "cache"):
        status, stdout, stderr, escaped = _run_tool(case.tool, argv)
    outcome = CliOutcome(case, status, stdout, stderr, time.perf_counter() - began, escaped)
    outcome.problems = _problems(case, status, stdout, stderr)
    return outcome


def run_cli_corpus(workdir: Path, names: Sequence[str] = (), progress: bool = False
                   ) -> list[CliOutcome]:
    """Run the cases named (all when none are) in ``workdir``."""
    import warnings

    os.environ["HF_HUB_OFFLINE"] = "1"
    warnings.filterwarnings("ignore")
    base = build_base(workdir / "base")
    chosen = [c for c in CASES if not names or c.name in names]
    unknown = sorted(set(names) - {c.name for c in CASES})
    if unknown:
        raise ValueError(f"no CLI case named {', '.join(unknown)}")
    outcomes = []
    for case in chosen:
        outcome = run_cli_case(case, base, workdir)
        outcomes.append(outcome)
        if progress:
            print(f"  {case.name}: {outcome.kind} (exit {outcome.status}, "
                  f"{outcome.seconds:.1f} s)", flush=True)
    return outcomes


def summary_lines(outcomes: Sequence[CliOutcome], verbose: bool = False) -> Iterator[str]:
    """The counts by kind, then each case that misbehaved (with its output when
    ``verbose``)."""
    kinds = ("ok", "diagnosed", "internal error", "traceback", "wrong")
    counts = {k: sum(o.kind == k for o in outcomes) for k in kinds}
    yield (f"CLI cases: {len(outcomes)}   " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for o in outcomes:
        bad = o.kind not in ("ok", "diagnosed")
        if bad or verbose:
            detail = "; ".join(o.problems) or (o.escaped or "")
            yield f"  [{o.kind}] {o.case.name}: {o.case.tool} {' '.join(o.case.argv)}  {detail}"
            if verbose or bad:
                tail = (o.stdout + o.stderr).strip().splitlines()[-6:]
                yield from (f"      {line}" for line in tail)
