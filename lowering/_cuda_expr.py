"""C expressions and buffer accesses for ``kernel-to-cuda``.

:class:`ExprBuilder` appends ``cuda`` expression ops to the block being written and returns
their values: literals (integers wrapped to their type's width, a cast of an integer literal
folded into the literal), operators, calls, casts (16-bit floats through the intrinsics of
``cuda_fp16.h``/``cuda_bf16.h``), and ``p[offset]`` for ``kernel.load``/``kernel.store`` —
the offset ``i * stride + j ...`` from the memref's static strides, constant indices folded
into one constant, or, for a buffer with ``?`` extents, from the kernel's length
(:mod:`~llmopt.lowering._symbolic_layout`). A value becomes a variable, a literal or an
inlined subexpression as :mod:`~llmopt.lowering._cuda_values` decided; the expression of an
inlined op comes from its handler (:mod:`~llmopt.lowering._cuda_ops`).

``index`` is computed in :attr:`ExprBuilder.index`: ``long long``, or ``int`` in a kernel
whose indices are proven to fit in 32 bits.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, SSAValue
from xdsl.utils.exceptions import PassFailedException

from llmopt.dialects import cuda
from llmopt.dialects._symbols import has_dynamic
from llmopt.dialects._syntax import constant_index
from llmopt.dialects.wgmma import CHUNK_BYTES, SWIZZLE_BYTES, SWIZZLE_ROWS, swizzle
from llmopt.lowering._cuda_names import MATH_FUNCTIONS
from llmopt.lowering._cuda_ops import HANDLERS
from llmopt.lowering._cuda_types import F32, I1, INDEX, bit_width
from llmopt.lowering._cuda_values import Kind
from llmopt.lowering._symbolic_layout import needs_length, symbolic_strides
from llmopt.passes._rewrite import fail, is_half

__all__ = ["ExprBuilder"]


class ExprBuilder:
    """Builds the ``cuda`` expressions of one kernel into :attr:`block`.

    A base of :class:`~llmopt.lowering._cuda_emitter.KernelEmitter`, which owns the state
    read here: what each value became (:attr:`kind`), the C variable and type of each named
    value, the block being written, the type ``index`` is computed in, and the local holding
    the length of a kernel with ``?`` buffers."""

    kind: dict[SSAValue, Kind]
    var: dict[SSAValue, str]
    var_type: dict[SSAValue, Attribute]
    block: Block
    index: Attribute
    length_var: str | None

    def add(self, op: Operation) -> Operation:
        """Append ``op`` to the block being written."""
        self.block.add_op(op)
        return op

    def expr(self, value: SSAValue) -> SSAValue:
        """Append the expression tree of ``value``; return its root."""
        kind = self.kind.get(value)
        if kind is Kind.NAMED and value in self.var:
            return self.add(cuda.VarOp(self.var[value], self.var_type[value])).results[0]
        if kind is Kind.LITERAL:
            assert isinstance(value.owner, arith.ConstantOp)
            return self._literal_attr(value.owner)
        if kind is Kind.INLINE:
            assert isinstance(value.owner, Operation)
            return self.lower(value.owner)
        owner = value.owner
        if isinstance(value, BlockArgument) or not isinstance(owner, Operation):
            raise PassFailedException("unbound block argument (a kernel-to-cuda bug)")
        raise fail(owner, "value used before it is defined (a kernel-to-cuda bug)")

    def _literal_attr(self, op: arith.ConstantOp) -> SSAValue:
        attr = op.value
        if isinstance(attr, IntegerAttr):
            return self.integer(attr.value.data, attr.type)
        if isinstance(attr, FloatAttr):
            return self.add(cuda.LiteralOp(attr)).results[0]
        raise fail(op, f"only scalar constants are supported, got {attr}")

    def integer(self, value: int, typ: Attribute) -> SSAValue:
        typ = self.index if isinstance(typ, IndexType) else typ
        if cuda.is_bool(typ):
            value = int(value != 0)
        elif cuda.is_unsigned(typ):
            value &= (1 << bit_width(typ)) - 1
        else:
            bits = bit_width(typ)
            value = ((value + (1 << (bits - 1))) % (1 << bits)) - (1 << (bits - 1))
        return self.add(cuda.LiteralOp(IntegerAttr(value, typ))).results[0]

    def boolean(self, value: bool) -> SSAValue:
        return self.integer(int(value), I1)

    def binary(self, operator: str, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
        return self.add(cuda.BinaryOp(operator, lhs, rhs)).results[0]

    def unary(self, operator: str, operand: SSAValue) -> SSAValue:
        return self.add(cuda.UnaryOp(operator, operand)).results[0]

    def cast(self, value: SSAValue, typ: Attribute) -> SSAValue:
        typ = self.index if isinstance(typ, IndexType) else typ
        if value.type == typ:
            return value
        if is_half(value.type) or is_half(typ):
            return self._convert_half(value, typ)
        literal = value.owner
        if (isinstance(literal, cuda.LiteralOp) and isinstance(literal.value, IntegerAttr)
                and not value.uses and literal is self.block.last_op):
            # A cast of an integer literal is the literal of the converted value.
            number = literal.value.value.data
            if cuda.is_integer(typ) or cuda.is_bool(typ):
                literal.detach()
                literal.erase()
                return self.integer(number, typ)
            if isinstance(typ, Float32Type | Float64Type) and abs(number) < (1 << 24):
                literal.detach()
                literal.erase()
                return self.add(cuda.LiteralOp(FloatAttr(float(number), typ))).results[0]
        return self.add(cuda.CastOp(value, typ)).results[0]

    def _convert_half(self, value: SSAValue, typ: Attribute) -> SSAValue:
        """A conversion from or to a 16-bit float by the intrinsics of ``cuda_bf16.h`` /
        ``cuda_fp16.h``: ``__bfloat162float``/``__half2float`` to ``float`` (then a C cast to
        ``typ``), ``__float2bfloat16``/``__float2half`` (round to nearest even) from
        ``float``, ``__double2bfloat16``/``__double2half`` from ``double``; anything else
        through ``float``."""
        src = value.type
        if is_half(src):
            widen = "__bfloat162float" if isinstance(src, BFloat16Type) else "__half2float"
            return self.cast(self.call(widen, [value], F32), typ)
        bf16 = isinstance(typ, BFloat16Type)
        if isinstance(src, Float64Type):
            return self.call("__double2bfloat16" if bf16 else "__double2half", [value], typ)
        return self.call("__float2bfloat16" if bf16 else "__float2half",
                         [self.cast(value, F32)], typ)

    def expr_as(self, value: SSAValue, typ: Attribute) -> SSAValue:
        """The expression of ``value`` cast to ``typ``."""
        return self.cast(self.expr(value), typ)

    def call(self, callee: str, args: Sequence[SSAValue], typ: Attribute) -> SSAValue:
        return self.add(cuda.CallOp(callee, args, typ)).results[0]

    def ternary(self, cond: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(cuda.TernaryOp(cond, a, b)).results[0]

    def element(self, buffer: SSAValue, indices: Sequence[SSAValue], op: Operation) -> SSAValue:
        """``p[offset]`` for ``buffer[indices]`` (accessed by ``op``)."""
        typ = buffer.type
        assert isinstance(typ, MemRefType)
        owner = buffer.owner
        if has_dynamic(typ):
            return self._symbolic_element(buffer, typ, indices, op)
        strides, offset = typ.get_strides(), typ.get_offset()
        if strides is None or offset is None or None in strides:
            raise fail(op, f"buffer of type {typ} has no static strides")
        if buffer not in self.var:
            what = owner.name if isinstance(owner, Operation) else "a block argument"
            raise fail(op, f"buffer defined by {what} is not a kernel parameter or a "
                           "kernel.shared or kernel.local buffer")
        if swizzle(buffer) is not None:
            if len(indices) < 2 or offset != 0:
                raise fail(op, f"a swizzled buffer has rows and starts at its first "
                               f"element, got {typ}")
            return self._swizzled(buffer, typ, indices)
        base = self.add(cuda.VarOp(self.var[buffer], self.var_type[buffer])).results[0]
        constant = int(offset)
        total: SSAValue | None = None
        for index, stride in zip(indices, strides, strict=True):
            assert stride is not None
            if stride == 0:
                continue
            if self.kind.get(index) is Kind.LITERAL:
                assert isinstance(index.owner, arith.ConstantOp)
                value = index.owner.value
                assert isinstance(value, IntegerAttr)
                constant += value.value.data * stride
                continue
            term = self.cast(self.expr(index), INDEX)
            if stride != 1:
                term = self.binary("*", term, self.integer(stride, INDEX))
            total = term if total is None else self.binary("+", total, term)
        if total is None:
            total = self.integer(constant, INDEX)
        elif constant:
            operator = "+" if constant > 0 else "-"
            total = self.binary(operator, total, self.integer(abs(constant), INDEX))
        return self.add(cuda.IndexOp(base, total)).results[0]

    def _swizzled(self, buffer: SSAValue, typ: MemRefType,
                  indices: Sequence[SSAValue]) -> SSAValue:
        """``p[… + (c / A)·R·A + r·A + ((c mod A) ^ ((r & 7)·C))]`` for element ``(…, r, c)``
        of a swizzled ``…×R×W`` buffer (``llmopt.swizzle``: atoms of rows of ``A`` elements,
        128 bytes, in groups of 8, ``W / A`` of them a tile; ``C`` elements a 16-byte chunk):
        the chunk's place in its atom's row xor the row's place in its group. With ``W = A``
        (one atom) that is ``r·W + (c ^ ((r & 7)·C))``."""
        elem = (bit_width(typ.element_type) + 7) // 8
        chunk, atom = CHUNK_BYTES // elem, SWIZZLE_BYTES // elem
        strides = typ.get_strides()
        rows, width = typ.get_shape()[-2], typ.get_shape()[-1]
        base = self.add(cuda.VarOp(self.var[buffer], self.var_type[buffer])).results[0]
        known = [constant_index(v) for v in indices]
        if all(k is not None for k in known):
            *outer, r, c = (k for k in known if k is not None)
            place = sum(k * st for k, st in zip(outer, strides, strict=False))
            place += c // atom * rows * atom + r * atom + (c % atom ^ (r % SWIZZLE_ROWS * chunk))
            return self.add(cuda.IndexOp(base, self.integer(place, INDEX))).results[0]
        total: SSAValue | None = None
        for index, stride in zip(indices[:-2], strides, strict=False):
            term = self.binary("*", self.cast(self.expr(index), INDEX),
                               self.integer(stride, INDEX))
            total = term if total is None else self.binary("+", total, term)
        def index(k: int) -> SSAValue:  # each use of an index prints it again
            return self.cast(self.expr(indices[k]), INDEX)

        term = self.binary("*", index(-2), self.integer(atom, INDEX))
        total = term if total is None else self.binary("+", total, term)
        group = self.binary("&", index(-2), self.integer(SWIZZLE_ROWS - 1, INDEX))
        shift = self.binary("*", group, self.integer(chunk, INDEX))
        col = index(-1)
        if width > atom:  # the atom's place, then the column inside it
            which = self.binary(">>", col, self.integer(atom.bit_length() - 1, INDEX))
            total = self.binary("+", total, self.binary(
                "*", which, self.integer(rows * atom, INDEX)))
            col = self.binary("&", index(-1), self.integer(atom - 1, INDEX))
        place = self.binary("+", total, self.binary("^", col, shift))
        return self.add(cuda.IndexOp(base, place)).results[0]

    def _symbolic_element(self, buffer: SSAValue, typ: MemRefType,
                          indices: Sequence[SSAValue], op: Operation) -> SSAValue:
        """``p[offset]`` for a buffer with ``?`` extents: row-major, each ``?`` the length
        (:mod:`~llmopt.lowering._symbolic_layout`)."""
        if buffer not in self.var or (self.length_var is None and needs_length(typ)):
            raise fail(op, f"buffer of type {typ} has ? extents but the kernel has no "
                           "length parameter")
        base = self.add(cuda.VarOp(self.var[buffer], self.var_type[buffer])).results[0]
        total: SSAValue | None = None
        offset = 0
        for index, extent, (constant, power) in zip(indices, typ.get_shape(),
                                                    symbolic_strides(typ), strict=True):
            if extent == 1:  # the index of a dim of extent 1 is 0
                continue
            if self.kind.get(index) is Kind.LITERAL:
                assert isinstance(index.owner, arith.ConstantOp)
                value = index.owner.value
                assert isinstance(value, IntegerAttr)
                constant *= value.value.data
                if constant == 0 or power == 0:
                    offset += constant
                    continue
                term = self.integer(constant, INDEX)
            else:
                term = self.cast(self.expr(index), INDEX)
                if constant != 1:
                    term = self.binary("*", term, self.integer(constant, INDEX))
            for _ in range(power):
                length = self.add(cuda.VarOp(self.length_var, self.index)).results[0]
                term = self.binary("*", term, length)
            total = term if total is None else self.binary("+", total, term)
        if total is None:
            total = self.integer(offset, INDEX)
        elif offset:
            total = self.binary("+", total, self.integer(offset, INDEX))
        return self.add(cuda.IndexOp(base, total)).results[0]

    def lower(self, op: Operation) -> SSAValue:
        """Append the expression of a single-result op (its operands' trees first)."""
        if type(op) in MATH_FUNCTIONS:
            typ = op.results[0].type
            if not isinstance(typ, Float32Type | Float64Type):
                raise fail(op, f"no CUDA math function for {typ}")
            f32_name, f64_name = MATH_FUNCTIONS[type(op)]
            args = [self.expr(v) for v in op.operands]
            return self.call(f32_name if isinstance(typ, Float32Type) else f64_name, args, typ)
        handler = HANDLERS.get(type(op))
        if handler is None:
            if isinstance(op, arith.ConstantOp):
                return self._literal_attr(op)
            raise fail(op, "unsupported in a kernel")
        return handler(self, op)

    def _check_supported(self, op: Operation) -> None:
        """Raise unless :meth:`lower` has an expression for ``op``."""
        if not (isinstance(op, arith.ConstantOp) or type(op) in HANDLERS
                or type(op) in MATH_FUNCTIONS):
            raise fail(op, "unsupported in a kernel")
