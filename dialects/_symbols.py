"""Symbolic extents: a sequence length (or any named size) bound at function entry.

A program that serves every length up to a maximum has ``?`` extents in its types and
declares each size it depends on as an ``index`` argument of the function::

    func.func @forward(%w: tensor<16xf32> {llmopt.param = "w"},
                       %x: tensor<1x?x16xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                       %seq: index {llmopt.symbol = "seq", llmopt.max = 2048})

* ``llmopt.symbol = "seq"`` declares the argument as the symbol ``seq``; ``llmopt.max``
  (required) and ``llmopt.min`` (optional, default 1) bound its value.
* ``llmopt.dynamic = ["seq", ...]`` on a tensor argument names, in order, the symbol each
  ``?`` of its type equals: that is how a caller's shapes bind the symbols, and why a
  mismatching shape is an error that names the argument.

Inside the body, ``?`` extents follow from the operands (an ``add`` of two ``1x?x16``
tensors is ``1x?x16``); an op whose result extent cannot follow from its operand types (a
reshape, a broadcast to a new length, an ``arange``) takes the extent as an ``index``
operand, computed from the symbol arguments by ``arith`` ops (``%n = arith.muli %seq, %c8``).
Attributes hold only what is static.

This module holds the names of those attributes, the checks of a function's declarations
(:func:`verify_function`, called wherever IR is verified as a whole) and the binding of
concrete arguments to symbol values (:func:`bind_arguments`, used by the interpreters).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    DictionaryAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, Operation
from xdsl.utils.exceptions import VerifyException

SYMBOL_ATTR = "llmopt.symbol"
"""Argument attribute declaring an ``index`` argument as a named symbolic extent."""
MAX_ATTR = "llmopt.max"
"""Argument attribute: the largest value a symbol takes (required)."""
MIN_ATTR = "llmopt.min"
"""Argument attribute: the smallest value a symbol takes (default 1)."""
INPUT_ATTR = "llmopt.input"
"""Argument attribute naming the user input an argument is bound to."""
DYNAMIC_ATTR = "llmopt.dynamic"
"""Argument attribute of a tensor with ``?`` extents: the symbol each ``?`` equals, in order."""

DYNAMIC = DYNAMIC_INDEX
"""The extent xDSL's types report for a ``?`` dim."""


class SymbolError(VerifyException):
    """A function's symbol declarations are inconsistent; ``op`` is the function."""

    def __init__(self, op: Operation, message: str) -> None:
        super().__init__(message)
        self.op = op


class BindError(Exception):
    """Concrete arguments do not fit a symbolic function (a shape that does not match, a
    length outside the declared bounds); the message names the argument and the bound."""


def is_dynamic(extent: int) -> bool:
    """Whether ``extent`` is the ``?`` of a type."""
    return extent == DYNAMIC


def shape_of_type(typ: Attribute) -> tuple[int, ...]:
    """The extents of a tensor or memref type (``?`` as :data:`DYNAMIC`); ``()`` otherwise."""
    if isinstance(typ, TensorType | MemRefType):
        return tuple(int(d) for d in typ.get_shape())
    return ()


def dynamic_dims(typ: Attribute) -> tuple[int, ...]:
    """The positions of the ``?`` dims of ``typ``."""
    return tuple(k for k, e in enumerate(shape_of_type(typ)) if is_dynamic(e))


def has_dynamic(typ: Attribute) -> bool:
    """Whether ``typ`` has a ``?`` extent."""
    return bool(dynamic_dims(typ))


def shape_text(shape: Sequence[int]) -> str:
    """``[1, ?, 16]``: a shape for messages (identical to ``str(list(shape))`` when static)."""
    return "[" + ", ".join("?" if is_dynamic(e) else str(e) for e in shape) + "]"


@dataclass(frozen=True)
class Symbol:
    """A symbol a function declares: its name, argument position and bounds."""

    name: str
    arg: int
    min: int
    max: int


_PARSED: dict[int, tuple[ArrayAttr, list[dict[str, Attribute]], dict[str, Symbol]]] = {}
"""``arg_attrs`` attributes read before, by identity (kept alive here, so an id is never
reused while its entry exists): verifiers ask for a function's symbols once per op, and a
whole model's function has hundreds of arguments. Attributes are immutable, so an entry is
valid as long as the function still holds the same attribute object."""


def _parsed(func: Operation) -> tuple[list[dict[str, Attribute]], dict[str, Symbol]] | None:
    attrs = func.properties.get("arg_attrs") or func.attributes.get("arg_attrs")
    if not isinstance(attrs, ArrayAttr):
        return None
    entry = _PARSED.get(id(attrs))
    if entry is None or entry[0] is not attrs:
        if len(_PARSED) > 256:
            _PARSED.clear()
        dicts = [dict(a.data) if isinstance(a, DictionaryAttr) else {} for a in attrs.data]
        entry = (attrs, dicts, _symbols_of(dicts))
        _PARSED[id(attrs)] = entry
    return entry[1], entry[2]


def _arg_attrs(func: Operation) -> list[dict[str, Attribute]]:
    """The attribute dictionary of each argument of ``func`` (read-only: shared)."""
    parsed = _parsed(func)
    if parsed is None:
        types = func.properties.get("function_type")
        count = len(func.regions[0].block.args) if func.regions and func.regions[0].blocks \
            else 0
        count = len(types.inputs.data) if types is not None else count  # type: ignore[attr-defined]
        return [{} for _ in range(count)]
    return parsed[0]


def _int_attr(attr: Attribute | None) -> int | None:
    if isinstance(attr, IntegerAttr):
        return int(attr.value.data)
    return None


def function_symbols(func: Operation) -> dict[str, Symbol]:
    """The symbols ``func`` (a ``func.func``) declares, by name (unverified: entries that do
    not parse are skipped; :func:`verify_function` reports them)."""
    parsed = _parsed(func)
    return {} if parsed is None else dict(parsed[1])


def _symbols_of(arg_attrs: list[dict[str, Attribute]]) -> dict[str, Symbol]:
    out: dict[str, Symbol] = {}
    for k, attrs in enumerate(arg_attrs):
        name = attrs.get(SYMBOL_ATTR)
        if not isinstance(name, StringAttr) or name.data in out:
            continue
        high = _int_attr(attrs.get(MAX_ATTR))
        low = _int_attr(attrs.get(MIN_ATTR))
        out[name.data] = Symbol(name.data, k, 1 if low is None else low,
                                0 if high is None else high)
    return out


def argument_dynamic(func: Operation, k: int) -> tuple[str, ...] | None:
    """The ``llmopt.dynamic`` names of argument ``k`` of ``func``, if it has them."""
    attrs = _arg_attrs(func)
    if k >= len(attrs):
        return None
    names = attrs[k].get(DYNAMIC_ATTR)
    if not isinstance(names, ArrayAttr):
        return None
    return tuple(n.data if isinstance(n, StringAttr) else "" for n in names.data)


def is_symbolic(func: Operation) -> bool:
    """Whether ``func`` declares a symbol."""
    return any(SYMBOL_ATTR in a for a in _arg_attrs(func))


def argument_name(func: Operation, k: int) -> str:
    """How messages name argument ``k``: its ``llmopt.input``/``llmopt.param`` name, the
    SSA name, or ``#k``."""
    attrs = _arg_attrs(func)
    entries = attrs[k] if k < len(attrs) else {}
    for key in (INPUT_ATTR, "llmopt.param", SYMBOL_ATTR):
        value = entries.get(key)
        if isinstance(value, StringAttr):
            return f"'{value.data}'"
    if func.regions and func.regions[0].blocks:
        arg = func.regions[0].block.args[k]
        if arg.name_hint:
            return f"%{arg.name_hint}"
    return f"#{k}"


def verify_function(func: Operation) -> None:
    """Check the symbol declarations and bindings of a ``func.func``.

    Raises :class:`SymbolError` (located at the function) for: a symbol argument that is not
    ``index``, a name declared twice, a missing or non-positive ``llmopt.max``, ``llmopt.min``
    outside ``[1, max]``; a tensor argument with ``?`` extents whose ``llmopt.dynamic`` is
    missing, of the wrong length, or names an undeclared symbol; ``llmopt.dynamic`` on an
    argument without ``?``; ``?`` extents in a function that declares no symbol.
    """
    types = func.properties["function_type"]
    inputs = list(types.inputs.data)  # type: ignore[attr-defined]
    outputs = list(types.outputs.data)  # type: ignore[attr-defined]
    attrs = _arg_attrs(func)
    declared: dict[str, int] = {}
    for k, entries in enumerate(attrs):
        if SYMBOL_ATTR not in entries:
            continue
        what = f"argument #{k}"
        name = entries[SYMBOL_ATTR]
        if not isinstance(name, StringAttr) or not name.data:
            raise SymbolError(func, f"{what}: {SYMBOL_ATTR} must be a non-empty string")
        what = f"symbol '{name.data}' (argument #{k})"
        if k < len(inputs) and not isinstance(inputs[k], IndexType):
            raise SymbolError(func, f"{what} must have type index, got {inputs[k]}")
        if name.data in declared:
            raise SymbolError(func, f"{what} is already declared by argument "
                              f"#{declared[name.data]}")
        declared[name.data] = k
        high = _int_attr(entries.get(MAX_ATTR))
        if high is None or high < 1:
            raise SymbolError(func, f"{what} needs {MAX_ATTR}, a positive integer (the "
                              "largest value it takes)")
        low = _int_attr(entries.get(MIN_ATTR)) if MIN_ATTR in entries else 1
        if low is None or not 1 <= low <= high:
            raise SymbolError(func, f"{what}: {MIN_ATTR} must be an integer in [1, {high}]")
    for k, typ in enumerate(inputs):
        entries = attrs[k] if k < len(attrs) else {}
        dims = dynamic_dims(typ)
        names = entries.get(DYNAMIC_ATTR)
        what = f"argument {argument_name(func, k)} of type {typ}"
        if names is None:
            if dims:
                raise SymbolError(func, f"{what} needs {DYNAMIC_ATTR}: the symbol each ? "
                                  "extent equals")
            continue
        if not dims:
            raise SymbolError(func, f"{what} has {DYNAMIC_ATTR} but no ? extent")
        if not isinstance(names, ArrayAttr) or not all(
                isinstance(n, StringAttr) for n in names.data):
            raise SymbolError(func, f"{what}: {DYNAMIC_ATTR} must be a list of symbol names")
        if len(names.data) != len(dims):
            raise SymbolError(func, f"{what}: {DYNAMIC_ATTR} names {len(names.data)} "
                              f"symbol(s) for {len(dims)} ? extent(s)")
        for n in names.data:
            assert isinstance(n, StringAttr)
            if n.data not in declared:
                known = ", ".join(sorted(declared)) or "none"
                raise SymbolError(func, f"{what}: {DYNAMIC_ATTR} names '{n.data}', which is "
                                  f"not a declared symbol (declared: {known})")
    if not declared and any(has_dynamic(t) for t in [*inputs, *outputs]):
        raise SymbolError(func, f"the function has ? extents but declares no symbol (an index "
                          f"argument with {SYMBOL_ATTR} and {MAX_ATTR})")
    from llmopt.dialects._updates import verify_updates

    verify_updates(func)


def verify_module(module: ModuleOp) -> None:
    """:func:`verify_function` on every ``func.func`` of ``module`` (nested ones included)."""
    for op in module.walk():
        if op.name == "func.func":
            verify_function(op)


def enclosing_function(op: Operation) -> Operation | None:
    """The innermost ``func.func`` around ``op``."""
    parent = op.parent_op()
    while parent is not None and parent.name != "func.func":
        parent = parent.parent_op()
    return parent


def check_dynamic_operands(op: Operation) -> None:
    """For an op with ``?`` extents: its enclosing function (if any) must declare a symbol,
    and a ``?``-typed operand that is an argument of that function must name declared
    symbols. Cheap (no walk of the function body): ops call it from their verifiers."""
    types = [v.type for v in (*op.operands, *op.results)]
    if not any(has_dynamic(t) for t in types):
        return
    func = enclosing_function(op)
    if func is None:
        return
    symbols = function_symbols(func)
    if not symbols:
        raise VerifyException("? extents need a symbol declared by the enclosing function "
                              f"(an index argument with {SYMBOL_ATTR} and {MAX_ATTR})")
    block = func.regions[0].block if func.regions and func.regions[0].blocks else None
    for value in op.operands:
        if block is None or not has_dynamic(value.type) or value not in block.args:
            continue
        k = block.args.index(value)  # type: ignore[arg-type]
        names = argument_dynamic(func, k) or ()
        if len(names) != len(dynamic_dims(value.type)) or any(n not in symbols for n in names):
            raise VerifyException(
                f"function argument {argument_name(func, k)} has ? extents that "
                f"{DYNAMIC_ATTR} does not bind to declared symbols"
            )


def index_operand_count(result: Attribute) -> int:
    """The number of ``?`` extents of ``result``: how many ``index`` operands an op whose
    result type is given (reshape, expand, fills) takes."""
    return len(dynamic_dims(result))


def with_extents(typ: Attribute, extents: Sequence[int]) -> tuple[int, ...]:
    """The shape of ``typ`` with its ``?`` extents replaced, in order, by ``extents``."""
    values = iter(extents)
    shape = tuple(int(next(values)) if is_dynamic(e) else e for e in shape_of_type(typ))
    return shape


# --- binding concrete arguments -------------------------------------------------------------------


@dataclass(frozen=True)
class ArgumentShape:
    """What :class:`Binder` checks of one tensor argument: its name in messages, its type's
    text, its extents (``DYNAMIC`` for ``?``) and the symbol each ``?`` names."""

    what: str
    type_text: str
    shape: tuple[int, ...]
    names: tuple[str, ...]


@dataclass(frozen=True)
class Binder:
    """The binding of concrete arguments to a function's symbols, read from the function
    once (:meth:`of`) so that each call (:meth:`bind`) is plain Python: a program called
    for every token must not walk its IR's attributes per call."""

    count: int
    symbols: dict[str, Symbol]
    tensors: dict[int, ArgumentShape]
    positions: frozenset[int]
    """The symbol arguments' positions."""

    @staticmethod
    def of(func: Operation) -> Binder:
        types = list(func.properties["function_type"].inputs.data)  # type: ignore[attr-defined]
        symbols = function_symbols(func)
        positions = frozenset(s.arg for s in symbols.values())
        tensors = {
            k: ArgumentShape(f"input {argument_name(func, k)}", str(typ), shape_of_type(typ),
                             tuple(argument_dynamic(func, k) or ()))
            for k, typ in enumerate(types)
            if k not in positions and isinstance(typ, TensorType | MemRefType)
        }
        return Binder(len(types), symbols, tensors, positions)

    def bind(self, inputs: Sequence[object]) -> tuple[list[object], dict[str, int]]:
        """The full argument list for ``inputs``, and the symbol values (see
        :func:`bind_arguments`)."""
        symbols, positions = self.symbols, self.positions
        if len(inputs) == self.count - len(positions) and positions:
            it = iter(inputs)
            full: list[object] = [None if k in positions else next(it)
                                  for k in range(self.count)]
        elif len(inputs) == self.count:
            full = list(inputs)
        else:
            expected = f"{self.count}"
            if positions:
                expected += f" (or {self.count - len(positions)} without the symbols)"
            raise BindError(f"the function takes {expected} arguments, {len(inputs)} given")
        values: dict[str, int] = {}
        source: dict[str, str] = {}
        for k, arg in self.tensors.items():
            shape = getattr(full[k], "shape", None)
            if shape is None:
                continue
            self._bind_shape(arg, tuple(int(e) for e in shape), values, source)
        for name, sym in symbols.items():
            given = full[sym.arg]
            if given is None:
                if name not in values:
                    raise BindError(f"symbol '{name}' is not bound: no input has a ? extent "
                                    "that names it, so pass its value")
                full[sym.arg] = values[name]
                continue
            value = int(given)  # type: ignore[call-overload]
            if not sym.min <= value <= sym.max:
                raise BindError(f"symbol '{name}' is {value}, outside its bounds [{sym.min}, "
                                f"{sym.max}]")
            if name in values and values[name] != value:
                raise BindError(f"symbol '{name}' is passed as {value}, but {source[name]} is "
                                f"{values[name]}")
            values[name] = value
            full[sym.arg] = value
        return full, values

    def _bind_shape(self, arg: ArgumentShape, shape: tuple[int, ...], values: dict[str, int],
                    source: dict[str, str]) -> None:
        """Check ``shape`` against ``arg`` and record the symbols its ``?`` extents bind."""
        what = arg.what
        if len(shape) != len(arg.shape):
            raise BindError(f"{what} has shape {list(shape)}, the function takes "
                            f"{arg.type_text}")
        names = iter(arg.names)
        for d, (got, want) in enumerate(zip(shape, arg.shape, strict=True)):
            if not is_dynamic(want):
                if got != want:
                    raise BindError(f"{what} has shape {list(shape)}, the function takes "
                                    f"{arg.type_text} (dim {d} must be {want})")
                continue
            name = next(names, None)
            if name is None or name not in self.symbols:
                raise BindError(f"{what}: dim {d} is ? but names no declared symbol")
            sym = self.symbols[name]
            here = f"{what} dim {d}"
            if not sym.min <= got <= sym.max:
                raise BindError(f"{here} is {got}, outside [{sym.min}, {sym.max}], the bounds "
                                f"of symbol '{name}'")
            if name in values and values[name] != got:
                raise BindError(f"{here} is {got}, but {source[name]} binds symbol '{name}' "
                                f"to {values[name]}")
            values.setdefault(name, got)
            source.setdefault(name, here)


def bind_arguments(func: Operation, inputs: Sequence[object]) -> tuple[list[object],
                                                                       dict[str, int]]:
    """The full argument list of ``func`` for concrete ``inputs``, and the symbol values.

    ``inputs`` holds either every argument or every argument but the symbols (the symbols
    are then taken from the shapes). Each ``?`` of a tensor argument binds the symbol that
    ``llmopt.dynamic`` names to the input's extent there; all bindings of one symbol must
    agree, lie within its ``[min, max]``, and match an explicitly passed value. A static
    extent must match exactly. Raises :class:`BindError` naming the argument and the bound.
    Callers that bind many calls of one function keep its :class:`Binder` instead.
    """
    return Binder.of(func).bind(inputs)


__all__ = [
    "DYNAMIC", "DYNAMIC_ATTR", "INPUT_ATTR", "MAX_ATTR", "MIN_ATTR", "SYMBOL_ATTR",
    "ArgumentShape", "BindError",
    "Binder", "Symbol",
    "SymbolError", "argument_dynamic", "argument_name", "bind_arguments",
    "check_dynamic_operands", "dynamic_dims", "enclosing_function", "function_symbols",
    "has_dynamic", "index_operand_count", "is_dynamic", "is_symbolic", "shape_of_type",
    "shape_text", "verify_function", "verify_module", "with_extents",
]  # fmt: skip
