"""Value ranges of a kernel's index arithmetic: may it be computed in 32-bit integers?

``kernel-to-cuda{index_bitwidth=32}`` prints ``index`` as ``int`` in a kernel where
:func:`fits_in_32_bits` proves, by interval arithmetic over the ``kernel.func``, that every
index value, every loop variable after its last increment and every partial sum of every
buffer offset lies in ``[-2³¹, 2³¹)``: then the same C expressions computed in ``int`` give
the same results. An offset's bound takes each non-negative index below its dim's extent:
a kernel whose access leaves its buffer is wrong at either width. A 64-bit division by a
constant is a chain of wide multiplies on a GPU, a 32-bit one three instructions, and
indices take half the registers.

The intervals come from the kernel's shape, not from data: constants; ``threadIdx`` below
the block's extent; ``blockIdx`` and ``gridDim`` from the largest grid the module's
``kernel.launch`` ops give the kernel (unknown without one); a ``scf.for`` variable in
``[lb, ub)``; ``x`` in ``[0, C)`` where an ``scf.if`` on ``x <u c`` (``c`` at most ``C``)
holds every use of it; ``+ - *``, ``min``/``max``, ``select`` (``select(x < C, x, y)``
knows ``x < C``) and division or remainder by a positive constant; an index ``iter_arg`` of
a ``scf.for`` from its initial value and what the body yields, the body revisited until the
intervals stop growing, with widening (:meth:`_Ranges.carried`; the wrapping counters
``async-copy`` carries get ``[0, modulus)``). Anything else yielding an index — a value
loaded from memory (``input_ids``), an index-typed kernel parameter other than the length,
shifts — is unknown, and one unknown index keeps the whole kernel 64-bit. Unsigned division
and remainder must see no negative operand (``(unsigned)`` and ``(unsigned long long)`` of
a negative value differ).

A symbolic kernel's length parameter is in ``[min, max]`` of the host symbol every launch
passes it (:func:`length_bounds`; a launch that passes anything else leaves it unknown),
division and remainder by it are bounded by that interval, and a buffer's ``?`` extents are
at most the length's maximum (row-major, :func:`~llmopt.lowering._symbolic_layout.
symbolic_strides`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, MemRefType, ModuleOp
from xdsl.dialects.func import FuncOp
from xdsl.ir import BlockArgument, Operation, SSAValue

from llmopt.dialects import kernel
from llmopt.dialects._symbols import function_symbols, has_dynamic, is_dynamic
from llmopt.lowering._symbolic_layout import symbolic_strides

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
ROUNDS = 6
"""Body passes that may widen a loop's index ``iter_args`` before the analysis gives up."""
EXACT_ROUNDS = 2
"""Passes that widen to the hull of what the body yields, before moving bounds go to ±TOP."""
TOP = 1 << 62
"""A bound standing for "any": wider than every 32-bit interval, so it never fits."""

Interval = tuple[int, int]
SLT = 2  # arith.cmpi's predicate number for "signed less than"
ULT = 6  # and for "unsigned less than"


class _Unknown(Exception):
    """An index whose range the analysis cannot bound."""


def launch_grids(module: ModuleOp) -> dict[str, tuple[int, ...]]:
    """Per kernel name, the largest grid extent in each dimension over its launches."""
    grids: dict[str, tuple[int, ...]] = {}
    for op in module.walk():
        if isinstance(op, kernel.LaunchOp):
            name = op.kernel.root_reference.data
            grid = op.grid_shape
            old = grids.get(name)
            grids[name] = grid if old is None else tuple(map(max, old, grid))
    return grids


def length_bounds(module: ModuleOp, positions: dict[str, int]) -> dict[str, Interval]:
    """Per kernel whose length is its parameter ``positions[name]``: the interval of the
    host symbols its launches pass there (the symbol's ``llmopt.min`` and ``llmopt.max``),
    the hull over them; a kernel one of whose launches passes anything else is left out."""
    bounds: dict[str, Interval] = {}
    unknown: set[str] = set()
    for op in module.walk():
        if not isinstance(op, kernel.LaunchOp):
            continue
        name = op.kernel.root_reference.data
        if name not in positions or name in unknown:
            continue
        found = _symbol_bounds(op.args[positions[name]])
        if found is None:
            unknown.add(name)
            bounds.pop(name, None)
            continue
        old = bounds.get(name)
        bounds[name] = found if old is None else (min(old[0], found[0]), max(old[1], found[1]))
    return bounds


def _symbol_bounds(value: SSAValue) -> Interval | None:
    """``[min, max]`` of ``value`` when it is a host function's symbol argument with a
    maximum."""
    if not isinstance(value, BlockArgument):
        return None
    fn = value.block.parent_op()
    if not isinstance(fn, FuncOp):
        return None
    for symbol in function_symbols(fn).values():
        if symbol.arg == value.index and symbol.max > 0:
            return symbol.min, symbol.max
    return None


def _in_bounds(iv: Interval, extent: int) -> int:
    """The largest magnitude an index of interval ``iv`` has in a buffer offset, along a dim
    of ``extent``: a non-negative index of an access in bounds is below the extent (an
    access out of bounds is wrong at any width), a negative one counts whole."""
    lo, hi = iv
    if lo >= 0:
        return min(hi, extent - 1)
    return max(abs(lo), abs(hi))


def _fits(iv: Interval) -> bool:
    return INT32_MIN <= iv[0] and iv[1] <= INT32_MAX


def _hull(values: Iterable[int]) -> Interval:
    found = list(values)
    return min(found), max(found)


class _Ranges:
    """Intervals of a kernel's index values, computed in program order."""

    def __init__(self, func: kernel.FuncOp, grid: Sequence[int] | None,
                 length: tuple[int, Interval] | None = None) -> None:
        self.func = func
        self.grid = grid
        self.of: dict[SSAValue, Interval] = {}
        self.lenient = False
        self.length_max = 0
        if length is not None:
            position, bound = length
            self.of[func.body.block.args[position]] = bound
            self.length_max = bound[1]

    def get(self, value: SSAValue) -> Interval:
        found = self.of.get(value)
        if found is None:
            raise _Unknown
        return found

    def positive(self, value: SSAValue) -> Interval:
        """The interval of a divisor that is at least 1 (a constant, or the length)."""
        lo, hi = self.get(value)
        if lo <= 0:
            raise _Unknown
        return lo, hi

    def visit(self, op: Operation) -> None:
        if isinstance(op, scf.ForOp):
            try:
                self.loop(op)
            except _Unknown:
                if not self.lenient:
                    raise
                for value in (*op.body.block.args, *op.results):
                    self.of[value] = (-TOP, TOP)
            return
        if isinstance(op, scf.IfOp):
            if any(isinstance(r.type, IndexType) for r in op.results):
                raise _Unknown
            self.guard(op)
        if self.lenient:
            pass
        elif isinstance(op, kernel.LoadOp | kernel.StoreOp):
            self.offset(op.buffer, op.indices)
        elif isinstance(op, kernel.CopyOp | kernel.AsyncCopyOp):
            self.offset(op.src, op.src_indices)
            self.offset(op.dst, op.dst_indices)
        for result in op.results:
            if isinstance(result.type, IndexType):
                try:
                    iv = self.result(op)
                except _Unknown:
                    if not self.lenient:
                        raise
                    iv = (-TOP, TOP)
                if not _fits(iv):
                    if not self.lenient:
                        raise _Unknown
                    iv = (max(iv[0], -TOP), min(iv[1], TOP))
                self.of[result] = iv

    def guard(self, op: scf.IfOp) -> None:
        """Narrow ``x`` to ``[0, C)`` for an ``scf.if`` on ``x <u c`` (``c`` in ``[0, C]``:
        unsigned, a negative ``c`` would let any ``x`` through) whose every other use of
        ``x`` is inside its ``then`` region: what the launches that ``fuse-launches``
        merged test (``v = blockIdx.x - 28658; if v <u 4094``), so ``x`` is in range
        wherever it is used."""
        cond = op.cond.owner
        if not (isinstance(cond, arith.CmpiOp) and cond.predicate.value.data == ULT
                and cond.lhs in self.of and cond.rhs in self.of):
            return
        x, (low, bound) = cond.lhs, self.of[cond.rhs]
        outside = any(use.operation is not cond
                      and not op.true_region.is_ancestor(use.operation) for use in x.uses)
        if low < 0 or bound < 1 or outside:
            return
        lo, hi = self.of[x]
        self.of[x] = (max(lo, 0), min(hi, bound - 1))

    def loop(self, op: scf.ForOp) -> None:
        lb, ub, step = self.get(op.lb), self.get(op.ub), self.get(op.step)
        if step[0] <= 0:
            raise _Unknown
        last = max(lb[0], ub[1] - 1)
        if not _fits((lb[0], last + step[1])):  # the increment after the last trip
            raise _Unknown
        self.of[op.body.block.args[0]] = (lb[0], last)
        self.carried(op)

    def carried(self, op: scf.ForOp) -> None:
        """Intervals of the index ``iter_args`` (and results) of ``op``.

        Each starts at its initial value; a body pass widens it by what the body yields —
        to the hull for the first :data:`EXACT_ROUNDS` passes, then a bound still moving
        goes to ±:data:`TOP` (found so, a wrapping counter's bound comes from its
        ``select``). Those passes are lenient: an index the body cannot bound or fit is
        :data:`TOP` wide, not a failure. The interval kept is the hull of the initial value
        and what the last of those passes yields; a strict pass must then yield inside it."""
        block = op.body.block
        pairs = [(arg, init, res, yielded) for arg, init, res, yielded in zip(
            block.args[1:], op.iter_args, op.results, _yielded(op), strict=True)
            if isinstance(arg.type, IndexType)]
        if not pairs:
            return
        for arg, init, _, _ in pairs:
            self.of[arg] = self.get(init)
        for round_ in range(ROUNDS):
            self.sweep(op, lenient=True)
            grown = False
            for arg, _, _, yielded in pairs:
                (lo, hi), (out_lo, out_hi) = self.of[arg], self.get(yielded)
                if out_lo < lo:
                    lo, grown = (out_lo if round_ < EXACT_ROUNDS else -TOP), True
                if out_hi > hi:
                    hi, grown = (out_hi if round_ < EXACT_ROUNDS else TOP), True
                self.of[arg] = (lo, hi)
            if not grown:
                break
        else:
            raise _Unknown
        # The last pass left what the body yields from the widened intervals: narrow to it.
        for arg, init, _, yielded in pairs:
            self.of[arg] = _hull((*self.get(init), *self.get(yielded)))
        self.sweep(op, lenient=False)
        for arg, _, res, yielded in pairs:
            (lo, hi), (out_lo, out_hi) = self.of[arg], self.get(yielded)
            if out_lo < lo or out_hi > hi:
                raise _Unknown
            self.of[res] = self.of[arg]

    def sweep(self, op: scf.ForOp, lenient: bool) -> None:
        """Visit the body of ``op`` once; ``lenient``: unknown or too wide indices are
        :data:`TOP` wide and nothing fails."""
        saved, self.lenient = self.lenient, lenient or self.lenient
        try:
            for inner in op.body.walk():
                self.visit(inner)
        finally:
            self.lenient = saved

    def offset(self, buffer: SSAValue, indices: Sequence[SSAValue]) -> None:
        """Every partial sum of ``Σ index·stride + offset`` fits (bounded by Σ |terms|, each
        non-negative index below its extent: :func:`_in_bounds`)."""
        typ = buffer.type
        assert isinstance(typ, MemRefType)
        if has_dynamic(typ):
            self.symbolic_offset(typ, indices)
            return
        strides, constant = typ.get_strides(), typ.get_offset()
        if strides is None or constant is None or None in strides:
            raise _Unknown
        bound = abs(int(constant))
        for index, stride, extent in zip(indices, strides, typ.get_shape(), strict=True):
            assert stride is not None
            bound += _in_bounds(self.get(index), extent) * abs(stride)
        if bound > INT32_MAX:
            raise _Unknown

    def symbolic_offset(self, typ: MemRefType, indices: Sequence[SSAValue]) -> None:
        """:meth:`offset` of a buffer with ``?`` extents (row-major, each ``?`` the length):
        a stride ``c·n^p`` is at most ``c·max^p``, a ``?`` extent at most ``max``; an index
        that is always 0 adds nothing."""
        bound = 0
        shape = typ.get_shape()
        for index, extent, (constant, power) in zip(indices, shape, symbolic_strides(typ),
                                                    strict=True):
            lo, hi = self.get(index)
            if lo == hi == 0:
                continue
            if not self.length_max and (power or is_dynamic(extent)):
                raise _Unknown
            extent = self.length_max if is_dynamic(extent) else extent
            bound += _in_bounds((lo, hi), extent) * constant * self.length_max ** power
        if bound > INT32_MAX:
            raise _Unknown

    def result(self, op: Operation) -> Interval:
        if isinstance(op, arith.ConstantOp):
            value = op.value
            if not isinstance(value, IntegerAttr):
                raise _Unknown
            return value.value.data, value.value.data
        if isinstance(op, kernel.ThreadIdOp | kernel.BlockDimOp):
            extent = self.func.block_shape["xyz".index(op.dim.data)]
            return (0, extent - 1) if isinstance(op, kernel.ThreadIdOp) else (extent, extent)
        if isinstance(op, kernel.BlockIdOp | kernel.GridDimOp):
            if self.grid is None:
                raise _Unknown
            extent = self.grid["xyz".index(op.dim.data)]
            return (0, extent - 1) if isinstance(op, kernel.BlockIdOp) else (1, extent)
        if isinstance(op, arith.AddiOp | arith.SubiOp | arith.MuliOp):
            (a, b), (c, d) = self.get(op.operands[0]), self.get(op.operands[1])
            if isinstance(op, arith.AddiOp):
                return a + c, b + d
            if isinstance(op, arith.SubiOp):
                return a - d, b - c
            return _hull((a * c, a * d, b * c, b * d))
        if isinstance(op, arith.MinSIOp | arith.MaxSIOp | arith.MinUIOp | arith.MaxUIOp):
            (a, b), (c, d) = self.get(op.operands[0]), self.get(op.operands[1])
            if isinstance(op, arith.MinUIOp | arith.MaxUIOp) and min(a, c) < 0:
                raise _Unknown
            pick = min if isinstance(op, arith.MinSIOp | arith.MinUIOp) else max
            return pick(a, c), pick(b, d)
        if isinstance(op, arith.SelectOp):
            (a, b), (c, d) = self.get(op.operands[1]), self.get(op.operands[2])
            cond = op.operands[0].owner
            if (isinstance(cond, arith.CmpiOp) and cond.predicate.value.data == SLT
                    and cond.lhs is op.operands[1]):
                b = min(b, self.get(cond.rhs)[1] - 1)  # taken only when lhs < rhs
            return min(a, c), max(b, d)
        if isinstance(op, arith.DivUIOp | arith.DivSIOp | arith.FloorDivSIOp
                      | arith.CeilDivSIOp | arith.CeilDivUIOp):
            lo, hi = self.get(op.operands[0])
            n_lo, n_hi = self.positive(op.operands[1])
            if lo >= 0:
                if isinstance(op, arith.CeilDivSIOp | arith.CeilDivUIOp):
                    return -(-lo // n_hi), -(-hi // n_lo)
                return lo // n_hi, hi // n_lo
            if isinstance(op, arith.DivUIOp | arith.CeilDivUIOp) or n_lo != n_hi:
                raise _Unknown
            return lo // n_lo - 1, -(-hi // n_lo) + (hi < 0)
        if isinstance(op, arith.RemUIOp | arith.RemSIOp):
            lo, hi = self.get(op.operands[0])
            n = self.positive(op.operands[1])[1]
            if lo < 0:
                if isinstance(op, arith.RemUIOp):
                    raise _Unknown
                return -(n - 1), n - 1
            return 0, min(hi, n - 1)
        raise _Unknown


def _yielded(op: scf.ForOp) -> list[SSAValue]:
    yield_op = op.body.block.last_op
    assert isinstance(yield_op, scf.YieldOp)
    return list(yield_op.operands)


def fits_in_32_bits(func: kernel.FuncOp, grid: Sequence[int] | None,
                    length: tuple[int, Interval] | None = None) -> bool:
    """Whether every index computation of ``func`` stays within 32-bit integers, launched on
    at most ``grid`` blocks (``None``: unknown grid), its length parameter (``length``: its
    position and interval, :func:`length_bounds`) in range — see the module docstring."""
    lengths = () if length is None else (length[0],)
    if any(isinstance(a.type, IndexType) and k not in lengths
           for k, a in enumerate(func.body.block.args)):
        return False
    ranges = _Ranges(func, grid, length)
    try:
        for op in func.body.walk():
            ranges.visit(op)
    except _Unknown:
        return False
    return True
