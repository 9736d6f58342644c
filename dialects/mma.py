"""The ``mma`` dialect: warp-level tensor-core instructions, usable at Tile and Kernel IR.

Like ``arith`` and ``math``, these ops are not a level of their own: a Tile-IR pass
(``mma-fragments``) introduces them inside a ``tile.forall over block_threads``,
``tile-to-kernel`` leaves them as they are, and ``kernel-to-cuda`` prints each as one PTX
instruction (inline ``asm``). Throughout, ``g = lane / 4`` and ``t = lane % 4``.

* ``%d0, %d1, %d2, %d3 = mma.sync (%a0, %a1, %a2, %a3) * (%b0, %b1) + (%c0, %c1, %c2, %c3)``
  — the 32 threads of a warp together compute ``D = A·B + C`` (``A`` is M×K, ``B`` K×N,
  ``C``/``D`` 16×8 in ``f32``); each thread holds pieces of every matrix. The shape follows
  from the type of ``a`` and ``b``:

  - ``f32``: PTX ``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32``, a 16×8 ``A`` and
    an 8×8 ``B``:

    ====  ==========================================================
    ``a``  ``A[g][t]``, ``A[g+8][t]``, ``A[g][t+4]``, ``A[g+8][t+4]``
    ``b``  ``B[t][g]``, ``B[t+4][g]``
    ====  ==========================================================

    The tensor core reads ``a`` and ``b`` as TF32 (the upper 19 bits of each ``f32``: a
    10-bit mantissa, low bits dropped), multiplies exactly and accumulates in ``f32``.
  - ``vector<2xbf16>`` or ``vector<2xf16>`` (a *pair*: two 16-bit values in one 32-bit
    register, the first in the low half): PTX
    ``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`` (or ``.f16``), a 16×16 ``A``
    and a 16×8 ``B``; pair ``a_q`` holds ``A[g + 8·(q mod 2)][2t + 8·(q floordiv 2) +
    {0, 1}]`` and ``b_q`` holds ``B[2t + 8q + {0, 1}][g]``. Products of 16-bit values are
    exact; they are summed with ``C`` in ``f32``.

  ``c`` and ``d`` are ``C[g][2t]``, ``C[g][2t+1]``, ``C[g+8][2t]``, ``C[g+8][2t+1]`` in
  both. Every thread of the warp must execute it, with the same roles.
* ``%h = mma.to_tf32 %x`` — PTX ``cvt.rna.tf32.f32``: ``x`` rounded to the nearest TF32
  value (ties away from zero), as an ``f32``. ``x - h`` is then exact in ``f32`` and holds
  the bits TF32 drops, which is how an ``f32`` product is computed from three TF32 ones
  (``a·b ≈ ah·bh + ah·bl + al·bh``).
* ``%r0, %r1, %r2, %r3 = mma.ldmatrix x4 %tile[%i, %j] : memref<64x40xbf16>`` — PTX
  ``ldmatrix.sync.aligned.m8n8.x4.shared.b16`` (``x1``, ``x2``, ``x4``; ``trans``
  optional): the warp loads ``count`` 8×8 matrices of 16-bit values from shared memory.
  Threads ``8m`` to ``8m + 7`` each give, as their indices, the start of one row of matrix
  ``m`` (8 contiguous elements, 16-byte aligned; the indices of the other threads are not
  read); afterwards result ``m`` of lane ``l`` is the pair of elements ``(l / 4, 2·(l %
  4))`` and ``(l / 4, 2·(l % 4) + 1)`` of matrix ``m`` — with ``trans``, ``(2·(l % 4), l /
  4)`` and ``(2·(l % 4) + 1, l / 4)``. That is exactly an ``a_q`` or ``b_q`` pair of
  ``m16n8k16``, which is why the fragments of a product are loaded with it.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    IndexType,
    MemRefType,
    StringAttr,
    UnitAttr,
    VectorType,
    f32,
)
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import MemoryReadEffect, Pure
from xdsl.utils.exceptions import VerifyException

from llmopt.dialects._syntax import constant_index

FRAGMENTS = {"a": 4, "b": 2, "c": 4}
"""Values each thread holds of ``A``, ``B`` and ``C`` in an ``mma.sync`` (either shape: the
``m16n8k16`` ones are pairs)."""

LDMATRIX_COUNTS = (1, 2, 4)
"""How many 8×8 matrices one ``ldmatrix`` may load."""

ROW_ELEMENTS = 8
"""16-bit elements of one ``ldmatrix`` row: 16 bytes, which must be 16-byte aligned."""


def pair_type(element: Attribute) -> VectorType:
    """``vector<2 x element>``: two 16-bit values in one 32-bit register."""
    return VectorType(element, [2])


def is_half(typ: Attribute) -> bool:
    """Whether ``typ`` is a 16-bit float the tensor cores multiply (``bf16`` or ``f16``)."""
    return isinstance(typ, BFloat16Type | Float16Type)


def pair_element(typ: Attribute) -> Attribute | None:
    """The element of a pair type ``vector<2xbf16>``/``vector<2xf16>``, else ``None``."""
    if (isinstance(typ, VectorType) and typ.get_shape() == (2,)
            and is_half(typ.element_type)):
        return typ.element_type
    return None


def operand_kind(typ: Attribute) -> str | None:
    """The PTX name of what ``mma.sync`` multiplies for fragments of type ``typ``: ``tf32``
    for ``f32``, ``bf16``/``f16`` for pairs of them; ``None`` for anything else."""
    if isinstance(typ, Float32Type):
        return "tf32"
    element = pair_element(typ)
    if isinstance(element, BFloat16Type):
        return "bf16"
    if isinstance(element, Float16Type):
        return "f16"
    return None


@irdl_op_definition
class SyncOp(IRDLOperation):
    """``mma.sync``: one warp-wide tensor-core product with ``f32`` accumulation,
    ``m16n8k8`` TF32 for ``f32`` fragments or ``m16n8k16`` for ``bf16``/``f16`` pairs (see
    the module docstring for which thread holds which element)."""

    name = "mma.sync"
    a = var_operand_def()
    b = var_operand_def()
    c = var_operand_def(Float32Type)
    d0 = result_def(f32)
    d1 = result_def(f32)
    d2 = result_def(f32)
    d3 = result_def(f32)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    traits = traits_def(Pure())

    def __init__(self, a: Sequence[SSAValue], b: Sequence[SSAValue],
                 c: Sequence[SSAValue]) -> None:
        super().__init__(operands=[list(a), list(b), list(c)], result_types=[f32] * 4)

    @property
    def kind(self) -> str:
        """``tf32``, ``bf16`` or ``f16``: what the tensor core multiplies."""
        kind = operand_kind(self.a[0].type) if self.a else None
        assert kind is not None, "mma.sync: verify the op before asking its kind"
        return kind

    @property
    def k(self) -> int:
        """The product's K: 8 (TF32) or 16 (pairs)."""
        return 8 if self.kind == "tf32" else 16

    def verify_(self) -> None:
        types = {v.type for v in (*self.a, *self.b)}
        if len(types) != 1 or operand_kind(next(iter(types))) is None:
            found = ", ".join(sorted(str(t) for t in types))
            raise VerifyException(f"mma.sync multiplies f32 (m16n8k8, tf32) or "
                                  f"vector<2xbf16>/vector<2xf16> pairs (m16n8k16), all 'a' "
                                  f"and 'b' values of one type; got {found}")
        shape = "m16n8k8, tf32" if self.kind == "tf32" else f"m16n8k16, {self.kind} pairs"
        for role, count in FRAGMENTS.items():
            got = len(getattr(self, role))
            if got != count:
                raise VerifyException(f"mma.sync takes {count} '{role}' values per thread "
                                      f"({shape}), got {got}")

    def print(self, printer: Printer) -> None:
        for k, values in enumerate((self.a, self.b, self.c)):
            printer.print_string(("", " * ", " + ")[k])
            printer.print_string("(")
            printer.print_list(values, printer.print_ssa_value)
            printer.print_string(")")
        printer.print_op_attributes(self.attributes)
        typ = self.a[0].type if self.a else f32
        if not isinstance(typ, Float32Type):
            printer.print_string(" : ")
            printer.print_attribute(typ)

    @classmethod
    def parse(cls, parser: Parser) -> SyncOp:
        groups = []
        for k in range(3):
            if k:
                parser.parse_punctuation("*" if k == 1 else "+")
            groups.append(parser.parse_comma_separated_list(
                Parser.Delimiter.PAREN, parser.parse_unresolved_operand))
        attrs = parser.parse_optional_attr_dict()
        typ: Attribute = f32
        if parser.parse_optional_punctuation(":") is not None:
            typ = parser.parse_type()
        a, b, c = ([parser.resolve_operand(v, t) for v in group]
                   for group, t in zip(groups, (typ, typ, f32), strict=True))
        op = cls(a, b, c)
        op.attributes |= attrs
        return op


@irdl_op_definition
class ToTf32Op(IRDLOperation):
    """``mma.to_tf32``: round an ``f32`` to the nearest TF32 value (ties away from zero)."""

    name = "mma.to_tf32"
    value = operand_def(Float32Type)
    result = result_def(Float32Type)
    traits = traits_def(Pure())
    assembly_format = "$value attr-dict"

    def __init__(self, value: SSAValue) -> None:
        super().__init__(operands=[value], result_types=[f32])


def is_shared_buffer(buffer: SSAValue) -> bool:
    """Whether ``buffer`` is shared memory: a ``tile.alloc shared`` or a ``kernel.shared``
    (by name: the dialects that define them build on this one's users, not on it)."""
    owner = buffer.owner
    if not isinstance(owner, IRDLOperation):
        return False
    if owner.name == "kernel.shared":
        return True
    space = owner.properties.get("space")
    return owner.name == "tile.alloc" and isinstance(space, StringAttr) and space.data == "shared"


@irdl_op_definition
class LdMatrixOp(IRDLOperation):
    """``mma.ldmatrix``: a warp loads ``count`` 8×8 matrices of 16-bit values from shared
    memory, one row address per thread of ``8·count`` (see the module docstring)."""

    name = "mma.ldmatrix"
    buffer = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    fragments = var_result_def()
    trans = opt_prop_def(UnitAttr)
    traits = traits_def(MemoryReadEffect())

    def __init__(self, buffer: SSAValue, indices: Sequence[SSAValue], count: int,
                 trans: bool = False) -> None:
        typ = buffer.type
        assert isinstance(typ, MemRefType)
        super().__init__(operands=[buffer, list(indices)],
                         result_types=[[pair_type(typ.element_type)] * count],
                         properties={"trans": UnitAttr()} if trans else {})

    @property
    def count(self) -> int:
        """The matrices loaded (1, 2 or 4)."""
        return len(self.fragments)

    def verify_(self) -> None:
        typ = self.buffer.type
        assert isinstance(typ, MemRefType)
        if self.count not in LDMATRIX_COUNTS:
            raise VerifyException(f"mma.ldmatrix loads 1, 2 or 4 matrices, got {self.count} "
                                  f"results")
        element = typ.element_type
        if not is_half(element):
            raise VerifyException(f"mma.ldmatrix loads 16-bit floats (bf16 or f16), the "
                                  f"buffer holds {element}")
        want = pair_type(element)
        for value in self.fragments:
            if value.type != want:
                raise VerifyException(f"mma.ldmatrix results are {want} pairs of the "
                                      f"buffer's elements, got {value.type}")
        if len(self.indices) != typ.get_num_dims():
            raise VerifyException(f"mma.ldmatrix: {len(self.indices)} indices for a "
                                  f"rank-{typ.get_num_dims()} buffer")
        if not is_shared_buffer(self.buffer):
            raise VerifyException("mma.ldmatrix reads shared memory: its buffer must be a "
                                  "'tile.alloc shared' or a 'kernel.shared'")
        shape = typ.get_shape()
        if shape and shape[-1] >= 0 and shape[-1] % ROW_ELEMENTS:
            raise VerifyException(f"mma.ldmatrix reads rows of {ROW_ELEMENTS} elements at "
                                  f"16-byte aligned addresses: the buffer's rows of "
                                  f"{shape[-1]} elements are not a multiple of 16 bytes (pad "
                                  f"them to a multiple of {ROW_ELEMENTS})")
        last = constant_index(self.indices[-1]) if self.indices else None
        if last is not None and last % ROW_ELEMENTS:
            raise VerifyException(f"mma.ldmatrix rows start 16-byte aligned: the innermost "
                                  f"index must be a multiple of {ROW_ELEMENTS}, got {last}")
        if shape and last is not None and shape[-1] >= 0 and last + ROW_ELEMENTS > shape[-1]:
            raise VerifyException(f"mma.ldmatrix reads {ROW_ELEMENTS} elements from the "
                                  f"innermost index {last}, past the row's {shape[-1]}")

    def print(self, printer: Printer) -> None:
        printer.print_string(f" x{self.count}")
        if self.trans is not None:
            printer.print_string(" trans")
        printer.print_string(" ")
        printer.print_ssa_value(self.buffer)
        printer.print_string("[")
        printer.print_list(self.indices, printer.print_ssa_value)
        printer.print_string("]")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.buffer.type)

    @classmethod
    def parse(cls, parser: Parser) -> LdMatrixOp:
        word = parser.parse_identifier()
        if word not in {f"x{n}" for n in LDMATRIX_COUNTS}:
            parser.raise_error(f"mma.ldmatrix: expected x1, x2 or x4, got '{word}'")
        trans = parser.parse_optional_keyword("trans") is not None
        buffer = parser.parse_unresolved_operand()
        indices = parser.parse_comma_separated_list(
            Parser.Delimiter.SQUARE, lambda: parser.parse_operand(IndexType()))
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        if not isinstance(typ, MemRefType):
            parser.raise_error(f"mma.ldmatrix: expected a memref type, got {typ}")
        op = cls(parser.resolve_operand(buffer, typ), indices, int(word[1:]), trans)
        op.attributes |= attrs
        return op


@irdl_op_definition
class PackOp(IRDLOperation):
    """``mma.pack``: two 16-bit floats of the thread as one pair, the first in the low half
    (see the module docstring)."""

    name = "mma.pack"
    low = operand_def()
    high = operand_def()
    result = result_def()
    traits = traits_def(Pure())

    def __init__(self, low: SSAValue, high: SSAValue) -> None:
        super().__init__(operands=[low, high], result_types=[pair_type(low.type)])

    def verify_(self) -> None:
        if not is_half(self.low.type) or self.high.type != self.low.type:
            raise VerifyException(f"mma.pack packs two bf16 or two f16 values, got "
                                  f"{self.low.type} and {self.high.type}")
        if self.result.type != pair_type(self.low.type):
            raise VerifyException(f"mma.pack gives a {pair_type(self.low.type)} pair, got "
                                  f"{self.result.type}")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list((self.low, self.high), printer.print_ssa_value)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.low.type)

    @classmethod
    def parse(cls, parser: Parser) -> PackOp:
        low = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        high = parser.parse_unresolved_operand()
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        op = cls(parser.resolve_operand(low, typ), parser.resolve_operand(high, typ))
        op.attributes |= attrs
        return op


Mma = Dialect("mma", [SyncOp, ToTf32Op, LdMatrixOp, PackOp], [])

__all__ = ["FRAGMENTS", "LDMATRIX_COUNTS", "ROW_ELEMENTS", "LdMatrixOp", "Mma", "PackOp",
           "SyncOp", "ToTf32Op", "is_half", "is_shared_buffer", "operand_kind", "pair_element",
           "pair_type"]
