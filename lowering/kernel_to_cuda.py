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
  instructions). By default in kernels of 16-bit tensor-core products, whose K loops are
  mostly ``ldmatrix``, ``mma.sync`` and address arithmetic, and in kernels that keep no
  register array (no ``kernel.local``: elementwise and index maps, norms, the sums of
  ``split-k``'s partials, block-per-output products), mostly index arithmetic; in the FMA
  products of ``f32`` on the H200 it made some kernels faster and others slower (see the
  option's docstring);
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
* ``kernel.prefetch`` → ``asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::
  "l"(__cvta_generic_to_global(&src[offset])), "r"(bytes) : "memory")`` (sm_90 or newer);
* ``mbarrier`` ops → their ``mbarrier.*.shared::cta.b64`` instructions on the barrier's
  32-bit shared address (``mbarrier.expect_bytes`` → ``mbarrier.arrive.expect_tx``; a wait a
  ``try_wait.parity`` loop); in a kernel with ``tma.load`` each ``mbarrier.init`` is
  followed by ``fence.mbarrier_init.release.cluster;``, so that the bulk copies (the
  asynchronous proxy) see the initialised barrier;
* ``tma.load`` → ``asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile
  .mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" :: "r"(tile), "l"((unsigned
  long long)&tmap0), "r"(c2), "r"(c1), "r"(c0), "r"(bar) : "memory")``: the tile's first
  element and the barrier as shared addresses, the coordinates innermost first. Each of the
  kernel's tensor maps (:func:`~llmopt.dialects.tma.tensor_maps`) is a parameter after the
  others, ``const __grid_constant__ llmopt_tensor_map tmap0`` (``!cuda.tensor_map<…>``,
  which records the buffer's type, the box and the swizzle for the host to encode at each
  launch), the struct declared once at the top of the source (``cuda.tensor_map_struct``);
  ``tma.load`` destinations start at 128-byte boundaries (swizzled ones at 1024) in dynamic
  shared memory;
* ``kernel.set_max_registers inc 232`` → ``asm volatile("setmaxnreg.inc.sync.aligned.u32
  232;" ::: "memory")`` (sm_90a); a kernel holding one must not ask for more than one
  resident block (``min_blocks`` above 1 is an error naming it): its warpgroups trade
  registers within the block's share of the multiprocessor's;
* ``arith`` — C operators with MLIR's exact semantics: ``divsi``/``remsi`` are C's ``/`` and
  ``%``; ``floordivsi``/``ceildivsi`` are ``a / b`` corrected by one where the remainder is
  non-zero and the signs differ (agree); unsigned ops go through unsigned casts; ``cmpf``
  keeps ordered/unordered semantics; ``maximumf``/``minimumf`` propagate NaN (an ``f32``
  one on sm_80 and newer is one ``asm("max.NaN.f32 …")`` statement, not C's test of both
  operands, which NVRTC compiles to branches);
* ``mma.sync`` → four uninitialised ``float`` locals and one ``asm("mma.sync.aligned.m16n8k8
  .row.col.f32.tf32.tf32.f32 …")`` statement (``cuda.asm``; the TF32 operands passed as
  ``__float_as_uint`` bits; ``bf16``/``f16`` pairs, ``unsigned int`` locals, as they are, to
  ``m16n8k16.row.col.f32.bf16.bf16.f32``); ``mma.to_tf32`` → ``asm("cvt.rna.tf32.f32 …")``
  into an ``unsigned int`` and a ``const float`` of its bits; ``mma.ldmatrix`` → one
  ``unsigned int`` local per result and ``asm volatile("ldmatrix.sync.aligned.m8n8.x4
  .shared.b16 …")`` of ``(unsigned int)__cvta_generic_to_shared(&tile[offset])``;
* ``math`` — the CUDA math functions (``expf``, ``rsqrtf``, ``tanhf``, ``powf`` …, and the
  ``double`` versions for ``f64``).

Option: ``arch`` (default ``sm_90``), whose shared-memory limits apply.

Why: the ``cuda`` dialect is the C syntax tree, so every decision about the source text —
naming, which values are locals, how an index is computed, static or dynamic shared
memory — is made here, in IR that can be inspected and tested, and the printer only spells
it. The 48 KiB static limit is CUDA's, so Kernel IR does not know it: its shared buffers are
just buffers, and the choice is made where the declarations are written.

This module holds the pass and its order of work; the pieces are private modules beside it:
:mod:`~llmopt.lowering._cuda_analysis` (written buffers, ``__restrict__``, the tensor-core
check), :mod:`~llmopt.lowering._cuda_names` (C names, kernels renamed to them),
:mod:`~llmopt.lowering._cuda_shared` (shared-memory layouts, launch ``smem``),
:mod:`~llmopt.lowering._cuda_emitter` (a kernel's statements),
:mod:`~llmopt.lowering._cuda_values` (which values become variables),
:mod:`~llmopt.lowering._cuda_expr` (expressions and buffer offsets),
:mod:`~llmopt.lowering._cuda_ops` (each op's expression) and
:mod:`~llmopt.lowering._cuda_types` (scalar types and widths).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import BFloat16Type, Float16Type, ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.utils.exceptions import PassFailedException

from llmopt.dialects import cuda, kernel, mma
from llmopt.lowering._cuda_analysis import check_tensor_cores, unrestricted_params
from llmopt.lowering._cuda_emitter import KernelEmitter
from llmopt.lowering._cuda_names import rename_kernels
from llmopt.lowering._cuda_shared import SharedLayout, shared_layout, shared_layouts, size_launches
from llmopt.lowering._cuda_types import I32, INDEX
from llmopt.lowering._index_range import fits_in_32_bits, launch_grids, length_bounds
from llmopt.lowering._symbolic_layout import length_parameters
from llmopt.passes._rewrite import KeepLocation, widen_half_arithmetic
from llmopt.passes.kernel.lengths_in_memory import length_loads
from llmopt.passes.tile._schedule import knob
from llmopt.target import ARCH, DEFAULT_ARCH, NAN_MIN_MAX_ARCH, arch_number

__all__ = ["KernelToCuda", "SharedLayout", "shared_layout"]


@dataclass
class _LowerKernelFunc(RewritePattern):
    """``kernel.func`` → ``cuda.kernel`` (see the module docstring)."""

    unrestricted: dict[str, set[int]]
    layouts: dict[str, SharedLayout]
    grids: dict[str, tuple[int, ...]]
    index_bitwidth: int
    min_blocks: int = 0
    lengths: dict[str, int | SSAValue] = field(default_factory=dict)
    nan_min_max: bool = False  # the target has max.NaN/min.NaN (sm_80+)
    length_bounds: dict[str, tuple[int, int]] = field(default_factory=dict)

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: kernel.FuncOp, rewriter: PatternRewriter) -> None:
        name = op.sym_name.data
        length = self.lengths.get(name)
        bits = self.index_bitwidth or default_index_bitwidth(op)
        bound = self.length_bounds.get(name)
        narrow = (bits == 32 and not length_loads(op)
                  and (length is None or (isinstance(length, int) and bound is not None))
                  and fits_in_32_bits(op, self.grids.get(name),
                                      None if bound is None else (length, bound)))
        min_blocks = knob(self.min_blocks, op, "min_blocks", 0)
        if min_blocks > 1 and any(isinstance(o, kernel.SetMaxRegistersOp) for o in op.walk()):
            raise PassFailedException(f"kernel-to-cuda: kernel '{name}' sets its warpgroups' "
                                      f"registers (kernel.set_max_registers), which needs "
                                      f"one resident block, but min_blocks is {min_blocks}")
        emitter = KernelEmitter(op, self.unrestricted.get(name, set()), self.layouts.get(name),
                                index=I32 if narrow else INDEX,
                                min_blocks=min_blocks,
                                length=length, nan_min_max=self.nan_min_max)
        rewriter.replace(op, emitter.run())


def _check_clusters(module: ModuleOp) -> None:
    """Every launch of a kernel that runs in clusters (``kernel.func … cluster n``, which
    ``warp-specialize`` gives) has a static grid that whole clusters make up: the driver
    refuses any other launch of a ``__cluster_dims__`` kernel."""
    sizes = {f.sym_name.data: f.cluster_size for f in module.ops
             if isinstance(f, kernel.FuncOp)}
    for op in module.walk():
        if not isinstance(op, kernel.LaunchOp):
            continue
        name = op.kernel.root_reference.data
        size = sizes.get(name, 1)
        if size > 1 and (op.grid_size is not None or op.grid_shape[0] % size
                         or op.grid_shape[1:] != (1, 1)):
            grid = "a runtime grid" if op.grid_size is not None else f"grid {list(op.grid_shape)}"
            raise PassFailedException(f"kernel-to-cuda: kernel '{name}' runs in clusters of "
                                      f"{size} blocks along x, but a launch has {grid}")


def default_index_bitwidth(func: kernel.FuncOp) -> int:
    """``index_bitwidth`` of a kernel when the option leaves it open: 32 for a kernel that
    multiplies 16-bit fragments on the tensor cores (``mma.sync`` ``m16n8k16``) and for one
    that keeps no register array (``kernel.local``: no register tile, fragments or
    accumulators of a product; a point's chunk of ``vector-elementwise``, marked
    :data:`~llmopt.dialects.kernel.POINT_ATTR`, is not one), 64 for the others. A
    tensor-core K loop issues little besides its ``ldmatrix`` and ``mma.sync``, so its
    64-bit address arithmetic is a large share of its instructions: NVRTC's SASS of a
    ``bf16`` product's K loop (Qwen2.5-7B's 512 × 18944 × 3584, 64 × 64 warp tiles) has 216
    instructions per chunk of 32 for 64 ``HMMA`` with 64-bit indices, 142 with 32-bit ones
    (64 × 16 warp tiles: 108 and 76 for 16). A kernel without a register array (elementwise
    and index maps, norms, the sums of ``split-k``'s partials, block-per-output products) is
    mostly index arithmetic around a few loads: a thread's element of Qwen2.5-7B's bias and
    rotary kernel at 2047 tokens takes about 135 SASS instructions with 64-bit indices (the
    division of its flat index by the length and the head size as chains of wide
    multiplies), about 82 with 32-bit ones. The FMA loops of ``f32`` products, whose index
    arithmetic hides behind their FMAs, measured neither width faster everywhere."""
    registers = False
    for op in func.walk():
        if isinstance(op, mma.SyncOp) and op.kind != "tf32":
            return 32
        registers |= isinstance(op, kernel.LocalOp) and kernel.POINT_ATTR not in op.attributes
    return 64 if registers else 32


def _uses_pipeline(module: ModuleOp) -> bool:
    """Whether a kernel calls the asynchronous-copy primitives of
    ``<cuda_pipeline_primitives.h>``."""
    return any(isinstance(op, cuda.CallOp) and op.callee.data.startswith("__pipeline_")
               for op in module.walk())


def _uses_half(module: ModuleOp) -> tuple[bool, bool]:
    """Whether the kernels use ``f16`` (``<cuda_fp16.h>``) and ``bf16`` (``<cuda_bf16.h>``)."""
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


def _declare_tensor_maps(module: ModuleOp) -> None:
    """Declare the tensor maps' struct (``cuda.tensor_map_struct``) after the includes,
    once, when a kernel takes one."""
    ops = list(module.ops)
    if any(isinstance(o, cuda.TensorMapStructOp) for o in ops) or not any(
            isinstance(o, cuda.KernelOp) and o.tensor_maps for o in ops):
        return
    after = [o for o in ops if isinstance(o, cuda.IncludeOp)]
    struct = cuda.TensorMapStructOp()
    if after:
        module.body.block.insert_op_after(struct, after[-1])
    elif ops:
        module.body.block.insert_op_before(struct, ops[0])
    else:
        module.body.block.add_op(struct)


@dataclass(frozen=True)
class KernelToCuda(ModulePass):
    """Lower every ``kernel.func`` to a ``cuda.kernel`` (see the module docstring).

    Options: ``arch`` (the target GPU, ``sm_90``), whose shared-memory limits apply;
    ``index_bitwidth``: 64 computes indices in ``long long``; 32 in ``int`` in every kernel
    for which :func:`~llmopt.lowering._index_range.fits_in_32_bits` proves them in range
    (the others stay 64-bit); 0 (the default) 32 for kernels of 16-bit tensor-core products
    and kernels without a register array, 64 for the others (:func:`default_index_bitwidth`): on
    the H200 32 bits made some ``f32`` products faster and others slower
    (``bench/results/index-bitwidth-h200.md``);
    ``nan_min_max`` (default on; only sm_80 and newer): ``f32`` ``maximumf``/``minimumf``
    as ``max.NaN``/``min.NaN``, off the portable C form."""

    name = "kernel-to-cuda"

    arch: str = DEFAULT_ARCH
    index_bitwidth: int = 0
    min_blocks: int = 0
    nan_min_max: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        """Rewrite ``op`` in place."""
        if not ARCH.fullmatch(self.arch):
            raise PassFailedException(f"kernel-to-cuda: arch must look like 'sm_90', got "
                                      f"'{self.arch}'")
        if self.index_bitwidth not in (0, 32, 64):
            raise PassFailedException(f"kernel-to-cuda: index_bitwidth must be 32 (where "
                                      f"proven to fit), 64 or 0 (by kernel), got "
                                      f"{self.index_bitwidth}")
        check_tensor_cores(op, self.arch)
        for func in op.ops:
            if isinstance(func, kernel.FuncOp):
                widen_half_arithmetic(func)
        _check_clusters(op)
        rename_kernels(op)
        layouts = shared_layouts(op, self.arch)
        grids = launch_grids(op) if self.index_bitwidth != 64 else {}
        lengths = length_parameters(op)
        bounds = length_bounds(op, {name: position for name, position in lengths.items()
                                    if isinstance(position, int)}
                               ) if self.index_bitwidth != 64 else {}
        pattern = _LowerKernelFunc(unrestricted_params(op), layouts, grids, self.index_bitwidth,
                                   self.min_blocks, lengths,
                                   nan_min_max=(self.nan_min_max
                                                and arch_number(self.arch) >= NAN_MIN_MAX_ARCH),
                                   length_bounds=bounds)
        PatternRewriteWalker(KeepLocation(pattern), apply_recursively=False).rewrite_module(op)
        size_launches(op, layouts, self.arch)
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
        _declare_tensor_maps(op)
