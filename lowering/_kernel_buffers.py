"""``tile-to-kernel``'s block-local buffers: ``tile.alloc`` shared tiles and register
buffers become ``kernel.shared``/``kernel.local`` declarations."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import MemRefType, UnitAttr
from xdsl.ir import Operation, SSAValue
from xdsl.ir.affine import (
    AffineConstantExpr,
    AffineDimExpr,
    AffineMap,
)
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)

from llmopt.dialects import kernel, loop, tile
from llmopt.dialects.kernel import enclosing_func
from llmopt.dialects.wgmma import SWIZZLE_ATTR
from llmopt.lowering._kernel_emit import hoist_to_func
from llmopt.passes._rewrite import fail


def _register_access(access: Operation, buffer: SSAValue) -> tuple[AffineMap, Sequence[SSAValue]]:
    """The affine map and indices through which ``access`` (a load, a store or a synchronous
    copy) touches the register buffer ``buffer``."""
    if isinstance(access, loop.LoadOp | loop.StoreOp) and access.buffer is buffer:
        return access.map.data, access.indices
    if isinstance(access, tile.CopyOp) and (access.src is buffer) != (access.dst is buffer):
        amap = access.dst_map if access.dst is buffer else access.src_map
        return amap.data, access.indices
    raise fail(access, "a register buffer is only loaded, stored and copied (tile.copy) "
                       "to or from another buffer")


def owning_forall(op: Operation) -> tile.ForallOp | None:
    """The innermost ``tile.forall over block_threads`` around ``op``."""
    parent = op.parent_op()
    while parent is not None and not (
        isinstance(parent, tile.ForallOp) and parent.mapping.data == "block_threads"
    ):
        parent = parent.parent_op()
    return parent


@dataclass
class LowerAlloc(RewritePattern):
    """``tile.alloc shared`` → ``kernel.shared``; ``tile.alloc registers`` → ``kernel.local``
    holding one thread's slice, every access re-indexed without the distributed dimensions
    (a point's own — in a forall over threads or block_threads, or a cooperative
    reduction's body —: the whole buffer)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tile.AllocOp, rewriter: PatternRewriter) -> None:
        fn = enclosing_func(op)
        if fn is None:
            raise fail(op, "tile.alloc outside a kernel")
        typ = op.result.type
        assert isinstance(typ, MemRefType)
        if op.space.data == "shared":
            new = kernel.SharedOp(typ)
            if SWIZZLE_ATTR in op.attributes:  # a layout kernel-to-cuda keeps
                new.attributes[SWIZZLE_ATTR] = op.attributes[SWIZZLE_ATTR]
            new.result.name_hint = op.result.name_hint
            hoist_to_func(fn, new, rewriter)
            rewriter.replace(op, [], [new.result])
            return
        accesses = [(use.operation, _register_access(use.operation, op.result))
                     for use in op.result.uses]
        private = tile.point_private(op)
        distributed: int | None = None
        for access, (amap, indices) in [] if private else accesses:
            forall = owning_forall(access)
            if forall is None or fn.block_shape != (forall.points, 1, 1):
                raise fail(access, "a register buffer is accessed only inside a tile.forall "
                                   "over block_threads with one point per thread")
            n = len(forall.shape)
            leading = amap.results[:n]
            ok = (distributed in (None, n) and tuple(typ.get_shape()[:n]) == forall.shape
                  and all(isinstance(e, AffineDimExpr)
                          and indices[e.position] is iv
                          for e, iv in zip(leading, forall.ivs, strict=True)))
            if not ok:
                raise fail(access, f"a register buffer's leading indices must be the "
                                   f"induction variables of the enclosing forall over "
                                   f"block_threads {list(forall.shape)}")
            distributed = n
        n = distributed or 0
        shape = list(typ.get_shape()[n:]) or [1]
        width = getattr(typ.element_type, "bitwidth", 32)
        size = math.prod(shape) * max(width // 8, 1)
        if size > kernel.MAX_LOCAL_BYTES:
            raise fail(op, f"each thread's slice {shape} of this register buffer is {size} "
                           f"bytes, more than the {kernel.MAX_LOCAL_BYTES} a CUDA thread "
                           "may have")
        local = kernel.LocalOp(MemRefType(typ.element_type, shape))
        local.result.name_hint = op.result.name_hint
        if private:
            local.attributes[kernel.POINT_ATTR] = UnitAttr()
        hoist_to_func(fn, local, rewriter)
        for access, (amap, _) in accesses:
            results = amap.results[n:] or (AffineConstantExpr(0),)
            new_map = AffineMap(amap.num_dims, amap.num_symbols, tuple(results))
            new_access: Operation
            if isinstance(access, loop.LoadOp):
                new_access = loop.LoadOp(local.result, new_map, access.indices)
            elif isinstance(access, loop.StoreOp):
                new_access = loop.StoreOp(access.value, local.result, new_map, access.indices)
            else:
                assert isinstance(access, tile.CopyOp)
                to_local = access.dst is op.result
                new_access = tile.CopyOp(
                    access.src if to_local else local.result,
                    access.src_map.data if to_local else new_map,
                    local.result if to_local else access.dst,
                    new_map if to_local else access.dst_map.data,
                    access.indices, access.elements, access.clamped)
            new_access.attributes |= access.attributes
            rewriter.replace(access, new_access)
        rewriter.erase(op)
