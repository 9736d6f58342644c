"""``llmopt.tools.schedules``: the schedule records of small lowered products, one of each
kind (register tile, tensor cores, split K, a block per output, the one-thread-per-output
fallback), and their summary."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import llmopt  # noqa: E402
from llmopt import registry  # noqa: E402
from llmopt.tools.schedules import (  # noqa: E402
    KernelSchedule,
    ProductShape,
    lower_with_schedules,
    summarize_schedules,
)


def _linear(rows: int, n_in: int, n_out: int) -> object:
    return llmopt.capture(torch.nn.Linear(n_in, n_out, bias=False),
                          (torch.randn(1, rows, n_in),))


def _pipeline(register_tile: str = "", split_k: str = "") -> str:
    """``lower-to-cuda`` with ``register-tile`` and ``split-k`` given these options."""
    out = []
    for text, name in registry.pipeline_elements("lower-to-cuda"):
        if name == "register-tile" and register_tile:
            text = f"register-tile{{{register_tile}}}"
        if name == "split-k" and split_k:
            text = f"split-k{{{split_k}}}"
        out.append(text)
    return ",".join(out)


def _products(records: list[KernelSchedule]) -> list[KernelSchedule]:
    return [r for r in records if r.kind == "product"]


def test_a_register_tile_and_its_split_sum() -> None:
    module = _linear(128, 256, 512)
    records = lower_with_schedules(module, _pipeline(split_k="split_k=2"))
    assert [r.kind for r in records] == ["product", "split_sum"]
    (product,) = _products(records)
    assert product.schedule == "register_tile" and not product.tensor_cores
    assert product.name.endswith("_split") and product.split == 2
    assert product.shape == ProductShape(1, 128, 512, 256)
    assert product.tile is not None and product.blocks is not None
    bm, bn = (int(v) for v in product.tile.split("/")[0].split("x"))
    assert product.blocks == (2, 1, 128 // bm, 512 // bn)
    assert not product.fallback
    assert llmopt.cuda_source(module).count("__global__") == 2  # lowered to the end


def test_the_tensor_core_layout() -> None:
    records = lower_with_schedules(
        _linear(64, 64, 128), _pipeline("bm=64 bn=128 tm=4 tn=8 blocked=3", "split_k=1"))
    (product,) = _products(records)
    assert product.schedule == "tensor_cores" and product.tensor_cores
    assert product.tile == "64x128/4x8" and product.split == 1


def test_a_block_per_output_and_the_fallback() -> None:
    """One row: the row schedule (a block per output, its threads sharing K), then a warp
    per output after ``warp-gemv``; 17 rows of 512 outputs, which no register tile divides:
    a ragged register tile, and before ``register-tile`` one thread per output, a fallback
    of 16 rows or more."""
    (gemv,) = _products(lower_with_schedules(_linear(1, 64, 96), "lower-to-cuda"))
    assert gemv.schedule == "warp_gemv" and gemv.shape == ProductShape(1, 1, 96, 64)
    (coop,) = _products(lower_with_schedules(
        _linear(1, 64, 96), "torch-to-prim,canonicalize,prim-to-loop,fuse-kernels,loop-to-tile"))
    assert coop.schedule == "coop_reduce" and coop.shape == ProductShape(1, 1, 96, 64)
    (tiled,) = _products(lower_with_schedules(_linear(17, 64, 512), "lower-to-cuda"))
    assert tiled.schedule == "register_tile" and not tiled.fallback
    (ragged,) = _products(lower_with_schedules(
        _linear(17, 64, 512), "torch-to-prim,canonicalize,prim-to-loop,fuse-kernels,loop-to-tile"))
    assert ragged.schedule == "thread_per_output" and ragged.fallback
    assert ragged.shape == ProductShape(1, 17, 512, 64)
    as_json = ragged.to_json()
    assert as_json["shape"] == "1x17x512x64" and as_json["rows"] == 17 and as_json["fallback"]
    summary = summarize_schedules([gemv, coop, ragged.to_json()])
    assert summary["warp_gemv"] == 1 and summary["coop_reduce"] == 1
    assert summary["thread_per_output"] == 1
    assert summary["fallback_16"] == 1 and summary["tensor_cores"] == 0


def test_a_pipeline_that_stops_early_still_reports() -> None:
    """Without ``tile-to-kernel`` the records are those of the final Tile IR."""
    records = lower_with_schedules(
        _linear(128, 64, 128),
        "torch-to-prim,canonicalize,prim-to-loop,fuse-kernels,loop-to-tile,register-tile")
    (product,) = _products(records)
    assert product.schedule == "register_tile" and product.shape == ProductShape(1, 128, 128,
                                                                                 64)
