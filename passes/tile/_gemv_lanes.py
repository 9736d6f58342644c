"""One lane's partial sum of a ``warp-gemv`` product: its 16-byte chunks of each operand,
copied into register fragments, multiplied and summed (see
:mod:`llmopt.passes.tile.warp_gemv`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, MemRefType, i64
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.ir.affine import AffineMap

from llmopt.dialects import loop, tile
from llmopt.passes.tile._access import UNROLL, Cloner, Linear, at, lin_sum
from llmopt.passes.tile._gemv_match import VECTOR_BYTES, Gemv, element_bytes
from llmopt.passes.tile._gemv_stage import Staged
from llmopt.passes.tile._online_softmax import const_float
from llmopt.target import WARP

CHUNKS_IN_FLIGHT = 4
"""The chunk loop is unrolled this far by default (option ``chunks``), so a lane has this
many 16-byte loads of each operand in flight."""


@dataclass
class LaneSum:
    """Builds one lane's partial sum of a matched reduction (see the module docstring)."""

    found: Gemv
    red: tile.CoopReduceOp
    values: dict[SSAValue, SSAValue]
    """The old kernel's values → the new kernel's (arguments, constants, forall ivs)."""
    rows: int
    w: SSAValue
    lane: SSAValue
    chunks: int = CHUNKS_IN_FLIGHT
    """The unroll factor of the chunk loop."""
    staged: Staged | None = None
    """The operands staged in shared memory once a block (``_gemv_stage``), if any."""
    lanes: int = WARP
    """The threads that share a row: ``32 × slices`` (``S`` warps a row)."""

    def build(self, body: Block, row: Linear, clamp: bool) -> tuple[list[Operation], SSAValue]:
        """The ops of the lane's sum over its chunks (a sequential ``scf.for``: each chunk
        refills the fragments) and its result; the fragments are allocated in ``body``."""
        vector, k = self.found.vector, self.found.k
        typ = self.red.result.type
        bounds = [arith.ConstantOp(IntegerAttr(n, IndexType()))
                  for n in (0, -(-k // (self.lanes * vector)), 1)]
        init = const_float(0.0, typ)
        step = Block(arg_types=[IndexType(), typ])
        c, acc = step.args
        c.name_hint, acc.name_hint = "c", "acc"
        chunks = scf.ForOp(*(b.result for b in bounds), [init.result], Region(step))
        chunks.attributes["unroll"] = IntegerAttr(self.chunks, i64)
        elems = loop.ReduceOp("add", vector, typ)
        elems.attributes |= UNROLL
        v = elems.body.block.args[0]
        v.name_hint = "v"
        row_iv = self.found.forall.ivs[self.found.row]
        first = Linear.of((self.lanes * vector, c), (vector, self.lane))
        cloner = Cloner({self.red.iv: lin_sum((1, first), (1, Linear.of((1, v)))),
                         row_iv: row}, dict(self.values))
        staged = self.staged or Staged()
        for value, (xs, widen) in staged.tiles.items():
            ident = AffineMap.identity(1)
            loaded = self._fragment(body, step, elems.body.block, xs, ident, [self.red.iv],
                                    first, row, clamp)
            if widen:
                ext = arith.ExtFOp(loaded, value.type)
                elems.body.block.add_op(ext)
                loaded = ext.result
            cloner.values[value] = loaded
        for op in self.red.body.block.ops:
            if op in staged.slice:
                continue
            if isinstance(op, loop.LoadOp):
                cloner.values[op.result] = self._fragment(
                    body, step, elems.body.block, self.values.get(op.buffer, op.buffer),
                    op.map.data, op.indices, first, row, clamp)
            elif isinstance(op, tile.YieldOp):
                term = cloner.value(op.values[0], elems.body.block)
                if k % (self.lanes * vector):  # the last chunk's lanes past K add nothing
                    term = _masked(elems.body.block, cloner.value(self.red.iv,
                                                                  elems.body.block), k, term)
                elems.body.block.add_op(loop.YieldOp(term))
            else:
                cloner.clone_into(op, elems.body.block)
        total = arith.AddfOp(acc, elems.result)
        step.add_ops([elems, total, scf.YieldOp(total.result)])
        return [*bounds, init, chunks], chunks.results[0]

    def _fragment(self, body: Block, step: Block, elems: Block, buffer: SSAValue,
                  amap: AffineMap, indices: Sequence[SSAValue], first: Linear, row: Linear,
                  clamp: bool) -> SSAValue:
        """A lane's ``V`` elements of ``buffer[amap(indices)]`` (``indices`` over the old
        kernel's values): a register fragment in ``body``, filled in ``step`` by 16-byte
        (or narrower) copies, and the element ``%v`` of it loaded in ``elems``."""
        vector = self.found.vector
        typ = buffer.type
        assert isinstance(typ, MemRefType)
        frag = tile.AllocOp("registers",
                            MemRefType(typ.element_type, [self.rows, self.lanes, vector]))
        frag.result.name_hint = "frag"
        body.add_op(frag)
        count = min(vector, VECTOR_BYTES // element_bytes(typ.element_type))
        row_iv = self.found.forall.ivs[self.found.row]
        for piece in range(vector // count):
            start = lin_sum((1, first), (1, Linear.of(const=piece * count)))
            cloner = Cloner({self.red.iv: start, row_iv: row}, dict(self.values))
            src_map, operands = cloner.access(amap, indices)
            dst = [Linear.of((1, self.w)), Linear.of((1, self.lane)),
                   Linear.of(const=piece * count)]
            dst_map, operands = at(dst, operands)
            src_map = AffineMap(len(operands), 0, src_map.results)
            step.add_op(tile.CopyOp(buffer, src_map, frag.result, dst_map, operands, count,
                                    clamp))
        load = loop.LoadOp(frag.result, *at([Linear.of((1, self.w)), Linear.of((1, self.lane)),
                                             Linear.of((1, elems.args[0]))]))
        elems.add_op(load)
        return load.result


def _masked(block: Block, k: SSAValue, extent: int, term: SSAValue) -> SSAValue:
    """``k < extent ? term : 0`` appended to ``block``."""
    bound = arith.ConstantOp(IntegerAttr(extent, IndexType()))
    inside = arith.CmpiOp(k, bound.result, "ult")
    zero = const_float(0.0, term.type)
    pick = arith.SelectOp(inside.result, term, zero.result)
    block.add_ops([bound, inside, zero, pick])
    return pick.result
