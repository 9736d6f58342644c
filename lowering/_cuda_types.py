"""Scalar types of the C that ``kernel-to-cuda`` writes, and their widths.

The ``cuda`` dialect's scalar types are the builtin ones (``i32`` is ``int``, ``ui32``
``unsigned int``, ``index`` ``long long``), so Kernel IR's types carry over unchanged; the
constants name the few the lowering introduces itself.
"""

from __future__ import annotations

from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    IndexType,
    IntegerType,
    Signedness,
)
from xdsl.ir import Attribute, Operation

from llmopt.dialects import cuda
from llmopt.passes._rewrite import fail

__all__ = ["F32", "I1", "I32", "INDEX", "UI8", "UI16", "UI32", "UI64", "bit_width", "scalar_type",
           "unsigned_type"]

I1 = IntegerType(1)
I32 = IntegerType(32)
UI8 = IntegerType(8, Signedness.UNSIGNED)
UI16 = IntegerType(16, Signedness.UNSIGNED)
UI32 = IntegerType(32, Signedness.UNSIGNED)
UI64 = IntegerType(64, Signedness.UNSIGNED)
F32 = Float32Type()
INDEX = IndexType()


def scalar_type(t: Attribute, op: Operation) -> Attribute:
    """The ``cuda`` type of a Kernel-IR scalar type (the builtin type itself)."""
    if cuda.is_scalar(t):
        return t
    raise fail(op, f"type {t} has no CUDA equivalent")


def unsigned_type(t: Attribute) -> IntegerType:
    """The unsigned integer type of ``t``'s width (``index`` → ``ui64``)."""
    width = 64 if isinstance(t, IndexType) else t.width.data  # type: ignore[attr-defined]
    return IntegerType(width, Signedness.UNSIGNED)


def bit_width(t: Attribute) -> int:
    """The bits of a scalar type (``index``: 64; any other float than 16- or 32-bit: 64)."""
    if isinstance(t, IndexType):
        return 64
    if isinstance(t, IntegerType):
        return t.width.data
    if isinstance(t, Float16Type | BFloat16Type):
        return 16
    if isinstance(t, Float32Type):
        return 32
    return 64
