"""The tiles and threads of the flash kernel ``flash-attention`` builds.

The shared tiles' paddings (:data:`ROW_PAD`, :data:`V_PAD`), the 16-bit type ``Q``, ``K``
and ``V`` are staged in (:func:`half_operands`), and :class:`Layout`, the tensor-core thread
layout of each of the kernel's two products, which
:class:`~llmopt.passes.tile._flash_steps.FlashKernel` builds on. See
:mod:`llmopt.passes.tile.flash_attention` for the whole story.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import arith
from xdsl.dialects.builtin import IndexType, IntegerAttr, MemRefType, StringAttr, bf16, f16
from xdsl.ir import Attribute, Block, SSAValue
from xdsl.ir.affine import AffineMap

from llmopt.dialects import tile
from llmopt.passes.tile._access import UNROLL, Linear, block_threads, loop_nest
from llmopt.passes.tile._attention_chain import Chain
from llmopt.passes.tile._schedule import RegisterTile
from llmopt.passes.tile._schedule_attention import warp_grid
from llmopt.passes.tile.register_tile import MMA_LAYOUT, thread_layout

ROW_PAD = 4
"""Padding of ``qs``, ``ks`` and ``ps``: rows ≡ 4 (mod 32) words put a fragment's 8 rows ×
4 columns in distinct banks and keep rows 16-byte aligned for ``cp.async``."""
V_PAD = 8
"""Padding of ``vs``, whose fragments read 4 rows × 8 columns: rows ≡ 8 (mod 32) words."""
UNROLL_K = 8
"""How far CUDA unrolls the chunk loops of the two products (their loads overlap)."""
INDEX = IndexType()


def const_index(value: int) -> arith.ConstantOp:
    return arith.ConstantOp(IntegerAttr(value, INDEX))


def ident(rank: int) -> AffineMap:
    return AffineMap.identity(rank)


class Layout:
    """The threads of one product's ``m × n`` tile in the tensor-core layout (warps ``(wi,
    wj)``, lanes ``(g, t)``, each thread's outputs ``(i, rh, j, rl)``: see
    :func:`~llmopt.passes.tile.register_tile.thread_layout`): foralls over them, the
    registers they accumulate in, and where an output lies in the tile."""

    def __init__(self, m: int, n: int, warps: int, mma: bool,
                 grid: tuple[int, int] | None = None) -> None:
        """``grid``: the warps ``(wm, wn)``, by default :func:`warp_grid`'s."""
        grid = grid or warp_grid(m, n, warps)
        assert grid is not None
        self.grid = grid
        self.tile = RegisterTile(m, n, m // (8 * grid[0]), n // (4 * grid[1]))
        self.lay = thread_layout(self.tile, MMA_LAYOUT)
        self.mma = mma

    def forall(self, role: str) -> tuple[tile.ForallOp, Block, list[SSAValue]]:
        """A forall of the block's threads, each over its outputs: the forall, the body of
        the nest and the ivs (the forall's, then the nest's)."""
        forall, tivs = block_threads(list(self.lay.forall), list(self.lay.forall_names))
        nest, inner, nivs = loop_nest(list(self.lay.nest), list(self.lay.nest_names), UNROLL)
        forall.body.block.add_op(nest)
        forall.attributes["llmopt.role"] = StringAttr(role)
        if self.mma:
            forall.attributes["llmopt.layout"] = StringAttr("mma")
        return forall, inner, [*tivs, *nivs]

    def forall_by_rows(self, role: str,
                       when: Callable[[Block, list[SSAValue]], tuple[Block, SSAValue]]
                       ) -> tuple[tile.ForallOp, Block, list[SSAValue], SSAValue]:
        """:meth:`forall` with the nest split after a thread's rows ``(i, rh)``: ``when``
        gets the rows' body and ivs and returns the block (a branch) that holds the
        columns' nest ``(j, rl)`` and a value of the row it computed. Returns the forall,
        the body of that nest, the ivs and that value."""
        forall, tivs = block_threads(list(self.lay.forall), list(self.lay.forall_names))
        names = list(self.lay.nest_names)
        rows, row_body, rivs = loop_nest(list(self.lay.nest[:2]), names[:2], UNROLL)
        forall.body.block.add_op(rows)
        cols, inner, civs = loop_nest(list(self.lay.nest[2:]), names[2:], UNROLL)
        branch, row_value = when(row_body, [*tivs, *rivs])
        branch.add_op(cols)
        forall.attributes["llmopt.role"] = StringAttr(role)
        if self.mma:
            forall.attributes["llmopt.layout"] = StringAttr("mma")
        return forall, inner, [*tivs, *rivs, *civs], row_value

    def registers(self, typ: Attribute, name: str) -> tile.AllocOp:
        alloc = tile.AllocOp("registers", MemRefType(typ, [*self.lay.forall,  # type: ignore[arg-type]
                                                           *self.lay.nest]))
        alloc.result.name_hint = name
        return alloc

    def row(self, ivs: Sequence[SSAValue]) -> Linear:
        return Linear.of(*((c, ivs[k]) for c, k in self.lay.m))

    def col(self, ivs: Sequence[SSAValue]) -> Linear:
        return Linear.of(*((c, ivs[k]) for c, k in self.lay.n))


def half_operands(chain: Chain) -> Attribute | None:
    """The 16-bit type ``Q``, ``K`` and ``V`` are all loaded as, else ``None``: then their
    tiles stay 16-bit (``mma-fragments`` reads them with ``ldmatrix`` into ``m16n8k16``
    products, ``V`` transposed), and ``P`` is rounded to it for ``P·V``."""
    types = {load.result.type for load in (chain.scores.q, chain.scores.k, chain.output.v)}
    if len(types) != 1:
        return None
    (typ,) = types
    return typ if typ in (bf16, f16) else None
