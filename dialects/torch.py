"""Torch IR (level 1): the ``torch`` dialect.

One op per captured ATen op, on builtin ranked tensors of ``f16``, ``bf16``, ``f32`` or
``f64`` — and of signless integers (``i64`` token ids and positions, ``i1`` masks) where an op
takes them: ``embedding`` indices, ``arange``, integer ``add``/``sub``/``mul``/``maximum``/
``minimum``/``neg``, comparisons (→ ``i1``), ``logical_*``, ``where``, ``to`` and data
movement. The other ops (transcendentals, reductions, contractions, ``sdpa``) take floats.
Extents are static or ``?`` (a symbolic extent, see :mod:`llmopt.dialects._symbols`): a ``?``
follows from the operands, and the ops whose result type is given (``reshape``, ``expand``,
``arange``) take one ``index`` operand per ``?`` of the result, its runtime extent
(``torch.reshape %x [%seq] : tensor<1x?x64xf32> -> tensor<1x?x4x16xf32>``); a ``slice`` along
a ``?`` extent takes its bounds as ``index`` operands
(``torch.slice %x [%start, %end] {dim = 1, step = 1}``). Every op has a shape-inference
helper (the ``infer_*`` functions below, shared with the frontend and the lowering) and its
verifier checks that the result type equals what the op computes from its operands and
properties.

Custom syntax, one form for all ops::

    %2 = torch.add %0, %1 : tensor<1x8x1xf32>, tensor<f32> -> tensor<1x8x1xf32>
    %3 = torch.mean %2 {dims = [-1], keepdim = true} : tensor<1x8x256xf32> -> tensor<1x8x1xf32>
    %4 = torch.constant 1.0e-05 : tensor<f32>

Properties are written in the attribute dictionary: integer lists as ``[...]``, integers,
booleans and floats as literals. Dims may be negative (counted from the end), as in PyTorch.
All binary operands share the result's element type: dtype promotion is an explicit
``torch.to``. Scalars (``x + 1e-6``) are ``torch.constant`` operands, broadcast like any
other rank-0 tensor.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping, Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    I64,
    ArrayAttr,
    BFloat16Type,
    BoolAttr,
    DenseArrayBase,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    Signedness,
    TensorType,
    f64,
    i1,
    i64,
)
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    OptOperandDef,
    VarOperandDef,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from llmopt.dialects._symbols import (
    check_dynamic_operands,
    index_operand_count,
    is_dynamic,
    shape_text,
)
from llmopt.dialects._syntax import int_array, ints

FLOAT_TYPES = (Float16Type, BFloat16Type, Float32Type, Float64Type)
"""Floating-point element types a torch-level tensor may have."""

INT_WIDTHS = (1, 8, 16, 32, 64)
"""Widths of the signless integer element types a torch-level tensor may have (``i1`` holds
booleans: masks and comparison results)."""

Shape = tuple[int, ...]

# --- shape inference ----------------------------------------------------------------------------


def is_float(typ: Attribute) -> bool:
    """Whether ``typ`` is a floating-point element type of Torch IR."""
    return isinstance(typ, FLOAT_TYPES)


def is_int(typ: Attribute) -> bool:
    """Whether ``typ`` is a signless integer element type of Torch IR (``i1`` included)."""
    return (isinstance(typ, IntegerType) and typ.width.data in INT_WIDTHS
            and typ.signedness.data == Signedness.SIGNLESS)


def is_bool(typ: Attribute) -> bool:
    """Whether ``typ`` is ``i1``."""
    return is_int(typ) and typ.width.data == 1  # type: ignore[attr-defined]


def tensor_type(value: SSAValue | Attribute, what: str = "operand") -> TensorType:
    """The ranked tensor type (static or ``?`` extents) of a value (or type) whose element type
    is a float (``f16``, ``bf16``, ``f32``, ``f64``) or a signless integer (``i1`` ... ``i64``);
    raises ``VerifyException`` otherwise."""
    typ = value.type if isinstance(value, SSAValue) else value
    if not isinstance(typ, TensorType):
        raise VerifyException(f"{what} must be a ranked tensor, got {typ}")
    if not (is_float(typ.element_type) or is_int(typ.element_type)):
        raise VerifyException(
            f"{what} element type must be f16, bf16, f32, f64 or a signless integer, "
            f"got {typ.element_type}"
        )
    if any(d < 0 and not is_dynamic(d) for d in typ.get_shape()):
        raise VerifyException(f"{what} must have a static shape, got {typ}")
    if any(d == 0 for d in typ.get_shape()):
        raise VerifyException(f"{what} has a zero extent, which llmopt does not support: {typ}")
    return typ


def float_tensor_type(value: SSAValue | Attribute, what: str = "operand") -> TensorType:
    """:func:`tensor_type`, and the element type must be a float."""
    typ = tensor_type(value, what)
    if not is_float(typ.element_type):
        raise VerifyException(
            f"{what} element type must be f16, bf16, f32 or f64, got {typ.element_type}"
        )
    return typ


def shape_of(value: SSAValue | Attribute) -> Shape:
    return tuple(tensor_type(value).get_shape())


def norm_dim(dim: int, rank: int) -> int:
    """``dim`` in ``[-rank, rank)`` as a non-negative index."""
    if not -rank <= dim < rank:
        raise VerifyException(f"dim {dim} out of range for rank {rank}")
    return dim % rank


def norm_dims(dims: Sequence[int], rank: int) -> tuple[int, ...]:
    """Distinct dims in ``[-rank, rank)`` as non-negative indices (order kept)."""
    out = tuple(norm_dim(d, rank) for d in dims)
    if len(set(out)) != len(out):
        raise VerifyException(f"dims {shape_text(dims)} repeat a dimension")
    return out


def broadcast_shapes(*shapes: Shape) -> Shape:
    """NumPy broadcasting: align on the right; extents must be equal or 1 (a ``?`` broadcasts
    with ``?`` and 1, not with another static extent)."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for k in range(rank):
        extents = {s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0}
        big = extents - {1}
        if len(big) > 1:
            listed = " and ".join(shape_text(s) for s in shapes)
            raise VerifyException(
                f"shapes {listed} do not broadcast (extents {shape_text(sorted(big))} at "
                f"result dim {k})"
            )
        out.append(big.pop() if big else 1)
    return tuple(out)


def infer_matmul(a: Shape, b: Shape) -> Shape:
    """``torch.matmul``: 1-D operands gain (then lose) a unit dim; batch dims broadcast."""
    if not a or not b:
        raise VerifyException("matmul operands must have rank >= 1")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise VerifyException(
            f"matmul contraction extents differ: {shape_text(a)} @ {shape_text(b)} "
            f"({shape_text([a2[-1]])[1:-1]} vs {shape_text([b2[-2]])[1:-1]})"
        )
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out = (*batch, *(() if len(a) == 1 else (a2[-2],)), *(() if len(b) == 1 else (b2[-1],)))
    return out


def infer_bmm(a: Shape, b: Shape) -> Shape:
    if len(a) != 3 or len(b) != 3:
        raise VerifyException(f"bmm operands must have rank 3, got {shape_text(a)} and "
                              f"{shape_text(b)}")
    if a[0] != b[0] or a[2] != b[1]:
        raise VerifyException(f"bmm shapes {shape_text(a)} and {shape_text(b)} do not match")
    return (a[0], a[1], b[2])


def infer_linear(x: Shape, w: Shape, bias: Shape | None) -> Shape:
    """``y = x @ w.T + bias`` with ``x: [..., K]``, ``w: [N, K]``, ``bias: [N]``."""
    if not x or len(w) != 2:
        raise VerifyException(f"linear takes input [..., K] and weight [N, K], got "
                              f"{shape_text(x)}, {shape_text(w)}")
    if x[-1] != w[1]:
        raise VerifyException(f"linear input features {x[-1]} differ from weight's {w[1]}")
    if bias is not None and bias != (w[0],):
        raise VerifyException(f"linear bias must have shape [{w[0]}], got {shape_text(bias)}")
    return (*x[:-1], w[0])


def infer_reduce(x: Shape, dims: Sequence[int], keepdim: bool) -> Shape:
    if not dims:
        raise VerifyException("reduction needs at least one dim")
    nd = norm_dims(dims, len(x))
    if keepdim:
        return tuple(1 if k in nd else e for k, e in enumerate(x))
    return tuple(e for k, e in enumerate(x) if k not in nd)


def infer_transpose(x: Shape, dim0: int, dim1: int) -> Shape:
    d0, d1 = norm_dim(dim0, len(x)), norm_dim(dim1, len(x))
    out = list(x)
    out[d0], out[d1] = x[d1], x[d0]
    return tuple(out)


def infer_permute(x: Shape, dims: Sequence[int]) -> Shape:
    nd = norm_dims(dims, len(x))
    if len(nd) != len(x):
        raise VerifyException(f"permutation {shape_text(dims)} must name all {len(x)} dims")
    return tuple(x[d] for d in nd)


def infer_unsqueeze(x: Shape, dim: int) -> Shape:
    d = norm_dim(dim, len(x) + 1)
    return (*x[:d], 1, *x[d:])


def check_expand(x: Shape, out: Shape) -> None:
    if len(out) < len(x):
        raise VerifyException(f"cannot expand {shape_text(x)} to the lower rank {shape_text(out)}")
    for k, e in enumerate(x):
        o = out[len(out) - len(x) + k]
        if e != o and e != 1:
            raise VerifyException(f"cannot expand {shape_text(x)} to {shape_text(out)}")


def infer_slice(x: Shape, dim: int, start: int | None, end: int | None, step: int) -> Shape:
    """A strided slice along ``dim``; ``start``/``end`` are ``None`` when they are ``index``
    operands (the sliced extent is then ``?``)."""
    d = norm_dim(dim, len(x))
    if step < 1:
        raise VerifyException(f"slice step must be positive, got {step}")
    if start is None or end is None:
        if start is not None or end is not None:
            raise VerifyException("slice bounds are both properties or both index operands")
        out = list(x)
        out[d] = DYNAMIC_INDEX
        return tuple(out)
    if is_dynamic(x[d]):
        raise VerifyException(f"slice along the ? extent of dim {d} takes its bounds as index "
                              "operands, not properties")
    if not 0 <= start <= end <= x[d]:
        raise VerifyException(
            f"slice bounds must satisfy 0 <= start ({start}) <= end ({end}) <= {x[d]}"
        )
    out = list(x)
    out[d] = -(-(end - start) // step)
    return tuple(out)


def infer_cat(shapes: Sequence[Shape], dim: int) -> Shape:
    if not shapes:
        raise VerifyException("cat needs at least one input")
    rank = len(shapes[0])
    d = norm_dim(dim, rank)
    for s in shapes:
        if len(s) != rank or any(s[k] != shapes[0][k] for k in range(rank) if k != d):
            listed = ", ".join(shape_text(s) for s in shapes)
            raise VerifyException(f"cat inputs {listed} differ outside dim {dim}")
    out = list(shapes[0])
    extents = [s[d] for s in shapes]
    out[d] = DYNAMIC_INDEX if any(is_dynamic(e) for e in extents) else sum(extents)
    return tuple(out)


def infer_rms_norm(x: Shape, normalized_rank: int, weight: Shape | None) -> Shape:
    if not 1 <= normalized_rank <= len(x):
        raise VerifyException(
            f"normalized_rank {normalized_rank} must be in [1, {len(x)}] (the input rank)"
        )
    if weight is not None and weight != x[len(x) - normalized_rank:]:
        raise VerifyException(
            f"rms_norm weight shape {shape_text(weight)} must equal the normalized shape "
            f"{shape_text(x[len(x) - normalized_rank:])}"
        )
    return x


# --- property syntax ----------------------------------------------------------------------------


def format_float(value: float) -> str:
    """A float literal that parses back to exactly ``value`` (``1.0e-05``, ``0.5``, ``2.0``).

    Non-finite values are written as the hexadecimal bits of the f64.
    """
    if not math.isfinite(value):
        return "0x" + struct.pack(">d", value).hex().upper()
    text = repr(float(value))
    mantissa, e, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return mantissa + e + exponent


def _float_from_bits(bits: int) -> float:
    return struct.unpack(">d", bits.to_bytes(8, "big"))[0]


def _parse_float_literal(parser: Parser) -> float:
    """Parse a float (or integer, or ``0x...`` f64 bit pattern) literal."""
    pos = parser.pos
    number = parser.parse_number()
    if isinstance(number, int) and parser.lexer.input.content[pos:].lstrip().startswith("0x"):
        return _float_from_bits(number)
    return float(number)


PropKind = str
"""``"int"``, ``"ints"``, ``"bool"`` or ``"float"``."""

PropSpec = tuple[tuple[str, PropKind], ...]
"""An op's properties: (name, kind) pairs in printing order."""


def _to_prop(kind: PropKind, value: object) -> Attribute:
    """A Python value (or an attribute) as the property attribute of the given kind."""
    if kind == "ints":
        if isinstance(value, DenseArrayBase):
            return value
        if isinstance(value, ArrayAttr):
            vals = []
            for v in value.data:
                if not isinstance(v, IntegerAttr):
                    raise ValueError("expected a list of integers")
                vals.append(v.value.data)
            return int_array(vals)
        if isinstance(value, Sequence) and all(isinstance(v, int) for v in value):
            return int_array([int(v) for v in value])  # type: ignore[union-attr]
        raise ValueError("expected a list of integers")
    if kind == "int":
        if isinstance(value, IntegerAttr):
            value = value.value.data
        if isinstance(value, int) and not isinstance(value, bool):
            return IntegerAttr(value, i64)
        raise ValueError("expected an integer")
    if kind == "bool":
        if isinstance(value, IntegerAttr) and value.type == i1:
            return value
        if isinstance(value, bool):
            return IntegerAttr(int(value), i1)
        raise ValueError("expected true or false")
    if kind == "float":
        if isinstance(value, FloatAttr | IntegerAttr):
            value = value.value.data
        if isinstance(value, int | float) and not isinstance(value, bool):
            return FloatAttr(float(value), f64)
        raise ValueError("expected a float")
    raise AssertionError(kind)


def _prop_text(kind: PropKind, attr: Attribute) -> str:
    if kind == "ints":
        assert isinstance(attr, DenseArrayBase)
        return "[" + ", ".join(str(v) for v in ints(attr)) + "]"
    if kind == "bool":
        assert isinstance(attr, IntegerAttr)
        return "true" if attr.value.data else "false"
    if kind == "int":
        assert isinstance(attr, IntegerAttr)
        return str(attr.value.data)
    assert isinstance(attr, FloatAttr)
    return format_float(attr.value.data)


def _parse_prop_dict(parser: Parser) -> tuple[dict[str, object], dict[str, int]]:
    """Parse ``{name = value, ...}`` where values are int lists, ints, floats or booleans.

    Other values (of discardable attributes) are parsed as attributes. Returns the values and
    the source positions of the keys.
    """
    values: dict[str, object] = {}
    positions: dict[str, int] = {}
    if parser.parse_optional_punctuation("{") is None:
        return values, positions

    def one() -> None:
        pos = parser.pos
        name = parser.parse_optional_str_literal()
        if name is None:
            name = parser.parse_identifier()
        parser.parse_punctuation("=")
        if name in values:
            parser.raise_error(f"duplicate entry '{name}'", pos)
        positions[name] = pos
        if (flag := parser.parse_optional_boolean()) is not None:
            values[name] = flag
            return
        if parser.parse_optional_punctuation("[") is not None:
            items: list[int] = []
            if parser.parse_optional_punctuation("]") is None:
                items.append(parser.parse_integer(allow_boolean=False))
                while parser.parse_optional_punctuation(",") is not None:
                    items.append(parser.parse_integer(allow_boolean=False))
                parser.parse_punctuation("]")
            values[name] = items
            return
        start = parser.pos
        number = parser.parse_optional_number()
        if number is None:
            values[name] = parser.parse_attribute()
            return
        if parser.parse_optional_punctuation(":") is not None:
            typ = parser.parse_type()
            if isinstance(typ, IntegerType) and isinstance(number, int):
                values[name] = IntegerAttr(number, typ)
            elif isinstance(typ, FLOAT_TYPES):
                values[name] = FloatAttr(float(number), typ)
            else:
                parser.raise_error(f"a number cannot have type {typ}", start)
            return
        text = parser.lexer.input.content[start:parser.pos].strip().lstrip("-").lstrip()
        values[name] = _float_from_bits(number) if text.startswith("0x") else number

    parser.parse_comma_separated_list(Parser.Delimiter.NONE, one)
    parser.parse_punctuation("}")
    return values, positions


# --- ops ----------------------------------------------------------------------------------------


class Props:
    """Typed read access to an op's properties (also before the op exists)."""

    def __init__(self, props: Mapping[str, Attribute]) -> None:
        self.props = props

    def has(self, name: str) -> bool:
        """Whether the (optional) property ``name`` is present."""
        return name in self.props

    def get_int(self, name: str) -> int:
        attr = self.props[name]
        assert isinstance(attr, IntegerAttr)
        return attr.value.data

    def get_ints(self, name: str) -> tuple[int, ...]:
        attr = self.props[name]
        assert isinstance(attr, DenseArrayBase)
        return ints(attr)

    def get_float(self, name: str) -> float:
        attr = self.props[name]
        assert isinstance(attr, FloatAttr)
        return attr.value.data

    def get_bool(self, name: str) -> bool:
        return bool(self.get_int(name))


def common_element_type(types: Sequence[TensorType]) -> Attribute:
    """The element type shared by all ``types``; raises ``VerifyException`` if they differ."""
    elements = {t.element_type for t in types}
    if len(elements) != 1:
        raise VerifyException(
            "operands must share one element type (cast with torch.to), got "
            + ", ".join(str(t.element_type) for t in types)
        )
    return elements.pop()


def _like(types: Sequence[TensorType], shape: Sequence[int]) -> TensorType:
    return TensorType(common_element_type(types), list(shape))


def _shapes(types: Sequence[TensorType]) -> list[Shape]:
    return [tuple(t.get_shape()) for t in types]


class TorchOp(IRDLOperation):
    """Common parts of the torch ops: properties, syntax and the result-type check.

    ``PROPS`` lists the properties (name, kind) in printing order. Subclasses implement
    :meth:`infer`, the result type the op computes from its operand types and properties.
    """

    PROPS: ClassVar[PropSpec] = ()
    OPTIONAL_PROPS: ClassVar[frozenset[str]] = frozenset()
    """Properties that may be absent (a ``slice`` bound given as an ``index`` operand)."""
    INDEX_OPERANDS: ClassVar[bool] = False
    """Whether the op's last operand group, ``sizes``, holds ``index`` operands: the extents
    of the ``?`` dims of the result (or, for ``slice``, its bounds), printed in brackets
    after the tensor operands."""
    FLOAT_OPERANDS: ClassVar[bool] = True
    """Whether every operand must have a float element type (ops that also take integer
    tensors, such as ``add`` or the data-movement ops, set it to ``False``)."""

    def __init__(
        self,
        *operands: SSAValue,
        result_type: TensorType | None = None,
        **props: object,
    ) -> None:
        """Build the op from its operands (flat, optional ones last) and Python property
        values. The result type is inferred unless given; ops whose result type is an input
        (``reshape``, ``expand``, ``to``, ``constant``) take it from their own builders."""
        kinds = dict(self.PROPS)
        props = {k: v for k, v in props.items() if not (k in self.OPTIONAL_PROPS and v is None)}
        if not set(kinds) - self.OPTIONAL_PROPS <= set(props) <= set(kinds):
            raise TypeError(f"{self.name} takes properties {sorted(kinds)}, got {sorted(props)}")
        properties = {k: _to_prop(kinds[k], v) for k, v in props.items()}
        if result_type is None:
            tensors = [v for v in operands if not isinstance(v.type, IndexType)]
            types = [self._operand_type(v, f"operand #{k}") for k, v in enumerate(tensors)]
            result_type = self.infer(types, Props(properties), None)
        super().__init__(
            operands=self._group_operands(list(operands)),
            result_types=[result_type],
            properties=properties,
        )

    @classmethod
    def _group_operands(cls, flat: list[SSAValue]) -> list[SSAValue | list[SSAValue]]:
        """Split a flat operand list into IRDL's per-definition groups."""
        defs = cls.get_irdl_definition().operands
        groups: list[SSAValue | list[SSAValue]] = []
        rest = list(flat)
        for k, (_, odef) in enumerate(defs):
            if isinstance(odef, OptOperandDef):
                groups.append(rest[:1])
                rest = rest[1:]
            elif isinstance(odef, VarOperandDef):
                n = len(rest) - (len(defs) - k - 1)
                groups.append(rest[:n])
                rest = rest[n:]
            elif rest:
                groups.append(rest.pop(0))
            else:
                raise TypeError(f"{cls.name}: too few operands")
        if rest:
            raise TypeError(f"{cls.name}: too many operands")
        return groups

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        """The result type computed from the operand types (flat) and the properties;
        ``result`` is the declared result type, if any. Raises ``VerifyException``."""
        raise NotImplementedError

    @property
    def props(self) -> Props:
        return Props(self.properties)

    @property
    def index_operands(self) -> tuple[SSAValue, ...]:
        """The ``index`` operands (``sizes``): empty for ops without them."""
        if not self.INDEX_OPERANDS:
            return ()
        return tuple(self.sizes)  # type: ignore[attr-defined]

    @property
    def tensor_operands(self) -> tuple[SSAValue, ...]:
        """The tensor operands, in order (all operands but the ``index`` ones)."""
        operands = tuple(self.operands)
        return operands[:len(operands) - len(self.index_operands)]

    @classmethod
    def _operand_type(cls, value: SSAValue, what: str) -> TensorType:
        """The tensor type of an operand (a float tensor when ``FLOAT_OPERANDS``)."""
        return float_tensor_type(value, what) if cls.FLOAT_OPERANDS else tensor_type(value, what)

    def infer_type(self) -> TensorType:
        """The result type this op computes from its operands and properties."""
        types = [self._operand_type(v, f"operand #{k}")
                 for k, v in enumerate(self.tensor_operands)]
        return self.infer(types, self.props, tensor_type(self.results[0], "result"))

    def verify_(self) -> None:
        expected = self.infer_type()
        actual = self.results[0].type
        if actual != expected:
            raise VerifyException(
                f"result type {actual} does not match {expected}, computed from the operands"
            )
        self.verify_index_operands()
        check_dynamic_operands(self)

    def verify_index_operands(self) -> None:
        """By default one ``index`` operand per ``?`` extent of the result."""
        if not self.INDEX_OPERANDS:
            return
        want = index_operand_count(self.results[0].type)
        got = len(self.index_operands)
        if got != want:
            raise VerifyException(
                f"expected {want} index operand(s), one per ? extent of the result, got {got}"
            )

    # -- syntax ----------------------------------------------------------------------------

    def _print_props(self, printer: Printer) -> None:
        entries = [f"{name} = {_prop_text(kind, self.properties[name])}"
                   for name, kind in self.PROPS if name in self.properties]
        if not entries and not self.attributes:
            return
        printer.print_string(" {" + ", ".join(entries))
        for k, (name, attr) in enumerate(self.attributes.items()):
            printer.print_string(", " if entries or k else "")
            printer.print_identifier_or_string_literal(name)
            printer.print_string(" = ")
            printer.print_attribute(attr)
        printer.print_string("}")

    def print(self, printer: Printer) -> None:
        tensors = self.tensor_operands
        if tensors:
            printer.print_string(" ")
            printer.print_list(tensors, printer.print_ssa_value)
        if self.index_operands:
            printer.print_string(" [")
            printer.print_list(self.index_operands, printer.print_ssa_value)
            printer.print_string("]")
        self._print_props(printer)
        printer.print_string(" : ")
        if tensors:
            printer.print_list([o.type for o in tensors], printer.print_attribute)
            printer.print_string(" -> ")
        printer.print_attribute(self.results[0].type)

    @classmethod
    def _parse_props(cls, parser: Parser) -> tuple[dict[str, Attribute], dict[str, Attribute]]:
        """Parse the attribute dictionary into (properties, discardable attributes)."""
        pos = parser.pos
        values, positions = _parse_prop_dict(parser)
        kinds = dict(cls.PROPS)
        props: dict[str, Attribute] = {}
        attrs: dict[str, Attribute] = {}
        for name, value in values.items():
            if name in kinds:
                try:
                    props[name] = _to_prop(kinds[name], value)
                except ValueError as err:
                    parser.raise_error(f"property '{name}': {err}", positions[name])
            elif isinstance(value, Attribute):
                attrs[name] = value
            else:
                parser.raise_error(
                    f"{cls.name} has no property '{name}' (properties: "
                    f"{', '.join(kinds) or 'none'})",
                    positions[name],
                )
        missing = [name for name in kinds if name not in props and name not in cls.OPTIONAL_PROPS]
        if missing:
            parser.raise_error(f"{cls.name} needs properties {', '.join(missing)}", pos)
        return props, attrs

    @classmethod
    def parse(cls, parser: Parser) -> TorchOp:
        pos = parser.pos
        unresolved: list[UnresolvedOperand] = []
        if (first := parser.parse_optional_unresolved_operand()) is not None:
            unresolved.append(first)
            while parser.parse_optional_punctuation(",") is not None:
                unresolved.append(parser.parse_unresolved_operand())
        index_pos = parser.pos
        indices: list[SSAValue] = []
        if parser.parse_optional_punctuation("[") is not None:
            if not cls.INDEX_OPERANDS:
                parser.raise_error(f"{cls.name} takes no index operands", index_pos)
            if parser.parse_optional_punctuation("]") is None:
                indices = parser.parse_comma_separated_list(
                    Parser.Delimiter.NONE,
                    lambda: parser.resolve_operand(parser.parse_unresolved_operand(), INDEX),
                )
                parser.parse_punctuation("]")
        props, attrs = cls._parse_props(parser)
        parser.parse_punctuation(":")
        types: list[Attribute] = []
        if unresolved:
            types = parser.parse_comma_separated_list(Parser.Delimiter.NONE, parser.parse_type)
            parser.parse_punctuation("->")
        result = parser.parse_type()
        if len(types) != len(unresolved):
            parser.raise_error(f"expected {len(unresolved)} operand types, got {len(types)}", pos)
        operands = [*parser.resolve_operands(unresolved, types, pos), *indices]
        try:
            cls._group_operands(operands)
        except TypeError as err:
            parser.raise_error(str(err), pos)
        return cls.create(
            operands=operands, result_types=[result], properties=props, attributes=attrs
        )


# -- binary elementwise --


def _no_bool(types: Sequence[TensorType], op: str) -> None:
    """Arithmetic is not defined on ``i1`` tensors (cast them with ``torch.to`` first)."""
    if any(is_bool(t.element_type) for t in types):
        raise VerifyException(f"{op} does not take i1 operands (cast with torch.to first)")


class BinaryOp(TorchOp):
    """Elementwise binary op with NumPy broadcasting; operands share the element type.

    ``add``, ``sub``, ``mul``, ``maximum`` and ``minimum`` also take integer tensors (not
    ``i1``); ``div`` (true division) takes floats only.
    """

    FLOAT_OPERANDS: ClassVar[bool] = False

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, lhs: SSAValue, rhs: SSAValue) -> None:
        super().__init__(lhs, rhs)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        _no_bool(types, cls.name)
        return _like(types, broadcast_shapes(*_shapes(types)))


@irdl_op_definition
class AddOp(BinaryOp):
    """``lhs + rhs`` (broadcasting)."""

    name = "torch.add"


@irdl_op_definition
class SubOp(BinaryOp):
    """``lhs - rhs`` (broadcasting)."""

    name = "torch.sub"


@irdl_op_definition
class MulOp(BinaryOp):
    """``lhs * rhs`` (broadcasting)."""

    name = "torch.mul"


@irdl_op_definition
class DivOp(BinaryOp):
    """``lhs / rhs`` (true division, broadcasting)."""

    name = "torch.div"
    FLOAT_OPERANDS: ClassVar[bool] = True


@irdl_op_definition
class MaximumOp(BinaryOp):
    """``torch.maximum(lhs, rhs)`` (NaN-propagating, broadcasting)."""

    name = "torch.maximum"


@irdl_op_definition
class MinimumOp(BinaryOp):
    """``torch.minimum(lhs, rhs)`` (NaN-propagating, broadcasting)."""

    name = "torch.minimum"


class CompareOp(TorchOp):
    """Elementwise comparison with NumPy broadcasting: operands share the element type (float
    or integer), the result is ``i1``. Floats compare as IEEE does (NaN is unequal to
    everything)."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    FLOAT_OPERANDS: ClassVar[bool] = False

    def __init__(self, lhs: SSAValue, rhs: SSAValue) -> None:
        super().__init__(lhs, rhs)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        common_element_type(types)
        return TensorType(i1, list(broadcast_shapes(*_shapes(types))))


@irdl_op_definition
class EqOp(CompareOp):
    """``lhs == rhs``."""

    name = "torch.eq"


@irdl_op_definition
class NeOp(CompareOp):
    """``lhs != rhs``."""

    name = "torch.ne"


@irdl_op_definition
class LtOp(CompareOp):
    """``lhs < rhs``."""

    name = "torch.lt"


@irdl_op_definition
class LeOp(CompareOp):
    """``lhs <= rhs``."""

    name = "torch.le"


@irdl_op_definition
class GtOp(CompareOp):
    """``lhs > rhs``."""

    name = "torch.gt"


@irdl_op_definition
class GeOp(CompareOp):
    """``lhs >= rhs``."""

    name = "torch.ge"


class LogicalOp(TorchOp):
    """Elementwise logic on ``i1`` tensors, broadcasting (other dtypes are cast to ``i1``,
    i.e. compared with zero, by ``torch.to`` first)."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    FLOAT_OPERANDS: ClassVar[bool] = False

    def __init__(self, lhs: SSAValue, rhs: SSAValue) -> None:
        super().__init__(lhs, rhs)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        if not all(is_bool(t.element_type) for t in types):
            raise VerifyException(f"{cls.name} takes i1 operands, got "
                                  + ", ".join(str(t.element_type) for t in types))
        return TensorType(i1, list(broadcast_shapes(*_shapes(types))))


@irdl_op_definition
class LogicalAndOp(LogicalOp):
    """``lhs && rhs``."""

    name = "torch.logical_and"


@irdl_op_definition
class LogicalOrOp(LogicalOp):
    """``lhs || rhs``."""

    name = "torch.logical_or"


@irdl_op_definition
class LogicalNotOp(TorchOp):
    """``!x`` on an ``i1`` tensor."""

    name = "torch.logical_not"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    FLOAT_OPERANDS: ClassVar[bool] = False

    def __init__(self, input: SSAValue) -> None:
        super().__init__(input)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        if not is_bool(types[0].element_type):
            raise VerifyException(f"torch.logical_not takes an i1 operand, got "
                                  f"{types[0].element_type}")
        return types[0]


@irdl_op_definition
class WhereOp(TorchOp):
    """``cond ? lhs : rhs`` elementwise, all three broadcasting; ``cond`` is ``i1``, the
    values share the result's element type."""

    name = "torch.where"
    cond = operand_def(TensorType)
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    FLOAT_OPERANDS: ClassVar[bool] = False

    def __init__(self, cond: SSAValue, lhs: SSAValue, rhs: SSAValue) -> None:
        super().__init__(cond, lhs, rhs)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        if not is_bool(types[0].element_type):
            raise VerifyException(f"torch.where condition must be i1, got {types[0].element_type}")
        return _like(types[1:], broadcast_shapes(*_shapes(types)))


# -- unary elementwise --


class UnaryOp(TorchOp):
    """Elementwise unary op: the result type is the input type (a float; ``neg`` also takes
    integers)."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, input: SSAValue) -> None:
        super().__init__(input)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        return types[0]


@irdl_op_definition
class NegOp(UnaryOp):
    """``-x``."""

    name = "torch.neg"
    FLOAT_OPERANDS: ClassVar[bool] = False

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        _no_bool(types, cls.name)
        return types[0]


@irdl_op_definition
class ExpOp(UnaryOp):
    """``exp(x)``."""

    name = "torch.exp"


@irdl_op_definition
class RsqrtOp(UnaryOp):
    """``1 / sqrt(x)``."""

    name = "torch.rsqrt"


@irdl_op_definition
class SqrtOp(UnaryOp):
    """``sqrt(x)``."""

    name = "torch.sqrt"


@irdl_op_definition
class SiluOp(UnaryOp):
    """``x * sigmoid(x)``."""

    name = "torch.silu"


@irdl_op_definition
class SigmoidOp(UnaryOp):
    """``1 / (1 + exp(-x))``."""

    name = "torch.sigmoid"


@irdl_op_definition
class ReluOp(UnaryOp):
    """``max(x, 0)``."""

    name = "torch.relu"


@irdl_op_definition
class TanhOp(UnaryOp):
    """``tanh(x)``."""

    name = "torch.tanh"


@irdl_op_definition
class CosOp(UnaryOp):
    """``cos(x)``."""

    name = "torch.cos"


@irdl_op_definition
class SinOp(UnaryOp):
    """``sin(x)``."""

    name = "torch.sin"


@irdl_op_definition
class PowOp(TorchOp):
    """``x ** exponent`` for a scalar float exponent."""

    name = "torch.pow"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    exponent = prop_def(FloatAttr[Float64Type])
    traits = traits_def(Pure())
    PROPS: ClassVar[PropSpec] = (("exponent", "float"),)

    def __init__(self, input: SSAValue, exponent: float) -> None:
        super().__init__(input, exponent=exponent)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        return types[0]


# -- contractions --


@irdl_op_definition
class LinearOp(TorchOp):
    """``input @ weight.T (+ bias)``: ``[..., K] x [N, K] (+ [N]) -> [..., N]``."""

    name = "torch.linear"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, input: SSAValue, weight: SSAValue, bias: SSAValue | None = None) -> None:
        super().__init__(input, weight, *([] if bias is None else [bias]))

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        shapes = _shapes(types)
        bias = shapes[2] if len(shapes) > 2 else None
        return _like(types, infer_linear(shapes[0], shapes[1], bias))


@irdl_op_definition
class MatmulOp(TorchOp):
    """``torch.matmul``: batched, with broadcast batch dims; 1-D operands as in PyTorch."""

    name = "torch.matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, lhs: SSAValue, rhs: SSAValue) -> None:
        super().__init__(lhs, rhs)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        return _like(types, infer_matmul(*_shapes(types)))


@irdl_op_definition
class BmmOp(TorchOp):
    """``[B, M, K] x [B, K, N] -> [B, M, N]``."""

    name = "torch.bmm"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, lhs: SSAValue, rhs: SSAValue) -> None:
        super().__init__(lhs, rhs)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        return _like(types, infer_bmm(*_shapes(types)))


def infer_sdpa(q: Shape, k: Shape, v: Shape, mask: Shape | None, is_causal: bool,
               enable_gqa: bool) -> Shape:
    """``scaled_dot_product_attention``: ``q: [*, L, E]``, ``k: [*, S, E]``, ``v: [*, S, Ev]``
    (batch dims broadcast) → ``[*, L, Ev]``. With ``enable_gqa`` dim -3 holds the heads:
    ``q`` has ``Hq``, ``k`` and ``v`` have ``Hkv`` dividing ``Hq`` (query head ``h`` reads
    key/value head ``h floordiv (Hq / Hkv)``). A mask must broadcast to ``[*, L, S]``."""
    if min(len(q), len(k), len(v)) < (3 if enable_gqa else 2):
        raise VerifyException(
            f"sdpa operands must have rank >= {3 if enable_gqa else 2}, got {shape_text(q)}, "
            f"{shape_text(k)}, {shape_text(v)}"
        )
    if q[-1] != k[-1]:
        raise VerifyException(f"sdpa query and key head dims differ: {q[-1]} vs {k[-1]}")
    if k[-2] != v[-2]:
        raise VerifyException(f"sdpa key and value lengths differ: {k[-2]} vs {v[-2]}")
    lead = 3 if enable_gqa else 2
    if enable_gqa:
        if k[-3] != v[-3]:
            raise VerifyException(f"sdpa key and value head counts differ: {k[-3]} vs {v[-3]}")
        if k[-3] < 1 or q[-3] % k[-3]:
            raise VerifyException(
                f"sdpa with enable_gqa: {k[-3]} key/value heads must divide {q[-3]} query heads"
            )
    batch = broadcast_shapes(q[:-lead], k[:-lead], v[:-lead])
    heads = (q[-3],) if enable_gqa else ()
    out = (*batch, *heads, q[-2], v[-1])
    if mask is not None:
        scores = (*batch, *heads, q[-2], k[-2])
        if broadcast_shapes(mask, scores) != scores:
            raise VerifyException(
                f"sdpa mask of shape {shape_text(mask)} does not broadcast to the scores "
                f"{shape_text(scores)}"
            )
        if is_causal:
            raise VerifyException("sdpa takes either a mask or is_causal, not both")
    return out


@irdl_op_definition
class SdpaOp(TorchOp):
    """``scaled_dot_product_attention``: ``softmax(q @ k^T * scale + mask) @ v``.

    ``is_causal`` masks key ``s`` out of query ``l``'s row when ``s > l`` (top-left
    aligned, as PyTorch); an ``i1`` mask keeps the scores where it is true (the others become
    ``-inf``), a float mask (the operands' type) is added. ``enable_gqa`` shares each
    key/value head among ``Hq / Hkv`` consecutive query heads (see :func:`infer_sdpa`).
    ``scale`` is explicit (PyTorch's default is ``1 / sqrt(E)``).
    """

    name = "torch.sdpa"
    query = operand_def(TensorType)
    key = operand_def(TensorType)
    value = operand_def(TensorType)
    mask = opt_operand_def(TensorType)
    result = result_def(TensorType)
    is_causal = prop_def(BoolAttr)
    scale = prop_def(FloatAttr[Float64Type])
    enable_gqa = prop_def(BoolAttr)
    traits = traits_def(Pure())
    FLOAT_OPERANDS: ClassVar[bool] = False
    PROPS: ClassVar[PropSpec] = (("is_causal", "bool"), ("scale", "float"), ("enable_gqa", "bool"))

    def __init__(self, query: SSAValue, key: SSAValue, value: SSAValue, mask: SSAValue | None,
                 *, is_causal: bool, scale: float, enable_gqa: bool) -> None:
        super().__init__(query, key, value, *([] if mask is None else [mask]),
                         is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        for k, typ in enumerate(types[:3]):
            float_tensor_type(typ, f"operand #{k}")
        shapes = _shapes(types)
        mask = None
        if len(types) > 3:
            mask = shapes[3]
            element = types[3].element_type
            if not (is_bool(element) or element == types[0].element_type):
                raise VerifyException(
                    f"sdpa mask must be i1 or {types[0].element_type}, got {element}"
                )
        shape = infer_sdpa(shapes[0], shapes[1], shapes[2], mask, props.get_bool("is_causal"),
                           props.get_bool("enable_gqa"))
        return _like(types[:3], shape)


# -- reductions and normalisations --


class ReductionOp(TorchOp):
    """Reduce over ``dims``; with ``keepdim`` the reduced dims stay with extent 1."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    dims = prop_def(DenseArrayBase)
    keepdim = prop_def(BoolAttr)
    traits = traits_def(Pure())
    PROPS: ClassVar[PropSpec] = (("dims", "ints"), ("keepdim", "bool"))

    def __init__(self, input: SSAValue, dims: Sequence[int], keepdim: bool) -> None:
        super().__init__(input, dims=list(dims), keepdim=keepdim)

    @property
    def reduced_dims(self) -> tuple[int, ...]:
        """The reduced dims as sorted non-negative indices."""
        return tuple(sorted(norm_dims(self.props.get_ints("dims"), len(shape_of(self.input)))))

    @property
    def keeps_dims(self) -> bool:
        """Whether the reduced dims stay in the result with extent 1."""
        return self.props.get_bool("keepdim")

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        shape = infer_reduce(_shapes(types)[0], props.get_ints("dims"), props.get_bool("keepdim"))
        return _like(types, shape)


@irdl_op_definition
class SumOp(ReductionOp):
    """Sum over ``dims``."""

    name = "torch.sum"


@irdl_op_definition
class MeanOp(ReductionOp):
    """Mean over ``dims``."""

    name = "torch.mean"


class ExtremumOp(ReductionOp):
    """``amax``/``amin``: like the other reductions, and they also take integer tensors
    (not ``i1``)."""

    FLOAT_OPERANDS: ClassVar[bool] = False

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        _no_bool(types, cls.name)
        return super().infer(types, props, result)


@irdl_op_definition
class AmaxOp(ExtremumOp):
    """Maximum over ``dims`` (NaN-propagating; floats or integers)."""

    name = "torch.amax"


@irdl_op_definition
class AminOp(ExtremumOp):
    """Minimum over ``dims`` (NaN-propagating; floats or integers)."""

    name = "torch.amin"


@irdl_op_definition
class SoftmaxOp(TorchOp):
    """Softmax along ``dim``."""

    name = "torch.softmax"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    dim = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure())
    PROPS: ClassVar[PropSpec] = (("dim", "int"),)

    def __init__(self, input: SSAValue, dim: int) -> None:
        super().__init__(input, dim=dim)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        norm_dim(props.get_int("dim"), types[0].get_num_dims())
        return types[0]


@irdl_op_definition
class RmsNormOp(TorchOp):
    """``x * rsqrt(mean(x**2 over the last normalized_rank dims) + eps) (* weight)``."""

    name = "torch.rms_norm"
    input = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    result = result_def(TensorType)
    normalized_rank = prop_def(IntegerAttr[I64])
    eps = prop_def(FloatAttr[Float64Type])
    traits = traits_def(Pure())
    PROPS: ClassVar[PropSpec] = (("normalized_rank", "int"), ("eps", "float"))

    def __init__(self, input: SSAValue, weight: SSAValue | None, normalized_rank: int,
                 eps: float) -> None:
        super().__init__(input, *([] if weight is None else [weight]),
                         normalized_rank=normalized_rank, eps=eps)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        shapes = _shapes(types)
        weight = shapes[1] if len(shapes) > 1 else None
        return _like(types, infer_rms_norm(shapes[0], props.get_int("normalized_rank"), weight))


# -- data movement --


@irdl_op_definition
class TransposeOp(TorchOp):
    """Swap ``dim0`` and ``dim1``."""

    name = "torch.transpose"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    dim0 = prop_def(IntegerAttr[I64])
    dim1 = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure())
    FLOAT_OPERANDS: ClassVar[bool] = False
    PROPS: ClassVar[PropSpec] = (("dim0", "int"), ("dim1", "int"))

    def __init__(self, input: SSAValue, dim0: int, dim1: int) -> None:
        super().__init__(input, dim0=dim0, dim1=dim1)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        shape = infer_transpose(_shapes(types)[0], props.get_int("dim0"), props.get_int("dim1"))
        return _like(types, shape)


@irdl_op_definition
class PermuteOp(TorchOp):
    """``result dim k = input dim dims[k]``."""

    name = "torch.permute"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    dims = prop_def(DenseArrayBase)
    traits = traits_def(Pure())
    FLOAT_OPERANDS: ClassVar[bool] = False
    PROPS: ClassVar[PropSpec] = (("dims", "ints"),)

    def __init__(self, input: SSAValue, dims: Sequence[int]) -> None:
        super().__init__(input, dims=list(dims))

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        return _like(types, infer_permute(_shapes(types)[0], props.get_ints("dims")))


def _given(result: TensorType | None, op: str) -> TensorType:
    if result is None:
        raise TypeError(f"{op} needs an explicit result type")
    return result


@irdl_op_definition
class ReshapeOp(TorchOp):
    """View/reshape/flatten: row-major reinterpretation; the result type gives the shape, and
    each ``?`` of it is an ``index`` operand (``torch.reshape %x [%n] : tensor<1x?x64xf32> ->
    tensor<?xf32>``, ``%n`` the number of elements)."""

    name = "torch.reshape"
    input = operand_def(TensorType)
    sizes = var_operand_def(IndexType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    FLOAT_OPERANDS: ClassVar[bool] = False
    INDEX_OPERANDS: ClassVar[bool] = True

    def __init__(self, input: SSAValue, shape: Sequence[int],
                 sizes: Sequence[SSAValue] = ()) -> None:
        element = tensor_type(input).element_type
        super().__init__(input, *sizes, result_type=TensorType(element, list(shape)))

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        out = tuple(_given(result, cls.name).get_shape())
        src = _shapes(types)[0]
        if any(is_dynamic(e) for e in (*src, *out)):
            return _like(types, out)  # the element counts are checked when the program runs
        if math.prod(src) != math.prod(out):
            raise VerifyException(
                f"cannot reshape {shape_text(src)} ({math.prod(src)} elements) to "
                f"{shape_text(out)} ({math.prod(out)} elements)"
            )
        return _like(types, out)


@irdl_op_definition
class UnsqueezeOp(TorchOp):
    """Insert a unit dim at ``dim``."""

    name = "torch.unsqueeze"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    dim = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure())
    FLOAT_OPERANDS: ClassVar[bool] = False
    PROPS: ClassVar[PropSpec] = (("dim", "int"),)

    def __init__(self, input: SSAValue, dim: int) -> None:
        super().__init__(input, dim=dim)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        return _like(types, infer_unsqueeze(_shapes(types)[0], props.get_int("dim")))


@irdl_op_definition
class ExpandOp(TorchOp):
    """Broadcast to the result type's shape (unit dims stretch, new dims on the left); each
    ``?`` of the result is an ``index`` operand."""

    name = "torch.expand"
    input = operand_def(TensorType)
    sizes = var_operand_def(IndexType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    FLOAT_OPERANDS: ClassVar[bool] = False
    INDEX_OPERANDS: ClassVar[bool] = True

    def __init__(self, input: SSAValue, shape: Sequence[int],
                 sizes: Sequence[SSAValue] = ()) -> None:
        element = tensor_type(input).element_type
        super().__init__(input, *sizes, result_type=TensorType(element, list(shape)))

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        out = tuple(_given(result, cls.name).get_shape())
        check_expand(_shapes(types)[0], out)
        return _like(types, out)


def _verify_bounds(op: TorchOp, what: str) -> None:
    """A slice's bounds are the ``start``/``end`` properties or two ``index`` operands."""
    dynamic = not op.props.has("start")
    if len(op.index_operands) != (2 if dynamic else 0):
        raise VerifyException(
            f"{what} takes its bounds either as properties or as two index operands "
            f"[start, end], got {len(op.index_operands)} index operand(s)"
            + ("" if dynamic else " beside the properties")
        )


@irdl_op_definition
class SliceOp(TorchOp):
    """``input[..., start:end:step, ...]`` along ``dim`` (``0 <= start <= end <= extent``).

    The bounds are properties, or two ``index`` operands ``[start, end]`` (then the sliced
    extent is ``?`` and the bounds are checked when the program runs): ``torch.slice %x
    [%s, %e] {dim = 1, step = 1} : tensor<1x?x8xf32> -> tensor<1x?x8xf32>``."""

    name = "torch.slice"
    input = operand_def(TensorType)
    sizes = var_operand_def(IndexType)
    result = result_def(TensorType)
    dim = prop_def(IntegerAttr[I64])
    start = opt_prop_def(IntegerAttr[I64])
    end = opt_prop_def(IntegerAttr[I64])
    step = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure())
    FLOAT_OPERANDS: ClassVar[bool] = False
    INDEX_OPERANDS: ClassVar[bool] = True
    PROPS: ClassVar[PropSpec] = (("dim", "int"), ("start", "int"), ("end", "int"), ("step", "int"))
    OPTIONAL_PROPS: ClassVar[frozenset[str]] = frozenset({"start", "end"})

    def __init__(self, input: SSAValue, dim: int, start: int | SSAValue, end: int | SSAValue,
                 step: int = 1) -> None:
        if isinstance(start, SSAValue) != isinstance(end, SSAValue):
            raise TypeError("slice bounds are both ints or both index values")
        if isinstance(start, SSAValue) and isinstance(end, SSAValue):
            super().__init__(input, start, end, dim=dim, step=step)
        else:
            super().__init__(input, dim=dim, start=start, end=end, step=step)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        bounds = [props.get_int(n) if props.has(n) else None for n in ("start", "end")]
        shape = infer_slice(_shapes(types)[0], props.get_int("dim"), bounds[0], bounds[1],
                            props.get_int("step"))
        return _like(types, shape)

    def verify_index_operands(self) -> None:
        _verify_bounds(self, "slice")


def infer_slice_scatter(base: Shape, src: Shape, dim: int, start: int | None,
                        end: int | None) -> Shape:
    """``slice_scatter``: ``base`` with ``base[..., start:end, ...] = src`` along ``dim``
    (the result has ``base``'s shape). ``src`` matches ``base`` in every other dim and has
    extent ``end - start`` along ``dim`` when the bounds are properties (with ``index``
    bounds the extent is checked when the program runs)."""
    d = norm_dim(dim, len(base))
    if len(src) != len(base):
        raise VerifyException(f"slice_scatter source {shape_text(src)} must have the rank of "
                              f"the base {shape_text(base)}")
    for k, (b, s) in enumerate(zip(base, src, strict=True)):
        if k != d and b != s:
            raise VerifyException(f"slice_scatter source {shape_text(src)} differs from the "
                                  f"base {shape_text(base)} in dim {k}, not only in dim {d}")
    if (start is None) != (end is None):
        raise VerifyException("slice_scatter bounds are both properties or both index operands")
    if start is not None and end is not None:
        if is_dynamic(base[d]):
            raise VerifyException(f"slice_scatter along the ? extent of dim {d} takes its "
                                  "bounds as index operands, not properties")
        if not 0 <= start < end <= base[d]:
            raise VerifyException(f"slice_scatter bounds must satisfy 0 <= start ({start}) < "
                                  f"end ({end}) <= {base[d]}")
        if not is_dynamic(src[d]) and src[d] != end - start:
            raise VerifyException(f"slice_scatter source has extent {src[d]} in dim {d}, the "
                                  f"bounds [{start}, {end}) hold {end - start}")
    return tuple(base)


@irdl_op_definition
class SliceScatterOp(TorchOp):
    """``base`` with the slice ``start:end`` along ``dim`` replaced by ``src`` (step 1):
    PyTorch's ``slice_scatter``, and what ``torch.export`` makes of an in-place write into a
    slice (``cache[-1] = k``, ``x[:, 2:4].copy_(y)``). The result has ``base``'s type.

    The bounds are properties, or two ``index`` operands ``[start, end]`` (a write at a
    runtime offset, checked when the program runs): ``torch.slice_scatter %cache, %k [%s,
    %e] {dim = 0} : tensor<?x4x16xf32>, tensor<1x4x16xf32> -> tensor<?x4x16xf32>``. Lowered
    in place when ``base`` has no other use (see ``prim.insert``)."""

    name = "torch.slice_scatter"
    input = operand_def(TensorType)
    src = operand_def(TensorType)
    sizes = var_operand_def(IndexType)
    result = result_def(TensorType)
    dim = prop_def(IntegerAttr[I64])
    start = opt_prop_def(IntegerAttr[I64])
    end = opt_prop_def(IntegerAttr[I64])
    traits = traits_def(Pure())
    FLOAT_OPERANDS: ClassVar[bool] = False
    INDEX_OPERANDS: ClassVar[bool] = True
    PROPS: ClassVar[PropSpec] = (("dim", "int"), ("start", "int"), ("end", "int"))
    OPTIONAL_PROPS: ClassVar[frozenset[str]] = frozenset({"start", "end"})

    def __init__(self, input: SSAValue, src: SSAValue, dim: int, start: int | SSAValue,
                 end: int | SSAValue) -> None:
        if isinstance(start, SSAValue) != isinstance(end, SSAValue):
            raise TypeError("slice_scatter bounds are both ints or both index values")
        if isinstance(start, SSAValue) and isinstance(end, SSAValue):
            super().__init__(input, src, start, end, dim=dim)
        else:
            super().__init__(input, src, dim=dim, start=start, end=end)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        bounds = [props.get_int(n) if props.has(n) else None for n in ("start", "end")]
        base, src = _shapes(types)
        shape = infer_slice_scatter(base, src, props.get_int("dim"), bounds[0], bounds[1])
        return _like(types, shape)

    def verify_index_operands(self) -> None:
        _verify_bounds(self, "slice_scatter")


@irdl_op_definition
class CatOp(TorchOp):
    """Concatenate the inputs along ``dim``."""

    name = "torch.cat"
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    dim = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure())
    FLOAT_OPERANDS: ClassVar[bool] = False
    PROPS: ClassVar[PropSpec] = (("dim", "int"),)

    def __init__(self, inputs: Sequence[SSAValue], dim: int) -> None:
        super().__init__(*inputs, dim=dim)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        return _like(types, infer_cat(_shapes(types), props.get_int("dim")))


def infer_embedding(weight: Shape, indices: Shape) -> Shape:
    """``embedding``: rows of ``weight: [V, H]`` picked by ``indices: [*]`` → ``[*, H]``."""
    if len(weight) != 2:
        raise VerifyException(f"embedding weight must have rank 2, got {shape_text(weight)}")
    return (*indices, weight[1])


@irdl_op_definition
class EmbeddingOp(TorchOp):
    """``weight[indices]``: row ``indices[c]`` of ``weight: [V, H]`` for every coordinate
    ``c`` of the integer tensor ``indices`` (an index outside ``[0, V)`` is an error)."""

    name = "torch.embedding"
    weight = operand_def(TensorType)
    indices = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    FLOAT_OPERANDS: ClassVar[bool] = False

    def __init__(self, weight: SSAValue, indices: SSAValue) -> None:
        super().__init__(weight, indices)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        element = types[1].element_type
        if not is_int(element) or is_bool(element):
            raise VerifyException(f"embedding indices must be integers, got {element}")
        shape = infer_embedding(*_shapes(types))
        return TensorType(types[0].element_type, list(shape))


@irdl_op_definition
class ArangeOp(TorchOp):
    """``[start, start + step, ...]`` below ``end`` (above it for a negative step), as a 1-D
    tensor of the result's element type: ``torch.arange {start = 0, end = 7, step = 1} :
    tensor<7xi64>``. With a ``?`` extent there is no ``end``: the extent is an ``index``
    operand, ``torch.arange [%seq] {start = 0, step = 1} : tensor<?xi64>``."""

    name = "torch.arange"
    sizes = var_operand_def(IndexType)
    result = result_def(TensorType)
    start = prop_def(IntegerAttr[I64])
    end = opt_prop_def(IntegerAttr[I64])
    step = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure())
    FLOAT_OPERANDS: ClassVar[bool] = False
    INDEX_OPERANDS: ClassVar[bool] = True
    PROPS: ClassVar[PropSpec] = (("start", "int"), ("end", "int"), ("step", "int"))
    OPTIONAL_PROPS: ClassVar[frozenset[str]] = frozenset({"end"})

    def __init__(self, start: int, end: int | SSAValue, step: int,
                 element_type: Attribute) -> None:
        """``end`` is an int, or (for a ``?`` extent) the ``index`` value of the extent."""
        if isinstance(end, SSAValue):
            super().__init__(end, result_type=TensorType(element_type, [DYNAMIC_INDEX]),
                             start=start, step=step)
            return
        extent = max(0, -(-(end - start) // step)) if step else 0
        super().__init__(result_type=TensorType(element_type, [extent]), start=start, end=end,
                         step=step)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        out = tensor_type(_given(result, cls.name), "result")
        start, step = props.get_int("start"), props.get_int("step")
        if step == 0:
            raise VerifyException("arange step must not be 0")
        if is_bool(out.element_type):
            raise VerifyException("arange cannot produce i1")
        if not props.has("end"):
            if out.get_num_dims() != 1 or not is_dynamic(out.get_shape()[0]):
                raise VerifyException("arange without end has a ? extent (an index operand)")
            return out
        end = props.get_int("end")
        extent = max(0, -(-(end - start) // step))
        return TensorType(out.element_type, [extent])


@irdl_op_definition
class ToOp(TorchOp):
    """Cast to the result's element type (same shape), as PyTorch converts: floats to
    integers truncate toward zero, anything to ``i1`` is ``x != 0``, ``i1`` is 0 or 1."""

    name = "torch.to"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    FLOAT_OPERANDS: ClassVar[bool] = False

    def __init__(self, input: SSAValue, element_type: Attribute) -> None:
        shape = tensor_type(input).get_shape()
        super().__init__(input, result_type=TensorType(element_type, shape))

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        return TensorType(_given(result, cls.name).element_type, types[0].get_shape())


@irdl_op_definition
class ConstantOp(TorchOp):
    """A rank-0 tensor holding a scalar: ``torch.constant 1.0e-05 : tensor<f32>``,
    ``torch.constant 3.0 : tensor<i64>`` (an integer type needs an integral value)."""

    name = "torch.constant"
    result = result_def(TensorType)
    value = prop_def(FloatAttr[Float64Type])
    traits = traits_def(Pure())
    FLOAT_OPERANDS: ClassVar[bool] = False
    PROPS: ClassVar[PropSpec] = (("value", "float"),)

    def __init__(self, value: float, element_type: Attribute | None = None) -> None:
        element = Float32Type() if element_type is None else element_type
        super().__init__(result_type=TensorType(element, []), value=value)

    @property
    def scalar(self) -> float:
        return self.props.get_float("value")

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props, result: TensorType | None
              ) -> TensorType:
        out = tensor_type(_given(result, cls.name), "result")
        if out.get_shape():
            raise VerifyException(f"torch.constant must have rank 0, got {out}")
        value = props.get_float("value")
        if is_int(out.element_type) and not (math.isfinite(value) and value == int(value)):
            raise VerifyException(f"torch.constant of type {out.element_type} needs an integral "
                                  f"value, got {format_float(value)}")
        return out

    def print(self, printer: Printer) -> None:
        printer.print_string(" " + format_float(self.scalar))
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> ConstantOp:
        value = _parse_float_literal(parser)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        result = parser.parse_type()
        return cls.create(
            result_types=[result], properties={"value": FloatAttr(value, f64)}, attributes=attrs
        )


INDEX = IndexType()

_OPS: list[type[TorchOp]] = [
    LinearOp, MatmulOp, BmmOp, SdpaOp,
    AddOp, SubOp, MulOp, DivOp, MaximumOp, MinimumOp,
    EqOp, NeOp, LtOp, LeOp, GtOp, GeOp, LogicalAndOp, LogicalOrOp, LogicalNotOp, WhereOp,
    NegOp, ExpOp, RsqrtOp, SqrtOp, SiluOp, SigmoidOp, ReluOp, TanhOp, CosOp, SinOp, PowOp,
    SumOp, MeanOp, AmaxOp, AminOp, SoftmaxOp, RmsNormOp,
    TransposeOp, PermuteOp, ReshapeOp, UnsqueezeOp, ExpandOp, SliceOp, SliceScatterOp, CatOp,
    EmbeddingOp, ToOp, ConstantOp, ArangeOp,
]  # fmt: skip

Torch = Dialect("torch", list(_OPS), [])

UNARY_OPS: dict[str, type[UnaryOp]] = {
    op.name.removeprefix("torch."): op
    for op in (NegOp, ExpOp, RsqrtOp, SqrtOp, SiluOp, SigmoidOp, ReluOp, TanhOp, CosOp, SinOp)
}
"""Unary ops by short name (``"exp"`` → :class:`ExpOp`)."""

BINARY_OPS: dict[str, type[BinaryOp]] = {
    op.name.removeprefix("torch."): op
    for op in (AddOp, SubOp, MulOp, DivOp, MaximumOp, MinimumOp)
}
"""Binary ops by short name (``"add"`` → :class:`AddOp`)."""

COMPARE_OPS: dict[str, type[CompareOp]] = {
    op.name.removeprefix("torch."): op for op in (EqOp, NeOp, LtOp, LeOp, GtOp, GeOp)
}
"""Comparisons by short name (``"le"`` → :class:`LeOp`)."""

__all__ = [
    "Torch", "TorchOp", "BinaryOp", "UnaryOp", "ReductionOp", "ExtremumOp", "CompareOp",
    "LogicalOp", "Props",
    *[op.__name__ for op in _OPS],
    "FLOAT_TYPES", "INT_WIDTHS", "UNARY_OPS", "BINARY_OPS", "COMPARE_OPS", "broadcast_shapes",
    "common_element_type", "is_float", "is_int", "is_bool", "float_tensor_type",
    "infer_sdpa", "infer_embedding",
    "format_float", "norm_dim", "norm_dims", "shape_of", "tensor_type", "infer_matmul",
    "infer_bmm", "infer_linear", "infer_reduce", "infer_transpose", "infer_permute",
    "infer_unsqueeze", "check_expand", "infer_slice", "infer_cat", "infer_rms_norm",
]  # fmt: skip
