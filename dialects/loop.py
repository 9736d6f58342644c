"""Loop IR (level 3): the ``loop`` dialect.

One ``loop.kernel`` per future GPU kernel. Its body is a nest of

* ``loop.for`` — a *free* loop ``0 <= iv < extent``: iterations are independent;
* ``loop.reduce`` — a *reduce* loop whose body yields one scalar per iteration, combined
  with ``add``/``mul``/``max``/``min``; the op's result is the combined value;
* either loop may run to a runtime ``index`` value instead (``loop.for %i = 0 to %n max
  2048``): the trip count is ``%n``, the ``extent`` property its largest value (the bound
  schedules are chosen for). Symbolic programs (a sequence length bound at function
  entry) lower to such loops, with the length passed to the kernel as an ``index``
  argument (``loop.kernel @k (%a = %x : memref<1x?x64xf32>, %n = %seq : index)``);
* ``loop.load`` / ``loop.store`` — scalar accesses to buffers at affine maps of ``index``
  operands (``%x[%i, %j floordiv 4]``): usually the enclosing loops' induction variables,
  but any ``index`` value may be one — a gather reads ``%table[%row, %j]`` with ``%row`` an
  ``arith.index_cast`` of a loaded token id;
* scalar ``arith``/``math`` ops.

A kernel is isolated from above: its buffers (and the runtime extents it uses) are block
arguments bound to the function's ``memref`` and ``index`` values (``loop.kernel @k (%a =
%x : memref<8xf32>)``). A buffer with ``?`` extents (``memref<1x?x64xf32>``) has the
row-major layout: its strides follow from the runtime extents. Producer→consumer fusion
happens at this level (``fuse-kernels``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from xdsl.dialects.builtin import (
    AffineMapAttr,
    DenseArrayBase,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    NoneAttr,
    StringAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import Attribute, Block, Dialect, Operation, Region, SSAValue
from xdsl.ir.affine import (
    AffineDimExpr,
    AffineExpr,
    AffineMap,
)
from xdsl.irdl import (
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
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import (
    IsolatedFromAbove,
    IsTerminator,
    MemoryReadEffect,
    MemoryWriteEffect,
    NoTerminator,
    Pure,
    RecursiveMemoryEffect,
)
from xdsl.utils.exceptions import VerifyException

from llmopt.dialects._symbols import enclosing_function, is_symbolic
from llmopt.dialects._syntax import (
    affine_range,
    bad_division,
    check_index_in_bounds,
    check_kernel_attributes,
    check_reducible_type,
    check_static_layout,
    constant_index,
    guarded,
    parse_affine_access,
    parse_bound_region,
    parse_i64,
    print_affine_access,
    print_bound_args,
)
from llmopt.dialects.prim import REDUCE_KINDS


def _memref(value: SSAValue) -> MemRefType:
    if not isinstance(value.type, MemRefType):
        raise VerifyException(f"expected a memref, got {value.type}")
    return value.type


def _in_symbolic_function(op: Operation) -> bool:
    """Whether ``op`` is inside a function declaring symbols: there a row-major buffer with
    ``?`` extents has strides that the runtime extents give."""
    func = enclosing_function(op)
    return func is not None and is_symbolic(func)


def verify_access(op: Operation, buffer: SSAValue, amap: AffineMap,
                  indices: Sequence[SSAValue]) -> None:
    """Shared verifier of affine buffer accesses (``loop`` and ``tile`` levels): a map of
    the index operands with one result per dimension, no division by a constant that is not
    positive, and every constant coordinate within its static extent, and every coordinate
    that is an affine function of the surrounding loops' induction variables too, over all
    their iterations (unless the access is ``clamp``ed, has a predicate or sits in an
    ``scf.if``: code that may not run)."""
    typ = _memref(buffer)
    if not (isinstance(typ.layout, NoneAttr) and _in_symbolic_function(op)):
        check_static_layout(op.name, typ)
    if amap.num_dims != len(indices) or amap.num_symbols:
        raise VerifyException(
            f"{op.name}: map takes {amap.num_dims} dims but {len(indices)} indices are given"
        )
    if len(amap.results) != typ.get_num_dims():
        raise VerifyException(
            f"{op.name}: {len(amap.results)} indices for a rank-{typ.get_num_dims()} buffer"
        )
    for v in indices:
        if not isinstance(v.type, IndexType):
            raise VerifyException(f"{op.name}: index operands must be 'index', got {v.type}")
    for result in amap.results:
        problem = bad_division(result)
        if problem is not None:
            raise VerifyException(f"{op.name}: an index {problem}")
    if "clamp" in op.properties or guarded(op) or any(
            isinstance(v.type, IntegerType) and v.type.width.data == 1 for v in op.operands):
        return  # clamped, guarded or predicated: an index may lie outside
    ranges = [_iv_range(value) for value in indices]
    for dim, result in enumerate(amap.results):
        if not any(isinstance(expr, AffineDimExpr) for expr in result.dfs()):
            value = AffineMap(amap.num_dims, 0, (result,)).eval([0] * amap.num_dims, [])[0]
            check_index_in_bounds(op.name, typ, dim, value)
            continue
        span = affine_range(result, ranges)
        extent = typ.get_shape()[dim]
        if span is not None and (span[0] < 0 or 0 <= extent <= span[1]):
            values = (f"is {span[0]}" if span[0] == span[1] else
                      f"takes values {span[0]} to {span[1]} over its loops")
            raise VerifyException(
                f"{op.name}: index {_expr_text(result, indices)} {values}, outside dimension "
                f"{dim} of {typ} (0 to {extent - 1})"
            )


def _iv_range(value: SSAValue) -> tuple[int, int] | None:
    """The least and greatest value of an index operand that is the induction variable of a
    loop around the access — ``loop.for``, ``loop.reduce``, ``tile.forall``,
    ``tile.coop_reduce`` (``0`` to ``extent - 1``), an ``scf.for`` with constant bounds —,
    ``(c, c)`` for an ``arith.constant`` ``c``, a value carried by an ``scf.for`` that runs
    once (:func:`_carried_once`), else ``None`` (a value computed at run time)."""
    constant = constant_index(value)
    if constant is not None:
        return constant, constant
    owner = value.owner
    loop_op = owner.parent_op() if isinstance(owner, Block) else None
    if loop_op is not None and loop_op.name == "scf.for" and value is not owner.args[0]:
        return _carried_once(loop_op, list(owner.args).index(value) - 1)
    if loop_op is None or value is not owner.args[0] and loop_op.name != "tile.forall":
        return None
    # The loop itself is verified after the ops inside it: its properties may be malformed.
    if isinstance(loop_op, _LoopBase) or loop_op.name == "tile.coop_reduce":
        extent = loop_op.properties.get("extent")
        return (0, extent.value.data - 1) if isinstance(extent, IntegerAttr) else None
    if loop_op.name == "tile.forall":
        extents = loop_op.properties.get("extents")
        values = list(extents.get_values()) if isinstance(extents, DenseArrayBase) else []
        k = list(owner.args).index(value)
        return (0, int(values[k]) - 1) if k < len(values) else None
    if loop_op.name == "scf.for":
        lb, ub, step = (constant_index(v) for v in loop_op.operands[:3])
        if lb is None or ub is None or step is None or step < 1 or ub <= lb:
            return None
        return lb, lb + step * ((ub - lb - 1) // step)
    return None


def _carried_once(loop_op: Operation, k: int) -> tuple[int, int] | None:
    """The range of the ``k``-th value an ``scf.for`` carries, when the loop runs exactly
    once: that of its initial value (what ``canonicalize`` substitutes when it inlines such
    a loop, so that an access it would then find out of bounds is rejected here, in the
    input, rather than after the pass)."""
    lb, ub, step = (constant_index(v) for v in loop_op.operands[:3])
    if lb is None or ub is None or step is None or step < 1 or not lb < ub <= lb + step:
        return None
    return _iv_range(loop_op.operands[3 + k]) if 3 + k < len(loop_op.operands) else None




def _expr_text(expr: AffineExpr, indices: Sequence[SSAValue]) -> str:
    """An index expression with its dims named after the operands (``%i - 1``)."""
    text = str(expr)
    for k in sorted(range(len(indices)), reverse=True):  # d10 before d1
        text = text.replace(f"d{k}", f"\x00{k}\x00")
    for k, value in enumerate(indices):
        name = f"%{value.name_hint}" if value.name_hint else f"(index operand #{k})"
        text = text.replace(f"\x00{k}\x00", name)
    return text


@irdl_op_definition
class KernelOp(IRDLOperation):
    """One future GPU kernel; buffers (and runtime extents) come in as block arguments bound
    to operands."""

    name = "loop.kernel"
    buffers = var_operand_def(MemRefType | IndexType)
    sym_name = prop_def(StringAttr)
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), NoTerminator(), RecursiveMemoryEffect())

    def __init__(self, sym_name: str, buffers: Sequence[SSAValue], body: Region | None = None
                 ) -> None:
        if body is None:
            body = Region(Block(arg_types=[b.type for b in buffers]))
        super().__init__(
            operands=[list(buffers)], regions=[body],
            properties={"sym_name": StringAttr(sym_name)},
        )

    @property
    def args(self) -> tuple[SSAValue, ...]:
        return tuple(self.body.block.args)

    def bind(self, outer: SSAValue) -> SSAValue:
        """The block argument bound to the function-level value ``outer`` (a buffer or an
        ``index``), appended as a new binding if there is none."""
        for arg, bound in zip(self.body.block.args, self.buffers, strict=True):
            if bound is outer:
                return arg
        self.operands = [*self.operands, outer]
        arg = self.body.block.insert_arg(outer.type, len(self.body.block.args))
        if isinstance(outer.type, IndexType):
            arg.name_hint = outer.name_hint
        return arg

    def verify_(self) -> None:
        args = self.body.block.args
        if len(args) != len(self.buffers):
            raise VerifyException(
                f"{len(args)} block arguments for {len(self.buffers)} bound buffers"
            )
        for k, (arg, buf) in enumerate(zip(args, self.buffers, strict=True)):
            if arg.type != buf.type:
                raise VerifyException(f"argument #{k} is {arg.type}, bound to {buf.type}")
        check_kernel_attributes(self)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.sym_name.data)
        printer.print_string(" ")
        print_bound_args(printer, self.body.block.args, self.buffers)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False,
                             print_empty_block=False)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> KernelOp:
        name = parser.parse_symbol_name().data
        operands, body = parse_bound_region(parser)
        op = cls(name, operands, body)
        op.attributes |= parser.parse_optional_attr_dict()
        return op


class _LoopBase(IRDLOperation):
    """Common parts of ``for`` and ``reduce``: ``%iv = 0 to extent`` or ``%iv = 0 to %n max
    extent`` (a runtime trip count ``%n``, at most ``extent``), one block arg."""

    extent = prop_def(IntegerAttr)
    bound = opt_operand_def(IndexType)
    body = region_def("single_block")

    @property
    def iv(self) -> SSAValue:
        return self.body.block.args[0]

    @property
    def trip_count(self) -> int:
        """The number of iterations when static, else the largest (the runtime ``bound`` is
        at most this)."""
        return self.extent.value.data

    @property
    def is_dynamic(self) -> bool:
        """Whether the trip count is the runtime value ``bound``."""
        return self.bound is not None

    def _verify_loop(self) -> None:
        args = self.body.block.args
        if len(args) != 1 or not isinstance(args[0].type, IndexType):
            raise VerifyException(f"{self.name} body takes exactly one 'index' argument")
        if self.trip_count < 1:
            what = "maximum" if self.is_dynamic else "extent"
            raise VerifyException(f"{self.name} {what} must be positive, got {self.trip_count}")
        kernel = self.parent_op()
        while kernel is not None and kernel.name not in ("loop.kernel", "tile.kernel"):
            kernel = kernel.parent_op()
        if (self.bound is not None and isinstance(kernel, KernelOp)
                and self.bound.owner is not kernel.body.block):
            raise VerifyException(
                f"{self.name}: a runtime bound inside a loop.kernel must be one of the "
                "kernel's arguments (a runtime extent bound to it)")

    def _print_header(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_ssa_value(self.iv)
        if self.bound is None:
            printer.print_string(f" = 0 to {self.trip_count}")
            return
        printer.print_string(" = 0 to ")
        printer.print_ssa_value(self.bound)
        printer.print_string(f" max {self.trip_count}")

    @staticmethod
    def _parse_header(parser: Parser) -> tuple[Parser.Argument, int, SSAValue | None]:
        arg = parser.parse_argument(expect_type=False).resolve(IndexType())
        parser.parse_punctuation("=")
        lower = parse_i64(parser)
        if lower != 0:
            parser.raise_error("loops start at 0")
        parser.parse_keyword("to")
        unresolved = parser.parse_optional_unresolved_operand()
        if unresolved is None:
            return arg, parse_i64(parser), None
        bound = parser.resolve_operand(unresolved, IndexType())
        parser.parse_keyword("max")
        return arg, parse_i64(parser), bound


def _bound_operands(bound: SSAValue | None) -> list[SSAValue]:
    return [] if bound is None else [bound]


@irdl_op_definition
class ForOp(_LoopBase):
    """A free loop: iterations are independent (``loop.for %i = 0 to 8 { ... }``, or
    ``loop.for %i = 0 to %n max 2048 { ... }``: ``%n`` iterations, at most 2048)."""

    name = "loop.for"
    traits = traits_def(NoTerminator(), RecursiveMemoryEffect())

    def __init__(self, extent: int, body: Region | None = None,
                 bound: SSAValue | None = None) -> None:
        if body is None:
            body = Region(Block(arg_types=[IndexType()]))
        super().__init__(operands=[_bound_operands(bound)], regions=[body],
                         properties={"extent": IntegerAttr(extent, i64)})

    def verify_(self) -> None:
        self._verify_loop()

    def print(self, printer: Printer) -> None:
        self._print_header(printer)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False,
                             print_empty_block=False)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> ForOp:
        arg, extent, bound = cls._parse_header(parser)
        body = parser.parse_region([arg])
        op = cls(extent, body, bound)
        op.attributes |= parser.parse_optional_attr_dict()
        return op


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminator of a ``loop.reduce`` body: this iteration's contribution."""

    name = "loop.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator(), Pure())
    assembly_format = "$values attr-dict `:` type($values)"

    def __init__(self, *values: SSAValue) -> None:
        super().__init__(operands=[list(values)])

    def verify_(self) -> None:
        if not isinstance(self.parent_op(), ReduceOp):
            raise VerifyException("loop.yield must end a loop.reduce body")


@irdl_op_definition
class ReduceOp(_LoopBase):
    """A reduce loop: ``%r = loop.reduce add %k = 0 to 256 : f32 { ... loop.yield %v : f32 }``.

    The result is the combination of every iteration's yielded value, starting from the
    identity of ``kind``. With a runtime bound (``loop.reduce add %k = 0 to %n max 2048``)
    it combines the first ``%n`` iterations: attention's sums over the keys of a symbolic
    length.
    """

    name = "loop.reduce"
    kind = prop_def(StringAttr)
    result = result_def()
    traits = traits_def(RecursiveMemoryEffect())

    def __init__(self, kind: str, extent: int, result_type: Attribute,
                 body: Region | None = None, bound: SSAValue | None = None) -> None:
        if body is None:
            body = Region(Block(arg_types=[IndexType()]))
        super().__init__(
            operands=[_bound_operands(bound)], regions=[body], result_types=[result_type],
            properties={"extent": IntegerAttr(extent, i64), "kind": StringAttr(kind)},
        )

    def verify_(self) -> None:
        self._verify_loop()
        if self.kind.data not in REDUCE_KINDS:
            raise VerifyException(
                f"unknown reduction kind '{self.kind.data}', expected one of {REDUCE_KINDS}"
            )
        check_reducible_type(self.result.type)
        last = self.body.block.last_op
        if not isinstance(last, YieldOp) or len(last.values) != 1:
            raise VerifyException("loop.reduce body must end in loop.yield of one scalar")
        if last.values[0].type != self.result.type:
            raise VerifyException(
                f"body yields {last.values[0].type}, the reduction is {self.result.type}"
            )

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.kind.data}")
        self._print_header(printer)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False,
                             print_empty_block=False)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> ReduceOp:
        kind = parser.parse_identifier()
        arg, extent, bound = cls._parse_header(parser)
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        body = parser.parse_region([arg])
        op = cls(kind, extent, typ, body, bound)
        op.attributes |= parser.parse_optional_attr_dict()
        return op


@irdl_op_definition
class LoadOp(IRDLOperation):
    """``%v = loop.load %buf[%i, %j floordiv 4] : memref<...>``.

    With ``clamp`` (``loop.load %buf[%i, %k] clamp : ...``) every coordinate above the
    buffer's last index reads the last index instead (``min(i, extent - 1)``): the guard of
    a ragged tile, whose rows or columns past the edge compute values nobody stores. A
    coordinate inside the buffer is unchanged, so the clamp never alters an in-bounds read.
    """

    name = "loop.load"
    buffer = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    map = prop_def(AffineMapAttr)
    clamp = opt_prop_def(UnitAttr)
    result = result_def()
    traits = traits_def(MemoryReadEffect())

    def __init__(self, buffer: SSAValue, amap: AffineMap, indices: Sequence[SSAValue],
                 clamp: bool = False) -> None:
        props: dict[str, Attribute] = {"map": AffineMapAttr(amap)}
        if clamp:
            props["clamp"] = UnitAttr()
        super().__init__(
            operands=[buffer, list(indices)],
            result_types=[_memref(buffer).element_type],
            properties=props,
        )

    @property
    def clamped(self) -> bool:
        """Whether out-of-range coordinates are clamped to the buffer's last index."""
        return self.clamp is not None

    def verify_(self) -> None:
        verify_access(self, self.buffer, self.map.data, self.indices)
        if self.result.type != _memref(self.buffer).element_type:
            raise VerifyException("result type must be the buffer's element type")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_ssa_value(self.buffer)
        print_affine_access(printer, self.map.data, self.indices)
        if self.clamped:
            printer.print_string(" clamp")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.buffer.type)

    @classmethod
    def parse(cls, parser: Parser) -> LoadOp:
        unresolved = parser.parse_unresolved_operand()
        amap, indices = parse_affine_access(parser)
        clamp = parser.parse_optional_keyword("clamp") is not None
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        op = cls(parser.resolve_operand(unresolved, typ), amap, indices, clamp)
        op.attributes |= attrs
        return op


@irdl_op_definition
class StoreOp(IRDLOperation):
    """``loop.store %v, %buf[%i, %j] : memref<...>``."""

    name = "loop.store"
    value = operand_def()
    buffer = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    map = prop_def(AffineMapAttr)
    traits = traits_def(MemoryWriteEffect())

    def __init__(self, value: SSAValue, buffer: SSAValue, amap: AffineMap,
                 indices: Sequence[SSAValue]) -> None:
        super().__init__(
            operands=[value, buffer, list(indices)], properties={"map": AffineMapAttr(amap)}
        )

    def verify_(self) -> None:
        verify_access(self, self.buffer, self.map.data, self.indices)
        element = _memref(self.buffer).element_type
        if self.value.type != element:
            raise VerifyException(f"stored value is {self.value.type}, buffer holds {element}")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_ssa_value(self.value)
        printer.print_string(", ")
        printer.print_ssa_value(self.buffer)
        print_affine_access(printer, self.map.data, self.indices)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.buffer.type)

    @classmethod
    def parse(cls, parser: Parser) -> StoreOp:
        value = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        unresolved = parser.parse_unresolved_operand()
        amap, indices = parse_affine_access(parser)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        if not isinstance(typ, MemRefType):
            parser.raise_error(f"expected a memref type, got {typ}")
        op = cls(parser.resolve_operand(value, typ.element_type),
                 parser.resolve_operand(unresolved, typ), amap, indices)
        op.attributes |= attrs
        return op


def kernels(op: Operation) -> Iterator[KernelOp]:
    """Every ``loop.kernel`` nested in ``op``."""
    for inner in op.walk():
        if isinstance(inner, KernelOp):
            yield inner


Loop = Dialect("loop", [KernelOp, ForOp, ReduceOp, YieldOp, LoadOp, StoreOp], [])

__all__ = [
    "Loop", "KernelOp", "ForOp", "ReduceOp", "YieldOp", "LoadOp", "StoreOp", "kernels",
    "verify_access",
]
