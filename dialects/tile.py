"""Tile IR (level 4): the ``tile`` dialect — the schedule, written down.

A ``tile.kernel`` is a ``loop.kernel`` with its launch shape decided
(``grid [g, 1, 1] block [b, 1, 1]``). Inside it, the loops that were free at Loop IR are
mapped onto the GPU by ``tile.forall``:

* ``over blocks`` — the points of the (linearised) iteration space are dealt to thread
  blocks: block ``bid`` takes points ``bid, bid + gridDim, ...``;
* ``over threads`` — dealt to all threads of the grid: global thread ``t`` takes points
  ``t, t + gridDim*blockDim, ...`` (consecutive threads take consecutive innermost indices,
  so accesses along the innermost axis coalesce);
* ``over block_threads`` — dealt to the threads of one block: thread ``tid`` takes points
  ``tid, tid + blockDim, ...``.

Every mapping is a strided loop with its bound checked, so extents that do not divide the
launch shape are correct by construction. ``tile.coop_reduce`` is a reduction that the
threads of a block perform together: each thread strides over the reduce axis, then the
partial results are combined by warp shuffles and a shared-memory step, and every thread
receives the total. ``tile.lane_reduce`` is the warp's part of that alone: in a forall over
block_threads that gives each thread one point, with the lanes of a warp (or of a group of
its lanes) as its innermost dimension, each warp (group) combines its values by shuffles.
Sequential loops, buffer accesses and scalar ops inside stay ``loop``/``arith``/``math`` ops;
a loop whose iterations depend on each other through memory (the K loop of a tiled matrix
product) is an ``scf.for``, which runs its iterations in order.

``tile.alloc`` gives each point of a ``tile.forall over blocks`` its own buffer, in one of
two places:

* ``shared`` — shared memory of the block (staged input tiles);
* ``registers`` — the same logical buffer, *distributed* over the block's threads: its
  leading dimensions are the extents of a ``tile.forall over block_threads`` with one point
  per thread, and every access indexes them with exactly that forall's induction variables.
  Each thread therefore touches only its own slice, which ``tile-to-kernel`` turns into a
  private array (a register micro-tile). Semantically it is a block buffer like any other,
  so the interpreters need no special case.

A ``tile.alloc registers`` directly in a ``tile.forall over threads`` or ``over
block_threads``, or in a ``tile.coop_reduce``'s body, is a buffer of each point of that
forall (each iteration of that reduction) instead, touched only by the thread that runs the
point (a thread's 16-byte chunk of an elementwise map or of a row, ``vector-elementwise``,
``vector-rows``): a private array of its own.

Asynchronous copies from global into shared memory (CUDA's ``cp.async``) are three ops:

* ``tile.async_copy %src[...] to %dst[...] count 4`` — every thread executing it starts
  copying ``count`` consecutive innermost elements (4, 8 or 16 bytes); the copy joins the
  thread's open *group*;
* ``tile.async_commit`` — closes the thread's open group;
* ``tile.async_wait N`` — the thread waits until at most its ``N`` most recently committed
  groups are still in flight: every older group's data is in ``dst``.

Until its group is waited for, a copy's destination holds undefined values. The step that
issues a copy is *not* counted as writing the destination when ``tile-to-kernel`` places
barriers: whoever emits the copies also emits the ``tile.async_wait`` and the
``kernel.barrier`` after it that make the data visible to the other threads of the block
(``kernel.barrier`` may stand in Tile IR for exactly that).

``tile.copy %src[...] to %dst[...] count 4`` is the synchronous counterpart: each executing
thread moves ``count`` consecutive innermost elements (4, 8 or 16 bytes) at once, between
any buffers — e.g. a 16-byte row fragment of a shared tile into the thread's registers.

``tile.prefetch %w[...] count 2048`` only asks for a range of a kernel buffer to be brought
into the L2 cache ahead of the loads that will read it (a decode step's weight rows); it
changes nothing that any op reads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar, Self

from xdsl.dialects.builtin import (
    AffineMapAttr,
    DenseArrayBase,
    IndexType,
    IntegerAttr,
    MemRefType,
    StringAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import Attribute, Block, BlockArgument, Dialect, Operation, Region, SSAValue
from xdsl.ir.affine import AffineDimExpr, AffineMap
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

from llmopt.dialects._syntax import (
    I64_MAX,
    check_kernel_attributes,
    check_launch_shape,
    check_reducible_type,
    check_static_buffer,
    int_array,
    ints,
    parse_affine_access,
    parse_bound_region,
    parse_i64,
    parse_int_list,
    parse_sized_list,
    print_affine_access,
    print_bound_args,
    print_int_list,
    print_sized_list,
)
from llmopt.dialects.kernel import (
    AsyncWaitBase,
    check_copy,
    check_prefetch,
    parse_copy_suffix,
    print_copy_suffix,
)
from llmopt.dialects.loop import ForOp as LoopForOp
from llmopt.dialects.loop import verify_access
from llmopt.dialects.prim import REDUCE_KINDS

MAPPINGS = ("blocks", "threads", "block_threads")
LANES = 32
"""The threads of a warp, which ``tile.lane_reduce`` combines."""
SPACES = ("shared", "registers")


@irdl_op_definition
class KernelOp(IRDLOperation):
    """A scheduled kernel: ``tile.kernel @k grid [g, 1, 1] block [b, 1, 1] (%a = %x : ...)``.

    With a symbolic length the grid's x extent may be a function-level ``index`` value
    computed from it (``grid [%g max 512, 1, 1]``: ``%g`` blocks, at most 512), and the
    length reaches the body as an ``index`` argument like a buffer."""

    name = "tile.kernel"
    buffers = var_operand_def(MemRefType | IndexType)
    grid_size = opt_operand_def(IndexType)
    sym_name = prop_def(StringAttr)
    grid = prop_def(DenseArrayBase)
    block = prop_def(DenseArrayBase)
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), NoTerminator(), RecursiveMemoryEffect())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, sym_name: str, grid: Sequence[int], block: Sequence[int],
                 buffers: Sequence[SSAValue], body: Region | None = None,
                 grid_size: SSAValue | None = None) -> None:
        if body is None:
            body = Region(Block(arg_types=[b.type for b in buffers]))
        super().__init__(
            operands=[list(buffers), [] if grid_size is None else [grid_size]], regions=[body],
            properties={"sym_name": StringAttr(sym_name), "grid": int_array(grid),
                        "block": int_array(block)},
        )

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """The grid; with a runtime ``grid_size``, the largest it can be."""
        return ints(self.grid)

    @property
    def block_shape(self) -> tuple[int, ...]:
        return ints(self.block)

    @property
    def has_runtime_extents(self) -> bool:
        """Whether the grid or a loop inside runs to a runtime value (a symbolic length)."""
        if self.grid_size is not None:
            return True
        return any(op.operands and (isinstance(op, ForallOp | CoopReduceOp)
                                    or op.name in ("loop.for", "loop.reduce"))
                   for op in self.walk())

    @property
    def threads_per_block(self) -> int:
        b = self.block_shape
        return b[0] * b[1] * b[2]

    def verify_(self) -> None:
        check_launch_shape(self.grid_shape, self.block_shape)
        args = self.body.block.args
        if len(args) != len(self.buffers) or any(
            a.type != b.type for a, b in zip(args, self.buffers, strict=False)
        ):
            raise VerifyException("block arguments must mirror the bound buffers")
        check_kernel_attributes(self)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.sym_name.data)
        printer.print_string(" grid ")
        sizes = {} if self.grid_size is None else {0: self.grid_size}
        print_sized_list(printer, self.grid_shape, sizes)
        printer.print_string(" block ")
        print_int_list(printer, self.block_shape)
        printer.print_string(" ")
        print_bound_args(printer, self.body.block.args, self.buffers)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False,
                             print_empty_block=False)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> KernelOp:
        name = parser.parse_symbol_name().data
        parser.parse_keyword("grid")
        start = parser.pos
        grid, sizes = parse_sized_list(parser)
        if set(sizes) - {0}:
            parser.raise_error("only the grid's x extent may be a runtime value", start,
                               parser.pos)
        parser.parse_keyword("block")
        block = parse_int_list(parser)
        operands, body = parse_bound_region(parser)
        op = cls(name, grid, block, operands, body, sizes.get(0))
        op.attributes |= parser.parse_optional_attr_dict()
        return op


@irdl_op_definition
class ForallOp(IRDLOperation):
    """``tile.forall (%i, %j) in [8, 256] over threads { ... }``: a mapped free-loop band.

    An extent may be a runtime ``index`` value (``in [1, %n max 128, 64]``): the band then
    has ``%n`` points along that dim, at most 128; ``extents`` holds the maxima (what
    schedules are chosen for), ``sizes`` the runtime values of the dims ``dynamic`` lists."""

    name = "tile.forall"
    sizes = var_operand_def(IndexType)
    extents = prop_def(DenseArrayBase)
    dynamic = opt_prop_def(DenseArrayBase)
    mapping = prop_def(StringAttr)
    body = region_def("single_block")
    traits = traits_def(NoTerminator(), RecursiveMemoryEffect())

    def __init__(self, extents: Sequence[int], mapping: str, body: Region | None = None,
                 sizes: dict[int, SSAValue] | None = None) -> None:
        if body is None:
            body = Region(Block(arg_types=[IndexType()] * len(extents)))
        props: dict[str, Attribute] = {"extents": int_array(extents),
                                       "mapping": StringAttr(mapping)}
        dims = sorted(sizes or {})
        if dims:
            props["dynamic"] = int_array(dims)
        super().__init__(operands=[[sizes[d] for d in dims] if sizes else []], regions=[body],
                         properties=props)

    @property
    def shape(self) -> tuple[int, ...]:
        """The extents; for a runtime extent, its largest value."""
        return ints(self.extents)

    @property
    def runtime_sizes(self) -> dict[int, SSAValue]:
        """The dims whose extent is a runtime value, and that value."""
        if self.dynamic is None:
            return {}
        return dict(zip(ints(self.dynamic), self.sizes, strict=True))

    @property
    def points(self) -> int:
        n = 1
        for e in self.shape:
            n *= e
        return n

    @property
    def ivs(self) -> tuple[SSAValue, ...]:
        return tuple(self.body.block.args)

    def verify_(self) -> None:
        if self.mapping.data not in MAPPINGS:
            raise VerifyException(f"unknown mapping '{self.mapping.data}', expected {MAPPINGS}")
        shape = self.shape
        if not shape or any(e < 1 for e in shape):
            raise VerifyException(f"extents must be positive, got {list(shape)}")
        if self.points > I64_MAX:
            raise VerifyException(
                f"extents {list(shape)} make {self.points} points, more than an index counts "
                f"({I64_MAX})"
            )
        args = self.body.block.args
        if len(args) != len(shape) or any(not isinstance(a.type, IndexType) for a in args):
            raise VerifyException(f"body takes {len(shape)} 'index' arguments, one per extent")
        dims = ints(self.dynamic) if self.dynamic is not None else ()
        if len(dims) != len(self.sizes) or list(dims) != sorted(set(dims)) or any(
                not 0 <= d < len(shape) for d in dims):
            raise VerifyException(f"dynamic dims {list(dims)} must be increasing positions "
                                  f"of the {len(shape)} extents, one per size operand")
        if self.mapping.data != "block_threads" and not isinstance(self.parent_op(), KernelOp):
            raise VerifyException(
                f"a forall over {self.mapping.data} must sit directly in tile.kernel"
            )

    def print(self, printer: Printer) -> None:
        printer.print_string(" (")
        printer.print_list(self.body.block.args, printer.print_ssa_value)
        printer.print_string(") in ")
        print_sized_list(printer, self.shape, self.runtime_sizes)
        printer.print_string(f" over {self.mapping.data} ")
        printer.print_region(self.body, print_entry_block_args=False,
                             print_empty_block=False)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> ForallOp:
        args = parser.parse_comma_separated_list(
            Parser.Delimiter.PAREN, lambda: parser.parse_argument(expect_type=False)
        )
        parser.parse_keyword("in")
        extents, sizes = parse_sized_list(parser)
        parser.parse_keyword("over")
        mapping = parser.parse_identifier()
        body = parser.parse_region([a.resolve(IndexType()) for a in args])
        op = cls(extents, mapping, body, sizes)
        op.attributes |= parser.parse_optional_attr_dict()
        return op


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminator of a ``tile.coop_reduce`` body."""

    name = "tile.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator(), Pure())
    assembly_format = "$values attr-dict `:` type($values)"

    def __init__(self, *values: SSAValue) -> None:
        super().__init__(operands=[list(values)])

    def verify_(self) -> None:
        if not isinstance(self.parent_op(), CoopReduceOp):
            raise VerifyException("tile.yield must end a tile.coop_reduce body")


@irdl_op_definition
class CoopReduceOp(IRDLOperation):
    """``%r = tile.coop_reduce add %k = 0 to 2048 : f32 { ... tile.yield %v : f32 }``.

    All threads of the block take part (each strides over ``%k``); every thread gets the
    combined result. It must therefore be reached by every thread of the block: it may not
    sit inside a ``tile.forall`` over threads or block_threads.
    """

    name = "tile.coop_reduce"
    bound = opt_operand_def(IndexType)
    extent = prop_def(IntegerAttr)
    kind = prop_def(StringAttr)
    result = result_def()
    body = region_def("single_block")
    traits = traits_def(RecursiveMemoryEffect())

    def __init__(self, kind: str, extent: int, result_type: Attribute,
                 body: Region | None = None, bound: SSAValue | None = None) -> None:
        if body is None:
            body = Region(Block(arg_types=[IndexType()]))
        super().__init__(
            operands=[[] if bound is None else [bound]], regions=[body],
            result_types=[result_type],
            properties={"extent": IntegerAttr(extent, i64), "kind": StringAttr(kind)},
        )

    @property
    def iv(self) -> SSAValue:
        return self.body.block.args[0]

    @property
    def trip_count(self) -> int:
        """The iterations; with a runtime ``bound`` (``0 to %n max 128``), the most."""
        return self.extent.value.data

    def verify_(self) -> None:
        if self.kind.data not in REDUCE_KINDS:
            raise VerifyException(
                f"unknown reduction kind '{self.kind.data}', expected one of {REDUCE_KINDS}"
            )
        if self.trip_count < 1:
            raise VerifyException(f"{self.name} extent must be positive, got {self.trip_count}")
        check_reducible_type(self.result.type)
        last = self.body.block.last_op
        if not isinstance(last, YieldOp) or len(last.values) != 1:
            raise VerifyException("tile.coop_reduce body must end in tile.yield of one scalar")
        if last.values[0].type != self.result.type:
            raise VerifyException("yielded type differs from the result type")
        parent = self.parent_op()
        while parent is not None and not isinstance(parent, KernelOp):
            if isinstance(parent, ForallOp) and parent.mapping.data != "blocks":
                raise VerifyException(
                    "tile.coop_reduce needs every thread of the block: it cannot sit inside a "
                    f"forall over {parent.mapping.data}"
                )
            parent = parent.parent_op()

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.kind.data} ")
        printer.print_ssa_value(self.iv)
        if self.bound is None:
            printer.print_string(f" = 0 to {self.trip_count} : ")
        else:
            printer.print_string(" = 0 to ")
            printer.print_ssa_value(self.bound)
            printer.print_string(f" max {self.trip_count} : ")
        printer.print_attribute(self.result.type)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False,
                             print_empty_block=False)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> CoopReduceOp:
        kind = parser.parse_identifier()
        arg = parser.parse_argument(expect_type=False).resolve(IndexType())
        parser.parse_punctuation("=")
        if parse_i64(parser) != 0:
            parser.raise_error("loops start at 0")
        parser.parse_keyword("to")
        unresolved = parser.parse_optional_unresolved_operand()
        bound = None
        if unresolved is not None:
            bound = parser.resolve_operand(unresolved, IndexType())
            parser.parse_keyword("max")
        extent = parse_i64(parser)
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        body = parser.parse_region([arg])
        op = cls(kind, extent, typ, body, bound)
        op.attributes |= parser.parse_optional_attr_dict()
        return op


@irdl_op_definition
class LaneReduceOp(IRDLOperation):
    """``%t = tile.lane_reduce add %v : f32``: the lanes of each warp combine their values;
    ``%t = tile.lane_reduce max %v lanes 4 : f32``: each group of 4 lanes does.

    It sits in a ``tile.forall … over block_threads`` whose innermost extent is the group's
    ``lanes`` (32, the default, 16, 8, 4 or 2) and whose points are exactly the block's
    threads, so thread ``tid`` holds the point ``tid`` and a group holds the ``lanes`` points
    that differ only in the innermost index. Between the forall and the op there may be
    ``loop.for`` ops of static extent only (every lane runs them alike), no condition. Every
    lane of a group receives the combination of the group's values, in the order of an xor
    butterfly (``v = v ⊕ shfl_xor(v, o)`` for o = lanes/2, …, 2, 1): a row's partial sums
    finished without shared memory or a barrier.
    """

    name = "tile.lane_reduce"
    value = operand_def()
    kind = prop_def(StringAttr)
    lanes = opt_prop_def(IntegerAttr)
    result = result_def()
    traits = traits_def(Pure())

    def __init__(self, kind: str, value: SSAValue, lanes: int = LANES) -> None:
        props: dict[str, Attribute] = {"kind": StringAttr(kind)}
        if lanes != LANES:
            props["lanes"] = IntegerAttr(lanes, i64)
        super().__init__(operands=[value], result_types=[value.type], properties=props)

    @property
    def group(self) -> int:
        """The lanes combined together (``lanes``, 32 when unset)."""
        return LANES if self.lanes is None else self.lanes.value.data

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.kind.data} ")
        printer.print_ssa_value(self.value)
        if self.group != LANES:
            printer.print_string(f" lanes {self.group}")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.value.type)

    @classmethod
    def parse(cls, parser: Parser) -> LaneReduceOp:
        kind = parser.parse_identifier()
        unresolved = parser.parse_unresolved_operand()
        lanes = LANES
        if parser.parse_optional_keyword("lanes") is not None:
            lanes = parser.parse_integer(allow_boolean=False, allow_negative=False)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        op = cls(kind, parser.resolve_operand(unresolved, parser.parse_type()), lanes)
        op.attributes |= attrs
        return op

    def verify_(self) -> None:
        if self.kind.data not in REDUCE_KINDS:
            raise VerifyException(
                f"unknown reduction kind '{self.kind.data}', expected one of {REDUCE_KINDS}"
            )
        check_reducible_type(self.value.type)
        if self.result.type != self.value.type:
            raise VerifyException("result type must match the combined value")
        lanes = self.group
        if lanes not in (2, 4, 8, 16, LANES):
            raise VerifyException(f"lanes must be 2, 4, 8, 16 or {LANES}, got {lanes}")
        forall = self.parent_op()
        while isinstance(forall, LoopForOp) and forall.bound is None:
            forall = forall.parent_op()
        if not (isinstance(forall, ForallOp) and forall.mapping.data == "block_threads"):
            raise VerifyException(
                "tile.lane_reduce must sit in a tile.forall over block_threads, through "
                "static loop.for ops only (the lanes of a warp all reach it)")
        if forall.shape[-1] != lanes or forall.runtime_sizes:
            raise VerifyException(
                f"tile.lane_reduce needs a forall whose innermost extent is its {lanes} lanes "
                f"and whose extents are static, got {list(forall.shape)}")
        kernel = enclosing(forall, KernelOp)
        if isinstance(kernel, KernelOp) and forall.points != math.prod(kernel.block_shape):
            raise VerifyException(
                f"tile.lane_reduce needs a point a thread: the forall has {forall.points} "
                f"points, the block {math.prod(kernel.block_shape)} threads")


def point_private(op: Operation) -> bool:
    """Whether ``op`` sits directly in a body that one thread runs for one point: a
    ``tile.forall over threads`` or ``over block_threads``, or a ``tile.coop_reduce`` (one
    iteration of a thread's fold). A register buffer allocated there is that point's own."""
    parent = op.parent_op()
    return isinstance(parent, CoopReduceOp) or (
        isinstance(parent, ForallOp) and parent.mapping.data in ("threads", "block_threads"))


@irdl_op_definition
class AllocOp(IRDLOperation):
    """``%s = tile.alloc shared : memref<64x33xf32>``: a buffer of one point of a
    ``tile.forall over blocks`` (see the module docstring for ``shared``/``registers``), or
    ``tile.alloc registers`` directly in a ``tile.forall over threads`` or ``over
    block_threads`` or in a ``tile.coop_reduce``'s body: a buffer of one point of that forall
    (one iteration of that reduction), private to the thread that runs it."""

    name = "tile.alloc"
    space = prop_def(StringAttr)
    result = result_def(MemRefType)

    def __init__(self, space: str, typ: MemRefType) -> None:
        super().__init__(result_types=[typ], properties={"space": StringAttr(space)})

    def verify_(self) -> None:
        if self.space.data not in SPACES:
            raise VerifyException(f"unknown space '{self.space.data}', expected one of {SPACES}")
        check_static_buffer(self.result.type, "tile")
        if self.space.data == "registers" and point_private(self):
            return
        parent = self.parent_op()
        if not (isinstance(parent, ForallOp) and parent.mapping.data == "blocks"):
            raise VerifyException("tile.alloc must sit directly in a tile.forall over blocks "
                                  "(registers: or over threads or block_threads, or in a "
                                  "tile.coop_reduce)")

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.space.data}")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> AllocOp:
        space = parser.parse_identifier()
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        typ = parser.parse_type()
        if not isinstance(typ, MemRefType):
            parser.raise_error(f"expected a memref type, got {typ}")
        op = cls(space, typ)
        op.attributes |= attrs
        return op


# --- asynchronous copies (cp.async) -----------------------------------------------------------


def enclosing(op: Operation, cls: type[Operation]) -> Operation | None:
    """The innermost op of type ``cls`` around ``op``."""
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, cls):
        parent = parent.parent_op()
    return parent


def _remap(amap: AffineMap, operands: Sequence[SSAValue], merged: Sequence[SSAValue]
           ) -> AffineMap:
    """``amap`` (over ``operands``) as a map over ``merged``, a list containing them."""
    dims = [AffineDimExpr(next(k for k, m in enumerate(merged) if m is v)) for v in operands]
    return amap.replace_dims_and_symbols(dims, [], len(merged), 0)


class _Counted:
    """The ``count`` and ``clamp`` properties of an op taking ``count`` consecutive
    elements, read through these two accessors."""

    @property
    def clamped(self) -> bool:
        """Whether the coordinates are clamped into the (source) buffer."""
        return getattr(self, "clamp") is not None  # noqa: B009 (an IRDL property)

    @property
    def elements(self) -> int:
        """How many consecutive elements the op takes (``count``)."""
        count: IntegerAttr = getattr(self, "count")  # noqa: B009 (an IRDL property)
        return count.value.data


class CopyBase(_Counted, IRDLOperation):
    """A copy of ``count`` consecutive innermost elements by each executing thread:
    ``src[src_map(indices) + (0, ..., 0, e)]`` to ``dst[dst_map(indices) + (0, ..., 0, e)]``
    for ``e < count``. Both accesses are affine maps of the same ``index`` operands;
    ``count`` elements make 4, 8 or 16 bytes, and both element offsets must be multiples of
    ``count`` (the interpreters check it). It sits inside a ``tile.forall``.

    With ``clamp`` (``%src[...] clamp to %dst[...]``) the source coordinates are clamped
    into the buffer first, as a clamped ``loop.load``'s: the innermost one to ``extent -
    count`` (the last whole copy), the others to ``extent - 1``. Such values past the edge
    are the guard of a ragged tile, which no stored result may depend on: an asynchronous
    copy may instead read nothing there and write zeros (``tile-to-kernel{zero_fill=true}``,
    where the innermost extent is a multiple of ``count``)."""

    src = operand_def(MemRefType)
    dst = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    src_map = prop_def(AffineMapAttr)
    dst_map = prop_def(AffineMapAttr)
    count = prop_def(IntegerAttr)
    clamp = opt_prop_def(UnitAttr)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    WHAT: ClassVar[str] = "a copy"
    """How diagnostics name this kind of copy."""

    def __init__(self, src: SSAValue, src_map: AffineMap, dst: SSAValue, dst_map: AffineMap,
                 indices: Sequence[SSAValue], count: int, clamp: bool = False) -> None:
        props: dict[str, Attribute] = {"src_map": AffineMapAttr(src_map),
                                       "dst_map": AffineMapAttr(dst_map),
                                       "count": IntegerAttr(count, i64)}
        if clamp:
            props["clamp"] = UnitAttr()
        super().__init__(operands=[src, dst, list(indices)], properties=props)

    def verify_(self) -> None:
        verify_access(self, self.src, self.src_map.data, self.indices)
        verify_access(self, self.dst, self.dst_map.data, self.indices)
        check_copy(self, self.src, self.dst, self.elements, self.WHAT)
        if enclosing(self, ForallOp) is None:
            raise VerifyException(f"{self.name} must sit inside a tile.forall")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_ssa_value(self.src)
        print_affine_access(printer, self.src_map.data, self.indices)
        if self.clamped:
            printer.print_string(" clamp")
        printer.print_string(" to ")
        printer.print_ssa_value(self.dst)
        print_affine_access(printer, self.dst_map.data, self.indices)
        print_copy_suffix(printer, self, self.src, self.dst, self.elements)

    @classmethod
    def parse(cls, parser: Parser) -> Self:
        src = parser.parse_unresolved_operand()
        src_map, src_indices = parse_affine_access(parser)
        clamp = parser.parse_optional_keyword("clamp") is not None
        parser.parse_keyword("to")
        dst = parser.parse_unresolved_operand()
        dst_map, dst_indices = parse_affine_access(parser)
        count, attrs, src_type, dst_type = parse_copy_suffix(parser)
        merged: list[SSAValue] = []
        for value in (*src_indices, *dst_indices):
            if not any(value is m for m in merged):
                merged.append(value)
        op = cls(parser.resolve_operand(src, src_type), _remap(src_map, src_indices, merged),
                 parser.resolve_operand(dst, dst_type), _remap(dst_map, dst_indices, merged),
                 merged, count, clamp)
        op.attributes |= attrs
        return op


@irdl_op_definition
class CopyOp(CopyBase):
    """``tile.copy %s[%t, %k * 4] to %f[%t, 0] count 4 : memref<64x36xf32> to
    memref<64x4xf32>``: each executing thread copies ``count`` consecutive innermost
    elements at once (one 16-byte access for four ``f32``), between any buffers — kernel
    buffers (global memory), ``tile.alloc shared`` and ``tile.alloc registers``."""

    name = "tile.copy"


@irdl_op_definition
class AsyncCopyOp(CopyBase):
    """``tile.async_copy %a[%i, %k * 4] to %s[%t, 0] count 4 : memref<64x256xf32> to
    memref<64x4xf32>``: start copying ``count`` consecutive innermost elements from global
    to shared memory (see the module docstring). ``dst`` is a ``tile.alloc shared`` buffer
    and ``src`` a kernel buffer.
    """

    name = "tile.async_copy"
    WHAT: ClassVar[str] = "an asynchronous copy"

    def verify_(self) -> None:
        super().verify_()
        src_owner = self.src.owner
        if isinstance(src_owner, AllocOp):
            raise VerifyException(f"{self.name}: the source must be a kernel buffer (global "
                                  f"memory), not a tile.alloc {src_owner.space.data} buffer")
        dst_owner = self.dst.owner
        if isinstance(dst_owner, AllocOp) and dst_owner.space.data != "shared":
            raise VerifyException(f"{self.name}: the destination must be a tile.alloc shared "
                                  f"buffer, not a tile.alloc {dst_owner.space.data} buffer")
        if isinstance(self.dst, BlockArgument) and isinstance(self.dst.owner.parent_op(),
                                                              KernelOp):
            raise VerifyException(f"{self.name}: the destination must be a tile.alloc shared "
                                  "buffer, not a kernel buffer")


@irdl_op_definition
class PrefetchOp(_Counted, IRDLOperation):
    """``tile.prefetch %w[(%nb * 8) + %r, 0] clamp count 2048 : memref<2048x2048xbf16>``:
    each executing thread asks for ``count`` consecutive innermost elements of a kernel
    buffer (global memory), from the coordinate on, to be brought into the L2 cache ahead of
    the loads that will read them. A hint: no value changes and nothing waits for it. With
    ``clamp`` the coordinates are clamped into the buffer first, as a clamped copy's are (the
    innermost one to ``extent - count``, the others to ``extent - 1``). It sits inside a
    ``tile.forall``; ``tile-to-kernel`` makes it a ``kernel.prefetch``."""

    name = "tile.prefetch"
    buffer = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    map = prop_def(AffineMapAttr)
    count = prop_def(IntegerAttr)
    clamp = opt_prop_def(UnitAttr)
    # Written as a write too: an op that only reads is dead when nothing uses a result,
    # and a prefetch has none.
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, buffer: SSAValue, amap: AffineMap, indices: Sequence[SSAValue],
                 count: int, clamp: bool = False) -> None:
        props: dict[str, Attribute] = {"map": AffineMapAttr(amap),
                                       "count": IntegerAttr(count, i64)}
        if clamp:
            props["clamp"] = UnitAttr()
        super().__init__(operands=[buffer, list(indices)], properties=props)

    def verify_(self) -> None:
        verify_access(self, self.buffer, self.map.data, self.indices)
        check_prefetch(self, self.buffer, self.elements)
        if isinstance(self.buffer.owner, AllocOp):
            raise VerifyException(f"{self.name}: prefetches from a kernel buffer (global "
                                  f"memory), not a tile.alloc {self.buffer.owner.space.data} "
                                  "buffer")
        if enclosing(self, ForallOp) is None:
            raise VerifyException(f"{self.name} must sit inside a tile.forall")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_ssa_value(self.buffer)
        print_affine_access(printer, self.map.data, self.indices)
        if self.clamped:
            printer.print_string(" clamp")
        printer.print_string(f" count {self.elements}")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.buffer.type)

    @classmethod
    def parse(cls, parser: Parser) -> Self:
        buffer = parser.parse_unresolved_operand()
        amap, indices = parse_affine_access(parser)
        clamp = parser.parse_optional_keyword("clamp") is not None
        parser.parse_keyword("count")
        count = parse_i64(parser)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        op = cls(parser.resolve_operand(buffer, parser.parse_type()), amap, indices, count,
                 clamp)
        op.attributes |= attrs
        return op


def _check_in_kernel(op: Operation) -> None:
    if enclosing(op, KernelOp) is None:
        raise VerifyException(f"{op.name} must sit inside a tile.kernel")


@irdl_op_definition
class AsyncCommitOp(IRDLOperation):
    """``tile.async_commit``: closes the group of the ``tile.async_copy`` ops each executing
    thread started since its previous commit."""

    name = "tile.async_commit"
    assembly_format = "attr-dict"

    def __init__(self) -> None:
        super().__init__()

    def verify_(self) -> None:
        _check_in_kernel(self)


@irdl_op_definition
class AsyncWaitOp(AsyncWaitBase):
    """``tile.async_wait 1``: each executing thread waits until at most ``pending`` of its
    most recently committed groups are in flight; its older groups are complete. Copies not
    committed yet are not completed."""

    name = "tile.async_wait"

    def verify_(self) -> None:
        super().verify_()
        _check_in_kernel(self)


Tile = Dialect("tile", [KernelOp, ForallOp, CoopReduceOp, LaneReduceOp, YieldOp, AllocOp, CopyOp,
                        AsyncCopyOp, AsyncCommitOp, AsyncWaitOp, PrefetchOp], [])

__all__ = ["Tile", "KernelOp", "ForallOp", "CoopReduceOp", "LaneReduceOp", "YieldOp", "AllocOp",
           "point_private", "CopyOp",
           "CopyBase", "AsyncCopyOp", "AsyncCommitOp", "AsyncWaitOp", "PrefetchOp", "MAPPINGS",
           "SPACES",
           "LANES", "enclosing"]
