"""Loop IR building blocks of ``prim-to-loop``: runtime extents, buffers for tensors, new
``loop.kernel`` ops and their free loop nests (see :mod:`llmopt.lowering.prim_to_loop`)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects import memref
from xdsl.dialects.builtin import (
    MemRefType,
    ModuleOp,
    TensorType,
    UnrealizedConversionCastOp,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.ir.affine import (
    AffineDimExpr,
    AffineMap,
)
from xdsl.pattern_rewriter import PatternRewriter

from llmopt.dialects import loop, prim
from llmopt.lowering._extents import (
    Extent,
    ExtentError,
    dynamic_values,
    extents_of,
    maximum_of,
)
from llmopt.passes._rewrite import fail


@dataclass(frozen=True)
class Runtime:
    """A ``?`` extent at Loop IR: the ``index`` value holding it and its largest value."""

    value: SSAValue
    max: int


LoopExtent = int | Runtime
"""A loop's trip count: static, or a runtime value with its maximum."""


@dataclass
class Extents:
    """The extents of every ``prim`` op's result and inputs, found before rewriting (the
    search follows operands to the ops that fixed them, which the patterns replace)."""

    results: dict[Operation, tuple[LoopExtent, ...]]
    inputs: dict[Operation, list[tuple[LoopExtent, ...]]]

    @classmethod
    def of(cls, module: ModuleOp) -> Extents:
        results: dict[Operation, tuple[LoopExtent, ...]] = {}
        inputs: dict[Operation, list[tuple[LoopExtent, ...]]] = {}
        for op in module.walk():
            if not op.name.startswith("prim.") or not op.results:
                continue
            if not isinstance(op.results[0].type, TensorType):
                continue
            try:
                results[op] = _loop_extents(extents_of(op.results[0]))
                inputs[op] = [_loop_extents(extents_of(v)) for v in op.operands
                              if isinstance(v.type, TensorType)]
            except ExtentError as err:
                raise fail(op, str(err)) from None
        return cls(results, inputs)


def _loop_extents(extents: Sequence[Extent]) -> tuple[LoopExtent, ...]:
    return tuple(e if isinstance(e, int) else Runtime(e, max(1, maximum_of(e)))
                 for e in extents)


def in_kernel(kernel: loop.KernelOp, extents: Sequence[LoopExtent]) -> list[LoopExtent]:
    """``extents`` with each runtime value replaced by the kernel's argument bound to it."""
    return [e if isinstance(e, int) else Runtime(kernel.bind(e.value), e.max) for e in extents]


def to_memref(typ: Attribute) -> Attribute:
    """The buffer type standing for a tensor type (other types are unchanged)."""
    if isinstance(typ, TensorType):
        return _memref_of(typ)
    return typ


@functools.lru_cache(maxsize=1024)
def _memref_of(typ: TensorType[Attribute]) -> MemRefType[Attribute]:
    """:func:`to_memref` of a tensor type. Attributes are immutable values, and a whole
    model asks for the same few types thousands of times: each is built (and its
    parameters checked) once."""
    return MemRefType(typ.element_type, typ.get_shape())


class _Names:
    """Kernel names unique within one run of the pass: ``<what>_<n>``."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, what: str) -> str:
        name = f"{what}_{self.count}"
        self.count += 1
        return name


def _as_buffer(rewriter: PatternRewriter, value: SSAValue) -> SSAValue:
    cast = UnrealizedConversionCastOp.get([value], [to_memref(value.type)])
    rewriter.insert(cast)
    return cast.results[0]


def _new_kernel(
    rewriter: PatternRewriter, op: Operation, name: str, inputs: Sequence[SSAValue],
    extents: Sequence[LoopExtent] = (),
) -> tuple[loop.KernelOp, list[SSAValue], SSAValue]:
    """Insert ``alloc`` + an empty kernel bound to ``inputs`` and the new output buffer
    (whose ``?`` extents are allocated with the runtime values among ``extents``)."""
    out_type = to_memref(op.results[0].type)
    assert isinstance(out_type, MemRefType)
    buffers = [_as_buffer(rewriter, v) for v in inputs]
    sizes = dynamic_values([e.value if isinstance(e, Runtime) else e for e in extents])
    alloc = memref.AllocOp([SSAValue.get(s) for s in sizes], (), out_type)
    rewriter.insert(alloc)
    kernel = loop.KernelOp(name, [*buffers, alloc.memref])
    rewriter.insert(kernel)
    back = UnrealizedConversionCastOp.get([alloc.memref], [op.results[0].type])
    rewriter.insert(back)
    rewriter.replace(op, [], [back.results[0]])
    args = list(kernel.body.block.args)
    return kernel, args[:-1], args[-1]


def free_nest(block: Block, extents: Sequence[LoopExtent]) -> tuple[Block, list[SSAValue]]:
    """Append a perfect nest of ``loop.for`` over ``extents``; return innermost block, ivs."""
    ivs: list[SSAValue] = []
    for extent in extents:
        loop_op = (loop.ForOp(extent) if isinstance(extent, int)
                   else loop.ForOp(extent.max, bound=extent.value))
        loop_op.iv.name_hint = f"i{len(ivs)}"
        block.add_op(loop_op)
        block = loop_op.body.block
        ivs.append(loop_op.iv)
    return block, ivs


def _identity(rank: int) -> AffineMap:
    return AffineMap(rank, 0, tuple(AffineDimExpr(i) for i in range(rank)))


def _inline_scalar_body(body: Block, into: Block, operands: Sequence[SSAValue],
                        ivs: Sequence[SSAValue]) -> SSAValue:
    """Clone a ``prim.elementwise`` body into ``into`` (``prim.coord d`` becomes ``ivs[d]``);
    return the yielded value."""
    mapping: dict[SSAValue, SSAValue] = dict(zip(body.args, operands, strict=True))
    for op in body.ops:
        if isinstance(op, prim.YieldOp):
            return mapping.get(op.values[0], op.values[0])
        if isinstance(op, prim.CoordOp):
            mapping[op.result] = ivs[op.axis]
            continue
        into.add_op(op.clone(mapping))
    raise AssertionError("verified elementwise bodies end in prim.yield")
