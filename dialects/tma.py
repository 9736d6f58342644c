"""The ``tma`` dialect: bulk tensor copies of the Tensor Memory Accelerator (sm_90), at
Kernel IR.

One thread copies a whole box of a global buffer into shared memory with one instruction,
PTX ``cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes``.
The box is described on the host by a *tensor map* (``cuTensorMapEncodeTiled``: the
buffer's address, shape and strides, the box's extents, the swizzle), which the kernel gets
as a ``const __grid_constant__`` parameter; the instruction names the map and the box's
corner. The copy is asynchronous: it completes *transactions* (bytes) on an ``mbarrier``,
and a thread that waits for the barrier's phase sees the data.

* ``tma.load %src[%c0, %c1, …] to %dst[%s, …] on %bars[%f, %s] : memref<1x512x3584xbf16>
  to memref<4x128x64xbf16>, memref<2x4xi64>`` — each executing thread (one, in practice)
  copies the box whose corner is ``src[c0, c1, …]`` into ``dst[s, …]``: the ``dst`` indices
  pick a tile of its trailing dimensions, ``T = dst.shape[len(indices):]``, and the box has
  extent ``T`` in the last ``len(T)`` dimensions of ``src`` and 1 in the others. Elements
  of the box outside ``src`` are written as zeros. The copy's bytes (``prod(T)`` elements)
  complete transactions on the barrier ``bars[…]``, whose phase cannot complete until every
  byte a thread announced there (``mbarrier.expect_bytes``) has landed. ``dst`` is a
  ``kernel.shared`` buffer, unpadded; if it is swizzled (``llmopt.swizzle = 128``) a tile
  row is 128 bytes and the box is written in the layout ``kernel-to-cuda`` gives such a
  buffer (the map's 128-byte swizzle is that layout); ``src`` is a kernel argument of the
  same element type, rank at most 5, contiguous in its last dimension.

* ``tma.load … on %bars[…] multicast 2 : …`` — in a kernel of clusters of ``n = 2`` blocks
  along ``x`` (``cluster`` knob, ``__cluster_dims__``), each executing thread copies part
  ``r`` of the box, ``r = block_id.x mod n`` its block's rank in the cluster: rows ``r · T0
  / n … (r + 1) · T0 / n - 1`` of the tile's first dimension, from the corner moved as
  far, into those rows of ``dst[s, …]`` *in every block of its cluster*, completing the
  part's bytes on the barrier at ``bars[…]`` of each (PTX ``.multicast::cluster`` with the
  mask of all ``n`` blocks). When every block of a cluster issues the same box, each block
  receives the whole tile for ``1 / n`` of the reads from L2 — the blocks of a cluster that
  compute tiles of one product row band, say, share the weight tile they all read. The
  tensor map's box is the part.

The tensor maps of a kernel are what :func:`tensor_maps` lists: one per distinct
``(src, box, swizzle)``, in the order of first use. ``kernel-to-cuda`` appends them to the
kernel's parameters in that order, and the host makes each launch's maps from the buffers
it passes (``llmopt.codegen.plan``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import Self

from xdsl.dialects.builtin import IndexType, IntegerAttr, IntegerType, MemRefType, i64
from xdsl.ir import Attribute, BlockArgument, Dialect, Operation, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect
from xdsl.utils.exceptions import VerifyException

from llmopt.dialects._syntax import parse_access, print_access

MAX_RANK = 5
"""The most dimensions a tensor map describes."""
MAX_BOX = 256
"""The largest extent of a box in any dimension."""
SWIZZLE_ROW_BYTES = 128
"""Bytes of a tile row of a swizzled destination: the 128-byte swizzle's span."""


@irdl_op_definition
class LoadOp(IRDLOperation):
    """``tma.load %src[…] to %dst[…] on %bars[…] : src type to dst type, bars type`` (see
    the module docstring)."""

    name = "tma.load"
    src = operand_def(MemRefType)
    src_indices = var_operand_def(IndexType)
    dst = operand_def(MemRefType)
    dst_indices = var_operand_def(IndexType)
    bars = operand_def(MemRefType)
    bar_indices = var_operand_def(IndexType)
    multicast = opt_prop_def(IntegerAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, src: SSAValue, src_indices: Sequence[SSAValue], dst: SSAValue,
                 dst_indices: Sequence[SSAValue], bars: SSAValue,
                 bar_indices: Sequence[SSAValue], multicast: int | None = None) -> None:
        props = {} if multicast is None else {"multicast": IntegerAttr(multicast, i64)}
        super().__init__(operands=[src, list(src_indices), dst, list(dst_indices), bars,
                                   list(bar_indices)], properties=props)

    @property
    def blocks(self) -> int:
        """The blocks of a cluster the box is multicast to (1: none)."""
        return 1 if self.multicast is None else self.multicast.value.data

    @property
    def part(self) -> tuple[int, ...]:
        """The part of the tile one block copies: the tile, its first extent divided by
        :attr:`blocks`."""
        tile = self.tile
        return (tile[0] // self.blocks, *tile[1:])

    @property
    def tile(self) -> tuple[int, ...]:
        """The extents of the tile of ``dst`` the box fills: its trailing dimensions."""
        typ = self.dst.type
        assert isinstance(typ, MemRefType)
        return tuple(typ.get_shape()[len(self.dst_indices):])

    @property
    def box(self) -> tuple[int, ...]:
        """The box's extent in each dimension of ``src`` (of the part a block copies, for a
        multicast copy)."""
        typ = self.src.type
        assert isinstance(typ, MemRefType)
        part = self.part
        return (1,) * (typ.get_num_dims() - len(part)) + part

    @property
    def bytes(self) -> int:
        """The bytes one executing thread's copy completes on each barrier it names (a
        multicast copy: its part's)."""
        return prod(self.part) * element_bytes(self.dst.type)

    def verify_(self) -> None:
        from llmopt.dialects.kernel import LocalOp, SharedOp
        from llmopt.dialects.mbarrier import check_barrier_access
        from llmopt.dialects.wgmma import swizzle

        src, dst = self.src.type, self.dst.type
        assert isinstance(src, MemRefType) and isinstance(dst, MemRefType)
        for what, typ, indices in (("source", src, self.src_indices),
                                   ("destination", dst, self.dst_indices)):
            if what == "source" and len(indices) != typ.get_num_dims():
                raise VerifyException(f"{self.name}: {len(indices)} indices for a "
                                      f"rank-{typ.get_num_dims()} source")
            if what == "destination" and len(indices) >= typ.get_num_dims():
                raise VerifyException(f"{self.name}: {len(indices)} indices leave no tile of "
                                      f"the rank-{typ.get_num_dims()} destination")
        if src.element_type != dst.element_type:
            raise VerifyException(f"{self.name}: a {src.element_type} source and a "
                                  f"{dst.element_type} destination")
        if isinstance(self.src.owner, SharedOp | LocalOp):
            raise VerifyException(f"{self.name}: the source must be a global buffer (a kernel "
                                  f"argument), not a {self.src.owner.name} buffer")
        if not isinstance(self.dst.owner, SharedOp):
            raise VerifyException(f"{self.name}: the destination must be a kernel.shared "
                                  "buffer")
        if "llmopt.pad" in self.dst.owner.attributes:
            raise VerifyException(f"{self.name}: the destination may not be padded")
        tile = self.tile
        if src.get_num_dims() > MAX_RANK or len(tile) > src.get_num_dims():
            raise VerifyException(f"{self.name}: a rank-{len(tile)} tile of a "
                                  f"rank-{src.get_num_dims()} source (at most {MAX_RANK})")
        if any(t > MAX_BOX for t in tile):
            raise VerifyException(f"{self.name}: box extents {list(tile)} above {MAX_BOX}")
        row = tile[-1] * element_bytes(dst)
        if row % 16:
            raise VerifyException(f"{self.name}: a tile row of {row} bytes, not a multiple "
                                  "of 16")
        swz = swizzle(self.dst)
        if swz is not None and (swz != SWIZZLE_ROW_BYTES or row != SWIZZLE_ROW_BYTES):
            raise VerifyException(f"{self.name}: a swizzled destination needs the 128-byte "
                                  f"swizzle and rows of 128 bytes, not {swz} and {row}")
        check_barrier_access(self, self.bars, self.bar_indices)
        if self.multicast is not None:
            self._verify_multicast(swz is not None)

    def _verify_multicast(self, swizzled: bool) -> None:
        """A multicast copy's parts are whole tile rows that start where a tile may (a
        swizzled part at a whole period of the swizzle, else it would be swizzled out of
        step with the buffer's layout)."""
        from llmopt.dialects.kernel import enclosing_func
        from llmopt.lowering._cuda_shared import SWIZZLE_ALIGN, TMA_ALIGN
        from llmopt.target import MAX_CLUSTER

        n, tile = self.blocks, self.tile
        if not 2 <= n <= MAX_CLUSTER:
            raise VerifyException(f"{self.name}: multicast to {n} blocks (2 to {MAX_CLUSTER})")
        func = enclosing_func(self)
        if func is not None and func.cluster_size != n:
            raise VerifyException(f"{self.name}: multicast to {n} blocks in a kernel of "
                                  f"clusters of {func.cluster_size}")
        if tile[0] % n:
            raise VerifyException(f"{self.name}: a tile of {tile[0]} rows does not split "
                                  f"into {n} parts")
        align = SWIZZLE_ALIGN if swizzled else TMA_ALIGN
        if self.bytes % align:
            raise VerifyException(f"{self.name}: parts of {self.bytes} bytes; each must "
                                  f"start at a multiple of {align} bytes")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        print_access(printer, self.src, self.src_indices)
        printer.print_string(" to ")
        print_access(printer, self.dst, self.dst_indices)
        printer.print_string(" on ")
        print_access(printer, self.bars, self.bar_indices)
        if self.multicast is not None:
            printer.print_string(f" multicast {self.blocks}")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.src.type)
        printer.print_string(" to ")
        printer.print_attribute(self.dst.type)
        printer.print_string(", ")
        printer.print_attribute(self.bars.type)

    @classmethod
    def parse(cls, parser: Parser) -> Self:
        src, src_indices = parse_access(parser)
        parser.parse_keyword("to")
        dst, dst_indices = parse_access(parser)
        parser.parse_keyword("on")
        bars, bar_indices = parse_access(parser)
        multicast = None
        if parser.parse_optional_keyword("multicast") is not None:
            multicast = parser.parse_integer(allow_boolean=False, allow_negative=False)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        src_type = parser.parse_type()
        parser.parse_keyword("to")
        dst_type = parser.parse_type()
        parser.parse_punctuation(",")
        bars_type = parser.parse_type()
        op = cls(parser.resolve_operand(src, src_type), src_indices,
                 parser.resolve_operand(dst, dst_type), dst_indices,
                 parser.resolve_operand(bars, bars_type), bar_indices, multicast)
        op.attributes |= attrs
        return op


def element_bytes(typ: Attribute) -> int:
    """Bytes of one element of a memref type."""
    assert isinstance(typ, MemRefType)
    elem = typ.element_type
    width = elem.width.data if isinstance(elem, IntegerType) else elem.bitwidth  # type: ignore[attr-defined]
    return (width + 7) // 8


@dataclass(frozen=True)
class TensorMap:
    """One tensor-map parameter of a kernel: the kernel argument it describes (its
    position), the box's extents in the argument's dimensions, and the swizzle (bytes; 0
    for none)."""

    arg: int
    box: tuple[int, ...]
    swizzle: int


def tensor_map(op: LoadOp) -> TensorMap:
    """The tensor map ``op`` copies through: its source argument, box and swizzle."""
    from llmopt.dialects.wgmma import swizzle

    src = op.src
    if not isinstance(src, BlockArgument) or src.owner.parent_op() is None or (
            src.owner.parent_op().name != "kernel.func"):  # type: ignore[union-attr]
        raise VerifyException(f"{op.name}: the source must be an argument of its "
                              "kernel.func")
    return TensorMap(src.index, op.box, swizzle(op.dst) or 0)


def tensor_maps(func: Operation) -> list[TensorMap]:
    """The tensor maps of a ``kernel.func``: one per distinct ``(source argument, box,
    swizzle)`` of its ``tma.load`` ops, in the order of first use."""
    return list(dict.fromkeys(tensor_map(op) for op in func.walk() if isinstance(op, LoadOp)))


Tma = Dialect("tma", [LoadOp], [])
