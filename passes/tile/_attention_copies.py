"""The copies in front of an attention chain's operands, inlined into the chain's products.

Attention written out (Hugging Face's eager attention, the op suite's ``naive_attention``)
repeats the key/value heads with ``expand`` + ``reshape`` and transposes ``K`` before
``Q @ Kᵀ``: after ``fuse-kernels`` those are copy kernels (each stores one load of ``K`` or
``V`` at permuted or broadcast coordinates) writing buffers the scores and output products
read. ``fuse-kernels`` keeps copies out of products, whose Tile-IR schedules want plain
buffers; a flash kernel instead reads ``K`` and ``V`` in the form ``sdpa`` is captured in,
``K[…, h floordiv G, j, r]``, which the copy's map composed with the product's load gives.

:func:`inline_operand_copies` makes that composition for a matched chain (see
:mod:`llmopt.passes.tile._attention_chain`) and erases the copies: their buffers are never
written or read, and two launches go with them. A copy is inlined only when the chain's
kernels still match with it inlined (tried on clones of them first): one whose composition
leaves a load the flash kernel cannot take — ``V``'s head dimension merged into another
coordinate, as Hugging Face's repeated heads of a projection's raw output give — stays, and
the flash kernel reads its buffer.
"""

from __future__ import annotations

from xdsl.dialects import memref
from xdsl.ir import SSAValue
from xdsl.rewriter import Rewriter

from llmopt.dialects import loop
from llmopt.passes.loop._fuse_analysis import (
    Producer,
    analyse_producer,
    is_copy,
    loads_of,
    written_args,
)
from llmopt.passes.loop._fuse_rewrite import inline_at, unbind
from llmopt.passes.tile._attention_band import bound
from llmopt.passes.tile._attention_chain import Chain, match_output
from llmopt.passes.tile._attention_scores import match_scores


def _copy_of(kernel: loop.KernelOp, load: loop.LoadOp
             ) -> tuple[SSAValue, loop.KernelOp, Producer] | None:
    """The buffer ``load`` (of ``kernel``) reads, the copy kernel that alone writes it and
    that copy as a :class:`Producer`, when ``kernel`` alone reads the buffer; else
    ``None``."""
    outer = bound(kernel, load.buffer)
    if outer is None or not isinstance(outer.owner, memref.AllocOp):
        return None
    others = {use.operation for use in outer.uses} - {kernel}
    if len(others) != 1:
        return None
    (writer,) = others
    if not isinstance(writer, loop.KernelOp):
        return None
    producer = analyse_producer(writer)
    if (producer is None or not is_copy(producer)
            or bound(writer, producer.out_arg) is not outer
            or any(bound(kernel, b) is outer for b in written_args(kernel))):
        return None
    return outer, writer, producer


def _inline(kernel: loop.KernelOp, copies: list[tuple[SSAValue, loop.KernelOp, Producer]]
            ) -> None:
    """Inline each copy at every load of its buffer in ``kernel``; unbind the buffer."""
    for outer, _, producer in copies:
        for site in loads_of(kernel, outer):
            inline_at(site, kernel, producer)
        unbind(kernel, outer)


def _still_matches(chain: Chain, kernel: loop.KernelOp, trial: loop.KernelOp) -> bool:
    """Whether ``trial`` (``kernel`` of the chain with copies inlined) still matches as the
    scores or the output kernel: a copy whose composition leaves a load the flash kernel
    cannot take (``V``'s head dimension merged into another coordinate) is not inlined."""
    if kernel is chain.scores.kernel:
        return match_scores(trial) is not None
    extents = [lp.trip_count for lp in chain.exp.ivs]
    return match_output(trial, chain.exp.out, chain.sums, len(extents), extents) is not None


def inline_operand_copies(chain: Chain) -> bool:
    """Inline the copies in front of ``Q``, ``K`` (the scores) and ``V`` (the output) into
    the chain's kernels, each when its kernel still matches with it inlined (tried on a
    clone first); whether any was (the chain must then be matched again: its loads are new
    ops)."""
    plan: dict[loop.KernelOp, list[tuple[SSAValue, loop.KernelOp, Producer]]] = {}
    for kernel, load in ((chain.scores.kernel, chain.scores.q),
                         (chain.scores.kernel, chain.scores.k),
                         (chain.output.kernel, chain.output.v)):
        found = _copy_of(kernel, load)
        if found is None or any(found[1] is c[1] for c in plan.get(kernel, [])):
            continue
        trial = kernel.clone()
        _inline(trial, [found])
        fits = _still_matches(chain, kernel, trial)
        trial.erase()
        if fits:
            plan.setdefault(kernel, []).append(found)
    for kernel, copies in plan.items():
        _inline(kernel, copies)
        for outer, writer, _ in copies:
            Rewriter.erase_op(writer)
            if not outer.uses:
                Rewriter.erase_op(outer.owner)  # type: ignore[arg-type]
    return bool(plan)
