"""The C expression of each arithmetic, math and kernel op (used by ``kernel-to-cuda``).

Every function here is registered in :data:`HANDLERS` for the op types it lowers and builds,
through an :class:`~llmopt.lowering._cuda_expr.ExprBuilder`, the ``cuda`` expression of one
op from its operands' expressions. ``arith`` keeps MLIR's exact semantics in C: ``divsi`` /
``remsi`` are C's ``/`` and ``%``; ``floordivsi``/``ceildivsi`` are ``a / b`` corrected by
one where the remainder is non-zero and the signs differ (agree); unsigned ops go through
unsigned casts; ``cmpf`` keeps ordered/unordered semantics; ``maximumf``/``minimumf``
propagate NaN; ``i1`` is C's ``bool``. The ``math`` functions with a CUDA counterpart are a
table (:data:`~llmopt.lowering._cuda_names.MATH_FUNCTIONS`), not handlers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import Float32Type, Float64Type, IntegerType
from xdsl.ir import Attribute, Operation, SSAValue

from llmopt.dialects import cuda, kernel
from llmopt.lowering._cuda_types import I1, I32, INDEX, UI32, bit_width, scalar_type, unsigned_type
from llmopt.passes._rewrite import fail

if TYPE_CHECKING:
    from llmopt.lowering._cuda_expr import ExprBuilder

__all__ = ["HANDLERS", "Handler"]

_SIGNED_CMPI = {"eq": "==", "ne": "!=", "slt": "<", "sle": "<=", "sgt": ">", "sge": ">="}
_UNSIGNED_CMPI = {"ult": "<", "ule": "<=", "ugt": ">", "uge": ">="}
# cmpf predicate -> (negate, C operator): C's relational operators are ordered, != unordered.
_CMPF = {
    "oeq": (False, "=="), "ogt": (False, ">"), "oge": (False, ">="), "olt": (False, "<"),
    "ole": (False, "<="), "une": (False, "!="),
    "ugt": (True, "<="), "uge": (True, "<"), "ult": (True, ">="), "ule": (True, ">"),
}  # fmt: skip

Handler = Callable[["ExprBuilder", Operation], SSAValue]
"""Builds the expression of an op (its operands' expressions first); registered by op type."""
HANDLERS: dict[type[Operation], Handler] = {}


def _handles(*types: type[Operation]) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for t in types:
            HANDLERS[t] = fn
        return fn

    return register


def _binary_operands(e: ExprBuilder, op: Operation) -> tuple[SSAValue, SSAValue]:
    return e.expr(op.operands[0]), e.expr(op.operands[1])


_SIMPLE_BINARY: dict[type[Operation], str] = {
    arith.AddiOp: "+", arith.AddfOp: "+", arith.SubiOp: "-", arith.SubfOp: "-",
    arith.MuliOp: "*", arith.MulfOp: "*", arith.DivfOp: "/", arith.DivSIOp: "/",
    arith.RemSIOp: "%", arith.ShLIOp: "<<", arith.ShRSIOp: ">>",
}  # fmt: skip
_BOOL_BINARY: dict[type[Operation], str] = {
    arith.AddiOp: "!=", arith.SubiOp: "!=", arith.MuliOp: "&&", arith.AndIOp: "&&",
    arith.OrIOp: "||", arith.XOrIOp: "!=",
}  # fmt: skip


@_handles(*_SIMPLE_BINARY, arith.AndIOp, arith.OrIOp, arith.XOrIOp)
def _simple_binary(e: ExprBuilder, op: Operation) -> SSAValue:
    typ = op.results[0].type
    if cuda.is_bool(typ):
        if type(op) not in _BOOL_BINARY:
            raise fail(op, "unsupported on i1")
        return e.binary(_BOOL_BINARY[type(op)], *_binary_operands(e, op))
    operator = _SIMPLE_BINARY.get(type(op)) or {
        arith.AndIOp: "&", arith.OrIOp: "|", arith.XOrIOp: "^"}[type(op)]
    return e.binary(operator, *_binary_operands(e, op))


@_handles(arith.DivUIOp, arith.RemUIOp, arith.ShRUIOp)
def _unsigned_binary(e: ExprBuilder, op: Operation) -> SSAValue:
    typ = op.results[0].type
    operator = {arith.DivUIOp: "/", arith.RemUIOp: "%", arith.ShRUIOp: ">>"}[type(op)]
    if cuda.is_bool(typ):
        raise fail(op, "unsupported on i1")
    u = unsigned_type(typ)
    a, b = (e.expr_as(v, u) for v in op.operands)
    return e.cast(e.binary(operator, a, b), typ)


@_handles(arith.FloorDivSIOp, arith.CeilDivSIOp)
def _rounded_division(e: ExprBuilder, op: Operation) -> SSAValue:
    # floor: a / b - (a % b != 0 && (a ^ b) < 0); ceil: a / b + (a % b != 0 && (a ^ b) >= 0).
    typ = op.results[0].type
    a, b = op.operands
    floor = isinstance(op, arith.FloorDivSIOp)
    quotient = e.binary("/", e.expr(a), e.expr(b))
    inexact = e.binary("!=", e.binary("%", e.expr(a), e.expr(b)), e.integer(0, typ))
    signs = e.binary("<" if floor else ">=", e.binary("^", e.expr(a), e.expr(b)), e.integer(0, typ))
    fix = e.cast(e.binary("&&", inexact, signs), typ)
    return e.binary("-" if floor else "+", quotient, fix)


@_handles(arith.CeilDivUIOp)
def _ceil_division_unsigned(e: ExprBuilder, op: Operation) -> SSAValue:
    typ = op.results[0].type
    u = unsigned_type(typ)
    a, b = op.operands
    quotient = e.binary("/", e.expr_as(a, u), e.expr_as(b, u))
    rem = e.binary("%", e.expr_as(a, u), e.expr_as(b, u))
    fix = e.cast(e.binary("!=", rem, e.integer(0, u)), u)
    return e.cast(e.binary("+", quotient, fix), typ)


@_handles(arith.MaxSIOp, arith.MinSIOp, arith.MaxUIOp, arith.MinUIOp)
def _integer_min_max(e: ExprBuilder, op: Operation) -> SSAValue:
    typ = op.results[0].type
    if cuda.is_bool(typ):
        raise fail(op, "unsupported on i1")
    unsigned = isinstance(op, arith.MaxUIOp | arith.MinUIOp)
    if unsigned:
        via: Attribute = unsigned_type(typ) if bit_width(typ) >= 32 else UI32
    else:
        via = typ if bit_width(typ) >= 32 else I32
    callee = "max" if isinstance(op, arith.MaxSIOp | arith.MaxUIOp) else "min"
    args = []
    for v in op.operands:
        arg = e.expr(v)
        if unsigned and bit_width(typ) < 32:
            arg = e.cast(arg, unsigned_type(typ))
        args.append(e.cast(arg, via))
    return e.cast(e.call(callee, args, via), typ)


@_handles(arith.MaximumfOp, arith.MinimumfOp)
def _nan_propagating_min_max(e: ExprBuilder, op: Operation) -> SSAValue:
    # (a != a || b != b) ? a + b : fmaxf(a, b)  -- NaN if either is NaN.
    typ = op.results[0].type
    if not isinstance(typ, Float32Type | Float64Type):
        raise fail(op, f"unsupported on {typ}")
    a, b = op.operands
    single = isinstance(typ, Float32Type)
    callee = ("fmaxf" if single else "fmax") if isinstance(op, arith.MaximumfOp) else (
        "fminf" if single else "fmin")
    nan = e.binary("||", e.binary("!=", e.expr(a), e.expr(a)),
                   e.binary("!=", e.expr(b), e.expr(b)))
    return e.ternary(nan, e.binary("+", e.expr(a), e.expr(b)),
                     e.call(callee, [e.expr(a), e.expr(b)], typ))


@_handles(arith.CmpiOp)
def _cmpi(e: ExprBuilder, op: Operation) -> SSAValue:
    assert isinstance(op, arith.CmpiOp)
    predicate = arith.CMPI_COMPARISON_OPERATIONS[op.predicate.value.data]
    if predicate in _UNSIGNED_CMPI and not cuda.is_bool(op.lhs.type):
        u = unsigned_type(op.lhs.type)
        return e.binary(_UNSIGNED_CMPI[predicate], e.expr_as(op.lhs, u), e.expr_as(op.rhs, u))
    a, b = _binary_operands(e, op)
    if cuda.is_bool(op.lhs.type):
        # As i1, true is -1 when signed (below false) and 1 when unsigned (above it).
        if predicate[0] == "s":
            a, b, predicate = b, a, "u" + predicate[1:]
        return e.binary({**_SIGNED_CMPI, **_UNSIGNED_CMPI}.get(predicate)
                        or _SIGNED_CMPI["s" + predicate[1:]], a, b)
    return e.binary(_SIGNED_CMPI[predicate], a, b)


@_handles(arith.CmpfOp)
def _cmpf(e: ExprBuilder, op: Operation) -> SSAValue:
    assert isinstance(op, arith.CmpfOp)
    predicate = arith.CMPF_COMPARISON_OPERATIONS[op.predicate.value.data]
    if predicate in ("true", "false"):
        return e.boolean(predicate == "true")
    a, b = op.lhs, op.rhs
    if predicate in _CMPF:
        negate, operator = _CMPF[predicate]
        result = e.binary(operator, e.expr(a), e.expr(b))
        return e.unary("!", result) if negate else result
    if predicate in ("one", "ueq"):  # ordered and unequal: a < b || a > b
        result = e.binary("||", e.binary("<", e.expr(a), e.expr(b)),
                          e.binary(">", e.expr(a), e.expr(b)))
        return e.unary("!", result) if predicate == "ueq" else result
    if predicate == "ord":
        return e.binary("&&", e.binary("==", e.expr(a), e.expr(a)),
                        e.binary("==", e.expr(b), e.expr(b)))
    assert predicate == "uno"
    return e.binary("||", e.binary("!=", e.expr(a), e.expr(a)),
                    e.binary("!=", e.expr(b), e.expr(b)))


@_handles(arith.SelectOp)
def _select(e: ExprBuilder, op: Operation) -> SSAValue:
    cond, a, b = (e.expr(v) for v in op.operands)
    return e.ternary(cond, a, b)


@_handles(arith.NegfOp)
def _negf(e: ExprBuilder, op: Operation) -> SSAValue:
    return e.unary("-", e.expr(op.operands[0]))


@_handles(arith.ExtFOp, arith.TruncFOp, arith.FPToSIOp, arith.IndexCastOp)
def _plain_cast(e: ExprBuilder, op: Operation) -> SSAValue:
    typ = scalar_type(op.results[0].type, op)
    if cuda.is_bool(typ):
        return _truncate_to_bool(e, e.expr(op.operands[0]))
    return e.cast(e.expr(op.operands[0]), typ)


def _truncate_to_bool(e: ExprBuilder, value: SSAValue) -> SSAValue:
    """The low bit of an integer (``(x & 1) != 0``), as ``arith.trunci``/``index_cast``."""
    if cuda.is_bool(value.type):
        return value
    if cuda.is_float(value.type):
        return e.cast(value, I1)
    return e.binary("!=", e.binary("&", value, e.integer(1, value.type)), e.integer(0, value.type))


@_handles(arith.TruncIOp)
def _trunci(e: ExprBuilder, op: Operation) -> SSAValue:
    typ = scalar_type(op.results[0].type, op)
    value = e.expr(op.operands[0])
    return _truncate_to_bool(e, value) if cuda.is_bool(typ) else e.cast(value, typ)


@_handles(arith.ExtSIOp, arith.SIToFPOp)
def _sign_extend(e: ExprBuilder, op: Operation) -> SSAValue:
    typ = scalar_type(op.results[0].type, op)
    value = e.expr(op.operands[0])
    if cuda.is_bool(value.type):  # i1 true is -1 when signed
        return e.cast(e.unary("-", e.cast(value, I32)), typ)
    return e.cast(value, typ)


@_handles(arith.ExtUIOp, arith.UIToFPOp)
def _zero_extend(e: ExprBuilder, op: Operation) -> SSAValue:
    typ = scalar_type(op.results[0].type, op)
    value = e.expr(op.operands[0])
    if not cuda.is_bool(value.type):
        value = e.cast(value, unsigned_type(value.type))
    return e.cast(value, typ)


@_handles(arith.FPToUIOp)
def _fptoui(e: ExprBuilder, op: Operation) -> SSAValue:
    typ = scalar_type(op.results[0].type, op)
    if cuda.is_bool(typ):
        return e.cast(e.expr(op.operands[0]), I1)
    return e.cast(e.cast(e.expr(op.operands[0]), unsigned_type(typ)), typ)


@_handles(arith.BitcastOp)
def _bitcast(e: ExprBuilder, op: Operation) -> SSAValue:
    src, dst = op.operands[0].type, op.results[0].type
    value = e.expr(op.operands[0])
    if src == dst:
        return value
    intrinsic = {
        (Float32Type, IntegerType): "__float_as_int",
        (IntegerType, Float32Type): "__int_as_float",
        (Float64Type, IntegerType): "__double_as_longlong",
        (IntegerType, Float64Type): "__longlong_as_double",
    }.get((type(src), type(dst)))
    if intrinsic is None or bit_width(src) != bit_width(dst):
        raise fail(op, f"cannot bitcast {src} to {dst}")
    return e.call(intrinsic, [value], dst)


@_handles(math.AbsIOp, math.CtPopOp, math.CountLeadingZerosOp)
def _integer_math(e: ExprBuilder, op: Operation) -> SSAValue:
    typ = op.results[0].type
    wide = bit_width(typ) == 64
    if cuda.is_bool(typ):
        raise fail(op, "unsupported on i1")
    value = e.expr(op.operands[0])
    if isinstance(op, math.AbsIOp):
        via: Attribute = IntegerType(64) if wide else I32
        return e.cast(e.call("llabs" if wide else "abs", [e.cast(value, via)], via), typ)
    callee = {math.CtPopOp: "__popc", math.CountLeadingZerosOp: "__clz"}[type(op)]
    if wide:
        callee += "ll"
    unsigned = unsigned_type(typ) if wide else UI32
    count = e.call(callee, [e.cast(e.cast(value, unsigned_type(typ)), unsigned)], I32)
    if isinstance(op, math.CountLeadingZerosOp) and bit_width(typ) < 32:
        count = e.binary("-", count, e.integer(32 - bit_width(typ), I32))
    return e.cast(count, typ)


@_handles(kernel.ThreadIdOp, kernel.BlockIdOp, kernel.BlockDimOp, kernel.GridDimOp)
def _special_register(e: ExprBuilder, op: Operation) -> SSAValue:
    assert isinstance(op, kernel.ThreadIdOp | kernel.BlockIdOp | kernel.BlockDimOp
                      | kernel.GridDimOp)
    var = {kernel.ThreadIdOp: "threadIdx", kernel.BlockIdOp: "blockIdx",
           kernel.BlockDimOp: "blockDim", kernel.GridDimOp: "gridDim"}[type(op)]
    builtin = e.add(cuda.BuiltinOp(f"{var}.{op.dim.data}")).results[0]
    return e.cast(builtin, INDEX)


@_handles(kernel.LoadOp)
def _load(e: ExprBuilder, op: Operation) -> SSAValue:
    assert isinstance(op, kernel.LoadOp)
    return e.element(op.buffer, op.indices, op)


@_handles(kernel.ShuffleXorOp)
def _shuffle(e: ExprBuilder, op: Operation) -> SSAValue:
    assert isinstance(op, kernel.ShuffleXorOp)
    typ = op.result.type
    if not (cuda.is_float(typ) or cuda.is_integer(typ)) or bit_width(typ) < 32:
        raise fail(op, f"cannot shuffle {typ}")
    mask = e.integer(0xFFFFFFFF, UI32)
    value = e.expr(op.value)
    offset = e.integer(op.offset.value.data, I32)
    return e.call("__shfl_xor_sync", [mask, value, offset], typ)

