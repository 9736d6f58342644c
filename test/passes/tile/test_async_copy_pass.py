"""``async-copy`` beyond its lit test: the copy width it picks for tiles that are not rows of
the global buffer, element types other than f32, and what it leaves alone."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
from xdsl.dialects import scf
from xdsl.dialects.builtin import ModuleOp

import llmopt
from llmopt.dialects import tile

PRE = ("torch-to-prim,canonicalize,prim-to-loop,fuse-kernels{recompute_limit=0},canonicalize,"
       "cse,loop-to-tile,split-k{split_k=1},register-tile{bm=32 bn=64 tm=2 tn=4}")


def _linear(dtype: str = "float32", k: int = 64) -> ModuleOp:
    torch = pytest.importorskip("torch")
    dt = getattr(torch, dtype)
    lin = torch.nn.Linear(k, 128, bias=False).to(dt)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(32, k, generator=gen).to(dt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return llmopt.capture(lin, (x,))


def _copies(module: ModuleOp) -> list[tile.AsyncCopyOp]:
    return [op for op in module.walk() if isinstance(op, tile.AsyncCopyOp)]


def test_rows_of_the_global_buffer_get_16_byte_copies() -> None:
    module = llmopt.lower(_linear(), PRE + ",stage-inputs{bk=16},async-copy")
    copies = _copies(module)
    assert len(copies) == 4  # two tiles, each filled in the prologue and in the loop
    assert {op.elements for op in copies} == {4}


def test_k_major_tiles_get_4_byte_copies_and_keep_their_meaning() -> None:
    """A K-major tile transposes its rows: a copy may move one element only, still
    asynchronously; the result stays exact through tile-to-kernel."""
    pipeline = (PRE.replace("tn=4}", "tn=4 blocked=1}")
                + ",stage-inputs{bk=16 kmajor=1},async-copy,pad-shared,tile-to-kernel")
    module = llmopt.lower(_linear(), pipeline)
    assert {op.elements for op in module.walk() if op.name == "kernel.async_copy"} == {1}
    report = llmopt.check_numerics(_linear(), pipeline)
    assert report.ok, str(report)


def test_half_precision_rows_get_8_elements_a_copy() -> None:
    module = llmopt.lower(_linear("bfloat16"), PRE + ",stage-inputs{bk=16},async-copy")
    assert {op.elements for op in _copies(module)} == {8}


def test_one_chunk_or_stages_1_leave_the_fills_synchronous() -> None:
    one_chunk = llmopt.lower(_linear(k=32), PRE + ",stage-inputs{bk=32},async-copy")
    off = llmopt.lower(_linear(), PRE + ",stage-inputs{bk=16},async-copy{stages=1}")
    for module in (one_chunk, off):
        assert not _copies(module)
        assert any(op.name == "tile.alloc" for op in module.walk())


def test_negative_stages_are_refused() -> None:
    with pytest.raises(Exception, match="stages must be"):
        llmopt.lower(_linear(), PRE + ",stage-inputs,async-copy{stages=-1}")


def _gate_up() -> ModuleOp:
    """``silu(x·Wgᵀ)·(x·Wuᵀ)``: after fusion one kernel with two reductions."""
    torch = pytest.importorskip("torch")

    class GateUp(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate = torch.nn.Linear(64, 128, bias=False)
            self.up = torch.nn.Linear(64, 128, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.silu(self.gate(x)) * self.up(x)

    gen = torch.Generator().manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return llmopt.capture(GateUp(), (torch.randn(32, 64, generator=gen),))


def _carried(module: ModuleOp) -> list[int]:
    """Index iter_args of each pipelined K loop."""
    return [len(op.iter_args) for op in module.walk() if isinstance(op, scf.ForOp)
            and "llmopt.prefetch" in op.attributes]


@pytest.mark.parametrize(("build", "option", "expected"), [
    (_linear, "", [3]),          # one accumulator tile: counters carried by default
    (_gate_up, "", [0]),         # two (gate and up): slots computed from k0 by default
    (_gate_up, "{carry=1}", [3]),
    (_linear, "{carry=2}", [0]),
])
def test_which_k_loops_carry_their_slots(build: Callable[[], ModuleOp], option: str,
                                         expected: list[int]) -> None:
    """``carry``'s default follows the number of accumulator tiles (see
    ``_schedule.default_carry``); the option overrides it, and both forms stay exact."""
    pipeline = PRE + ",stage-inputs{bk=16},async-copy" + option
    assert _carried(llmopt.lower(build(), pipeline)) == expected
    report = llmopt.check_numerics(build(), pipeline + ",pad-shared,tile-to-kernel")
    assert report.ok, str(report)


def test_alone_lets_the_slots_take_all_of_a_blocks_shared_memory() -> None:
    """Three slots of 48 KiB tiles (bf16, 32 and 64 rows of a 256-element chunk) exceed half
    of what a block may use on sm_90 (the default budget: two blocks a multiprocessor), so
    the loop gets two; with ``alone=1`` the slots may take all of it, and it gets three."""
    pre = PRE + ",stage-inputs{bk=256}"

    def slots(option: str) -> set[int]:
        module = llmopt.lower(_linear("bfloat16", k=1024), pre + f",async-copy{{{option}}}")
        assert _copies(module)
        return {op.result.type.get_shape()[0] for op in module.walk()
                if isinstance(op, tile.AllocOp) and op.space.data == "shared"}

    assert slots("arch=sm_90") == {2}
    assert slots("arch=sm_90 alone=1") == {3}
