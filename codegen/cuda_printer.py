"""Print a module of the ``cuda`` dialect as CUDA C++ source.

The text is the verbatim spelling of the ``cuda`` ops: ``cuda.include`` directives, the
``cuda.tensor_map_struct`` declaration and ``cuda.kernel`` functions in module order; other
module-level ops (the host ``func.func`` that launches the kernels) are not part of the
translation unit and are skipped. The printer makes no decisions beyond spelling: types
become C types, literals C literals (floats in the shortest form that reads back to the same
value), and parentheses are placed from C operator precedence (plus around mixed
bitwise/logical/comparison operators, for readability).

Usage::

    print_cuda(module, sys.stdout)   # also what ``llm-opt -t cuda`` runs
    source = cuda_source(module)
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from functools import singledispatchmethod
from io import StringIO
from typing import IO

from xdsl.dialects.builtin import (
    BFloat16Type,
    FileLineColLoc,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
)
from xdsl.ir import Attribute, Operation, SSAValue

from llmopt.dialects import cuda
from llmopt.dialects.cuda import is_bool, is_unsigned

__all__ = ["CudaPrinter", "c_literal", "c_type", "cuda_source", "kernel_locations", "print_cuda"]

# C operator precedence, higher binds tighter.
_PRIMARY = 16
_UNARY = 15
_TERNARY = 3
_BINARY_PRECEDENCE = {
    "*": 13, "/": 13, "%": 13,
    "+": 12, "-": 12,
    "<<": 11, ">>": 11,
    "<": 10, "<=": 10, ">": 10, ">=": 10,
    "==": 9, "!=": 9,
    "&": 8, "^": 7, "|": 6, "&&": 5, "||": 4,
}  # fmt: skip
_BITWISE = frozenset({"&", "^", "|", "<<", ">>"})
_LOGICAL = frozenset({"&&", "||"})
_COMPARISON = frozenset({"==", "!=", "<", "<=", ">", ">="})


def _clarify(parent: str, child: str) -> bool:
    """Whether a binary ``child`` operand of ``parent`` gets parentheses that precedence does
    not need, for readability: ``(a & b) | c``, ``(x + y) << 2``, ``(a < b) == c``,
    ``(a && b) || c``, ``(a & b) == 0``."""
    if child == parent:
        return False
    if parent in _BITWISE:
        return True
    if parent in _LOGICAL:
        return child in _LOGICAL or child in _BITWISE
    if parent in _COMPARISON:
        return child in _COMPARISON or child in _LOGICAL or child in _BITWISE
    return False

_INT_NAMES = {8: "signed char", 16: "short", 32: "int", 64: "long long"}
_UINT_NAMES = {8: "unsigned char", 16: "unsigned short", 32: "unsigned int",
               64: "unsigned long long"}


def c_type(t: Attribute) -> str:
    """The C spelling of a ``cuda``-dialect type: ``f32`` → ``float``, ``index`` →
    ``long long``, ``!cuda.ptr<f32, const>`` → ``const float*``, ``!cuda.vec<f32, 4>`` →
    ``float4``, ``!cuda.tensor_map<…>`` → ``llmopt_tensor_map``."""
    if isinstance(t, cuda.TensorMapType):
        return cuda.TENSOR_MAP_STRUCT
    if isinstance(t, cuda.PtrType):
        return ("const " if t.is_const else "") + c_type(t.element) + "*"
    if isinstance(t, cuda.VoidType):
        return "void"
    if isinstance(t, cuda.VecType):
        return t.c_name
    if isinstance(t, IndexType):
        return "long long"
    if is_bool(t):
        return "bool"
    if isinstance(t, IntegerType):
        names = _UINT_NAMES if is_unsigned(t) else _INT_NAMES
        if t.width.data in names:
            return names[t.width.data]
    if isinstance(t, Float32Type):
        return "float"
    if isinstance(t, Float64Type):
        return "double"
    if isinstance(t, Float16Type):
        return "__half"
    if isinstance(t, BFloat16Type):
        return "__nv_bfloat16"
    raise ValueError(f"type {t} has no C spelling")


def _shortest_f32(value: float) -> str:
    """The shortest decimal that reads back as the same ``float``."""
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == value:
            return text
    return f"{value:.9g}"


def _decimal(text: str) -> str:
    """Make ``1`` read as a floating literal (``1.0``); leave ``1.5``/``1e-05`` alone."""
    return text if any(c in text for c in ".en") else text + ".0"


def c_literal(value: IntegerAttr | FloatAttr, converted: bool = False) -> tuple[str, int]:
    """The C spelling of a literal and its precedence (negative numbers are unary minus).

    ``i1`` → ``true``/``false``; ``i32`` → ``5``; ``i64``/``index`` → ``5LL``, or ``5`` when
    ``converted`` says the context converts an ``int`` to ``long long`` anyway and the value
    fits in an ``int``; unsigned → ``8u``, ``8ull``, hexadecimal from 65536 on
    (``0xffffffffu``); ``f32`` → ``0.1f``;
    ``f64`` → ``0.1``; infinities and NaN through the bit-pattern intrinsics
    (``__int_as_float(0x7f800000)``).
    """
    typ = value.type
    if isinstance(value, IntegerAttr):
        v = value.value.data
        if is_bool(typ):
            return ("true" if v else "false"), _PRIMARY
        if is_unsigned(typ):
            assert isinstance(typ, IntegerType)
            v &= (1 << typ.width.data) - 1
            suffix = "ull" if typ.width.data == 64 else "u"
            return (f"{v}{suffix}" if v < 65536 else f"0x{v:x}{suffix}"), _PRIMARY
        wide = isinstance(typ, IndexType) or (isinstance(typ, IntegerType) and
                                              typ.width.data == 64)
        suffix = "LL" if wide and not (converted and -(1 << 31) < v < (1 << 31)) else ""
        bits = 64 if wide else 32
        if v == -(1 << (bits - 1)):  # the most negative value has no literal of its own
            suffix = "LL" if wide else ""
            return f"(-{(1 << (bits - 1)) - 1}{suffix} - 1{suffix})", _PRIMARY
        text = f"{v}{suffix}"
        if isinstance(typ, IntegerType) and typ.width.data in (8, 16):
            return f"(({c_type(typ)}){text})", _PRIMARY
        return text, (_UNARY if v < 0 else _PRIMARY)
    v = value.value.data
    if isinstance(typ, Float64Type):
        if math.isnan(v):
            return "__longlong_as_double(0x7ff8000000000000LL)", _PRIMARY
        if math.isinf(v):
            text = "__longlong_as_double(0x7ff0000000000000LL)"
            return ("-" + text, _UNARY) if v < 0 else (text, _PRIMARY)
        text = _decimal(repr(v))
    else:
        if math.isnan(v):
            text = "__int_as_float(0x7fffffff)"
        elif math.isinf(v):
            text = "__int_as_float(0x7f800000)"
        else:
            text = _decimal(_shortest_f32(v)) + "f"
        if isinstance(typ, Float16Type):
            text = f"__float2half({text})"
        elif isinstance(typ, BFloat16Type):
            text = f"__float2bfloat16({text})"
        if math.isinf(v) and v < 0:
            return "-" + text, _UNARY
    if v < 0 or (v == 0 and math.copysign(1.0, v) < 0):
        return text, _UNARY
    return text, _PRIMARY


class CudaPrinter:
    """Writes ``cuda`` ops as CUDA C++; one ``singledispatchmethod`` case per op."""

    def __init__(self, stream: IO[str], indent: str = "  ", locations: bool = False) -> None:
        """Print to ``stream``, indenting nested statements by ``indent``; with ``locations``,
        a ``// file:line:col`` comment above each kernel whose op has a source location."""
        self.stream = stream
        self.indent_unit = indent
        self.depth = 0
        self.locations = locations

    # --- layout ------------------------------------------------------------------------

    def line(self, text: str) -> None:
        """Write one indented line."""
        self.stream.write(f"{self.indent_unit * self.depth}{text}\n")

    @contextmanager
    def indented(self) -> Iterator[None]:
        """Indent the lines written inside the ``with`` block by one more level."""
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    def print_module(self, module: ModuleOp) -> None:
        """Print the translation unit: the module's ``cuda`` ops, in order."""
        previous: Operation | None = None
        for op in module.ops:
            if not isinstance(op, cuda.IncludeOp | cuda.TensorMapStructOp | cuda.KernelOp):
                continue
            if previous is not None and not (
                isinstance(op, cuda.IncludeOp) and isinstance(previous, cuda.IncludeOp)
            ):
                self.stream.write("\n")
            self.print_op(op)
            previous = op

    def print_block(self, region_ops: Iterator[Operation] | list[Operation]) -> None:
        """Print the statements of a body (expressions print inside their statements)."""
        for op in region_ops:
            if not isinstance(op, cuda.ExpressionOp):
                self.print_op(op)

    # --- top level and statements --------------------------------------------------------

    @singledispatchmethod
    def print_op(self, op: Operation) -> None:
        """Print one top-level op or statement."""
        raise NotImplementedError(f"'{op.name}' has no CUDA spelling")

    @print_op.register
    def _(self, op: cuda.IncludeOp) -> None:
        header = op.header.data
        self.line(f"#include <{header}>" if op.system is not None else f'#include "{header}"')

    @print_op.register
    def _(self, op: cuda.TensorMapStructOp) -> None:
        words = cuda.TENSOR_MAP_BYTES // 8
        self.line(f"struct __align__({cuda.TENSOR_MAP_ALIGN}) {cuda.TENSOR_MAP_STRUCT} "
                  f"{{ unsigned long long bits[{words}]; }};")

    @print_op.register
    def _(self, op: cuda.KernelOp) -> None:
        params = [self.param(p) for p in op.params]
        attrs = ""
        if op.launch_bounds is not None:
            bounds = [str(op.launch_bounds.value.data)]
            if op.min_blocks is not None:
                bounds.append(str(op.min_blocks.value.data))
            attrs = f"__launch_bounds__({', '.join(bounds)}) "
        if op.cluster is not None:
            attrs += f"__cluster_dims__({op.cluster_size}, 1, 1) "
        head = f'extern "C" __global__ void {attrs}{op.sym_name.data}('
        one_line = head + ", ".join(params) + ") {"
        if self.locations and isinstance(op.location, FileLineColLoc):
            # Where the kernel came from (its Kernel-IR or earlier op): NVRTC errors name the
            # kernel, and this line maps it back to the IR.
            self.line(f"// {_loc_text(op.location)}")
        if len(one_line) <= 100:
            self.line(one_line)
        else:
            self.line(head)
            for k, p in enumerate(params):
                self.line(f"    {p}" + ("," if k + 1 < len(params) else ") {"))
        with self.indented():
            self.print_block(list(op.body.block.ops))
        self.line("}")

    def param(self, p: cuda.Param) -> str:
        """``const float* __restrict__ x``; ``const __grid_constant__ llmopt_tensor_map m``
        (``__restrict__`` follows the type, the other qualifiers precede it)."""
        before = [q for q in p.qualifiers if q != "__restrict__"]
        after = [q for q in p.qualifiers if q == "__restrict__"]
        return " ".join([*before, c_type(p.type), *after, p.name])

    @print_op.register
    def _(self, op: cuda.DeclOp) -> None:
        quals = op.qualifier_names
        words = [q for q in ("extern", "__shared__") if q in quals]
        if op.align is not None:
            words.append(f"__align__({op.align.value.data})")
        cv = [q for q in quals if q in ("const", "volatile")]
        if isinstance(op.var_type, cuda.PtrType):
            words += [c_type(op.var_type), *cv]  # the pointer itself is const/volatile
        else:
            words += [*cv, c_type(op.var_type)]
        name = op.var_name.data
        if op.extent is not None:
            name += f"[{op.extent.value.data or ''}]"
        words.append(name)
        text = " ".join(words)
        if op.init is not None:
            text += " = " + self.expr_text(op.init)
        self.line(text + ";")

    @print_op.register
    def _(self, op: cuda.AssignOp) -> None:
        self.line(f"{self.expr_text(op.dst)} = {self.expr_text(op.src)};")

    @print_op.register
    def _(self, op: cuda.ExprStmtOp) -> None:
        self.line(f"{self.expr_text(op.expr)};")

    @print_op.register
    def _(self, op: cuda.AsmOp) -> None:
        names = op.constraint_names
        values = [*op.outs, *op.ins]
        parts = [f'"{c}"({self.expr_text(v)})' for c, v in zip(names, values, strict=True)]
        outs, ins = parts[:len(op.outs)], parts[len(op.outs):]
        asm = f'{"asm volatile" if op.volatile is not None else "asm"}("{op.template.data}"'
        if op.memory is not None:
            self.line(f'{asm} : {", ".join(outs)} : {", ".join(ins)} : "memory");'
                      if parts else f'{asm} ::: "memory");')
        elif parts:
            self.line(f'{asm} : {", ".join(outs)} : {", ".join(ins)});')
        else:
            self.line(f"{asm});")

    @print_op.register
    def _(self, op: cuda.ForOp) -> None:
        unroll = op.unroll_factor
        if unroll is not None:
            self.line("#pragma unroll" + (f" {unroll}" if unroll else ""))
        iv = op.iv_name.data
        lb = self.expr_text(op.lb)
        ub = self.operand(op.ub, _BINARY_PRECEDENCE["<"] + 1, True)
        step = self.operand(op.step, _TERNARY + 1, True)
        self.line(f"for ({c_type(op.iv_type)} {iv} = {lb}; {iv} < {ub}; {iv} += {step}) {{")
        with self.indented():
            self.print_block(list(op.body.block.ops))
        self.line("}")

    @print_op.register
    def _(self, op: cuda.IfOp) -> None:
        self.line(f"if ({self.expr_text(op.cond)}) {{")
        with self.indented():
            self.print_block(list(op.then_region.block.ops))
        if op.has_else:
            self.line("} else {")
            with self.indented():
                self.print_block(list(op.else_region.block.ops))
        self.line("}")

    # --- expressions ---------------------------------------------------------------------

    def expr_text(self, value: SSAValue, converted: bool = True) -> str:
        """The C text of the expression tree rooted at ``value``; ``converted``: the context
        converts the value to its IR type (a declaration, an assignment, a subscript)."""
        return self.expr(value.owner, converted)[0]

    def operand(self, value: SSAValue, min_precedence: int, converted: bool = False) -> str:
        """The text of a subexpression, parenthesised unless it binds at least as tightly
        as ``min_precedence``."""
        text, prec = self.expr(value.owner, converted)
        return text if prec >= min_precedence else f"({text})"

    def exact(self, value: SSAValue) -> bool:
        """Whether the C type of the printed expression is its IR type even where literals
        drop their ``LL`` suffix (so a literal next to it may drop its own)."""
        op = value.owner
        if isinstance(op, cuda.LiteralOp):
            return not isinstance(op.value, IntegerAttr) or c_literal(op.value, True) == (
                c_literal(op.value, False)
            )
        if isinstance(op, cuda.BinaryOp):
            operator = op.operator.data
            if operator in cuda.COMPARISON_OPERATORS or operator in cuda.LOGICAL_OPERATORS:
                return True
            if operator in ("<<", ">>"):
                return self.exact(op.lhs)
            return self.exact(op.lhs) or self.exact(op.rhs)
        if isinstance(op, cuda.UnaryOp):
            return self.exact(op.operand)
        if isinstance(op, cuda.TernaryOp):
            return self.exact(op.true_value) or self.exact(op.false_value)
        return True

    @singledispatchmethod
    def expr(self, op: Operation, converted: bool = False) -> tuple[str, int]:
        """The text of an expression op and its C precedence."""
        raise NotImplementedError(f"'{op.name}' is not a cuda expression")

    @expr.register
    def _(self, op: cuda.VarOp, converted: bool = False) -> tuple[str, int]:
        return op.var_name.data, _PRIMARY

    @expr.register
    def _(self, op: cuda.BuiltinOp, converted: bool = False) -> tuple[str, int]:
        return op.builtin.data, _PRIMARY

    @expr.register
    def _(self, op: cuda.LiteralOp, converted: bool = False) -> tuple[str, int]:
        return c_literal(op.value, converted)

    @expr.register
    def _(self, op: cuda.BinaryOp, converted: bool = False) -> tuple[str, int]:
        operator = op.operator.data
        prec = _BINARY_PRECEDENCE[operator]
        shift = operator in ("<<", ">>")
        parts = []
        for k, (value, sibling) in enumerate(((op.lhs, op.rhs), (op.rhs, op.lhs))):
            child = value.owner
            need = prec if k == 0 else prec + 1  # left-associative
            if isinstance(child, cuda.BinaryOp) and _clarify(operator, child.operator.data):
                need = _PRIMARY
            # The usual arithmetic conversions give an int literal the type of its sibling
            # (a shift's type is that of its left operand alone).
            conv = k == 1 if shift else self.exact(sibling)
            parts.append(self.operand(value, need, conv))
        return f"{parts[0]} {operator} {parts[1]}", prec

    @expr.register
    def _(self, op: cuda.UnaryOp, converted: bool = False) -> tuple[str, int]:
        text, prec = self.expr(op.operand.owner, False)
        # ``-(-x)``, never ``--x``; binary and ternary operands get parentheses too.
        if prec < _PRIMARY:
            text = f"({text})"
        return f"{op.operator.data}{text}", _UNARY

    @expr.register
    def _(self, op: cuda.CastOp, converted: bool = False) -> tuple[str, int]:
        text = self.operand(op.operand, _UNARY, True)
        return f"({c_type(op.result.type)}){text}", _UNARY

    @expr.register
    def _(self, op: cuda.TernaryOp, converted: bool = False) -> tuple[str, int]:
        cond = self.operand(op.cond, _PRIMARY if isinstance(
            op.cond.owner, cuda.BinaryOp | cuda.TernaryOp) else _TERNARY + 1)
        a = self.operand(op.true_value, _TERNARY + 1, self.exact(op.false_value))
        b = self.operand(op.false_value, _TERNARY + 1, self.exact(op.true_value))
        return f"{cond} ? {a} : {b}", _TERNARY

    @expr.register
    def _(self, op: cuda.CallOp, converted: bool = False) -> tuple[str, int]:
        args = ", ".join(self.expr_text(a, False) for a in op.args)
        return f"{op.callee.data}({args})", _PRIMARY

    @expr.register
    def _(self, op: cuda.IndexOp, converted: bool = False) -> tuple[str, int]:
        return f"{self.operand(op.base, _PRIMARY)}[{self.expr_text(op.index)}]", _PRIMARY


def print_cuda(module: ModuleOp, output: IO[str], locations: bool = False) -> None:
    """Print the ``cuda`` ops of ``module`` as a CUDA C++ translation unit to ``output``
    (with ``locations``: each kernel's source location as a comment above it)."""
    CudaPrinter(output, locations=locations).print_module(module)


def cuda_source(module: ModuleOp, locations: bool = False) -> str:
    """The CUDA C++ source of ``module`` (what :func:`print_cuda` writes), as a string."""
    buf = StringIO()
    print_cuda(module, buf, locations)
    return buf.getvalue()


def _loc_text(loc: FileLineColLoc) -> str:
    return f"{loc.filename.data}:{loc.line.data}:{loc.column.data}"


def kernel_locations(module: ModuleOp) -> dict[str, str]:
    """Kernel name → ``file:line:col`` of the IR op it was lowered from (the op of the input
    that became the ``loop.kernel``/``tile.kernel``/``kernel.func``; ``kernel-to-cuda`` and the
    lowerings above it carry locations down), for every ``cuda.kernel`` that has one.

    NVRTC errors name the kernel (:attr:`llmopt.codegen.nvrtc.NvrtcError.kernel_names`);
    this maps the name back to the IR: ``kernel_locations(module).get(err.kernel_names[0])``.
    """
    return {
        op.sym_name.data: _loc_text(op.location)
        for op in module.ops
        if isinstance(op, cuda.KernelOp) and isinstance(op.location, FileLineColLoc)
    }
