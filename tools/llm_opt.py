"""``llm-opt``: run pass pipelines over textual IR, like ``mlir-opt`` and ``xdsl-opt``.

Examples::

    llm-opt model.mlir -p lower-to-cuda{arch=sm_80} -t cuda
    llm-opt layer.mlir -p 'torch-to-prim,canonicalize' --print-ir-after-all
    llm-opt layer.mlir -p lower-to-cuda --ir-dump-dir dumps/
    llm-opt layer.mlir --load-plugin my_passes.py -p my-pass

It is :class:`xdsl.xdsl_opt_main.xDSLOptMain` with llmopt's dialects, passes, named
pipelines and targets registered (see :mod:`llmopt.registry`), plus:

* named pipelines expanded textually before the pipeline is parsed, so every step stays
  visible (``--dump-pass-pipeline`` prints the expansion);
* ``--print-ir-before[-all]``, ``--print-ir-after[-all]`` and ``--ir-dump-dir`` to watch the
  IR change pass by pass;
* ``--load-plugin`` to import a file or module that registers passes, dialects, pipelines
  or targets;
* diagnostics instead of tracebacks: bad input (a bad pipeline, a parse error, IR that
  fails to verify, a pass that rejects its input) exits with status 1, and so does a pass
  or target that needs an optional dependency that is not installed (one line saying what
  to install, :mod:`llmopt.deps`); a compiler bug exits with status 2 after printing
  ``internal error: ...`` and writing a reproducer.

Operations parsed from a file carry their source position as a location, so verifier
errors name ``file:line:col`` (``--print-debuginfo`` shows them in the output).

Only xDSL and :mod:`llmopt.registry` are imported at startup; torch, numpy and the CUDA
libraries are imported by the passes and targets that need them.
"""

from __future__ import annotations

import argparse
import bisect
import os
import re
import shlex
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from io import BytesIO, StringIO
from pathlib import Path
from types import ModuleType
from typing import IO, ClassVar, NoReturn

from xdsl.context import Context
from xdsl.dialects.builtin import UNKNOWN_LOC, FileLineColLoc, IntAttr, ModuleOp, StringAttr
from xdsl.ir import Block, Dialect, Operation, Region, SSAValue
from xdsl.irdl.dominance import DominanceInfo
from xdsl.parser import Parser
from xdsl.parser.core import ForwardDeclaredValue
from xdsl.passes import ModulePass
from xdsl.traits import IsolatedFromAbove
from xdsl.utils.arg_spec import parse_spec
from xdsl.utils.exceptions import (
    ArgSpecParseError,
    DiagnosticException,
    MultipleSpansParseError,
    ParseError,
    PassFailedException,
    VerifyException,
)
from xdsl.utils.lexer import Span
from xdsl.xdsl_opt_main import xDSLOptMain

from llmopt import registry
from llmopt.dialects._symbols import SymbolError
from llmopt.dialects._symbols import verify_module as verify_symbols
from llmopt.dialects._syntax import OpVerifyException

PROG = "llm-opt"

#: xDSL dialects usable next to llmopt's own ones.
XDSL_DIALECTS: tuple[str, ...] = ("builtin", "func", "arith", "math", "scf", "memref", "affine")

#: Notes (the printed module with the error marked) longer than this are cut down to the
#: lines around the marks.
_MAX_NOTE_LINES = 60
_NOTE_CONTEXT_LINES = 6


class UserError(Exception):
    """An error in what the user gave the tool (arguments, pipeline, plugin, input file)."""


class DialectLoadError(Exception):
    """A registered dialect could not be loaded: an installation or plugin bug."""


class PassLoadError(Exception):
    """A registered pass could not be loaded: an installation or plugin bug (or a missing
    optional dependency of the pass)."""

    def __init__(self, pass_name: str, message: str) -> None:
        super().__init__(message)
        self.pass_name = pass_name


class PassVerificationError(Exception):
    """The IR a pass produced does not verify: a bug in that pass."""

    def __init__(self, pass_name: str, error: DiagnosticException) -> None:
        super().__init__(f"the IR does not verify after pass '{pass_name}': {error}")
        self.pass_name = pass_name
        self.error = error


# --- plugins -------------------------------------------------------------------------------------


def _prescan_plugins(argv: Sequence[str]) -> list[str]:
    """The ``--load-plugin`` values of ``argv`` (plugins load before passes are registered)."""
    scanner = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    scanner.add_argument("--load-plugin", action="append", default=[])
    known, _ = scanner.parse_known_args(list(argv))
    return list(known.load_plugin)


def load_plugin(plugin: str) -> ModuleType:
    """Load a plugin (a ``.py`` file, a module or ``module:function``) with
    :func:`llmopt.plugins.load_plugin`; raise :class:`UserError` naming it if it fails."""
    from llmopt import plugins

    try:
        return plugins.load_plugin(plugin)
    except plugins.PluginError as err:
        raise UserError(str(err)) from err


def load_installed_plugins() -> None:
    """Load the installed plugins (entry-point group ``llmopt.plugins``), once."""
    from llmopt import plugins

    try:
        plugins.load_entry_points()
    except plugins.PluginError as err:
        raise UserError(str(err)) from err


# --- parsing with source locations ---------------------------------------------------------------


#: The name of the op whose text starts here: ``%a, %b = arith.addi`` or ``"arith.addi"``.
_OP_NAME_AT = re.compile(r'(?:%[\w.$-]+(?::\d+)?(?:\s*,\s*%[\w.$-]+(?::\d+)?)*\s*=\s*)?"?'
                         r"([A-Za-z_][\w.$]*)")


class LocatingParser(Parser):
    """An MLIR parser that gives every parsed operation without an explicit ``loc(...)``
    the ``file:line:col`` of its first token, so that diagnostics can point at the source."""

    def __init__(
        self, ctx: Context, text: str, name: str = "<unknown>", line_offset: int = 0
    ) -> None:
        super().__init__(ctx, text, name)
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self._line_offset = line_offset
        self._file = StringAttr(name)
        self._ints: dict[int, IntAttr] = {}

    def parse_operation(self) -> Operation:
        """Parse an operation and attach its source position as its location.

        An op, attribute or type that its constructor rejects while it is parsed (a
        ``VerifyException`` or ``ValueError``: ``arith.constant 300 : i8``, ``!cuda.ptr``
        of a pointer …) becomes a :class:`ParseError` at the op's first token."""
        first = self._current_token.span
        start = first.start
        try:
            op = super().parse_operation()
        except (VerifyException, ValueError) as err:
            text = first.input.content
            name = _OP_NAME_AT.match(text, start)
            what = f"'{name.group(1)}' op" if name else "op"
            raise ParseError(first, f"{what} is invalid: {err}") from err
        if op.location is UNKNOWN_LOC:
            line = bisect.bisect_right(self._line_starts, start)
            column = start - self._line_starts[line - 1] + 1
            op.location = FileLineColLoc.new(
                (self._file, IntAttr(line + self._line_offset), self._int(column))
            )
        return op

    def parse_module(self, allow_implicit_module: bool = True) -> ModuleOp:
        """Parse the module; a value used but never defined (or defined only in a region
        that does not enclose the use) is an error at its first use, not at the end."""
        try:
            return super().parse_module(allow_implicit_module)
        except ParseError as err:
            if not self.forward_ssa_references or not err.msg.startswith("values used but"):
                raise
            undefined = self._first_undefined_use()
            if undefined is None:
                raise
            raise ParseError(undefined[1], f"use of undefined value %{undefined[0]}") from None

    def _first_undefined_use(self) -> tuple[str, Span[str]] | None:
        """The name and span of the first use of a value that was never defined."""
        text = self.lexer.input.content
        found: list[tuple[int, str]] = []
        for name, references in self.forward_ssa_references.items():
            for value in references.values():
                for use in value.uses:
                    loc = use.operation.location
                    if not isinstance(loc, FileLineColLoc):
                        continue
                    line = loc.line.data - self._line_offset
                    if not 0 < line <= len(self._line_starts):
                        continue
                    start = self._line_starts[line - 1] + loc.column.data - 1
                    match = re.compile(rf"%{re.escape(name)}(?![\w.$-])").search(text, start)
                    found.append((match.start() if match else start, name))
        if not found:
            return None
        offset, name = min(found)
        return name, Span(offset, offset + len(name) + 1, self.lexer.input)

    def _int(self, value: int) -> IntAttr:
        """A shared ``IntAttr`` for small values such as columns."""
        attr = self._ints.get(value)
        if attr is None:
            attr = self._ints[value] = IntAttr(value)
        return attr


# --- diagnostics ---------------------------------------------------------------------------------


def _lengths(text: str) -> list[int]:
    """``--check-numerics-at``'s value: comma-separated positive lengths."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected lengths like 1,9,40, got '{text}'") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"lengths must be positive, got '{text}'")
    return values


def _trim_note(note: str) -> str:
    """Cut a long diagnostic note (a printed module with marked ops) down to the marked
    lines and a few lines around them."""
    lines = note.rstrip("\n").split("\n")
    if len(lines) <= _MAX_NOTE_LINES:
        return "\n".join(lines)
    marked = [i for i, line in enumerate(lines) if re.match(r"\s*\^", line)]
    if not marked:
        return "\n".join(lines[:_MAX_NOTE_LINES] + ["..."])
    keep: set[int] = set()
    for i in marked:
        keep.update(range(max(0, i - _NOTE_CONTEXT_LINES), min(len(lines), i + 4)))
    out: list[str] = []
    previous = -1
    for i in sorted(keep):
        if i != previous + 1:
            out.append("...")
        out.append(lines[i])
        previous = i
    if previous != len(lines) - 1:
        out.append("...")
    return "\n".join(out)


def _failing_op(module: ModuleOp, error: Exception) -> Operation | None:
    """The operation whose verifier raised ``error`` (found by verifying op by op, and each
    empty block, which xDSL checks when it verifies the block, for its parent op)."""
    for op in module.walk(region_first=True):
        try:
            for region in op.regions:
                for block in region.blocks:
                    if block.is_empty:
                        block.verify()
            op.verify(verify_nested_ops=False)
        except Exception as err:
            if str(err) == str(error):
                return op
    return None


class DominanceError(OpVerifyException):
    """An operand used where its definition is not visible (xDSL's verifier does not check
    SSA dominance); ``op`` is the op that uses it."""


def _describe_value(value: SSAValue, index: int) -> str:
    """``operand #1 (%x)``, or ``operand #1`` for a value without a name."""
    return f"operand #{index}" + (f" (%{value.name_hint})" if value.name_hint else "")


def _where_defined(value: SSAValue) -> str:
    """`` at file:line:col`` for a value defined by an op with a source location."""
    if isinstance(value, ForwardDeclaredValue):
        return ""
    owner = value.owner
    if isinstance(owner, Operation) and isinstance(owner.location, FileLineColLoc):
        loc = owner.location
        return f" at {loc.filename.data}:{loc.line.data}:{loc.column.data}"
    return ""


def _check_resolved(module: ModuleOp) -> None:
    """Raise :class:`DominanceError` for an operand that the parser left a forward reference:
    a custom parser resolved it before parsing a region that then defined the name."""
    for op in module.walk():
        for index, operand in enumerate(op.operands):
            if isinstance(operand, ForwardDeclaredValue):
                raise DominanceError(
                    op, f"operand #{index} is never defined (a name defined inside the op's "
                        "own regions is not visible to its operands)"
                )


def verify_dominance(module: Operation) -> None:
    """Raise :class:`DominanceError` for the first operand whose definition does not dominate
    its use: a value used before the op that defines it in the same block, or outside the
    region that defines it. Regions of ``builtin.module`` are graph regions (any order);
    regions with several blocks use block dominance."""

    visible: set[SSAValue] = set()

    def check(op: Operation) -> None:
        for index, operand in enumerate(op.operands):
            if operand in visible:
                continue
            owner = None if isinstance(operand, ForwardDeclaredValue) else operand.owner
            block = owner.parent if isinstance(owner, Operation) else None
            before = block is not None and block.find_ancestor_op_in_block(op) is not None
            problem = ("is used before its definition" if before
                       else "is defined in a region that does not enclose this use")
            raise DominanceError(
                op, f"{_describe_value(operand, index)} {problem}{_where_defined(operand)}"
            )

    def walk_region(region: Region) -> None:
        blocks = list(region.blocks)
        dominators: dict[Block, list[Block]] = {block: [] for block in blocks}
        if len(blocks) > 1:
            info = DominanceInfo(region)
            for block in blocks:
                dominators[block] = [b for b in blocks if info.strictly_dominates(b, block)]
        for block in blocks:
            added: list[SSAValue] = []
            for dominator in dominators[block]:
                added += dominator.args
                added += (r for o in dominator.ops for r in o.results)
            walk_block(block, added)

    def walk_block(block: Block, added: list[SSAValue]) -> None:
        added = [v for v in (*added, *block.args) if v not in visible]
        visible.update(added)
        graph = isinstance(block.parent_op(), ModuleOp)
        if graph:
            results = [r for o in block.ops for r in o.results if r not in visible]
            visible.update(results)
            added += results
        for op in block.ops:
            check(op)
            if op.regions:
                isolated = op.has_trait(IsolatedFromAbove)
                saved = set(visible) if isolated else None
                if isolated:
                    visible.clear()
                for region in op.regions:
                    walk_region(region)
                if saved is not None:
                    visible.clear()
                    visible.update(saved)
            if not graph:
                visible.update(op.results)
                added += op.results
        visible.difference_update(added)

    check(module)
    for region in module.regions:
        walk_region(region)


def _notes(err: BaseException) -> list[str]:
    """The notes xDSL attached to an exception (the module with the failing op marked)."""
    return [str(note) for note in getattr(err, "__notes__", [])]


# --- the tool ------------------------------------------------------------------------------------


class LLMOptMain(xDSLOptMain):
    """The ``llm-opt`` driver: ``xdsl-opt`` with llmopt registered and debugging aids."""

    version_format: ClassVar[str] = "llm-opt (llmopt), built on xDSL {xdsl_version}"

    pipeline_text: str
    """The pass pipeline with named pipelines expanded."""
    print_after: set[str]
    """Passes after which the IR is printed (``--print-ir-after``)."""
    print_before: set[str]
    """Passes before which the IR is printed (``--print-ir-before``)."""

    def __init__(
        self,
        description: str = "llmopt's modular optimizer driver: runs pass pipelines on IR files",
        args: Sequence[str] | None = None,
    ) -> None:
        argv = list(sys.argv[1:] if args is None else args)
        load_installed_plugins()
        self.plugins: list[ModuleType] = [load_plugin(p) for p in _prescan_plugins(argv)]
        self.current_input: tuple[str, int] | None = None
        """Text and line offset of the chunk being processed (for diagnostics, reproducers)."""
        self.current_module: ModuleOp | None = None
        self.current_pass: ModulePass | None = None
        """The pass being applied, ``None`` outside of passes."""
        self.input_verified = False
        self._chunk_index = -1
        self._pass_index = 0
        self._pass_start = 0.0
        self._dump_dir: Path | None = None
        super().__init__(description, argv)
        # As in mlir-opt, --verify-diagnostics covers parse errors too.
        self.args.parsing_diagnostics |= self.args.verify_diagnostics

    # --- registration ----------------------------------------------------------------------------

    def register_all_dialects(self) -> None:
        """Register xDSL's core dialects and llmopt's (and plugins') dialects, lazily."""
        from xdsl.dialects import get_all_dialects

        xdsl_dialects = get_all_dialects()
        factories: dict[str, Callable[[], Dialect]] = {
            name: xdsl_dialects[name] for name in XDSL_DIALECTS
        }
        for name, factory in registry.DIALECTS.items():
            factories[name] = _guarded_dialect(name, factory)
        for name, factory in factories.items():
            self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        """Register xDSL's passes (``canonicalize``, ``cse``, ``dce``, …) and llmopt's."""
        super().register_all_passes()
        for name, factory in registry.PASSES.items():
            self.register_pass(name, _guarded_pass(name, factory))

    def register_all_targets(self) -> None:
        """Register xDSL's targets (``mlir``, …) and llmopt's (``cuda``)."""
        self.available_targets.update(registry.TARGETS)
        super().register_all_targets()

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        """Add llmopt's command-line options to xDSL's."""
        super().register_all_arguments(arg_parser)
        arg_parser.prog = PROG
        # Options are spelled out, as --load-plugin is looked for before parsing proper.
        arg_parser.allow_abbrev = False
        for action in arg_parser._actions:
            if action.dest == "verify_diagnostics":
                action.help = (
                    "print the error of input that fails to parse or verify, or of a pass "
                    "that rejects it, to stdout and exit with status 0"
                )
        arg_parser.formatter_class = argparse.RawDescriptionHelpFormatter

        def usage_error(message: str) -> NoReturn:
            arg_parser.print_usage(sys.stderr)
            arg_parser.exit(1, f"{PROG}: error: {message}\n")

        arg_parser.error = usage_error  # type: ignore[method-assign]
        pipelines = "\n".join(
            f"  {name}{{{' '.join(f'{k}={v}' for k, v in defaults.items())}}}:\n"
            f"    {_expansion(name)}"
            for name, (defaults, _) in sorted(registry.PIPELINES.items())
        )
        arg_parser.epilog = (
            f"named pipelines (usable in -p, options in braces):\n{pipelines}\n\n"
            "exit status: 0 success, 1 bad input or arguments, 2 internal error"
        )
        group = arg_parser.add_argument_group("llmopt")
        group.add_argument(
            "--load-plugin",
            action="append",
            default=[],
            metavar="PATH_OR_MODULE",
            help="import a .py file or a module (MODULE:FUNCTION: then call FUNCTION) before "
            "passes are registered; it can register passes, dialects, pipelines and targets "
            "through llmopt.registry (repeatable; installed plugins load first, unless "
            "LLMOPT_NO_PLUGINS=1)",
        )
        group.add_argument(
            "--dump-pass-pipeline",
            action="store_true",
            help="print the pass pipeline, named pipelines expanded, to stderr",
        )
        group.add_argument(
            "--print-ir-after-all",
            action="store_true",
            help="print the IR to stderr after every pass",
        )
        group.add_argument(
            "--print-ir-after",
            action="append",
            default=[],
            metavar="PASS",
            help="print the IR to stderr after each run of PASS (repeatable, comma separated)",
        )
        group.add_argument(
            "--print-ir-before-all",
            action="store_true",
            help="print the IR to stderr before every pass",
        )
        group.add_argument(
            "--print-ir-before",
            action="append",
            default=[],
            metavar="PASS",
            help="print the IR to stderr before each run of PASS (repeatable, comma separated)",
        )
        group.add_argument(
            "--ir-dump-dir",
            metavar="DIR",
            help="write the input and the IR after each pass to numbered files "
            "DIR/00-input.mlir, DIR/01-<pass>.mlir, ... (with --split-input-file, one "
            "subdirectory DIR/chunk-<k>/ per chunk)",
        )
        group.add_argument(
            "--check-numerics",
            action="store_true",
            help="interpret the function on seeded random inputs before the pipeline and after "
            "every pass, print one line per pass to stderr, and fail (exit 1) naming the first "
            "pass that changed the result beyond the dtype-derived tolerance",
        )
        group.add_argument(
            "--check-numerics-seed",
            type=int,
            default=0,
            metavar="N",
            help="seed of the random inputs of --check-numerics (default 0)",
        )
        group.add_argument(
            "--check-numerics-lengths",
            type=int,
            default=2,
            metavar="N",
            help="with symbolic extents, check every pass at N random lengths (default 2)",
        )
        group.add_argument(
            "--check-numerics-at",
            type=_lengths,
            default=None,
            metavar="L1,L2,...",
            help="with symbolic extents, check every pass at these lengths instead of random "
            "ones (each symbol takes each value), e.g. the bounds of length buckets",
        )
        group.add_argument(
            "--crash-reproducer",
            metavar="FILE",
            help="on an internal error, write the reproducer to FILE (default: a new file "
            "in the temporary directory)",
        )
        group.add_argument(
            "--traceback",
            action="store_true",
            help="on an internal error, also print the Python traceback",
        )

    # --- pipeline --------------------------------------------------------------------------------

    def setup_pipeline(self) -> None:
        """Build the pass pipeline, expanding named pipelines, and check ``--print-ir-*``."""
        try:
            self.pipeline_text = registry.expand_pipeline(self.args.passes)
            if self.args.dump_pass_pipeline:
                print(f"// Pass pipeline: {self.pipeline_text}", file=sys.stderr)
            self.pipeline = registry.build_pipeline(
                self.pipeline_text, self.available_passes, self._between_passes
            )
        except registry.PipelineError as err:
            raise UserError(str(err)) from None
        self.print_after = self._pass_names(self.args.print_ir_after, "--print-ir-after")
        self.print_before = self._pass_names(self.args.print_ir_before, "--print-ir-before")
        if self.args.ir_dump_dir:
            self._dump_dir = Path(self.args.ir_dump_dir)

    def _pass_names(self, values: list[str], flag: str) -> set[str]:
        """Split and check the pass names given to ``flag``."""
        names = {name.strip() for value in values for name in value.split(",") if name.strip()}
        for name in sorted(names):
            if name not in self.available_passes:
                message = registry.unknown_pass_message(name, self.available_passes)
                raise UserError(f"{flag}: {message}")
        return names

    def _between_passes(
        self, previous: ModulePass | None, module: ModuleOp, following: ModulePass | None
    ) -> None:
        """Pipeline callback: time, verify, print and dump the IR between passes."""
        now = time.perf_counter()
        if previous is not None and self.args.time_passes:
            print(f"Pass {previous.name} took {now - self._pass_start} seconds", file=sys.stderr)
        self.current_pass = None
        if not self.args.disable_verify:
            try:
                module.verify()
                verify_dominance(module)
                verify_symbols(module)
            except DiagnosticException as err:
                if previous is None or self.args.verify_diagnostics:
                    raise
                raise PassVerificationError(previous.name, err) from err
        if previous is None:
            self.input_verified = True
            self._dump(module, "input")
            if self.args.check_numerics:
                self._start_numerics(module)
        else:
            if self.args.check_numerics:
                self._check_numerics(previous.name, module)
            self._pass_index += 1
            self._dump(module, previous.name)
            if self.args.print_ir_after_all or previous.name in self.print_after:
                self._print_ir(module, f"IR Dump After {previous.name}")
            if following is not None and self.args.print_between_passes:
                print(f"IR after {previous.name}:")
                self._emit_mlir(module, sys.stdout)
                print("\n\n")
        if following is not None:
            if self.args.print_ir_before_all or following.name in self.print_before:
                self._print_ir(module, f"IR Dump Before {following.name}")
            self.current_pass = following
            self._pass_start = time.perf_counter()

    def _start_numerics(self, module: ModuleOp) -> None:
        """Interpret the input once: the reference for the first pass."""
        from llmopt.interp import InterpretError
        from llmopt.numerics import NumericsChecker, NumericsError

        try:
            self._numerics = NumericsChecker(module, self.args.check_numerics_seed,
                                             self.args.check_numerics_at
                                             or self.args.check_numerics_lengths)
        except (InterpretError, NumericsError) as err:
            raise UserError(f"--check-numerics: cannot interpret the input: {err}") from None
        at = self._numerics.lengths_text
        print(f"// numerics: tolerance {self._numerics.tol:.2e} (max error relative to "
              "max |result|)" + (f" at {at}" if at else ""), file=sys.stderr)

    def _check_numerics(self, pass_name: str, module: ModuleOp) -> None:
        """Interpret after ``pass_name``; stop with exit 1 if the result moved too far."""
        check = self._numerics.after(pass_name, module)
        print(check.line(), file=sys.stderr)
        if not check.ok:
            raise UserError(
                f"--check-numerics: pass '{pass_name}' changed the result (max relative error "
                f"{check.max_rel:.3e} > tolerance {self._numerics.tol:.3e})"
                + (f": {check.note}" if check.note else "")
            )

    def _emit_mlir(self, module: ModuleOp, stream: IO[str]) -> None:
        """Print ``module`` as the ``mlir`` target would, honouring the printing options."""
        from xdsl.targets.mlir import MLIRTarget

        MLIRTarget(
            print_generic_format=self.args.print_op_generic,
            print_properties_as_attributes=self.args.print_no_properties,
            print_debuginfo=self.args.print_debuginfo,
        ).emit(self.ctx, module, stream)

    def _print_ir(self, module: ModuleOp, title: str) -> None:
        """Print ``module`` to stderr under an MLIR-style header."""
        sys.stdout.flush()
        print(f"// -----// {title} //----- //", file=sys.stderr)
        self._emit_mlir(module, sys.stderr)
        sys.stderr.flush()

    def _dump(self, module: ModuleOp, name: str) -> None:
        """Write ``module`` to the next numbered file of ``--ir-dump-dir``, if given."""
        if self._dump_dir is None:
            return
        directory = self._dump_dir
        if self.args.split_input_file:
            directory = directory / f"chunk-{self._chunk_index}"
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with open(directory / f"{self._pass_index:02d}-{name}.mlir", "w") as stream:
                self._emit_mlir(module, stream)
        except OSError as err:
            raise UserError(f"--ir-dump-dir: {err}") from None

    # --- input and passes ------------------------------------------------------------------------

    def prepare_output(self) -> IO[str]:
        """Open the output (``-o``); one that cannot be written is an error naming it."""
        try:
            return super().prepare_output()
        except OSError as err:
            reason = err.strerror or str(err)
            raise UserError(f"cannot write output file '{self.args.output_file}': "
                            f"{reason.lower()}") from None

    def get_input_stream(self) -> tuple[IO[bytes], str]:
        """Open the input; a file whose extension no frontend claims is read as MLIR."""
        try:
            stream, extension = super().get_input_stream()
        except FileNotFoundError as err:
            raise UserError(f"cannot open input file '{err.filename}': no such file") from None
        except OSError as err:
            reason = (err.strerror or str(err)).lower()
            raise UserError(f"cannot open input file '{err.filename}': {reason}") from None
        if extension not in self.available_frontends:
            extension = "mlir"
        return stream, extension

    def parse_chunk(
        self, chunk: IO[bytes], file_extension: str, start_offset: int = 0
    ) -> ModuleOp | None:
        """Parse one chunk of input, recording source locations for MLIR text."""
        data = chunk.read()
        text = data.decode("utf-8", errors="replace")
        self._chunk_index += 1
        self._pass_index = 0
        self.current_input = (text, start_offset)
        self.current_module = None
        self.input_verified = False
        spec = parse_spec(self.args.frontend or file_extension)
        if spec.name == "mlir" and not spec.parameters:
            parser = LocatingParser(self.ctx, text, self.get_input_name(), start_offset)
            try:
                module = parser.parse_module(not self.args.no_implicit_module)
            except RecursionError:
                raise UserError(f"{self.get_input_name()}: the input nests too deeply to "
                                "parse") from None
            self.current_module = module
            _check_resolved(module)
        else:
            module = super().parse_chunk(BytesIO(data), file_extension, start_offset)
        self.current_module = module
        return module

    # --- errors ----------------------------------------------------------------------------------

    def locate(self, err: Exception) -> tuple[str, str]:
        """For an input that fails to verify: a ``file:line:col: error: 'op.name' op``
        prefix and the marked source line of the op whose verifier raised ``err``
        (empty strings if unknown)."""
        if self.current_module is None or self.input_verified:
            return "", ""
        op = (err.op if isinstance(err, OpVerifyException | SymbolError)
              else _failing_op(self.current_module, err))
        if op is None or not isinstance(op.location, FileLineColLoc):
            return "", ""
        loc = op.location
        return f"{_loc_text(loc)}: error: '{op.name}' op", self.excerpt(loc)

    def excerpt(self, loc: FileLineColLoc) -> str:
        """The source line of ``loc``, marked (``"\\n<line>\\n   ^"``), when ``loc`` is in the
        input being processed; else ``""``."""
        line, column = loc.line.data, loc.column.data
        if self.current_input is None or loc.filename.data != self.get_input_name():
            return ""
        text, offset = self.current_input
        lines = text.split("\n")
        if not 0 < line - offset <= len(lines):
            return ""
        return f"\n{lines[line - offset - 1]}\n{' ' * (column - 1)}^"

    def write_reproducer(self, err: BaseException) -> Path | None:
        """Write the failing input and the command that crashes on it; return its path."""
        if self.current_input is None:
            return None
        args: list[str] = []
        if self.pipeline_text:
            args += ["-p", self.pipeline_text]
        for plugin in self.args.load_plugin:
            is_file = Path(plugin).is_file()
            args += ["--load-plugin", str(Path(plugin).resolve()) if is_file else plugin]
        for flag in ("allow_unregistered_dialect", "no_implicit_module", "disable_verify"):
            if getattr(self.args, flag):
                args.append("--" + flag.replace("_", "-"))
        if self.args.target != "mlir":
            args += ["-t", self.args.target]
        where = f" in pass '{self.current_pass.name}'" if self.current_pass else ""
        header = [
            f"// {PROG} crash reproducer for {self.get_input_name()}",
            f"// internal error{where}: {type(err).__name__}: {err}".replace("\n", " "),
            f"// RUN: {PROG} %s {shlex.join(args)}".rstrip(),
            "//",
        ]
        trace = traceback.format_exception(err)
        header += ["// " + line for chunk in trace for line in chunk.rstrip("\n").split("\n")]
        # Blank out the input's own RUN lines (keeping line numbers) so that only ours runs.
        text = re.sub(r"(?m)^(\s*//\s*)RUN:.*$", r"\1(RUN line removed)", self.current_input[0])
        content = "\n".join(header) + "\n\n" + text.lstrip("\n")
        try:
            if self.args.crash_reproducer:
                path = Path(self.args.crash_reproducer)
                path.write_text(content)
            else:
                fd, name = tempfile.mkstemp(prefix=f"{PROG}-reproducer-", suffix=".mlir")
                with os.fdopen(fd, "w") as stream:
                    stream.write(content)
                path = Path(name)
        except OSError:
            return None
        return path


def _expansion(pipeline: str) -> str:
    """The passes of a named pipeline with its default options, for ``--help``."""
    try:
        return registry.expand_pipeline(pipeline)
    except registry.PipelineError as err:
        return f"(ill-defined: {err})"


def _guarded_dialect(name: str, factory: Callable[[], Dialect]) -> Callable[[], Dialect]:
    """Wrap a dialect factory so that a failure to import it names the dialect."""

    def load() -> Dialect:
        try:
            return factory()
        except Exception as err:
            raise DialectLoadError(
                f"cannot load dialect '{name}': {type(err).__name__}: {err}"
            ) from err

    return load


def _guarded_pass(
    name: str, factory: Callable[[], type[ModulePass]]
) -> Callable[[], type[ModulePass]]:
    """Wrap a pass factory so that a failure to import the pass names it."""

    def load() -> type[ModulePass]:
        try:
            return factory()
        except Exception as err:
            raise PassLoadError(
                name, f"cannot load pass '{name}': {type(err).__name__}: {err}") from err

    return load


def _format_span(span: Span[str] | Span[bytes], severity: str, message: str) -> list[str]:
    """``file:line:col: severity: message`` followed by the source line, marked."""
    context = span.print_with_context(None).rstrip("\n").split("\n")
    return [f"{context[0]}: {severity}: {message}", *context[1:]]


def _format_parse_error(err: ParseError) -> str:
    """``file:line:col: error: message`` followed by the source line, marked; the other
    places a parse error refers to (a first declaration …) follow as notes."""
    message = err.msg
    if message == " in block definition":  # xDSL's message lacks its subject
        message = "expected '}' or a block label such as '^bb0:'"
    if err.span.start >= len(err.span.input.content):
        message = f"unexpected end of input: {message}"
    lines = _format_span(err.span, "error", message)
    if isinstance(err, MultipleSpansParseError):
        for k, (span, message) in enumerate(err.refs):
            note = message or (err.ref_text if k == 0 and err.ref_text else "see")
            lines += _format_span(span, "note", note.strip().rstrip(":"))
    return "\n".join(lines)


# --- entry point ---------------------------------------------------------------------------------


def _error(message: str) -> None:
    """Print a diagnostic to stderr."""
    sys.stdout.flush()
    print(message, file=sys.stderr)


def _loc_text(loc: FileLineColLoc) -> str:
    """``file:line:col``."""
    return f"{loc.filename.data}:{loc.line.data}:{loc.column.data}"


def _op_line(op: Operation) -> str:
    """The first line of ``op`` printed in generic form (regions elided)."""
    from xdsl.printer import Printer

    stream = StringIO()
    Printer(stream=stream, print_generic_format=True).print_op(op)
    first = stream.getvalue().strip().split("\n")[0]
    return first[:157] + "..." if len(first) > 160 else first


def _report_op_failure(tool: LLMOptMain | None, err: PassFailedException, op: Operation,
                       detail: str) -> None:
    """A pass rejected ``op``: ``file:line:col: error: 'op' op: detail``, the source line
    marked, and the pass's name (or the op's text, when the op has no source position)."""
    pass_name = tool.current_pass.name if tool is not None and tool.current_pass else None
    in_pass = f" (in pass '{pass_name}')" if pass_name else ""
    if isinstance(op.location, FileLineColLoc):
        source = tool.excerpt(op.location) if tool is not None else ""
        _error(f"{_loc_text(op.location)}: error: '{op.name}' op: {detail}{in_pass}{source}")
        return
    failed = f"pass '{pass_name}' failed: " if pass_name else ""
    _error(f"error: {failed}'{op.name}' op: {detail}")
    _error(f"note: the op (no source position): {_op_line(op)}")


def _report_diagnostic(tool: LLMOptMain | None, err: DiagnosticException) -> None:
    """Print a diagnostic for IR that fails to verify or a pass that rejects its input."""
    op, detail = getattr(err, "op", None), getattr(err, "detail", None)
    if isinstance(err, PassFailedException) and isinstance(op, Operation) and isinstance(
            detail, str):
        _report_op_failure(tool, err, op, detail)
        return
    where, source = tool.locate(err) if tool is not None else ("", "")
    if not where:
        where = "error:"
        if isinstance(err, PassFailedException) and tool is not None and tool.current_pass:
            where = f"error: pass '{tool.current_pass.name}' failed:"
    _error(f"{where} {err}{source}")
    if not source:
        for note in _notes(err):
            _error(_trim_note(note))


def _report_internal(tool: LLMOptMain | None, err: BaseException, argv: Sequence[str]) -> None:
    """Print an internal-error message, writing a reproducer when an input was being read."""
    where = ""
    if tool is not None and tool.current_pass is not None:
        where = f" in pass '{tool.current_pass.name}'"
    _error(f"{PROG}: internal error{where}: {type(err).__name__}: {err}")
    cause: BaseException = err.error if isinstance(err, PassVerificationError) else err
    while cause.__cause__ is not None:
        cause = cause.__cause__
    frames = [
        frame
        for frame in traceback.extract_tb(cause.__traceback__)
        if not frame.filename.startswith("<") and "importlib" not in Path(frame.filename).parts
    ]
    if frames and not isinstance(err, PassVerificationError):
        _error(f"{PROG}: note: raised at {frames[-1].filename}:{frames[-1].lineno}")
    if isinstance(err, PassVerificationError):
        for note in _notes(err.error):
            _error(_trim_note(note))
    show_traceback = tool.args.traceback if tool is not None else "--traceback" in argv
    if show_traceback:
        _error("".join(traceback.format_exception(err)).rstrip())
    path = tool.write_reproducer(err) if tool is not None else None
    if path is not None:
        _error(f"{PROG}: note: reproducer written to {path}")
    if not show_traceback:
        _error(f"{PROG}: note: rerun with --traceback for the Python traceback")
    _error(f"{PROG}: note: this is a bug in llmopt or in a plugin; please report it")


def run_tool(argv: Sequence[str] | None = None) -> int:
    """Run ``llm-opt`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    tool: LLMOptMain | None = None
    try:
        tool = LLMOptMain(args=argv)
        tool.run()
    except UserError as err:
        _error(f"{PROG}: error: {err}")
        return 1
    except ArgSpecParseError as err:
        _error(f"{PROG}: error: {err}")
        return 1
    except ParseError as err:
        _error(_format_parse_error(err))
        return 1
    except DiagnosticException as err:
        _report_diagnostic(tool, err)
        return 1
    except KeyboardInterrupt:
        _error(f"{PROG}: interrupted")
        return 130
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as err:
        from llmopt.deps import missing_dependency

        missing = missing_dependency(err)
        if missing is not None:  # one line saying what to install, no traceback
            name = (tool.current_pass.name if tool is not None and tool.current_pass
                    else err.pass_name if isinstance(err, PassLoadError) else None)
            where = f"pass '{name}' " if name else ""
            _error(f"{PROG}: error: {where}{missing}")
            return 1
        _report_internal(tool, err, argv)
        return 2
    return 0


def main() -> int:
    """Console entry point of ``llm-opt``."""
    return run_tool()


if __name__ == "__main__":
    sys.exit(main())
