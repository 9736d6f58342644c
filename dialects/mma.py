"""The ``mma`` dialect: warp-level tensor-core instructions, usable at Tile and Kernel IR.

Like ``arith`` and ``math``, these ops are not a level of their own: a Tile-IR pass
(``mma-fragments``) introduces them inside a ``tile.forall over block_threads``,
``tile-to-kernel`` leaves them as they are, and ``kernel-to-cuda`` prints each as one PTX
instruction (inline ``asm``).

* ``%d0, %d1, %d2, %d3 = mma.sync (%a0, %a1, %a2, %a3) * (%b0, %b1) + (%c0, %c1, %c2, %c3)``
  — PTX ``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32``: the 32 threads of a warp
  together compute ``D = A·B + C`` for a 16×8 (M×K) ``A``, an 8×8 (K×N) ``B`` and a 16×8
  ``C``/``D``. Each thread holds pieces of every matrix; with ``g = lane / 4`` and
  ``t = lane % 4``:

  ====  ==========================================================
  ``a``  ``A[g][t]``, ``A[g+8][t]``, ``A[g][t+4]``, ``A[g+8][t+4]``
  ``b``  ``B[t][g]``, ``B[t+4][g]``
  ``c``  ``C[g][2t]``, ``C[g][2t+1]``, ``C[g+8][2t]``, ``C[g+8][2t+1]`` (``d`` likewise)
  ====  ==========================================================

  The tensor core reads ``a`` and ``b`` as TF32 (the upper 19 bits of each ``f32``: a
  10-bit mantissa, low bits dropped), multiplies exactly and accumulates in ``f32``. Every
  thread of the warp must execute it, with the same ``a``/``b``/``c`` roles.
* ``%h = mma.to_tf32 %x`` — PTX ``cvt.rna.tf32.f32``: ``x`` rounded to the nearest TF32
  value (ties away from zero), as an ``f32``. ``x - h`` is then exact in ``f32`` and holds
  the bits TF32 drops, which is how an ``f32`` product is computed from three TF32 ones
  (``a·b ≈ ah·bh + ah·bl + al·bh``).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import Float32Type, f32
from xdsl.ir import Dialect, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

FRAGMENTS = {"a": 4, "b": 2, "c": 4}
"""Values each thread holds of ``A``, ``B`` and ``C`` in an ``m16n8k8`` TF32 product."""


@irdl_op_definition
class SyncOp(IRDLOperation):
    """``mma.sync``: one warp-wide ``m16n8k8`` TF32 product with ``f32`` accumulation
    (see the module docstring for which thread holds which element)."""

    name = "mma.sync"
    a = var_operand_def(Float32Type)
    b = var_operand_def(Float32Type)
    c = var_operand_def(Float32Type)
    d0 = result_def(f32)
    d1 = result_def(f32)
    d2 = result_def(f32)
    d3 = result_def(f32)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    traits = traits_def(Pure())
    assembly_format = "`(` $a `)` `*` `(` $b `)` `+` `(` $c `)` attr-dict"

    def __init__(self, a: Sequence[SSAValue], b: Sequence[SSAValue],
                 c: Sequence[SSAValue]) -> None:
        super().__init__(operands=[list(a), list(b), list(c)], result_types=[f32] * 4)

    def verify_(self) -> None:
        for role, count in FRAGMENTS.items():
            got = len(getattr(self, role))
            if got != count:
                raise VerifyException(f"mma.sync takes {count} '{role}' values per thread "
                                      f"(m16n8k8, tf32), got {got}")


@irdl_op_definition
class ToTf32Op(IRDLOperation):
    """``mma.to_tf32``: round an ``f32`` to the nearest TF32 value (ties away from zero)."""

    name = "mma.to_tf32"
    value = operand_def(Float32Type)
    result = result_def(Float32Type)
    traits = traits_def(Pure())
    assembly_format = "$value attr-dict"

    def __init__(self, value: SSAValue) -> None:
        super().__init__(operands=[value], result_types=[f32])


Mma = Dialect("mma", [SyncOp, ToTf32Op], [])

__all__ = ["FRAGMENTS", "Mma", "SyncOp", "ToTf32Op"]
