"""Shared pieces of custom syntax used by llmopt's dialects."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    AnyFloat,
    DenseArrayBase,
    DictionaryAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    NoneAttr,
    Signedness,
    i64,
)
from xdsl.ir import Attribute, Operation, Region, SSAValue
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.parser.core import ForwardDeclaredValue
from xdsl.printer import Printer
from xdsl.traits import IsolatedFromAbove
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.lexer import Span

from llmopt.options import knob_problems


def int_array(values: Sequence[int]) -> DenseArrayBase:
    """An ``array<i64: ...>`` property."""
    return DenseArrayBase.from_list(i64, list(values))


def ints(attr: DenseArrayBase) -> tuple[int, ...]:
    """The Python ints of an ``array<i64: ...>`` property."""
    return tuple(int(v) for v in attr.get_values())


def print_int_list(printer: Printer, values: Sequence[int]) -> None:
    printer.print_string("[" + ", ".join(str(v) for v in values) + "]")


I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def parse_i64(parser: Parser, allow_negative: bool = True) -> int:
    """Parse an integer that must fit in ``i64`` (a parse error at the literal otherwise)."""
    start = parser.pos
    value = parser.parse_integer(allow_boolean=False, allow_negative=allow_negative)
    if not I64_MIN <= value <= I64_MAX:
        parser.raise_error(f"integer {value} does not fit in 64 bits", start, parser.pos)
    return value


def parse_optional_i64(parser: Parser) -> int | None:
    """Parse an integer that must fit in ``i64`` if one comes next, else return ``None``."""
    start = parser.pos
    value = parser.parse_optional_integer(allow_boolean=False)
    if value is not None and not I64_MIN <= value <= I64_MAX:
        parser.raise_error(f"integer {value} does not fit in 64 bits", start, parser.pos)
    return value


def parse_int_list(parser: Parser) -> list[int]:
    """Parse ``[1, 2, 3]``: integers that fit in ``i64``."""
    return parser.parse_comma_separated_list(Parser.Delimiter.SQUARE, lambda: parse_i64(parser))


def print_sized_list(printer: Printer, maxima: Sequence[int],
                     sizes: dict[int, SSAValue]) -> None:
    """Print ``[1, %n max 128, 64]``: extents, some of them runtime ``index`` values (with
    their largest value); ``[1, 128, 64]`` when none is."""
    printer.print_string("[")
    for k, extent in enumerate(maxima):
        if k:
            printer.print_string(", ")
        if k in sizes:
            printer.print_ssa_value(sizes[k])
            printer.print_string(f" max {extent}")
        else:
            printer.print_string(str(extent))
    printer.print_string("]")


def parse_sized_list(parser: Parser) -> tuple[list[int], dict[int, SSAValue]]:
    """Parse what :func:`print_sized_list` prints: the extents (maxima for the runtime ones)
    and the runtime ``index`` values by position."""
    maxima: list[int] = []
    sizes: dict[int, SSAValue] = {}

    def one() -> None:
        unresolved = parser.parse_optional_unresolved_operand()
        if unresolved is not None:
            sizes[len(maxima)] = parser.resolve_operand(unresolved, IndexType())
            parser.parse_keyword("max")
        maxima.append(parse_i64(parser))

    parser.parse_comma_separated_list(Parser.Delimiter.SQUARE, one)
    return maxima, sizes


def print_affine_access(printer: Printer, amap: AffineMap, operands: Sequence[SSAValue]) -> None:
    """Print ``[%i, %j floordiv 4]``: an affine map whose dims are the given SSA values."""
    printer.print_string("[")
    for k, expr in enumerate(amap.results):
        if k:
            printer.print_string(", ")
        printer.print_string(_expr_text(printer, expr, operands))
    printer.print_string("]")


def _value_name(printer: Printer, value: SSAValue) -> str:
    from io import StringIO

    buf = StringIO()
    saved = printer.stream
    printer.stream = buf
    try:
        printer.print_ssa_value(value)
    finally:
        printer.stream = saved
    return buf.getvalue()


def _expr_text(printer: Printer, expr: object, operands: Sequence[SSAValue]) -> str:
    text = str(expr)
    # Dims become placeholders first (highest index first, so d1 does not clobber d10), then
    # names: an SSA name that itself contains "d0" is never rewritten again.
    for k in sorted(range(len(operands)), reverse=True):
        text = text.replace(f"d{k}", f"\x00{k}\x00")
    for k, operand in enumerate(operands):
        text = text.replace(f"\x00{k}\x00", _value_name(printer, operand))
    return text


def parse_affine_access(parser: Parser) -> tuple[AffineMap, Sequence[SSAValue]]:
    """Parse ``[%i, %j floordiv 4]`` into an affine map and its index operands."""
    start = parser.pos
    try:
        amap, operands = parser.parse_affine_map_of_ssa_ids()
    except NotImplementedError as err:  # xDSL builds no semi-affine expressions
        parser.raise_error(f"unsupported index expression: {err}", start, parser.pos)
    # The parser names the SSA ids as symbols; llmopt's accesses take them as dims.
    n = amap.num_dims + amap.num_symbols
    dims = [AffineDimExpr(i) for i in range(n)]
    amap = amap.replace_dims_and_symbols(dims[: amap.num_dims], dims[amap.num_dims:], n, 0)
    return amap, operands


def print_bound_args(printer: Printer, block_args: Sequence[SSAValue], operands: Sequence[SSAValue]
                     ) -> None:
    """Print ``(%a = %x : memref<4xf32>, ...)``: block arguments bound to operands."""
    printer.print_string("(")
    for k, (arg, operand) in enumerate(zip(block_args, operands, strict=True)):
        if k:
            printer.print_string(", ")
        printer.print_ssa_value(arg)
        printer.print_string(" = ")
        printer.print_ssa_value(operand)
        printer.print_string(" : ")
        printer.print_attribute(operand.type)
    printer.print_string(")")


#: CUDA's limits on launch shapes: the largest grid and block along x, y, z.
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)


def check_launch_shape(grid: Sequence[int] | None, block: Sequence[int] | None) -> None:
    """Three positive extents each, within CUDA's limits (block: at most 1024 threads)."""
    for label, dims, limits in (("grid", grid, MAX_GRID), ("block", block, MAX_BLOCK)):
        if dims is None:
            continue
        if len(dims) != 3 or any(d < 1 for d in dims):
            raise VerifyException(f"{label} must be three positive extents, got {list(dims)}")
        if label == "block" and dims[0] * dims[1] * dims[2] > MAX_BLOCK[0]:
            raise VerifyException(
                f"{dims[0] * dims[1] * dims[2]} threads per block exceed {MAX_BLOCK[0]}"
            )
        if any(d > limit for d, limit in zip(dims, limits, strict=True)):
            raise VerifyException(f"{label} {list(dims)} exceeds CUDA's limits {list(limits)}")


def check_static_layout(what: str, typ: MemRefType) -> None:
    """A buffer that kernels index needs static strides and offset (``memref<?x8xf32>`` is
    fine, ``memref<8x?xf32>`` is not): element offsets are computed from them. A buffer
    with a zero extent has no element to index."""
    strides, offset = typ.get_strides(), typ.get_offset()
    if strides is None or offset is None or None in strides:
        raise VerifyException(
            f"{what}: buffer {typ} has no static layout (its strides and offset must be known)"
        )
    if 0 in typ.get_shape():
        raise VerifyException(f"{what}: buffer {typ} has a zero extent: no index is in bounds")


def check_static_buffer(typ: Attribute, what: str) -> None:
    """A buffer a kernel declares (shared, local, tile) has a static shape of positive
    extents and the default layout; ``what`` names it in the message ("a shared buffer
    ...")."""
    if (not isinstance(typ, MemRefType) or not typ.has_static_shape()
            or not isinstance(typ.layout, NoneAttr)):
        raise VerifyException(
            f"a {what} buffer has a static shape and the default layout, got {typ}"
        )
    if 0 in typ.get_shape():
        raise VerifyException(f"a {what} buffer has positive extents, got {typ}")


class OpVerifyException(VerifyException):
    """A verifier error about ``op``, an op nested in the one whose verifier found it (an
    attribute of a foreign op, such as ``unroll`` on ``scf.for``, checked by the kernel
    around it): diagnostics point at ``op``."""

    def __init__(self, op: Operation, message: str) -> None:
        super().__init__(message)
        self.op = op


def guarded(op: Operation) -> bool:
    """Whether ``op`` sits in an ``scf.if`` inside the kernel around it (the nearest op
    isolated from above): code that may never run, where a constant out-of-range index is
    not an error."""
    parent = op.parent_op()
    while parent is not None and not parent.has_trait(IsolatedFromAbove):
        if parent.name == "scf.if":
            return True
        parent = parent.parent_op()
    return False


_DIVISIONS = {
    AffineBinaryOpKind.FloorDiv: "floordiv",
    AffineBinaryOpKind.CeilDiv: "ceildiv",
    AffineBinaryOpKind.Mod: "mod",
}


def affine_range(expr: AffineExpr, ranges: Sequence[tuple[int, int] | None]
                 ) -> tuple[int, int] | None:
    """The exact least and greatest values of ``expr`` over independent dims in ``ranges``;
    ``None`` where it cannot be exact (an unknown dim, a dim used twice, a ``mod`` that
    wraps within the range, a product of dims)."""
    used = [e.position for e in expr.dfs() if isinstance(e, AffineDimExpr)]
    if len(used) != len(set(used)):
        return None
    return _span(expr, ranges)


def _span(expr: AffineExpr, ranges: Sequence[tuple[int, int] | None]
          ) -> tuple[int, int] | None:
    if isinstance(expr, AffineConstantExpr):
        return expr.value, expr.value
    if isinstance(expr, AffineDimExpr):
        return ranges[expr.position] if expr.position < len(ranges) else None
    if not isinstance(expr, AffineBinaryOpExpr):
        return None
    lhs, rhs = _span(expr.lhs, ranges), _span(expr.rhs, ranges)
    if lhs is None or rhs is None:
        return None
    if expr.kind is AffineBinaryOpKind.Add:
        return lhs[0] + rhs[0], lhs[1] + rhs[1]
    if expr.kind is AffineBinaryOpKind.Mul:
        if lhs[0] != lhs[1] and rhs[0] != rhs[1]:
            return None
        products = [a * b for a in lhs for b in rhs]
        return min(products), max(products)
    if rhs[0] != rhs[1] or rhs[0] <= 0:
        return None
    c = rhs[0]
    if expr.kind is AffineBinaryOpKind.FloorDiv:
        return lhs[0] // c, lhs[1] // c
    if expr.kind is AffineBinaryOpKind.CeilDiv:
        return -(-lhs[0] // c), -(-lhs[1] // c)
    if lhs[0] // c != lhs[1] // c:
        return None  # wraps: not every value between the ends is taken
    return lhs[0] % c, lhs[1] % c


def bad_division(expr: AffineExpr) -> str | None:
    """What is wrong with the first ``floordiv``, ``ceildiv`` or ``mod`` in ``expr`` whose
    divisor is a constant that is not positive (affine divisions take positive divisors;
    xDSL's simplification asserts on negative ones): ``"divides by zero ('mod 0')"``, else
    ``None``."""
    for node in expr.dfs():
        if (isinstance(node, AffineBinaryOpExpr) and node.kind in _DIVISIONS
                and isinstance(node.rhs, AffineConstantExpr) and node.rhs.value <= 0):
            what = "zero" if node.rhs.value == 0 else "a negative constant"
            return f"divides by {what} ('{_DIVISIONS[node.kind]} {node.rhs.value}')"
    return None


def constant_index(value: SSAValue) -> int | None:
    """The value of an ``index`` (or integer) defined by ``arith.constant``, else ``None``."""
    owner = value.owner
    if isinstance(owner, Operation) and owner.name == "arith.constant":
        attr = owner.properties.get("value")
        if isinstance(attr, IntegerAttr):
            return attr.value.data
    return None


def check_index_in_bounds(what: str, typ: MemRefType, dim: int, value: int) -> None:
    """A constant coordinate ``value`` along dimension ``dim`` of a buffer of type ``typ``
    lies within its static extent (a dynamic extent accepts any non-negative index)."""
    extent = typ.get_shape()[dim]
    if value < 0 or 0 <= extent <= value:
        bound = f"0 to {extent - 1}" if extent >= 0 else "0 or more"
        raise VerifyException(
            f"{what}: index {value} is outside dimension {dim} of {typ} ({bound})"
        )


#: The largest ``#pragma unroll`` factor (a C ``int``).
MAX_UNROLL = 2**31 - 1
#: The most elements ``pad-shared`` adds to a shared tile's rows (``llmopt.pad``).
MAX_PAD = 64


def _check_int_attribute(op: Operation, name: str, high: int, low: str, what: str = ""
                         ) -> None:
    """Attribute ``name`` of ``op``, where present, is an integer from 0 to ``high``
    (``low`` spells the 0 in the message, ``what`` says what the value counts)."""
    attr = op.attributes.get(name)
    if attr is None:
        return
    value = _integer(attr)
    if not isinstance(value, int) or not 0 <= value <= high:
        raise OpVerifyException(
            op, f"attribute '{name}' must be an integer from {low} to {high}{what}, got "
                f"{value if isinstance(value, int) else attr}"
        )


def check_kernel_attributes(kernel: Operation) -> None:
    """The attributes that llmopt's passes read inside a kernel (``loop.kernel``,
    ``tile.kernel``, ``kernel.func``): ``unroll`` on any op in it (a loop) is a
    non-negative integer — ``0``: unroll fully, ``n``: by ``n`` —, ``llmopt.pad`` (on a
    shared tile) an integer from 0 to :data:`MAX_PAD`, and each knob of the kernel's
    ``llmopt.schedule`` dictionary is in its range (:mod:`llmopt.options`)."""
    schedule = kernel.attributes.get("llmopt.schedule")
    if schedule is not None:
        if not isinstance(schedule, DictionaryAttr):
            raise VerifyException(
                f"'llmopt.schedule' must be a dictionary of knobs, got {schedule}"
            )
        knobs = {name: _integer(value) for name, value in schedule.data.items()}
        problems = knob_problems(knobs)
        if problems:
            raise VerifyException(f"'llmopt.schedule': {problems[0]}")
    for op in kernel.walk():
        _check_int_attribute(op, "unroll", MAX_UNROLL, "0 (unroll fully)")
        _check_int_attribute(op, "llmopt.pad", MAX_PAD, "0", " (elements added to each row)")


def _integer(attr: Attribute) -> object:
    """The value of an integer attribute (``IntegerAttr`` of an integer or index type wider
    than ``i1``), else the attribute itself: ``true`` is a boolean, not a factor."""
    if isinstance(attr, IntegerAttr) and not (
            isinstance(attr.type, IntegerType) and attr.type.width.data == 1):
        return attr.value.data
    return attr


def check_reducible_type(typ: Attribute) -> None:
    """Reductions combine scalars with ``arith`` ops: floats, signless integers or index."""
    if isinstance(typ, AnyFloat | IndexType):
        return
    if isinstance(typ, IntegerType) and typ.signedness.data is Signedness.SIGNLESS:
        return
    raise VerifyException(
        f"a reduction yields a float, signless integer or index scalar, got {typ}"
    )


def parse_bound_region(parser: Parser) -> tuple[list[SSAValue], Region]:
    """Parse ``(%a = %x : type, ...) { body }``: the bound operands and the body region, whose
    entry block takes the (typed) block arguments.

    The operands are resolved before the body is parsed, so a name used as an operand and
    defined only inside the body (``(%a = %b : ..., %b = %y : ...)``) would bind the operand
    to a value of the body; that is a parse error here ("use of undefined value")."""
    spans: list[Span[str]] = []
    operands: list[SSAValue] = []
    args: list[Parser.Argument] = []

    def one() -> None:
        arg = parser.parse_argument(expect_type=False)
        parser.parse_punctuation("=")
        unresolved: UnresolvedOperand = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        spans.append(unresolved.span)
        operands.append(parser.resolve_operand(unresolved, typ))
        args.append(arg.resolve(typ))

    parser.parse_comma_separated_list(Parser.Delimiter.PAREN, one)
    body = parser.parse_region(args)
    pending = {id(v) for refs in parser.forward_ssa_references.values() for v in refs.values()}
    for value, span in zip(operands, spans, strict=True):
        if isinstance(value, ForwardDeclaredValue) and id(value) not in pending:
            parser.raise_error(
                f"use of undefined value {span.text} (a name defined inside the body is not "
                "visible to the operands)", span
            )
    return operands, body


INDEX = IndexType()


def print_access(printer: Printer, buffer: SSAValue, indices: Sequence[SSAValue]) -> None:
    """``%buf[%i, %j]``."""
    printer.print_ssa_value(buffer)
    printer.print_string("[")
    printer.print_list(indices, printer.print_ssa_value)
    printer.print_string("]")


def parse_access(parser: Parser) -> tuple[UnresolvedOperand, list[SSAValue]]:
    """What :func:`print_access` prints: the buffer (unresolved: its type comes last) and
    the ``index`` operands."""
    buffer = parser.parse_unresolved_operand()
    indices = parser.parse_comma_separated_list(
        Parser.Delimiter.SQUARE, lambda: parser.parse_operand(IndexType()))
    return buffer, indices


def print_typed_suffix(printer: Printer, op: Operation, typ: Attribute) -> None:
    """`` {attrs} : type``: an op's attributes, then the type of the buffer it accesses."""
    printer.print_op_attributes(op.attributes)
    printer.print_string(" : ")
    printer.print_attribute(typ)


def parse_typed_suffix(parser: Parser) -> tuple[dict[str, Attribute], Attribute]:
    """What :func:`print_typed_suffix` prints: the attributes and the type."""
    attrs = parser.parse_optional_attr_dict()
    parser.parse_punctuation(":")
    return attrs, parser.parse_type()

