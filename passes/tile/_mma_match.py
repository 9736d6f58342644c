"""What ``mma-fragments`` matches in a chunk loop: the updates ``acc += a · b`` of a
tensor-core-layout forall and the shared or register tiles their factors read (their role,
``a`` or ``b``, from how their indices use the chunk loop's and the layout's variables)."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import StringAttr, f32
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.ir.affine import AffineExpr, AffineMap

from llmopt.dialects import loop, mma, tile
from llmopt.dialects._syntax import constant_index
from llmopt.passes.tile._access import linear_form

K_STEP = 8
"""K elements one ``m16n8k8`` product consumes."""

__all__ = ["K_STEP", "ChunkLoop", "Form", "Operand", "Update", "chunk_updates", "coefficients",
           "factor_load", "index_form", "is_registers", "is_shared", "match_chunk_loop", "mma_nest",
           "operand_role"]


@dataclass
class Operand:
    """One distinct shared-tile load of the update body and the fragment it becomes."""

    load: loop.LoadOp
    role: str  # "a" (rows) or "b" (columns)
    hi: SSAValue | None = None
    lo: SSAValue | None = None

    def key(self) -> tuple[object, ...]:
        return (self.load.buffer, self.load.map.data, tuple(self.load.indices))


@dataclass(frozen=True)
class Update:
    """``acc[…] += a · b``: the accumulator's store and the two operands' keys."""

    store: loop.StoreOp
    a: tuple[object, ...]
    b: tuple[object, ...]


def is_shared(value: SSAValue) -> bool:
    owner = value.owner
    return isinstance(owner, tile.AllocOp) and owner.space.data == "shared"


def is_registers(value: SSAValue) -> bool:
    owner = value.owner
    return isinstance(owner, tile.AllocOp) and owner.space.data == "registers"


Form = tuple[dict[SSAValue, int], int]
"""An index as coefficients on values and a constant."""


def index_form(op: loop.LoadOp | loop.StoreOp, expr: AffineExpr) -> Form | None:
    """``expr``, one index of ``op``'s map, as a :data:`Form` over ``op``'s operands (an
    operand used by several dims summed); ``None`` when it is not linear."""
    form = linear_form(expr)
    if form is None:
        return None
    coefs: dict[SSAValue, int] = {}
    for d, c in form[0].items():
        coefs[op.indices[d]] = coefs.get(op.indices[d], 0) + c
    return {v: c for v, c in coefs.items() if c}, form[1]


def coefficients(load: loop.LoadOp, varying: set[SSAValue]
                 ) -> list[dict[SSAValue, int]] | None:
    """Per index of ``load``, its linear coefficients on the load's operands; an index
    that uses none of the ``varying`` values may be any expression (e.g. a slot ``k0 mod
    3``: ``{}``). ``None`` when an index is not linear in the ``varying`` values."""
    out: list[dict[SSAValue, int]] = []
    for expr in load.map.data.results:
        form = index_form(load, expr)
        if form is None:
            if any(load.indices[d] in varying for d in expr.used_dims()):
                return None
            out.append({})
            continue
        out.append(form[0])
    return out


def operand_role(load: loop.LoadOp, kk: SSAValue, ivs: dict[str, SSAValue]) -> str | None:
    """``"a"`` when ``load`` reads a row operand, ``"b"`` a column operand (see the module
    docstring), else ``None``."""
    if not is_shared(load.buffer):
        return None
    thread = set(ivs.values())
    coefs = coefficients(load, thread | {kk})
    if coefs is None:
        return None
    k_results = [c for c in coefs if kk in c]
    if len(k_results) != 1 or k_results[0].get(kk) != 1:
        return None
    if any(v in thread for v in k_results[0]):
        return None
    used = {v for c in coefs for v in c if v in thread}
    rows = {ivs[n] for n in ("wi", "g", "i", "rh")}
    cols = {ivs[n] for n in ("wj", "t", "j", "rl")}
    if used <= rows and all(c.get(ivs["rh"], 0) == 8 * c.get(ivs["g"], 0) for c in coefs):
        return "a"
    if used <= cols and all(c.get(ivs["t"], 0) == 2 * c.get(ivs["rl"], 0) for c in coefs):
        return "b"
    return None


def factor_load(value: SSAValue) -> tuple[loop.LoadOp, Attribute, list[Operation]] | None:
    """A factor of a product: an ``f32`` load, or the ``arith.extf`` of a ``bf16``/``f16``
    load; with the loaded type and the ops it takes. ``None`` for anything else."""
    owner = value.owner
    if isinstance(owner, loop.LoadOp) and value.type == f32:
        return owner, f32, [owner]
    if (isinstance(owner, arith.ExtFOp) and value.type == f32 and mma.is_half(owner.input.type)
            and isinstance(load := owner.input.owner, loop.LoadOp)):
        return load, owner.input.type, [owner, load]
    return None


def chunk_updates(body: Block, kk: SSAValue, ivs: dict[str, SSAValue],
                  acc_indices: list[SSAValue]
                  ) -> tuple[list[Update], dict[tuple[object, ...], Operand], Attribute] | None:
    """The updates of the innermost body and the type their factors are loaded as (all
    ``f32``, or all one 16-bit float), or ``None`` if it holds anything else."""
    operands: dict[tuple[object, ...], Operand] = {}
    updates: list[Update] = []
    seen: set[Operation] = set()
    loaded: set[Attribute] = set()
    for op in body.ops:
        if not isinstance(op, loop.StoreOp):
            continue
        if (not is_registers(op.buffer) or list(op.indices) != acc_indices
                or op.map.data != AffineMap.identity(len(acc_indices))):
            return None
        total = op.value.owner
        if not isinstance(total, arith.AddfOp) or op.value.type != f32:
            return None  # the tensor cores accumulate in f32
        old, prod = total.lhs.owner, total.rhs.owner
        if isinstance(old, arith.MulfOp):
            old, prod = prod, old
        if not (isinstance(old, loop.LoadOp) and old.buffer is op.buffer
                and list(old.indices) == acc_indices and old.map.data == op.map.data
                and isinstance(prod, arith.MulfOp)):
            return None
        keys: dict[str, tuple[object, ...]] = {}
        for factor in (prod.lhs, prod.rhs):
            found = factor_load(factor)
            if found is None:
                return None
            load, typ, ops = found
            loaded.add(typ)
            role = operand_role(load, kk, ivs)
            if role is None or role in keys:
                return None
            operand = Operand(load, role)
            operand = operands.setdefault(operand.key(), operand)
            if operand.role != role:
                return None
            keys[role] = operand.key()
            seen.update(ops)
        if len(keys) != 2:
            return None
        seen |= {op, total, old, prod}
        updates.append(Update(op, keys["a"], keys["b"]))
    if not updates or len(loaded) != 1 or any(op not in seen for op in body.ops):
        return None
    return updates, operands, loaded.pop()


def mma_nest(forall: tile.ForallOp) -> list[loop.ForOp] | None:
    """The forall's perfect ``i, rh, j, rl`` nest (extents ``I, 2, J, 2``), else ``None``."""
    body = [o for o in forall.body.block.ops if not isinstance(o, tile.YieldOp)]
    nest: list[loop.ForOp] = []
    while len(body) == 1 and isinstance(body[0], loop.ForOp) and len(nest) < 4:
        nest.append(body[0])
        body = list(body[0].body.block.ops)
    if len(nest) != 4 or len(forall.shape) != 4 or tuple(forall.shape[2:]) != (8, 4):
        return None
    if nest[1].trip_count != 2 or nest[3].trip_count != 2:
        return None
    return nest


@dataclass(frozen=True)
class ChunkLoop:
    """A chunk loop ``scf.for %kk = 0 to extent`` around a tensor-core-layout forall whose
    ``i, rh, j, rl`` nest holds nothing but updates: what ``mma-fragments`` and
    ``wgmma-fragments`` rewrite."""

    extent: int
    forall: tile.ForallOp
    nest: list[loop.ForOp]
    ivs: dict[str, SSAValue]  # wi, wj, g, t, i, rh, j, rl
    kk: SSAValue
    updates: list[Update]
    operands: dict[tuple[object, ...], Operand]
    loaded: Attribute  # the type the factors are loaded as


def match_chunk_loop(op: scf.ForOp) -> ChunkLoop | None:
    """``op`` as a :class:`ChunkLoop`: counted from 0 by 1 to a constant, its body index
    arithmetic feeding only the forall and the forall (``llmopt.layout = "mma"``) last;
    else ``None``."""
    if op.iter_args or constant_index(op.lb) != 0 or constant_index(op.step) != 1:
        return None
    extent = constant_index(op.ub)
    ops = list(op.body.block.ops)
    if extent is None or len(ops) < 2:
        return None
    forall = ops[-2]
    if not (isinstance(forall, tile.ForallOp) and forall.mapping.data == "block_threads"
            and forall.attributes.get("llmopt.layout") == StringAttr("mma")):
        return None
    pre = ops[:-2]
    if any(use.operation not in pre for p in pre for r in p.results for use in r.uses):
        return None  # the chunk's index arithmetic feeds something besides the loads
    nest = mma_nest(forall)
    if nest is None:
        return None
    names = ("wi", "wj", "g", "t", "i", "rh", "j", "rl")
    ivs = dict(zip(names, [*forall.ivs, *(f.body.block.args[0] for f in nest)], strict=True))
    kk = op.body.block.args[0]
    found = chunk_updates(nest[-1].body.block, kk, ivs, list(ivs.values()))
    if found is None:
        return None
    updates, operands, loaded = found
    return ChunkLoop(extent, forall, nest, ivs, kk, updates, operands, loaded)
