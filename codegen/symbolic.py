"""The host side of a symbolic program's call, without a GPU: lengths, grids, buffer sizes.

A symbolic program (a host ``func.func`` that declares symbols, ``{llmopt.symbol = "seq",
llmopt.max = 2048}``) is compiled once; what changes from call to call is computed here from
the IR, never re-derived:

* :meth:`SymbolicHost.bind` reads each symbol from the inputs' shapes
  (:class:`~llmopt.dialects._symbols.Binder`): a length outside the symbol's bounds,
  or a shape that does not match the symbol or a static extent, is an
  :class:`~llmopt.codegen.executor.ExecutorError` naming the argument and the bound;
* :meth:`SymbolicHost.evaluate` runs the host function's ``index`` arithmetic (the
  ``arith`` ops that compute grids and ``memref.alloc`` sizes from the symbols) on the host
  for those values, and returns every launch's grid and every allocation's shape; a grid
  above the maximum its launch declares (``grid [%grid max 8, 1, 1]``) is an error naming
  the kernel, so a kernel never runs with more blocks than it was compiled for;
* :meth:`SymbolicHost.max_shapes`: each allocation's shape at the symbols' maxima, what the
  executor allocates once (every extent is a non-decreasing function of the lengths:
  products, sums and ceiling divisions of them and positive constants).

The host function may choose between launches with ``scf.if`` on ``arith.cmpi`` of that
arithmetic (the kernel variants of a length bucket, see ``length-buckets``): each launch and
allocation carries the conditions it sits under (:func:`host_ops`); a call runs the launches
whose conditions hold (:attr:`SymbolicCall.active`), and an allocation under ``%seq <= c``
is sized for at most ``c``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr
from xdsl.ir import Block, Operation, SSAValue

from llmopt.dialects import kernel
from llmopt.dialects._symbols import Binder, BindError, function_symbols, shape_of_type

if TYPE_CHECKING:
    from llmopt.codegen.executor import HostPlan

__all__ = ["CallLayout", "Guard", "SymbolicCall", "SymbolicHost", "host_ops", "is_index_arith",
           "layout_call"]


def _ceildiv(a: int, b: int) -> int:
    return -(-a // b)


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


_BINARY: dict[str, Callable[[int, int], int]] = {
    "arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b,
    "arith.muli": lambda a, b: a * b, "arith.divui": lambda a, b: a // b,
    "arith.divsi": _trunc_div, "arith.floordivsi": lambda a, b: a // b,
    "arith.ceildivui": _ceildiv, "arith.ceildivsi": _ceildiv,
    "arith.remui": lambda a, b: a % b, "arith.remsi": lambda a, b: a - b * _trunc_div(a, b),
    "arith.minui": min, "arith.minsi": min, "arith.maxui": max, "arith.maxsi": max,
}  # fmt: skip


_COMPARE: dict[int, Callable[[int, int], bool]] = {
    0: lambda a, b: a == b, 1: lambda a, b: a != b,
    2: lambda a, b: a < b, 3: lambda a, b: a <= b, 4: lambda a, b: a > b, 5: lambda a, b: a >= b,
    6: lambda a, b: a < b, 7: lambda a, b: a <= b, 8: lambda a, b: a > b, 9: lambda a, b: a >= b,
}  # fmt: skip
"""``arith.cmpi`` predicates (eq, ne, slt, sle, sgt, sge, ult, ule, ugt, uge) on indices,
which are never negative here, so signed and unsigned agree."""

_AT_MOST = {3: 0, 7: 0, 2: 1, 6: 1}
"""Predicates of ``symbol <= c`` (0) and ``symbol < c`` (1): the bound a branch puts on it."""


def is_index_arith(op: Operation) -> bool:
    """Whether ``op`` is host ``index`` arithmetic that :class:`SymbolicHost` evaluates (a
    comparison of indices gives 0 or 1)."""
    if isinstance(op, arith.CmpiOp):
        return isinstance(op.lhs.type, IndexType)
    return op.name in _BINARY and isinstance(op.results[0].type, IndexType)


def _evaluate(op: Operation, a: int, b: int) -> int:
    if isinstance(op, arith.CmpiOp):
        return int(_COMPARE[op.predicate.value.data](a, b))
    return _BINARY[op.name](a, b)


Guard = tuple[tuple[SSAValue, bool], ...]
"""The ``scf.if`` conditions an op of the host function sits under, and the value each must
have for the op to run."""


def host_ops(block: Block, guard: Guard = ()) -> Iterator[tuple[Operation, Guard]]:
    """The ops of a host function's ``block`` in order, each with its :data:`Guard`; an
    ``scf.if`` comes before the ops of its regions (then before else)."""
    for op in block.ops:
        yield op, guard
        if isinstance(op, scf.IfOp):
            for region, taken in ((op.true_region, True), (op.false_region, False)):
                if region.blocks:
                    yield from host_ops(region.block, (*guard, (op.cond, taken)))


BINDINGS_REMEMBERED = 4096
"""Bindings a :class:`SymbolicHost` remembers (one per length seen: a 2048-token maximum
fits whole)."""


def binding_key(inputs: Sequence[object]) -> tuple[object, ...] | None:
    """What a binding of ``inputs`` depends on: each input's shape (an array of at least
    one dimension), its value (a Python ``int``) or ``None``; ``None`` when an input is
    anything else (a 0-d array, a NumPy scalar: their values would hide behind an empty
    shape)."""
    key: list[object] = []
    for value in inputs:
        shape = getattr(value, "shape", None)
        if value is None or (type(value) is int):
            key.append(value)
        elif shape is not None and len(shape) > 0:
            # a tuple already (torch.Size and NumPy's shapes are tuples of ints) is its own key
            key.append(shape if isinstance(shape, tuple) else tuple(int(e) for e in shape))
        else:
            return None
    return tuple(key)


@dataclass(frozen=True)
class SymbolicCall:
    """One call's host-side values: the symbols, each launch's grid and each allocation's
    shape (in the host function's order)."""

    symbols: dict[str, int]
    grids: tuple[tuple[int, int, int], ...]
    shapes: tuple[tuple[int, ...], ...]
    active: tuple[bool, ...] = ()
    """Per launch: whether its ``scf.if`` conditions hold (a launch that does not run has
    grid ``(1, 1, 1)``; an allocation under conditions that fail has extents 0)."""


class SymbolicHost:
    """The symbols, index arithmetic, launches and allocations of a symbolic host function."""

    def __init__(self, host: func.FuncOp) -> None:
        from llmopt.codegen.executor import ExecutorError

        self.host = host
        self.binder = Binder.of(host)
        self._bound: dict[tuple[object, ...], dict[str, int]] = {}
        self.symbols = function_symbols(host)
        if not self.symbols:
            raise ExecutorError(f"@{host.sym_name.data} declares no symbol")
        self.allocs: list[tuple[memref.AllocOp, Guard]] = []
        self.launches: list[tuple[kernel.LaunchOp, Guard]] = []
        self.ops = list(host_ops(host.body.block))
        for op, guard in self.ops:
            if isinstance(op, memref.AllocOp):
                self.allocs.append((op, guard))
            elif isinstance(op, kernel.LaunchOp):
                self.launches.append((op, guard))

    def bind(self, inputs: Sequence[object]) -> dict[str, int]:
        """The symbols' values for the call's ``inputs`` (every argument but the symbols, or
        all of them); raises ``ExecutorError`` naming the argument and the bound.

        A binding depends on the inputs' shapes and integer values alone, so it is
        remembered per :func:`binding_key` (a call's host time matters at one token): a
        length seen before skips the checks. A call that fails them is never remembered."""
        from llmopt.codegen.executor import ExecutorError

        key = binding_key(inputs)
        known = self._bound.get(key) if key is not None else None
        if known is not None:
            return dict(known)
        try:
            symbols = self.binder.bind(inputs)[1]
        except BindError as err:
            raise ExecutorError(str(err)) from None
        if key is not None and len(self._bound) < BINDINGS_REMEMBERED:
            self._bound[key] = dict(symbols)
        return symbols

    def _values(self, symbols: Mapping[str, int]) -> dict[SSAValue, int]:
        from llmopt.codegen.executor import ExecutorError

        args = self.host.body.block.args
        values: dict[SSAValue, int] = {args[s.arg]: int(symbols[name])
                                       for name, s in self.symbols.items()}
        for op, _ in self.ops:
            if isinstance(op, arith.ConstantOp) and isinstance(op.result.type, IndexType):
                assert isinstance(op.value, IntegerAttr)
                values[op.result] = op.value.value.data
            elif is_index_arith(op):
                try:
                    a, b = (values[v] for v in op.operands)
                except KeyError:
                    raise ExecutorError(f"'{op.name}': an operand is not index arithmetic "
                                        "of the symbols") from None
                values[op.results[0]] = _evaluate(op, a, b)
        return values

    @staticmethod
    def _holds(guard: Guard, values: Mapping[SSAValue, int]) -> bool:
        from llmopt.codegen.executor import ExecutorError

        for cond, taken in guard:
            if cond not in values:
                raise ExecutorError("an scf.if condition is not index arithmetic of the "
                                    "symbols")
            if bool(values[cond]) != taken:
                return False
        return True

    def evaluate(self, symbols: Mapping[str, int]) -> SymbolicCall:
        """Every launch's grid and every allocation's shape at ``symbols``."""
        from llmopt.codegen.executor import ExecutorError

        values = self._values(symbols)

        def value(v: SSAValue, what: str) -> int:
            if v not in values:
                raise ExecutorError(f"{what} is not index arithmetic of the symbols")
            return values[v]

        grids: list[tuple[int, int, int]] = []
        active: list[bool] = []
        for launch, guard in self.launches:
            active.append(self._holds(guard, values))
            if not active[-1]:
                grids.append((1, 1, 1))
                continue
            grid = launch.grid_shape
            name = launch.kernel.root_reference.data
            x = grid[0]
            if launch.grid_size is not None:
                x = value(launch.grid_size, f"the grid of @{name}")
                if not 1 <= x <= grid[0]:
                    raise ExecutorError(f"kernel.launch @{name}: grid x is {x} at "
                                        f"{dict(symbols)}, outside [1, {grid[0]}], the "
                                        "maximum it was compiled for")
            grids.append((x, grid[1], grid[2]))
        shapes = [self._shape(alloc, values) if self._holds(guard, values)
                  else tuple(0 for _ in shape_of_type(alloc.memref.type))
                  for alloc, guard in self.allocs]
        return SymbolicCall(dict(symbols), tuple(grids), tuple(shapes), tuple(active))

    @staticmethod
    def _shape(alloc: memref.AllocOp, values: Mapping[SSAValue, int]) -> tuple[int, ...]:
        from llmopt.codegen.executor import ExecutorError

        sizes = iter(alloc.dynamic_sizes)
        shape = []
        for e in shape_of_type(alloc.memref.type):
            if e >= 0:
                shape.append(e)
                continue
            size = next(sizes)
            if size not in values:
                raise ExecutorError("an allocation's size is not index arithmetic of the "
                                    "symbols")
            shape.append(values[size])
        return tuple(shape)

    def _bounded(self, guard: Guard) -> dict[str, int]:
        """The symbols' maxima under ``guard``: a condition ``%sym <= c`` (or ``< c``) that
        must hold lowers ``%sym``'s to ``c`` (``c - 1``)."""
        bounds = {n: s.max for n, s in self.symbols.items()}
        args = self.host.body.block.args
        by_arg = {args[s.arg]: n for n, s in self.symbols.items()}
        for cond, taken in guard:
            op = cond.owner
            if not (taken and isinstance(op, arith.CmpiOp) and op.lhs in by_arg
                    and isinstance(op.rhs.owner, arith.ConstantOp)):
                continue
            strict = _AT_MOST.get(op.predicate.value.data)
            rhs = op.rhs.owner.value
            if strict is not None and isinstance(rhs, IntegerAttr):
                name = by_arg[op.lhs]
                low = self.symbols[name].min
                bounds[name] = max(low, min(bounds[name], rhs.value.data - strict))
        return bounds

    def max_shapes(self) -> tuple[tuple[int, ...], ...]:
        """Each allocation's shape at the largest symbols its conditions allow (what is
        allocated once)."""
        values: dict[tuple[int, ...], dict[SSAValue, int]] = {}  # by the bounds
        shapes = []
        for alloc, guard in self.allocs:
            bounds = self._bounded(guard)
            key = tuple(bounds.values())
            if key not in values:  # most allocations share the symbols' maxima
                values[key] = self._values(bounds)
            shapes.append(self._shape(alloc, values[key]))
        return tuple(shapes)

    def max_input_shape(self, k: int) -> tuple[int, ...]:
        """The shape of argument ``k`` (a buffer) at the symbols' maxima."""
        from llmopt.dialects._symbols import argument_dynamic

        names = iter(argument_dynamic(self.host, k) or ())
        return tuple(self.symbols[next(names)].max if e < 0 else e
                     for e in shape_of_type(self.host.body.block.args[k].type))

    def index_values(self, symbols: Mapping[str, int]) -> list[int]:
        """The value of every ``index`` arithmetic result at ``symbols``, in op order."""
        values = self._values(symbols)
        return [values[op.results[0]] for op, _ in self.ops if is_index_arith(op)]


@dataclass(frozen=True)
class CallLayout:
    """What one call of a symbolic program's plan needs, by plan slot and step: the value of
    every symbol and ``index`` arithmetic slot (``scalars``), the shape of every allocation
    (``shapes``, by the alloc's slot), the grid of every launch (``grids``, by step) and the
    launches that do not run (``inactive``)."""

    symbols: dict[str, int]
    scalars: dict[int, int]
    shapes: dict[int, tuple[int, ...]]
    grids: dict[int, tuple[int, int, int]]
    inactive: frozenset[int] = frozenset()
    """The launch steps that do not run at these symbols (their ``scf.if`` fails)."""


def layout_call(plan: HostPlan, host: SymbolicHost, symbols: Mapping[str, int]) -> CallLayout:
    """The :class:`CallLayout` of ``plan`` (planned from ``host``'s function) at ``symbols``;
    raises ``ExecutorError`` for a grid above its launch's maximum."""
    from llmopt.codegen.executor import AllocStep, LaunchStep

    call = host.evaluate(symbols)
    scalars = {host.symbols[name].arg: int(v) for name, v in symbols.items()}
    scalars.update(zip(plan.computed, host.index_values(symbols), strict=True))
    allocs = [s for s in plan.steps if isinstance(s, AllocStep)]
    launches = [k for k, s in enumerate(plan.steps) if isinstance(s, LaunchStep)]
    shapes = {s.slot: shape for s, shape in zip(allocs, call.shapes, strict=True)}
    grids = dict(zip(launches, call.grids, strict=True))
    inactive = frozenset(k for k, on in zip(launches, call.active, strict=True) if not on)
    return CallLayout(dict(symbols), scalars, shapes, grids, inactive)
