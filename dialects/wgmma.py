"""The ``wgmma`` dialect: warpgroup-level tensor-core products (sm_90a), at Tile and Kernel IR.

A *warpgroup* is four consecutive warps of a block (threads ``128·w`` to ``128·w + 127``).
Its 128 threads together multiply a ``64 × 16`` ``A`` by a ``16 × N`` ``B`` that both live in
shared memory, adding the product to a ``64 × N`` ``f32`` accumulator held in registers —
PTX ``wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16`` (or ``.f16``). Unlike
``mma.sync`` the operands are not loaded into registers first: the instruction reads the
shared tiles itself, through 64-bit *descriptors* that ``kernel-to-cuda`` builds from the
tiles' addresses. The product runs asynchronously; ``wgmma.commit`` closes a group of
products and ``wgmma.wait`` waits for all but the newest ``pending`` groups.

* ``wgmma.fence`` — before the first product that reads registers or shared memory the
  threads wrote: ``fence.proxy.async.shared::cta`` (shared-memory writes become visible to
  the tensor core's reads) and ``wgmma.fence.sync.aligned``.
* ``%d… = wgmma.mma %a[%ar, %ak], %b[%bn, %bk] + (%c…) : memref<64x64xbf16>,
  memref<128x64xbf16>`` — ``D = A·B + C`` with ``A[r][k] = a[ar + r][ak + k]`` (``r < 64``,
  ``k < 16``) and ``B[k][n] = b[bn + n][bk + k]`` (``n < N``): both tiles keep ``K``
  innermost, as ``x[m, k]`` and ``W[n, k]`` do. A buffer of more dimensions (the slots of a
  pipelined tile, ``memref<3x64x64xbf16>``) takes an index for each: the leading ones pick
  the tile, the last two are the row and ``k``. ``A`` may instead come from registers:
  ``wgmma.mma (%a0, %a1, %a2, %a3), %b[…] + (…) : vector<2xbf16>, memref<…>``, four pairs a
  thread, warp ``w`` of the warpgroup holding rows ``16·w`` to ``16·w + 15`` in the layout
  of ``mma.sync``'s ``m16n8k16`` ``A`` fragment (``a_q = A[16·w + g + 8·(q mod 2)][2t + 8·(q
  / 2) + {0, 1}]``, the first value in the low half). With ``transposed`` after ``b``'s
  indices, ``b`` is read *N-major* (PTX ``imm-trans-b``): ``B[k][n] = b[bk + k][bn + n]``,
  the tile ``[…, K, N]`` as ``W[k, n]`` of ``x @ W`` keeps it, its indices ``(…, bk, bn)``,
  ``bk`` a multiple of 16 and ``bn`` of 64. ``N`` is twice the number of accumulator values
  a thread holds (8 to 256, a multiple of 8). ``+ zeros(n)`` in place of ``+ (%c…)`` starts
  from a zero accumulator of ``n`` values a thread, ``D = A·B`` (PTX ``scale-d`` false): the
  first product of a tile computed afresh, as a flash kernel's scores are for each key
  block, needs no zeros written into registers first. Thread ``l`` of warp ``w`` of the
  warpgroup (``g = l / 4``, ``t = l % 4``) holds, as its value ``i``, ``C[16·w + g + 8·((i /
  2) mod 2)][8·(i / 4) + 2·t + i mod 2]`` — the ``m16n8`` accumulator layout of
  ``mma.sync``, one ``8``-column block after another. The indices are the same for every
  thread of the warpgroup; in both tiles the row is a multiple of 8 and ``k`` of 16. The
  results may only feed further ``wgmma.mma`` ops until a ``wgmma.wait`` covers them, and
  the tiles may not be overwritten before then (neither is checked: the interpreters compute
  a product when it is issued).
* ``wgmma.commit`` — ``wgmma.commit_group.sync.aligned``.
* ``%e… = wgmma.wait 0 (%d…)`` — ``wgmma.wait_group.sync.aligned 0``: the products of all
  but the newest ``pending`` groups are complete, and ``%e…`` are their accumulators (with
  ``pending`` above 0 they must belong to the completed groups). The
  accumulators pass through the op so that no read of them moves above it: a product's
  results are only defined once it is waited for.

**Shared tiles** must be *swizzled*: a ``tile.alloc shared`` or ``kernel.shared`` marked
``llmopt.swizzle = 128``, rows of a multiple of 128 bytes (64 16-bit values) as the
innermost dimension, a multiple of 8 of them in the next. ``kernel-to-cuda`` places such a
buffer at a 1024-byte boundary and lays each ``R × W`` tile of it out as ``W / 64`` atoms
one after another, atom ``a`` holding columns ``64·a`` to ``64·a + 63`` of every row in
rows of 128 bytes: element ``(r, c)``, of 16-byte chunk ``(c mod 64) / 8`` of its atom's
row, is stored at chunk ``((c mod 64) / 8) xor (r mod 8)`` of that row, the layout the
descriptors' 128-byte swizzle mode reads. A product's 16 values of ``k`` never cross an
atom, so each descriptor starts inside one, as with a single atom. An N-major ``b`` is laid
out the same way, its rows the values of ``k`` and its atoms 64 columns of ``n`` each: a
product reads two groups of 8 rows, 1024 bytes apart, and its ``N`` columns from one atom
to the next ``R·128`` bytes on. Every other access to the
buffer (the copies that fill it) goes through the same mapping, so its values, as the
interpreters see them, are the logical ones.

Every thread of a warpgroup executes these ops together, with the same indices.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    Float32Type,
    IndexType,
    IntegerAttr,
    MemRefType,
    UnitAttr,
    VectorType,
    f32,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect
from xdsl.utils.exceptions import VerifyException

from llmopt.dialects._syntax import constant_index
from llmopt.dialects.mma import is_half, is_shared_buffer, pair_type

WARPGROUP = 128
"""Threads of a warpgroup."""
M = 64
"""Rows of a ``wgmma.mma``'s ``A`` and accumulator."""
K = 16
"""The ``K`` of one ``wgmma.mma`` of 16-bit values."""
SWIZZLE_ATTR = "llmopt.swizzle"
"""The attribute of a shared buffer laid out for the descriptors' swizzle mode (bytes)."""
SWIZZLE_BYTES = 128
"""The swizzle mode ``wgmma.mma`` reads: rows of 128 bytes, 16-byte chunks permuted over
groups of 8 rows."""
SWIZZLE_ROWS = 8
"""Rows of one swizzle atom (1024 bytes)."""
CHUNK_BYTES = 16
"""Bytes of a chunk the swizzle permutes."""
ATOM_COLUMNS = SWIZZLE_BYTES // 2
"""16-bit values in a row of a swizzle atom: a tile's rows are whole atoms of these."""
MAX_N = 256
"""The largest ``N`` of one ``wgmma.mma``."""
A_PAIRS = 4
"""Pairs of 16-bit values a thread holds of an ``A`` in registers: its warp's ``m16n8k16``
``A`` fragment (``a_q = A[16·w + g + 8·(q mod 2)][2t + 8·(q / 2) + {0, 1}]``)."""


def swizzle(buffer: SSAValue) -> int | None:
    """The swizzle (bytes) of a shared buffer, or ``None`` when it has none."""
    owner = buffer.owner
    if not isinstance(owner, Operation):
        return None
    attr = owner.attributes.get(SWIZZLE_ATTR)
    return attr.value.data if isinstance(attr, IntegerAttr) else None


def check_swizzled_tile(buffer: SSAValue, role: str) -> None:
    """Raise ``VerifyException`` unless ``buffer`` is a shared buffer a descriptor may read:
    swizzled, 16-bit values, rows of a multiple of 128 bytes, whole swizzle atoms."""
    typ = buffer.type
    assert isinstance(typ, MemRefType)
    if not is_shared_buffer(buffer):
        raise VerifyException(f"wgmma.mma reads '{role}' from shared memory: its buffer must "
                              f"be a 'tile.alloc shared' or a 'kernel.shared'")
    if swizzle(buffer) != SWIZZLE_BYTES:
        raise VerifyException(f"wgmma.mma: '{role}''s buffer must be marked "
                              f"{SWIZZLE_ATTR} = {SWIZZLE_BYTES}")
    if not is_half(typ.element_type):
        raise VerifyException(f"wgmma.mma multiplies bf16 or f16, '{role}''s buffer holds "
                              f"{typ.element_type}")
    shape = typ.get_shape()
    row = ATOM_COLUMNS
    if (len(shape) < 2 or any(e < 0 for e in shape) or shape[-1] % row or not shape[-1]
            or shape[-2] % SWIZZLE_ROWS):
        raise VerifyException(f"wgmma.mma: '{role}''s buffer must be …xRx(a·{row}) (rows of "
                              f"atoms of {SWIZZLE_BYTES} bytes, R a multiple of "
                              f"{SWIZZLE_ROWS}), got {typ}")


@irdl_op_definition
class FenceOp(IRDLOperation):
    """``wgmma.fence``: the threads' register and shared-memory writes are visible to the
    products that follow."""

    name = "wgmma.fence"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())  # orders the memory ops
    assembly_format = "attr-dict"


@irdl_op_definition
class CommitOp(IRDLOperation):
    """``wgmma.commit``: the products issued since the last commit form a group."""

    name = "wgmma.commit"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = "attr-dict"


@irdl_op_definition
class WaitOp(IRDLOperation):
    """``wgmma.wait``: every group but the newest ``pending`` is complete; the accumulators
    pass through."""

    name = "wgmma.wait"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    pending = prop_def(IntegerAttr)
    values = var_operand_def(Float32Type)
    results_ = var_result_def(Float32Type)

    def __init__(self, pending: int, values: Sequence[SSAValue]) -> None:
        super().__init__(operands=[list(values)], result_types=[[f32] * len(values)],
                         properties={"pending": IntegerAttr(pending, i64)})

    def verify_(self) -> None:
        if self.pending.value.data < 0:
            raise VerifyException(f"wgmma.wait: pending must be at least 0, got "
                                  f"{self.pending.value.data}")
        if len(self.values) != len(self.results_):
            raise VerifyException("wgmma.wait: one result per accumulator value")

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.pending.value.data} (")
        printer.print_list(self.values, printer.print_ssa_value)
        printer.print_string(")")
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> WaitOp:
        pending = parser.parse_integer()
        values = parser.parse_comma_separated_list(
            Parser.Delimiter.PAREN, lambda: parser.parse_operand(f32))
        op = cls(pending, values)
        op.attributes |= parser.parse_optional_attr_dict()
        return op


@irdl_op_definition
class MmaOp(IRDLOperation):
    """``wgmma.mma``: ``D = A·B + C`` for a warpgroup, ``B`` read from a swizzled shared tile
    and ``A`` from another or from the threads' registers (see the module docstring)."""

    name = "wgmma.mma"
    a = opt_operand_def(MemRefType)
    a_indices = var_operand_def(IndexType)
    a_pairs = var_operand_def(VectorType)
    b = operand_def(MemRefType)
    b_indices = var_operand_def(IndexType)
    c = var_operand_def(Float32Type)
    d = var_result_def(Float32Type)
    transposed = opt_prop_def(UnitAttr)
    zeros = opt_prop_def(IntegerAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    traits = traits_def(MemoryReadEffect())

    def __init__(self, a: SSAValue | Sequence[SSAValue], a_indices: Sequence[SSAValue],
                 b: SSAValue, b_indices: Sequence[SSAValue], c: Sequence[SSAValue],
                 transposed: bool = False, zeros: int = 0) -> None:
        """``c`` the accumulator values the product adds to; or, with ``c`` empty, ``zeros``
        of them, all zero (``D = A·B``)."""
        tile_a, pairs = ([a], []) if isinstance(a, SSAValue) else ([], list(a))
        props: dict[str, Attribute] = {"transposed": UnitAttr()} if transposed else {}
        if zeros:
            props["zeros"] = IntegerAttr(zeros, i64)
        super().__init__(operands=[tile_a, list(a_indices), pairs, b, list(b_indices),
                                   list(c)],
                         result_types=[[f32] * (len(c) or zeros)], properties=props)

    @property
    def from_zero(self) -> bool:
        """Whether the product starts from a zero accumulator (``+ zeros(n)``: no ``c``)."""
        return self.zeros is not None

    @property
    def n_major(self) -> bool:
        """Whether ``b`` is read N-major: its tile ``[…, K, N]`` (``transposed``)."""
        return self.transposed is not None

    @property
    def n(self) -> int:
        """The product's ``N``: twice the accumulator values of a thread."""
        return 2 * len(self.d)

    @property
    def kind(self) -> str:
        """``bf16`` or ``f16``."""
        typ = self.b.type
        assert isinstance(typ, MemRefType)
        return "bf16" if typ.element_type.name == "bf16" else "f16"

    def verify_(self) -> None:
        check_swizzled_tile(self.b, "b")
        b_type = self.b.type
        assert isinstance(b_type, MemRefType)
        tiles: list[tuple[str, Sequence[SSAValue], MemRefType, int]] = []
        if self.a is None:
            self._verify_pairs(b_type)
        else:
            check_swizzled_tile(self.a, "a")
            a_type = self.a.type
            assert isinstance(a_type, MemRefType)
            if a_type.element_type != b_type.element_type:
                raise VerifyException(f"wgmma.mma: 'a' holds {a_type.element_type}, 'b' "
                                      f"{b_type.element_type}; they must match")
            if self.a_pairs:
                raise VerifyException("wgmma.mma: 'a' is a tile or four pairs, not both")
            tiles.append(("a", self.a_indices, a_type, M))
        n = self.n
        if self.from_zero and (self.c or self.zeros.value.data != len(self.d)):
            raise VerifyException(f"wgmma.mma: a product from zero ('+ zeros(n)') has no "
                                  f"accumulator operands and n results; got {len(self.c)} "
                                  f"operands and {len(self.d)} results")
        if not (8 <= n <= MAX_N and n % 8 == 0) or (
                not self.from_zero and len(self.d) != len(self.c)):
            raise VerifyException(f"wgmma.mma: N = 2 x the accumulator values is 8 to "
                                  f"{MAX_N}, a multiple of 8, with one result per value; got "
                                  f"{len(self.c)} values and {len(self.d)} results")
        for role, indices, typ, _ in (*tiles, ("b", self.b_indices, b_type, n)):
            if len(indices) != typ.get_num_dims():
                raise VerifyException(f"wgmma.mma: {len(indices)} indices for '{role}''s "
                                      f"rank-{typ.get_num_dims()} buffer")
        if self.n_major:
            self._verify_n_major(b_type, n)
        else:
            tiles.append(("b", self.b_indices, b_type, n))
        for role, indices, typ, span in tiles:
            rows = typ.get_shape()[-2]
            r0, k0 = constant_index(indices[-2]), constant_index(indices[-1])
            if r0 is not None and (r0 % SWIZZLE_ROWS or r0 + span > rows):
                raise VerifyException(f"wgmma.mma: '{role}''s first row {r0} must be a "
                                      f"multiple of {SWIZZLE_ROWS} with {span} rows below "
                                      f"its {rows}")
            if k0 is not None and (k0 % K or k0 + K > typ.get_shape()[-1]):
                raise VerifyException(f"wgmma.mma: '{role}''s first k {k0} must be a "
                                      f"multiple of {K} within the row")

    def _verify_pairs(self, b_type: MemRefType) -> None:
        """``A`` from registers: four pairs of ``b``'s element type and no indices."""
        want = pair_type(b_type.element_type)
        if (len(self.a_pairs) != A_PAIRS or self.a_indices
                or any(v.type != want for v in self.a_pairs)):
            raise VerifyException(f"wgmma.mma: an 'a' in registers is {A_PAIRS} pairs of "
                                  f"type {want} ('b''s element) and no indices; got "
                                  f"{[str(v.type) for v in self.a_pairs]} and "
                                  f"{len(self.a_indices)} indices")

    def _verify_n_major(self, typ: MemRefType, n: int) -> None:
        """An N-major ``b``: ``(…, bk, bn)`` with 16 rows of ``k`` below ``bk`` (a multiple of
        16) and ``N`` columns from ``bn`` (a multiple of 64) within the row."""
        rows, width = typ.get_shape()[-2], typ.get_shape()[-1]
        k0, n0 = constant_index(self.b_indices[-2]), constant_index(self.b_indices[-1])
        if k0 is not None and (k0 % K or k0 + K > rows):
            raise VerifyException(f"wgmma.mma: the transposed 'b''s first k {k0} must be a "
                                  f"multiple of {K} with {K} rows below its {rows}")
        if n0 is not None and (n0 % ATOM_COLUMNS or n0 + n > width):
            raise VerifyException(f"wgmma.mma: the transposed 'b''s first column {n0} must "
                                  f"be a multiple of {ATOM_COLUMNS} with {n} columns "
                                  f"from it in its {width}")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        if self.a is None:
            printer.print_string("(")
            printer.print_list(self.a_pairs, printer.print_ssa_value)
            printer.print_string(")")
        else:
            printer.print_ssa_value(self.a)
            printer.print_string("[")
            printer.print_list(self.a_indices, printer.print_ssa_value)
            printer.print_string("]")
        printer.print_string(", ")
        printer.print_ssa_value(self.b)
        printer.print_string("[")
        printer.print_list(self.b_indices, printer.print_ssa_value)
        printer.print_string("]")
        if self.n_major:
            printer.print_string(" transposed")
        if self.from_zero:
            printer.print_string(f" + zeros({len(self.d)})")
        else:
            printer.print_string(" + (")
            printer.print_list(self.c, printer.print_ssa_value)
            printer.print_string(")")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.a.type if self.a is not None else self.a_pairs[0].type)
        printer.print_string(", ")
        printer.print_attribute(self.b.type)

    @classmethod
    def parse(cls, parser: Parser) -> MmaOp:
        pairs: list[UnresolvedOperand] = []
        a_tile: UnresolvedOperand | None = None
        a_indices: list[SSAValue] = []
        if parser.parse_optional_punctuation("(") is not None:
            pairs = [parser.parse_unresolved_operand()]
            while parser.parse_optional_punctuation(",") is not None:
                pairs.append(parser.parse_unresolved_operand())
            parser.parse_punctuation(")")
        else:
            a_tile = parser.parse_unresolved_operand()
            a_indices = parser.parse_comma_separated_list(
                Parser.Delimiter.SQUARE, lambda: parser.parse_operand(IndexType()))
        parser.parse_punctuation(",")
        b = parser.parse_unresolved_operand()
        b_indices = parser.parse_comma_separated_list(
            Parser.Delimiter.SQUARE, lambda: parser.parse_operand(IndexType()))
        transposed = parser.parse_optional_keyword("transposed") is not None
        parser.parse_punctuation("+")
        zeros = 0
        c: list[SSAValue] = []
        if parser.parse_optional_keyword("zeros") is not None:
            parser.parse_punctuation("(")
            zeros = parser.parse_integer()
            parser.parse_punctuation(")")
        else:
            c = parser.parse_comma_separated_list(
                Parser.Delimiter.PAREN, lambda: parser.parse_operand(f32))
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        a_type = parser.parse_type()
        parser.parse_punctuation(",")
        b_type = parser.parse_type()
        a: SSAValue | list[SSAValue]
        if a_tile is not None:
            a = parser.resolve_operand(a_tile, a_type)
        else:
            a = [parser.resolve_operand(v, a_type) for v in pairs]
        op = cls(a, a_indices, parser.resolve_operand(b, b_type), b_indices, c, transposed,
                 zeros)
        op.attributes |= attrs
        return op


Wgmma = Dialect("wgmma", [FenceOp, MmaOp, CommitOp, WaitOp], [])

__all__ = ["ATOM_COLUMNS", "A_PAIRS", "CHUNK_BYTES", "K", "M", "MAX_N", "SWIZZLE_ATTR",
           "SWIZZLE_BYTES", "SWIZZLE_ROWS", "WARPGROUP", "CommitOp", "FenceOp", "MmaOp",
           "WaitOp", "Wgmma", "check_swizzled_tile", "swizzle"]
