"""Statements of one CUDA kernel: :class:`KernelEmitter` writes a ``kernel.func`` as a
``cuda.kernel`` (used by ``kernel-to-cuda``).

The parameters become pointers (``const`` where the kernel never writes the buffer,
``__restrict__`` unless the caller's aliasing analysis says otherwise) and scalars, the
length of a kernel with ``?`` buffers an ``int``; after them come the kernel's tensor maps
(:func:`~llmopt.dialects.tma.tensor_maps`), ``const __grid_constant__`` parameters the host
encodes at each launch. Each op becomes statements: stores and copies assignments,
``scf.for``/``scf.if`` ``cuda.for``/``cuda.if`` with their results as mutable locals,
``kernel.shared``/``kernel.local`` arrays (or pointers into the dynamic shared memory),
``mma``, ``wgmma``, ``mbarrier`` and ``tma`` ops inline PTX, and every value that is a
variable (:mod:`~llmopt.lowering._cuda_values`) a ``const`` local initialised by its
expression (:class:`~llmopt.lowering._cuda_expr.ExprBuilder`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from math import prod

from xdsl.dialects import arith, math, scf
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float32Type,
    IndexType,
    IntegerAttr,
    MemRefType,
    NoneAttr,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, Region, SSAValue

from llmopt.dialects import cuda, kernel, mbarrier, mma, tma, wgmma
from llmopt.dialects._syntax import constant_index
from llmopt.lowering._cuda_analysis import written_buffers
from llmopt.lowering._cuda_expr import ExprBuilder
from llmopt.lowering._cuda_names import Names
from llmopt.lowering._cuda_shared import SHARED_ALIGN, SWIZZLE_ALIGN, TMA_ALIGN, SharedLayout
from llmopt.lowering._cuda_types import (
    F32,
    I1,
    I32,
    INDEX,
    UI8,
    UI16,
    UI32,
    UI64,
    bit_width,
    scalar_type,
)
from llmopt.lowering._cuda_values import Kind, classify
from llmopt.passes._rewrite import fail

__all__ = ["MMA_TF32", "KernelEmitter", "ldmatrix_ptx", "mma_ptx"]

MMA_OPERANDS = "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
"""The operands of ``mma.sync``'s PTX: outputs ``d``, then ``a``, ``b`` (32-bit registers)
and ``c``."""

MMA_TF32 = f"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {MMA_OPERANDS}"
"""The PTX of a TF32 ``mma.sync`` (``a`` and ``b`` passed as their bits)."""


def mma_ptx(kind: str) -> str:
    """The PTX of an ``mma.sync`` multiplying ``kind`` (``tf32``, ``bf16`` or ``f16``)."""
    if kind == "tf32":
        return MMA_TF32
    return f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 {MMA_OPERANDS}"


def ldmatrix_ptx(count: int, trans: bool) -> str:
    """The PTX of an ``mma.ldmatrix`` of ``count`` matrices: its results, then the shared
    address."""
    outs = ", ".join(f"%{k}" for k in range(count))
    return (f"ldmatrix.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.shared.b16 "
            f"{{{outs}}}, [%{count}];")


def _nan_min_max(op: Operation) -> bool:
    """Whether ``op`` is an ``f32`` ``maximumf``/``minimumf``, which sm_80 and newer compute
    in one instruction (:meth:`KernelEmitter._emit_nan_min_max`)."""
    return (isinstance(op, arith.MaximumfOp | arith.MinimumfOp)
            and isinstance(op.results[0].type, Float32Type))


def _fast_exp2(op: Operation) -> bool:
    """Whether ``op`` is an ``f32`` ``math.exp2`` that may approximate (fastmath ``afn``),
    which :meth:`KernelEmitter._emit_fast_exp2` writes as one ``ex2.approx.ftz.f32``."""
    return (isinstance(op, math.Exp2Op) and isinstance(op.result.type, Float32Type)
            and arith.FastMathFlag.APPROX_FUNC in op.fastmath.data)


def _rounded_pair(op: mma.PackOp) -> tuple[SSAValue, SSAValue] | None:
    """The two ``f32`` values a pack's halves are rounded from, when each half is an
    ``arith.truncf`` of ``f32`` that only the pack reads; else ``None``."""
    found: list[SSAValue] = []
    for half in (op.low, op.high):
        rounding = half.owner
        if not (isinstance(rounding, arith.TruncFOp) and half.has_one_use()
                and isinstance(rounding.input.type, Float32Type)):
            return None
        found.append(rounding.input)
    return found[0], found[1]


def _in_place(value: SSAValue) -> bool:
    """Whether ``value`` is a warpgroup product's result that nothing else reads: the next
    ``asm`` may read and write it in the product's own local."""
    return isinstance(value.owner, wgmma.MmaOp) and value.has_one_use()


@dataclass
class KernelEmitter(ExprBuilder):
    """Lowers one ``kernel.func`` to a ``cuda.kernel``."""

    func: kernel.FuncOp
    no_restrict: set[int]
    layout: SharedLayout | None = None
    names: Names = field(default_factory=Names)
    kind: dict[SSAValue, Kind] = field(default_factory=dict)
    var: dict[SSAValue, str] = field(default_factory=dict)
    var_type: dict[SSAValue, Attribute] = field(default_factory=dict)
    mutable: set[str] = field(default_factory=set)
    block: Block = field(default_factory=Block)
    pool: str | None = None  # the extern __shared__ array, when shared memory is dynamic
    index: Attribute = INDEX  # what ``index`` is computed in: itself (long long) or i32
    min_blocks: int = 0  # ``__launch_bounds__``' second number (0: none)
    proxy_fence: bool = True  # wgmma.fence needs fence.proxy.async (_generic_operands)
    length: int | SSAValue | None = None  # kernels with ? buffers: the length parameter's
    # position, or the value the kernel loads from a lengths buffer
    length_var: str | None = None  # the local holding the length, as ``index``
    started: dict[tuple[Operation, int], str] = field(default_factory=dict)  # _start_…
    nan_min_max: bool = False  # f32 maximumf/minimumf as max.NaN/min.NaN (sm_80+)
    tensor_maps: dict[tma.TensorMap, tuple[str, cuda.TensorMapType]] = field(
        default_factory=dict)
    # the tensor-map parameters: name and type

    # --- entry point ---------------------------------------------------------------------

    def run(self) -> cuda.KernelOp:
        """Build the ``cuda.kernel``."""
        func = self.func
        body = func.body.block
        if self.index != INDEX:
            _retype_index(func, self.index)
        written = written_buffers(func)
        params: list[cuda.Param] = []
        for k, arg in enumerate(body.args):
            name = self.names.fresh(arg.name_hint, f"arg{k}")
            if isinstance(arg.type, MemRefType):
                typ: Attribute = cuda.PtrType(scalar_type(arg.type.element_type, func),
                                              constant=arg not in written)
                quals: tuple[str, ...] = () if k in self.no_restrict else ("__restrict__",)
            elif k == self.length:
                typ, quals = I32, ()
            else:
                typ, quals = scalar_type(arg.type, func), ()
            self._bind(arg, name, typ)
            params.append(cuda.Param(name, typ, quals))
        params += self._tensor_map_params()
        self.proxy_fence = _generic_operands(func)
        classify(body, self.kind, self._is_asm)
        self.block = Block()
        if isinstance(self.length, int):
            self._bind_length(body.args[self.length])
        elif self.length is not None:
            self.kind[self.length] = Kind.NAMED  # a const local, named when it is loaded
        dynamic = self.layout is not None and self.layout.dynamic
        if dynamic:
            self.pool = self.names.fresh(None, "smem")
            assert self.layout is not None
            self.add(cuda.DeclOp(self.pool, UI8, qualifiers=["extern", "__shared__"],
                                 extent=0, align=self.layout.align))
        self._emit_block(body, [])
        block = func.block_shape
        return cuda.KernelOp(func.sym_name.data, params, Region(self.block),
                             launch_bounds=block[0] * block[1] * block[2],
                             min_blocks=self.min_blocks or None,
                             cluster=None if func.cluster is None else func.cluster_size,
                             dynamic_shared=self.layout.total if dynamic else None)

    def _tensor_map_params(self) -> list[cuda.Param]:
        """``const __grid_constant__ llmopt_tensor_map tmapK`` for each of the kernel's
        tensor maps: the argument's memref type, the box and the swizzle, for the host to
        encode. The argument is row-major (its ``?`` extents, if any, are the launch's) or
        has static strides from its first element."""
        params = []
        for k, found in enumerate(tma.tensor_maps(self.func)):
            arg = self.func.body.block.args[found.arg]
            typ = arg.type
            assert isinstance(typ, MemRefType)
            strides = typ.get_strides()
            if not isinstance(typ.layout, NoneAttr) and (
                    typ.get_offset() != 0 or strides is None or None in strides):
                raise fail(self.func, f"tma.load from argument {found.arg} of type {typ}, "
                                      "which is neither row-major nor has static strides "
                                      "from its first element")
            name = self.names.fresh(f"tmap{k}", "tmap")
            map_type = cuda.TensorMapType(found.arg, typ, found.box, found.swizzle)
            self.tensor_maps[found] = (name, map_type)
            params.append(cuda.Param(name, map_type, cuda.GRID_CONSTANT))
        return params

    def _bind_length(self, arg: BlockArgument) -> None:
        """The length parameter is an ``int``; the kernel computes with it as ``index``
        (``const long long seq_index = (long long)seq;``), or as itself where indices are
        32-bit."""
        if self.index == I32:  # the parameter itself, bound as an int in run()
            self.length_var = self.var[arg]
            return
        param = self.add(cuda.VarOp(self.var[arg], I32)).results[0]
        name = self.names.fresh(f"{self.var[arg]}_index", "length")
        self.add(cuda.DeclOp(name, INDEX, self.cast(param, INDEX), qualifiers=["const"]))
        self._bind(arg, name, INDEX)
        self.length_var = name

    def _bind(self, value: SSAValue, name: str, typ: Attribute, mutable: bool = False) -> None:
        self.kind[value] = Kind.NAMED
        self.var[value] = name
        self.var_type[value] = typ
        if mutable:
            self.mutable.add(name)

    # --- statements ------------------------------------------------------------------------

    def _emit_block(self, block: Block, targets: Sequence[str]) -> None:
        for op in block.ops:
            if isinstance(op, scf.YieldOp):
                self._emit_yield(op, targets)
            else:
                self._emit_op(op)

    def _emit_op(self, op: Operation) -> None:
        if isinstance(op, kernel.StoreOp):
            dst = self.element(op.buffer, op.indices, op)
            self.add(cuda.AssignOp(dst, self.expr(op.value)))
        elif isinstance(op, kernel.BarrierOp):
            self._call_statement("__syncthreads", [])
        elif isinstance(op, kernel.ClusterBarrierOp):
            for step in ("barrier.cluster.arrive.release;", "barrier.cluster.wait.acquire;"):
                self.add(cuda.AsmOp(step, [], [], [], volatile=True, memory=True))
        elif isinstance(op, kernel.AsyncCopyOp):
            self._emit_async_copy(op)
        elif isinstance(op, kernel.CopyOp):
            self._emit_copy(op)
        elif isinstance(op, kernel.PrefetchOp):
            self._emit_prefetch(op)
        elif isinstance(op, kernel.LastBlockOp):
            self._emit_last_block(op)
        elif isinstance(op, kernel.AsyncCommitOp):
            self._call_statement("__pipeline_commit", [])
        elif isinstance(op, kernel.WaitPriorGridsOp):
            self.add(cuda.AsmOp("griddepcontrol.wait;", [], [], [], volatile=True,
                                memory=True))
        elif isinstance(op, kernel.LaunchDependentsOp):
            self.add(cuda.AsmOp("griddepcontrol.launch_dependents;", [], [], [],
                                volatile=True))
        elif isinstance(op, kernel.SetMaxRegistersOp):
            self.add(cuda.AsmOp(f"setmaxnreg.{op.action.data}.sync.aligned.u32 {op.registers};",
                                [], [], [], volatile=True, memory=True))
        elif isinstance(op, kernel.AsyncWaitOp):
            self._call_statement("__pipeline_wait_prior", [self.integer(op.groups, I32)])
        elif isinstance(op, kernel.ReturnOp):
            if op.parent is not self.func.body.block:
                raise fail(op, "only the end of a kernel can return")
        elif isinstance(op, kernel.SharedOp | kernel.LocalOp):
            typ = op.result.type
            assert isinstance(typ, MemRefType)
            element = scalar_type(typ.element_type, op)
            shared = isinstance(op, kernel.SharedOp)
            name = self.names.fresh(op.result.name_hint, "smem" if shared else "reg")
            self._bind(op.result, name, cuda.PtrType(element))
            if shared and self.pool is not None:
                self._emit_dynamic_shared(op, name, element)
                return
            self.add(cuda.DeclOp(name, element, qualifiers=["__shared__"] if shared else [],
                                 extent=max(1, prod(typ.get_shape())), align=SHARED_ALIGN))
        elif isinstance(op, scf.ForOp):
            self._emit_for(op)
        elif isinstance(op, scf.IfOp):
            self._emit_if(op)
        elif isinstance(op, mma.SyncOp):
            self._emit_mma(op)
        elif isinstance(op, mma.LdMatrixOp):
            self._emit_ldmatrix(op)
        elif isinstance(op, mma.ToTf32Op):
            if self.kind.get(op.result) is Kind.NAMED:
                self._emit_to_tf32(op)
        elif isinstance(op, mma.PackOp):
            if self.kind.get(op.result) is Kind.NAMED:
                self._emit_pack(op)
        elif isinstance(op, wgmma.FenceOp):
            names = self._start_accumulators(op)
            if self.proxy_fence:
                self.add(cuda.AsmOp("fence.proxy.async.shared::cta;", [], [], [],
                                    volatile=True, memory=True))
            started = [self.add(cuda.VarOp(name, F32)).results[0] for name in names]
            self.add(cuda.AsmOp("wgmma.fence.sync.aligned;", started, [],
                                ["+f"] * len(started), volatile=True, memory=True))
        elif isinstance(op, wgmma.CommitOp):
            self.add(cuda.AsmOp("wgmma.commit_group.sync.aligned;", [], [], [],
                                volatile=True, memory=True))
        elif isinstance(op, wgmma.MmaOp):
            self._emit_wgmma(op)
        elif isinstance(op, wgmma.WaitOp):
            self._emit_wgmma_wait(op)
        elif isinstance(op, mbarrier.BarrierAccess):
            self._emit_mbarrier(op)
        elif isinstance(op, tma.LoadOp):
            self._emit_tma_load(op)
        elif isinstance(op, kernel.OpaqueOp):
            if self.kind.get(op.result) is Kind.NAMED:
                self._emit_opaque(op)
        elif self.nan_min_max and _nan_min_max(op):
            if self.kind.get(op.results[0]) is Kind.NAMED:
                self._emit_nan_min_max(op)
        elif _fast_exp2(op):
            if self.kind.get(op.results[0]) is Kind.NAMED:
                self._emit_fast_exp2(op)
        elif len(op.results) == 1 and not op.regions:
            value = op.results[0]
            if self.kind.get(value) is Kind.NAMED:
                name = self.names.fresh(value.name_hint, self._default_name(op))
                typ = scalar_type(value.type, op)
                init = self.lower(op)
                self.add(cuda.DeclOp(name, typ, init, qualifiers=["const"]))
                self._bind(value, name, typ)
                if value is self.length:
                    self.length_var = name
            elif value not in self.kind:
                raise fail(op, "unsupported in a kernel")
            else:
                self._check_supported(op)
        else:
            raise fail(op, "unsupported in a kernel")

    def _emit_mma(self, op: mma.SyncOp) -> None:
        """``float d0, d1, d2, d3; asm("mma.sync.aligned.m16n8k8…" : "=f"(d0), … : "r"(…),
        …);``: TF32 operands are passed as their bits (``__float_as_uint``), ``bf16``/``f16``
        pairs (``unsigned`` locals, see :meth:`_emit_ldmatrix`) as they are, to
        ``m16n8k16``."""
        names, outs = self._asm_outputs(op.results, "mma", F32)
        kind = op.kind
        if kind == "tf32":
            ins = [self.call("__float_as_uint", [self.expr(v)], UI32) for v in (*op.a, *op.b)]
        else:
            ins = [self.expr(v) for v in (*op.a, *op.b)]
        ins += [self.expr(v) for v in op.c]
        self.add(cuda.AsmOp(mma_ptx(kind), outs, ins, ["=f"] * 4 + ["r"] * 6 + ["f"] * 4))
        for value, name in zip(op.results, names, strict=True):
            self._bind(value, name, F32)

    def _asm_outputs(self, values: Sequence[SSAValue], prefix: str, typ: Attribute
                     ) -> tuple[list[str], list[SSAValue]]:
        """One declared local per result of an inline ``asm`` (named after the value, else
        ``<prefix><k>``) and the ``cuda.var`` operands the ``asm`` writes them through."""
        names = [self.names.fresh(value.name_hint, f"{prefix}{k}")
                 for k, value in enumerate(values)]
        for name in names:
            self.add(cuda.DeclOp(name, typ))
        return names, [self.add(cuda.VarOp(name, typ)).results[0] for name in names]

    def _emit_ldmatrix(self, op: mma.LdMatrixOp) -> None:
        """``unsigned r0, r1; asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,
        %1}, [%2];" : "=r"(r0), "=r"(r1) : "r"((unsigned)__cvta_generic_to_shared(&t[…])));``:
        each result, a pair of 16-bit values, is an ``unsigned`` local. ``volatile``: the
        instruction reads shared memory, so it must not be merged with another one reading
        the same address (the tile may have been refilled in between)."""
        names, outs = self._asm_outputs(op.fragments, "frag", UI32)
        address = self.unary("&", self.element(op.buffer, op.indices, op))
        shared = self.call("__cvta_generic_to_shared", [address], UI64)
        self.add(cuda.AsmOp(ldmatrix_ptx(op.count, op.trans is not None), outs,
                            [self.cast(shared, UI32)], ["=r"] * op.count + ["r"],
                            volatile=True))
        for value, name in zip(op.fragments, names, strict=True):
            self._bind(value, name, UI32)

    def _start_accumulators(self, fence: wgmma.FenceOp) -> list[str]:
        """Before a fence, ``float r = <value>;`` for each accumulator value a product up to
        the next commit starts from (one not made by a product), returned so that the fence
        names them as operands it reads and writes (``"+f"``): copied after the fence, they
        would be registers moved while the products run, and ptxas would add waits. Without
        the operands the compiler may still sink a copy of a constant (a score tile's zeros)
        below the fence."""
        names = []
        op = fence.next_op
        while op is not None and not isinstance(op, wgmma.CommitOp):
            if isinstance(op, wgmma.MmaOp) and op.from_zero:
                for k in range(len(op.d)):  # uninitialised: the product ignores them
                    name = self.names.fresh(None, f"wg{k}")
                    self.add(cuda.DeclOp(name, F32))
                    self.started[op, k] = name
                    names.append(name)
            elif isinstance(op, wgmma.MmaOp):
                for k, value in enumerate(op.c):
                    if not _in_place(value):
                        name = self.names.fresh(None, f"wg{k}")
                        self.add(cuda.DeclOp(name, F32, self.expr_as(value, F32)))
                        self.started[op, k] = name
                        names.append(name)
            op = op.next_op
        return names

    def _accumulators(self, op: Operation, values: Sequence[SSAValue],
                      results: Sequence[SSAValue], prefix: str) -> list[str]:
        """The locals an ``asm`` reads and writes the accumulators in, the results bound to
        them: a product's own local for a value only that product's result feeds (in place:
        a copy of a register a product still writes would make ptxas wait for it), the
        local :meth:`_start_accumulators` made before the fence, else ``float r =
        <value>;``."""
        names = []
        starts: Sequence[SSAValue | None] = values or [None] * len(results)
        for k, (value, result) in enumerate(zip(starts, results, strict=True)):
            if value is not None and _in_place(value):
                name = self.var[value]
            elif (op, k) in self.started:
                name = self.started.pop((op, k))
            else:
                name = self.names.fresh(result.name_hint, f"{prefix}{k}")
                init = None if value is None else self.expr_as(value, F32)
                self.add(cuda.DeclOp(name, F32, init))
            self._bind(result, name, F32, mutable=True)
            names.append(name)
        return names

    def _descriptor(self, buffer: SSAValue, indices: Sequence[SSAValue],
                    op: Operation, n_major: bool = False) -> str:
        """A local holding the 64-bit shared-memory descriptor of the swizzled tile from
        ``buffer[indices]``: its address over 16 in bits 0-13, the distance between groups
        of 8 rows (1024 bytes) over 16 in bits 32-45, 128-byte swizzle (1) in bits 62-63.
        Read N-major (``n_major``: rows of ``k``), bits 16-29 hold the distance from one
        atom of 64 columns to the next, ``R·128`` bytes for a tile of ``R`` rows, over 16."""
        address = self.unary("&", self.element(buffer, indices, op))
        shared = self.call("__cvta_generic_to_shared", [address], UI64)
        start = self.binary("&", self.binary(">>", shared, self.integer(4, UI64)),
                            self.integer(0x3FFF, UI64))
        leading = 1
        if n_major:
            typ = buffer.type
            assert isinstance(typ, MemRefType)
            leading = typ.get_shape()[-2] * wgmma.SWIZZLE_BYTES >> 4
        fields = (leading << 16) | ((SWIZZLE_ALIGN >> 4) << 32) | (1 << 62)
        name = self.names.fresh(None, "desc")
        self.add(cuda.DeclOp(name, UI64, self.binary("|", start, self.integer(fields, UI64)),
                             qualifiers=["const"]))
        return name

    def _emit_wgmma(self, op: wgmma.MmaOp) -> None:
        """``asm volatile("{ .reg .pred p; setp.ne.b32 p, %<n+2>, 0; wgmma.mma_async…
        {%0, …}, %<n>, %<n+1>, p, 1, 1, 0, T; }" : "+f"(d0), … : "l"(desc_a), "l"(desc_b),
        "r"(1));``: the accumulators are read and written in place; ``T`` (``imm-trans-b``) is
        1 for an N-major ``b``. A product ``+ zeros(n)`` passes ``"r"(0)`` (``scale-d``
        false: ``D = A·B``) and its accumulators are declared without a value. An ``a`` in
        registers is its four pairs, ``{%<n>, …, %<n+3>}`` (``"r"``), before ``b``'s
        descriptor, and the instruction has no ``imm-trans-a``."""
        desc_a = None if op.a is None else self._descriptor(op.a, op.a_indices, op)
        desc_b = self._descriptor(op.b, op.b_indices, op, op.n_major)
        names = self._accumulators(op, op.c, op.d, "wg")
        outs = [self.add(cuda.VarOp(name, F32)).results[0] for name in names]
        count = len(outs)
        registers = ", ".join(f"%{k}" for k in range(count))
        if desc_a is None:  # A from registers: four pairs, and no imm-trans-a
            ins = [self.expr(v) for v in op.a_pairs]
            ins.append(self.add(cuda.VarOp(desc_b, UI64)).results[0])
            a_text = "{" + ", ".join(f"%{count + k}" for k in range(wgmma.A_PAIRS)) + "}"
            flags = f"p, 1, 1, {int(op.n_major)}"
            constraints = ["r"] * wgmma.A_PAIRS + ["l"]
        else:
            ins = [self.add(cuda.VarOp(name, UI64)).results[0] for name in (desc_a, desc_b)]
            a_text = f"%{count}"
            flags = f"p, 1, 1, 0, {int(op.n_major)}"
            constraints = ["l", "l"]
        b_at, pred_at = count + len(ins) - 1, count + len(ins)
        template = (f"{{ .reg .pred p; setp.ne.b32 p, %{pred_at}, 0; "
                    f"wgmma.mma_async.sync.aligned.m{wgmma.M}n{op.n}k{wgmma.K}.f32."
                    f"{op.kind}.{op.kind} {{{registers}}}, {a_text}, %{b_at}, {flags}; }}")
        scale_d = self.integer(0 if op.from_zero else 1, I32)  # 0: D = A·B
        self.add(cuda.AsmOp(template, outs, [*ins, scale_d],
                            ["+f"] * count + constraints + ["r"], volatile=True, memory=True))

    def _emit_wgmma_wait(self, op: wgmma.WaitOp) -> None:
        """``asm volatile("wgmma.wait_group.sync.aligned N;" : "+f"(e0), … :: "memory");``:
        the accumulators are operands of the wait, so no read of them moves above it."""
        names = self._accumulators(op, op.values, op.results_, "wgd")
        outs = [self.add(cuda.VarOp(name, F32)).results[0] for name in names]
        self.add(cuda.AsmOp(f"wgmma.wait_group.sync.aligned {op.pending.value.data};", outs,
                            [], ["+f"] * len(outs), volatile=True, memory=True))

    def _emit_nan_min_max(self, op: Operation) -> None:
        """``float r; asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));`` (sm_80
        and newer): a NaN-propagating ``maximumf``/``minimumf`` of ``f32`` in one
        instruction, where the portable C form (:mod:`~llmopt.lowering._cuda_ops`) tests
        both operands for NaN and branches."""
        (name,), (out,) = self._asm_outputs(op.results, "mx", F32)
        which = "max" if isinstance(op, arith.MaximumfOp) else "min"
        self.add(cuda.AsmOp(f"{which}.NaN.f32 %0, %1, %2;", [out],
                            [self.expr(v) for v in op.operands], ["=f", "f", "f"]))
        self._bind(op.results[0], name, F32)

    def _emit_fast_exp2(self, op: Operation) -> None:
        """``float r; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));``: the hardware
        exponential alone. ``exp2f`` wraps it in a fix-up for results below ``2⁻¹²⁶``
        (scale the argument, square the result: three more instructions); flushed, those
        come out 0, an absolute error below ``2⁻¹²⁶``."""
        (name,), (out,) = self._asm_outputs(op.results, "ex", F32)
        self.add(cuda.AsmOp("ex2.approx.ftz.f32 %0, %1;", [out], [self.expr(op.operands[0])],
                            ["=f", "f"]))
        self._bind(op.results[0], name, F32)

    def _is_asm(self, op: Operation) -> bool:
        """Whether the emitter writes ``op`` as an inline-asm statement of its own."""
        return (self.nan_min_max and _nan_min_max(op)) or _fast_exp2(op)

    def _emit_opaque(self, op: kernel.OpaqueOp) -> None:
        """``long long r; asm("mov.b64 %0, %1;" : "=l"(r) : "l"(v));``: ``v`` where the
        compiler cannot see it."""
        name = self.names.fresh(op.result.name_hint, "opaque")
        typ = scalar_type(op.result.type, op)  # index: long long, or int (``index_bitwidth``)
        wide = bit_width(typ) == 64
        # the operand as a local of the register's type (a literal would be an ``int``)
        given = self.names.fresh(None, "opaque_in")
        self.add(cuda.DeclOp(given, typ, self.expr(op.value), qualifiers=["const"]))
        self.add(cuda.DeclOp(name, typ))
        value = self.add(cuda.VarOp(given, typ)).results[0]
        out = self.add(cuda.VarOp(name, typ)).results[0]
        self.add(cuda.AsmOp("mov.b64 %0, %1;" if wide else "mov.b32 %0, %1;", [out],
                            [value], ["=l", "l"] if wide else ["=r", "r"]))
        self._bind(op.result, name, typ)

    def _emit_to_tf32(self, op: mma.ToTf32Op) -> None:
        """``unsigned int b; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(b) : "f"(x));`` and
        ``const float h = __uint_as_float(b);``."""
        bits = self.names.fresh(None, "tf32_bits")
        self.add(cuda.DeclOp(bits, UI32))
        out = self.add(cuda.VarOp(bits, UI32)).results[0]
        self.add(cuda.AsmOp("cvt.rna.tf32.f32 %0, %1;", [out], [self.expr(op.value)],
                            ["=r", "f"]))
        name = self.names.fresh(op.result.name_hint, "tf32")
        word = self.add(cuda.VarOp(bits, UI32)).results[0]
        self.add(cuda.DeclOp(name, F32, self.call("__uint_as_float", [word], F32),
                             qualifiers=["const"]))
        self._bind(op.result, name, F32)

    def _emit_pack(self, op: mma.PackOp) -> None:
        """``const unsigned int p = (unsigned int)__bfloat16_as_ushort(x) |
        ((unsigned int)__bfloat16_as_ushort(y) << 16);`` (``__half_as_ushort`` for ``f16``):
        the pair as the register ``mma.sync`` reads. A pair of two ``f32`` values rounded
        for it alone (:func:`_rounded_pair`) is one ``cvt.rn.bf16x2.f32`` (``f16x2``) of
        them: the same bits, one instruction where two conversions and a shift were."""
        pair = _rounded_pair(op)
        if pair is not None:
            (name,), (out,) = self._asm_outputs(op.results, "pair", UI32)
            kind = "bf16x2" if isinstance(op.low.type, BFloat16Type) else "f16x2"
            low, high = pair
            # cvt's first source goes to the upper half
            self.add(cuda.AsmOp(f"cvt.rn.{kind}.f32 %0, %1, %2;", [out],
                                [self.expr(high), self.expr(low)], ["=r", "f", "f"]))
            self._bind(op.result, name, UI32)
            return
        is_bf16 = isinstance(op.low.type, BFloat16Type)
        bits = "__bfloat16_as_ushort" if is_bf16 else "__half_as_ushort"
        low, high = (self.cast(self.call(bits, [self.expr(v)], UI16), UI32)
                     for v in (op.low, op.high))
        word = self.binary("|", low, self.binary("<<", high, self.integer(16, UI32)))
        name = self.names.fresh(op.result.name_hint, "pair")
        self.add(cuda.DeclOp(name, UI32, word, qualifiers=["const"]))
        self._bind(op.result, name, UI32)

    def _emit_dynamic_shared(self, op: kernel.SharedOp, name: str, element: Attribute) -> None:
        """``T* const name = (T*)&smem[offset];``: a buffer in the dynamic shared memory."""
        assert self.pool is not None and self.layout is not None
        pool = self.add(cuda.VarOp(self.pool, cuda.PtrType(UI8))).results[0]
        byte = self.add(cuda.IndexOp(pool, self.integer(self.layout.offsets[op], INDEX)))
        address = self.unary("&", byte.results[0])
        pointer = self.add(cuda.CastOp(address, cuda.PtrType(element))).results[0]
        self.add(cuda.DeclOp(name, cuda.PtrType(element), pointer, qualifiers=["const"]))

    def _emit_async_copy(self, op: kernel.AsyncCopyOp) -> None:
        """``__pipeline_memcpy_async(&dst[offset], &src[offset], bytes);``; with ``if %ok``
        ``asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::
        "r"(shared address), "l"(global address), "r"(ok ? 16 : 0) : "memory");`` (``.ca`` for
        4 and 8 bytes): a source size of 0 reads nothing and fills the bytes with zeros."""
        typ = op.src.type
        assert isinstance(typ, MemRefType)
        nbytes = op.elements * bit_width(typ.element_type) // 8
        if op.in_bounds is not None:
            dst_shared = self._shared_address(op.dst, op.dst_indices, op)
            src_global = self._global_address(op.src, op.src_indices, op)
            read = self.ternary(self.expr(op.in_bounds), self.integer(nbytes, I32),
                                self.integer(0, I32))
            level = "cg" if nbytes == 16 else "ca"
            self.add(cuda.AsmOp(f"cp.async.{level}.shared.global [%0], [%1], {nbytes}, %2;",
                                [], [dst_shared, src_global, read], ["r", "l", "r"],
                                volatile=True, memory=True))
            return
        dst = self.unary("&", self.element(op.dst, op.dst_indices, op))
        src = self.unary("&", self.element(op.src, op.src_indices, op))
        size = self.integer(nbytes, I32)
        call = self.add(cuda.CallOp("__pipeline_memcpy_async", [dst, src, size],
                                    cuda.VoidType()))
        self.add(cuda.ExprStmtOp(call.results[0]))

    def _emit_prefetch(self, op: kernel.PrefetchOp) -> None:
        """``asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::
        "l"(__cvta_generic_to_global(&src[offset])), "r"(bytes) : "memory");``: one
        instruction asks for the whole range. ``memory`` keeps
        it where it stands, in front of the grid-dependency wait it may precede."""
        typ = op.buffer.type
        assert isinstance(typ, MemRefType)
        nbytes = op.elements * bit_width(typ.element_type) // 8
        to_global = self._global_address(op.buffer, op.indices, op)
        self.add(cuda.AsmOp("cp.async.bulk.prefetch.L2.global [%0], %1;", [],
                            [to_global, self.integer(nbytes, I32)], ["l", "r"], volatile=True,
                            memory=True))

    def _global_address(self, buffer: SSAValue, indices: Sequence[SSAValue],
                        op: Operation) -> SSAValue:
        """``__cvta_generic_to_global(&buffer[offset])``: the global-memory address of an
        element, as PTX's ``global`` instructions take it."""
        address = self.unary("&", self.element(buffer, indices, op))
        return self.call("__cvta_generic_to_global", [address], UI64)

    def _shared_address(self, buffer: SSAValue, indices: Sequence[SSAValue],
                        op: Operation) -> SSAValue:
        """``(unsigned int)__cvta_generic_to_shared(&buffer[offset])``: the 32-bit
        shared-memory address of an element, as PTX's ``shared`` instructions take it."""
        address = self.unary("&", self.element(buffer, indices, op))
        return self.cast(self.call("__cvta_generic_to_shared", [address], UI64), UI32)

    def _emit_mbarrier(self, op: mbarrier.BarrierAccess) -> None:
        """One ``mbarrier`` op on ``(unsigned)__cvta_generic_to_shared(&bars[offset])``: its
        PTX instruction, or for a wait the ``try_wait.parity`` loop (its labels are local to
        the braces, so the loop may appear any number of times). In a kernel with tensor
        maps an initialisation is followed by ``fence.mbarrier_init.release.cluster``, which
        makes the initialised barrier visible to the asynchronous proxy that completes the
        bulk copies' transactions on it."""
        shared = self._shared_address(op.bars, op.indices, op)
        if isinstance(op, mbarrier.InitOp):
            template = "mbarrier.init.shared::cta.b64 [%0], %1;"
            ins, constraints = [shared, self.integer(op.arrivals, I32)], ["r", "r"]
        elif isinstance(op, mbarrier.ExpectBytesOp):
            template = "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
            ins, constraints = [shared, self.integer(op.bytes, I32)], ["r", "r"]
        elif isinstance(op, mbarrier.ArriveCopiesOp):
            template = "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];"
            ins, constraints = [shared], ["r"]
        elif isinstance(op, mbarrier.ArriveClusterOp):
            template = ("{ .reg .b32 remote; mapa.shared::cluster.u32 remote, %0, %1; "
                        "mbarrier.arrive.shared::cluster.b64 _, [remote]; }")
            ins = [shared, self.cast(self.expr(op.cta), UI32)]
            constraints = ["r", "r"]
        elif isinstance(op, mbarrier.ArriveOp):
            template = "mbarrier.arrive.shared::cta.b64 _, [%0];"
            ins, constraints = [shared], ["r"]
        else:
            assert isinstance(op, mbarrier.WaitOp)
            template = ("{ .reg .pred p; WAIT: mbarrier.try_wait.parity.shared::cta.b64 p, "
                        "[%0], %1; @!p bra WAIT; }")
            ins, constraints = [shared, self.cast(self.expr(op.parity), UI32)], ["r", "r"]
        self.add(cuda.AsmOp(template, [], ins, constraints, volatile=True, memory=True))
        if isinstance(op, mbarrier.InitOp) and self.tensor_maps:
            self.add(cuda.AsmOp("fence.mbarrier_init.release.cluster;", [], [], [],
                                volatile=True, memory=True))

    def _emit_tma_load(self, op: tma.LoadOp) -> None:
        """``asm volatile("cp.async.bulk.tensor.Nd.shared::cluster.global.tile
        .mbarrier::complete_tx::bytes [%0], [%1, {%2, …}], [%N+2];" :: "r"(tile),
        "l"((unsigned long long)&tmapK), "r"((int)c_{N-1}), …, "r"((int)c_0), "r"(bar)
        : "memory")``: the shared address of the tile's first element (a swizzled tile
        starts at a multiple of its rows · 128 bytes, so that is where the box's swizzle
        starts too), the generic address of the tensor-map parameter, the box's corner as
        32-bit coordinates innermost first (PTX's order, the reverse of the memref's), and
        the barrier's shared address."""
        typ = op.dst.type
        assert isinstance(typ, MemRefType)
        tile = op.tile
        tile_bytes = prod(tile) * bit_width(typ.element_type) // 8
        tiles = prod(typ.get_shape()[:len(op.dst_indices)])
        swizzled = wgmma.swizzle(op.dst) is not None
        align = SWIZZLE_ALIGN if swizzled else TMA_ALIGN
        if tiles > 1 and tile_bytes % align:
            what = "a swizzled" if swizzled else "a"
            raise fail(op, f"{what} tile of {tile_bytes} bytes: the tiles of the destination "
                           f"must start at multiples of {align} bytes")
        dst = self._tile_start(op.dst, op.dst_indices, typ)
        param, map_type = self.tensor_maps[tma.tensor_map(op)]
        tensor_map = self.unary("&", self.add(cuda.VarOp(param, map_type)).results[0])
        address = self.add(cuda.CastOp(tensor_map, UI64)).results[0]
        coordinates = [self.cast(self.expr(v), I32) for v in reversed(op.src_indices)]
        bar = self._shared_address(op.bars, op.bar_indices, op)
        rank = len(op.src_indices)
        copy = (f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile"
                ".mbarrier::complete_tx::bytes")
        if op.multicast is None:
            places = ", ".join(f"%{2 + k}" for k in range(rank))
            template = f"{copy} [%0], [%1, {{{places}}}], [%{2 + rank}];"
        else:
            template = _multicast(copy, op, rank)
        self.add(cuda.AsmOp(template, [], [dst, address, *coordinates, bar],
                            ["r", "l", *["r"] * rank, "r"], volatile=True, memory=True))

    def _tile_start(self, buffer: SSAValue, indices: Sequence[SSAValue],
                    typ: MemRefType) -> SSAValue:
        """The shared address of ``&buffer[indices…, 0, …, 0]``, the first element of the
        tile the leading ``indices`` pick: ``Σ index · stride`` over them, which is that
        element's place in a swizzled buffer too (row 0, column 0 of its first atom)."""
        strides = typ.get_strides()
        assert strides is not None
        constant = 0
        total: SSAValue | None = None
        for index, stride in zip(indices, strides, strict=False):
            assert stride is not None
            known = constant_index(index)
            if known is not None:
                constant += known * stride
                continue
            term = self.binary("*", self.cast(self.expr(index), INDEX),
                               self.integer(stride, INDEX))
            total = term if total is None else self.binary("+", total, term)
        if total is None:
            total = self.integer(constant, INDEX)
        elif constant:
            total = self.binary("+", total, self.integer(constant, INDEX))
        base = self.add(cuda.VarOp(self.var[buffer], self.var_type[buffer])).results[0]
        element = self.add(cuda.IndexOp(base, total)).results[0]
        address = self.unary("&", element)
        return self.cast(self.call("__cvta_generic_to_shared", [address], UI64), UI32)

    def _emit_last_block(self, op: kernel.LastBlockOp) -> None:
        """The arrival and the region of ``kernel.last_block``::

            __syncthreads();
            int last = 0;
            if ((threadIdx.x | threadIdx.y | threadIdx.z) == 0u) {
              __threadfence();
              last = (int)(atomicAdd(counter, 1) == (int)(gridDim.x * gridDim.y * gridDim.z) - 1);
              __threadfence();
            }
            if (__syncthreads_or(last)) {
              ... the region ...
              if ((threadIdx.x | threadIdx.y | threadIdx.z) == 0u) counter[0] = 0;
            }

        The barrier orders the block's writes before thread 0's fence and ticket; the fence
        after the ticket, and the barrier of ``__syncthreads_or`` (whose result every thread
        of the block shares), order the last block's reads after every other block's
        writes, as a cooperative grid sync does."""
        self._call_statement("__syncthreads", [])
        flag = self.names.fresh("last_block", "last")
        self.add(cuda.DeclOp(flag, I32, self.integer(0, I32)))
        arrival = cuda.IfOp(self._first_thread())
        self.add(arrival)
        with self._writing(arrival.then_region.block):
            self._call_statement("__threadfence", [])
            ticket = self.call("atomicAdd", [self.expr(op.counter), self.integer(1, I32)], I32)
            grid = self.cast(self._over_dims("gridDim", "*"), I32)
            last = self.binary("-", grid, self.integer(1, I32))
            target = self.add(cuda.VarOp(flag, I32)).results[0]
            self.add(cuda.AssignOp(target, self.cast(self.binary("==", ticket, last), I32)))
            self._call_statement("__threadfence", [])
        arrived = self.call("__syncthreads_or", [self.add(cuda.VarOp(flag, I32)).results[0]],
                            I32)
        tail = cuda.IfOp(self.cast(arrived, I1))
        self.add(tail)
        self._nested(tail.then_region.block, op.body.block, [])
        reset = cuda.IfOp(self._first_thread_in(tail.then_region.block))
        tail.then_region.block.add_op(reset)
        with self._writing(reset.then_region.block):
            element = self.add(cuda.IndexOp(self.expr(op.counter),
                                            self.integer(0, INDEX))).results[0]
            self.add(cuda.AssignOp(element, self.integer(0, I32)))

    def _over_dims(self, builtin: str, operator: str) -> SSAValue:
        """``builtin.x operator builtin.y operator builtin.z`` (``gridDim.x * …``)."""
        x, y, z = (self.add(cuda.BuiltinOp(f"{builtin}.{d}")).results[0] for d in "xyz")
        return self.binary(operator, self.binary(operator, x, y), z)

    def _first_thread(self) -> SSAValue:
        """``(threadIdx.x | threadIdx.y | threadIdx.z) == 0u``."""
        return self.binary("==", self._over_dims("threadIdx", "|"), self.integer(0, UI32))

    def _first_thread_in(self, block: Block) -> SSAValue:
        """:meth:`_first_thread`, its expression written into ``block``."""
        with self._writing(block):
            return self._first_thread()

    @contextmanager
    def _writing(self, block: Block) -> Iterator[None]:
        """Ops added meanwhile go into ``block`` (a nested statement's body)."""
        outer, self.block = self.block, block
        try:
            yield
        finally:
            self.block = outer

    def _call_statement(self, callee: str, args: Sequence[SSAValue]) -> None:
        """``callee(args);`` as a statement."""
        call = self.add(cuda.CallOp(callee, list(args), cuda.VoidType()))
        self.add(cuda.ExprStmtOp(call.results[0]))

    def _emit_copy(self, op: kernel.CopyOp) -> None:
        """``((float4*)&dst[offset])[0] = ((const float4*)&src[offset])[0];``: one access of
        the copy's size on each side (a plain element assignment for one 4-byte element)."""
        typ = op.src.type
        assert isinstance(typ, MemRefType)
        element = typ.element_type
        nbytes = op.elements * bit_width(element) // 8
        carrier: Attribute | None = None
        if op.elements > 1 or nbytes != 4:
            base = element if isinstance(element, Float32Type) else UI32
            carrier = base if nbytes == 4 else cuda.VecType(base, nbytes // 4)

        def side(buffer: SSAValue, indices: Sequence[SSAValue]) -> SSAValue:
            value = self.element(buffer, indices, op)
            if carrier is None:
                return value
            address = self.unary("&", value)
            assert isinstance(address.type, cuda.PtrType)
            pointer = self.cast(address, cuda.PtrType(carrier, address.type.is_const))
            return self.add(cuda.IndexOp(pointer, self.integer(0, INDEX))).results[0]

        dst = side(op.dst, op.dst_indices)
        src = side(op.src, op.src_indices)
        self.add(cuda.AssignOp(dst, src))

    @staticmethod
    def _default_name(op: Operation) -> str:
        if isinstance(op, kernel.ThreadIdOp | kernel.BlockIdOp | kernel.BlockDimOp
                      | kernel.GridDimOp):
            prefix = {kernel.ThreadIdOp: "tid", kernel.BlockIdOp: "bid",
                      kernel.BlockDimOp: "bdim", kernel.GridDimOp: "gdim"}[type(op)]
            return prefix if op.dim.data == "x" else f"{prefix}_{op.dim.data}"
        return "v"

    def _emit_for(self, op: scf.ForOp) -> None:
        body = op.body.block
        targets: list[str] = []
        for init, arg, res in zip(op.iter_args, body.args[1:], op.results, strict=True):
            name = self.names.fresh(arg.name_hint or res.name_hint, "acc")
            typ = scalar_type(arg.type, op)
            self.add(cuda.DeclOp(name, typ, self.expr(init)))
            self._bind(arg, name, typ, mutable=True)
            self._bind(res, name, typ, mutable=True)
            targets.append(name)
        iv = body.args[0]
        iv_name = self.names.fresh(iv.name_hint, "i")
        self._bind(iv, iv_name, scalar_type(iv.type, op))
        lb, ub, step = self.expr(op.lb), self.expr(op.ub), self.expr(op.step)
        unroll = op.attributes.get("unroll")
        loop = cuda.ForOp(iv_name, lb, ub, step, unroll=unroll.value.data
                          if isinstance(unroll, IntegerAttr) else None)
        self.add(loop)
        self._nested(loop.body.block, body, targets)

    def _emit_if(self, op: scf.IfOp) -> None:
        targets: list[str] = []
        for res in op.results:
            name = self.names.fresh(res.name_hint, "r")
            typ = scalar_type(res.type, op)
            self.add(cuda.DeclOp(name, typ))
            self._bind(res, name, typ, mutable=True)
            targets.append(name)
        cond = self.expr(op.cond)
        else_ops = list(op.false_region.block.ops) if op.false_region.blocks else []
        has_else = any(not isinstance(o, scf.YieldOp) or o.operands for o in else_ops)
        branch = cuda.IfOp(cond, Region(Block()), Region(Block()) if has_else else Region())
        self.add(branch)
        self._nested(branch.then_region.block, op.true_region.block, targets)
        if has_else:
            self._nested(branch.else_region.block, op.false_region.block, targets)

    def _nested(self, into: Block, source: Block, targets: Sequence[str]) -> None:
        with self._writing(into):
            self._emit_block(source, targets)

    def _emit_yield(self, op: scf.YieldOp, targets: Sequence[str]) -> None:
        pairs = [(t, v) for t, v in zip(targets, op.operands, strict=True)
                 if self.var.get(v) != t]
        # A parallel assignment: a value that reads a variable assigned before it is saved
        # in a const temporary first.
        saved: dict[int, tuple[str, Attribute]] = {}
        for k, (target, value) in enumerate(pairs):
            if self._reads(value) & {t for t, _ in pairs[:k]}:
                name = self.names.fresh(f"{target}_next", "v")
                typ = scalar_type(value.type, op)
                self.add(cuda.DeclOp(name, typ, self.expr(value), qualifiers=["const"]))
                saved[k] = (name, typ)
        for k, (target, value) in enumerate(pairs):
            dst = self.add(cuda.VarOp(target, scalar_type(value.type, op))).results[0]
            if k in saved:
                src = self.add(cuda.VarOp(*saved[k])).results[0]
            else:
                src = self.expr(value)
            self.add(cuda.AssignOp(dst, src))

    def _reads(self, value: SSAValue) -> set[str]:
        """The mutable variables the expression of ``value`` reads."""
        kind = self.kind.get(value)
        if kind is Kind.NAMED:
            name = self.var.get(value)
            return {name} if name in self.mutable else set()
        if kind is Kind.INLINE:
            assert isinstance(value.owner, Operation)
            found: set[str] = set()
            for operand in value.owner.operands:
                found |= self._reads(operand)
            return found
        return set()


def _retype_index(func: kernel.FuncOp, typ: Attribute) -> None:
    """Give every ``index`` value of ``func`` the type ``typ`` (in place: the function is
    replaced by its ``cuda.kernel`` right after), so that every expression built from them
    is computed in ``typ``."""
    for op in func.body.walk():
        for value in (*op.results, *(a for r in op.regions for b in r.blocks for a in b.args)):
            if isinstance(value.type, IndexType):
                value._type = typ  # pyright: ignore[reportPrivateUsage]



def _multicast(copy: str, op: tma.LoadOp, rank: int) -> str:
    """The template of a multicast ``tma.load`` (``copy`` its instruction, the operands as
    for a plain one): in braces, the block's rank in its cluster (``%cluster_ctarank``) moves
    the destination by that many parts' bytes and the corner's coordinate of the tile's
    first dimension by as many part rows, and the copy goes to every block of the cluster
    (``.multicast::cluster`` with a mask of the cluster's ``n`` blocks)."""
    split = len(op.tile) - 1  # the tile's first dimension among the coordinates
    rows = op.part[0]
    places = ", ".join("crd" if k == split else f"%{2 + k}" for k in range(rank))
    return ("{ .reg .b32 rk, at, crd; .reg .b16 mask; mov.u32 rk, %%cluster_ctarank; "
            f"mad.lo.u32 at, rk, {op.bytes}, %0; mad.lo.s32 crd, rk, {rows}, %{2 + split}; "
            f"mov.b16 mask, {(1 << op.blocks) - 1}; "
            f"{copy}.multicast::cluster [at], [%1, {{{places}}}], [%{2 + rank}], mask; }}")


def _generic_operands(func: kernel.FuncOp) -> bool:
    """Whether a shared buffer that a ``wgmma`` product of ``func`` reads may be written by
    the threads themselves (``kernel.store``, ``kernel.async_copy``, …: the generic proxy),
    so that ``wgmma.fence`` needs ``fence.proxy.async`` to make those writes visible to the
    products. A buffer only bulk copies fill (``tma.load``, the asynchronous proxy, as the
    products) needs none; the fence costs a ``MEMBAR.ALL.CTA`` at every K step."""
    operands = {v for op in func.walk() if isinstance(op, wgmma.MmaOp)
                for v in (op.a, op.b) if v is not None}
    return any(not isinstance(use.operation, wgmma.MmaOp | tma.LoadOp | kernel.LoadOp)
               for buffer in operands for use in buffer.uses)
