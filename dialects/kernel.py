"""Kernel IR (level 5): the ``kernel`` dialect — explicit GPU primitives.

Kernels are ``kernel.func`` symbols at module level; the model function launches them
with ``kernel.launch``. Inside a kernel: thread/block ids and dims, buffer loads and stores
with explicit ``index`` coordinates, statically sized shared buffers, barriers and warp
shuffles. Control flow is ``scf`` (``scf.for``, ``scf.if``), scalar math is
``arith``/``math``. Nothing at this level is implicit: every index computation is an op.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    DenseArrayBase,
    FunctionType,
    IndexType,
    IntegerAttr,
    MemRefType,
    StringAttr,
    SymbolRefAttr,
    i64,
)
from xdsl.ir import Attribute, Block, Dialect, Operation, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import (
    IsolatedFromAbove,
    IsTerminator,
    MemoryReadEffect,
    MemoryWriteEffect,
    Pure,
    RecursiveMemoryEffect,
    SymbolOpInterface,
)
from xdsl.utils.exceptions import VerifyException

from llmopt.dialects._syntax import (
    check_launch_shape,
    check_static_buffer,
    check_static_layout,
    int_array,
    ints,
    parse_i64,
    parse_int_list,
    print_int_list,
)

DIMS = ("x", "y", "z")


@irdl_op_definition
class ReturnOp(IRDLOperation):
    """End of a ``kernel.func``."""

    name = "kernel.return"
    traits = traits_def(IsTerminator(), Pure())
    assembly_format = "attr-dict"


@irdl_op_definition
class FuncOp(IRDLOperation):
    """``kernel.func @k(%a: memref<...>, ...) block [256, 1, 1] { ... kernel.return }``."""

    name = "kernel.func"
    sym_name = prop_def(StringAttr)
    function_type = prop_def(FunctionType)
    block = prop_def(DenseArrayBase)
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

    def verify_(self) -> None:
        check_launch_shape(None, self.block_shape)
        types = tuple(a.type for a in self.body.block.args)
        if types != tuple(self.function_type.inputs.data):
            raise VerifyException("block arguments differ from the function type")
        for t in types:
            if not isinstance(t, MemRefType | IndexType) and not hasattr(t, "bitwidth"):
                raise VerifyException(f"kernel parameters are buffers or scalars, got {t}")
        if not isinstance(self.body.block.last_op, ReturnOp):
            raise VerifyException("kernel.func must end in kernel.return")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.sym_name.data)
        printer.print_string("(")
        printer.print_list(self.body.block.args, printer.print_block_argument)
        printer.print_string(") block ")
        print_int_list(printer, self.block_shape)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> FuncOp:
        name = parser.parse_symbol_name().data
        args = parser.parse_comma_separated_list(
            Parser.Delimiter.PAREN, lambda: parser.parse_argument(expect_type=True)
        )
        parser.parse_keyword("block")
        block = parse_int_list(parser)
        body = parser.parse_region(args)
        op = cls(name, [a.type for a in args], block, body)
        op.attributes |= parser.parse_optional_attr_dict()
        return op


@irdl_op_definition
class LaunchOp(IRDLOperation):
    """``kernel.launch @k grid [8, 1, 1] block [256, 1, 1] smem 0 (%x, %y) : types``."""

    name = "kernel.launch"
    kernel = prop_def(SymbolRefAttr)
    grid = prop_def(DenseArrayBase)
    block = prop_def(DenseArrayBase)
    smem = prop_def(IntegerAttr)
    args = var_operand_def()

    def __init__(self, kernel: str, grid: Sequence[int], block: Sequence[int],
                 args: Sequence[SSAValue], smem: int = 0) -> None:
        super().__init__(
            operands=[list(args)],
            properties={
                "kernel": SymbolRefAttr(kernel), "grid": int_array(grid),
                "block": int_array(block), "smem": IntegerAttr(smem, i64),
            },
        )

    @property
    def grid_shape(self) -> tuple[int, ...]:
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
        module = self.get_toplevel_object()
        if module is self:
            return
        from xdsl.traits import SymbolTable

        callee = SymbolTable.lookup_symbol(self, self.kernel)
        if callee is None:
            return  # checked again once the kernel exists (e.g. while lowering)
        if callee.name == "cuda.kernel":
            return  # after kernel-to-cuda the launched kernel is its CUDA-IR form
        if not isinstance(callee, FuncOp):
            raise VerifyException(f"@{self.kernel.root_reference.data} is not a kernel.func")
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
        print_int_list(printer, self.grid_shape)
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
        grid = parse_int_list(parser)
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
        op = cls(kernel.root_reference.data, grid, block, args, smem)
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
    typ = buffer.type
    if not isinstance(typ, MemRefType):
        raise VerifyException(f"{op.name}: expected a memref, got {typ}")
    if len(indices) != typ.get_num_dims():
        raise VerifyException(
            f"{op.name}: {len(indices)} indices for a rank-{typ.get_num_dims()} buffer"
        )
    check_static_layout(op.name, typ)
    return typ


def _print_access(printer: Printer, buffer: SSAValue, indices: Sequence[SSAValue]) -> None:
    printer.print_ssa_value(buffer)
    printer.print_string("[")
    printer.print_list(indices, printer.print_ssa_value)
    printer.print_string("]")


def _parse_access(parser: Parser) -> tuple[Parser.UnresolvedOperand, list[SSAValue]]:
    buffer = parser.parse_unresolved_operand()
    indices = parser.parse_comma_separated_list(
        Parser.Delimiter.SQUARE, lambda: parser.parse_operand(IndexType())
    )
    return buffer, indices


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
        _print_access(printer, self.buffer, self.indices)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.buffer.type)

    @classmethod
    def parse(cls, parser: Parser) -> LoadOp:
        buffer, indices = _parse_access(parser)
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
        _print_access(printer, self.buffer, self.indices)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.buffer.type)

    @classmethod
    def parse(cls, parser: Parser) -> StoreOp:
        value = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        buffer, indices = _parse_access(parser)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        if not isinstance(typ, MemRefType):
            parser.raise_error(f"expected a memref type, got {typ}")
        op = cls(parser.resolve_operand(value, typ.element_type),
                 parser.resolve_operand(buffer, typ), indices)
        op.attributes |= attrs
        return op


@irdl_op_definition
class SharedOp(IRDLOperation):
    """``%s = kernel.shared : memref<32xf32>``: a statically sized shared-memory buffer."""

    name = "kernel.shared"
    result = result_def(MemRefType)
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, typ: MemRefType) -> None:
        super().__init__(result_types=[typ])

    def verify_(self) -> None:
        if not isinstance(self.parent_op(), FuncOp):
            raise VerifyException("kernel.shared must sit at the top level of a kernel.func")
        check_static_buffer(self.result.type, "shared")


@irdl_op_definition
class LocalOp(IRDLOperation):
    """``%r = kernel.local : memref<4x4xf32>``: a statically sized array private to each
    thread (indexed with constants after unrolling, it lives in registers)."""

    name = "kernel.local"
    result = result_def(MemRefType)
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, typ: MemRefType) -> None:
        super().__init__(result_types=[typ])

    def verify_(self) -> None:
        if not isinstance(self.parent_op(), FuncOp):
            raise VerifyException("kernel.local must sit at the top level of a kernel.func")
        check_static_buffer(self.result.type, "local")


@irdl_op_definition
class BarrierOp(IRDLOperation):
    """``__syncthreads()``: every thread of the block waits here."""

    name = "kernel.barrier"
    assembly_format = "attr-dict"


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


Kernel = Dialect(
    "kernel",
    [FuncOp, ReturnOp, LaunchOp, ThreadIdOp, BlockIdOp, BlockDimOp, GridDimOp, LoadOp, StoreOp,
     SharedOp, LocalOp, BarrierOp, ShuffleXorOp],
    [],
)

__all__ = [
    "Kernel", "FuncOp", "ReturnOp", "LaunchOp", "ThreadIdOp", "BlockIdOp", "BlockDimOp",
    "GridDimOp", "LoadOp", "StoreOp", "SharedOp", "LocalOp", "BarrierOp", "ShuffleXorOp", "DIMS",
]
