"""``outline-repeated-kernels``: a kernel that occurs several times is scheduled once.

**Matches** the ``loop.kernel`` ops (and the ``tile.kernel`` ops ``flash-attention`` has
already scheduled) of a function's body that occur at least twice: kernels
identical in body, attributes and binding pattern (which operands are the same value, the
type of each, and for ``?`` extents the symbol they equal), whatever buffers they are bound
to. A model of N identical decoder layers has N copies of each of its layer's kernels.
A kernel is left alone when one of its operands is neither a function argument, nor a
``memref.alloc`` whose sizes are symbols, nor an ``index`` computed from symbols and
constants.

**Produces** for each class one private ``func.func`` (named after its first kernel, with
``llmopt.repeated`` set to the number of occurrences) whose arguments are the distinct
operands of that kernel (buffers, and the symbols their ``?`` extents equal, declared as
the caller declares them) and whose body is that kernel; each occurrence becomes a
``func.call`` of it with its own operands. An ``index`` operand computed from symbols (a
runtime grid size) is computed again in the callee.

**Why** Tile IR's scheduling passes rewrite each kernel on its own, and identical kernels
get identical schedules; with the repeats outlined, ``loop-to-tile`` … ``tile-to-kernel``
see one copy of each layer's kernels instead of one per layer, and a whole model lowers in
about the time of one layer plus its host code. ``inline-repeated-kernels`` puts the
lowered host code back at every call after ``tile-to-kernel``.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    i64,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from llmopt.dialects import loop, tile
from llmopt.dialects._symbols import (
    DYNAMIC_ATTR,
    MAX_ATTR,
    MIN_ATTR,
    SYMBOL_ATTR,
    Symbol,
    argument_dynamic,
    function_symbols,
    is_dynamic,
    shape_of_type,
)
from llmopt.passes.kernel.dedup_kernels import body_key

__all__ = ["REPEATED_ATTR", "OutlineRepeatedKernels"]

REPEATED_ATTR = "llmopt.repeated"
"""Attribute of a function ``outline-repeated-kernels`` made: how many calls it has."""

_PURE_INDEX = frozenset({
    "arith.constant", "arith.addi", "arith.subi", "arith.muli", "arith.ceildivui",
    "arith.divui", "arith.remui", "arith.minui", "arith.maxui",
})
"""``index`` arithmetic an operand may be computed with (recomputed in the callee)."""


class _Unsupported(Exception):
    """An operand this pass cannot describe: the kernel stays where it is."""


@dataclass
class _Provenance:
    """Where a function's values come from: its symbols, by name and by argument."""

    fn: func.FuncOp
    symbols: dict[str, Symbol]

    def __post_init__(self) -> None:
        self.by_arg = {s.arg: s for s in self.symbols.values()}

    def symbol_of(self, value: SSAValue) -> Symbol | None:
        if isinstance(value, BlockArgument) and value.owner is self.fn.body.block:
            return self.by_arg.get(value.index)
        return None

    def extent_names(self, value: SSAValue) -> tuple[str, ...]:
        """The symbol each ``?`` extent of buffer ``value`` equals."""
        dims = [k for k, e in enumerate(shape_of_type(value.type)) if is_dynamic(e)]
        if not dims:
            return ()
        if isinstance(value, BlockArgument) and value.owner is self.fn.body.block:
            names = argument_dynamic(self.fn, value.index)
            if names is None or len(names) != len(dims):
                raise _Unsupported
            return names
        owner = value.owner
        if isinstance(owner, Operation) and owner.name == "memref.alloc" \
                and len(owner.operands) == len(dims):
            names = []
            for size in owner.operands:
                sym = self.symbol_of(size)
                if sym is None:
                    raise _Unsupported
                names.append(sym.name)
            return tuple(names)
        raise _Unsupported

    def key(self, value: SSAValue) -> Hashable:
        """What a callee needs to know of operand ``value``, as a hashable description."""
        if isinstance(value.type, MemRefType):
            owner = value.owner
            if not (isinstance(value, BlockArgument) and value.owner is self.fn.body.block
                    or isinstance(owner, Operation) and owner.name == "memref.alloc"):
                raise _Unsupported
            return ("buffer", value.type, self.extent_names(value))
        if not isinstance(value.type, IndexType):
            raise _Unsupported
        sym = self.symbol_of(value)
        if sym is not None:
            return ("symbol", sym.name)
        owner = value.owner
        if not isinstance(owner, Operation) or owner.name not in _PURE_INDEX \
                or owner.parent is not self.fn.body.block:
            raise _Unsupported
        return ("index", owner.name, tuple(sorted(owner.properties.items(), key=str)),
                tuple(self.key(v) for v in owner.operands))

    def used_symbols(self, value: SSAValue, out: dict[str, Symbol]) -> None:
        """Add the symbols operand ``value`` depends on to ``out``."""
        if isinstance(value.type, MemRefType):
            for name in self.extent_names(value):
                out.setdefault(name, self.symbols[name])
            return
        sym = self.symbol_of(value)
        if sym is not None:
            out.setdefault(sym.name, sym)
            return
        owner = value.owner
        assert isinstance(owner, Operation)
        for v in owner.operands:
            self.used_symbols(v, out)


Kernel = loop.KernelOp | tile.KernelOp


def kernel_key(kernel: Kernel, where: _Provenance) -> Hashable:
    """Equal for two kernels exactly when one callee can stand for both."""
    first: dict[SSAValue, int] = {}
    pattern = tuple(first.setdefault(v, k) for k, v in enumerate(kernel.operands))
    return (body_key(kernel, skip=frozenset({"sym_name"})), pattern,
            tuple(where.key(v) for v in kernel.operands))


def _symbol_attrs(sym: Symbol) -> dict[str, Attribute]:
    attrs: dict[str, Attribute] = {SYMBOL_ATTR: StringAttr(sym.name),
                                   MAX_ATTR: IntegerAttr(sym.max, i64)}
    if sym.min != 1:
        attrs[MIN_ATTR] = IntegerAttr(sym.min, i64)
    return attrs


def _recompute(value: SSAValue, mapping: dict[SSAValue, SSAValue], block: Block) -> SSAValue:
    """``value`` (an ``index`` computed from symbols) computed again at the end of ``block``,
    its symbols taken from ``mapping``."""
    if value in mapping:
        return mapping[value]
    owner = value.owner
    assert isinstance(owner, Operation)
    for v in owner.operands:
        _recompute(v, mapping, block)
    clone = owner.clone(value_mapper=mapping)
    block.add_op(clone)
    for old, new in zip(owner.results, clone.results, strict=True):
        mapping[old] = new
    return mapping[value]


def outline(kernel: Kernel, where: _Provenance, name: str, calls: int
            ) -> tuple[func.FuncOp, list[int], list[SSAValue]]:
    """Move ``kernel`` into the callee that stands for its class. Returns the callee, the
    operand position of each buffer parameter (its distinct buffers, in order), and the
    symbol arguments of ``where.fn`` passed after them (those its buffers' extents and its
    ``index`` operands need)."""
    positions: list[int] = []
    buffers: list[SSAValue] = []
    for k, v in enumerate(kernel.operands):
        if isinstance(v.type, MemRefType) and v not in buffers:
            buffers.append(v)
            positions.append(k)
    symbols: dict[str, Symbol] = {}
    for v in kernel.operands:
        where.used_symbols(v, symbols)
    symbol_args = [where.fn.body.block.args[sym.arg] for sym in symbols.values()]
    params = [*buffers, *symbol_args]
    arg_attrs = [DictionaryAttr({DYNAMIC_ATTR: ArrayAttr([StringAttr(n) for n in names])}
                                if (names := where.extent_names(b)) else {}) for b in buffers]
    arg_attrs += [DictionaryAttr(_symbol_attrs(sym)) for sym in symbols.values()]
    block = Block(arg_types=[p.type for p in params])
    mapping: dict[SSAValue, SSAValue] = dict(zip(params, block.args, strict=True))
    for old, new in zip(params, block.args, strict=True):
        new.name_hint = old.name_hint
    operands = [_recompute(v, mapping, block) for v in kernel.operands]
    kernel.detach()
    kernel.operands = operands
    block.add_op(kernel)
    block.add_op(func.ReturnOp())
    callee = func.FuncOp(name, ([p.type for p in params], []), Region(block),
                         visibility="private", arg_attrs=ArrayAttr(arg_attrs))
    callee.attributes[REPEATED_ATTR] = IntegerAttr(calls, i64)
    return callee, positions, symbol_args


def outline_function(fn: func.FuncOp, taken: set[str]) -> list[func.FuncOp]:
    """Outline the repeated kernels of ``fn``; returns the callees, in order."""
    where = _Provenance(fn, function_symbols(fn))
    classes: dict[Hashable, list[Kernel]] = {}
    for op in fn.body.block.ops:
        if isinstance(op, loop.KernelOp | tile.KernelOp):
            try:
                classes.setdefault(kernel_key(op, where), []).append(op)
            except _Unsupported:
                continue
    callees: list[func.FuncOp] = []
    for kernels in classes.values():
        if len(kernels) < 2:
            continue
        name = _fresh(f"{kernels[0].sym_name.data}_repeated", taken)
        operands = [list(k.operands) for k in kernels]
        anchors = []
        for k in kernels:  # the calls go where the kernels were
            anchors.append(func.CallOp(name, [], []))
            Rewriter.insert_op(anchors[-1], InsertPoint.before(k))
        for k in kernels[1:]:
            k.detach()
            k.erase()
        callee, positions, symbol_args = outline(kernels[0], where, name, len(kernels))
        for anchor, values in zip(anchors, operands, strict=True):
            args = [values[p] for p in positions] + symbol_args
            Rewriter.replace_op(anchor, func.CallOp(name, args, []))
        callees.append(callee)
    return callees


def _fresh(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


@dataclass(frozen=True)
class OutlineRepeatedKernels(ModulePass):
    """Outline repeated ``loop.kernel`` and ``tile.kernel`` ops into one callee each (see the module
    docstring)."""

    name = "outline-repeated-kernels"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        taken = {str(o.properties["sym_name"].data) for o in op.walk()  # type: ignore[attr-defined]
                 if isinstance(o.properties.get("sym_name"), StringAttr)}
        for fn in list(op.ops):
            if isinstance(fn, func.FuncOp) and fn.body.blocks \
                    and REPEATED_ATTR not in fn.attributes:
                for callee in outline_function(fn, taken):
                    op.body.block.add_op(callee)
