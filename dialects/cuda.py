"""CUDA IR (level 6): the ``cuda`` dialect — a C/CUDA syntax tree.

A module at this level holds ``cuda.include`` directives, the ``cuda.tensor_map_struct``
declaration where a kernel takes Hopper tensor maps (``!cuda.tensor_map<…>`` parameters), and
``cuda.kernel`` functions (next to the host ``func.func`` that launches them). The source
text is the printout of these ops (:func:`llmopt.codegen.cuda_printer.print_cuda`); every
decision about the text — names, types, qualifiers, parenthesised structure — is already
made here, and the printer only spells it.

Two kinds of ops live inside a kernel:

* **Expressions** produce one SSA value typed with a builtin scalar type (``i1``, ``i8`` …
  ``i64``, ``ui8`` … ``ui64``, ``index`` = ``long long``, ``f16``, ``bf16``, ``f32``,
  ``f64``), a CUDA vector type ``!cuda.vec<f32, 4>`` (``float4``: the value of a 16-byte
  load or store through a reinterpreted pointer), a pointer type ``!cuda.ptr<f32>`` /
  ``!cuda.ptr<f32, const>`` / ``!cuda.ptr<!cuda.vec<f32, 4>>`` or ``!cuda.void`` (the value
  of a call to a ``void`` function). An expression has exactly one use, by an op of
  the same block, and only expressions stand between the two: a statement and the expression
  ops right before it are one tree, printed as one nested C expression and evaluated where the
  statement stands. ``cuda.var``, ``cuda.literal``, ``cuda.builtin``, ``cuda.binary``,
  ``cuda.unary``, ``cuda.cast``, ``cuda.ternary``, ``cuda.call``, ``cuda.index``.
* **Statements** consume expressions: ``cuda.decl``, ``cuda.assign``, ``cuda.for``,
  ``cuda.if``, ``cuda.expr_stmt``.

Expression ops carry no ``Pure`` trait on purpose: CSE would merge two equal subtrees into
one value with two uses, which is no longer a tree. ``cuda.kernel`` checks its names: every
``cuda.var`` refers to a parameter or a declaration in scope and has its declared type, no
name is declared twice in one scope, and only mutable variables and non-``const`` pointees
are assigned to.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    FunctionType,
    IndexType,
    IntAttr,
    IntegerAttr,
    IntegerType,
    MemRefType,
    Signedness,
    StringAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import (
    Attribute,
    Block,
    Dialect,
    Operation,
    ParametrizedAttribute,
    Region,
    SSAValue,
    TypeAttribute,
)
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import IsolatedFromAbove, NoTerminator, SymbolOpInterface
from xdsl.utils.exceptions import VerifyException

from llmopt.dialects._syntax import parse_i64, parse_optional_i64
from llmopt.target import MAX_CLUSTER, MAX_THREADS_PER_BLOCK

# --------------------------------------------------------------------------------------------
# Types
# --------------------------------------------------------------------------------------------


@irdl_attr_definition
class PtrType(ParametrizedAttribute, TypeAttribute):
    """``!cuda.ptr<f32>`` (``float*``) or ``!cuda.ptr<f32, const>`` (``const float*``); also
    ``!cuda.ptr<!cuda.tensor_map<…>, const>``, the address of a tensor-map parameter."""

    name = "cuda.ptr"

    element: Attribute
    constant: IntAttr

    def __init__(self, element: Attribute, constant: bool = False) -> None:
        super().__init__(element, IntAttr(int(constant)))

    @property
    def is_const(self) -> bool:
        """Whether the pointee is ``const``."""
        return bool(self.constant.data)

    def verify(self) -> None:
        if not (is_scalar(self.element) or isinstance(self.element, VecType | TensorMapType)):
            raise VerifyException(f"!cuda.ptr points to a scalar or vector type, not "
                                  f"{self.element}")
        if self.constant.data not in (0, 1):
            raise VerifyException("!cuda.ptr const flag must be 0 or 1")

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_attribute(self.element)
            if self.is_const:
                printer.print_string(", const")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> tuple[Attribute, IntAttr]:
        with parser.in_angle_brackets():
            element = parser.parse_type()
            constant = False
            if parser.parse_optional_punctuation(",") is not None:
                parser.parse_keyword("const")
                constant = True
        return (element, IntAttr(int(constant)))


#: element types that have CUDA vector types, and their C prefixes (``float`` → ``float4``)
VECTOR_ELEMENTS = {"f32": "float", "i32": "int", "ui32": "uint"}
VECTOR_COUNTS = (2, 4)


@irdl_attr_definition
class VecType(ParametrizedAttribute, TypeAttribute):
    """``!cuda.vec<f32, 4>``: one of CUDA's built-in vector types (``float4``, ``int2``,
    ``uint4`` …), whose alignment is its size. Values of it are only moved, whole: read
    through a pointer to it and assigned through another, which makes one 8- or 16-byte
    memory access."""

    name = "cuda.vec"

    element: Attribute
    count: IntAttr

    def __init__(self, element: Attribute, count: int) -> None:
        super().__init__(element, IntAttr(count))

    @property
    def c_name(self) -> str:
        """The CUDA spelling, ``float4``."""
        return f"{VECTOR_ELEMENTS[str(self.element)]}{self.count.data}"

    def verify(self) -> None:
        if str(self.element) not in VECTOR_ELEMENTS:
            raise VerifyException(f"!cuda.vec elements are one of {sorted(VECTOR_ELEMENTS)}, "
                                  f"not {self.element}")
        if self.count.data not in VECTOR_COUNTS:
            raise VerifyException(f"!cuda.vec has 2 or 4 elements, not {self.count.data}")

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_attribute(self.element)
            printer.print_string(f", {self.count.data}")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> tuple[Attribute, IntAttr]:
        with parser.in_angle_brackets():
            element = parser.parse_type()
            parser.parse_punctuation(",")
            count = parse_i64(parser)
        return (element, IntAttr(count))


TENSOR_MAP_STRUCT = "llmopt_tensor_map"
"""The C name of a tensor map's type (:class:`TensorMapType`, :class:`TensorMapStructOp`)."""
TENSOR_MAP_BYTES = 128
"""The bytes of a tensor map (``CUtensorMap``)."""
TENSOR_MAP_ALIGN = 64
"""The alignment of a tensor map, which the driver and ``cp.async.bulk.tensor`` need."""


@irdl_attr_definition
class TensorMapType(ParametrizedAttribute, TypeAttribute):
    """``!cuda.tensor_map<arg 0 : memref<1x512x3584xbf16>, box [1, 128, 64], swizzle 128>``:
    a Hopper tensor map (``CUtensorMap``, 128 opaque bytes, spelled
    ``llmopt_tensor_map``) passed by value as a ``const __grid_constant__`` kernel
    parameter. The parameters say what the host encodes into it at each launch
    (:mod:`llmopt.codegen.tensor_map`): the buffer the launch passes as argument ``arg``,
    of the memref type given (element type, shape, strides), read in boxes of extents
    ``box`` (one per dimension of the buffer) with the shared-memory swizzle ``swizzle``
    (bytes, 0 for none). A kernel only takes its address, for ``cp.async.bulk.tensor``."""

    name = "cuda.tensor_map"

    arg: IntAttr
    buffer: MemRefType
    box: ArrayAttr[IntAttr]
    swizzle: IntAttr

    def __init__(self, arg: int, buffer: MemRefType, box: Sequence[int], swizzle: int) -> None:
        super().__init__(IntAttr(arg), buffer, ArrayAttr([IntAttr(b) for b in box]),
                         IntAttr(swizzle))

    @property
    def box_shape(self) -> tuple[int, ...]:
        """The box's extent in each dimension of the buffer."""
        return tuple(b.data for b in self.box.data)

    def verify(self) -> None:
        rank = self.buffer.get_num_dims()
        if self.arg.data < 0:
            raise VerifyException(f"!cuda.tensor_map argument {self.arg.data} is negative")
        if len(self.box.data) != rank:
            raise VerifyException(f"!cuda.tensor_map: a box of {len(self.box.data)} extents "
                                  f"for a rank-{rank} buffer")
        if any(b.data < 1 for b in self.box.data):
            raise VerifyException(f"!cuda.tensor_map: box extents {list(self.box_shape)} "
                                  "must be positive")
        if self.swizzle.data not in (0, 32, 64, 128):
            raise VerifyException(f"!cuda.tensor_map: swizzle {self.swizzle.data} is not 0, "
                                  "32, 64 or 128 bytes")

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string(f"arg {self.arg.data} : ")
            printer.print_attribute(self.buffer)
            printer.print_string(f", box [{', '.join(map(str, self.box_shape))}], "
                                 f"swizzle {self.swizzle.data}")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> tuple[Attribute, ...]:
        with parser.in_angle_brackets():
            parser.parse_keyword("arg")
            arg = parse_i64(parser)
            parser.parse_punctuation(":")
            buffer = parser.parse_type()
            if not isinstance(buffer, MemRefType):
                parser.raise_error(f"!cuda.tensor_map describes a memref, not {buffer}")
            parser.parse_punctuation(",")
            parser.parse_keyword("box")
            box = parser.parse_comma_separated_list(parser.Delimiter.SQUARE,
                                                    lambda: parse_i64(parser))
            parser.parse_punctuation(",")
            parser.parse_keyword("swizzle")
            swizzle = parse_i64(parser)
        return (IntAttr(arg), buffer, ArrayAttr([IntAttr(b) for b in box]), IntAttr(swizzle))


@irdl_attr_definition
class VoidType(ParametrizedAttribute, TypeAttribute):
    """``!cuda.void``: the type of a call to a function returning ``void``."""

    name = "cuda.void"


_INT_WIDTHS = (8, 16, 32, 64)


def is_bool(t: Attribute) -> bool:
    """``i1``, spelled ``bool``."""
    return isinstance(t, IntegerType) and t.width.data == 1 and (
        t.signedness.data == Signedness.SIGNLESS
    )


def is_integer(t: Attribute) -> bool:
    """``index`` or an 8/16/32/64-bit integer type (not ``i1``)."""
    return isinstance(t, IndexType) or (
        isinstance(t, IntegerType) and t.width.data in _INT_WIDTHS
    )


def is_unsigned(t: Attribute) -> bool:
    """An unsigned integer type (``ui32`` …)."""
    return isinstance(t, IntegerType) and t.signedness.data == Signedness.UNSIGNED


def is_float(t: Attribute) -> bool:
    """``f16``, ``bf16``, ``f32`` or ``f64``."""
    return isinstance(t, Float16Type | BFloat16Type | Float32Type | Float64Type)


def is_scalar(t: Attribute) -> bool:
    """A type a C scalar variable can have."""
    return is_bool(t) or is_integer(t) or is_float(t)


def is_value_type(t: Attribute) -> bool:
    """A type a variable or a non-void expression can have: a scalar, a vector or a
    pointer."""
    return is_scalar(t) or isinstance(t, PtrType | VecType)


# --------------------------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------------------------

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

#: C/C++ keywords and literals: never a variable or parameter name.
KEYWORDS = frozenset(
    """
    alignas alignof and asm auto bool break case catch char char16_t char32_t class const
    const_cast constexpr continue decltype default delete do double dynamic_cast else enum
    explicit export extern false float for friend goto if inline int long mutable namespace new
    noexcept not nullptr operator or private protected public register reinterpret_cast restrict
    return short signed sizeof static static_assert static_cast struct switch template this
    thread_local throw true try typedef typeid typename union unsigned using virtual void
    volatile wchar_t while xor
    """.split()
)

#: Built-in variables of CUDA C: ``cuda.builtin`` names and their types.
BUILTINS: dict[str, Attribute] = {
    **{
        f"{var}.{dim}": IntegerType(32, Signedness.UNSIGNED)
        for var in ("threadIdx", "blockIdx", "blockDim", "gridDim")
        for dim in ("x", "y", "z")
    },
    "warpSize": IntegerType(32),
}


def check_identifier(name: str, what: str) -> None:
    """Raise unless ``name`` is a C identifier that is not a keyword."""
    if not _IDENTIFIER.match(name):
        raise VerifyException(f"{what} '{name}' is not a C identifier")
    if name in KEYWORDS:
        raise VerifyException(f"{what} '{name}' is a C++ keyword")


# --------------------------------------------------------------------------------------------
# Expressions
# --------------------------------------------------------------------------------------------

#: Binary operators, by kind.
ARITHMETIC_OPERATORS = ("+", "-", "*", "/")
INTEGER_OPERATORS = ("%", "<<", ">>")
BITWISE_OPERATORS = ("&", "|", "^")
LOGICAL_OPERATORS = ("&&", "||")
COMPARISON_OPERATORS = ("==", "!=", "<", "<=", ">", ">=")
BINARY_OPERATORS = (
    ARITHMETIC_OPERATORS + INTEGER_OPERATORS + BITWISE_OPERATORS + LOGICAL_OPERATORS
    + COMPARISON_OPERATORS
)
UNARY_OPERATORS = ("-", "!", "~", "&")


def _statement_parent(op: Operation) -> None:
    parent = op.parent_op()
    if not isinstance(parent, KernelOp | ForOp | IfOp):
        raise VerifyException(
            f"'{op.name}' must sit inside a cuda.kernel, cuda.for or cuda.if body"
        )


def _expression_operands(op: Operation) -> None:
    for operand in op.operands:
        if not isinstance(operand.owner, ExpressionOp):
            raise VerifyException(
                f"'{op.name}' operands must be cuda expressions, got a value defined by "
                f"{_describe_owner(operand)}"
            )


def _describe_owner(value: SSAValue) -> str:
    owner = value.owner
    return f"'{owner.name}'" if isinstance(owner, Operation) else "a block argument"


class ExpressionOp(IRDLOperation):
    """Base of the expression ops: one result, used exactly once, by the same tree."""

    def verify_(self) -> None:
        _statement_parent(self)
        _expression_operands(self)
        (result,) = self.results
        uses = list(result.uses)
        if len(uses) != 1:
            raise VerifyException(
                f"'{self.name}' must have exactly one use (it prints as a subexpression), "
                f"has {len(uses)}"
            )
        user = uses[0].operation
        if user.parent is not self.parent:
            raise VerifyException(f"'{self.name}' must be used in its own block")
        op = self.next_op
        while op is not user:
            if op is None:
                raise VerifyException(f"'{self.name}' is used before it is defined")
            if not isinstance(op, ExpressionOp):
                raise VerifyException(
                    f"'{self.name}' and its user are separated by the statement '{op.name}'"
                )
            op = op.next_op
        self.verify_expression()

    def verify_expression(self) -> None:
        """Check the types; overridden by each expression op."""


def _print_type_suffix(printer: Printer, op: Operation, typ: Attribute) -> None:
    printer.print_op_attributes(op.attributes)
    printer.print_string(" : ")
    printer.print_attribute(typ)


@irdl_op_definition
class VarOp(ExpressionOp):
    """``%v = cuda.var acc : f32``: the variable or parameter ``acc`` (an lvalue). A
    tensor-map parameter (:class:`TensorMapType`) is named only to take its address."""

    name = "cuda.var"
    var_name = prop_def(StringAttr)
    result = result_def()

    def __init__(self, var_name: str, typ: Attribute) -> None:
        super().__init__(result_types=[typ], properties={"var_name": StringAttr(var_name)})

    def verify_expression(self) -> None:
        check_identifier(self.var_name.data, "variable")
        if isinstance(self.result.type, TensorMapType):
            users = [use.operation for use in self.result.uses]
            if not all(isinstance(u, UnaryOp) and u.operator.data == "&" for u in users):
                raise VerifyException(f"tensor map '{self.var_name.data}' is only read by "
                                      "its address ('&')")
        elif not is_value_type(self.result.type):
            raise VerifyException(f"a variable has a scalar or pointer type, not "
                                  f"{self.result.type}")

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.var_name.data}")
        _print_type_suffix(printer, self, self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> VarOp:
        name = parser.parse_identifier()
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        op = cls(name, parser.parse_type())
        op.attributes |= attrs
        return op


@irdl_op_definition
class LiteralOp(ExpressionOp):
    """``%c = cuda.literal 1.500000e+00 : f32``: a typed numeric or boolean literal."""

    name = "cuda.literal"
    value = prop_def(IntegerAttr | FloatAttr)
    result = result_def()

    def __init__(self, value: IntegerAttr | FloatAttr) -> None:
        super().__init__(result_types=[value.type], properties={"value": value})

    def verify_expression(self) -> None:
        typ = self.value.type
        if not is_scalar(typ):
            raise VerifyException(f"a literal has a scalar type, not {typ}")
        if isinstance(self.value, FloatAttr) != is_float(typ):
            raise VerifyException("float literals have float types, integer ones integer types")
        if self.result.type != typ:
            raise VerifyException("result type must be the literal's type")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_attribute(self.value)
        if is_bool(self.value.type):
            printer.print_string(" : i1")
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> LiteralOp:
        if (flag := parser.parse_optional_boolean()) is not None:
            parser.parse_punctuation(":")
            typ = parser.parse_type()
            if not is_bool(typ):
                parser.raise_error(f"'{str(flag).lower()}' is an i1 literal, not {typ}")
            value: Attribute = IntegerAttr(int(flag), typ)
        else:
            value = parser.parse_attribute()
        if not isinstance(value, IntegerAttr | FloatAttr):
            parser.raise_error(f"expected a typed integer or float literal, got {value}")
        op = cls(value)
        op.attributes |= parser.parse_optional_attr_dict()
        return op


@irdl_op_definition
class BuiltinOp(ExpressionOp):
    """``%t = cuda.builtin threadIdx.x : ui32``: a CUDA built-in variable."""

    name = "cuda.builtin"
    builtin = prop_def(StringAttr)
    result = result_def()

    def __init__(self, builtin: str) -> None:
        if builtin not in BUILTINS:
            raise ValueError(f"unknown CUDA built-in '{builtin}'")
        super().__init__(result_types=[BUILTINS[builtin]],
                         properties={"builtin": StringAttr(builtin)})

    def verify_expression(self) -> None:
        expected = BUILTINS.get(self.builtin.data)
        if expected is None:
            raise VerifyException(
                f"unknown CUDA built-in '{self.builtin.data}' (known: {', '.join(BUILTINS)})"
            )
        if self.result.type != expected:
            raise VerifyException(f"'{self.builtin.data}' has type {expected}")

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.builtin.data}")
        _print_type_suffix(printer, self, self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> BuiltinOp:
        pos = parser.pos
        name = parser.parse_identifier()
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        if name not in BUILTINS:
            parser.raise_error(f"unknown CUDA built-in '{name}'", pos, parser.pos)
        op = cls(name)
        if typ != op.result.type:
            parser.raise_error(f"'{name}' has type {op.result.type}, not {typ}")
        op.attributes |= attrs
        return op


def binary_result_type(operator: str, operand: Attribute) -> Attribute:
    """The type of ``a <operator> b`` for operands of type ``operand``."""
    if operator in COMPARISON_OPERATORS or operator in LOGICAL_OPERATORS:
        return IntegerType(1)
    return operand


@irdl_op_definition
class BinaryOp(ExpressionOp):
    """``%r = cuda.binary "+" %a, %b : f32``: both operands have the printed type; comparisons
    and ``&&``/``||`` give ``i1``, the other operators the operand type."""

    name = "cuda.binary"
    operator = prop_def(StringAttr)
    lhs = operand_def()
    rhs = operand_def()
    result = result_def()

    def __init__(self, operator: str, lhs: SSAValue, rhs: SSAValue) -> None:
        super().__init__(operands=[lhs, rhs],
                         result_types=[binary_result_type(operator, lhs.type)],
                         properties={"operator": StringAttr(operator)})

    def verify_expression(self) -> None:
        op, typ = self.operator.data, self.lhs.type
        if op not in BINARY_OPERATORS:
            raise VerifyException(f"unknown binary operator '{op}'")
        if self.rhs.type != typ:
            raise VerifyException(f"operands of '{op}' differ in type: {typ} and {self.rhs.type}")
        if op in LOGICAL_OPERATORS:
            ok = is_bool(typ)
        elif op in BITWISE_OPERATORS:
            ok = is_bool(typ) or is_integer(typ)
        elif op in INTEGER_OPERATORS:
            ok = is_integer(typ)
        elif op in ARITHMETIC_OPERATORS:
            ok = is_integer(typ) or is_float(typ)
        else:
            ok = is_scalar(typ)
        if not ok:
            raise VerifyException(f"operator '{op}' does not apply to {typ}")
        if self.result.type != binary_result_type(op, typ):
            raise VerifyException(
                f"'{op}' on {typ} gives {binary_result_type(op, typ)}, not {self.result.type}"
            )

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.operator.data)
        printer.print_string(" ")
        printer.print_operand(self.lhs)
        printer.print_string(", ")
        printer.print_operand(self.rhs)
        _print_type_suffix(printer, self, self.lhs.type)

    @classmethod
    def parse(cls, parser: Parser) -> BinaryOp:
        operator = parser.parse_str_literal()
        lhs = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        rhs = parser.parse_unresolved_operand()
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        op = cls(operator, parser.resolve_operand(lhs, typ), parser.resolve_operand(rhs, typ))
        op.attributes |= attrs
        return op


def unary_result_type(operator: str, operand: SSAValue) -> Attribute:
    """The type of ``<operator> a``: the operand's, except for the address ``&p[i]`` of an
    element, a pointer to the element type that is ``const`` when ``p`` points to ``const``,
    and the address ``&m`` of a tensor-map parameter, a pointer to ``const``."""
    if operator != "&":
        return operand.type
    if isinstance(operand.type, TensorMapType):
        return PtrType(operand.type, True)
    owner = operand.owner
    constant = isinstance(owner, IndexOp) and isinstance(owner.base.type, PtrType) and (
        owner.base.type.is_const)
    return PtrType(operand.type, constant)


@irdl_op_definition
class UnaryOp(ExpressionOp):
    """``%r = cuda.unary "-" %a : f32``: ``-`` (numbers), ``!`` (``i1``), ``~`` (integers);
    ``%r = cuda.unary "&" %e : f32`` is the address ``&p[i]`` of an element (a ``cuda.index``),
    of type ``!cuda.ptr<f32>`` (``const`` when ``p``'s pointee is), or ``&m`` of a tensor-map
    parameter (a ``cuda.var``)."""

    name = "cuda.unary"
    operator = prop_def(StringAttr)
    operand = operand_def()
    result = result_def()

    def __init__(self, operator: str, operand: SSAValue) -> None:
        super().__init__(operands=[operand],
                         result_types=[unary_result_type(operator, operand)],
                         properties={"operator": StringAttr(operator)})

    def verify_expression(self) -> None:
        op, typ = self.operator.data, self.operand.type
        if op not in UNARY_OPERATORS:
            raise VerifyException(f"unknown unary operator '{op}'")
        if op == "&":
            tensor_map = isinstance(typ, TensorMapType) and isinstance(self.operand.owner, VarOp)
            if not (isinstance(self.operand.owner, IndexOp) or tensor_map):
                raise VerifyException("'&' takes the address of an element (a cuda.index), "
                                      f"not of a value defined by {_describe_owner(self.operand)}")
            expected = unary_result_type(op, self.operand)
            if self.result.type != expected:
                raise VerifyException(f"the address of a {typ} element is {expected}, not "
                                      f"{self.result.type}")
            return
        ok = {"-": is_integer(typ) or is_float(typ), "!": is_bool(typ), "~": is_integer(typ)}[op]
        if not ok:
            raise VerifyException(f"operator '{op}' does not apply to {typ}")
        if self.result.type != typ:
            raise VerifyException("result type must be the operand type")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.operator.data)
        printer.print_string(" ")
        printer.print_operand(self.operand)
        _print_type_suffix(printer, self, self.operand.type)

    @classmethod
    def parse(cls, parser: Parser) -> UnaryOp:
        operator = parser.parse_str_literal()
        operand = parser.parse_unresolved_operand()
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        op = cls(operator, parser.resolve_operand(operand, parser.parse_type()))
        op.attributes |= attrs
        return op


@irdl_op_definition
class CastOp(ExpressionOp):
    """``%r = cuda.cast %x : ui32 to index``: a C cast ``(long long)x`` between scalar types
    or between pointer types, or of a pointer to ``ui64`` (its generic address, which an
    inline ``asm`` takes as an ``"l"`` operand)."""

    name = "cuda.cast"
    operand = operand_def()
    result = result_def()

    def __init__(self, operand: SSAValue, typ: Attribute) -> None:
        super().__init__(operands=[operand], result_types=[typ])

    def verify_expression(self) -> None:
        src, dst = self.operand.type, self.result.type
        to_address = (isinstance(src, PtrType) and isinstance(dst, IntegerType)
                      and is_unsigned(dst) and dst.width.data == 64)
        if not ((is_scalar(src) and is_scalar(dst))
                or (isinstance(src, PtrType) and isinstance(dst, PtrType)) or to_address):
            raise VerifyException(f"cannot cast {src} to {dst}")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.operand)
        _print_type_suffix(printer, self, self.operand.type)
        printer.print_string(" to ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> CastOp:
        operand = parser.parse_unresolved_operand()
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        src = parser.parse_type()
        parser.parse_keyword("to")
        op = cls(parser.resolve_operand(operand, src), parser.parse_type())
        op.attributes |= attrs
        return op


@irdl_op_definition
class TernaryOp(ExpressionOp):
    """``%r = cuda.ternary %c, %a, %b : f32``: ``c ? a : b``."""

    name = "cuda.ternary"
    cond = operand_def()
    true_value = operand_def()
    false_value = operand_def()
    result = result_def()

    def __init__(self, cond: SSAValue, true_value: SSAValue, false_value: SSAValue) -> None:
        super().__init__(operands=[cond, true_value, false_value],
                         result_types=[true_value.type])

    def verify_expression(self) -> None:
        if not is_bool(self.cond.type):
            raise VerifyException(f"condition must be i1, got {self.cond.type}")
        typ = self.true_value.type
        if self.false_value.type != typ or self.result.type != typ:
            raise VerifyException("both alternatives and the result must have one type")
        if not is_value_type(typ):
            raise VerifyException(f"alternatives must be scalars or pointers, got {typ}")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list([self.cond, self.true_value, self.false_value], printer.print_operand)
        _print_type_suffix(printer, self, self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> TernaryOp:
        cond = parser.parse_operand(IntegerType(1))
        parser.parse_punctuation(",")
        a = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        b = parser.parse_unresolved_operand()
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        op = cls(cond, parser.resolve_operand(a, typ), parser.resolve_operand(b, typ))
        op.attributes |= attrs
        return op


@irdl_op_definition
class CallOp(ExpressionOp):
    """``%r = cuda.call rsqrtf(%x) : (f32) -> f32``: a call of a device function or intrinsic
    (``!cuda.void`` result for ``void`` functions such as ``__syncthreads``)."""

    name = "cuda.call"
    callee = prop_def(StringAttr)
    args = var_operand_def()
    result = result_def()

    def __init__(self, callee: str, args: Sequence[SSAValue], result_type: Attribute) -> None:
        super().__init__(operands=[list(args)], result_types=[result_type],
                         properties={"callee": StringAttr(callee)})

    def verify_expression(self) -> None:
        if not _IDENTIFIER.match(self.callee.data) or self.callee.data in KEYWORDS:
            raise VerifyException(f"callee '{self.callee.data}' is not a C identifier")
        for arg in self.args:
            if not is_value_type(arg.type):
                raise VerifyException(f"call arguments are scalars or pointers, got {arg.type}")
        if not (is_value_type(self.result.type) or isinstance(self.result.type, VoidType)):
            raise VerifyException(f"a call returns a scalar, a pointer or !cuda.void, "
                                  f"not {self.result.type}")

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.callee.data}(")
        printer.print_list(self.args, printer.print_operand)
        printer.print_string(")")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(FunctionType.from_lists([a.type for a in self.args],
                                                        [self.result.type]))

    @classmethod
    def parse(cls, parser: Parser) -> CallOp:
        callee = parser.parse_identifier()
        pos = parser.pos
        args = parser.parse_comma_separated_list(Parser.Delimiter.PAREN,
                                                 parser.parse_unresolved_operand)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        ftype = parser.parse_function_type()
        if len(ftype.outputs.data) != 1:
            parser.raise_error("a call has exactly one result type (!cuda.void for none)")
        op = cls(callee, parser.resolve_operands(args, ftype.inputs.data, pos),
                 ftype.outputs.data[0])
        op.attributes |= attrs
        return op


@irdl_op_definition
class IndexOp(ExpressionOp):
    """``%e = cuda.index %p[%i] : !cuda.ptr<f32, const>, index``: the element ``p[i]``
    (an lvalue unless the pointee is ``const``)."""

    name = "cuda.index"
    base = operand_def(PtrType)
    index = operand_def()
    result = result_def()

    def __init__(self, base: SSAValue, index: SSAValue) -> None:
        assert isinstance(base.type, PtrType)
        super().__init__(operands=[base, index], result_types=[base.type.element])

    def verify_expression(self) -> None:
        assert isinstance(self.base.type, PtrType)
        if not is_integer(self.index.type):
            raise VerifyException(f"subscript must be an integer, got {self.index.type}")
        if self.result.type != self.base.type.element:
            raise VerifyException("result type must be the pointee type")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.base)
        printer.print_string("[")
        printer.print_operand(self.index)
        printer.print_string("]")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.base.type)
        printer.print_string(", ")
        printer.print_attribute(self.index.type)

    @classmethod
    def parse(cls, parser: Parser) -> IndexOp:
        base = parser.parse_unresolved_operand()
        parser.parse_punctuation("[")
        index = parser.parse_unresolved_operand()
        parser.parse_punctuation("]")
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        ptr = parser.parse_type()
        parser.parse_punctuation(",")
        itype = parser.parse_type()
        if not isinstance(ptr, PtrType):
            parser.raise_error(f"expected a !cuda.ptr type, got {ptr}")
        op = cls(parser.resolve_operand(base, ptr), parser.resolve_operand(index, itype))
        op.attributes |= attrs
        return op


# --------------------------------------------------------------------------------------------
# Statements
# --------------------------------------------------------------------------------------------


class StatementOp(IRDLOperation):
    """Base of the statement ops: they sit in kernel, loop or branch bodies."""

    def verify_(self) -> None:
        _statement_parent(self)
        _expression_operands(self)
        self.verify_statement()

    def verify_statement(self) -> None:
        """Check the op's own rules; overridden by each statement op."""


#: Qualifiers a ``cuda.decl`` may carry, in printing order.
DECL_QUALIFIERS = ("extern", "__shared__", "const", "volatile")
#: Qualifiers a ``cuda.kernel`` parameter may carry: ``__restrict__`` (pointers), ``const
#: __grid_constant__`` (tensor maps, whose address the kernel takes: the parameter itself,
#: not a copy).
PARAM_QUALIFIERS = ("__restrict__", "const", "__grid_constant__")
GRID_CONSTANT = ("const", "__grid_constant__")
"""The qualifiers of a tensor-map parameter."""


def _parse_qualifiers(parser: Parser, allowed: Sequence[str]) -> list[str]:
    found: list[str] = []
    while (word := parser.parse_optional_keyword_in(allowed)) is not None:
        found.append(word)
    return found


def _check_qualifiers(qualifiers: Sequence[str], allowed: Sequence[str], what: str) -> None:
    for q in qualifiers:
        if q not in allowed:
            raise VerifyException(f"unknown {what} qualifier '{q}' (allowed: {list(allowed)})")
    if len(set(qualifiers)) != len(qualifiers):
        raise VerifyException(f"repeated {what} qualifier in {list(qualifiers)}")


def _strings(attr: ArrayAttr) -> list[str]:
    return [s.data for s in attr.data]  # type: ignore[attr-defined]


@irdl_op_definition
class DeclOp(StatementOp):
    """A variable declaration.

    ``cuda.decl const v0 : f32 = %e`` — ``const float v0 = e;``;
    ``cuda.decl acc : f32 = %e`` — a mutable local; ``cuda.decl r : f32`` — uninitialised;
    ``cuda.decl __shared__ red : f32[32] align 16`` — ``__shared__ __align__(16) float red[32];``;
    ``cuda.decl extern __shared__ smem : ui8[] align 16`` —
    ``extern __shared__ __align__(16) unsigned char smem[];``, the kernel's dynamic shared
    memory (an array of unknown bound, only ``extern __shared__``; its size is the launch's).
    An array name is referenced as a pointer (``cuda.var red : !cuda.ptr<f32>``).
    """

    name = "cuda.decl"
    var_name = prop_def(StringAttr)
    var_type = prop_def(TypeAttribute)
    qualifiers = prop_def(ArrayAttr[StringAttr])
    extent = opt_prop_def(IntegerAttr)
    align = opt_prop_def(IntegerAttr)
    init = opt_operand_def()

    def __init__(self, var_name: str, var_type: Attribute, init: SSAValue | None = None, *,
                 qualifiers: Sequence[str] = (), extent: int | None = None,
                 align: int | None = None) -> None:
        props: dict[str, Attribute] = {
            "var_name": StringAttr(var_name),
            "var_type": var_type,
            "qualifiers": ArrayAttr([StringAttr(q) for q in qualifiers]),
        }
        if extent is not None:
            props["extent"] = IntegerAttr(extent, i64)
        if align is not None:
            props["align"] = IntegerAttr(align, i64)
        super().__init__(operands=[[] if init is None else [init]], properties=props)

    @property
    def qualifier_names(self) -> list[str]:
        """The qualifiers, e.g. ``["const"]``."""
        return _strings(self.qualifiers)

    @property
    def is_const(self) -> bool:
        return "const" in self.qualifier_names

    @property
    def is_extern(self) -> bool:
        return "extern" in self.qualifier_names

    @property
    def reference_type(self) -> Attribute:
        """The type a ``cuda.var`` naming this declaration has (arrays decay to pointers)."""
        if self.extent is None:
            return self.var_type
        return PtrType(self.var_type, self.is_const)

    def verify_statement(self) -> None:
        check_identifier(self.var_name.data, "variable")
        quals = self.qualifier_names
        _check_qualifiers(quals, DECL_QUALIFIERS, "declaration")
        typ = self.var_type
        if not is_value_type(typ):
            raise VerifyException(f"a variable has a scalar or pointer type, not {typ}")
        if self.extent is not None:
            extent = self.extent.value.data
            if extent < 0 or (extent == 0 and "extern" not in quals):
                raise VerifyException("array extent must be positive (only an extern "
                                      "__shared__ array has no bound)")
            if extent and "extern" in quals:
                raise VerifyException("an extern __shared__ array has no bound ('[]')")
            if self.init is not None:
                raise VerifyException("arrays are declared without an initialiser")
            if isinstance(typ, PtrType):
                raise VerifyException("arrays hold scalars")
        if self.align is not None:
            a = self.align.value.data
            if a < 1 or a & (a - 1):
                raise VerifyException(f"alignment must be a power of two, got {a}")
        if "extern" in quals and ("__shared__" not in quals or self.extent is None):
            raise VerifyException("only the dynamic shared memory is declared extern: "
                                  "'extern __shared__ T name[]'")
        if "__shared__" in quals:
            if self.init is not None:
                raise VerifyException("__shared__ variables cannot be initialised")
            if "const" in quals:
                raise VerifyException("a __shared__ variable cannot be const")
        elif "const" in quals and self.init is None:
            raise VerifyException(f"const variable '{self.var_name.data}' needs an initialiser")
        if self.init is not None and self.init.type != typ:
            raise VerifyException(
                f"initialiser of '{self.var_name.data}' is {self.init.type}, not {typ}"
            )

    def print(self, printer: Printer) -> None:
        for q in self.qualifier_names:
            printer.print_string(f" {q}")
        printer.print_string(f" {self.var_name.data} : ")
        printer.print_attribute(self.var_type)
        if self.extent is not None:
            extent = self.extent.value.data
            printer.print_string(f"[{extent}]" if extent else "[]")
        if self.align is not None:
            printer.print_string(f" align {self.align.value.data}")
        if self.init is not None:
            printer.print_string(" = ")
            printer.print_operand(self.init)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> DeclOp:
        quals = _parse_qualifiers(parser, DECL_QUALIFIERS)
        name = parser.parse_identifier()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        extent = None
        if parser.parse_optional_punctuation("[") is not None:
            extent = 0 if parser.parse_optional_punctuation("]") is not None else None
            if extent is None:
                extent = parse_i64(parser)
                parser.parse_punctuation("]")
        align = None
        if parser.parse_optional_keyword("align") is not None:
            align = parse_i64(parser)
        init = None
        if parser.parse_optional_punctuation("=") is not None:
            init = parser.resolve_operand(parser.parse_unresolved_operand(), typ)
        op = cls(name, typ, init, qualifiers=quals, extent=extent, align=align)
        op.attributes |= parser.parse_optional_attr_dict()
        return op


@irdl_op_definition
class AssignOp(StatementOp):
    """``cuda.assign %dst = %src : f32``: ``dst = src;`` where ``dst`` is a ``cuda.var`` or a
    ``cuda.index`` through a non-``const`` pointer."""

    name = "cuda.assign"
    dst = operand_def()
    src = operand_def()

    def __init__(self, dst: SSAValue, src: SSAValue) -> None:
        super().__init__(operands=[dst, src])

    def verify_statement(self) -> None:
        target = self.dst.owner
        if isinstance(target, IndexOp):
            assert isinstance(target.base.type, PtrType)
            if target.base.type.is_const:
                raise VerifyException("cannot assign through a pointer to const")
        elif not isinstance(target, VarOp):
            raise VerifyException("assignment target must be a cuda.var or cuda.index, not "
                                  f"{_describe_owner(self.dst)}")
        if self.dst.type != self.src.type:
            raise VerifyException(f"cannot assign {self.src.type} to {self.dst.type}")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.dst)
        printer.print_string(" = ")
        printer.print_operand(self.src)
        _print_type_suffix(printer, self, self.dst.type)

    @classmethod
    def parse(cls, parser: Parser) -> AssignOp:
        dst = parser.parse_unresolved_operand()
        parser.parse_punctuation("=")
        src = parser.parse_unresolved_operand()
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        op = cls(parser.resolve_operand(dst, typ), parser.resolve_operand(src, typ))
        op.attributes |= attrs
        return op


def _single_block(region: Region, what: str) -> Block:
    if len(region.blocks) != 1:
        raise VerifyException(f"{what} must have exactly one block")
    block = region.blocks[0]
    if block.args:
        raise VerifyException(f"{what} takes no block arguments (names are declared)")
    return block


def _parse_body(parser: Parser) -> Region:
    region = parser.parse_region()
    if not region.blocks:
        region.add_block(Block())
    return region


def _print_body(printer: Printer, region: Region) -> None:
    printer.print_region(region, print_entry_block_args=False, print_empty_block=False)


@irdl_op_definition
class ForOp(StatementOp):
    """``cuda.for i : index = %lb to %ub step %s unroll 4 { ... }``:
    ``for (long long i = lb; i < ub; i += s)``, preceded by ``#pragma unroll 4`` (``unroll``
    alone: ``#pragma unroll``). ``ub`` and ``s`` are evaluated on every iteration."""

    name = "cuda.for"
    iv_name = prop_def(StringAttr)
    iv_type = prop_def(TypeAttribute)
    unroll = opt_prop_def(IntegerAttr)
    lb = operand_def()
    ub = operand_def()
    step = operand_def()
    body = region_def("single_block")
    traits = traits_def(NoTerminator())

    def __init__(self, iv_name: str, lb: SSAValue, ub: SSAValue, step: SSAValue,
                 body: Region | None = None, *, unroll: int | None = None) -> None:
        props: dict[str, Attribute] = {"iv_name": StringAttr(iv_name), "iv_type": lb.type}
        if unroll is not None:
            props["unroll"] = IntegerAttr(unroll, i64)
        super().__init__(operands=[lb, ub, step], properties=props,
                         regions=[body if body is not None else Region(Block())])

    @property
    def unroll_factor(self) -> int | None:
        """``None``: no pragma; ``0``: ``#pragma unroll``; ``n``: ``#pragma unroll n``."""
        return None if self.unroll is None else self.unroll.value.data

    def verify_statement(self) -> None:
        check_identifier(self.iv_name.data, "induction variable")
        if not is_integer(self.iv_type):
            raise VerifyException(f"induction variable must be an integer, got {self.iv_type}")
        for label, v in (("lower bound", self.lb), ("upper bound", self.ub),
                         ("step", self.step)):
            if v.type != self.iv_type:
                raise VerifyException(f"{label} is {v.type}, the induction variable "
                                      f"{self.iv_type}")
        if self.unroll is not None and self.unroll.value.data < 0:
            raise VerifyException("unroll factor must be non-negative")
        _single_block(self.body, "cuda.for body")

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.iv_name.data} : ")
        printer.print_attribute(self.iv_type)
        printer.print_string(" = ")
        printer.print_operand(self.lb)
        printer.print_string(" to ")
        printer.print_operand(self.ub)
        printer.print_string(" step ")
        printer.print_operand(self.step)
        if self.unroll is not None:
            printer.print_string(" unroll")
            if self.unroll.value.data:
                printer.print_string(f" {self.unroll.value.data}")
        printer.print_string(" ")
        _print_body(printer, self.body)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> ForOp:
        name = parser.parse_identifier()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        parser.parse_punctuation("=")
        lb = parser.parse_unresolved_operand()
        parser.parse_keyword("to")
        ub = parser.parse_unresolved_operand()
        parser.parse_keyword("step")
        step = parser.parse_unresolved_operand()
        unroll = None
        if parser.parse_optional_keyword("unroll") is not None:
            unroll = parse_optional_i64(parser) or 0
        body = _parse_body(parser)
        op = cls(name, parser.resolve_operand(lb, typ), parser.resolve_operand(ub, typ),
                 parser.resolve_operand(step, typ), body, unroll=unroll)
        op.attributes |= parser.parse_optional_attr_dict()
        return op


@irdl_op_definition
class IfOp(StatementOp):
    """``cuda.if %c { ... } else { ... }`` (the ``else`` part is optional)."""

    name = "cuda.if"
    cond = operand_def()
    then_region = region_def("single_block")
    else_region = region_def()
    traits = traits_def(NoTerminator())

    def __init__(self, cond: SSAValue, then_region: Region | None = None,
                 else_region: Region | None = None) -> None:
        super().__init__(operands=[cond], regions=[
            then_region if then_region is not None else Region(Block()),
            else_region if else_region is not None else Region(),
        ])

    @property
    def has_else(self) -> bool:
        """Whether the ``else`` branch holds any statement."""
        return bool(self.else_region.blocks) and self.else_region.block.first_op is not None

    def verify_statement(self) -> None:
        if not is_bool(self.cond.type):
            raise VerifyException(f"condition must be i1, got {self.cond.type}")
        _single_block(self.then_region, "cuda.if then-branch")
        if len(self.else_region.blocks) > 1:
            raise VerifyException("cuda.if else-branch must have at most one block")
        if self.else_region.blocks:
            _single_block(self.else_region, "cuda.if else-branch")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.cond)
        printer.print_string(" ")
        _print_body(printer, self.then_region)
        if self.has_else:
            printer.print_string(" else ")
            _print_body(printer, self.else_region)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> IfOp:
        cond = parser.parse_operand(IntegerType(1))
        then_region = _parse_body(parser)
        else_region = Region()
        if parser.parse_optional_keyword("else") is not None:
            else_region = _parse_body(parser)
        op = cls(cond, then_region, else_region)
        op.attributes |= parser.parse_optional_attr_dict()
        return op


@irdl_op_definition
class ExprStmtOp(StatementOp):
    """``cuda.expr_stmt %e : !cuda.void``: evaluate an expression for its effect
    (``__syncthreads();``)."""

    name = "cuda.expr_stmt"
    expr = operand_def()
    assembly_format = "$expr attr-dict `:` type($expr)"

    def __init__(self, expr: SSAValue) -> None:
        super().__init__(operands=[expr])


ASM_CONSTRAINTS = ("r", "f", "l", "d", "h")
"""Register classes an inline-``asm`` operand may name (32-bit integer, ``float``, 64-bit
integer, ``double``, 16-bit); an output's constraint is ``=`` followed by one of them."""


@irdl_op_definition
class AsmOp(StatementOp):
    """One PTX instruction written inline:
    ``cuda.asm "cvt.rna.tf32.f32 %0, %1;" outs(%b : ui32) ins(%x : f32) ["=r", "f"]`` —
    ``asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(b) : "f"(x));``. ``outs`` are ``cuda.var``
    lvalues, ``ins`` expressions; ``constraints`` name one register class per output (with
    ``=``, or ``+`` for one the instruction reads too) and then per input. Without
    ``volatile`` the instruction has no effect besides its
    outputs, so the compiler may schedule it like arithmetic; ``cuda.asm volatile`` (``asm
    volatile(…)``) is for one that reads memory (``ldmatrix``), which the compiler must
    neither drop nor merge with another. ``memory`` adds the ``"memory"`` clobber: no load or
    store is moved across the instruction (``griddepcontrol.wait``)."""

    name = "cuda.asm"
    template = prop_def(StringAttr)
    constraints = prop_def(ArrayAttr[StringAttr])
    volatile = opt_prop_def(UnitAttr)
    memory = opt_prop_def(UnitAttr)
    outs = var_operand_def()
    ins = var_operand_def()
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    assembly_format = ("(`volatile` $volatile^)? (`memory` $memory^)? $template `outs` `(` "
                       "$outs `:` type($outs) `)` `ins` `(` $ins `:` type($ins) `)` "
                       "$constraints attr-dict")

    def __init__(self, template: str, outs: Sequence[SSAValue], ins: Sequence[SSAValue],
                 constraints: Sequence[str], volatile: bool = False,
                 memory: bool = False) -> None:
        props: dict[str, Attribute] = {
            "template": StringAttr(template),
            "constraints": ArrayAttr([StringAttr(c) for c in constraints])}
        if volatile:
            props["volatile"] = UnitAttr()
        if memory:
            props["memory"] = UnitAttr()
        super().__init__(operands=[list(outs), list(ins)], properties=props)

    @property
    def constraint_names(self) -> list[str]:
        return _strings(self.constraints)

    def verify_statement(self) -> None:
        text = self.template.data
        if not text or any(c in text for c in '"\\\n'):
            raise VerifyException(f"an asm template is one line without quotes or "
                                  f"backslashes, got {text!r}")
        names = self.constraint_names
        if len(names) != len(self.outs) + len(self.ins):
            raise VerifyException(f"cuda.asm needs one constraint per operand: "
                                  f"{len(self.outs)} outputs and {len(self.ins)} inputs, "
                                  f"got {len(names)}")
        for k, name in enumerate(names):
            out = k < len(self.outs)
            body = name[1:] if out and name.startswith(("=", "+")) else name
            if (out and not name.startswith(("=", "+"))) or body not in ASM_CONSTRAINTS:
                raise VerifyException(f"bad asm constraint {name!r} for an "
                                      f"{'output' if out else 'input'} (allowed: "
                                      f"{'= or +' if out else ''}"
                                      f"{'/'.join(ASM_CONSTRAINTS)})")
        for value in self.outs:
            if not isinstance(value.owner, VarOp):
                raise VerifyException("asm outputs must be cuda.var lvalues, not "
                                      f"{_describe_owner(value)}")
        for value in (*self.outs, *self.ins):
            if not is_scalar(value.type):
                raise VerifyException(f"asm operands are scalars, got {value.type}")


# --------------------------------------------------------------------------------------------
# Top level
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """One kernel parameter: ``const float* __restrict__ x``."""

    name: str
    type: Attribute
    qualifiers: tuple[str, ...] = ()


@irdl_op_definition
class KernelOp(IRDLOperation):
    """An ``extern "C" __global__ void`` function::

        cuda.kernel @k(x : !cuda.ptr<f32, const> __restrict__, n : index)
            launch_bounds(256) { ... }

    ``launch_bounds(256, 2)`` also gives the minimum number of resident blocks.
    ``cluster(2)`` launches the blocks in clusters of that many consecutive blocks along
    ``x`` (``__cluster_dims__(2, 1, 1)``, sm_90): a cluster's blocks run at once on
    neighbouring multiprocessors and reach each other's shared memory; every launch's grid
    must be a multiple of it.
    ``dynamic_shared(73728)`` states the bytes of dynamic shared memory the kernel uses (its
    ``extern __shared__`` array, which a kernel declaring one must size this way): every
    ``kernel.launch`` of it passes at least that many as ``smem``. It has no spelling in the
    source; the launches carry it.

    Tensor-map parameters (``tmap0 : !cuda.tensor_map<arg 0 : …> const __grid_constant__``)
    come last: a ``kernel.launch`` passes the others, and the host appends the maps, each
    encoded from the buffer the launch passes for the pointer parameter ``arg`` (whose
    element type is the map's).

    The name is a symbol, unique in the module; ``kernel.launch @k`` in the host function
    refers to it once ``kernel-to-cuda`` has replaced the ``kernel.func`` of that name.
    """

    name = "cuda.kernel"
    sym_name = prop_def(StringAttr)
    param_names = prop_def(ArrayAttr[StringAttr])
    param_types = prop_def(ArrayAttr)
    param_qualifiers = prop_def(ArrayAttr[ArrayAttr[StringAttr]])
    launch_bounds = opt_prop_def(IntegerAttr)
    min_blocks = opt_prop_def(IntegerAttr)
    dynamic_shared = opt_prop_def(IntegerAttr)
    cluster = opt_prop_def(IntegerAttr)
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), NoTerminator(), SymbolOpInterface())

    def __init__(self, sym_name: str, params: Sequence[Param], body: Region | None = None, *,
                 launch_bounds: int | None = None, min_blocks: int | None = None,
                 dynamic_shared: int | None = None, cluster: int | None = None) -> None:
        props: dict[str, Attribute] = {
            "sym_name": StringAttr(sym_name),
            "param_names": ArrayAttr([StringAttr(p.name) for p in params]),
            "param_types": ArrayAttr([p.type for p in params]),
            "param_qualifiers": ArrayAttr(
                [ArrayAttr([StringAttr(q) for q in p.qualifiers]) for p in params]
            ),
        }
        if launch_bounds is not None:
            props["launch_bounds"] = IntegerAttr(launch_bounds, i64)
        if min_blocks is not None:
            props["min_blocks"] = IntegerAttr(min_blocks, i64)
        if dynamic_shared is not None:
            props["dynamic_shared"] = IntegerAttr(dynamic_shared, i64)
        if cluster is not None:
            props["cluster"] = IntegerAttr(cluster, i64)
        super().__init__(properties=props,
                         regions=[body if body is not None else Region(Block())])

    @property
    def params(self) -> list[Param]:
        """The parameters, in order."""
        return [
            Param(n.data, t, tuple(_strings(q)))
            for n, t, q in zip(self.param_names.data, self.param_types.data,
                               self.param_qualifiers.data, strict=True)
        ]

    @property
    def tensor_maps(self) -> list[TensorMapType]:
        """The types of the tensor-map parameters (the last ones), in order."""
        return [t for t in self.param_types.data if isinstance(t, TensorMapType)]

    @property
    def max_threads(self) -> int | None:
        """The ``__launch_bounds__`` thread count, if any."""
        return None if self.launch_bounds is None else self.launch_bounds.value.data

    @property
    def cluster_size(self) -> int:
        """The blocks of a cluster (1 when the kernel has no clusters)."""
        return 1 if self.cluster is None else self.cluster.value.data

    @property
    def dynamic_shared_bytes(self) -> int:
        """The dynamic shared memory every launch must provide, in bytes (0 when none)."""
        return 0 if self.dynamic_shared is None else self.dynamic_shared.value.data

    def verify_(self) -> None:
        check_identifier(self.sym_name.data, "kernel name")
        n = len(self.param_names.data)
        if len(self.param_types.data) != n or len(self.param_qualifiers.data) != n:
            raise VerifyException("parameter names, types and qualifiers differ in number")
        scope: dict[str, _Binding] = {}
        params = self.params
        for k, p in enumerate(params):
            check_identifier(p.name, "parameter")
            _check_qualifiers(p.qualifiers, PARAM_QUALIFIERS, "parameter")
            if isinstance(p.type, TensorMapType):
                _check_tensor_map(p, k, params)
            elif not is_value_type(p.type):
                raise VerifyException(f"parameter '{p.name}' has type {p.type}; parameters "
                                      "are scalars, pointers or tensor maps")
            elif k and isinstance(params[k - 1].type, TensorMapType):
                raise VerifyException(f"parameter '{p.name}' follows a tensor map; tensor "
                                      "maps are the last parameters")
            elif p.qualifiers and p.qualifiers != ("__restrict__",):
                raise VerifyException(f"only tensor maps are const __grid_constant__ "
                                      f"('{p.name}')")
            elif p.qualifiers and not isinstance(p.type, PtrType):
                raise VerifyException(f"only pointer parameters can be __restrict__ "
                                      f"('{p.name}')")
            if p.name in scope:
                raise VerifyException(f"parameter '{p.name}' is declared twice")
            scope[p.name] = _Binding(p.type, assignable=True)
        if (self.launch_bounds is not None
                and not 1 <= self.launch_bounds.value.data <= MAX_THREADS_PER_BLOCK):
            raise VerifyException(f"launch bounds must be 1 to {MAX_THREADS_PER_BLOCK} threads")
        if self.min_blocks is not None:
            if self.launch_bounds is None:
                raise VerifyException("min_blocks needs launch bounds")
            if self.min_blocks.value.data < 1:
                raise VerifyException("min_blocks must be positive")
        if self.dynamic_shared is not None and self.dynamic_shared.value.data < 1:
            raise VerifyException("dynamic_shared must be a positive number of bytes")
        if self.cluster is not None and not 1 <= self.cluster_size <= MAX_CLUSTER:
            raise VerifyException(f"cluster must be 1 to {MAX_CLUSTER} blocks")
        block = _single_block(self.body, "cuda.kernel body")
        _check_scopes(block, [scope])
        if self.dynamic_shared is None:
            for inner in self.walk():
                if isinstance(inner, DeclOp) and inner.is_extern:
                    raise VerifyException(
                        f"kernel @{self.sym_name.data} declares the extern __shared__ array "
                        f"'{inner.var_name.data}' but no dynamic_shared(bytes) for its launches"
                    )
        if self.parent is not None:
            for other in self.parent.ops:
                if other is not self and (
                    getattr(other.properties.get("sym_name"), "data", None) == self.sym_name.data
                ):
                    raise VerifyException(f"symbol @{self.sym_name.data} is defined twice")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.sym_name.data)
        printer.print_string("(")

        def one(p: Param) -> None:
            printer.print_string(f"{p.name} : ")
            printer.print_attribute(p.type)
            for q in p.qualifiers:
                printer.print_string(f" {q}")

        printer.print_list(self.params, one)
        printer.print_string(")")
        if self.launch_bounds is not None:
            printer.print_string(f" launch_bounds({self.launch_bounds.value.data}")
            if self.min_blocks is not None:
                printer.print_string(f", {self.min_blocks.value.data}")
            printer.print_string(")")
        if self.dynamic_shared is not None:
            printer.print_string(f" dynamic_shared({self.dynamic_shared.value.data})")
        if self.cluster is not None:
            printer.print_string(f" cluster({self.cluster_size})")
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        _print_body(printer, self.body)

    @classmethod
    def parse(cls, parser: Parser) -> KernelOp:
        name = parser.parse_symbol_name().data

        def one() -> Param:
            pname = parser.parse_identifier()
            parser.parse_punctuation(":")
            ptype = parser.parse_type()
            return Param(pname, ptype, tuple(_parse_qualifiers(parser, PARAM_QUALIFIERS)))

        params = parser.parse_comma_separated_list(Parser.Delimiter.PAREN, one)
        bounds = None
        if parser.parse_optional_keyword("launch_bounds") is not None:
            bounds = parser.parse_comma_separated_list(Parser.Delimiter.PAREN,
                                                       lambda: parse_i64(parser))
            if len(bounds) not in (1, 2):
                parser.raise_error("launch_bounds takes one or two integers")
        dynamic = None
        if parser.parse_optional_keyword("dynamic_shared") is not None:
            parser.parse_punctuation("(")
            dynamic = parse_i64(parser)
            parser.parse_punctuation(")")
        cluster = None
        if parser.parse_optional_keyword("cluster") is not None:
            parser.parse_punctuation("(")
            cluster = parse_i64(parser)
            parser.parse_punctuation(")")
        attrs = parser.parse_optional_attr_dict_with_keyword()
        body = _parse_body(parser)
        op = cls(name, params, body, launch_bounds=bounds[0] if bounds else None,
                 min_blocks=bounds[1] if bounds and len(bounds) == 2 else None,
                 dynamic_shared=dynamic, cluster=cluster)
        if attrs is not None:
            op.attributes |= attrs.data
        return op


def _check_tensor_map(p: Param, k: int, params: Sequence[Param]) -> None:
    """Raise unless the ``k``-th parameter ``p``, a tensor map, is ``const
    __grid_constant__`` and describes an earlier pointer parameter of its element type."""
    assert isinstance(p.type, TensorMapType)
    if p.qualifiers != GRID_CONSTANT:
        raise VerifyException(f"tensor map '{p.name}' must be const __grid_constant__ "
                              f"(the kernel takes its address), not {list(p.qualifiers)}")
    arg = p.type.arg.data
    target = params[arg].type if arg < k else None
    if not isinstance(target, PtrType):
        raise VerifyException(f"tensor map '{p.name}' describes argument {arg}, which is not "
                              "a pointer parameter before it")
    if target.element != p.type.buffer.element_type:
        raise VerifyException(f"tensor map '{p.name}' of {p.type.buffer.element_type} "
                              f"describes a pointer to {target.element}")


@dataclass(frozen=True)
class _Binding:
    type: Attribute
    assignable: bool


def _check_scopes(block: Block, scopes: list[dict[str, _Binding]]) -> None:
    """Check names in ``block``, whose scope is ``scopes[-1]`` (C block scoping)."""

    def lookup(name: str) -> _Binding | None:
        for scope in reversed(scopes):
            if name in scope:
                return scope[name]
        return None

    def nested(region: Region, extra: dict[str, _Binding]) -> None:
        if region.blocks:
            scopes.append(dict(extra))
            _check_scopes(region.block, scopes)
            scopes.pop()

    for op in block.ops:
        if isinstance(op, VarOp):
            name = op.var_name.data
            binding = lookup(name)
            if binding is None:
                raise VerifyException(f"'{name}' is not declared in this scope")
            if binding.type != op.result.type:
                raise VerifyException(f"'{name}' is declared {binding.type}, referenced as "
                                      f"{op.result.type}")
        elif isinstance(op, DeclOp):
            name = op.var_name.data
            if name in scopes[-1]:
                raise VerifyException(f"'{name}' is declared twice in one scope")
            scopes[-1][name] = _Binding(
                op.reference_type, assignable=not op.is_const and op.extent is None
            )
        elif isinstance(op, AssignOp):
            target = op.dst.owner
            if isinstance(target, VarOp):
                binding = lookup(target.var_name.data)
                if binding is not None and not binding.assignable:
                    raise VerifyException(f"cannot assign to '{target.var_name.data}' "
                                          "(const, an array or a loop variable)")
        elif isinstance(op, ForOp):
            nested(op.body, {op.iv_name.data: _Binding(op.iv_type, assignable=False)})
        elif isinstance(op, IfOp):
            nested(op.then_region, {})
            nested(op.else_region, {})
        elif not isinstance(op, ExpressionOp | StatementOp):
            raise VerifyException(f"'{op.name}' cannot appear in a cuda.kernel (only cuda "
                                  "statements and expressions can)")


@irdl_op_definition
class TensorMapStructOp(IRDLOperation):
    """``cuda.tensor_map_struct``: the declaration of the type of tensor-map parameters,
    ``struct __align__(64) llmopt_tensor_map { unsigned long long bits[16]; };`` — the size
    and alignment of ``CUtensorMap``, without including ``cuda.h``. At module level, before
    the kernels that take tensor maps."""

    name = "cuda.tensor_map_struct"
    assembly_format = "attr-dict"

    def verify_(self) -> None:
        parent = self.parent_op()
        if parent is not None and parent.parent is not None:
            raise VerifyException("cuda.tensor_map_struct must sit at module level")


@irdl_op_definition
class IncludeOp(IRDLOperation):
    """``cuda.include <"cuda_fp16.h">`` (``#include <cuda_fp16.h>``) or
    ``cuda.include "local.h"`` (``#include "local.h"``)."""

    name = "cuda.include"
    header = prop_def(StringAttr)
    system = opt_prop_def(UnitAttr)

    def __init__(self, header: str, system: bool = True) -> None:
        props: dict[str, Attribute] = {"header": StringAttr(header)}
        if system:
            props["system"] = UnitAttr()
        super().__init__(properties=props)

    def verify_(self) -> None:
        text = self.header.data
        if not text or any(c in text for c in '<>"\n'):
            raise VerifyException(f"invalid header name {text!r}")
        parent = self.parent_op()
        if parent is not None and parent.parent is not None:
            raise VerifyException("cuda.include must sit at module level")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        if self.system is not None:
            printer.print_string("<")
            printer.print_string_literal(self.header.data)
            printer.print_string(">")
        else:
            printer.print_string_literal(self.header.data)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> IncludeOp:
        system = parser.parse_optional_punctuation("<") is not None
        header = parser.parse_str_literal()
        if system:
            parser.parse_punctuation(">")
        op = cls(header, system)
        op.attributes |= parser.parse_optional_attr_dict()
        return op


Cuda = Dialect(
    "cuda",
    [
        VarOp, LiteralOp, BuiltinOp, BinaryOp, UnaryOp, CastOp, TernaryOp, CallOp, IndexOp,
        DeclOp, AssignOp, ForOp, IfOp, ExprStmtOp, AsmOp, KernelOp, IncludeOp,
        TensorMapStructOp,
    ],
    [PtrType, VecType, VoidType, TensorMapType],
)

__all__ = [
    "ARITHMETIC_OPERATORS", "ASM_CONSTRAINTS", "BINARY_OPERATORS", "BITWISE_OPERATORS",
    "BUILTINS", "COMPARISON_OPERATORS", "DECL_QUALIFIERS", "GRID_CONSTANT",
    "INTEGER_OPERATORS", "KEYWORDS",
    "LOGICAL_OPERATORS", "PARAM_QUALIFIERS", "UNARY_OPERATORS",
    "AsmOp", "AssignOp", "BinaryOp", "BuiltinOp", "CallOp", "CastOp", "Cuda", "DeclOp",
    "ExprStmtOp", "ExpressionOp", "ForOp", "IfOp", "IncludeOp", "IndexOp", "KernelOp",
    "LiteralOp", "Param",
    "PtrType", "StatementOp", "TENSOR_MAP_ALIGN", "TENSOR_MAP_BYTES", "TENSOR_MAP_STRUCT",
    "TensorMapStructOp", "TensorMapType", "TernaryOp", "UnaryOp", "VECTOR_COUNTS",
    "VECTOR_ELEMENTS",
    "VarOp", "VecType", "VoidType",
    "binary_result_type", "check_identifier", "is_bool", "is_float", "is_integer", "is_scalar",
    "is_unsigned", "is_value_type", "unary_result_type",
]
