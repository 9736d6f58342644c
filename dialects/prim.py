"""Tensor IR (level 2): the ``prim`` dialect.

Every Torch-IR op decomposes into three primitives on tensors:

* ``prim.elementwise`` — a scalar body (``arith``/``math`` ops ending in ``prim.yield``)
  applied at every coordinate; all inputs have the result's shape (broadcasts are explicit
  ``prim.index_map`` ops). With no inputs it is a fill.
* ``prim.reduce`` — combine along ``dims`` with ``add``/``mul``/``max``/``min``; reduced dims
  are kept with extent 1.
* ``prim.index_map`` — data movement: ``result[c] = input[map(c)]`` for an affine map of the
  result coordinates (broadcast, permute, reshape, slice). With ``concat`` along an axis the
  inputs own consecutive segments of that axis, each read through its own map.

Two additions keep within that spirit:

* ``prim.coord <dim> : index`` — inside an ``elementwise`` body, the coordinate of the point
  being computed along result dim ``dim``. Bodies that depend on *where* they are, not only on
  their inputs, use it: ``arange`` (``coord 0`` cast to the element type) and the causal mask
  of attention (``select(coord 3 <= coord 2, x, -inf)``).
* ``prim.gather`` — data movement through a data-dependent coordinate:
  ``result[p.., c.., q..] = table[p.., indices[c..], q..]`` (``numpy.take`` along ``axis``).
  It is ``index_map`` whose coordinate along ``axis`` comes from a tensor instead of an affine
  map; kept as its own op so that ``index_map`` stays purely affine (every pass that composes
  or inverts its maps keeps working). ``embedding`` is a gather along axis 0.

A new torch op needs only a decomposition into these.

**Symbolic extents.** Types may have ``?`` extents (see :mod:`llmopt.dialects._symbols`). An
op whose result extent does not follow from its inputs takes it as an ``index`` operand, one
per ``?`` of the result, after the keyword ``sizes``: an ``elementwise`` without inputs (a
fill, ``arange``) and every ``index_map``::

    %b = prim.index_map (%w) [(d0, d1, d2) -> (d2)] sizes(%seq)
           : (tensor<16xf32>) -> tensor<1x?x16xf32>

The maps of an ``index_map`` may use symbols, bound to ``index`` operands after the keyword
``symbols`` (``s0`` is the first): ``[(d0, d1)[s0] -> (d0, d1 + s0)] symbols(%start)`` reads a
slice that starts at a runtime offset.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    I64,
    AffineMapAttr,
    ArrayAttr,
    DenseArrayBase,
    IndexType,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Block, Dialect, Region, SSAValue
from xdsl.ir.affine import (
    AffineConstantExpr,
    AffineMap,
)
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import IsTerminator, Pure
from xdsl.utils.exceptions import VerifyException

from llmopt.dialects._symbols import (
    check_dynamic_operands,
    index_operand_count,
    is_dynamic,
    shape_text,
)
from llmopt.dialects._syntax import (
    INDEX,
    affine_range,
    bad_division,
    int_array,
    ints,
    parse_int_list,
    print_int_list,
)

REDUCE_KINDS = ("add", "mul", "max", "min")


def _tensor(value: SSAValue | Attribute) -> TensorType:
    typ = value.type if isinstance(value, SSAValue) else value
    if not isinstance(typ, TensorType):
        raise VerifyException(f"expected a ranked tensor, got {typ}")
    if any(d == 0 for d in typ.get_shape()):
        raise VerifyException(f"zero extents are not supported, got {typ}")
    return typ


def _shape(value: SSAValue | Attribute) -> tuple[int, ...]:
    return tuple(_tensor(value).get_shape())


def _print_operand_types(printer: Printer, operands: Sequence[SSAValue], result: Attribute) -> None:
    printer.print_string(" : (")
    printer.print_list([o.type for o in operands], printer.print_attribute)
    printer.print_string(") -> ")
    printer.print_attribute(result)


def _print_index_operands(printer: Printer, keyword: str, values: Sequence[SSAValue]) -> None:
    """`` sizes(%a, %b)`` (nothing when ``values`` is empty)."""
    if values:
        printer.print_string(f" {keyword}(")
        printer.print_list(values, printer.print_ssa_value)
        printer.print_string(")")


def _parse_index_operands(parser: Parser, keyword: str) -> list[SSAValue]:
    """Parse an optional ``keyword(%a, %b)`` list of ``index`` operands."""
    if parser.parse_optional_keyword(keyword) is None:
        return []
    return parser.parse_comma_separated_list(
        Parser.Delimiter.PAREN,
        lambda: parser.resolve_operand(parser.parse_unresolved_operand(), INDEX),
    )


def _parse_signature(parser: Parser, unresolved: Sequence[UnresolvedOperand], pos: int
                     ) -> tuple[list[SSAValue], Attribute]:
    """Parse ``: (types) -> result`` and resolve ``unresolved`` against the types (one
    each, else an error at ``pos``): the operands and the result type."""
    parser.parse_punctuation(":")
    types = parser.parse_comma_separated_list(Parser.Delimiter.PAREN, parser.parse_type)
    parser.parse_punctuation("->")
    result = parser.parse_type()
    if len(types) != len(unresolved):
        parser.raise_error(f"expected {len(unresolved)} operand types, got {len(types)}", pos)
    return parser.resolve_operands(list(unresolved), types, pos), result


def _check_sizes(op: IRDLOperation, sizes: Sequence[SSAValue], needed: bool) -> None:
    """``sizes`` holds one ``index`` operand per ``?`` of the result when ``needed``, else
    none."""
    want = index_operand_count(op.results[0].type) if needed else 0
    if len(sizes) != want:
        reason = "one per ? extent of the result" if needed else "the inputs give the shape"
        raise VerifyException(f"expected {want} size operand(s) ({reason}), got {len(sizes)}")


def _same_shape(a: Sequence[int], b: Sequence[int]) -> bool:
    """Equal shapes, a ``?`` matching only a ``?``."""
    return tuple(a) == tuple(b)


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminator of a ``prim.elementwise`` body: the scalar result at one coordinate."""

    name = "prim.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator(), Pure())
    assembly_format = "$values attr-dict `:` type($values)"

    def __init__(self, *values: SSAValue) -> None:
        super().__init__(operands=[list(values)])


@irdl_op_definition
class ElementwiseOp(IRDLOperation):
    """``result[c] = body(inputs[0][c], inputs[1][c], ...)`` for every coordinate ``c``."""

    name = "prim.elementwise"
    inputs = var_operand_def(TensorType)
    sizes = var_operand_def(IndexType)
    result = result_def(TensorType)
    body = region_def("single_block")
    traits = traits_def(Pure())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, inputs: Sequence[SSAValue], result_type: TensorType, body: Region,
                 sizes: Sequence[SSAValue] = ()) -> None:
        super().__init__(operands=[list(inputs), list(sizes)], result_types=[result_type],
                         regions=[body])

    @staticmethod
    def build(
        inputs: Sequence[SSAValue], result_type: TensorType, sizes: Sequence[SSAValue] = ()
    ) -> tuple[ElementwiseOp, Block]:
        """An op with an empty body block whose arguments are the inputs' element types
        (``sizes``: the extents of the ``?`` dims of a fill without inputs)."""
        block = Block(arg_types=[_tensor(v).element_type for v in inputs])
        return ElementwiseOp(inputs, result_type, Region(block), sizes), block

    def verify_(self) -> None:
        out = _tensor(self.result)
        _check_sizes(self, self.sizes, not self.inputs)
        check_dynamic_operands(self)
        for k, value in enumerate(self.inputs):
            if not _same_shape(_shape(value), out.get_shape()):
                raise VerifyException(
                    f"input #{k} has shape {shape_text(_shape(value))}, expected the result shape "
                    f"{shape_text(out.get_shape())} (broadcast with prim.index_map first)"
                )
        block = self.body.block
        if len(block.args) != len(self.inputs):
            raise VerifyException(
                f"body takes {len(block.args)} scalars, expected {len(self.inputs)} (one per input)"
            )
        for k, (arg, value) in enumerate(zip(block.args, self.inputs, strict=True)):
            if arg.type != _tensor(value).element_type:
                raise VerifyException(
                    f"body argument #{k} is {arg.type}, expected {_tensor(value).element_type}"
                )
        last = block.last_op
        if not isinstance(last, YieldOp) or len(last.values) != 1:
            raise VerifyException("body must end in prim.yield of one scalar")
        if last.values[0].type != out.element_type:
            raise VerifyException(
                f"body yields {last.values[0].type}, expected {out.element_type}"
            )

    def print(self, printer: Printer) -> None:
        printer.print_string(" (")
        printer.print_list(self.inputs, printer.print_ssa_value)
        printer.print_string(")")
        _print_index_operands(printer, "sizes", self.sizes)
        _print_operand_types(printer, self.inputs, self.result.type)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=True)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> ElementwiseOp:
        pos = parser.pos
        unresolved = parser.parse_comma_separated_list(
            Parser.Delimiter.PAREN, parser.parse_unresolved_operand
        )
        sizes = _parse_index_operands(parser, "sizes")
        inputs, result = _parse_signature(parser, unresolved, pos)
        body = parser.parse_region()
        op = cls(inputs, result, body, sizes)  # type: ignore[arg-type]
        op.attributes |= parser.parse_optional_attr_dict()
        return op


@irdl_op_definition
class ReduceOp(IRDLOperation):
    """Combine ``input`` along ``dims`` with ``kind``; reduced dims keep extent 1."""

    name = "prim.reduce"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    kind = prop_def(StringAttr)
    dims = prop_def(DenseArrayBase)
    traits = traits_def(Pure())

    def __init__(self, input: SSAValue, kind: str, dims: Sequence[int]) -> None:
        shape = list(_shape(input))
        for d in dims:
            shape[d] = 1
        result = TensorType(_tensor(input).element_type, shape)
        super().__init__(
            operands=[input],
            result_types=[result],
            properties={"kind": StringAttr(kind), "dims": int_array(sorted(dims))},
        )

    @property
    def reduced_dims(self) -> tuple[int, ...]:
        return ints(self.dims)

    def verify_(self) -> None:
        check_dynamic_operands(self)
        if self.kind.data not in REDUCE_KINDS:
            raise VerifyException(
                f"unknown reduction kind '{self.kind.data}', expected one of {REDUCE_KINDS}"
            )
        element = _tensor(self.input).element_type
        if isinstance(element, IntegerType) and not element.signedness.data.name == "SIGNLESS":
            raise VerifyException(
                f"reductions combine floats or signless integers, got {element}"
            )
        shape = list(_shape(self.input))
        dims = self.reduced_dims
        if len(set(dims)) != len(dims) or any(not 0 <= d < len(shape) for d in dims):
            raise VerifyException(f"dims {list(dims)} must be distinct and in [0, {len(shape)})")
        for d in dims:
            shape[d] = 1
        out = _tensor(self.result)
        if list(out.get_shape()) != shape:
            raise VerifyException(
                f"result shape {list(out.get_shape())} does not match {shape} (input shape with "
                "reduced dims set to 1)"
            )
        if out.element_type != _tensor(self.input).element_type:
            raise VerifyException("result element type must match the input's")

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.kind.data} ")
        printer.print_ssa_value(self.input)
        printer.print_string(" dims ")
        print_int_list(printer, self.reduced_dims)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.input.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> ReduceOp:
        kind = parser.parse_identifier()
        unresolved = parser.parse_unresolved_operand()
        parser.parse_keyword("dims")
        dims = parse_int_list(parser)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        in_type = parser.parse_type()
        parser.parse_punctuation("->")
        out_type = parser.parse_type()
        op = cls.create(
            operands=[parser.resolve_operand(unresolved, in_type)],
            result_types=[out_type],
            properties={"kind": StringAttr(kind), "dims": int_array(dims)},
            attributes=attrs,
        )
        return op


@irdl_op_definition
class IndexMapOp(IRDLOperation):
    """``result[c] = input[map(c)]``: pure data movement through affine coordinate maps.

    With ``concat = k`` there is one map per input; input ``i`` owns the segment of axis ``k``
    that follows the segments of inputs ``0..i-1`` (its extent along ``k``), and inside it
    reads ``input_i[map_i(c)]``.

    ``sizes`` holds the extents of the result's ``?`` dims (one ``index`` operand each);
    ``symbols`` the values of the maps' symbols (``s0``, ``s1``, ...), which all maps share.
    """

    name = "prim.index_map"
    inputs = var_operand_def(TensorType)
    symbols = var_operand_def(IndexType)
    sizes = var_operand_def(IndexType)
    result = result_def(TensorType)
    maps = prop_def(ArrayAttr[AffineMapAttr])
    concat = opt_prop_def(IntegerAttr)
    traits = traits_def(Pure())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(
        self,
        inputs: Sequence[SSAValue],
        maps: Sequence[AffineMap],
        result_type: TensorType,
        concat: int | None = None,
        sizes: Sequence[SSAValue] = (),
        symbols: Sequence[SSAValue] = (),
    ) -> None:
        props: dict[str, Attribute] = {"maps": ArrayAttr([AffineMapAttr(m) for m in maps])}
        if concat is not None:
            props["concat"] = IntegerAttr(concat, i64)
        super().__init__(operands=[list(inputs), list(symbols), list(sizes)],
                         result_types=[result_type], properties=props)

    @property
    def affine_maps(self) -> list[AffineMap]:
        return [m.data for m in self.maps.data]

    @property
    def concat_axis(self) -> int | None:
        return None if self.concat is None else self.concat.value.data

    def segments(self) -> list[tuple[int, int]]:
        """``(start, stop)`` along the concat axis owned by each input."""
        axis = self.concat_axis
        assert axis is not None
        out, start = [], 0
        for value in self.inputs:
            stop = start + _shape(value)[axis]
            out.append((start, stop))
            start = stop
        return out

    def verify_(self) -> None:
        out_shape = list(_tensor(self.result).get_shape())
        _check_sizes(self, self.sizes, True)
        check_dynamic_operands(self)
        maps = self.affine_maps
        if len(maps) != len(self.inputs) or not maps:
            raise VerifyException(
                f"expected one map per input ({len(self.inputs)}), got {len(maps)}"
            )
        if self.concat_axis is None and len(self.inputs) != 1:
            raise VerifyException("several inputs need a concat axis")
        # Each result index over its extent (unknown where dynamic): a coordinate the map
        # computes from them must fall inside the input (a concat's maps see one segment
        # each, so they are not checked over the whole result).
        ranges = [None if is_dynamic(e) else (0, e - 1) for e in out_shape]
        for k, (value, amap) in enumerate(zip(self.inputs, maps, strict=True)):
            in_type = _tensor(value)
            if in_type.element_type != _tensor(self.result).element_type:
                raise VerifyException(f"input #{k} element type differs from the result's")
            if amap.num_dims != len(out_shape) or amap.num_symbols != len(self.symbols):
                raise VerifyException(
                    f"map #{k} must take {len(out_shape)} dims (the result rank) and "
                    f"{len(self.symbols)} symbol(s) (the symbols operands), got "
                    f"{amap.num_dims} and {amap.num_symbols}"
                )
            in_shape = in_type.get_shape()
            if len(amap.results) != len(in_shape):
                raise VerifyException(
                    f"map #{k} yields {len(amap.results)} coordinates, input #{k} has rank "
                    f"{len(in_shape)}"
                )
            for j, expr in enumerate(amap.results):
                problem = bad_division(expr)
                if problem is not None:
                    raise VerifyException(f"map #{k} {problem} in coordinate {j}: {expr}")
                if (isinstance(expr, AffineConstantExpr) and not is_dynamic(in_shape[j])
                        and not 0 <= expr.value < in_shape[j]):
                    raise VerifyException(
                        f"map #{k} reads constant coordinate {expr.value} of dim {j} with extent "
                        f"{in_shape[j]}"
                    )
                span = None if self.concat_axis is not None else affine_range(expr, ranges)
                if (span is not None and not is_dynamic(in_shape[j])
                        and (span[0] < 0 or span[1] >= in_shape[j])):
                    raise VerifyException(
                        f"map #{k} reads coordinates {span[0]} to {span[1]} of dim {j} of input "
                        f"#{k} (extent {in_shape[j]}) over the result's indices: {expr}"
                    )
        axis = self.concat_axis
        if axis is not None:
            if not 0 <= axis < len(out_shape):
                raise VerifyException(f"concat axis {axis} out of range for rank {len(out_shape)}")
            if any(len(_shape(v)) != len(out_shape) for v in self.inputs):
                raise VerifyException("concat inputs must have the result's rank")
            extents = [_shape(v)[axis] for v in self.inputs]
            if any(is_dynamic(e) for e in (*extents, out_shape[axis])):
                if any(is_dynamic(e) for e in extents) != is_dynamic(out_shape[axis]):
                    raise VerifyException(
                        f"concat axis {axis} of the result is ? exactly when an input's is"
                    )
                return
            total = sum(extents)
            if total != out_shape[axis]:
                raise VerifyException(
                    f"concat segments cover {total} of axis {axis}, result extent is "
                    f"{out_shape[axis]}"
                )

    def print(self, printer: Printer) -> None:
        printer.print_string(" (")
        printer.print_list(self.inputs, printer.print_ssa_value)
        printer.print_string(")")
        if self.concat_axis is not None:
            printer.print_string(f" concat {self.concat_axis}")
        printer.print_string(" [")
        printer.print_list(self.affine_maps, lambda m: printer.print_string(str(m)))
        printer.print_string("]")
        _print_index_operands(printer, "symbols", self.symbols)
        _print_index_operands(printer, "sizes", self.sizes)
        printer.print_op_attributes(self.attributes)
        _print_operand_types(printer, self.inputs, self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> IndexMapOp:
        pos = parser.pos
        unresolved = parser.parse_comma_separated_list(
            Parser.Delimiter.PAREN, parser.parse_unresolved_operand
        )
        concat = parser.parse_integer() if parser.parse_optional_keyword("concat") else None
        maps = parser.parse_comma_separated_list(
            Parser.Delimiter.SQUARE, parser.parse_affine_map
        )
        symbols = _parse_index_operands(parser, "symbols")
        sizes = _parse_index_operands(parser, "sizes")
        attrs = parser.parse_optional_attr_dict()
        operands, result = _parse_signature(parser, unresolved, pos)
        op = cls(operands, maps, result, concat, sizes, symbols)  # type: ignore[arg-type]
        op.attributes |= attrs
        return op


@irdl_op_definition
class CoordOp(IRDLOperation):
    """``%i = prim.coord 2 : index``: in a ``prim.elementwise`` body, the coordinate along
    result dim ``dim`` of the point the body computes."""

    name = "prim.coord"
    dim = prop_def(IntegerAttr[I64])
    result = result_def(IndexType)
    traits = traits_def(Pure())

    def __init__(self, dim: int) -> None:
        super().__init__(result_types=[IndexType()], properties={"dim": IntegerAttr(dim, i64)})

    @property
    def axis(self) -> int:
        """The result dim this op reads the coordinate of."""
        return self.dim.value.data

    def verify_(self) -> None:
        parent = self.parent_op()
        if not isinstance(parent, ElementwiseOp):
            raise VerifyException("prim.coord must be directly in a prim.elementwise body")
        rank = _tensor(parent.result).get_num_dims()
        if not 0 <= self.axis < rank:
            raise VerifyException(
                f"dim {self.axis} out of range for the rank-{rank} result of the elementwise op"
            )

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.axis}")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> CoordOp:
        dim = parser.parse_integer(allow_boolean=False)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        if not isinstance(typ, IndexType):
            parser.raise_error(f"prim.coord has type index, got {typ}")
        op = cls(dim)
        op.attributes |= attrs
        return op


@irdl_op_definition
class GatherOp(IRDLOperation):
    """``result[p.., c.., q..] = table[p.., indices[c..], q..]``: ``numpy.take(table,
    indices, axis)`` — the rows (along ``axis``) of ``table`` named by the integer tensor
    ``indices``; the result's shape is ``table.shape[:axis] + indices.shape +
    table.shape[axis+1:]``. An index outside ``[0, table.shape[axis])`` is an error.

    ``%e = prim.gather %table[%ids] axis 0 : (tensor<97x64xf32>, tensor<1x7xi64>) ->
    tensor<1x7x64xf32>``
    """

    name = "prim.gather"
    table = operand_def(TensorType)
    indices = operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure())

    def __init__(self, table: SSAValue, indices: SSAValue, axis: int,
                 result_type: TensorType | None = None) -> None:
        if result_type is None:
            shape = gather_shape(_shape(table), _shape(indices), axis)
            result_type = TensorType(_tensor(table).element_type, list(shape))
        super().__init__(operands=[table, indices], result_types=[result_type],
                         properties={"axis": IntegerAttr(axis, i64)})

    @property
    def gather_axis(self) -> int:
        """The dim of ``table`` that ``indices`` select along."""
        return self.axis.value.data

    def verify_(self) -> None:
        check_dynamic_operands(self)
        element = _tensor(self.indices).element_type
        if not isinstance(element, IntegerType) or element.width.data == 1:
            raise VerifyException(f"indices must be an integer tensor, got {element}")
        expected = gather_shape(_shape(self.table), _shape(self.indices), self.gather_axis)
        out = _tensor(self.result)
        if tuple(out.get_shape()) != expected:
            raise VerifyException(
                f"result shape {list(out.get_shape())} does not match {list(expected)} "
                "(table dims before the axis, the indices' shape, table dims after it)"
            )
        if out.element_type != _tensor(self.table).element_type:
            raise VerifyException("result element type must match the table's")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_ssa_value(self.table)
        printer.print_string("[")
        printer.print_ssa_value(self.indices)
        printer.print_string(f"] axis {self.gather_axis}")
        printer.print_op_attributes(self.attributes)
        _print_operand_types(printer, [self.table, self.indices], self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> GatherOp:
        pos = parser.pos
        table = parser.parse_unresolved_operand()
        parser.parse_punctuation("[")
        indices = parser.parse_unresolved_operand()
        parser.parse_punctuation("]")
        parser.parse_keyword("axis")
        axis = parser.parse_integer(allow_boolean=False)
        attrs = parser.parse_optional_attr_dict()
        operands, result = _parse_signature(parser, [table, indices], pos)
        op = cls.create(operands=operands, result_types=[result],
                        properties={"axis": IntegerAttr(axis, i64)}, attributes=attrs)
        return op


@irdl_op_definition
class InsertOp(IRDLOperation):
    """``result = dest`` with ``result[.., offset + c, ..] = src[.., c, ..]`` along
    ``axis``: the slice ``offset : offset + src.shape[axis]`` of ``dest`` replaced by
    ``src`` (MLIR's ``tensor.insert_slice`` along one axis). ``src`` has ``dest``'s extents
    in every other dim; the result has ``dest``'s type. The offset is a property or one
    ``index`` operand (a write at a runtime position, checked when the program runs)::

        %c = prim.insert %k into %cache axis 0 at %pos
               : (tensor<1x4x16xf32>, tensor<?x4x16xf32>) -> tensor<?x4x16xf32>

    Kept apart from ``index_map``: a write of a few rows into a large tensor is what an
    in-place cache update is, and ``prim-to-loop`` stores only those rows, into ``dest``'s
    own buffer, when nothing else reads ``dest``.
    """

    name = "prim.insert"
    src = operand_def(TensorType)
    dest = operand_def(TensorType)
    offsets = var_operand_def(IndexType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    offset = opt_prop_def(IntegerAttr[I64])
    traits = traits_def(Pure())

    def __init__(self, src: SSAValue, dest: SSAValue, axis: int, offset: int | SSAValue
                 ) -> None:
        props: dict[str, Attribute] = {"axis": IntegerAttr(axis, i64)}
        operands: list[SSAValue] = []
        if isinstance(offset, SSAValue):
            operands.append(offset)
        else:
            props["offset"] = IntegerAttr(offset, i64)
        super().__init__(operands=[src, dest, operands], result_types=[dest.type],
                         properties=props)

    @property
    def insert_axis(self) -> int:
        """The dim of ``dest`` the slice runs along."""
        return self.axis.value.data

    @property
    def static_offset(self) -> int | None:
        """The offset when it is a property (``None`` when it is an ``index`` operand)."""
        return None if self.offset is None else self.offset.value.data

    def verify_(self) -> None:
        check_dynamic_operands(self)
        src, dest = _shape(self.src), _shape(self.dest)
        axis = self.insert_axis
        if not 0 <= axis < len(dest):
            raise VerifyException(f"axis {axis} out of range for the rank-{len(dest)} dest")
        if len(src) != len(dest) or any(
                a != b for k, (a, b) in enumerate(zip(src, dest, strict=True)) if k != axis):
            raise VerifyException(f"src {shape_text(src)} must match dest {shape_text(dest)} "
                                  f"in every dim but the axis {axis}")
        if self.result.type != self.dest.type:
            raise VerifyException("the result type must be the dest's")
        if _tensor(self.src).element_type != _tensor(self.dest).element_type:
            raise VerifyException("src and dest must share the element type")
        if (self.offset is None) == (len(self.offsets) == 0):
            raise VerifyException("the offset is either a property or one index operand")
        offset = self.static_offset
        if offset is not None and not (is_dynamic(dest[axis]) or is_dynamic(src[axis])) and (
                not 0 <= offset <= dest[axis] - src[axis]):
            raise VerifyException(f"offset {offset} puts src ({src[axis]} along axis {axis}) "
                                  f"outside dest's extent {dest[axis]}")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_ssa_value(self.src)
        printer.print_string(" into ")
        printer.print_ssa_value(self.dest)
        printer.print_string(f" axis {self.insert_axis} at ")
        if self.offsets:
            printer.print_ssa_value(self.offsets[0])
        else:
            printer.print_string(str(self.static_offset))
        printer.print_op_attributes(self.attributes)
        _print_operand_types(printer, [self.src, self.dest], self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> InsertOp:
        pos = parser.pos
        src = parser.parse_unresolved_operand()
        parser.parse_keyword("into")
        dest = parser.parse_unresolved_operand()
        parser.parse_keyword("axis")
        axis = parser.parse_integer(allow_boolean=False)
        parser.parse_keyword("at")
        props: dict[str, Attribute] = {"axis": IntegerAttr(axis, i64)}
        offsets: list[SSAValue] = []
        unresolved = parser.parse_optional_unresolved_operand()
        if unresolved is None:
            props["offset"] = IntegerAttr(parser.parse_integer(allow_boolean=False), i64)
        attrs = parser.parse_optional_attr_dict()
        operands, result = _parse_signature(parser, [src, dest], pos)
        if unresolved is not None:
            offsets = [parser.resolve_operand(unresolved, INDEX)]
        return cls.create(operands=[*operands, *offsets], result_types=[result],
                          properties=props, attributes=attrs)


def gather_shape(table: Sequence[int], indices: Sequence[int], axis: int) -> tuple[int, ...]:
    """The shape of ``prim.gather``'s result; raises ``VerifyException`` for a bad axis."""
    if not 0 <= axis < len(table):
        raise VerifyException(f"axis {axis} out of range for the rank-{len(table)} table")
    return (*table[:axis], *indices, *table[axis + 1:])


Prim = Dialect("prim", [ElementwiseOp, YieldOp, ReduceOp, IndexMapOp, CoordOp, GatherOp,
                        InsertOp], [])

__all__ = ["Prim", "ElementwiseOp", "YieldOp", "ReduceOp", "IndexMapOp", "CoordOp", "GatherOp",
           "InsertOp", "REDUCE_KINDS", "gather_shape"]
