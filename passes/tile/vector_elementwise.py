"""``vector-elementwise``: each thread of an elementwise nest moves 16 bytes at a time.

**Matches** a ``tile.kernel`` whose body is side-effect-free scalar ops and one
``tile.forall over threads`` (``loop-to-tile``'s thread schedule: an elementwise map, an
index map such as a rotary embedding or a gather, a ``split-k`` sum) whose body is
straight-line — ``loop.load``, ``loop.store``, side-effect-free ``arith``/``math`` ops and
static ``loop.reduce`` ops of at most :data:`MAX_SLICES` iterations over loads and such ops
— with a static innermost extent ``E``.
An access is *contiguous* when it reads or writes a kernel buffer (global memory),
unclamped, whose elements are whole bytes and whose innermost extent is static, at
innermost coordinate ``f(%i) + rest``: ``%i`` the forall's innermost induction variable,
``f(%i)`` either ``%i`` or ``(%i + c) mod M`` (a rotation's other half), ``rest`` linear in
values that do not depend on ``%i`` (heads split out of a row: ``h·128 + %i``), no other
coordinate depending on ``%i``. The pass applies when every ``loop.store`` is contiguous,
no buffer is both loaded and stored (a point reading what it wrote stays in order), and
``V`` — the elements of the widest contiguous access that make :data:`VECTOR_BYTES` — is
at least 2 and divides ``E``, every store's innermost extent, ``rest``'s coefficients and
constant, ``c`` and ``M``: then ``V`` consecutive points touch ``V`` consecutive elements,
starting 16-byte aligned (kernel buffers are). A contiguous load for which that does not
hold, or whose ``V`` elements are not 4, 8 or 16 bytes, stays scalar (a store of that kind
leaves the kernel as it is).

**Produces**, for ``%i = V·%q + %v``::

    tile.forall (…, %q) in […, E/V] over threads {
      <the ops that do not depend on %i>
      %x = tile.alloc registers : memref<Vxbf16>            // one per contiguous load
      tile.copy %in[…, %q * V] to %x[0] count V
      %y = tile.alloc registers : memref<Vxbf16>            // one per store
      scf.for %v = 0 to V {                                  // unrolled
        %i = V·%q + %v
        <the other ops; a contiguous load reads %x[%v], a store writes %y[%v]>
      }
      tile.copy %y[0] to %out[…, %q * V] count V
    }

and the kernel's grid divided by ``V`` (a runtime grid through ``arith.ceildivui`` before
the kernel). A contiguous load inside a ``loop.reduce`` whose coordinates use the reduction's
variable ``%s`` (a ``split-k`` sum's slice) becomes one copy per slice, ``%s`` a constant in
each, into row ``%s`` of a ``[S, V]`` register buffer that the reduction, unrolled, reads
at ``[%s, %v]``. Each point computes what it computed before, with the same operations, so the
results are bit-identical; loads that are not contiguous (a broadcast row, a neighbour at
``%i + 1``) stay scalar loads inside the ``%v`` loop, their coordinates written in ``V·%q
+ %v`` so that ``tile-to-kernel`` knows their ranges.

**Why** one element a thread issues one 2-byte load per input and one 2-byte store, and its
flat index's division by each extent, per element: the kernel is bound by instructions
before it is bound by memory. With ``V`` elements a thread, each contiguous access is one
128-bit ``ld.global``/``st.global`` and the index arithmetic is shared by ``V`` elements.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from llmopt.dialects import tile
from llmopt.dialects._syntax import int_array
from llmopt.passes._rewrite import KeepLocation
from llmopt.passes.tile._chunks import VECTOR_BYTES, chunk_forall


@dataclass
class VectorizeElementwise(RewritePattern):
    """Rewrite one qualifying kernel (see the module docstring)."""

    limit: int = VECTOR_BYTES

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.KernelOp, rewriter: PatternRewriter) -> None:
        foralls = [o for o in op.body.block.ops if isinstance(o, tile.ForallOp)]
        if len(foralls) != 1 or foralls[0].mapping.data != "threads" or any(
                o.regions or o.dialect_name() not in ("arith", "math")
                for o in op.body.block.ops if o is not foralls[0]):
            return
        outer = dict(zip(op.body.block.args, op.buffers, strict=True))
        width = chunk_forall(foralls[0], outer, self.limit, rewriter)
        if width:
            _divide_grid(op, width, rewriter)


def _divide_grid(kernel: tile.KernelOp, width: int, rewriter: PatternRewriter) -> None:
    """The kernel's grid divided by ``width``, rounded up (its largest value likewise)."""
    grid = list(kernel.grid_shape)
    grid[0] = -(-grid[0] // width)
    kernel.properties["grid"] = int_array(grid)
    if kernel.grid_size is None:
        return
    factor = arith.ConstantOp(IntegerAttr(width, IndexType()))
    divided = arith.CeilDivUIOp(kernel.grid_size, factor.result)
    divided.result.name_hint = "grid"
    rewriter.insert([factor, divided], InsertPoint.before(kernel))
    kernel.operands[len(kernel.buffers)] = divided.result


@dataclass(frozen=True)
class VectorElementwise(ModulePass):
    """Give each thread of an elementwise nest 16 bytes of every contiguous access (see the
    module docstring)."""

    name = "vector-elementwise"

    bytes: int = VECTOR_BYTES
    """The widest access a thread makes (4, 8 or 16); 0 leaves every kernel as it is."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.bytes == 0:  # llmopt.options checks the range
            return
        PatternRewriteWalker(KeepLocation(VectorizeElementwise(self.bytes)),
                             apply_recursively=False).rewrite_module(op)


__all__ = ["VectorElementwise", "VectorizeElementwise"]
