"""``torch-to-prim``: decompose every Torch-IR op into the three Tensor-IR primitives.

Matches each ``torch.*`` op (one pattern per op or op family) and replaces it with
``prim.elementwise`` (a scalar ``arith``/``math`` body), ``prim.reduce`` and ``prim.index_map``
ops computing the same tensor. The function signature is kept; tensors stay tensors.

* Elementwise ops broadcast their operands with ``prim.index_map`` (NumPy rules) and apply
  the scalar op in an ``elementwise`` body; ``torch.constant`` becomes a fill
  (``prim.elementwise () : () -> tensor<f32>`` yielding an ``arith.constant``).
* Reductions reduce with ``prim.reduce`` (kept unit dims), ``mean`` multiplies by ``1/N``;
  ``keepdim = false`` drops the unit dims with an ``index_map``.
* Contractions (``linear``, ``matmul``, ``bmm``) become the product
  ``prod[b.., m, n, k] = A'[b.., m, n, k] * B'[b.., m, n, k]`` of two ``index_map``
  broadcasts, ``prim.reduce add`` over ``k`` and an ``index_map`` dropping the kept unit dim:
  the Loop-IR fusion pass turns the three into one matmul kernel.
* ``softmax`` is the numerically stable max / sub-exp / sum / div chain, ``rms_norm`` the
  square / mean / add-eps-rsqrt / scale chain that Hugging Face models spell out.
* Data movement (``transpose``, ``permute``, ``reshape``, ``unsqueeze``, ``expand``,
  ``slice``, ``cat``) is one ``prim.index_map`` each; reshape maps group the dims whose
  extents multiply to the same product, so a dim that maps straight through stays ``dN``.
* ``embedding`` is a ``prim.gather`` along axis 0 of the weight; ``arange`` a fill whose
  body computes ``start + step * prim.coord 0``.
* ``sdpa`` is ``scores = q @ k^T`` as a contraction (under GQA the key/value operand's map
  reads head ``h floordiv (Hq / Hkv)``: the head broadcast costs nothing), one elementwise
  op that scales and masks (causal: ``select(coord_s <= coord_l, x, -inf)`` with
  ``prim.coord``; an ``i1`` mask selects, a float mask adds), the softmax chain along the keys,
  and ``probs @ v`` as a second contraction.
* Integer arithmetic uses ``arith.addi/subi/muli/maxsi/minsi``; comparisons ``arith.cmpf``
  (ordered; ``ne`` unordered, as IEEE ``!=``) or ``arith.cmpi`` (signed); ``logical_*`` are
  ``arith.andi/ori/xori`` on ``i1``; ``where`` is ``arith.select``; casts follow PyTorch
  (``sitofp``, ``fptosi``, ``extsi``/``trunci``, ``extui``/``uitofp`` from ``i1``, ``x != 0``
  to ``i1``).

**16-bit floats are storage.** ``f16``/``bf16`` values are only loaded, stored and converted:
every ``prim.elementwise`` body widens its 16-bit inputs to ``f32`` (``arith.extf``), computes
in ``f32`` and rounds its result once (``arith.truncf``, to nearest even) — what PyTorch does
for one op on 16-bit tensors, so a torch op rounds exactly where PyTorch rounds it (``linear``
adds its bias to the ``f32`` sums, ``rms_norm`` scales by its weight in ``f32``, as PyTorch's
fused kernels do). Reductions and
contractions accumulate in ``f32`` (the product/cast feeding the ``prim.reduce`` widens, the
last elementwise step narrows); ``amax``/``amin`` reduce the widened values (exact) and
narrow.

**Symbolic extents.** A program with ``?`` extents lowers the same way; every op whose result
extent does not follow from its inputs gets the ``index`` value of that extent, found by
:func:`llmopt.lowering._extents.extent_of` (a symbol argument, or a ``sizes`` operand):
broadcasts to a ``?`` dim are ``prim.index_map ... sizes(%seq)``, a ``slice`` with ``index``
bounds reads ``d * step + s0`` with ``symbols(%start)`` and the extent ``ceildiv(end - start,
step)`` computed by ``arith`` ops, ``cat`` along a ``?`` axis offsets its segments by map
symbols, a dynamic ``arange`` is a fill with ``sizes``. Reshape maps group a ``?`` extent with
static ones (``[?, 64] -> [?, 4, 16]``, ``[1, ?, 8] -> [?]``) as long as it stays the
outermost extent of its group. ``mean`` and ``rms_norm`` over a ``?`` dim (whose ``1/N`` would
be a runtime value) are rejected, naming the op.

The patterns live by family in ``_torch_elementwise``, ``_torch_reductions``,
``_torch_contractions`` and ``_torch_movement``, on the shared builders of ``_torch_emit``
and ``_torch_shapes``; :data:`PATTERNS` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import GreedyRewritePatternApplier, PatternRewriteWalker, RewritePattern
from xdsl.utils.exceptions import PassFailedException

from llmopt.dialects import torch as t
from llmopt.lowering._torch_contractions import LowerBmm, LowerLinear, LowerMatmul, LowerSdpa
from llmopt.lowering._torch_elementwise import (
    LowerArange,
    LowerBinary,
    LowerCompare,
    LowerConstant,
    LowerEmbedding,
    LowerLogical,
    LowerLogicalNot,
    LowerPow,
    LowerTo,
    LowerUnary,
    LowerWhere,
)
from llmopt.lowering._torch_movement import (
    LowerCat,
    LowerExpand,
    LowerPermute,
    LowerReshape,
    LowerSlice,
    LowerSliceScatter,
    LowerTranspose,
    LowerUnsqueeze,
)
from llmopt.lowering._torch_reductions import LowerReduction, LowerRmsNorm, LowerSoftmax
from llmopt.lowering._torch_shapes import reshape_map

__all__ = ["PATTERNS", "TorchToPrim", "reshape_map"]

PATTERNS: tuple[type[RewritePattern], ...] = (
    LowerBinary, LowerUnary, LowerCompare, LowerLogical, LowerLogicalNot, LowerWhere, LowerPow,
    LowerTo, LowerConstant, LowerArange,
    LowerReduction, LowerSoftmax, LowerRmsNorm,
    LowerMatmul, LowerBmm, LowerLinear, LowerSdpa,
    LowerTranspose, LowerPermute, LowerReshape, LowerUnsqueeze, LowerExpand, LowerSlice, LowerCat,
    LowerSliceScatter, LowerEmbedding,
)  # fmt: skip
"""The patterns of ``torch-to-prim``, one per torch op (families share one)."""


@dataclass(frozen=True)
class TorchToPrim(ModulePass):
    """Lower Torch IR to Tensor IR: every ``torch.*`` op becomes ``prim.elementwise``,
    ``prim.reduce`` and ``prim.index_map`` ops (see the module docstring)."""

    name = "torch-to-prim"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        walker = PatternRewriteWalker(
            GreedyRewritePatternApplier([p() for p in PATTERNS]),
            apply_recursively=False,
        )
        walker.rewrite_module(op)
        left = sorted({o.name for o in op.walk() if isinstance(o, t.TorchOp)})
        if left:
            raise PassFailedException(f"torch-to-prim left ops it cannot lower: {left}")
