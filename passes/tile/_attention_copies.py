"""The copies in front of an attention chain's operands, inlined into the chain's products.

Attention written out (Hugging Face's eager attention, the op suite's ``naive_attention``)
repeats the key/value heads with ``expand`` + ``reshape`` and transposes ``K`` before
``Q @ Kᵀ``: after ``fuse-kernels`` those are copy kernels (each stores one load of ``K`` or
``V`` at permuted or broadcast coordinates) writing buffers the scores and output products
read. ``fuse-kernels`` keeps copies out of products, whose Tile-IR schedules want plain
buffers; a flash kernel instead reads ``K`` and ``V`` in the form ``sdpa`` is captured in,
``K[…, h floordiv G, j, r]``, which the copy's map composed with the product's load gives.

:func:`inline_operand_copies` makes that composition for a matched chain (see
:mod:`llmopt.passes.tile._attention`) and erases the copies: their buffers are never
written or read, and two launches go with them.
"""

from __future__ import annotations

from xdsl.dialects import memref
from xdsl.rewriter import Rewriter

from llmopt.dialects import loop
from llmopt.passes.loop.fuse_kernels import (
    analyse_producer,
    inline_at,
    is_copy,
    loads_of,
    unbind,
    written_args,
)
from llmopt.passes.tile._attention import Chain, bound


def _copy_into(kernel: loop.KernelOp, load: loop.LoadOp) -> bool:
    """Inline the copy kernel that alone writes the buffer ``load`` (of ``kernel``) reads,
    when ``kernel`` alone reads it; whether it did."""
    outer = bound(kernel, load.buffer)
    if outer is None or not isinstance(outer.owner, memref.AllocOp):
        return False
    others = {use.operation for use in outer.uses} - {kernel}
    if len(others) != 1:
        return False
    (writer,) = others
    if not isinstance(writer, loop.KernelOp):
        return False
    producer = analyse_producer(writer)
    if (producer is None or not is_copy(producer)
            or bound(writer, producer.out_arg) is not outer
            or any(bound(kernel, b) is outer for b in written_args(kernel))):
        return False
    for site in loads_of(kernel, outer):
        inline_at(site, kernel, producer)
    unbind(kernel, outer)
    Rewriter.erase_op(writer)
    if not outer.uses:
        Rewriter.erase_op(outer.owner)  # type: ignore[arg-type]
    return True


def inline_operand_copies(chain: Chain) -> bool:
    """Inline the copies in front of ``Q``, ``K`` (the scores) and ``V`` (the output) into
    the chain's kernels; whether any was (the chain must then be matched again: its loads
    are new ops)."""
    sites: list[tuple[loop.KernelOp, loop.LoadOp]] = [
        (chain.scores.kernel, chain.scores.q), (chain.scores.kernel, chain.scores.k),
        (chain.output.kernel, chain.output.v)]
    done = False
    for kernel, load in sites:
        if load.parent is not None:  # not replaced by an earlier inlining
            done = _copy_into(kernel, load) or done
    return done
