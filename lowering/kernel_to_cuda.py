"""``kernel-to-cuda``: Kernel IR (level 5) → CUDA IR (level 6).

Matches every ``kernel.func`` and replaces it with a ``cuda.kernel`` of the same symbol name:
an ``extern "C" __global__`` function whose text the ``cuda`` printer writes out verbatim. The
host ``func.func`` and its ``kernel.launch`` ops are left as they are (the executor reads
them); the module afterwards holds ``cuda.*`` kernels plus the host function.

What each construct becomes:

* parameters — buffers (``memref``) become pointers: ``const T* __restrict__`` when the kernel
  never stores to them, ``T* __restrict__`` otherwise (``__restrict__`` is dropped for buffers
  that some ``kernel.launch`` passes twice, or passes together with a view of the same
  allocation, when one of them is written); scalars stay scalars;
* ``index`` — ``long long``; with option ``index_bitwidth=32``, ``int`` in each kernel for
  which :mod:`~llmopt.lowering._index_range` proves, from the kernel's shape and the grids
  its launches give it, that every index, loop variable and buffer offset fits in 32 bits
  (a 64-bit division by a constant is a chain of wide multiplies, a 32-bit one three
  instructions). Not the default: on the H200 it made some register-tiled products faster
  and others slower (see the option's docstring);
* ``kernel.load``/``kernel.store`` — ``p[offset]``, the offset being the expression
  ``i * stride + j ...`` from the memref's static strides (row-major unless the layout says
  otherwise), constant indices folded into one constant;
* SSA values — a value used once, in its own block, by a pure computation is inlined into
  its user's expression; any other value (several uses, uses in nested blocks, loads that a
  write may separate from their use, warp shuffles) gets a ``const`` local at its definition.
  Constants are literals at every use;
* ``scf.for`` — a ``cuda.for``; each iter_arg a mutable local, assigned from ``scf.yield`` at
  the end of the body (through ``const`` temporaries where one assignment would clobber a
  value a later one reads), and read as the loop's result afterwards. An integer ``unroll``
  attribute on the ``scf.for`` becomes ``#pragma unroll n`` (``0``: ``#pragma unroll``);
* ``scf.if`` — a ``cuda.if``; results are mutable locals declared before it, assigned in both
  branches;
* ``kernel.shared`` → a ``__shared__`` array; ``kernel.local`` → a plain local array
  (registers once its indices are constants); both 16-byte aligned, so that the CUDA
  compiler may merge loads of four adjacent words into one 128-bit access;
* shared memory beyond 48 KiB: CUDA declares at most 48 KiB of ``__shared__`` arrays
  statically. When the ``kernel.shared`` buffers of a kernel total more (each rounded up to
  16 bytes; :func:`shared_layout`), all of them move into dynamic shared memory: the kernel
  declares ``extern __shared__ __align__(16) unsigned char smem[];`` and each buffer is a
  typed pointer into it at a 16-byte-aligned offset, in declaration order
  (``float* const stage = (float*)&smem[24576];``), indexed as before. The ``cuda.kernel``
  records the total (``dynamic_shared(n)``) and every ``kernel.launch`` of it gets
  ``smem`` ≥ n (the executor passes it to the launch, which opts in above 48 KiB). A kernel
  whose shared memory exceeds what a block may use on ``arch`` (227 KiB on sm_90) is an
  error naming the kernel and both byte counts, as is a launch whose ``smem`` and static
  shared memory together exceed it. At 48 KiB or less nothing changes;
  ``kernel.barrier`` → ``__syncthreads()``; ``kernel.shuffle_xor`` →
  ``__shfl_xor_sync(0xffffffffu, v, offset)``; thread/block ids and dims →
  ``(long long)threadIdx.x`` and friends;
* ``kernel.copy`` → ``((float4*)&dst[offset])[0] = ((const float4*)&src[offset])[0];``: one
  8- or 16-byte access on each side (``float2``/``float4`` for ``f32``, ``uint2``/``uint4``
  for other element types), a plain assignment for one 4-byte element;
* asynchronous copies, with the primitives of ``<cuda_pipeline_primitives.h>`` (included
  when used): ``kernel.async_copy`` → ``__pipeline_memcpy_async(&dst[offset],
  &src[offset], bytes)`` (``cp.async`` of 4, 8 or 16 bytes); ``kernel.async_commit`` →
  ``__pipeline_commit()``; ``kernel.async_wait n`` → ``__pipeline_wait_prior(n)``;
* ``arith`` — C operators with MLIR's exact semantics: ``divsi``/``remsi`` are C's ``/`` and
  ``%``; ``floordivsi``/``ceildivsi`` are ``a / b`` corrected by one where the remainder is
  non-zero and the signs differ (agree); unsigned ops go through unsigned casts; ``cmpf``
  keeps ordered/unordered semantics; ``maximumf``/``minimumf`` propagate NaN;
* ``mma.sync`` → four uninitialised ``float`` locals and one ``asm("mma.sync.aligned.m16n8k8
  .row.col.f32.tf32.tf32.f32 …")`` statement (``cuda.asm``; the TF32 operands passed as
  ``__float_as_uint`` bits); ``mma.to_tf32`` → ``asm("cvt.rna.tf32.f32 …")`` into an
  ``unsigned int`` and a ``const float`` of its bits;
* ``math`` — the CUDA math functions (``expf``, ``rsqrtf``, ``tanhf``, ``powf`` …, and the
  ``double`` versions for ``f64``).

Option: ``arch`` (default ``sm_90``), whose shared-memory limits apply.

Why: the ``cuda`` dialect is the C syntax tree, so every decision about the source text —
naming, which values are locals, how an index is computed, static or dynamic shared
memory — is made here, in IR that can be inspected and tested, and the printer only spells
it. The 48 KiB static limit is CUDA's, so Kernel IR does not know it: its shared buffers are
just buffers, and the choice is made where the declarations are written.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum, auto
from math import prod

from xdsl.context import Context
from xdsl.dialects import arith, math, scf
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    Signedness,
    StringAttr,
    SymbolRefAttr,
    i64,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.traits import MemoryEffectKind, get_effects
from xdsl.utils.exceptions import PassFailedException

from llmopt.dialects import cuda, kernel, mma
from llmopt.dialects._symbols import has_dynamic
from llmopt.lowering._index_range import fits_in_32_bits, launch_grids
from llmopt.lowering._symbolic_layout import length_parameters, symbolic_strides
from llmopt.lowering.tile_to_kernel import enclosing_func
from llmopt.passes._rewrite import KeepLocation, OpFailure, is_half, widen_half_arithmetic
from llmopt.passes.tile._schedule import knob
from llmopt.target import ARCH, DEFAULT_ARCH, STATIC_SMEM, for_arch

__all__ = ["KernelToCuda", "SharedLayout", "shared_layout"]

_I1 = IntegerType(1)
_I32 = IntegerType(32)
_UI8 = IntegerType(8, Signedness.UNSIGNED)
_UI32 = IntegerType(32, Signedness.UNSIGNED)
_F32 = Float32Type()
MMA_TF32 = ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};")
"""The PTX of ``mma.sync``: outputs ``d``, then ``a`` (bits), ``b`` (bits) and ``c``."""
_INDEX = IndexType()

SHARED_ALIGN = 16
"""Bytes every shared buffer is aligned to (and its size rounded up to)."""

# Views: values that alias their first operand (for the __restrict__ analysis).
_VIEW_OPS = frozenset({
    "memref.cast", "memref.collapse_shape", "memref.expand_shape", "memref.reshape",
    "memref.subview", "memref.reinterpret_cast", "memref.view",
})  # fmt: skip

# math op -> (float function, double function)
_MATH_FUNCTIONS: dict[type[Operation], tuple[str, str]] = {
    math.AbsFOp: ("fabsf", "fabs"), math.AcosOp: ("acosf", "acos"),
    math.AcoshOp: ("acoshf", "acosh"), math.AsinOp: ("asinf", "asin"),
    math.AsinhOp: ("asinhf", "asinh"), math.AtanOp: ("atanf", "atan"),
    math.AtanhOp: ("atanhf", "atanh"), math.Atan2Op: ("atan2f", "atan2"),
    math.CbrtOp: ("cbrtf", "cbrt"), math.CeilOp: ("ceilf", "ceil"),
    math.CopySignOp: ("copysignf", "copysign"), math.CosOp: ("cosf", "cos"),
    math.CoshOp: ("coshf", "cosh"), math.ErfOp: ("erff", "erf"),
    math.ExpOp: ("expf", "exp"), math.Exp2Op: ("exp2f", "exp2"),
    math.ExpM1Op: ("expm1f", "expm1"), math.FloorOp: ("floorf", "floor"),
    math.FmaOp: ("fmaf", "fma"), math.LogOp: ("logf", "log"),
    math.Log10Op: ("log10f", "log10"), math.Log1pOp: ("log1pf", "log1p"),
    math.Log2Op: ("log2f", "log2"), math.PowFOp: ("powf", "pow"),
    math.RoundOp: ("roundf", "round"), math.RoundEvenOp: ("rintf", "rint"),
    math.RsqrtOp: ("rsqrtf", "rsqrt"), math.SinOp: ("sinf", "sin"),
    math.SinhOp: ("sinhf", "sinh"), math.SqrtOp: ("sqrtf", "sqrt"),
    math.TanOp: ("tanf", "tan"), math.TanhOp: ("tanhf", "tanh"),
    math.TruncOp: ("truncf", "trunc"),
    arith.MaxnumfOp: ("fmaxf", "fmax"), arith.MinnumfOp: ("fminf", "fmin"),
}  # fmt: skip

# Names of functions the generated code may call: never used for variables.
_CALLED = frozenset(
    {name for pair in _MATH_FUNCTIONS.values() for name in pair}
    | {"max", "min", "abs", "llabs", "__popc", "__popcll", "__clz", "__clzll",
       "__shfl_xor_sync", "__syncthreads", "__int_as_float", "__float_as_int",
       "__longlong_as_double", "__double_as_longlong", "__float2half", "__float2bfloat16",
       "__half2float", "__bfloat162float", "__double2half", "__double2bfloat16",
       "__pipeline_memcpy_async", "__pipeline_commit", "__pipeline_wait_prior"}
)
# Built-in variables, and type names of the CUDA headers the generated code may include.
_RESERVED = cuda.KEYWORDS | _CALLED | {
    "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "main", "half", "half2",
    "nv_bfloat16", "nv_bfloat162",
}

_SIGNED_CMPI = {"eq": "==", "ne": "!=", "slt": "<", "sle": "<=", "sgt": ">", "sge": ">="}
_UNSIGNED_CMPI = {"ult": "<", "ule": "<=", "ugt": ">", "uge": ">="}
# cmpf predicate -> (negate, C operator): C's relational operators are ordered, != unordered.
_CMPF = {
    "oeq": (False, "=="), "ogt": (False, ">"), "oge": (False, ">="), "olt": (False, "<"),
    "ole": (False, "<="), "une": (False, "!="),
    "ugt": (True, "<="), "uge": (True, "<"), "ult": (True, ">="), "ule": (True, ">"),
}  # fmt: skip
_CMPF_TWICE = frozenset({"one", "ord", "ueq", "uno"})


def _fail(op: Operation, message: str) -> PassFailedException:
    """A diagnostic naming ``op`` and, when known, its source position."""
    return OpFailure(op, message)


def _scalar_type(t: Attribute, op: Operation) -> Attribute:
    """The ``cuda`` type of a Kernel-IR scalar type (the builtin type itself)."""
    if cuda.is_scalar(t):
        return t
    raise _fail(op, f"type {t} has no CUDA equivalent")


def _unsigned(t: Attribute) -> IntegerType:
    """The unsigned integer type of ``t``'s width (``index`` → ``ui64``)."""
    width = 64 if isinstance(t, IndexType) else t.width.data  # type: ignore[attr-defined]
    return IntegerType(width, Signedness.UNSIGNED)


def _width(t: Attribute) -> int:
    if isinstance(t, IndexType):
        return 64
    if isinstance(t, IntegerType):
        return t.width.data
    if isinstance(t, Float16Type | BFloat16Type):
        return 16
    if isinstance(t, Float32Type):
        return 32
    return 64


def _may_write(op: Operation) -> bool:
    """Whether ``op`` may write memory or synchronise (unknown effects count as writes)."""
    effects = get_effects(op)
    return effects is None or any(e.kind == MemoryEffectKind.WRITE for e in effects)


class _Kind(Enum):
    DEAD = auto()  # unused and effect-free: not emitted
    INLINE = auto()  # rebuilt as a subexpression of its single user
    LITERAL = auto()  # a constant: a literal at every use
    NAMED = auto()  # a C variable (parameter, const local, loop variable, mutable local)


class _Names:
    """Unique, readable C names for one kernel."""

    def __init__(self) -> None:
        self.used: set[str] = set()
        self.counters: dict[str, int] = {}

    def fresh(self, hint: str | None, default: str) -> str:
        """A new name from the SSA name hint, else ``default`` (``v`` becomes ``v0, v1 …``)."""
        base = _sanitize(hint) if hint else default
        numbered = not hint and default == "v"
        if not numbered and base not in self.used:
            self.used.add(base)
            return base
        n = self.counters.get(base, 0 if numbered else 1)
        while f"{base}{n}" in self.used:
            n += 1
        self.counters[base] = n + 1
        self.used.add(f"{base}{n}")
        return f"{base}{n}"


def _sanitize(hint: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", hint)
    if not name or name[0].isdigit() or name.startswith("_") or name in _RESERVED:
        name = "v_" + name.lstrip("_")
    return name


@dataclass
class _KernelEmitter:
    """Lowers one ``kernel.func`` to a ``cuda.kernel``."""

    func: kernel.FuncOp
    no_restrict: set[int]
    layout: SharedLayout | None = None
    names: _Names = field(default_factory=_Names)
    kind: dict[SSAValue, _Kind] = field(default_factory=dict)
    var: dict[SSAValue, str] = field(default_factory=dict)
    var_type: dict[SSAValue, Attribute] = field(default_factory=dict)
    mutable: set[str] = field(default_factory=set)
    block: Block = field(default_factory=Block)
    pool: str | None = None  # the extern __shared__ array, when shared memory is dynamic
    index: Attribute = _INDEX  # what ``index`` is computed in: itself (long long) or i32
    min_blocks: int = 0  # ``__launch_bounds__``' second number (0: none)
    length: int | None = None  # the length parameter's position (kernels with ? buffers)
    length_var: str | None = None  # the local holding the length, as ``index``

    # --- entry point ---------------------------------------------------------------------

    def run(self) -> cuda.KernelOp:
        """Build the ``cuda.kernel``."""
        func = self.func
        body = func.body.block
        if self.index != _INDEX:
            _retype_index(func, self.index)
        written = _written_buffers(func)
        params: list[cuda.Param] = []
        for k, arg in enumerate(body.args):
            name = self.names.fresh(arg.name_hint, f"arg{k}")
            if isinstance(arg.type, MemRefType):
                typ: Attribute = cuda.PtrType(_scalar_type(arg.type.element_type, func),
                                              constant=arg not in written)
                quals: tuple[str, ...] = () if k in self.no_restrict else ("__restrict__",)
            elif k == self.length:
                typ, quals = _I32, ()
            else:
                typ, quals = _scalar_type(arg.type, func), ()
            self._bind(arg, name, typ)
            params.append(cuda.Param(name, typ, quals))
        self._classify(body)
        self.block = Block()
        if self.length is not None:
            self._bind_length(body.args[self.length])
        dynamic = self.layout is not None and self.layout.dynamic
        if dynamic:
            self.pool = self.names.fresh(None, "smem")
            self._add(cuda.DeclOp(self.pool, _UI8, qualifiers=["extern", "__shared__"],
                                  extent=0, align=SHARED_ALIGN))
        self._emit_block(body, [])
        block = func.block_shape
        return cuda.KernelOp(func.sym_name.data, params, Region(self.block),
                             launch_bounds=block[0] * block[1] * block[2],
                             min_blocks=self.min_blocks or None,
                             dynamic_shared=self.layout.total if dynamic else None)

    def _bind_length(self, arg: BlockArgument) -> None:
        """The length parameter is an ``int``; the kernel computes with it as ``index``
        (``const long long seq_index = (long long)seq;``)."""
        param = self._add(cuda.VarOp(self.var[arg], _I32)).results[0]
        name = self.names.fresh(f"{self.var[arg]}_index", "length")
        self._add(cuda.DeclOp(name, _INDEX, self._cast(param, _INDEX), qualifiers=["const"]))
        self._bind(arg, name, _INDEX)
        self.length_var = name

    def _bind(self, value: SSAValue, name: str, typ: Attribute, mutable: bool = False) -> None:
        self.kind[value] = _Kind.NAMED
        self.var[value] = name
        self.var_type[value] = typ
        if mutable:
            self.mutable.add(name)

    # --- which values become variables ----------------------------------------------------

    def _classify(self, block: Block) -> None:
        loads: list[kernel.LoadOp] = []
        for op in block.ops:
            for region in op.regions:
                for nested in region.blocks:
                    self._classify(nested)
            if isinstance(op, kernel.LoadOp):
                loads.append(op)
                continue
            if len(op.results) != 1:
                continue
            value = op.results[0]
            if isinstance(op, arith.ConstantOp):
                self.kind[value] = _Kind.LITERAL
            elif isinstance(op, kernel.SharedOp | kernel.LocalOp | scf.ForOp | scf.IfOp):
                self.kind[value] = _Kind.NAMED  # bound to its variable when emitted
            elif isinstance(op, kernel.ShuffleXorOp | mma.ToTf32Op):
                # A warp-collective call stays where it is (never moved into a branch); an
                # inline-asm result is a variable the asm statement writes.
                self.kind[value] = _Kind.NAMED if value.uses else _Kind.DEAD
            else:
                self.kind[value] = self._inline_kind(value)
        # Loads last, latest first: whether a load may move to its use depends on the users.
        for load in reversed(loads):
            self.kind[load.result] = self._load_kind(load)

    def _inline_kind(self, value: SSAValue) -> _Kind:
        uses = list(value.uses)
        if not uses:
            return _Kind.DEAD
        if len(uses) > 1:
            return _Kind.NAMED
        use = uses[0]
        user = use.operation
        assert isinstance(value.owner, Operation)
        if user.parent is not value.owner.parent or self._needs_atom(user, use.index):
            return _Kind.NAMED
        return _Kind.INLINE

    def _load_kind(self, load: kernel.LoadOp) -> _Kind:
        kind = self._inline_kind(load.result)
        if kind is not _Kind.INLINE:
            return kind
        root = next(iter(load.result.uses)).operation
        while len(root.results) == 1 and self.kind.get(root.results[0]) is _Kind.INLINE:
            root = next(iter(root.results[0].uses)).operation
        if root.regions:
            return _Kind.NAMED
        op = load.next_op
        while op is not None and op is not root:
            if _may_write(op):
                return _Kind.NAMED
            op = op.next_op
        return _Kind.INLINE

    @staticmethod
    def _needs_atom(user: Operation, index: int) -> bool:
        """Whether ``user`` spells operand ``index`` more than once (or evaluates it on every
        iteration), so that the operand must be a variable or a literal."""
        if isinstance(user, arith.FloorDivSIOp | arith.CeilDivSIOp | arith.CeilDivUIOp
                      | arith.MaximumfOp | arith.MinimumfOp):
            return True
        if isinstance(user, arith.CmpfOp):
            return arith.CMPF_COMPARISON_OPERATIONS[user.predicate.value.data] in _CMPF_TWICE
        if isinstance(user, scf.ForOp):
            return index in (1, 2)  # upper bound and step
        return False

    # --- statements ------------------------------------------------------------------------

    def _add(self, op: Operation) -> Operation:
        self.block.add_op(op)
        return op

    def _emit_block(self, block: Block, targets: Sequence[str]) -> None:
        for op in block.ops:
            if isinstance(op, scf.YieldOp):
                self._emit_yield(op, targets)
            else:
                self._emit_op(op)

    def _emit_op(self, op: Operation) -> None:
        if isinstance(op, kernel.StoreOp):
            dst = self._element(op.buffer, op.indices, op)
            self._add(cuda.AssignOp(dst, self._expr(op.value)))
        elif isinstance(op, kernel.BarrierOp):
            call = self._add(cuda.CallOp("__syncthreads", [], cuda.VoidType()))
            self._add(cuda.ExprStmtOp(call.results[0]))
        elif isinstance(op, kernel.AsyncCopyOp):
            self._emit_async_copy(op)
        elif isinstance(op, kernel.CopyOp):
            self._emit_copy(op)
        elif isinstance(op, kernel.AsyncCommitOp):
            call = self._add(cuda.CallOp("__pipeline_commit", [], cuda.VoidType()))
            self._add(cuda.ExprStmtOp(call.results[0]))
        elif isinstance(op, kernel.AsyncWaitOp):
            pending = self._int(op.groups, _I32)
            call = self._add(cuda.CallOp("__pipeline_wait_prior", [pending], cuda.VoidType()))
            self._add(cuda.ExprStmtOp(call.results[0]))
        elif isinstance(op, kernel.ReturnOp):
            if op.parent is not self.func.body.block:
                raise _fail(op, "only the end of a kernel can return")
        elif isinstance(op, kernel.SharedOp | kernel.LocalOp):
            typ = op.result.type
            assert isinstance(typ, MemRefType)
            element = _scalar_type(typ.element_type, op)
            shared = isinstance(op, kernel.SharedOp)
            name = self.names.fresh(op.result.name_hint, "smem" if shared else "reg")
            self._bind(op.result, name, cuda.PtrType(element))
            if shared and self.pool is not None:
                self._emit_dynamic_shared(op, name, element)
                return
            self._add(cuda.DeclOp(name, element, qualifiers=["__shared__"] if shared else [],
                                  extent=max(1, prod(typ.get_shape())), align=SHARED_ALIGN))
        elif isinstance(op, scf.ForOp):
            self._emit_for(op)
        elif isinstance(op, scf.IfOp):
            self._emit_if(op)
        elif isinstance(op, mma.SyncOp):
            self._emit_mma(op)
        elif isinstance(op, mma.ToTf32Op):
            if self.kind.get(op.result) is _Kind.NAMED:
                self._emit_to_tf32(op)
        elif len(op.results) == 1 and not op.regions:
            value = op.results[0]
            if self.kind.get(value) is _Kind.NAMED:
                name = self.names.fresh(value.name_hint, self._default_name(op))
                typ = _scalar_type(value.type, op)
                init = self._lower(op)
                self._add(cuda.DeclOp(name, typ, init, qualifiers=["const"]))
                self._bind(value, name, typ)
            elif value not in self.kind:
                raise _fail(op, "unsupported in a kernel")
            else:
                self._check_supported(op)
        else:
            raise _fail(op, "unsupported in a kernel")

    def _emit_mma(self, op: mma.SyncOp) -> None:
        """``float d0, d1, d2, d3; asm("mma.sync.aligned.m16n8k8…" : "=f"(d0), … : "r"(…),
        …);``: the TF32 operands are passed as their bits (``__float_as_uint``)."""
        names = []
        for k, value in enumerate(op.results):
            name = self.names.fresh(value.name_hint, f"mma{k}")
            self._add(cuda.DeclOp(name, _F32))
            names.append(name)
        outs = [self._add(cuda.VarOp(name, _F32)).results[0] for name in names]
        ins = [self._call("__float_as_uint", [self._expr(v)], _UI32) for v in (*op.a, *op.b)]
        ins += [self._expr(v) for v in op.c]
        self._add(cuda.AsmOp(MMA_TF32, outs, ins, ["=f"] * 4 + ["r"] * 6 + ["f"] * 4))
        for value, name in zip(op.results, names, strict=True):
            self._bind(value, name, _F32)

    def _emit_to_tf32(self, op: mma.ToTf32Op) -> None:
        """``unsigned int b; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(b) : "f"(x));`` and
        ``const float h = __uint_as_float(b);``."""
        bits = self.names.fresh(None, "tf32_bits")
        self._add(cuda.DeclOp(bits, _UI32))
        out = self._add(cuda.VarOp(bits, _UI32)).results[0]
        self._add(cuda.AsmOp("cvt.rna.tf32.f32 %0, %1;", [out], [self._expr(op.value)],
                             ["=r", "f"]))
        name = self.names.fresh(op.result.name_hint, "tf32")
        word = self._add(cuda.VarOp(bits, _UI32)).results[0]
        self._add(cuda.DeclOp(name, _F32, self._call("__uint_as_float", [word], _F32),
                              qualifiers=["const"]))
        self._bind(op.result, name, _F32)

    def _emit_dynamic_shared(self, op: kernel.SharedOp, name: str, element: Attribute) -> None:
        """``T* const name = (T*)&smem[offset];``: a buffer in the dynamic shared memory."""
        assert self.pool is not None and self.layout is not None
        pool = self._add(cuda.VarOp(self.pool, cuda.PtrType(_UI8))).results[0]
        byte = self._add(cuda.IndexOp(pool, self._int(self.layout.offsets[op], _INDEX)))
        address = self._un("&", byte.results[0])
        pointer = self._add(cuda.CastOp(address, cuda.PtrType(element))).results[0]
        self._add(cuda.DeclOp(name, cuda.PtrType(element), pointer, qualifiers=["const"]))

    def _emit_async_copy(self, op: kernel.AsyncCopyOp) -> None:
        """``__pipeline_memcpy_async(&dst[offset], &src[offset], bytes);``."""
        typ = op.src.type
        assert isinstance(typ, MemRefType)
        nbytes = op.elements * _width(typ.element_type) // 8
        dst = self._un("&", self._element(op.dst, op.dst_indices, op))
        src = self._un("&", self._element(op.src, op.src_indices, op))
        size = self._int(nbytes, _I32)
        call = self._add(cuda.CallOp("__pipeline_memcpy_async", [dst, src, size],
                                     cuda.VoidType()))
        self._add(cuda.ExprStmtOp(call.results[0]))

    def _emit_copy(self, op: kernel.CopyOp) -> None:
        """``((float4*)&dst[offset])[0] = ((const float4*)&src[offset])[0];``: one access of
        the copy's size on each side (a plain element assignment for one 4-byte element)."""
        typ = op.src.type
        assert isinstance(typ, MemRefType)
        element = typ.element_type
        nbytes = op.elements * _width(element) // 8
        carrier: Attribute | None = None
        if op.elements > 1 or nbytes != 4:
            base = element if isinstance(element, Float32Type) else _UI32
            carrier = base if nbytes == 4 else cuda.VecType(base, nbytes // 4)

        def side(buffer: SSAValue, indices: Sequence[SSAValue]) -> SSAValue:
            value = self._element(buffer, indices, op)
            if carrier is None:
                return value
            address = self._un("&", value)
            assert isinstance(address.type, cuda.PtrType)
            pointer = self._cast(address, cuda.PtrType(carrier, address.type.is_const))
            return self._add(cuda.IndexOp(pointer, self._int(0, _INDEX))).results[0]

        dst = side(op.dst, op.dst_indices)
        src = side(op.src, op.src_indices)
        self._add(cuda.AssignOp(dst, src))

    @staticmethod
    def _default_name(op: Operation) -> str:
        if isinstance(op, kernel.ThreadIdOp | kernel.BlockIdOp | kernel.BlockDimOp
                      | kernel.GridDimOp):
            prefix = {kernel.ThreadIdOp: "tid", kernel.BlockIdOp: "bid",
                      kernel.BlockDimOp: "bdim", kernel.GridDimOp: "gdim"}[type(op)]
            return prefix if op.dim.data == "x" else f"{prefix}_{op.dim.data}"
        return "v"

    def _check_supported(self, op: Operation) -> None:
        if not (isinstance(op, arith.ConstantOp) or type(op) in _HANDLERS
                or type(op) in _MATH_FUNCTIONS):
            raise _fail(op, "unsupported in a kernel")

    def _emit_for(self, op: scf.ForOp) -> None:
        body = op.body.block
        targets: list[str] = []
        for init, arg, res in zip(op.iter_args, body.args[1:], op.results, strict=True):
            name = self.names.fresh(arg.name_hint or res.name_hint, "acc")
            typ = _scalar_type(arg.type, op)
            self._add(cuda.DeclOp(name, typ, self._expr(init)))
            self._bind(arg, name, typ, mutable=True)
            self._bind(res, name, typ, mutable=True)
            targets.append(name)
        iv = body.args[0]
        iv_name = self.names.fresh(iv.name_hint, "i")
        self._bind(iv, iv_name, _scalar_type(iv.type, op))
        lb, ub, step = self._expr(op.lb), self._expr(op.ub), self._expr(op.step)
        unroll = op.attributes.get("unroll")
        loop = cuda.ForOp(iv_name, lb, ub, step, unroll=unroll.value.data
                          if isinstance(unroll, IntegerAttr) else None)
        self._add(loop)
        self._nested(loop.body.block, body, targets)

    def _emit_if(self, op: scf.IfOp) -> None:
        targets: list[str] = []
        for res in op.results:
            name = self.names.fresh(res.name_hint, "r")
            typ = _scalar_type(res.type, op)
            self._add(cuda.DeclOp(name, typ))
            self._bind(res, name, typ, mutable=True)
            targets.append(name)
        cond = self._expr(op.cond)
        else_ops = list(op.false_region.block.ops) if op.false_region.blocks else []
        has_else = any(not isinstance(o, scf.YieldOp) or o.operands for o in else_ops)
        branch = cuda.IfOp(cond, Region(Block()), Region(Block()) if has_else else Region())
        self._add(branch)
        self._nested(branch.then_region.block, op.true_region.block, targets)
        if has_else:
            self._nested(branch.else_region.block, op.false_region.block, targets)

    def _nested(self, into: Block, source: Block, targets: Sequence[str]) -> None:
        outer, self.block = self.block, into
        try:
            self._emit_block(source, targets)
        finally:
            self.block = outer

    def _emit_yield(self, op: scf.YieldOp, targets: Sequence[str]) -> None:
        pairs = [(t, v) for t, v in zip(targets, op.operands, strict=True)
                 if self.var.get(v) != t]
        # A parallel assignment: a value that reads a variable assigned before it is saved
        # in a const temporary first.
        saved: dict[int, tuple[str, Attribute]] = {}
        for k, (target, value) in enumerate(pairs):
            if self._reads(value) & {t for t, _ in pairs[:k]}:
                name = self.names.fresh(f"{target}_next", "v")
                typ = _scalar_type(value.type, op)
                self._add(cuda.DeclOp(name, typ, self._expr(value), qualifiers=["const"]))
                saved[k] = (name, typ)
        for k, (target, value) in enumerate(pairs):
            dst = self._add(cuda.VarOp(target, _scalar_type(value.type, op))).results[0]
            if k in saved:
                src = self._add(cuda.VarOp(*saved[k])).results[0]
            else:
                src = self._expr(value)
            self._add(cuda.AssignOp(dst, src))

    def _reads(self, value: SSAValue) -> set[str]:
        """The mutable variables the expression of ``value`` reads."""
        kind = self.kind.get(value)
        if kind is _Kind.NAMED:
            name = self.var.get(value)
            return {name} if name in self.mutable else set()
        if kind is _Kind.INLINE:
            assert isinstance(value.owner, Operation)
            found: set[str] = set()
            for operand in value.owner.operands:
                found |= self._reads(operand)
            return found
        return set()

    # --- expressions -----------------------------------------------------------------------

    def _expr(self, value: SSAValue) -> SSAValue:
        """Append the expression tree of ``value``; return its root."""
        kind = self.kind.get(value)
        if kind is _Kind.NAMED and value in self.var:
            return self._add(cuda.VarOp(self.var[value], self.var_type[value])).results[0]
        if kind is _Kind.LITERAL:
            assert isinstance(value.owner, arith.ConstantOp)
            return self._literal_attr(value.owner)
        if kind is _Kind.INLINE:
            assert isinstance(value.owner, Operation)
            return self._lower(value.owner)
        owner = value.owner
        if isinstance(value, BlockArgument) or not isinstance(owner, Operation):
            raise PassFailedException("unbound block argument (a kernel-to-cuda bug)")
        raise _fail(owner, "value used before it is defined (a kernel-to-cuda bug)")

    def _literal_attr(self, op: arith.ConstantOp) -> SSAValue:
        attr = op.value
        if isinstance(attr, IntegerAttr):
            return self._int(attr.value.data, attr.type)
        if isinstance(attr, FloatAttr):
            return self._add(cuda.LiteralOp(attr)).results[0]
        raise _fail(op, f"only scalar constants are supported, got {attr}")

    def _int(self, value: int, typ: Attribute) -> SSAValue:
        typ = self.index if isinstance(typ, IndexType) else typ
        if cuda.is_bool(typ):
            value = int(value != 0)
        elif cuda.is_unsigned(typ):
            value &= (1 << _width(typ)) - 1
        else:
            bits = _width(typ)
            value = ((value + (1 << (bits - 1))) % (1 << bits)) - (1 << (bits - 1))
        return self._add(cuda.LiteralOp(IntegerAttr(value, typ))).results[0]

    def _bool(self, value: bool) -> SSAValue:
        return self._int(int(value), _I1)

    def _bin(self, operator: str, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
        return self._add(cuda.BinaryOp(operator, lhs, rhs)).results[0]

    def _un(self, operator: str, operand: SSAValue) -> SSAValue:
        return self._add(cuda.UnaryOp(operator, operand)).results[0]

    def _cast(self, value: SSAValue, typ: Attribute) -> SSAValue:
        typ = self.index if isinstance(typ, IndexType) else typ
        if value.type == typ:
            return value
        if is_half(value.type) or is_half(typ):
            return self._convert_half(value, typ)
        literal = value.owner
        if (isinstance(literal, cuda.LiteralOp) and isinstance(literal.value, IntegerAttr)
                and not value.uses and literal is self.block.last_op):
            # A cast of an integer literal is the literal of the converted value.
            number = literal.value.value.data
            if cuda.is_integer(typ) or cuda.is_bool(typ):
                literal.detach()
                literal.erase()
                return self._int(number, typ)
            if isinstance(typ, Float32Type | Float64Type) and abs(number) < (1 << 24):
                literal.detach()
                literal.erase()
                return self._add(cuda.LiteralOp(FloatAttr(float(number), typ))).results[0]
        return self._add(cuda.CastOp(value, typ)).results[0]

    def _convert_half(self, value: SSAValue, typ: Attribute) -> SSAValue:
        """A conversion from or to a 16-bit float by the intrinsics of ``cuda_bf16.h`` /
        ``cuda_fp16.h``: ``__bfloat162float``/``__half2float`` to ``float`` (then a C cast to
        ``typ``), ``__float2bfloat16``/``__float2half`` (round to nearest even) from
        ``float``, ``__double2bfloat16``/``__double2half`` from ``double``; anything else
        through ``float``."""
        src = value.type
        if is_half(src):
            widen = "__bfloat162float" if isinstance(src, BFloat16Type) else "__half2float"
            return self._cast(self._call(widen, [value], _F32), typ)
        bf16 = isinstance(typ, BFloat16Type)
        if isinstance(src, Float64Type):
            return self._call("__double2bfloat16" if bf16 else "__double2half", [value], typ)
        return self._call("__float2bfloat16" if bf16 else "__float2half",
                          [self._cast(value, _F32)], typ)

    def _expr_as(self, value: SSAValue, typ: Attribute) -> SSAValue:
        """The expression of ``value`` cast to ``typ``."""
        return self._cast(self._expr(value), typ)

    def _call(self, callee: str, args: Sequence[SSAValue], typ: Attribute) -> SSAValue:
        return self._add(cuda.CallOp(callee, args, typ)).results[0]

    def _tern(self, cond: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._add(cuda.TernaryOp(cond, a, b)).results[0]

    def _element(self, buffer: SSAValue, indices: Sequence[SSAValue], op: Operation
                 ) -> SSAValue:
        """``p[offset]`` for ``buffer[indices]`` (accessed by ``op``)."""
        typ = buffer.type
        assert isinstance(typ, MemRefType)
        owner = buffer.owner
        if has_dynamic(typ):
            return self._symbolic_element(buffer, typ, indices, op)
        strides, offset = typ.get_strides(), typ.get_offset()
        if strides is None or offset is None or None in strides:
            raise _fail(op, f"buffer of type {typ} has no static strides")
        if buffer not in self.var:
            what = owner.name if isinstance(owner, Operation) else "a block argument"
            raise _fail(op, f"buffer defined by {what} is not a kernel parameter or a "
                            "kernel.shared or kernel.local buffer")
        base = self._add(cuda.VarOp(self.var[buffer], self.var_type[buffer])).results[0]
        constant = int(offset)
        total: SSAValue | None = None
        for index, stride in zip(indices, strides, strict=True):
            assert stride is not None
            if stride == 0:
                continue
            if self.kind.get(index) is _Kind.LITERAL:
                assert isinstance(index.owner, arith.ConstantOp)
                value = index.owner.value
                assert isinstance(value, IntegerAttr)
                constant += value.value.data * stride
                continue
            term = self._cast(self._expr(index), _INDEX)
            if stride != 1:
                term = self._bin("*", term, self._int(stride, _INDEX))
            total = term if total is None else self._bin("+", total, term)
        if total is None:
            total = self._int(constant, _INDEX)
        elif constant:
            operator = "+" if constant > 0 else "-"
            total = self._bin(operator, total, self._int(abs(constant), _INDEX))
        return self._add(cuda.IndexOp(base, total)).results[0]

    def _symbolic_element(self, buffer: SSAValue, typ: MemRefType,
                          indices: Sequence[SSAValue], op: Operation) -> SSAValue:
        """``p[offset]`` for a buffer with ``?`` extents: row-major, each ``?`` the length
        (:mod:`~llmopt.lowering._symbolic_layout`)."""
        if self.length_var is None or buffer not in self.var:
            raise _fail(op, f"buffer of type {typ} has ? extents but the kernel has no "
                            "length parameter")
        base = self._add(cuda.VarOp(self.var[buffer], self.var_type[buffer])).results[0]
        total: SSAValue | None = None
        offset = 0
        for index, (constant, power) in zip(indices, symbolic_strides(typ), strict=True):
            if self.kind.get(index) is _Kind.LITERAL:
                assert isinstance(index.owner, arith.ConstantOp)
                value = index.owner.value
                assert isinstance(value, IntegerAttr)
                constant *= value.value.data
                if constant == 0 or power == 0:
                    offset += constant
                    continue
                term = self._int(constant, _INDEX)
            else:
                term = self._cast(self._expr(index), _INDEX)
                if constant != 1:
                    term = self._bin("*", term, self._int(constant, _INDEX))
            for _ in range(power):
                length = self._add(cuda.VarOp(self.length_var, _INDEX)).results[0]
                term = self._bin("*", term, length)
            total = term if total is None else self._bin("+", total, term)
        if total is None:
            total = self._int(offset, _INDEX)
        elif offset:
            total = self._bin("+", total, self._int(offset, _INDEX))
        return self._add(cuda.IndexOp(base, total)).results[0]

    def _lower(self, op: Operation) -> SSAValue:
        """Append the expression of a single-result op (its operands' trees first)."""
        if type(op) in _MATH_FUNCTIONS:
            typ = op.results[0].type
            if not isinstance(typ, Float32Type | Float64Type):
                raise _fail(op, f"no CUDA math function for {typ}")
            f32_name, f64_name = _MATH_FUNCTIONS[type(op)]
            args = [self._expr(v) for v in op.operands]
            return self._call(f32_name if isinstance(typ, Float32Type) else f64_name, args, typ)
        handler = _HANDLERS.get(type(op))
        if handler is None:
            if isinstance(op, arith.ConstantOp):
                return self._literal_attr(op)
            raise _fail(op, "unsupported in a kernel")
        return handler(self, op)


# --- per-op expression builders ---------------------------------------------------------------

_Handler = Callable[[_KernelEmitter, Operation], SSAValue]
_HANDLERS: dict[type[Operation], _Handler] = {}


def _handles(*types: type[Operation]) -> Callable[[_Handler], _Handler]:
    def register(fn: _Handler) -> _Handler:
        for t in types:
            _HANDLERS[t] = fn
        return fn

    return register


def _binary_operands(e: _KernelEmitter, op: Operation) -> tuple[SSAValue, SSAValue]:
    return e._expr(op.operands[0]), e._expr(op.operands[1])


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
def _simple_binary(e: _KernelEmitter, op: Operation) -> SSAValue:
    typ = op.results[0].type
    if cuda.is_bool(typ):
        if type(op) not in _BOOL_BINARY:
            raise _fail(op, "unsupported on i1")
        return e._bin(_BOOL_BINARY[type(op)], *_binary_operands(e, op))
    operator = _SIMPLE_BINARY.get(type(op)) or {
        arith.AndIOp: "&", arith.OrIOp: "|", arith.XOrIOp: "^"}[type(op)]
    return e._bin(operator, *_binary_operands(e, op))


@_handles(arith.DivUIOp, arith.RemUIOp, arith.ShRUIOp)
def _unsigned_binary(e: _KernelEmitter, op: Operation) -> SSAValue:
    typ = op.results[0].type
    operator = {arith.DivUIOp: "/", arith.RemUIOp: "%", arith.ShRUIOp: ">>"}[type(op)]
    if cuda.is_bool(typ):
        raise _fail(op, "unsupported on i1")
    u = _unsigned(typ)
    a, b = (e._expr_as(v, u) for v in op.operands)
    return e._cast(e._bin(operator, a, b), typ)


@_handles(arith.FloorDivSIOp, arith.CeilDivSIOp)
def _rounded_division(e: _KernelEmitter, op: Operation) -> SSAValue:
    # floor: a / b - (a % b != 0 && (a ^ b) < 0); ceil: a / b + (a % b != 0 && (a ^ b) >= 0).
    typ = op.results[0].type
    a, b = op.operands
    floor = isinstance(op, arith.FloorDivSIOp)
    quotient = e._bin("/", e._expr(a), e._expr(b))
    inexact = e._bin("!=", e._bin("%", e._expr(a), e._expr(b)), e._int(0, typ))
    signs = e._bin("<" if floor else ">=", e._bin("^", e._expr(a), e._expr(b)), e._int(0, typ))
    fix = e._cast(e._bin("&&", inexact, signs), typ)
    return e._bin("-" if floor else "+", quotient, fix)


@_handles(arith.CeilDivUIOp)
def _ceil_division_unsigned(e: _KernelEmitter, op: Operation) -> SSAValue:
    typ = op.results[0].type
    u = _unsigned(typ)
    a, b = op.operands
    quotient = e._bin("/", e._expr_as(a, u), e._expr_as(b, u))
    rem = e._bin("%", e._expr_as(a, u), e._expr_as(b, u))
    fix = e._cast(e._bin("!=", rem, e._int(0, u)), u)
    return e._cast(e._bin("+", quotient, fix), typ)


@_handles(arith.MaxSIOp, arith.MinSIOp, arith.MaxUIOp, arith.MinUIOp)
def _integer_min_max(e: _KernelEmitter, op: Operation) -> SSAValue:
    typ = op.results[0].type
    if cuda.is_bool(typ):
        raise _fail(op, "unsupported on i1")
    unsigned = isinstance(op, arith.MaxUIOp | arith.MinUIOp)
    if unsigned:
        via: Attribute = _unsigned(typ) if _width(typ) >= 32 else _UI32
    else:
        via = typ if _width(typ) >= 32 else _I32
    callee = "max" if isinstance(op, arith.MaxSIOp | arith.MaxUIOp) else "min"
    args = []
    for v in op.operands:
        arg = e._expr(v)
        if unsigned and _width(typ) < 32:
            arg = e._cast(arg, _unsigned(typ))
        args.append(e._cast(arg, via))
    return e._cast(e._call(callee, args, via), typ)


@_handles(arith.MaximumfOp, arith.MinimumfOp)
def _nan_propagating_min_max(e: _KernelEmitter, op: Operation) -> SSAValue:
    # (a != a || b != b) ? a + b : fmaxf(a, b)  -- NaN if either is NaN.
    typ = op.results[0].type
    if not isinstance(typ, Float32Type | Float64Type):
        raise _fail(op, f"unsupported on {typ}")
    a, b = op.operands
    single = isinstance(typ, Float32Type)
    callee = ("fmaxf" if single else "fmax") if isinstance(op, arith.MaximumfOp) else (
        "fminf" if single else "fmin")
    nan = e._bin("||", e._bin("!=", e._expr(a), e._expr(a)),
                 e._bin("!=", e._expr(b), e._expr(b)))
    return e._tern(nan, e._bin("+", e._expr(a), e._expr(b)),
                   e._call(callee, [e._expr(a), e._expr(b)], typ))


@_handles(arith.CmpiOp)
def _cmpi(e: _KernelEmitter, op: Operation) -> SSAValue:
    assert isinstance(op, arith.CmpiOp)
    predicate = arith.CMPI_COMPARISON_OPERATIONS[op.predicate.value.data]
    if predicate in _UNSIGNED_CMPI and not cuda.is_bool(op.lhs.type):
        u = _unsigned(op.lhs.type)
        return e._bin(_UNSIGNED_CMPI[predicate], e._expr_as(op.lhs, u), e._expr_as(op.rhs, u))
    a, b = _binary_operands(e, op)
    if cuda.is_bool(op.lhs.type):
        # As i1, true is -1 when signed (below false) and 1 when unsigned (above it).
        if predicate[0] == "s":
            a, b, predicate = b, a, "u" + predicate[1:]
        return e._bin({**_SIGNED_CMPI, **_UNSIGNED_CMPI}.get(predicate)
                      or _SIGNED_CMPI["s" + predicate[1:]], a, b)
    return e._bin(_SIGNED_CMPI[predicate], a, b)


@_handles(arith.CmpfOp)
def _cmpf(e: _KernelEmitter, op: Operation) -> SSAValue:
    assert isinstance(op, arith.CmpfOp)
    predicate = arith.CMPF_COMPARISON_OPERATIONS[op.predicate.value.data]
    if predicate in ("true", "false"):
        return e._bool(predicate == "true")
    a, b = op.lhs, op.rhs
    if predicate in _CMPF:
        negate, operator = _CMPF[predicate]
        result = e._bin(operator, e._expr(a), e._expr(b))
        return e._un("!", result) if negate else result
    if predicate in ("one", "ueq"):  # ordered and unequal: a < b || a > b
        result = e._bin("||", e._bin("<", e._expr(a), e._expr(b)),
                        e._bin(">", e._expr(a), e._expr(b)))
        return e._un("!", result) if predicate == "ueq" else result
    if predicate == "ord":
        return e._bin("&&", e._bin("==", e._expr(a), e._expr(a)),
                      e._bin("==", e._expr(b), e._expr(b)))
    assert predicate == "uno"
    return e._bin("||", e._bin("!=", e._expr(a), e._expr(a)),
                  e._bin("!=", e._expr(b), e._expr(b)))


@_handles(arith.SelectOp)
def _select(e: _KernelEmitter, op: Operation) -> SSAValue:
    cond, a, b = (e._expr(v) for v in op.operands)
    return e._tern(cond, a, b)


@_handles(arith.NegfOp)
def _negf(e: _KernelEmitter, op: Operation) -> SSAValue:
    return e._un("-", e._expr(op.operands[0]))


@_handles(arith.ExtFOp, arith.TruncFOp, arith.FPToSIOp, arith.IndexCastOp)
def _plain_cast(e: _KernelEmitter, op: Operation) -> SSAValue:
    typ = _scalar_type(op.results[0].type, op)
    if cuda.is_bool(typ):
        return _truncate_to_bool(e, e._expr(op.operands[0]))
    return e._cast(e._expr(op.operands[0]), typ)


def _truncate_to_bool(e: _KernelEmitter, value: SSAValue) -> SSAValue:
    """The low bit of an integer (``(x & 1) != 0``), as ``arith.trunci``/``index_cast``."""
    if cuda.is_bool(value.type):
        return value
    if cuda.is_float(value.type):
        return e._cast(value, _I1)
    return e._bin("!=", e._bin("&", value, e._int(1, value.type)), e._int(0, value.type))


@_handles(arith.TruncIOp)
def _trunci(e: _KernelEmitter, op: Operation) -> SSAValue:
    typ = _scalar_type(op.results[0].type, op)
    value = e._expr(op.operands[0])
    return _truncate_to_bool(e, value) if cuda.is_bool(typ) else e._cast(value, typ)


@_handles(arith.ExtSIOp, arith.SIToFPOp)
def _sign_extend(e: _KernelEmitter, op: Operation) -> SSAValue:
    typ = _scalar_type(op.results[0].type, op)
    value = e._expr(op.operands[0])
    if cuda.is_bool(value.type):  # i1 true is -1 when signed
        return e._cast(e._un("-", e._cast(value, _I32)), typ)
    return e._cast(value, typ)


@_handles(arith.ExtUIOp, arith.UIToFPOp)
def _zero_extend(e: _KernelEmitter, op: Operation) -> SSAValue:
    typ = _scalar_type(op.results[0].type, op)
    value = e._expr(op.operands[0])
    if not cuda.is_bool(value.type):
        value = e._cast(value, _unsigned(value.type))
    return e._cast(value, typ)


@_handles(arith.FPToUIOp)
def _fptoui(e: _KernelEmitter, op: Operation) -> SSAValue:
    typ = _scalar_type(op.results[0].type, op)
    if cuda.is_bool(typ):
        return e._cast(e._expr(op.operands[0]), _I1)
    return e._cast(e._cast(e._expr(op.operands[0]), _unsigned(typ)), typ)


@_handles(arith.BitcastOp)
def _bitcast(e: _KernelEmitter, op: Operation) -> SSAValue:
    src, dst = op.operands[0].type, op.results[0].type
    value = e._expr(op.operands[0])
    if src == dst:
        return value
    intrinsic = {
        (Float32Type, IntegerType): "__float_as_int",
        (IntegerType, Float32Type): "__int_as_float",
        (Float64Type, IntegerType): "__double_as_longlong",
        (IntegerType, Float64Type): "__longlong_as_double",
    }.get((type(src), type(dst)))
    if intrinsic is None or _width(src) != _width(dst):
        raise _fail(op, f"cannot bitcast {src} to {dst}")
    return e._call(intrinsic, [value], dst)


@_handles(math.AbsIOp, math.CtPopOp, math.CountLeadingZerosOp)
def _integer_math(e: _KernelEmitter, op: Operation) -> SSAValue:
    typ = op.results[0].type
    wide = _width(typ) == 64
    if cuda.is_bool(typ):
        raise _fail(op, "unsupported on i1")
    value = e._expr(op.operands[0])
    if isinstance(op, math.AbsIOp):
        via: Attribute = IntegerType(64) if wide else _I32
        return e._cast(e._call("llabs" if wide else "abs", [e._cast(value, via)], via), typ)
    callee = {math.CtPopOp: "__popc", math.CountLeadingZerosOp: "__clz"}[type(op)]
    if wide:
        callee += "ll"
    unsigned = _unsigned(typ) if wide else _UI32
    count = e._call(callee, [e._cast(e._cast(value, _unsigned(typ)), unsigned)], _I32)
    if isinstance(op, math.CountLeadingZerosOp) and _width(typ) < 32:
        count = e._bin("-", count, e._int(32 - _width(typ), _I32))
    return e._cast(count, typ)


@_handles(kernel.ThreadIdOp, kernel.BlockIdOp, kernel.BlockDimOp, kernel.GridDimOp)
def _special_register(e: _KernelEmitter, op: Operation) -> SSAValue:
    assert isinstance(op, kernel.ThreadIdOp | kernel.BlockIdOp | kernel.BlockDimOp
                      | kernel.GridDimOp)
    var = {kernel.ThreadIdOp: "threadIdx", kernel.BlockIdOp: "blockIdx",
           kernel.BlockDimOp: "blockDim", kernel.GridDimOp: "gridDim"}[type(op)]
    builtin = e._add(cuda.BuiltinOp(f"{var}.{op.dim.data}")).results[0]
    return e._cast(builtin, _INDEX)


@_handles(kernel.LoadOp)
def _load(e: _KernelEmitter, op: Operation) -> SSAValue:
    assert isinstance(op, kernel.LoadOp)
    return e._element(op.buffer, op.indices, op)


@_handles(kernel.ShuffleXorOp)
def _shuffle(e: _KernelEmitter, op: Operation) -> SSAValue:
    assert isinstance(op, kernel.ShuffleXorOp)
    typ = op.result.type
    if not (cuda.is_float(typ) or cuda.is_integer(typ)) or _width(typ) < 32:
        raise _fail(op, f"cannot shuffle {typ}")
    mask = e._int(0xFFFFFFFF, _UI32)
    value = e._expr(op.value)
    offset = e._int(op.offset.value.data, _I32)
    return e._call("__shfl_xor_sync", [mask, value, offset], typ)


# --- the pass ---------------------------------------------------------------------------------


def _root(value: SSAValue) -> SSAValue:
    """The allocation or argument a memref value views."""
    while isinstance(value.owner, Operation) and value.owner.name in _VIEW_OPS:
        value = value.owner.operands[0]
    return value


def _written_buffers(func: kernel.FuncOp) -> set[SSAValue]:
    """The buffers that ``func`` stores to or copies into."""
    written: set[SSAValue] = set()
    for op in func.walk():
        if isinstance(op, kernel.StoreOp):
            written.add(op.buffer)
        elif isinstance(op, kernel.CopyBase):
            written.add(op.dst)
    return written


def _unrestricted_params(module: ModuleOp) -> dict[str, set[int]]:
    """For each kernel name, the parameters that may alias a written parameter in a launch."""
    written: dict[str, set[int]] = {}
    for op in module.ops:
        if isinstance(op, kernel.FuncOp):
            stored = _written_buffers(op)
            written[op.sym_name.data] = {
                k for k, arg in enumerate(op.body.block.args) if arg in stored
            }
    result: dict[str, set[int]] = {}
    for launch in module.walk():
        if not isinstance(launch, kernel.LaunchOp):
            continue
        name = launch.kernel.root_reference.data
        writes = written.get(name, set())
        groups: dict[SSAValue, list[int]] = {}
        for k, arg in enumerate(launch.args):
            if isinstance(arg.type, MemRefType):
                groups.setdefault(_root(arg), []).append(k)
        for members in groups.values():
            if len(members) > 1 and writes.intersection(members):
                result.setdefault(name, set()).update(members)
    return result


@dataclass
class SharedLayout:
    """Where the ``kernel.shared`` buffers of one kernel live. ``total``: their bytes, each
    rounded up to :data:`SHARED_ALIGN`; ``offsets``: each buffer's byte offset when they are
    laid out one after another in declaration order; ``dynamic``: whether they go into the
    kernel's dynamic shared memory at those offsets (else each is a ``__shared__`` array)."""

    total: int
    offsets: dict[kernel.SharedOp, int]
    dynamic: bool


def _element_bytes(t: Attribute) -> int:
    return (_width(t) + 7) // 8


def shared_layout(func: kernel.FuncOp, static_limit: int = STATIC_SMEM) -> SharedLayout:
    """The layout of ``func``'s shared buffers: dynamic when they total more than
    ``static_limit`` bytes (CUDA's 48 KiB of static shared memory)."""
    offsets: dict[kernel.SharedOp, int] = {}
    total = 0
    for op in func.body.block.ops:  # kernel.shared sits at the top level of its kernel
        if isinstance(op, kernel.SharedOp):
            typ = op.result.type
            assert isinstance(typ, MemRefType)
            nbytes = max(1, prod(typ.get_shape())) * _element_bytes(typ.element_type)
            offsets[op] = total
            total += -(-nbytes // SHARED_ALIGN) * SHARED_ALIGN
    return SharedLayout(total, offsets, total > static_limit)


def _check_tensor_cores(module: ModuleOp, arch: str) -> None:
    """``mma`` ops need an arch with TF32 ``mma.sync`` (sm_80 or newer): an error naming the
    kernel otherwise (NVRTC's own would name a PTX line)."""
    if for_arch(arch).has_mma():
        return
    for op in module.walk():
        if isinstance(op, mma.SyncOp | mma.ToTf32Op):
            func = enclosing_func(op)
            name = func.sym_name.data if func is not None else "?"
            raise PassFailedException(f"kernel-to-cuda: kernel '{name}' uses {op.name}, which "
                                      f"needs sm_80 or newer; the target is {arch}")


@dataclass
class _LowerKernelFunc(RewritePattern):
    """``kernel.func`` → ``cuda.kernel`` (see the module docstring)."""

    unrestricted: dict[str, set[int]]
    layouts: dict[str, SharedLayout]
    grids: dict[str, tuple[int, ...]]
    index_bitwidth: int
    min_blocks: int = 0
    lengths: dict[str, int] = field(default_factory=dict)

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: kernel.FuncOp, rewriter: PatternRewriter) -> None:
        name = op.sym_name.data
        length = self.lengths.get(name)
        narrow = (self.index_bitwidth == 32 and length is None
                  and fits_in_32_bits(op, self.grids.get(name)))
        emitter = _KernelEmitter(op, self.unrestricted.get(name, set()), self.layouts.get(name),
                                 index=_I32 if narrow else _INDEX,
                                 min_blocks=knob(self.min_blocks, op, "min_blocks", 0),
                                 length=length)
        rewriter.replace(op, emitter.run())


def _retype_index(func: kernel.FuncOp, typ: Attribute) -> None:
    """Give every ``index`` value of ``func`` the type ``typ`` (in place: the function is
    replaced by its ``cuda.kernel`` right after), so that every expression built from them
    is computed in ``typ``."""
    for op in func.body.walk():
        for value in (*op.results, *(a for r in op.regions for b in r.blocks for a in b.args)):
            if isinstance(value.type, IndexType):
                value._type = typ  # pyright: ignore[reportPrivateUsage]


def _shared_layouts(module: ModuleOp, arch: str) -> dict[str, SharedLayout]:
    """Every kernel's shared-memory layout; raises when a kernel needs more shared memory
    than a block may use on ``arch``."""
    gpu = for_arch(arch)
    layouts: dict[str, SharedLayout] = {}
    for func in module.ops:
        if not isinstance(func, kernel.FuncOp):
            continue
        layout = shared_layout(func, gpu.static_smem)
        if layout.total > gpu.max_smem:
            raise _fail(func, f"kernel @{func.sym_name.data} needs {layout.total} bytes of "
                              f"shared memory ({len(layout.offsets)} kernel.shared buffers), "
                              f"more than the {gpu.max_smem} bytes a block may use on {arch}")
        layouts[func.sym_name.data] = layout
    return layouts


def _size_launches(module: ModuleOp, layouts: dict[str, SharedLayout], arch: str) -> None:
    """Give every launch of a kernel with dynamic shared memory at least the bytes its
    buffers take (``smem``), and check each launch's total against ``arch``'s limit."""
    limit = for_arch(arch).max_smem
    for launch in module.walk():
        if not isinstance(launch, kernel.LaunchOp):
            continue
        name = launch.kernel.root_reference.data
        layout = layouts.get(name)
        if layout is None:
            continue
        static = 0 if layout.dynamic else layout.total
        smem = max(launch.shared_bytes, layout.total) if layout.dynamic else launch.shared_bytes
        if static + smem > limit:
            what = (f"smem {smem}" if layout.dynamic
                    else f"{static} bytes of static shared memory and smem {smem}")
            raise _fail(launch, f"the launch of @{name} asks for {what}, more than the "
                                f"{limit} bytes a block may use on {arch}")
        if smem != launch.shared_bytes:
            launch.smem = IntegerAttr(smem, i64)


def _c_kernel_name(name: str) -> str:
    """``name`` made a C identifier that is neither a keyword nor a name the generated code or
    the CUDA headers use (``double`` → ``k_double``, ``my-kernel`` → ``my_kernel``)."""
    c_name = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not c_name or c_name[0].isdigit() or c_name.startswith("_") or c_name in _RESERVED:
        c_name = "k_" + c_name.lstrip("_")
    return c_name


def _rename_kernels(module: ModuleOp) -> None:
    """Give every ``kernel.func`` whose symbol is not a usable C name a C name (unique among
    the module's symbols), and point its ``kernel.launch`` ops at it."""
    taken = {sym.data for inner in module.walk()
             if isinstance(sym := inner.properties.get("sym_name"), StringAttr)}
    renamed: dict[str, str] = {}
    for func in module.ops:
        if not isinstance(func, kernel.FuncOp):
            continue
        name = func.sym_name.data
        c_name = _c_kernel_name(name)
        if c_name == name:
            continue
        base, k = c_name, 0
        while c_name in taken:
            k += 1
            c_name = f"{base}_{k}"
        taken.add(c_name)
        renamed[name] = c_name
        func.sym_name = StringAttr(c_name)
    if not renamed:
        return
    for launch in module.walk():
        if isinstance(launch, kernel.LaunchOp):
            new = renamed.get(launch.kernel.root_reference.data)
            if new is not None:
                launch.kernel = SymbolRefAttr(new)


def _uses_pipeline(module: ModuleOp) -> bool:
    """Whether a kernel calls the asynchronous-copy primitives of
    ``<cuda_pipeline_primitives.h>``."""
    return any(isinstance(op, cuda.CallOp) and op.callee.data.startswith("__pipeline_")
               for op in module.walk())


def _uses_half(module: ModuleOp) -> tuple[bool, bool]:
    half = bfloat = False
    for op in module.walk():
        if not isinstance(op, cuda.DeclOp | cuda.LiteralOp | cuda.CastOp | cuda.KernelOp
                          | cuda.CallOp):
            continue
        types = [op.var_type] if isinstance(op, cuda.DeclOp) else [
            r.type for r in op.results]
        if isinstance(op, cuda.KernelOp):
            types = list(op.param_types.data)
        types = [t.element if isinstance(t, cuda.PtrType) else t for t in types]
        half |= any(isinstance(t, Float16Type) for t in types)
        bfloat |= any(isinstance(t, BFloat16Type) for t in types)
    return half, bfloat


@dataclass(frozen=True)
class KernelToCuda(ModulePass):
    """Lower every ``kernel.func`` to a ``cuda.kernel`` (see the module docstring).

    Options: ``arch`` (the target GPU, ``sm_90``), whose shared-memory limits apply;
    ``index_bitwidth``: 64 (the default) computes indices in ``long long``; 32 in ``int``
    in every kernel for which :func:`~llmopt.lowering._index_range.fits_in_32_bits` proves
    them in range (the others stay 64-bit). Measured on the H200 (``llmopt run M --layers 1
    --seq 512 --profile 7``, each pipeline twice): 32 bits made TinyLlama's flash attention
    10% faster (0.083 → 0.075 ms) and its down projection 5% (0.315 → 0.298 ms), but
    Qwen2.5-7B's down projection 5% slower (1.656 → 1.742 ms) and its fused gate/up 3%
    (3.119 → 3.200 ms), so the default stays 64."""

    name = "kernel-to-cuda"

    arch: str = DEFAULT_ARCH
    index_bitwidth: int = 64
    min_blocks: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        """Rewrite ``op`` in place."""
        if not ARCH.fullmatch(self.arch):
            raise PassFailedException(f"kernel-to-cuda: arch must look like 'sm_90', got "
                                      f"'{self.arch}'")
        if self.index_bitwidth not in (32, 64):
            raise PassFailedException(f"kernel-to-cuda: index_bitwidth must be 32 (where "
                                      f"proven to fit) or 64, got {self.index_bitwidth}")
        _check_tensor_cores(op, self.arch)
        for func in op.ops:
            if isinstance(func, kernel.FuncOp):
                widen_half_arithmetic(func)
        _rename_kernels(op)
        layouts = _shared_layouts(op, self.arch)
        grids = launch_grids(op) if self.index_bitwidth == 32 else {}
        pattern = _LowerKernelFunc(_unrestricted_params(op), layouts, grids, self.index_bitwidth,
                                   self.min_blocks, length_parameters(op))
        PatternRewriteWalker(KeepLocation(pattern), apply_recursively=False).rewrite_module(op)
        _size_launches(op, layouts, self.arch)
        half, bfloat = _uses_half(op)
        headers = (["cuda_fp16.h"] if half else []) + (["cuda_bf16.h"] if bfloat else [])
        if _uses_pipeline(op):
            headers.append("cuda_pipeline_primitives.h")
        existing = {o.header.data for o in op.ops if isinstance(o, cuda.IncludeOp)}
        first = op.body.block.first_op
        for header in headers:
            if header not in existing:
                include = cuda.IncludeOp(header)
                if first is None:
                    op.body.block.add_op(include)
                else:
                    op.body.block.insert_op_before(include, first)
