"""Runtime extents of tensors with ``?`` dims, as ``index`` values (shared by the lowerings).

A ``?`` in a type says only that the extent is known when the program runs. Lowerings that
build ops needing it (a ``prim.index_map`` broadcasting to a ``?`` dim takes the extent as an
operand; later, a loop bound) find the ``index`` value that holds it with :func:`extent_of`,
which follows the value to where its extent was fixed:

* a function argument: the symbol its ``llmopt.dynamic`` names (the symbol's argument);
* ``prim.index_map``, a fill ``prim.elementwise``, ``torch.reshape``/``expand``/``arange``:
  the matching ``sizes`` operand;
* ``prim.elementwise`` with inputs, ``prim.reduce``, ``prim.gather``: the input dim it
  comes from.

No op is created: the value found always dominates the uses of the tensor. An extent is an
``int`` when static, else that ``index`` value (:data:`Extent`). :func:`polynomial` reads an
extent as a polynomial in "atoms" (``index`` values that are not ``arith`` sums, differences
or products of others) through ``arith.constant``/``addi``/``subi``/``muli``, so that
``8 * %seq`` computed twice compares equal and ``%seq - (%seq - 1)`` is the constant 1.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr, TensorType
from xdsl.ir import Block, BlockArgument, Operation, OpResult, SSAValue

from llmopt.dialects._symbols import (
    DYNAMIC,
    argument_dynamic,
    function_symbols,
    is_dynamic,
)

Extent = int | SSAValue
"""A static extent, or the ``index`` value of a ``?`` extent."""

_SIZED_TORCH = frozenset({"torch.reshape", "torch.expand", "torch.arange"})


class ExtentError(Exception):
    """The ``index`` value of a ``?`` extent cannot be found (an op this module does not
    know produced the tensor)."""


def static_shape(extents: Sequence[Extent]) -> list[int]:
    """The type shape of ``extents``: ``index`` values become ``?``."""
    return [e if isinstance(e, int) else DYNAMIC for e in extents]


def dynamic_values(extents: Sequence[Extent]) -> list[SSAValue]:
    """The ``index`` values among ``extents``, in order (the ``sizes`` operands of an op whose
    result has these extents)."""
    return [e for e in extents if isinstance(e, SSAValue)]


def _nth_dynamic(shape: Sequence[int], dim: int) -> int:
    """How many ``?`` dims come before ``dim``."""
    return sum(1 for e in shape[:dim] if is_dynamic(e))


def extent_of(value: SSAValue, dim: int) -> Extent:
    """The extent of ``value`` (a tensor) along ``dim``: an ``int``, or the ``index`` value
    that holds it at runtime. Raises :class:`ExtentError` when it cannot be found."""
    typ = value.type
    assert isinstance(typ, TensorType)
    shape = tuple(typ.get_shape())
    if not is_dynamic(shape[dim]):
        return int(shape[dim])
    if isinstance(value, BlockArgument):
        return _argument_extent(value, shape, dim)
    assert isinstance(value, OpResult)
    op = value.op
    name = op.name
    k = _nth_dynamic(shape, dim)
    if name in ("prim.index_map", "prim.elementwise") or name in _SIZED_TORCH:
        inputs = op.operands[:len(op.regions[0].block.args)] if name == "prim.elementwise" \
            else ()
        if inputs:
            return extent_of(inputs[0], dim)
        sizes = op.sizes  # type: ignore[attr-defined]
        if k < len(sizes):
            return sizes[k]
    elif name == "prim.reduce":
        return extent_of(op.operands[0], dim)
    elif name in ("prim.insert", "torch.slice_scatter"):  # the dest's (the base's) extents
        return extent_of(op.operands[1] if name == "prim.insert" else op.operands[0], dim)
    elif name == "prim.gather":
        table, indices = op.operands
        axis = op.properties["axis"].value.data  # type: ignore[attr-defined]
        rank = len(indices.type.get_shape())  # type: ignore[attr-defined]
        if dim < axis:
            return extent_of(table, dim)
        if dim < axis + rank:
            return extent_of(indices, dim - axis)
        return extent_of(table, dim - rank + 1)
    raise ExtentError(f"cannot find the runtime extent of dim {dim} of a result of {name}")


def _argument_extent(value: BlockArgument, shape: Sequence[int], dim: int) -> Extent:
    block = value.owner
    assert isinstance(block, Block)
    func = block.parent_op()
    if func is None or func.name != "func.func":
        raise ExtentError(f"dim {dim} of block argument #{value.index} is ? and no function "
                          "binds it")
    names = argument_dynamic(func, value.index) or ()
    symbols = function_symbols(func)
    k = _nth_dynamic(shape, dim)
    if k >= len(names) or names[k] not in symbols:
        raise ExtentError(f"dim {dim} of argument #{value.index} names no declared symbol")
    return block.args[symbols[names[k]].arg]


def extents_of(value: SSAValue) -> tuple[Extent, ...]:
    """:func:`extent_of` along every dim of ``value``."""
    typ = value.type
    assert isinstance(typ, TensorType)
    return tuple(extent_of(value, d) for d in range(typ.get_num_dims()))


Atoms = tuple[int, ...]
"""A product of atoms: their sorted ``id``s (atoms are compared by identity)."""
Polynomial = tuple[tuple[Atoms, int], ...]
"""A sum of ``coefficient * atoms`` terms, sorted, without zero terms."""


def _normal(terms: dict[Atoms, int]) -> Polynomial:
    return tuple(sorted((a, c) for a, c in terms.items() if c != 0))


def polynomial(extent: Extent) -> Polynomial:
    """``extent`` as a polynomial in its atoms: ``8 * %seq`` and ``%seq * 8`` are both
    ``(((id(%seq),), 8),)``, the constant 3 is ``(((), 3),)``."""
    if isinstance(extent, int):
        return _normal({(): extent})
    owner = extent.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
        return _normal({(): int(owner.value.value.data)})
    if isinstance(owner, arith.AddiOp | arith.SubiOp):
        sign = 1 if isinstance(owner, arith.AddiOp) else -1
        terms = dict(polynomial(owner.lhs))
        for atoms, coef in polynomial(owner.rhs):
            terms[atoms] = terms.get(atoms, 0) + sign * coef
        return _normal(terms)
    if isinstance(owner, arith.MuliOp):
        return multiply(polynomial(owner.lhs), polynomial(owner.rhs))
    return (((id(extent),), 1),)


def multiply(a: Polynomial, b: Polynomial) -> Polynomial:
    """The product of two polynomials."""
    terms: dict[Atoms, int] = {}
    for atoms_a, coef_a in a:
        for atoms_b, coef_b in b:
            atoms = tuple(sorted(atoms_a + atoms_b))
            terms[atoms] = terms.get(atoms, 0) + coef_a * coef_b
    return _normal(terms)


def constant_of(extent: Extent) -> int | None:
    """The value of ``extent`` when its polynomial is a constant (``%seq - (%seq - 1)`` is
    1), else ``None``."""
    poly = polynomial(extent)
    if not poly:
        return 0
    if len(poly) == 1 and poly[0][0] == ():
        return poly[0][1]
    return None


_BINARY = {
    "arith.addi": lambda a, b: a + b,
    "arith.subi": lambda a, b: a - b,
    "arith.muli": lambda a, b: a * b,
    "arith.floordivsi": lambda a, b: a // b,
    "arith.divsi": lambda a, b: int(a / b),
    "arith.divui": lambda a, b: a // b,
    "arith.ceildivsi": lambda a, b: -(-a // b),
    "arith.ceildivui": lambda a, b: -(-a // b),
    "arith.remsi": lambda a, b: a % b,
    "arith.remui": lambda a, b: a % b,
    "arith.maxsi": max,
    "arith.minsi": min,
}


_KERNELS = ("loop.kernel", "tile.kernel")
"""Ops whose body's arguments are the values they bind, operand by operand."""


def _evaluate(extent: Extent, at: str) -> int:
    """``extent`` with every symbol at its ``at`` (``"min"``/``"max"``) bound; an argument
    of a kernel's body (``loop.kernel``, ``tile.kernel``) is the value the kernel binds to it."""
    if isinstance(extent, int):
        return extent
    owner = extent.owner
    if isinstance(extent, BlockArgument):
        func = owner.parent_op() if isinstance(owner, Block) else None
        if func is not None and func.name in _KERNELS:
            return _evaluate(func.operands[extent.index], at)
        if func is not None and func.name == "func.func":
            for sym in function_symbols(func).values():
                if sym.arg == extent.index:
                    return getattr(sym, at)
        raise ExtentError(f"block argument #{extent.index} is not a declared symbol")
    assert isinstance(owner, Operation)
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
        return int(owner.value.value.data)
    if owner.name == "arith.index_cast":
        return _evaluate(owner.operands[0], at)
    if owner.name in _BINARY and len(owner.operands) == 2:
        lhs, rhs = (_evaluate(v, at) for v in owner.operands)
        if rhs == 0 and ("div" in owner.name or "rem" in owner.name):
            raise ExtentError(f"{owner.name} divides by zero at the symbols' {at}imum")
        return _BINARY[owner.name](lhs, rhs)
    raise ExtentError(f"cannot bound an extent computed by {owner.name}")


def maximum_of(extent: Extent) -> int:
    """The largest value of ``extent`` over its symbols' bounds: the arithmetic that computes
    it (``arith`` on ``index`` values: sums, products, divisions by constants) evaluated
    with every symbol at its maximum, and at its minimum (the larger of the two: extents
    grow with the length, or shrink, never both). Raises :class:`ExtentError` for a value
    that is not such arithmetic of declared symbols."""
    return max(_evaluate(extent, "max"), _evaluate(extent, "min"))


def minimum_of(extent: Extent) -> int:
    """The smallest value of ``extent`` over its symbols' bounds (see :func:`maximum_of`)."""
    return min(_evaluate(extent, "max"), _evaluate(extent, "min"))


__all__ = ["Extent", "ExtentError", "Polynomial", "constant_of", "dynamic_values", "extent_of",
           "extents_of", "maximum_of", "minimum_of", "multiply", "polynomial",
           "static_shape"]
