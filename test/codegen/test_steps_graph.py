"""The host side of a graph of several calls (:mod:`llmopt.codegen.graph`): the lengths
table each call copies its lengths from, and the row a replay starts at. The graph itself is
captured and replayed on a GPU (``test/gpu/test_decode_gpu.py``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from llmopt.codegen.graph import GraphReplay, StepsGraph  # noqa: E402
from llmopt.codegen.plan import ExecutorError  # noqa: E402


def _program(stores: list[tuple[int, int, int]], computed: dict[int, int]) -> Any:
    """What :meth:`GraphReplay.lengths_table` reads of a program: symbol ``ctx`` is argument
    3 and ``pos`` argument 4, the lengths buffer is slot 9, and a computed value's slot gives
    ``ctx`` plus its offset in ``computed``."""
    calls: list[dict[str, int]] = []

    def layout_for(symbols: dict[str, int]) -> Any:
        calls.append(dict(symbols))
        return SimpleNamespace(scalars={slot: symbols["ctx"] + offset
                                        for slot, offset in computed.items()})

    return SimpleNamespace(
        symbolic=SimpleNamespace(symbols={"ctx": SimpleNamespace(arg=3),
                                          "pos": SimpleNamespace(arg=4)}),
        _stores=stores, _buffers={9: torch.zeros(2, dtype=torch.int64)}, device="cpu",
        _layout_for=layout_for, calls=calls)


def test_a_table_of_stored_symbols_takes_them_as_given() -> None:
    program = _program([(9, 0, 3), (9, 1, 4)], {})
    rows = [{"ctx": c, "pos": c - 1} for c in (1, 2, 7)]
    table = GraphReplay.lengths_table(program, rows)
    assert table.dtype == torch.int64 and table.tolist() == [[1, 0], [2, 1], [7, 6]]
    assert program.calls == []  # no call layout computed


def test_a_table_of_computed_values_asks_the_call_layouts() -> None:
    program = _program([(9, 0, 3), (9, 1, 12)], {3: 0, 12: 5})
    table = GraphReplay.lengths_table(program, [{"ctx": 2, "pos": 1}, {"ctx": 4, "pos": 3}])
    assert table.tolist() == [[2, 7], [4, 9]]
    assert [c["ctx"] for c in program.calls] == [2, 4]


def test_a_replay_sets_its_row_and_refuses_rows_past_the_table() -> None:
    replays: list[int] = []
    cursor = torch.zeros(1, dtype=torch.long)
    steps = StepsGraph(SimpleNamespace(replay=lambda: replays.append(int(cursor))), cursor,
                       steps=4, rows=10)
    steps.replay(6)
    assert replays == [6]
    for row in (7, -1):
        with pytest.raises(ExecutorError, match=f"4 calls from row {row} pass the lengths "
                                                "table's 10 rows"):
            steps.replay(row)
    assert replays == [6]
