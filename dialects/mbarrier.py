"""The ``mbarrier`` dialect: shared-memory barriers that count arrivals in phases (sm_80+;
the parity wait sm_90), at Kernel IR.

An *mbarrier* is one 64-bit word of a ``kernel.shared`` buffer of ``i64``. It is set up
with the number of arrivals that complete a *phase*; once that many arrivals have come,
the phase completes, its count starts again and the next phase begins. Phases are numbered
0, 1, 2, … from the initialisation; a thread waits for a phase by its *parity*
(``phase mod 2``). Unlike ``kernel.barrier`` (``__syncthreads``) nobody has to wait at the
arrival: a producer arrives and goes on, a consumer waits for the phase and goes on, so two
groups of a block's threads can run ahead of each other by as many phases as there are
barriers between them. That is what a warp-specialised kernel's slots of shared memory use
(see the ``warp-specialize`` pass): one barrier a slot that the producer's copies complete
(``full``), one that the consumers' releases complete (``empty``).

* ``mbarrier.init %bars[%i] count 128 : memref<2x4xi64>`` — ``mbarrier.init.shared::cta.b64``:
  the barrier expects ``count`` arrivals a phase. One thread initialises; a
  ``kernel.barrier`` after it makes the barrier visible to the others.
* ``mbarrier.arrive %bars[%i] : memref<2x4xi64>`` — ``mbarrier.arrive.shared::cta.b64``:
  each executing thread arrives once; its earlier writes are visible to a thread whose wait
  sees the phase complete.
* ``mbarrier.arrive_cluster %bars[%i] cta %r : memref<2x4xi64>`` —
  ``mapa.shared::cluster`` then ``mbarrier.arrive.shared::cluster.b64``:
  each executing thread arrives once on the barrier at the same place in the shared memory
  of block ``%r`` of its cluster (the blocks ``x - x mod n … x - x mod n + n - 1`` of a
  cluster of ``n`` along ``x``; itself when ``%r`` is its own rank), *for its warpgroup*:
  what the thread's warpgroup read and wrote before — the reads of its ``wgmma`` products
  that a ``wgmma.wait`` completed, which the warpgroup's threads issue together — is done
  before a thread of that block sees the phase complete. One thread a warpgroup arrives so
  (a consumer's release of a slot in a cluster); the warpgroup's other threads must not
  touch the slot after it.
* ``mbarrier.arrive_copies %bars[%i] : memref<2x4xi64>`` —
  ``cp.async.mbarrier.arrive.noinc.shared::cta.b64``: each executing thread arrives once
  *when its asynchronous copies issued so far* (``kernel.async_copy``, committed or not)
  have landed; the copies' data is then visible to a thread whose wait sees the phase
  complete. The thread itself goes on at once.
* ``mbarrier.expect_bytes %bars[%i] bytes 32768 : memref<2x4xi64>`` —
  ``mbarrier.arrive.expect_tx.shared::cta.b64``: each executing thread arrives once and
  announces that many bytes of *transactions*: the phase completes only when its arrivals
  have come and every byte announced in it has landed (``tma.load``'s copies complete
  transactions on the barrier they name). The data of those copies is then visible to a
  thread whose wait sees the phase complete. At most 2^20 - 1 bytes.
* ``mbarrier.wait %bars[%i] parity %p : memref<2x4xi64>`` — a loop over
  ``mbarrier.try_wait.parity.shared::cta.b64``: each executing thread waits until the phase
  of parity ``%p`` (0 or 1) has completed, i.e. until the barrier's current phase has
  another parity. A freshly initialised barrier is in phase 0, so a wait for parity 1
  returns at once (the "phase before the first", which a producer's first wait for a free
  slot uses).

The interpreter keeps each barrier's arrivals and completed phases: an arrival beyond the
count, or a wait for a phase that has not completed when the wait runs (in the
interpreter's order, every thread of the block one op after another), is an error; copies
that complete on a barrier land when a thread waits for that phase.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Self

from xdsl.dialects.builtin import IndexType, IntegerAttr, IntegerType, MemRefType, i64
from xdsl.ir import Dialect, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    prop_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect
from xdsl.utils.exceptions import VerifyException

from llmopt.dialects._syntax import (
    parse_access,
    parse_i64,
    parse_typed_suffix,
    print_access,
    print_typed_suffix,
)

MAX_COUNT = (1 << 20) - 1
"""The largest arrival count of a phase PTX allows."""


def check_barrier_access(op: Operation, bars: SSAValue, indices: Sequence[SSAValue]) -> None:
    """Raise ``VerifyException`` unless ``bars[indices]`` names one barrier: a word of a
    ``kernel.shared`` buffer of ``i64``, an index for each of its dimensions."""
    from llmopt.dialects.kernel import SharedOp

    typ = bars.type
    assert isinstance(typ, MemRefType)
    if typ.element_type != IntegerType(64):
        raise VerifyException(f"{op.name}: barriers are i64 words, not {typ.element_type}")
    if not isinstance(bars.owner, SharedOp):
        raise VerifyException(f"{op.name}: the barriers must be a kernel.shared buffer")
    if len(indices) != typ.get_num_dims():
        raise VerifyException(f"{op.name}: {len(indices)} indices for a "
                              f"rank-{typ.get_num_dims()} buffer")


class BarrierAccess(IRDLOperation):
    """An op on one mbarrier, ``bars[indices]``: a ``kernel.shared`` buffer of ``i64``.
    Its syntax is ``%bars[%i, …]``, what :meth:`print_tail` adds, the attributes and the
    buffer's type."""

    bars = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def verify_(self) -> None:
        check_barrier_access(self, self.bars, self.indices)

    def print_tail(self, printer: Printer) -> None:
        """What follows the access (nothing here)."""

    @classmethod
    def parse_tail(cls, parser: Parser) -> tuple[object, ...]:
        """What :meth:`print_tail` prints, as the constructor's arguments after the
        indices."""
        return ()

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        print_access(printer, self.bars, self.indices)
        self.print_tail(printer)
        print_typed_suffix(printer, self, self.bars.type)

    @classmethod
    def parse(cls, parser: Parser) -> Self:
        bars, indices = parse_access(parser)
        tail = cls.parse_tail(parser)
        attrs, typ = parse_typed_suffix(parser)
        op = cls(parser.resolve_operand(bars, typ), indices, *tail)  # type: ignore[call-arg]
        op.attributes |= attrs
        return op


@irdl_op_definition
class InitOp(BarrierAccess):
    """``mbarrier.init %bars[%i] count 128 : memref<2x4xi64>`` (see the module docstring)."""

    name = "mbarrier.init"
    count = prop_def(IntegerAttr)

    def __init__(self, bars: SSAValue, indices: Sequence[SSAValue], count: int) -> None:
        super().__init__(operands=[bars, list(indices)],
                         properties={"count": IntegerAttr(count, i64)})

    @property
    def arrivals(self) -> int:
        """The arrivals that complete a phase."""
        return self.count.value.data

    def verify_(self) -> None:
        super().verify_()
        if not 1 <= self.arrivals <= MAX_COUNT:
            raise VerifyException(f"{self.name}: count {self.arrivals} outside [1, "
                                  f"{MAX_COUNT}]")

    def print_tail(self, printer: Printer) -> None:
        printer.print_string(f" count {self.arrivals}")

    @classmethod
    def parse_tail(cls, parser: Parser) -> tuple[object, ...]:
        parser.parse_keyword("count")
        return (parse_i64(parser),)


class _OperandTail(BarrierAccess):
    """A barrier access followed by ``KEYWORD %v``, ``%v`` an ``index`` operand (the op's
    last)."""

    KEYWORD: ClassVar[str] = ""

    def __init__(self, bars: SSAValue, indices: Sequence[SSAValue], value: SSAValue) -> None:
        super().__init__(operands=[bars, list(indices), value])

    def print_tail(self, printer: Printer) -> None:
        printer.print_string(f" {self.KEYWORD} ")
        printer.print_ssa_value(self.operands[-1])

    @classmethod
    def parse_tail(cls, parser: Parser) -> tuple[object, ...]:
        parser.parse_keyword(cls.KEYWORD)
        return (parser.parse_operand(IndexType()),)


class _Arrival(BarrierAccess):
    """An arrival of each executing thread on ``bars[indices]``."""

    def __init__(self, bars: SSAValue, indices: Sequence[SSAValue]) -> None:
        super().__init__(operands=[bars, list(indices)])


@irdl_op_definition
class ArriveOp(_Arrival):
    """``mbarrier.arrive %bars[%i] : memref<2x4xi64>`` (see the module docstring)."""

    name = "mbarrier.arrive"


@irdl_op_definition
class ArriveClusterOp(_OperandTail):
    """``mbarrier.arrive_cluster %bars[%i] cta %r : memref<2x4xi64>``: an arrival on the
    barrier of block ``%r`` of the thread's cluster (see the module docstring)."""

    name = "mbarrier.arrive_cluster"
    KEYWORD: ClassVar[str] = "cta"
    bars = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    cta = operand_def(IndexType)


@irdl_op_definition
class ArriveCopiesOp(_Arrival):
    """``mbarrier.arrive_copies %bars[%i] : memref<2x4xi64>``: an arrival when the thread's
    asynchronous copies land (see the module docstring)."""

    name = "mbarrier.arrive_copies"


@irdl_op_definition
class ExpectBytesOp(BarrierAccess):
    """``mbarrier.expect_bytes %bars[%i] bytes 32768 : memref<2x4xi64>``: each executing
    thread arrives once and announces that many bytes of transactions (see the module
    docstring)."""

    name = "mbarrier.expect_bytes"
    amount = prop_def(IntegerAttr)

    def __init__(self, bars: SSAValue, indices: Sequence[SSAValue], amount: int) -> None:
        super().__init__(operands=[bars, list(indices)],
                         properties={"amount": IntegerAttr(amount, i64)})

    @property
    def bytes(self) -> int:
        """The bytes announced."""
        return self.amount.value.data

    def verify_(self) -> None:
        super().verify_()
        if not 1 <= self.bytes <= MAX_COUNT:
            raise VerifyException(f"{self.name}: {self.bytes} bytes outside [1, {MAX_COUNT}]")

    def print_tail(self, printer: Printer) -> None:
        printer.print_string(f" bytes {self.bytes}")

    @classmethod
    def parse_tail(cls, parser: Parser) -> tuple[object, ...]:
        parser.parse_keyword("bytes")
        return (parse_i64(parser),)


@irdl_op_definition
class WaitOp(_OperandTail):
    """``mbarrier.wait %bars[%i] parity %p : memref<2x4xi64>`` (see the module docstring)."""

    name = "mbarrier.wait"
    KEYWORD: ClassVar[str] = "parity"
    bars = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    parity = operand_def(IndexType)


Mbarrier = Dialect("mbarrier", [InitOp, ArriveOp, ArriveClusterOp, ArriveCopiesOp,
                                ExpectBytesOp, WaitOp], [])
