"""The ``ex`` dialect: ``ex.gelu_tanh``, the tanh approximation of GELU, on tensors.

::

    %y = ex.gelu_tanh %x : tensor<4x64xf32>

computes, at every coordinate, ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))``
— ``torch.nn.functional.gelu(x, approximate="tanh")``, the activation of GPT-2 and Gemma.
The result has the operand's type, so the custom syntax names one type. ``ex-to-prim``
lowers it into Tensor IR, from where llmopt's own pipeline takes over.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import AnyFloat, TensorType
from xdsl.ir import Dialect, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    result_def,
    traits_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

import llmopt


@irdl_op_definition
class GeluTanhOp(IRDLOperation):
    """``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))``, elementwise."""

    name = "ex.gelu_tanh"

    T: ClassVar = VarConstraint("T", base(TensorType))
    input = operand_def(T)
    result = result_def(T)

    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($input)"

    def __init__(self, input: SSAValue) -> None:
        super().__init__(operands=[input], result_types=[input.type])

    def verify_(self) -> None:
        """A floating-point tensor of static shape."""
        typ = self.input.type
        assert isinstance(typ, TensorType)
        if not isinstance(typ.element_type, AnyFloat):
            raise VerifyException(f"expected a floating-point tensor, got {typ}")
        if any(extent < 0 for extent in typ.get_shape()):
            raise VerifyException(f"expected a static shape, got {typ}")


Ex = Dialect("ex", [GeluTanhOp], [])
llmopt.register_dialect(Ex)
