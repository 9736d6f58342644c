"""Kernel IR (level 5): the ``kernel`` dialect — explicit GPU primitives.

Kernels are ``kernel.func`` symbols at module level; the model function launches them
with ``kernel.launch``. Inside a kernel: thread/block ids and dims, buffer loads and stores
with explicit ``index`` coordinates, statically sized shared buffers, barriers and warp
shuffles. Control flow is ``scf`` (``scf.for``, ``scf.if``), scalar math is
``arith``/``math``. Nothing at this level is implicit: every index computation is an op.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Self

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    DenseArrayBase,
    FunctionType,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    NoneAttr,
    StringAttr,
    SymbolRefAttr,
    i64,
)
from xdsl.ir import Attribute, Block, BlockArgument, Dialect, Operation, Region, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
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
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import (
    IsolatedFromAbove,
    IsTerminator,
    MemoryReadEffect,
    MemoryWriteEffect,
    NoTerminator,
    Pure,
    RecursiveMemoryEffect,
    SymbolOpInterface,
    is_side_effect_free,
)
from xdsl.utils.exceptions import VerifyException

from llmopt.dialects._syntax import (
    check_index_in_bounds,
    check_kernel_attributes,
    check_launch_shape,
    check_static_buffer,
    check_static_layout,
    constant_index,
    guarded,
    int_array,
    ints,
    parse_access,
    parse_i64,
    parse_int_list,
    parse_sized_list,
    parse_typed_suffix,
    print_access,
    print_int_list,
    print_sized_list,
    print_typed_suffix,
)
from llmopt.target import MAX_CLUSTER

DIMS = ("x", "y", "z")

PROGRAMMATIC = "programmatic"
"""The unit attribute of a ``kernel.launch`` that may overlap the launch before it."""

CARVEOUT = "carveout"
"""The ``kernel.launch`` attribute giving the kernel's preferred shared-memory carveout, a
percentage of each multiprocessor's unified L1/shared memory (see ``LaunchOp``)."""


@irdl_op_definition
class ReturnOp(IRDLOperation):
    """End of a ``kernel.func``."""

    name = "kernel.return"
    traits = traits_def(IsTerminator(), Pure())
    assembly_format = "attr-dict"

    def verify_(self) -> None:
        if not isinstance(self.parent_op(), FuncOp):
            raise VerifyException("kernel.return must end a kernel.func")


@irdl_op_definition
class FuncOp(IRDLOperation):
    """``kernel.func @k(%a: memref<...>, ...) block [256, 1, 1] { ... kernel.return }``.

    ``block [384, 1, 1] cluster 2``: the kernel's blocks run in clusters of that many
    consecutive blocks along ``x`` (sm_90, ``__cluster_dims__``), which reach each other's
    shared memory (``tma.load … multicast``, ``mbarrier.arrive_cluster``); its launches'
    grids are whole clusters."""

    name = "kernel.func"
    sym_name = prop_def(StringAttr)
    function_type = prop_def(FunctionType)
    block = prop_def(DenseArrayBase)
    cluster = opt_prop_def(IntegerAttr)
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), SymbolOpInterface(), RecursiveMemoryEffect())

    def __init__(self, sym_name: str, arg_types: Sequence[Attribute], block: Sequence[int],
                 body: Region | None = None) -> None:
        if body is None:
            body = Region(Block(arg_types=arg_types))
        super().__init__(
            regions=[body],
            properties={
                "sym_name": StringAttr(sym_name),
                "function_type": FunctionType.from_lists(list(arg_types), []),
                "block": int_array(block),
            },
        )

    @property
    def block_shape(self) -> tuple[int, ...]:
        return ints(self.block)

    @property
    def cluster_size(self) -> int:
        """The blocks of a cluster (1 when the kernel has no clusters)."""
        return 1 if self.cluster is None else self.cluster.value.data

    def verify_(self) -> None:
        check_launch_shape(None, self.block_shape)
        if not 1 <= self.cluster_size <= MAX_CLUSTER:
            raise VerifyException(f"clusters of {self.cluster_size} blocks (1 to "
                                  f"{MAX_CLUSTER})")
        types = tuple(a.type for a in self.body.block.args)
        if types != tuple(self.function_type.inputs.data):
            raise VerifyException("block arguments differ from the function type")
        for t in types:
            if not isinstance(t, MemRefType | IndexType) and not hasattr(t, "bitwidth"):
                raise VerifyException(f"kernel parameters are buffers or scalars, got {t}")
        if not isinstance(self.body.block.last_op, ReturnOp):
            raise VerifyException("kernel.func must end in kernel.return")
        check_kernel_attributes(self)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.sym_name.data)
        printer.print_string("(")
        printer.print_list(self.body.block.args, printer.print_block_argument)
        printer.print_string(") block ")
        print_int_list(printer, self.block_shape)
        if self.cluster is not None:
            printer.print_string(f" cluster {self.cluster_size}")
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False,
                             print_empty_block=False)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> FuncOp:
        name = parser.parse_symbol_name().data
        args = parser.parse_comma_separated_list(
            Parser.Delimiter.PAREN, lambda: parser.parse_argument(expect_type=True)
        )
        parser.parse_keyword("block")
        block = parse_int_list(parser)
        cluster = parse_i64(parser) if parser.parse_optional_keyword("cluster") else None
        body = parser.parse_region(args)
        op = cls(name, [a.type for a in args], block, body)
        if cluster is not None:
            op.properties["cluster"] = IntegerAttr(cluster, i64)
        op.attributes |= parser.parse_optional_attr_dict()
        return op


@irdl_op_definition
class LaunchOp(IRDLOperation):
    """``kernel.launch @k grid [8, 1, 1] block [256, 1, 1] smem 0 (%x, %y) : types``.

    ``smem`` is the launch's *dynamic* shared memory in bytes. A ``kernel.func``'s
    ``kernel.shared`` buffers need none; once ``kernel-to-cuda`` has placed them in dynamic
    shared memory (more than 48 KiB of them), the launched ``cuda.kernel`` says how many bytes
    it needs (``dynamic_shared``), and ``smem`` must be at least that.

    With a symbolic length the grid's x extent may be a runtime ``index`` value computed
    before the launch (``grid [%grid max 512, 1, 1]``: at most 512 blocks).

    A launch with the unit attribute ``programmatic`` (``{programmatic}``) may begin before
    the kernel launched in front of it has finished (Hopper's programmatic dependent launch:
    the driver's programmatic stream serialization), so that its blocks are scheduled while
    the previous grid drains; its kernel must run ``kernel.wait_prior_grids`` before
    touching memory, prefetches aside (:func:`waits_first`; ``programmatic-launch`` arranges
    both).

    ``{carveout = 100}`` (:data:`CARVEOUT`, a percentage 0-100) is the share of each
    multiprocessor's unified L1/shared memory that the kernel prefers as shared memory: the
    executor sets it as the kernel's preferred carveout. A multiprocessor runs blocks of
    one carveout at a time, so kernels that follow each other overlap only when theirs
    agree; without the attribute the driver chooses.
    """

    name = "kernel.launch"
    kernel = prop_def(SymbolRefAttr)
    grid = prop_def(DenseArrayBase)
    block = prop_def(DenseArrayBase)
    smem = prop_def(IntegerAttr)
    args = var_operand_def()
    grid_size = opt_operand_def(IndexType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, kernel: str, grid: Sequence[int], block: Sequence[int],
                 args: Sequence[SSAValue], smem: int = 0,
                 grid_size: SSAValue | None = None) -> None:
        super().__init__(
            operands=[list(args), [] if grid_size is None else [grid_size]],
            properties={
                "kernel": SymbolRefAttr(kernel), "grid": int_array(grid),
                "block": int_array(block), "smem": IntegerAttr(smem, i64),
            },
        )

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """The grid; with a runtime ``grid_size``, the largest it can be."""
        return ints(self.grid)

    @property
    def block_shape(self) -> tuple[int, ...]:
        return ints(self.block)

    @property
    def shared_bytes(self) -> int:
        return self.smem.value.data

    def verify_(self) -> None:
        check_launch_shape(self.grid_shape, self.block_shape)
        if self.shared_bytes < 0:
            raise VerifyException("smem must be non-negative")
        carveout = self.attributes.get(CARVEOUT)
        if carveout is not None and not (
                isinstance(carveout, IntegerAttr) and 0 <= carveout.value.data <= 100):
            raise VerifyException(f"{CARVEOUT} must be an integer percentage 0-100, "
                                  f"got {carveout}")
        module = self.get_toplevel_object()
        if module is self:
            return
        from xdsl.traits import SymbolTable

        callee = SymbolTable.lookup_symbol(self, self.kernel)
        if callee is None:
            return  # checked again once the kernel exists (e.g. while lowering)
        if callee.name == "cuda.kernel":
            # After kernel-to-cuda the launched kernel is its CUDA-IR form.
            needed = getattr(callee, "dynamic_shared_bytes", 0)
            if self.shared_bytes < needed:
                raise VerifyException(
                    f"smem {self.shared_bytes} is less than the {needed} bytes of dynamic "
                    f"shared memory that @{self.kernel.root_reference.data} needs"
                )
            return
        if not isinstance(callee, FuncOp):
            raise VerifyException(f"@{self.kernel.root_reference.data} is not a kernel.func")
        if PROGRAMMATIC in self.attributes and not waits_first(callee.body.block):
            raise VerifyException(
                f"a programmatic launch of @{self.kernel.root_reference.data}, whose body "
                "touches memory before kernel.wait_prior_grids (it could read memory the "
                "previous kernel is still writing)")
        expected = tuple(callee.function_type.inputs.data)
        given = tuple(a.type for a in self.args)
        if expected != given:
            raise VerifyException(
                f"arguments {list(map(str, given))} do not match the kernel's "
                f"{list(map(str, expected))}"
            )
        if callee.block_shape != self.block_shape:
            raise VerifyException(
                f"block {list(self.block_shape)} differs from the kernel's "
                f"{list(callee.block_shape)}"
            )

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_attribute(self.kernel)
        printer.print_string(" grid ")
        print_sized_list(printer, self.grid_shape,
                         {} if self.grid_size is None else {0: self.grid_size})
        printer.print_string(" block ")
        print_int_list(printer, self.block_shape)
        printer.print_string(f" smem {self.shared_bytes} (")
        printer.print_list(self.args, printer.print_ssa_value)
        printer.print_string(")")
        printer.print_op_attributes(self.attributes)
        if self.args:
            printer.print_string(" : ")
            printer.print_list([a.type for a in self.args], printer.print_attribute)

    @classmethod
    def parse(cls, parser: Parser) -> LaunchOp:
        kernel = parser.parse_attribute()
        if not isinstance(kernel, SymbolRefAttr):
            parser.raise_error("expected a kernel symbol")
        parser.parse_keyword("grid")
        start = parser.pos
        grid, sizes = parse_sized_list(parser)
        if set(sizes) - {0}:
            parser.raise_error("only the grid's x extent may be a runtime value", start,
                               parser.pos)
        parser.parse_keyword("block")
        block = parse_int_list(parser)
        parser.parse_keyword("smem")
        smem = parse_i64(parser)
        pos = parser.pos
        unresolved = parser.parse_comma_separated_list(
            Parser.Delimiter.PAREN, parser.parse_unresolved_operand
        )
        attrs = parser.parse_optional_attr_dict()
        types = []
        if unresolved:
            parser.parse_punctuation(":")
            types = parser.parse_comma_separated_list(Parser.Delimiter.NONE, parser.parse_type)
        args = parser.resolve_operands(unresolved, types, pos)
        op = cls(kernel.root_reference.data, grid, block, args, smem, sizes.get(0))
        op.attributes |= attrs
        return op


class _SpecialRegOp(IRDLOperation):
    dim = prop_def(StringAttr)
    result = result_def(IndexType)
    traits = traits_def(Pure())

    def __init__(self, dim: str) -> None:
        super().__init__(result_types=[IndexType()], properties={"dim": StringAttr(dim)})

    def verify_(self) -> None:
        if self.dim.data not in DIMS:
            raise VerifyException(f"dimension must be one of {DIMS}, got '{self.dim.data}'")

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.dim.data}")
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> _SpecialRegOp:
        op = cls(parser.parse_identifier())
        op.attributes |= parser.parse_optional_attr_dict()
        return op


@irdl_op_definition
class ThreadIdOp(_SpecialRegOp):
    """``threadIdx.<dim>``"""

    name = "kernel.thread_id"


@irdl_op_definition
class BlockIdOp(_SpecialRegOp):
    """``blockIdx.<dim>``"""

    name = "kernel.block_id"


@irdl_op_definition
class BlockDimOp(_SpecialRegOp):
    """``blockDim.<dim>``"""

    name = "kernel.block_dim"


@irdl_op_definition
class GridDimOp(_SpecialRegOp):
    """``gridDim.<dim>``"""

    name = "kernel.grid_dim"


def _check_indices(op: Operation, buffer: SSAValue, indices: Sequence[SSAValue]) -> MemRefType:
    """The buffer of an access is a memref with a static layout, one index per dimension,
    each constant index (an ``arith.constant``) within its extent unless the access sits
    in an ``scf.if`` (code that may not run)."""
    typ = buffer.type
    if not isinstance(typ, MemRefType):
        raise VerifyException(f"{op.name}: expected a memref, got {typ}")
    if len(indices) != typ.get_num_dims():
        raise VerifyException(
            f"{op.name}: {len(indices)} indices for a rank-{typ.get_num_dims()} buffer"
        )
    if not isinstance(typ.layout, NoneAttr):  # row-major ? buffers: strides from the extents
        check_static_layout(op.name, typ)
    constants = [constant_index(index) for index in indices]
    if any(c is not None for c in constants) and not guarded(op):
        for dim, value in enumerate(constants):
            if value is not None:
                check_index_in_bounds(op.name, typ, dim, value)
    return typ




@irdl_op_definition
class LoadOp(IRDLOperation):
    """``%v = kernel.load %buf[%i, %j] : memref<8x256xf32>``."""

    name = "kernel.load"
    buffer = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    result = result_def()
    traits = traits_def(MemoryReadEffect())

    def __init__(self, buffer: SSAValue, indices: Sequence[SSAValue]) -> None:
        assert isinstance(buffer.type, MemRefType)
        super().__init__(operands=[buffer, list(indices)],
                         result_types=[buffer.type.element_type])

    def verify_(self) -> None:
        typ = _check_indices(self, self.buffer, self.indices)
        if self.result.type != typ.element_type:
            raise VerifyException("result type must be the buffer's element type")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        print_access(printer, self.buffer, self.indices)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.buffer.type)

    @classmethod
    def parse(cls, parser: Parser) -> LoadOp:
        buffer, indices = parse_access(parser)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        op = cls(parser.resolve_operand(buffer, typ), indices)
        op.attributes |= attrs
        return op


@irdl_op_definition
class StoreOp(IRDLOperation):
    """``kernel.store %v, %buf[%i, %j] : memref<8x256xf32>``."""

    name = "kernel.store"
    value = operand_def()
    buffer = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    traits = traits_def(MemoryWriteEffect())

    def __init__(self, value: SSAValue, buffer: SSAValue, indices: Sequence[SSAValue]) -> None:
        super().__init__(operands=[value, buffer, list(indices)])

    def verify_(self) -> None:
        typ = _check_indices(self, self.buffer, self.indices)
        if self.value.type != typ.element_type:
            raise VerifyException(
                f"stored value is {self.value.type}, buffer holds {typ.element_type}"
            )

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_ssa_value(self.value)
        printer.print_string(", ")
        print_access(printer, self.buffer, self.indices)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.buffer.type)

    @classmethod
    def parse(cls, parser: Parser) -> StoreOp:
        value = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        buffer, indices = parse_access(parser)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        if not isinstance(typ, MemRefType):
            parser.raise_error(f"expected a memref type, got {typ}")
        op = cls(parser.resolve_operand(value, typ.element_type),
                 parser.resolve_operand(buffer, typ), indices)
        op.attributes |= attrs
        return op


class BufferDeclOp(IRDLOperation):
    """A statically sized buffer declared at the top level of a ``kernel.func``
    (``kernel.shared`` or ``kernel.local``, named by :attr:`SPACE`)."""

    SPACE: ClassVar[str] = ""
    result = result_def(MemRefType)
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, typ: MemRefType) -> None:
        super().__init__(result_types=[typ])

    def verify_(self) -> None:
        if not isinstance(self.parent_op(), FuncOp):
            raise VerifyException(f"{self.name} must sit at the top level of a kernel.func")
        check_static_buffer(self.result.type, self.SPACE)


@irdl_op_definition
class SharedOp(BufferDeclOp):
    """``%s = kernel.shared : memref<32xf32>``: a statically sized shared-memory buffer.

    One per block, for the whole kernel. How CUDA declares it is ``kernel-to-cuda``'s choice:
    a ``__shared__`` array, or — when the kernel's shared buffers total more than the 48 KiB
    CUDA allows statically — a slice of the kernel's dynamic shared memory."""

    name = "kernel.shared"
    SPACE: ClassVar[str] = "shared"


#: The most local memory a CUDA thread may have, in bytes.
MAX_LOCAL_BYTES = 512 * 1024


POINT_ATTR = "llmopt.point"
"""Marks a ``kernel.local`` that holds one point's elements of a thread-mapped loop (a
16-byte chunk of an elementwise map, ``vector-elementwise``), not a register tile."""


@irdl_op_definition
class LocalOp(BufferDeclOp):
    """``%r = kernel.local : memref<4x4xf32>``: a statically sized array private to each
    thread (indexed with constants after unrolling, it lives in registers), of at most
    512 KiB (CUDA's limit per thread)."""

    name = "kernel.local"
    SPACE: ClassVar[str] = "local"

    def verify_(self) -> None:
        super().verify_()
        typ = self.result.type
        assert isinstance(typ, MemRefType)
        width = getattr(typ.element_type, "bitwidth", 32)
        size = typ.element_count() * max(width // 8, 1)
        if size > MAX_LOCAL_BYTES:
            raise VerifyException(
                f"a local buffer of {size} bytes ({typ}) is more than the {MAX_LOCAL_BYTES} "
                "bytes a CUDA thread may have"
            )


@irdl_op_definition
class BarrierOp(IRDLOperation):
    """``__syncthreads()``: every thread of the block waits here."""

    name = "kernel.barrier"
    assembly_format = "attr-dict"


@irdl_op_definition
class ClusterBarrierOp(IRDLOperation):
    """Every thread of the block's cluster waits here (sm_90:
    ``barrier.cluster.arrive.release`` then ``barrier.cluster.wait.acquire``): what each
    block of the cluster wrote before it, its barriers' initialisation included, is visible
    to the cluster's threads after it, and no block of the cluster leaves the kernel before
    the others reach it. In a kernel without clusters it is a block barrier."""

    name = "kernel.cluster_barrier"
    assembly_format = "attr-dict"


@irdl_op_definition
class OpaqueOp(IRDLOperation):
    """``%r = kernel.opaque %v : index``: ``%v``, passed through an instruction the CUDA
    compiler cannot see into (``asm("mov.b64 %0, %1;" : "=l"(r) : "l"(v))``), so that it
    does not specialise the code using ``%r`` for a value it knows. ``version-row-groups``
    gives its K loops' trip counts this way: with a constant trip count, ptxas duplicated
    the first iteration of some copies of a fully unrolled K step, and a block then fetches
    twice the loop's code cold."""

    name = "kernel.opaque"
    value = operand_def(IndexType)
    result = result_def(IndexType)
    traits = traits_def(Pure())
    assembly_format = "$value attr-dict `:` type($value)"

    def __init__(self, value: SSAValue) -> None:
        super().__init__(operands=[value], result_types=[IndexType()])


@irdl_op_definition
class ShuffleXorOp(IRDLOperation):
    """``%r = kernel.shuffle_xor %v, 16 : f32``: the value held by lane ``lane ^ 16``."""

    name = "kernel.shuffle_xor"
    value = operand_def()
    offset = prop_def(IntegerAttr)
    result = result_def()

    def __init__(self, value: SSAValue, offset: int) -> None:
        super().__init__(operands=[value], result_types=[value.type],
                         properties={"offset": IntegerAttr(offset, i64)})

    def verify_(self) -> None:
        off = self.offset.value.data
        if off not in (1, 2, 4, 8, 16):
            raise VerifyException(f"shuffle offset must be 1, 2, 4, 8 or 16, got {off}")
        if self.result.type != self.value.type:
            raise VerifyException("result type must match the shuffled value")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_ssa_value(self.value)
        printer.print_string(f", {self.offset.value.data}")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.value.type)

    @classmethod
    def parse(cls, parser: Parser) -> ShuffleXorOp:
        value = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        offset = parse_i64(parser)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        op = cls(parser.resolve_operand(value, parser.parse_type()), offset)
        op.attributes |= attrs
        return op


# --- copies: vector (``kernel.copy``) and asynchronous (``kernel.async_copy``, cp.async) -----

COPY_BYTES = (4, 8, 16)
"""The sizes, in bytes, that one copy moves (one ``cp.async``, or one scalar, 8-byte or
16-byte vector access)."""



def check_copy(op: Operation, src: SSAValue, dst: SSAValue, count: int,
               what: str = "a copy") -> None:
    """Shared verifier of the copy ops (``tile.``/``kernel.`` ``copy``/``async_copy``): one
    element type on both sides, ``count`` elements of it making 4, 8 or 16 bytes, and on both
    sides an innermost dimension that is contiguous and holds at least ``count`` elements."""
    src_type, dst_type = src.type, dst.type
    if not isinstance(src_type, MemRefType) or not isinstance(dst_type, MemRefType):
        raise VerifyException(f"{op.name}: copies between memrefs, got {src_type} and {dst_type}")
    element = src_type.element_type
    if dst_type.element_type != element:
        raise VerifyException(
            f"{op.name}: source and destination element types differ: {element} and "
            f"{dst_type.element_type}"
        )
    width = getattr(element, "bitwidth", None)
    if not isinstance(width, int) or width % 8:
        raise VerifyException(f"{op.name}: cannot copy elements of type {element} "
                              f"(whole bytes only)")
    nbytes = count * width // 8
    if count < 1 or nbytes not in COPY_BYTES:
        raise VerifyException(
            f"{op.name}: count {count} of {element} moves {nbytes} bytes; {what} moves 4, 8 or "
            f"16 bytes"
        )
    for side, typ in (("source", src_type), ("destination", dst_type)):
        shape = typ.get_shape()
        if not shape:
            raise VerifyException(f"{op.name}: the {side} must have rank 1 or more")
        if shape[-1] >= 0 and shape[-1] < count:
            raise VerifyException(
                f"{op.name}: the innermost extent {shape[-1]} of the {side} is smaller than "
                f"count {count}"
            )
        strides = typ.get_strides()
        if count > 1 and strides is not None and strides[-1] != 1:
            raise VerifyException(
                f"{op.name}: the innermost dimension of the {side} must be contiguous "
                f"(stride 1), got stride {strides[-1]}"
            )


PREFETCH_GRANULE = 16
"""A prefetch moves a whole number of this many bytes (``cp.async.bulk.prefetch``'s size
unit), starting at an address that is a multiple of it."""


def check_prefetch(op: Operation, buffer: SSAValue, count: int) -> None:
    """Shared verifier of the prefetch ops (``tile.prefetch``, ``kernel.prefetch``): a
    buffer of whole-byte elements whose innermost dimension is static, contiguous and holds
    at least ``count`` elements, and ``count`` elements making a positive multiple of
    :data:`PREFETCH_GRANULE` bytes."""
    typ = buffer.type
    if not isinstance(typ, MemRefType) or not typ.get_shape():
        raise VerifyException(f"{op.name}: prefetches from a memref of rank 1 or more, "
                              f"got {typ}")
    width = getattr(typ.element_type, "bitwidth", None)
    if not isinstance(width, int) or width % 8:
        raise VerifyException(f"{op.name}: cannot prefetch elements of type "
                              f"{typ.element_type} (whole bytes only)")
    nbytes = count * width // 8
    if count < 1 or nbytes % PREFETCH_GRANULE:
        raise VerifyException(f"{op.name}: count {count} of {typ.element_type} is {nbytes} "
                              f"bytes; a prefetch moves a positive multiple of "
                              f"{PREFETCH_GRANULE} bytes")
    inner = typ.get_shape()[-1]
    if inner < count:
        raise VerifyException(f"{op.name}: the innermost extent must be static and hold count "
                              f"{count} elements, got {'?' if inner < 0 else inner}")
    strides = typ.get_strides()
    if strides is not None and strides[-1] != 1:
        raise VerifyException(f"{op.name}: the innermost dimension must be contiguous "
                              f"(stride 1), got stride {strides[-1]}")


def print_copy_suffix(printer: Printer, op: Operation, src: SSAValue, dst: SSAValue,
                      count: int, condition: SSAValue | None = None) -> None:
    """`` count N [if %c] {attrs} : src-type to dst-type``: the common end of every copy
    op's text."""
    printer.print_string(f" count {count}")
    if condition is not None:
        printer.print_string(" if ")
        printer.print_ssa_value(condition)
    printer.print_op_attributes(op.attributes)
    printer.print_string(" : ")
    printer.print_attribute(src.type)
    printer.print_string(" to ")
    printer.print_attribute(dst.type)


def parse_copy_suffix(parser: Parser) -> tuple[int, dict[str, Attribute], Attribute, Attribute]:
    """Parse what :func:`print_copy_suffix` prints without a condition: the count, the
    attributes and the two buffer types."""
    count, condition, attrs, src_type, dst_type = parse_conditional_copy_suffix(parser)
    if condition is not None:
        parser.raise_error("this copy takes no condition ('if')")
    return count, attrs, src_type, dst_type


def parse_conditional_copy_suffix(parser: Parser) -> tuple[
        int, UnresolvedOperand | None, dict[str, Attribute], Attribute, Attribute]:
    """Parse what :func:`print_copy_suffix` prints: the count, the condition (unresolved, or
    ``None``), the attributes and the two buffer types."""
    parser.parse_keyword("count")
    count = parse_i64(parser)
    condition = (parser.parse_unresolved_operand() if parser.parse_optional_keyword("if")
                 else None)
    attrs = parser.parse_optional_attr_dict()
    parser.parse_punctuation(":")
    src_type = parser.parse_type()
    parser.parse_keyword("to")
    return count, condition, attrs, src_type, parser.parse_type()


class CopyBase(IRDLOperation):
    """A copy of ``count`` consecutive innermost elements per executing thread,
    ``src[i, j + e]`` to ``dst[a, b + e]`` for ``e < count``; both element offsets must be
    multiples of ``count`` (the copy's size is its alignment)."""

    src = operand_def(MemRefType)
    src_indices = var_operand_def(IndexType)
    dst = operand_def(MemRefType)
    dst_indices = var_operand_def(IndexType)
    count = prop_def(IntegerAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    WHAT: ClassVar[str] = "a copy"
    """How diagnostics name this kind of copy."""

    def __init__(self, src: SSAValue, src_indices: Sequence[SSAValue], dst: SSAValue,
                 dst_indices: Sequence[SSAValue], count: int) -> None:
        super().__init__(operands=[src, list(src_indices), dst, list(dst_indices)],
                         properties={"count": IntegerAttr(count, i64)})

    @property
    def elements(self) -> int:
        """How many elements each thread copies (``count``)."""
        return self.count.value.data

    def verify_(self) -> None:
        _check_indices(self, self.src, self.src_indices)
        _check_indices(self, self.dst, self.dst_indices)
        check_copy(self, self.src, self.dst, self.elements, self.WHAT)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        print_access(printer, self.src, self.src_indices)
        printer.print_string(" to ")
        print_access(printer, self.dst, self.dst_indices)
        print_copy_suffix(printer, self, self.src, self.dst, self.elements)

    @classmethod
    def parse(cls, parser: Parser) -> Self:
        src, src_indices = parse_access(parser)
        parser.parse_keyword("to")
        dst, dst_indices = parse_access(parser)
        count, attrs, src_type, dst_type = parse_copy_suffix(parser)
        op = cls(parser.resolve_operand(src, src_type), src_indices,
                 parser.resolve_operand(dst, dst_type), dst_indices, count)
        op.attributes |= attrs
        return op


@irdl_op_definition
class CopyOp(CopyBase):
    """``kernel.copy %src[%i, %j] to %dst[%a, %b] count 4 : memref<64x36xf32> to
    memref<8x4xf32>``: each executing thread copies ``count`` consecutive elements of the
    innermost dimension, ``src[i, j + e]`` to ``dst[a, b + e]`` for ``e < count``, as one
    4-, 8- or 16-byte access on each side (CUDA's ``float4`` loads and stores). Any
    buffers: global, ``kernel.shared`` or ``kernel.local``. Both element offsets must be
    multiples of ``count``."""

    name = "kernel.copy"


@irdl_op_definition
class AsyncCopyOp(CopyBase):
    """``kernel.async_copy %src[%i, %j] to %dst[%a, %b] count 4 : memref<64x256xf32> to
    memref<16x4xf32>``: each executing thread starts copying ``count`` consecutive elements
    of the innermost dimension, ``src[i, j + e]`` to ``dst[a, b + e]`` for ``e < count``
    (CUDA's ``cp.async`` of 4, 8 or 16 bytes, from global to shared memory).

    The copy is *asynchronous*: it joins the thread's open group of copies, which
    ``kernel.async_commit`` closes; its elements are written to ``dst`` at the latest when a
    ``kernel.async_wait`` of the same thread completes that group (and in any case before the
    kernel ends). Until then ``dst`` holds undefined values for every thread, and other threads
    see the data only after the wait *and* a ``kernel.barrier``. Both element offsets must be
    multiples of ``count`` (the copy's size is its alignment).

    With ``if %ok`` (``… count 8 if %ok : …``, ``%ok`` an ``i1``) a thread whose ``%ok`` is
    false reads nothing and writes zeros (``cp.async``'s source size 0): the rows of a
    ragged tile past the buffer's edge, whose values nobody stores, cost no memory
    traffic. ``tile-to-kernel{zero_fill=true}`` gives a clamped copy this condition (every
    clamped coordinate within its limit); the source coordinates must still lie in the
    buffer.
    """

    name = "kernel.async_copy"
    WHAT: ClassVar[str] = "an asynchronous copy"
    src = operand_def(MemRefType)  # declared again: the condition comes last
    src_indices = var_operand_def(IndexType)
    dst = operand_def(MemRefType)
    dst_indices = var_operand_def(IndexType)
    in_bounds = opt_operand_def(IntegerType(1))

    def __init__(self, src: SSAValue, src_indices: Sequence[SSAValue], dst: SSAValue,
                 dst_indices: Sequence[SSAValue], count: int,
                 in_bounds: SSAValue | None = None) -> None:
        IRDLOperation.__init__(
            self, operands=[src, list(src_indices), dst, list(dst_indices),
                            [] if in_bounds is None else [in_bounds]],
            properties={"count": IntegerAttr(count, i64)})

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        print_access(printer, self.src, self.src_indices)
        printer.print_string(" to ")
        print_access(printer, self.dst, self.dst_indices)
        print_copy_suffix(printer, self, self.src, self.dst, self.elements, self.in_bounds)

    @classmethod
    def parse(cls, parser: Parser) -> Self:
        src, src_indices = parse_access(parser)
        parser.parse_keyword("to")
        dst, dst_indices = parse_access(parser)
        count, ok, attrs, src_type, dst_type = parse_conditional_copy_suffix(parser)
        op = cls(parser.resolve_operand(src, src_type), src_indices,
                 parser.resolve_operand(dst, dst_type), dst_indices, count,
                 None if ok is None else parser.resolve_operand(ok, IntegerType(1)))
        op.attributes |= attrs
        return op

    def verify_(self) -> None:
        super().verify_()
        if isinstance(self.src.owner, SharedOp | LocalOp):
            raise VerifyException(f"{self.name}: the source must be a global buffer (a kernel "
                                  f"argument), not a {self.src.owner.name} buffer")
        dst_owner = self.dst.owner
        if isinstance(self.dst, BlockArgument) and isinstance(self.dst.owner.parent_op(), FuncOp):
            raise VerifyException(f"{self.name}: the destination must be a kernel.shared "
                                  "buffer, not a kernel argument")
        if isinstance(dst_owner, LocalOp):
            raise VerifyException(f"{self.name}: the destination must be a kernel.shared "
                                  "buffer, not a kernel.local buffer")


@irdl_op_definition
class AsyncCommitOp(IRDLOperation):
    """``kernel.async_commit``: closes the group of the ``kernel.async_copy`` ops this thread
    started since its previous commit (``__pipeline_commit()``)."""

    name = "kernel.async_commit"
    assembly_format = "attr-dict"

    def __init__(self) -> None:
        super().__init__()


def check_pending(op: Operation, pending: int) -> None:
    """``async_wait``'s number of groups left in flight is non-negative."""
    if pending < 0:
        raise VerifyException(f"{op.name}: the number of pending groups must be >= 0, "
                              f"got {pending}")


class AsyncWaitBase(IRDLOperation):
    """An ``async_wait`` (``kernel.`` or ``tile.``): the waiting thread's older groups of
    asynchronous copies are complete, at most ``pending`` of its newest still in flight."""

    pending = prop_def(IntegerAttr)

    def __init__(self, pending: int) -> None:
        super().__init__(properties={"pending": IntegerAttr(pending, i64)})

    @property
    def groups(self) -> int:
        """The number of groups that may stay in flight."""
        return self.pending.value.data

    def verify_(self) -> None:
        check_pending(self, self.groups)

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.groups}")
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> AsyncWaitBase:
        op = cls(parse_i64(parser))
        op.attributes |= parser.parse_optional_attr_dict()
        return op


@irdl_op_definition
class AsyncWaitOp(AsyncWaitBase):
    """``kernel.async_wait 1``: this thread waits until at most ``pending`` of its most
    recently committed groups of asynchronous copies are still in flight; every older group
    is complete, its data written (``__pipeline_wait_prior(pending)``). Copies not committed
    yet are not completed. Other threads see the data after a following ``kernel.barrier``."""

    name = "kernel.async_wait"


def enclosing_func(op: Operation) -> FuncOp | None:
    """The ``kernel.func`` around ``op``, if any."""
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, FuncOp):
        parent = parent.parent_op()
    return parent


def _check_in_kernel(op: Operation) -> None:
    """``op`` sits in a ``kernel.func`` (grid dependences belong to a kernel's threads)."""
    if enclosing_func(op) is None and op.parent is not None:
        raise VerifyException(f"{op.name} must be inside a kernel.func")


@irdl_op_definition
class PrefetchOp(IRDLOperation):
    """``kernel.prefetch %w[%i, %j] count 2048 : memref<2048x2048xbf16>``: each executing
    thread asks for ``count`` consecutive innermost elements of a global buffer, from
    ``w[i, j]`` on, to be brought into the L2 cache (``cp.async.bulk.prefetch.L2``, sm_90+).
    A hint: it changes no value and waits for nothing, so it may come before
    ``kernel.wait_prior_grids`` (see :func:`waits_first`). The elements must lie inside the
    buffer and start at a multiple of :data:`PREFETCH_GRANULE` bytes (the interpreter checks
    both)."""

    name = "kernel.prefetch"
    buffer = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    count = prop_def(IntegerAttr)
    # Written as a write too: an op that only reads is dead when nothing uses a result,
    # and a prefetch has none.
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, buffer: SSAValue, indices: Sequence[SSAValue], count: int) -> None:
        super().__init__(operands=[buffer, list(indices)],
                         properties={"count": IntegerAttr(count, i64)})

    @property
    def elements(self) -> int:
        """How many elements the prefetch asks for (``count``)."""
        return self.count.value.data

    def verify_(self) -> None:
        _check_indices(self, self.buffer, self.indices)
        check_prefetch(self, self.buffer, self.elements)
        if isinstance(self.buffer.owner, SharedOp | LocalOp):
            raise VerifyException(f"{self.name}: prefetches from a global buffer (a kernel "
                                  f"argument), not a {self.buffer.owner.name} buffer")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        print_access(printer, self.buffer, self.indices)
        printer.print_string(f" count {self.elements}")
        print_typed_suffix(printer, self, self.buffer.type)

    @classmethod
    def parse(cls, parser: Parser) -> PrefetchOp:
        buffer, indices = parse_access(parser)
        parser.parse_keyword("count")
        count = parse_i64(parser)
        attrs, typ = parse_typed_suffix(parser)
        op = cls(parser.resolve_operand(buffer, typ), indices, count)
        op.attributes |= attrs
        return op


class _GridDependencyOp(IRDLOperation):
    """An op of programmatic dependent launch: no operands, only inside a kernel."""

    assembly_format = "attr-dict"

    def __init__(self) -> None:
        super().__init__()

    def verify_(self) -> None:
        _check_in_kernel(self)


@irdl_op_definition
class WaitPriorGridsOp(_GridDependencyOp):
    """``kernel.wait_prior_grids``: the thread waits until the grids its launch depends on
    have completed and their memory writes are visible (PTX ``griddepcontrol.wait``,
    sm_90+). Needed first in a kernel launched ``programmatic`` (see
    :class:`LaunchOp`), which may start before the launch in front of it has finished;
    without a programmatic dependence it returns at once."""

    name = "kernel.wait_prior_grids"


@irdl_op_definition
class LaunchDependentsOp(_GridDependencyOp):
    """``kernel.launch_dependents``: the block lets a ``programmatic`` launch that follows
    this one be scheduled (PTX ``griddepcontrol.launch_dependents``, sm_90+); once every
    block has done so or exited, the next kernel's blocks may start and wait in their
    ``kernel.wait_prior_grids``. It orders nothing in memory."""

    name = "kernel.launch_dependents"


REGISTER_COUNTS = range(24, 257, 8)
"""The per-thread register counts ``setmaxnreg`` may ask for: multiples of 8 from 24 to
256."""

REGISTER_ACTIONS = ("inc", "dec")
"""``kernel.set_max_registers``' actions: take registers, give them back."""


@irdl_op_definition
class SetMaxRegistersOp(IRDLOperation):
    """``kernel.set_max_registers inc 232``: the executing warpgroup's threads change how
    many registers each holds to ``count`` — ``inc`` takes registers from the block's pool
    (waiting until enough are free), ``dec`` gives registers back to it (PTX
    ``setmaxnreg.{inc,dec}.sync.aligned.u32``; sm_90a). A warp-specialised kernel's
    producer warpgroup, which only issues copies, gives registers up so that its consumer
    warpgroups can hold larger accumulators than the block's even share.

    All 128 threads of a warpgroup execute it together (``.sync.aligned``); the kernel's
    register count at entry must be known to ptxas (``__launch_bounds__(threads, 1)``),
    and each register budget holds from the op to the end of the kernel, so it belongs at
    the head of a branch that runs to the kernel's end. ``count`` is a multiple of 8 from
    24 to 256 (:data:`REGISTER_COUNTS`). It changes no value: the interpreter does
    nothing."""

    name = "kernel.set_max_registers"
    action = prop_def(StringAttr)
    count = prop_def(IntegerAttr)

    def __init__(self, action: str, count: int) -> None:
        super().__init__(properties={"action": StringAttr(action),
                                     "count": IntegerAttr(count, i64)})

    @property
    def registers(self) -> int:
        """The per-thread register count asked for."""
        return self.count.value.data

    def verify_(self) -> None:
        _check_in_kernel(self)
        if self.action.data not in REGISTER_ACTIONS:
            raise VerifyException(f"{self.name}: action must be 'inc' or 'dec', got "
                                  f"'{self.action.data}'")
        if self.registers not in REGISTER_COUNTS:
            raise VerifyException(f"{self.name}: count must be a multiple of 8 from 24 to "
                                  f"256, got {self.registers}")

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.action.data} {self.registers}")
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> SetMaxRegistersOp:
        start = parser.pos
        action = parser.parse_identifier()
        if action not in REGISTER_ACTIONS:
            parser.raise_error(f"expected 'inc' or 'dec', got '{action}'", start, parser.pos)
        op = cls(action, parse_i64(parser))
        op.attributes |= parser.parse_optional_attr_dict()
        return op


def _from_block_id(value: SSAValue) -> bool:
    """Whether ``value`` is computed, through any chain of ops, from a ``kernel.block_id``."""
    seen: set[SSAValue] = set()
    todo = [value]
    while todo:
        current = todo.pop()
        if current in seen or not isinstance(current.owner, Operation):
            continue
        seen.add(current)
        if isinstance(current.owner, BlockIdOp):
            return True
        todo.extend(current.owner.operands)
    return False


@irdl_op_definition
class LastBlockOp(IRDLOperation):
    """``kernel.last_block %counter : memref<1xi32> { ... }``: the region runs
    once per launch, in the block that reaches the op last, after the memory writes that
    every block made before the op are visible to it. All threads of that block run the
    region; since any block may be the last, nothing in it may depend on which one it is
    (the verifier rejects ``kernel.block_id`` inside, and values computed from one outside).

    ``%counter`` is a global buffer that holds zero when the launch starts (the host
    allocates it ``memref.alloc() {llmopt.zeroed}``) and holds zero again when it ends: each
    block adds one on arrival, and the block that finds the grid complete puts it back. The
    op stands at the top level of a ``kernel.func``, so every thread of every block reaches
    it. ``kernel-to-cuda`` writes a barrier, then thread 0's ``__threadfence()``,
    ``atomicAdd`` and ``__threadfence()``, and the region under ``__syncthreads_or`` of the
    arrival (the pattern of a cooperative grid sync, one way).

    ``fuse-tails`` puts a small kernel that reads what a launch wrote into that launch's
    ``kernel.last_block``, so the pair is one launch."""

    name = "kernel.last_block"
    counter = operand_def(MemRefType)
    body = region_def("single_block")
    traits = traits_def(NoTerminator(), MemoryReadEffect(), MemoryWriteEffect(),
                        RecursiveMemoryEffect())

    def __init__(self, counter: SSAValue, body: Region) -> None:
        super().__init__(operands=[counter], regions=[body])

    def verify_(self) -> None:
        typ = self.counter.type
        if typ != MemRefType(IntegerType(32), [1]):  # no layout: the pointer is the element
            raise VerifyException(f"{self.name}: the counter is a memref<1xi32>, got {typ}")
        if isinstance(self.counter.owner, SharedOp | LocalOp):
            raise VerifyException(f"{self.name}: the counter is a global buffer (a kernel "
                                  f"argument), not a {self.counter.owner.name} buffer")
        if not isinstance(self.parent_op(), FuncOp):
            raise VerifyException(f"{self.name} must stand at the top level of a "
                                  "kernel.func, where every thread reaches it")
        for inner in self.body.walk():
            if isinstance(inner, BlockIdOp | LastBlockOp | ReturnOp | _GridDependencyOp):
                raise VerifyException(f"{self.name}: {inner.name} is not allowed inside "
                                      "(the region runs in whichever block is last)")
            for operand in inner.operands:
                if not self.is_ancestor(operand.owner) and _from_block_id(operand):
                    raise VerifyException(f"{self.name}: a value computed from "
                                          "kernel.block_id is used inside (the region runs "
                                          "in whichever block is last)")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_ssa_value(self.counter)
        printer.print_string(" : ")
        printer.print_attribute(self.counter.type)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> LastBlockOp:
        counter = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        body = parser.parse_region()
        if not body.blocks:  # ``{ }``: a tail with nothing to do
            body.add_block(Block())
        op = cls(parser.resolve_operand(counter, typ), body)
        op.attributes |= parser.parse_optional_attr_dict()
        return op


LENGTH_ATTR = "llmopt.length"
"""Marks a ``kernel.load`` of a length that the host wrote before any kernel ran
(``lengths-in-memory``), which may therefore come before ``kernel.wait_prior_grids``."""


_DIVISIONS = (arith.DivUIOp | arith.RemUIOp | arith.DivSIOp | arith.RemSIOp
              | arith.FloorDivSIOp | arith.CeilDivUIOp | arith.CeilDivSIOp)
"""The integer divisions and remainders :func:`before_wait` lets before a wait."""


def before_wait(op: Operation) -> bool:
    """Whether ``op`` (an op without regions) may run before a kernel's
    ``kernel.wait_prior_grids``: it touches no memory the grids in front may be writing —
    index arithmetic, ids, buffer declarations, a prefetch (a hint to the cache), a load of
    a length the host wrote (:data:`LENGTH_ATTR`). Integer divisions count as index
    arithmetic: xDSL leaves them unmarked (a zero divisor is undefined), but they touch no
    memory, and the wait does not move them."""
    return (isinstance(op, PrefetchOp | SharedOp | LocalOp | LaunchDependentsOp | _DIVISIONS)
            or (isinstance(op, LoadOp) and LENGTH_ATTR in op.attributes)
            or is_side_effect_free(op) or op.has_trait(IsTerminator))


def waits_first(block: Block) -> bool:
    """Whether every op of ``block`` (a kernel's body) that may touch memory, prefetches
    aside, runs after a ``kernel.wait_prior_grids`` on every path: before the block's first
    wait stand only ops that touch no memory (index arithmetic, the thread and block ids,
    buffer declarations, ``kernel.prefetch``) and ops with regions whose blocks satisfy
    this themselves (a loop whose body waits before its first load)."""
    for op in block.ops:
        if isinstance(op, WaitPriorGridsOp):
            return True
        if op.regions:
            if not all(waits_first(b) for region in op.regions for b in region.blocks):
                return False
        elif not before_wait(op):
            return False
    return True


Kernel = Dialect(
    "kernel",
    [FuncOp, ReturnOp, LaunchOp, ThreadIdOp, BlockIdOp, BlockDimOp, GridDimOp, LoadOp, StoreOp,
     SharedOp, LocalOp, BarrierOp, ClusterBarrierOp, OpaqueOp, ShuffleXorOp, CopyOp,
     AsyncCopyOp, AsyncCommitOp,
     AsyncWaitOp, WaitPriorGridsOp, LaunchDependentsOp, PrefetchOp, LastBlockOp,
     SetMaxRegistersOp],
    [],
)

__all__ = [
    "Kernel", "FuncOp", "ReturnOp", "LaunchOp", "ThreadIdOp", "BlockIdOp", "BlockDimOp",
    "GridDimOp", "LoadOp", "StoreOp", "SharedOp", "LocalOp", "BarrierOp", "OpaqueOp",
    "ClusterBarrierOp", "ShuffleXorOp", "enclosing_func",
    "AsyncCopyOp", "AsyncCommitOp", "AsyncWaitOp", "AsyncWaitBase", "WaitPriorGridsOp",
    "LaunchDependentsOp", "PrefetchOp", "LastBlockOp", "SetMaxRegistersOp", "REGISTER_COUNTS",
    "REGISTER_ACTIONS", "PROGRAMMATIC", "CARVEOUT", "DIMS",
    "PREFETCH_GRANULE",
    "check_prefetch", "waits_first", "before_wait", "LENGTH_ATTR",
    "COPY_BYTES", "CopyBase", "CopyOp", "check_copy", "check_pending",
    "parse_conditional_copy_suffix", "parse_copy_suffix", "print_copy_suffix",
]
