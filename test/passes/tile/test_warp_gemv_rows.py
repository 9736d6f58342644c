"""``warp-gemv``'s rows a block: counted over every block of a product and of its siblings
(the products of one input, such as a decode step's query, key and value projections),
which get one block shape so that ``fuse-launches`` can make them one launch; and its
slices (warps a row), chosen so that a lane waits for memory once where the GPU holds
enough warps."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import llmopt  # noqa: E402
from llmopt import registry  # noqa: E402
from llmopt.frontend.decode import capture_decode  # noqa: E402
from llmopt.frontend.models import build_model  # noqa: E402
from llmopt.passes.tile._gemv_match import match_gemv  # noqa: E402
from llmopt.passes.tile.warp_gemv import (  # noqa: E402
    choose_rows,
    choose_slices,
    sibling_rows,
    sibling_shapes,
)

H100_WARPS = 132 * 32  # at 64 registers a lane


def test_rows_count_every_block() -> None:
    assert choose_rows([(256, 1)], 132) == 1  # 256 blocks of one output
    assert choose_rows([(64, 4)], 132) == 1  # 4 heads x 64: 256 blocks
    assert choose_rows([(128, 4)], 132) == 2  # 4 heads x 128: 256 blocks of 2
    assert choose_rows([(2048, 1), (256, 1), (64, 4)], 132) == 8  # 256 + 32 + 32 blocks
    assert choose_rows([(4, 1)], 132) == 1


@pytest.mark.parametrize("layers", [1, 2])
def test_projections_of_one_input_share_their_rows(layers: int) -> None:
    """In a decode step the query, key and value projections read one normalised vector;
    with 2 layers each kernel sits in a function of its own (``outline-repeated-kernels``)
    and the sharing is seen at the calls. On a GPU of 4 multiprocessors the key and value
    projections alone would take 2 outputs a block; with the queries' they take 8."""
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=1, head_dim=16, vocab_size=101,
        max_position_embeddings=64)
    model = build_model(config, seed=0)
    module = capture_decode(model, 32).module
    to_tile = registry.pipeline_elements(registry.with_arch("lower-to-cuda", "sm_90"))
    names = [name for _, name in to_tile]
    llmopt.lower(module, ",".join(text for text, _ in to_tile[:names.index("warp-gemv")]))
    rows = sibling_rows(module, sms=4)
    alone = {}
    for kernel in rows:
        found = match_gemv(kernel)
        assert found is not None
        outputs = found.forall.shape[found.row]
        alone[kernel] = choose_rows([(outputs, _others(found.forall.shape, found.row))], 4)
    raised = [k.sym_name.data for k in rows if rows[k] > alone[k]]
    assert len(raised) >= 2, {k.sym_name.data: (rows[k], alone[k]) for k in rows}
    assert {rows[k] for k in rows if k.sym_name.data in raised} == {8}


def _others(shape: tuple[int, ...], row: int) -> int:
    total = 1
    for k, extent in enumerate(shape):
        if k != row:
            total *= extent
    return total


def test_slices_split_long_rows_of_few_products() -> None:
    """TinyLlama's decode products in bf16 (8 elements a chunk) on 132 multiprocessors."""
    assert choose_slices([(2048, 1)], 2048 // 8, 4, H100_WARPS) == 2  # 8 chunks a lane → 4
    assert choose_slices([(2048, 1)], 5632 // 8, 4, H100_WARPS) == 2  # down: 22 → 11, not 5.5
    assert choose_slices([(2048, 1)], 5632 // 4, 4, 2 * H100_WARPS) == 4  # f32: 44 → 11
    assert choose_slices([(2048, 1), (256, 1), (64, 4)], 256, 4, H100_WARPS) == 1  # q, k, v
    assert choose_slices([(3584, 1)], 3584 // 8, 4, H100_WARPS) == 1  # Qwen2.5-7B's
    assert choose_slices([(5632, 1)], 256, 4, H100_WARPS) == 1  # gate/up: the GPU is full
    assert choose_slices([(32000, 1)], 256, 4, H100_WARPS) == 1  # logits
    assert choose_slices([(10, 1)], 50, 4, H100_WARPS) == 1  # 2 chunks a lane already
    assert choose_slices([(64, 1)], 200, 4, H100_WARPS) == 2  # ragged either way: 7 → 4
    assert choose_slices([(64, 1)], 1 << 20, 4, H100_WARPS) == 8  # at most 8 warps a row


def test_slices_group_only_products_of_one_input() -> None:
    """In a two-layer bf16 decode step the query, key and value projections (one input)
    get one slice count, and the down projections theirs, although the output projection
    writes the residual stream the down projection adds (a buffer they share): products
    that run one after the other do not count their warps together."""
    config = transformers.LlamaConfig(
        hidden_size=512, intermediate_size=1408, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, vocab_size=101,
        max_position_embeddings=64)
    model = build_model(config, seed=0, dtype=torch.bfloat16)
    module = capture_decode(model, 32).module
    to_tile = registry.pipeline_elements(registry.with_arch("lower-to-cuda", "sm_90"))
    names = [name for _, name in to_tile]
    llmopt.lower(module, ",".join(text for text, _ in to_tile[:names.index("warp-gemv")]))
    warps = 32 * 64  # a GPU of 32 multiprocessors: room for 2 x 512 warps, not 2 x 2048
    shapes = sibling_shapes(module, sms=32, warps=warps)
    by_k: dict[int, set[int]] = {}
    for kernel, (_, slices) in shapes.items():
        found = match_gemv(kernel)
        assert found is not None
        by_k.setdefault(found.k, set()).add(slices)
        outputs = found.forall.shape[found.row]
        if found.k == 1408:  # down: 176 chunks a row, 512 rows
            assert slices == choose_slices([(outputs, 1)], 176, 4, warps) == 2
    assert len(by_k[1408]) == 1 and len(by_k[512]) >= 1
    assert max(by_k[512]) <= 2
