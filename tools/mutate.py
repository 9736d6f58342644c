"""Grammar-aware mutations of IR text and of pass pipelines, for :mod:`llmopt.tools.fuzz`.

The token- and line-level mutations of the fuzzer mostly make text that no longer parses,
which tests the parser. The mutations here keep it parseable, so that the verifiers and the
passes see the input: each parses the text with every dialect registered, changes the IR and
prints it back (``None`` when the text does not parse, the mutation does not apply, or the
printed mutant does not parse back — invalid IR whose printed form loses what made it parse):

* ``swap_ssa_names``: the uses of two values of one type trade places, where each is visible
  at the other's uses (dataflow changes, types and dominance still hold);
* ``replace_operand``: one operand becomes another value of its type defined before the op
  in its block or an enclosing one (still dominating: the IR usually verifies);
* ``change_attribute``: one property or attribute gets an edge value of its kind — an
  integer (extent, count, offset), a float, a string of the dialects' vocabulary (mappings,
  spaces, reduction kinds), an element of an integer array (grid, block, forall extents), a
  result of an affine map (an access index), a symbol;
* ``add_attribute``: an ``unroll`` factor, an ``llmopt.schedule`` of knobs, an ``llmopt.pad``
  or ``llmopt.layout`` where passes read them, with values in and out of range;
* ``delete_terminator``, ``duplicate_op``, ``reorder_ops``: a block loses its terminator, an
  op is repeated (a second store, kernel or barrier), two neighbouring ops that do not use
  each other's results trade places (loads, stores and barriers change order);
* ``sibling_op`` (text level): an op becomes another of its family with the same syntax
  (``arith.addf`` → ``arith.mulf``, ``tile.copy`` → ``tile.async_copy``, ``kernel.thread_id``
  → ``kernel.block_id``, ``kernel.shared`` → ``kernel.local`` …).

:func:`mutate_pipeline` changes the pipeline an input runs through instead: an option of one
pass set to a value in or out of its range (:mod:`llmopt.options`) or of the wrong type, a
pass dropped, repeated or moved, the pipeline cut short.
"""

from __future__ import annotations

import io
import random
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xdsl.context import Context
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.ir import Attribute, Operation, SSAValue

__all__ = ["IR_MUTATORS", "mutate_pipeline", "default_pipeline"]

_CONTEXT: list[Context] = []


def _context() -> Context:
    """One context with llmopt's and the needed xDSL dialects (built once)."""
    if not _CONTEXT:
        from llmopt.api import make_context

        _CONTEXT.append(make_context())
    return _CONTEXT[0]


def _parse(text: str) -> ModuleOp | None:
    """The module of ``text``, or ``None`` when it does not parse."""
    from xdsl.parser import Parser

    try:
        return Parser(_context(), text).parse_module()
    except Exception:
        return None


def _print(module: ModuleOp) -> str | None:
    """The text of ``module``, or ``None`` when a printer cannot print it."""
    from xdsl.printer import Printer

    out = io.StringIO()
    try:
        Printer(stream=out).print_op(module)
    except Exception:
        return None
    return out.getvalue() + "\n"


def _ops(module: ModuleOp) -> list[Operation]:
    """Every op below the module (the module itself excluded), in walk order."""
    return [op for op in module.walk() if op is not module]


IRMutation = Callable[["ModuleOp", random.Random], bool]
"""Change a module in place; ``False`` when nothing could be changed."""


def _ir_mutator(change: IRMutation) -> Callable[[str, random.Random, Sequence[object]],
                                                str | None]:
    """A text mutator (as :data:`llmopt.tools.fuzz.MUTATORS` holds them) that parses, applies
    ``change`` and prints."""

    def mutate(text: str, rng: random.Random, corpus: Sequence[object]) -> str | None:
        module = _parse(text)
        if module is None:
            return None
        try:
            if not change(module, rng):
                return None
        except Exception:
            return None
        printed = _print(module)
        if printed is None or _parse(printed) is None:
            return None  # invalid IR whose printed form does not parse back: no mutant
        return printed

    mutate.__name__ = change.__name__
    mutate.__doc__ = change.__doc__
    return mutate


# --- values ------------------------------------------------------------------------------------


def _values(module: ModuleOp) -> list[SSAValue]:
    """Every value with a use or a definition below the module: block arguments, then op
    results, in walk order."""
    found: list[SSAValue] = []
    for op in _ops(module):
        for region in op.regions:
            for block in region.blocks:
                found.extend(block.args)
        found.extend(op.results)
    return found


def swap_ssa_names(module: ModuleOp, rng: random.Random) -> bool:
    """The uses of two values of one type, each visible where the other is used, trade
    places."""
    by_type: dict[str, list[SSAValue]] = {}
    for value in _values(module):
        if value.uses:
            by_type.setdefault(str(value.type), []).append(value)
    groups = [vs for vs in by_type.values() if len(vs) > 1]
    if not groups:
        return False
    for _ in range(8):  # a few tries at a pair that keeps dominance
        a, b = rng.sample(rng.choice(groups), 2)
        if _visible_at_uses(b, a) and _visible_at_uses(a, b):
            break
    else:
        return False
    uses_a = [(use.operation, use.index) for use in a.uses]
    uses_b = [(use.operation, use.index) for use in b.uses]
    for (op, index), value in [*((u, b) for u in uses_a), *((u, a) for u in uses_b)]:
        operands = list(op.operands)
        operands[index] = value
        op.operands = operands
    return True


def _visible_at_uses(value: SSAValue, other: SSAValue) -> bool:
    """Whether ``value`` dominates every use of ``other``."""
    return all(any(v is value for v in _visible_before(use.operation)) for use in other.uses)


def _visible_before(op: Operation) -> list[SSAValue]:
    """Values defined before ``op`` in its block and the blocks around it (up to the op
    isolated from above): those that dominate it."""
    from xdsl.traits import IsolatedFromAbove

    found: list[SSAValue] = []
    current: Operation | None = op
    while current is not None and current.parent is not None:
        block = current.parent
        found.extend(block.args)
        for other in block.ops:
            if other is current:
                break
            found.extend(other.results)
        if current.has_trait(IsolatedFromAbove):
            break
        current = block.parent_op()
    return found


def replace_operand(module: ModuleOp, rng: random.Random) -> bool:
    """One operand becomes another value of its type that dominates the op."""
    uses = [(op, index) for op in _ops(module) for index in range(len(op.operands))]
    rng.shuffle(uses)
    for op, index in uses[:8]:  # a few tries at an operand with a replacement
        operand = op.operands[index]
        others = [v for v in _visible_before(op) if v.type == operand.type and v is not operand]
        if others:
            break
    else:
        return False
    operands = list(op.operands)
    operands[index] = rng.choice(others)
    op.operands = operands
    return True


# --- attributes ---------------------------------------------------------------------------------

_INTS = (0, 1, -1, 2, 3, 4, 7, 8, 16, 31, 32, 33, 64, 100, 255, 256, 1024, 1025, 4096, 65535,
         65536, 2**31 - 1, 2**31, 2**32, 2**62, -(2**31))
_FLOATS = (0.0, -0.0, 1.0, -1.0, 0.5, 1e-30, 1e30, 3.4e38, float("inf"), float("-inf"),
           float("nan"))
_STRINGS = ("blocks", "threads", "block_threads", "shared", "registers", "global", "add",
            "mul", "max", "min", "xor", "x", "y", "z", "w", "init", "k_loop", "epilogue",
            "prologue", "stage", "mma", "async3", "", "k", "double", "main", "threadIdx")
_KNOB_NAMES = ("bm", "bn", "tm", "tn", "blocked", "bk", "kmajor", "stages", "carry", "prefetch",
               "split_k", "kv_order", "mma_terms", "mma_order", "mma_promote", "mma_split",
               "min_blocks")


def _new_int(value: int, rng: random.Random) -> int:
    return rng.choice([*_INTS, value - 1, value + 1, 2 * value, -value, value // 2])


def _mutated(attr: Attribute, rng: random.Random, module: ModuleOp) -> Attribute | None:
    """An edge-case value of the same kind as ``attr``, or ``None``."""
    from xdsl.dialects.builtin import (
        AffineMapAttr,
        DenseArrayBase,
        DictionaryAttr,
        FloatAttr,
        IntegerAttr,
        StringAttr,
        SymbolRefAttr,
        i64,
    )

    if isinstance(attr, IntegerAttr):
        return IntegerAttr(_new_int(attr.value.data, rng), attr.type)
    if isinstance(attr, FloatAttr):
        return FloatAttr(rng.choice(_FLOATS), attr.type)
    if isinstance(attr, StringAttr):
        return StringAttr(rng.choice(_STRINGS))
    if isinstance(attr, SymbolRefAttr):
        names = [op.properties["sym_name"] for op in _ops(module)
                 if isinstance(op.properties.get("sym_name"), StringAttr)]
        return SymbolRefAttr(rng.choice(names)) if names else None
    if isinstance(attr, DenseArrayBase):
        values = [int(v) for v in attr.get_values()]
        roll = rng.random()
        if roll < 0.15 and values:
            values.pop(rng.randrange(len(values)))
        elif roll < 0.25:
            values.insert(rng.randrange(len(values) + 1), rng.choice((1, 2, 4)))
        elif values:
            k = rng.randrange(len(values))
            values[k] = _new_int(values[k], rng)
        return DenseArrayBase.from_list(i64, values)
    if isinstance(attr, AffineMapAttr):
        return _mutated_map(attr, rng)
    if isinstance(attr, DictionaryAttr):
        entries = dict(attr.data)
        if entries and rng.random() < 0.7:
            name = rng.choice(sorted(entries))
            new = _mutated(entries[name], rng, module)
            if new is None:
                return None
            entries[name] = new
        else:
            entries[rng.choice(_KNOB_NAMES)] = IntegerAttr(rng.choice(_INTS), i64)
        return DictionaryAttr(entries)
    return None


def _mutated_map(attr: Attribute, rng: random.Random) -> Attribute | None:
    """An affine access map with one result replaced: by a constant (in or just out of a
    typical extent), another dim, the result plus or times a constant, or swapped with
    another result."""
    from xdsl.dialects.builtin import AffineMapAttr
    from xdsl.ir.affine import AffineConstantExpr, AffineDimExpr, AffineMap

    assert isinstance(attr, AffineMapAttr)
    amap = attr.data
    results = list(amap.results)
    if not results:
        return None
    k = rng.randrange(len(results))
    roll = rng.random()
    if roll < 0.25:
        results[k] = AffineConstantExpr(rng.choice((0, 1, 3, 4, 7, 8, 31, 32, 255, 256, -1)))
    elif roll < 0.45 and amap.num_dims:
        results[k] = AffineDimExpr(rng.randrange(amap.num_dims))
    elif roll < 0.65:
        results[k] = results[k] + rng.choice((1, -1, 4, 32))
    elif roll < 0.8:
        results[k] = results[k] * rng.choice((2, 4, 0))
    elif len(results) > 1:
        j = rng.randrange(len(results))
        results[k], results[j] = results[j], results[k]
    else:
        return None
    return AffineMapAttr(AffineMap(amap.num_dims, amap.num_symbols, tuple(results)))


_SKIPPED = {"sym_name", "function_type", "sym_visibility", "arg_attrs", "res_attrs",
            "operandSegmentSizes", "resultSegmentSizes"}


def change_attribute(module: ModuleOp, rng: random.Random) -> bool:
    """One property or attribute of one op gets an edge value of its kind."""
    slots = [(op, where, name) for op in _ops(module)
             for where in ("properties", "attributes")
             for name in getattr(op, where) if name not in _SKIPPED]
    if not slots:
        return False
    op, where, name = rng.choice(slots)
    new = _mutated(getattr(op, where)[name], rng, module)
    if new is None:
        return False
    getattr(op, where)[name] = new
    return True


def add_attribute(module: ModuleOp, rng: random.Random) -> bool:
    """An attribute that passes read is added where they read it: ``unroll`` on a loop,
    ``llmopt.schedule`` on a kernel, ``llmopt.pad`` on a shared allocation, ``llmopt.layout``
    on a forall, with values in and out of range."""
    from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, StringAttr, i1, i64

    loops = [op for op in _ops(module) if op.name in ("scf.for", "loop.for")]
    kernels = [op for op in _ops(module)
               if op.name in ("tile.kernel", "kernel.func", "loop.kernel")]
    allocs = [op for op in _ops(module) if op.name == "tile.alloc"]
    foralls = [op for op in _ops(module) if op.name == "tile.forall"]
    choices: list[Callable[[], None]] = []
    if loops:
        def unroll() -> None:
            value = rng.choice((IntegerAttr(rng.choice((0, 1, 4, -1, 2**31)), i64),
                                IntegerAttr(1, i1), StringAttr("all")))
            rng.choice(loops).attributes["unroll"] = value
        choices.append(unroll)
    if kernels:
        def schedule() -> None:
            knobs = {name: IntegerAttr(rng.choice((0, 1, 2, 3, 4, 8, 16, 32, 64, 128, -1)), i64)
                     for name in rng.sample(_KNOB_NAMES, rng.randint(1, 4))}
            rng.choice(kernels).attributes["llmopt.schedule"] = DictionaryAttr(knobs)
        choices.append(schedule)
    if allocs:
        def pad() -> None:
            value = IntegerAttr(rng.choice((-1, 0, 1, 4, 1000)), i64)
            rng.choice(allocs).attributes["llmopt.pad"] = value
        choices.append(pad)
    if foralls:
        def layout() -> None:
            rng.choice(foralls).attributes["llmopt.layout"] = StringAttr("mma")
        choices.append(layout)
    if not choices:
        return False
    rng.choice(choices)()
    return True


# --- ops ----------------------------------------------------------------------------------------


def _movable(module: ModuleOp) -> list[Operation]:
    """Ops that sit in a block (not the module's own)."""
    return [op for op in _ops(module) if op.parent is not None]


def delete_terminator(module: ModuleOp, rng: random.Random) -> bool:
    """A block loses its terminator (``loop.yield``, ``scf.yield``, ``kernel.return`` …)."""
    from xdsl.traits import IsTerminator

    terminators = [op for op in _ops(module) if op.has_trait(IsTerminator)]
    if not terminators:
        return False
    op = rng.choice(terminators)
    op.detach()
    op.erase(safe_erase=False)
    return True


def duplicate_op(module: ModuleOp, rng: random.Random) -> bool:
    """An op is repeated right after itself (its copy's results unused)."""
    ops = _movable(module)
    if not ops:
        return False
    op = rng.choice(ops)
    assert op.parent is not None
    op.parent.insert_op_after(op.clone(), op)
    return True


def _uses_results_of(op: Operation, producer: Operation) -> bool:
    """Whether ``op`` or an op nested in it uses a result of ``producer``."""
    results = set(producer.results)
    return any(operand in results for inner in op.walk() for operand in inner.operands)


def reorder_ops(module: ModuleOp, rng: random.Random) -> bool:
    """Two neighbouring ops that do not depend on each other's results trade places (the
    order of memory effects changes: a store after a load of the same place, a barrier)."""
    from xdsl.traits import IsTerminator

    pairs = [op for op in _movable(module) if op.next_op is not None
             and not op.next_op.has_trait(IsTerminator)
             and not _uses_results_of(op.next_op, op)]
    if not pairs:
        return False
    op = rng.choice(pairs)
    following = op.next_op
    assert following is not None and op.parent is not None
    block = op.parent
    following.detach()
    block.insert_op_before(following, op)
    return True


# --- sibling ops (text) -------------------------------------------------------------------------

SIBLINGS: tuple[tuple[str, ...], ...] = (
    ("arith.addf", "arith.subf", "arith.mulf", "arith.divf", "arith.maximumf",
     "arith.minimumf", "arith.maxnumf", "arith.minnumf"),
    ("arith.addi", "arith.subi", "arith.muli", "arith.divsi", "arith.divui", "arith.remsi",
     "arith.remui", "arith.andi", "arith.ori", "arith.xori", "arith.maxsi", "arith.minsi",
     "arith.maxui", "arith.minui", "arith.shli", "arith.shrsi", "arith.floordivsi",
     "arith.ceildivsi"),
    ("arith.extf", "arith.truncf"), ("arith.sitofp", "arith.uitofp"),
    ("arith.fptosi", "arith.fptoui"), ("arith.extsi", "arith.extui", "arith.trunci"),
    ("math.exp", "math.log", "math.sqrt", "math.rsqrt", "math.tanh", "math.absf",
     "math.sin", "math.cos", "math.exp2", "math.log2", "math.erf", "arith.negf"),
    ("kernel.thread_id", "kernel.block_id", "kernel.block_dim", "kernel.grid_dim"),
    ("kernel.shared", "kernel.local"), ("kernel.copy", "kernel.async_copy"),
    ("tile.copy", "tile.async_copy"), ("tile.yield", "loop.yield"),
    ("loop.reduce", "tile.coop_reduce"), ("kernel.async_commit", "tile.async_commit",
                                          "kernel.barrier"),
    ("kernel.async_wait", "tile.async_wait"),
)
"""Families of ops that share a syntax: replacing one by another keeps the text parseable
(the types or the context may then be wrong, which the verifiers say)."""

_SIBLING_OF = {name: family for family in SIBLINGS for name in family}
_OP_TOKEN = re.compile(r"(?<![\w.\"])([a-z]+\.[a-z_0-9]+)(?=[\s\"])")


def sibling_op(text: str, rng: random.Random, corpus: Sequence[object]) -> str | None:
    """Replace one op by another of its family (:data:`SIBLINGS`)."""
    found = [m for m in _OP_TOKEN.finditer(text) if m.group(1) in _SIBLING_OF]
    if not found:
        return None
    match = rng.choice(found)
    family = _SIBLING_OF[match.group(1)]
    new = rng.choice([name for name in family if name != match.group(1)])
    mutant = text[: match.start(1)] + new + text[match.end(1):]
    if _parse(mutant) is None and _parse(text) is not None:
        return None  # the sibling's syntax differs after all (a type it does not print)
    return mutant


IR_MUTATORS: dict[str, Callable[[str, random.Random, Sequence[object]], str | None]] = {
    "swap_ssa_names": _ir_mutator(swap_ssa_names),
    "replace_operand": _ir_mutator(replace_operand),
    "change_attribute": _ir_mutator(change_attribute),
    "add_attribute": _ir_mutator(add_attribute),
    "delete_terminator": _ir_mutator(delete_terminator),
    "duplicate_op": _ir_mutator(duplicate_op),
    "reorder_ops": _ir_mutator(reorder_ops),
    "sibling_op": sibling_op,
}
"""The grammar-aware mutations, by name (see the module docstring)."""


# --- pipelines ----------------------------------------------------------------------------------


def default_pipeline() -> list[str]:
    """The elements of ``lower-to-cuda`` with its default options."""
    from llmopt import registry

    return [text.strip() for text, _ in
            registry._split_pipeline(registry.expand_pipeline("lower-to-cuda"))]


_OPTION_VALUES: tuple[str, ...] = (
    "0", "1", "-1", "2", "3", "4", "7", "8", "16", "31", "32", "64", "128", "100000",
    "2147483648", "9223372036854775807", "true", "false", "1.5", '"abc"', "sm_1", "sm_75",
    "sm_80", "sm_90", "foo",
)


def _options_of(name: str) -> list[str]:
    """The option names of pass ``name`` (its dataclass fields), if it is llmopt's."""
    import dataclasses

    from llmopt import registry

    factory = registry.PASSES.get(name)
    if factory is None:
        return []
    cls = factory()
    return [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else []


def _with_option(element: str, option: str, value: str) -> str:
    """``element`` (``name`` or ``name{a=1 b=2}``) with ``option=value`` set."""
    name, _, rest = element.partition("{")
    pairs = [p for p in re.split(r"\s+", rest.rstrip("}").strip()) if p]
    pairs = [p for p in pairs if p.split("=")[0] != option] + [f"{option}={value}"]
    return f"{name}{{{' '.join(pairs)}}}"


def _option_value(name: str, option: str, rng: random.Random) -> str:
    """A value for ``option`` of pass ``name``: one at or just beyond its range (from
    :mod:`llmopt.options`) half of the time, an edge value of any type otherwise."""
    from llmopt.options import OPTIONS

    spec = OPTIONS.get(name, {}).get(option)
    if spec is not None and rng.random() < 0.5:
        allowed = spec.range
        pool = list(allowed.choices) or [allowed.low, allowed.low - 1, min(allowed.high, 2**40),
                                         min(allowed.high, 2**40) + 1]
        return str(rng.choice([*pool, 0]))
    return rng.choice(_OPTION_VALUES)


def mutate_pipeline(rng: random.Random, elements: Sequence[str] | None = None) -> list[str]:
    """A changed copy of the pipeline ``elements`` (default :func:`default_pipeline`): one
    or two of an option set (in, at or beyond its range, or of the wrong type), a pass
    dropped, repeated or swapped with its neighbour, or the pipeline cut short."""
    out = list(elements if elements is not None else default_pipeline())
    for _ in range(rng.choice((1, 1, 2))):
        roll = rng.random()
        k = rng.randrange(len(out))
        name = out[k].partition("{")[0]
        if roll < 0.6 and _options_of(name):
            option = rng.choice(_options_of(name))
            out[k] = _with_option(out[k], option, _option_value(name, option, rng))
        elif roll < 0.7 and len(out) > 1:
            del out[k]
        elif roll < 0.8:
            out.insert(k, out[k])
        elif roll < 0.9 and k + 1 < len(out):
            out[k], out[k + 1] = out[k + 1], out[k]
        else:
            out = out[: max(k, 1)]
    return out

