"""What schedule each kernel of a lowered program got, read from its Tile IR.

:func:`schedule_records` walks the ``tile.kernel`` ops of a module after the scheduling passes
(the input of ``tile-to-kernel``) and returns one :class:`KernelSchedule` per kernel: what it
computes (a matrix product, attention, the sum of ``split-k``'s slices, anything else) and how
it is scheduled, as the IR says it — the ``llmopt.schedule`` knobs, the
``tile.forall over blocks`` that spreads the outputs over blocks, ``llmopt.layout = "mma"`` on
the foralls of a tensor-core tile (or ``mma.sync`` ops), ``llmopt.split``, ``llmopt.flash``. A
product is scheduled one of five ways:

========================  ==============================================================
``tensor_cores``          a register tile in the tensor-core layout (``mma.sync``)
``register_tile``         a register tile of FMA micro-tiles (``register-tile``)
``warp_gemv``             one row: a warp per output, 16-byte loads (``warp-gemv``)
``coop_reduce``           a block per output, its threads sharing K (``tile.coop_reduce``)
``thread_per_output``     the fallback: one thread per output, a sequential K loop
========================  ==============================================================

The products' sizes are not all visible once scheduled; :func:`product_shapes` reads them from
the Tile IR before scheduling (after ``loop-to-tile``), by kernel name, and
:func:`schedule_records` takes that map (``split-k`` names the kernel of the slices
``<name>_split``). :func:`lower_with_schedules` lowers a module and returns both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from xdsl.dialects import arith
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation, SSAValue

from llmopt.dialects import loop, mma, tile

__all__ = [
    "KernelSchedule",
    "ProductShape",
    "lower_with_schedules",
    "product_shapes",
    "schedule_records",
    "summarize_schedules",
]

SCHEDULE_ATTR = "llmopt.schedule"
SPLIT_SUFFIX = "_split"
"""What ``split-k`` appends to the name of the kernel computing a product's slices."""


@dataclass(frozen=True)
class ProductShape:
    """A matrix product: ``batch`` products of ``m × k`` by ``k × n``."""

    batch: int
    m: int
    n: int
    k: int

    def __str__(self) -> str:
        return f"{self.batch}x{self.m}x{self.n}x{self.k}"


@dataclass(frozen=True)
class KernelSchedule:
    """The schedule of one kernel, as its Tile IR states it.

    ``kind``: ``product``, ``attention``, ``split_sum`` (adds ``split-k``'s slices) or
    ``other``; ``schedule``: for a product one of ``tensor_cores``, ``register_tile``,
    ``warp_gemv``, ``coop_reduce``, ``thread_per_output`` (see the module docstring), for
    attention
    ``flash``, else the mapping of the kernel's first forall (``blocks``, ``threads``);
    ``tile``: ``bm×bn/tm×tn`` of a register tile; ``split``: K slices; ``shape``: the product's
    size when known; ``blocks``: the extents of its ``tile.forall over blocks``; ``knobs``: the
    ``llmopt.schedule`` dictionary."""

    name: str
    kind: str
    schedule: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    tile: str | None = None
    tensor_cores: bool = False
    split: int = 1
    shape: ProductShape | None = None
    blocks: tuple[int, ...] | None = None
    flash: str | None = None
    knobs: dict[str, int] = field(default_factory=dict[str, int])

    @property
    def fallback(self) -> bool:
        """Whether this is a product left one thread per output."""
        return self.schedule == "thread_per_output"

    def to_json(self) -> dict[str, Any]:
        """The record as JSON-ready values (the shape as ``batch×m×n×k`` and its rows)."""
        out = asdict(self)
        out["shape"] = str(self.shape) if self.shape is not None else None
        out["rows"] = self.shape.m if self.shape is not None else None
        out["fallback"] = self.fallback
        for key in ("grid", "block", "blocks"):
            if out[key] is not None:
                out[key] = list(out[key])
        return out


def _knobs(kernel: tile.KernelOp) -> dict[str, int]:
    from llmopt.passes.tile._schedule import kernel_knobs

    return kernel_knobs(kernel)


def _string_attr(op: Operation, name: str) -> str | None:
    attr = op.attributes.get(name)
    return attr.data if isinstance(attr, StringAttr) else None


def _top_foralls(kernel: tile.KernelOp) -> list[tile.ForallOp]:
    return [op for op in kernel.body.block.ops if isinstance(op, tile.ForallOp)]


def _reads_a_product(reduce: Operation, iv: SSAValue) -> bool:
    """Whether a reduction's body multiplies values loaded from two or more buffers at its
    index (a dot product, not a sum of one buffer)."""
    buffers = {op.buffer for op in reduce.walk()
               if isinstance(op, loop.LoadOp) and iv in op.indices}
    multiplies = any(isinstance(op, arith.MulfOp) for op in reduce.walk())
    return len(buffers) >= 2 and multiplies


def product_shapes(module: ModuleOp) -> dict[str, ProductShape]:
    """The sizes of the matrix products of ``module`` (Tile IR before scheduling: the default
    thread schedule of ``loop-to-tile``), by kernel name."""
    from llmopt.passes.tile.register_tile import match_contraction

    shapes: dict[str, ProductShape] = {}
    for kernel in module.walk():
        if not isinstance(kernel, tile.KernelOp):
            continue
        found = match_contraction(kernel)
        if found is None:
            coop = _coop_product(kernel)  # one row: the row schedule, before warp-gemv
            if coop is not None:
                shapes[kernel.sym_name.data] = _rows_shape(coop[0].shape, coop[1].trip_count)
            continue
        ext = found.extents
        batch = math.prod(ext[d] for d in found.batch)
        shapes[kernel.sym_name.data] = ProductShape(batch, ext[found.m], ext[found.n],
                                                    found.reduce.trip_count)
    return shapes


def _thread_product(kernel: tile.KernelOp) -> tuple[tile.ForallOp, loop.ReduceOp] | None:
    """The forall over threads and the first reduction of a product left in the default
    thread schedule that ``register-tile`` does not match (e.g. a fused gate/up product of
    one row), else ``None``."""
    for forall in _top_foralls(kernel):
        if forall.mapping.data != "threads":
            continue
        for op in forall.body.block.ops:
            if isinstance(op, loop.ReduceOp) and _reads_a_product(op, op.body.block.args[0]):
                return forall, op
    return None


def _rows_shape(extents: Sequence[int], k: int) -> ProductShape:
    """The product shape of outputs ``extents`` (rows along the next-to-last dimension, the
    ones before it a batch) with a reduction of ``k``."""
    return ProductShape(math.prod(extents[:-2]), extents[-2] if len(extents) > 1 else 1,
                        extents[-1], k)


def _coop_product(kernel: tile.KernelOp) -> tuple[tile.ForallOp, tile.CoopReduceOp] | None:
    """The forall over blocks and the cooperative reduction of a product that
    ``loop-to-tile`` gave the row schedule (a block per output), else ``None``."""
    for forall in _top_foralls(kernel):
        if forall.mapping.data != "blocks":
            continue
        for op in forall.body.block.ops:
            if isinstance(op, tile.CoopReduceOp) and _reads_a_product(op, op.iv):
                return forall, op
    return None


def _register_tile(kernel: tile.KernelOp) -> tuple[int, int, int, int, bool] | None:
    """``(bm, bn, tm, tn, tensor_cores)`` of a ``register-tile``d kernel, read from its
    accumulator: the first ``tile.alloc registers`` of its forall over blocks has the shape
    ``[*threads, *micro]`` of the forall marked ``llmopt.role = "init"`` — ``[bm/tm, bn/tn,
    tm, tn]`` for FMA micro-tiles, ``[wm, wn, 8, 4, tm/2, 2, tn/2, 2]`` in the tensor-core
    layout (``llmopt.layout = "mma"``); ``None`` for any other kernel."""
    for blocks in _top_foralls(kernel):
        if blocks.mapping.data != "blocks":
            continue
        ops = list(blocks.body.block.ops)
        accs = [op for op in ops if isinstance(op, tile.AllocOp)
                and op.space.data == "registers"]
        inits = [op for op in ops if isinstance(op, tile.ForallOp)
                 and _string_attr(op, "llmopt.role") == "init"]
        if not accs or not inits:
            continue
        threads = inits[0].shape
        shape = accs[0].result.type.get_shape()  # type: ignore[attr-defined]
        micro = tuple(shape[len(threads):])
        if _string_attr(inits[0], "llmopt.layout") == "mma" and len(threads) == 4 and len(
                micro) == 4:
            tm, tn = 2 * micro[0], 2 * micro[2]
            return threads[0] * 8 * tm, threads[1] * 4 * tn, tm, tn, True
        if len(threads) == 2 and len(micro) == 2:
            tm, tn = micro
            return threads[0] * tm, threads[1] * tn, tm, tn, False
    return None


def _shape_of(name: str, shapes: Mapping[str, ProductShape]) -> ProductShape | None:
    if name in shapes:
        return shapes[name]
    if name.endswith(SPLIT_SUFFIX):
        return shapes.get(name[: -len(SPLIT_SUFFIX)])
    return None


def _record(kernel: tile.KernelOp, shapes: Mapping[str, ProductShape]) -> KernelSchedule:
    from llmopt.passes.tile.register_tile import match_contraction
    from llmopt.passes.tile.warp_gemv import GEMV_ATTR

    name = kernel.sym_name.data
    knobs = _knobs(kernel)
    foralls = _top_foralls(kernel)
    first = foralls[0] if foralls else None
    blocks = first.shape if first is not None and first.mapping.data == "blocks" else None
    common: dict[str, Any] = {"name": name, "grid": kernel.grid_shape,
                              "block": kernel.block_shape, "blocks": blocks, "knobs": knobs}
    flash = _string_attr(kernel, "llmopt.flash")
    if flash is not None:
        tensor_cores = any(isinstance(op, mma.SyncOp) for op in kernel.walk())
        return KernelSchedule(kind="attention", schedule="flash", flash=flash,
                              tensor_cores=tensor_cores, **common)
    split_role = _string_attr(kernel, "llmopt.split")
    if split_role == "total":
        return KernelSchedule(kind="split_sum", schedule=first.mapping.data if first else "-",
                              **common)
    shape = _shape_of(name, shapes)
    found = match_contraction(kernel)
    if found is not None:  # still the default thread schedule: no register tile
        ext = found.extents
        shape = shape or ProductShape(math.prod(ext[d] for d in found.batch), ext[found.m],
                                      ext[found.n], found.reduce.trip_count)
        split = knobs.get("split_k", 1)
        if split_role == "partial" and found.batch:
            split = max(split, ext[found.batch[0]])
        return KernelSchedule(kind="product", schedule="thread_per_output", shape=shape,
                              split=split, **common)
    threads = _thread_product(kernel)
    if threads is not None:
        forall, red = threads
        return KernelSchedule(kind="product", schedule="thread_per_output",
                              shape=shape or _rows_shape(forall.shape, red.trip_count),
                              **common)
    if GEMV_ATTR in kernel.attributes:
        return KernelSchedule(kind="product", schedule="warp_gemv", shape=shape, **common)
    coop = _coop_product(kernel)
    if coop is not None:
        forall, coop_reduce = coop
        return KernelSchedule(kind="product", schedule="coop_reduce",
                              shape=shape or _rows_shape(forall.shape, coop_reduce.trip_count),
                              **common)
    built = _register_tile(kernel)
    if built is not None or {"bm", "bn", "tm", "tn"} <= knobs.keys():
        if built is not None:
            bm, bn, tm, tn, _ = built
        else:
            bm, bn, tm, tn = (knobs[k] for k in ("bm", "bn", "tm", "tn"))
        tensor_cores = (built is not None and built[4]) or any(
            isinstance(op, mma.SyncOp) for op in kernel.walk())
        tile_text = f"{bm}x{bn}/{tm}x{tn}"
        split = knobs.get("split_k", 1)
        if split_role == "partial" and shape is not None and blocks is not None:
            tiles = shape.batch * -(-shape.m // bm) * -(-shape.n // bn)
            split = max(split, math.prod(blocks) // max(1, tiles))
        return KernelSchedule(kind="product",
                              schedule="tensor_cores" if tensor_cores else "register_tile",
                              tile=tile_text, tensor_cores=tensor_cores, split=split,
                              shape=shape, **common)
    return KernelSchedule(kind="other", schedule=first.mapping.data if first else "-",
                          **common)


def schedule_records(module: ModuleOp, shapes: Mapping[str, ProductShape] | None = None
                     ) -> list[KernelSchedule]:
    """One record per ``tile.kernel`` of ``module`` (Tile IR after the scheduling passes), in
    order; ``shapes`` (:func:`product_shapes` of the module before scheduling) supplies the
    sizes of products that are no longer visible."""
    return [_record(op, shapes or {}) for op in module.walk() if isinstance(op, tile.KernelOp)]


def summarize_schedules(records: Sequence[KernelSchedule | Mapping[str, Any]]
                        ) -> dict[str, int]:
    """How many products took each schedule (``tensor_cores``, ``register_tile``,
    ``warp_gemv``, ``coop_reduce``, ``thread_per_output``), how many attention kernels there
    are, and ``fallback_16``: products of 16 rows or more left one thread per output. Takes
    records or their :meth:`KernelSchedule.to_json`."""
    rows = [r.to_json() if isinstance(r, KernelSchedule) else dict(r) for r in records]
    counts = {"tensor_cores": 0, "register_tile": 0, "warp_gemv": 0, "coop_reduce": 0,
              "thread_per_output": 0, "attention": 0, "fallback_16": 0}
    for r in rows:
        if r.get("kind") == "attention":
            counts["attention"] += 1
        elif r.get("kind") == "product":
            counts[r["schedule"]] = counts.get(r["schedule"], 0) + 1
            if r["schedule"] == "thread_per_output" and (r.get("rows") or 0) >= 16:
                counts["fallback_16"] += 1
    return counts


def lower_with_schedules(module: ModuleOp, pipeline: str,
                         lower: Callable[[ModuleOp, str], Any] | None = None
                         ) -> list[KernelSchedule]:
    """Lower ``module`` by ``pipeline`` in place (named pipelines expanded) and return the
    :func:`schedule_records` of its Tile IR as ``tile-to-kernel`` receives it, with the
    products' sizes as ``loop-to-tile`` leaves them. A pipeline without those passes lowers
    the same and returns fewer or no records. ``lower`` is :func:`llmopt.lower` unless given
    (e.g. one that reports progress)."""
    from llmopt import registry
    from llmopt.api import lower as default_lower

    run = lower or default_lower
    pairs = registry.pipeline_elements(pipeline)
    elements = [text for text, _ in pairs]
    names = [name for _, name in pairs]
    cut_shapes = names.index("loop-to-tile") + 1 if "loop-to-tile" in names else 0
    cut_records = names.index("tile-to-kernel") if "tile-to-kernel" in names else len(names)
    cut_shapes = min(cut_shapes, cut_records)
    shapes: dict[str, ProductShape] = {}
    if cut_shapes:
        run(module, ",".join(elements[:cut_shapes]))
        shapes = product_shapes(module)
    if cut_records > cut_shapes:
        run(module, ",".join(elements[cut_shapes:cut_records]))
    records = schedule_records(module, shapes)
    if cut_records < len(elements):
        run(module, ",".join(elements[cut_records:]))
    return records
