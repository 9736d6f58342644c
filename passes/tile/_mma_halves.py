"""The ``bf16``/``f16`` half of ``mma-fragments``: a register-tiled chunk loop of 16-bit
products becomes ``mma.ldmatrix`` and ``m16n8k16`` ``mma.sync`` (see
:mod:`llmopt.passes.tile.mma_fragments` for what it matches).

**Produces**, for ``kk = 16·kq + k`` (``k < 16``) and lane ``l = 4·g + t`` of each warp::

    scf.for %kq = 0 to K/16 {                    // the chunk loop's attributes
      tile.forall (%wi, %wj, %g, %t) over block_threads {
        // A, per i: ldmatrix.x4, lane l giving row m = l mod 8 + 8·((l / 8) mod 2) of the
        // warp's 16 rows (g + 8·rh := m) at column 16·kq + 8·(l / 16)
        %a_i_0, …, %a_i_3 = mma.ldmatrix x4 %stage[…]
        // B, per two j: ldmatrix.x4 of W's rows n (2·t + rl := l mod 8, j := 2·jj + l / 16)
        // at column 16·kq + 8·((l / 8) mod 2) — no transpose: W[n][k] is B's column n; an
        // odd last j takes ldmatrix.x2
        %b_j_0, %b_j_1, %b_j+1_0, %b_j+1_1 = mma.ldmatrix x4 %stage_1[…]
        // B stored [k, n] (V[key][d] of P·V): ldmatrix.x4 trans of the rows
        // k = 16·kq + 8·((l / 8) mod 2) + l mod 8 at columns 2·t + rl := 0, j := 2·jj + l / 16
        %b_j_0, %b_j_1, %b_j+1_0, %b_j+1_1 = mma.ldmatrix x4 trans %stage_2[…]
        // per update, i, j: the four accumulators of the 16×8 piece in and out
        %d… = mma.sync (%a_i_…) * (%b_j_…) + (acc[…, i, 0, j, 0], …) : vector<2xbf16>
        acc[…, i, rh, j, rl] = %d_(2·rh + rl)
      }
    }

The fragments are SSA values (``i`` and ``j`` unrolled in the IR), so no register buffer
holds them. The lane's rows and columns are index arithmetic (``arith``) on ``g`` and ``t``
and the loads' own indices.

**Requires** of each operand load: ``%kk`` exactly as the innermost index (the tile keeps
``K`` innermost, as ``stage-inputs`` makes for ``x[m, k]`` and ``W[n, k]``) — or, for a
``b`` operand, ``%kk`` in one outer index and the columns ``… + 2·t + rl`` innermost (a tile
``[k, n]``, as ``flash-attention`` stages ``V``), read with ``ldmatrix.trans`` —, rows a
multiple of 8 elements (16 bytes: ``ldmatrix`` reads 16-byte aligned rows), no clamp;
otherwise the chunk loop keeps its FMA loop.

**Why** a 16-bit product is exact in the tensor core's ``f32`` accumulation, so one
``m16n8k16`` does what ``terms=3`` TF32 products do for 8 ``f32`` steps; ``ldmatrix``
loads a thread's four ``A`` pairs (two of ``B``) in one instruction, where 16-bit scalar
loads would take eight. Products accumulate straight into the ``f32`` accumulators.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, MemRefType
from xdsl.ir import Block, Operation, SSAValue
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
)
from xdsl.pattern_rewriter import PatternRewriter

from llmopt.dialects import loop, mma, tile
from llmopt.passes.tile._access import linear_form
from llmopt.passes.tile._mma_forward import (
    drop_shared,
    forward,
    register_fragments,
    register_source,
)
from llmopt.passes.tile.vector_fragments import outer_chunk_loop

if TYPE_CHECKING:
    from llmopt.passes.tile._mma_match import Operand, Update

K_STEP = 16
"""K elements one ``m16n8k16`` product consumes."""


def _k_innermost(load: loop.LoadOp, kk: SSAValue) -> bool:
    """Whether ``%kk`` is the load's innermost index, exactly, and in no other index."""
    results = load.map.data.results
    form = linear_form(results[-1])
    if form is None or form[1] != 0 or len(form[0]) != 1:
        return False
    ((dim, coef),) = form[0].items()
    if coef != 1 or load.indices[dim] is not kk:
        return False
    return not any(load.indices[d] is kk for e in results[:-1] for d in e.used_dims())


def _columns_innermost(load: loop.LoadOp, kk: SSAValue, ivs: dict[str, SSAValue]) -> bool:
    """Whether a ``b`` operand is stored ``[k, n]``: ``%kk`` (coefficient 1) in one outer
    index and not the innermost, whose lane part is exactly ``2·t + rl`` and which only
    the columns' variables reach (so ``t = rl = 0`` starts 8 contiguous columns)."""
    results = load.map.data.results
    inner = linear_form(results[-1])
    if inner is None:
        return False
    coefs: dict[SSAValue, int] = {}
    for d, c in inner[0].items():
        coefs[load.indices[d]] = coefs.get(load.indices[d], 0) + c
    if kk in coefs or coefs.get(ivs["t"]) != 2 or coefs.get(ivs["rl"]) != 1:
        return False
    lanes = {ivs[n] for n in ("wj", "t", "j", "rl")}
    outer_uses = [load.indices[d] for e in results[:-1] for d in e.used_dims()]
    return outer_uses.count(kk) == 1 and not lanes & set(outer_uses)


def transposed(operand: Operand, kk: SSAValue, ivs: dict[str, SSAValue]) -> bool | None:
    """How ``ldmatrix`` reads the operand: ``False`` as it is (``%kk`` innermost), ``True``
    with ``trans`` (a ``b`` operand stored ``[k, n]``, as ``P·V`` reads ``V``), ``None``
    not at all (see **Requires**)."""
    load = operand.load
    typ = load.buffer.type
    assert isinstance(typ, MemRefType)
    if load.clamped or typ.get_shape()[-1] % mma.ROW_ELEMENTS:
        return None
    if _k_innermost(load, kk):
        return False
    if operand.role == "b" and _columns_innermost(load, kk, ivs):
        return True
    return None


def fits(operands: Sequence[Operand], kk: SSAValue, ivs: dict[str, SSAValue]) -> bool:
    """Whether every operand load can be read with ``ldmatrix`` (see **Requires**)."""
    return all(transposed(o, kk, ivs) is not None for o in operands)


class IndexEmitter:
    """Emits ``arith`` index arithmetic at the end of one block, a constant once each."""

    def __init__(self, block: Block, before: Operation | None) -> None:
        self.block = block
        self.before = before
        self.constants: dict[int, SSAValue] = {}

    def op(self, op: Operation) -> None:
        """Append ``op``."""
        if self.before is None:
            self.block.add_op(op)
        else:
            self.block.insert_op_before(op, self.before)

    def add(self, op: Operation) -> SSAValue:
        """Append ``op``; return its (first) result."""
        self.op(op)
        return op.results[0]

    def constant(self, value: int) -> SSAValue:
        if value not in self.constants:
            self.constants[value] = self.add(arith.ConstantOp(IntegerAttr(value, IndexType())))
        return self.constants[value]

    def expr(self, e: AffineExpr, dims: Sequence[SSAValue]) -> SSAValue:
        """The value of ``e`` over ``dims``: ``mod``/``floordiv`` unsigned where ``e``'s
        left side has no negative constant (its dims are loop counters, thread indices and
        slots, never negative), else corrected for the sign."""
        if isinstance(e, AffineDimExpr):
            return dims[e.position]
        if isinstance(e, AffineConstantExpr):
            return self.constant(e.value)
        assert isinstance(e, AffineBinaryOpExpr)
        lhs, rhs = self.expr(e.lhs, dims), self.expr(e.rhs, dims)
        kind = e.kind
        if kind is AffineBinaryOpKind.Add:
            return self.add(arith.AddiOp(lhs, rhs))
        if kind is AffineBinaryOpKind.Mul:
            return self.add(arith.MuliOp(lhs, rhs))
        unsigned = all(not (isinstance(x, AffineConstantExpr) and x.value < 0)
                       for x in e.lhs.dfs())
        if kind is AffineBinaryOpKind.Mod:
            if unsigned:
                return self.add(arith.RemUIOp(lhs, rhs))
            rem = self.add(arith.RemSIOp(lhs, rhs))
            return self.add(arith.RemSIOp(self.add(arith.AddiOp(rem, rhs)), rhs))
        if kind is AffineBinaryOpKind.FloorDiv:
            return self.add(arith.DivUIOp(lhs, rhs) if unsigned
                            else arith.FloorDivSIOp(lhs, rhs))
        return self.add(arith.CeilDivSIOp(lhs, rhs))


def substituted_indices(emit: IndexEmitter, load: loop.LoadOp, subst: dict[SSAValue, AffineExpr],
                 values: list[SSAValue]) -> list[SSAValue]:
    """The indices of ``load`` with each of its operands in ``subst`` replaced by that
    expression (over ``values``, to which the other operands are appended)."""
    merged = list(values)
    replace: list[AffineExpr] = []
    for value in load.indices:
        if value in subst:
            replace.append(subst[value])
            continue
        if value not in merged:
            merged.append(value)
        replace.append(AffineDimExpr(merged.index(value)))
    return [emit.expr(e.replace_dims_and_symbols(replace, []), merged)
            for e in load.map.data.results]


def rewrite(chunk: scf.ForOp, forall: tile.ForallOp, nest: list[loop.ForOp],
            ivs: dict[str, SSAValue], updates: list[Update],
            operands: dict[tuple[object, ...], Operand], extent: int,
            rewriter: PatternRewriter) -> None:
    """Replace ``chunk`` by the ``ldmatrix`` + ``m16n8k16`` loop of the module docstring
    (an ``a`` operand its own threads wrote: from their registers,
    :mod:`~llmopt.passes.tile._mma_forward`)."""
    rows, cols = nest[0].trip_count, nest[2].trip_count
    sources = {key: source for key, operand in operands.items()
               if (source := register_source(chunk, forall, operand, ivs, rows, extent))}
    old_nest = nest[0]
    old_nest.detach()
    kq = outer_chunk_loop(chunk, forall, extent // K_STEP, "kq", rewriter)
    fbody = forall.body.block
    terminator = fbody.last_op if isinstance(fbody.last_op, tile.YieldOp) else None
    emit = IndexEmitter(fbody, terminator)
    kk = chunk.body.block.args[0]
    # dims: 0 = kq, 1 = g, 2 = t (the lane is 4·g + t)
    d_kq, d_g, d_t = (AffineDimExpr(k) for k in range(3))
    base = [kq, ivs["g"], ivs["t"]]
    lane_row = (d_g % 2) * 4 + d_t  # l mod 8
    c = AffineConstantExpr
    frags: dict[tuple[tuple[object, ...], int], list[SSAValue]] = {}
    for key, operand in operands.items():
        load = operand.load
        if key in sources:
            registers = forward(sources[key], rewriter)
            half = load.buffer.type.element_type  # type: ignore[attr-defined]
            for i in range(rows):
                ops, frags[key, i] = register_fragments(registers, list(forall.ivs), kq, i,
                                                        half)
                for op in ops:
                    emit.op(op)
            continue
        if operand.role == "a":
            for i in range(rows):
                subst = {kk: d_kq * K_STEP + (d_g // 4) * 8, ivs["i"]: c(i),
                         ivs["g"]: lane_row, ivs["rh"]: d_g // 2 % 2}
                ld = mma.LdMatrixOp(load.buffer, substituted_indices(emit, load, subst, base), 4)
                emit.op(ld)
                for q, value in enumerate(ld.fragments):
                    value.name_hint = f"fa{i}_{q}"
                frags[key, i] = list(ld.fragments)
            continue
        column = d_kq * K_STEP + (d_g // 2 % 2) * 8
        trans = transposed(operand, kk, ivs)
        j = 0
        while j < cols:
            both = j + 1 < cols
            pair = c(j) + d_g // 4 if both else c(j)
            if trans:  # rows are k: lane l gives row 16·kq + 8·((l / 8) mod 2) + l mod 8
                subst = {kk: column + lane_row, ivs["t"]: c(0), ivs["rl"]: c(0),
                         ivs["j"]: pair}
            else:  # rows are n: lane l gives row n = l mod 8 at column 16·kq + 8·(…)
                subst = {kk: column, ivs["t"]: c(0), ivs["rl"]: lane_row, ivs["j"]: pair}
            ld = mma.LdMatrixOp(load.buffer, substituted_indices(emit, load, subst, base),
                                4 if both else 2, bool(trans))
            emit.op(ld)
            values = list(ld.fragments)
            for n in range(2 if both else 1):
                frags[key, j + n] = values[2 * n:2 * n + 2]
                for q, value in enumerate(frags[key, j + n]):
                    value.name_hint = f"fb{j + n}_{q}"
            j += 2 if both else 1
    thread = list(forall.ivs)
    n = len(thread)
    for update in updates:
        acc = update.store.buffer
        for i in range(rows):
            for jj in range(cols):
                spots = [AffineMap(n, 0, (*(AffineDimExpr(d) for d in range(n)), c(i), c(rh),
                                          c(jj), c(rl)))
                         for rh, rl in ((0, 0), (0, 1), (1, 0), (1, 1))]
                old = [emit.add(loop.LoadOp(acc, amap, thread)) for amap in spots]
                product = mma.SyncOp(frags[update.a, i], frags[update.b, jj], old)
                emit.op(product)
                for amap, value in zip(spots, product.results, strict=True):
                    emit.op(loop.StoreOp(value, acc, amap, thread))
    chunk.body.block.insert_op_before(old_nest, chunk.body.block.first_op)  # erased with it
    rewriter.erase(chunk, safe_erase=False)
    for source in sources.values():
        drop_shared(source, rewriter)
