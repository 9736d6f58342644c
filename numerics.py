"""Numerical checking of passes: did a pass keep the program's meaning?

:func:`check_numerics` runs a pipeline and, after every pass, interprets the function with
llmopt's CPU interpreters on the same seeded random inputs, comparing each result with the
result before that pass. The first pass that changes a result beyond tolerance, or whose
output cannot be interpreted (an out-of-bounds access, a race), fails the check.

**Tolerance comes from the dtypes and the program, never from tuning.** A pass may reorder
floating-point sums (a cooperative reduction sums in a tree, not left to right). For ``n``
terms of random sign the rounding error of such a sum grows like ``sqrt(n) * eps``
relative to the magnitude of the terms, so an output may move by
``C * eps * sqrt(n)`` relative to the largest output value, where ``eps`` is the machine
epsilon of the program's widest floating-point type, ``n`` the longest reduction in the
program (1 if none) and ``C = 16`` absorbs the few ulps of transcendental functions. A
change larger than that is a change of meaning.

**16-bit storage.** ``f16``/``bf16`` values are stored, never summed: sums accumulate in
``f32`` and every op computes in ``f32`` and rounds its result once (see
:mod:`llmopt.lowering.torch_to_prim`). A program holding 16-bit floats therefore gets the
tolerance of its ``f32`` arithmetic plus ``HALF_ULPS * eps16`` (``eps16`` = ``2**-7`` for
``bf16``, ``2**-10`` for ``f16``): a reordered ``f32`` sum may move a value across a 16-bit
rounding boundary, one ulp of the storage type, and a chain of such rounding points moves
an output by a few.

A program with symbolic extents (``?``, bound by symbol arguments) is checked at several
random lengths (``lengths``, default 2; see :func:`llmopt.interp.host.random_lengths`), or
at the lengths given (a sequence: every symbol takes each value in turn, so that the
variants of chosen length buckets run): each pass must keep the result at every one of
them. A ``?`` extent counts as the longest length checked when the tolerance measures
reductions.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, ShapedType
from xdsl.ir import Attribute

SAFETY = 16
HALF_ULPS = 4
"""Ulps of a 16-bit storage type (its epsilon) that a program holding it may move by."""
_EPS = {"f16": 2.0**-10, "bf16": 2.0**-7, "f32": 2.0**-23, "f64": 2.0**-52}
_HALF = ("f16", "bf16")


class NumericsError(Exception):
    """A pass changed the program's result beyond tolerance (or broke interpretation)."""


@dataclass
class PassCheck:
    """One line of the report: how much the result moved across one pass."""

    name: str
    max_abs: float = 0.0
    max_rel: float = 0.0
    seconds: float = 0.0
    ok: bool = True
    note: str = ""

    def line(self) -> str:
        status = "ok" if self.ok else "FAIL"
        text = (f"{self.name:28s} max abs {self.max_abs:9.3e}  max rel {self.max_rel:9.3e}  "
                f"{self.seconds * 1e3:8.1f} ms  {status}")
        return text + (f"  ({self.note})" if self.note else "")


@dataclass
class NumericsReport:
    """Per-pass results of :func:`check_numerics`."""

    tolerance: float
    passes: list[PassCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.passes)

    @property
    def first_failure(self) -> PassCheck | None:
        return next((p for p in self.passes if not p.ok), None)

    def __str__(self) -> str:
        head = f"// numerics: tolerance {self.tolerance:.2e} (max error relative to max |result|)"
        return "\n".join([head, *(p.line() for p in self.passes)])


def _element_name(typ: Attribute) -> str | None:
    element = typ.get_element_type() if isinstance(typ, ShapedType) else typ
    name = str(element)
    return name if name in _EPS else None


def _main_function(module: ModuleOp) -> func.FuncOp:
    funcs = [op for op in module.walk() if isinstance(op, func.FuncOp) and not op.is_declaration]
    named = [f for f in funcs if f.sym_name.data == "forward"]
    if named or len(funcs) == 1:
        return (named or funcs)[0]
    raise NumericsError("cannot tell which function to check: name it @forward")


def _reduction_length(module: ModuleOp, dynamic_extent: int = 1) -> int:
    """The largest number of terms any one output value is reduced from (a ``?`` extent
    counting as ``dynamic_extent``)."""

    def shape_of(typ: Attribute) -> list[int]:
        return [dynamic_extent if d < 0 else d for d in typ.get_shape()]  # type: ignore[attr-defined]

    longest = 1
    for op in module.walk():
        name = op.name
        if name == "prim.reduce":
            in_shape = shape_of(op.operands[0].type)
            dims = op.properties["dims"].get_values()  # type: ignore[attr-defined]
            longest = max(longest, math.prod(in_shape[d] for d in dims))
        elif name in ("loop.reduce", "tile.coop_reduce"):
            n, parent = 1, op
            while parent is not None:
                if parent.name in ("loop.reduce", "tile.coop_reduce"):
                    n *= parent.properties["extent"].value.data  # type: ignore[attr-defined]
                parent = parent.parent_op()
            longest = max(longest, n)
        elif name == "torch.sdpa":  # sums over the head dim, then over the keys
            q, k = (shape_of(o.type) for o in op.operands[:2])
            longest = max(longest, q[-1], k[-2])
        elif name in ("torch.linear", "torch.matmul", "torch.bmm", "torch.softmax",
                      "torch.sum", "torch.mean", "torch.rms_norm"):
            shape = shape_of(op.operands[0].type)
            longest = max(longest, math.prod(shape) if name in ("torch.sum", "torch.mean")
                          else shape[-1])
    return longest


def tolerance(module: ModuleOp, dynamic_extent: int | None = None) -> float:
    """``SAFETY * eps * sqrt(n)`` for the program's widest float type and longest reduction
    (``f32`` for the arithmetic of 16-bit types, plus ``HALF_ULPS`` times the widest 16-bit
    type's epsilon when the program stores any).

    The float types are those of the function's arguments and results and of every value it
    computes (a float64 model that normalises in float32 rounds like float32). A ``?``
    extent counts as ``dynamic_extent`` (default: the largest maximum of the function's
    symbols)."""
    from llmopt.dialects._symbols import function_symbols

    fn = _main_function(module)
    if dynamic_extent is None:
        dynamic_extent = max((s.max for s in function_symbols(fn).values()), default=1)
    types = [*fn.function_type.inputs.data, *fn.function_type.outputs.data]
    types += [r.type for op in fn.walk() for r in op.results]
    names = {_element_name(t) for t in types}
    names.discard(None)
    halves = [_EPS[n] for n in names if n in _HALF]
    wide = {n for n in names if n is not None and n not in _HALF} or {"f32"}
    eps = max(_EPS[n] for n in wide)
    if wide == {"f64"} and not halves:
        eps = _EPS["f64"]
    elif halves:
        eps = max(eps, _EPS["f32"])
    storage = HALF_ULPS * max(halves) if halves else 0.0
    return SAFETY * eps * math.sqrt(_reduction_length(module, dynamic_extent)) + storage


def compare(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> tuple[float, float]:
    """(max absolute error, max error relative to max |want|) over all outputs."""
    max_abs = max_rel = 0.0
    if len(got) != len(want):
        return math.inf, math.inf
    for g, w in zip(got, want, strict=True):
        g64, w64 = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if g64.shape != w64.shape:
            return math.inf, math.inf
        diff = np.abs(g64 - w64)
        if not np.all(np.isfinite(g64) == np.isfinite(w64)):
            return math.inf, math.inf
        diff = np.where(np.isfinite(w64), diff, 0.0)
        scale = float(np.max(np.abs(np.where(np.isfinite(w64), w64, 0.0)), initial=0.0))
        err = float(np.max(diff, initial=0.0))
        max_abs = max(max_abs, err)
        max_rel = max(max_rel, err / scale if scale > 0 else err)
    return max_abs, max_rel


def interpretable(module: ModuleOp) -> bool:
    """Whether the CPU interpreters cover ``module`` (CUDA IR is compiled, not interpreted)."""
    return not any(op.name.startswith("cuda.") for op in module.walk())


def _bindings(fn: func.FuncOp, lengths: int | Sequence[int], seed: int
              ) -> list[dict[str, int]]:
    """The symbol values to check at: ``lengths`` random ones, or each given length for
    every symbol (each within the symbol's bounds)."""
    from llmopt.dialects._symbols import function_symbols
    from llmopt.interp.host import random_lengths

    if isinstance(lengths, int):
        if lengths < 1:
            raise NumericsError(f"the number of random lengths must be positive, got {lengths}")
        return random_lengths(fn, lengths, seed)
    symbols = function_symbols(fn)
    if not symbols:
        raise NumericsError("lengths are given, but the function declares no symbol")
    if not lengths:
        raise NumericsError("no length given")
    for value in lengths:
        for name, sym in symbols.items():
            if not sym.min <= value <= sym.max:
                raise NumericsError(f"length {value} is outside [{sym.min}, {sym.max}], the "
                                    f"bounds of symbol '{name}'")
    return [{name: int(value) for name in symbols} for value in lengths]


class NumericsChecker:
    """Interprets a module before a pipeline and after each pass, comparing results (at
    ``lengths`` random lengths when the program has symbolic extents)."""

    def __init__(self, module: ModuleOp, seed: int = 0,
                 lengths: int | Sequence[int] = 2) -> None:
        from llmopt.interp import random_inputs, run

        fn = _main_function(module)
        self.bindings = _bindings(fn, lengths, seed)
        longest = max((v for b in self.bindings for v in b.values()), default=None)
        self.tol = tolerance(module, longest)
        self.input_sets = [random_inputs(fn, seed, lengths=b) for b in self.bindings]
        self.inputs = self.input_sets[0]
        self.report = NumericsReport(self.tol)
        self.previous: list[list[np.ndarray]] | None = [run(module, i) for i in self.input_sets]

    @property
    def lengths_text(self) -> str:
        """``seq = 7, 23`` (empty without symbols): the lengths every pass is checked at."""
        names = sorted({n for b in self.bindings for n in b})
        return "; ".join(f"{n} = " + ", ".join(str(b[n]) for b in self.bindings) for n in names)

    def after(self, pass_name: str, module: ModuleOp) -> PassCheck:
        """Check the module after ``pass_name`` against the result before it."""
        from llmopt.interp import InterpretError, run

        check = PassCheck(pass_name)
        self.report.passes.append(check)
        if not interpretable(module):
            check.note = "not interpreted: CUDA IR is checked by NVRTC and on the GPU"
            return check
        start = time.perf_counter()
        try:
            outputs = [run(module, i) for i in self.input_sets]
        except InterpretError as err:
            check.seconds = time.perf_counter() - start
            check.ok = False
            check.max_abs = check.max_rel = math.inf
            check.note = f"{type(err).__name__}: {str(err).splitlines()[0]}"
            return check
        check.seconds = time.perf_counter() - start
        if self.previous is not None:
            errors = [compare(got, want) for got, want in zip(outputs, self.previous, strict=True)]
            check.max_abs = max(e[0] for e in errors)
            check.max_rel = max(e[1] for e in errors)
            check.ok = check.max_rel <= self.tol
        self.previous = outputs
        return check


def check_numerics(module: ModuleOp, pipeline: str = "lower-to-cuda", *, seed: int = 0,
                   lengths: int = 2) -> NumericsReport:
    """Run ``pipeline`` on a copy of ``module``, checking every pass numerically (a symbolic
    program at ``lengths`` random lengths).

    Returns the per-pass report; ``report.ok`` is False and ``report.first_failure`` names
    the pass if one changed the result beyond :func:`tolerance`.
    """
    from llmopt.api import lower, make_context

    make_context()  # loads installed plugins: their interpreters and passes are known below
    work = module.clone()
    checker = NumericsChecker(work, seed, lengths)
    lower(work, pipeline, callback=lambda done, mod: checker.after(done.name, mod))
    return checker.report
