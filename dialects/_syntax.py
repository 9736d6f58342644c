"""Shared pieces of custom syntax used by llmopt's dialects."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import DenseArrayBase, IndexType, i64
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.ir.affine import AffineDimExpr, AffineMap
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer


def int_array(values: Sequence[int]) -> DenseArrayBase:
    """An ``array<i64: ...>`` property."""
    return DenseArrayBase.from_list(i64, list(values))


def ints(attr: DenseArrayBase) -> tuple[int, ...]:
    """The Python ints of an ``array<i64: ...>`` property."""
    return tuple(int(v) for v in attr.get_values())


def print_int_list(printer: Printer, values: Sequence[int]) -> None:
    printer.print_string("[" + ", ".join(str(v) for v in values) + "]")


def parse_int_list(parser: Parser) -> list[int]:
    return parser.parse_comma_separated_list(Parser.Delimiter.SQUARE, parser.parse_integer)


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
    amap, operands = parser.parse_affine_map_of_ssa_ids()
    # The parser names the SSA ids as symbols; llmopt's accesses take them as dims.
    n = amap.num_dims + amap.num_symbols
    dims = [AffineDimExpr(i) for i in range(n)]
    amap = amap.replace_dims_and_symbols(dims[: amap.num_dims], dims[amap.num_dims:], n, 0)
    return amap, operands


def identity_access(rank: int) -> AffineMap:
    return AffineMap(rank, 0, tuple(AffineDimExpr(i) for i in range(rank)))


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


def parse_bound_args(parser: Parser) -> tuple[list[SSAValue], list[Parser.Argument]]:
    """Parse ``(%a = %x : type, ...)``; returns the operands and the (typed) block arguments."""
    operands: list[SSAValue] = []
    args: list[Parser.Argument] = []

    def one() -> None:
        arg = parser.parse_argument(expect_type=False)
        parser.parse_punctuation("=")
        unresolved: UnresolvedOperand = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        operands.append(parser.resolve_operand(unresolved, typ))
        args.append(arg.resolve(typ))

    parser.parse_comma_separated_list(Parser.Delimiter.PAREN, one)
    return operands, args


def region_with_args(types: Sequence[Attribute]) -> Region:
    return Region(Block(arg_types=types))


INDEX = IndexType()
