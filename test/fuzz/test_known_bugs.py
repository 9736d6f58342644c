"""Inputs the fuzzer found that once crashed ``llm-opt`` (an internal error, exit 2).

Each is the smallest input found for one bug, run the way the fuzzer runs it; all are fixed,
so each test now guards against its bug coming back. Most inputs are bad and must get a
located diagnostic and exit 1 (zero extents are rejected by the Torch- and Tensor-IR
verifiers, ``prim.reduce`` rejects unsigned types, ``prim.index_map`` rejects division by
zero); the others are valid, and the pass that crashed on them now leaves what it cannot
handle alone (exit 0). Bad input that the dialect verifiers now reject is tested where they
are, in ``test/dialects/*-invalid.mlir``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from llmopt.tools import fuzz

#: Inputs too long to write here.
INPUTS = Path(__file__).parent / "Inputs"


@dataclass(frozen=True)
class Bug:
    """A fuzzer find: the input, the ``llm-opt`` arguments after the input file, where the
    bug was, and what must happen now: exit ``status`` (1: with an error at ``located``,
    ``line:column`` of the input)."""

    text: str
    args: tuple[str, ...]
    where: str
    status: int = 1
    located: str = "2:3"


#: name -> the bug
KNOWN_BUGS: dict[str, Bug] = {
    # A zero extent verifies at Torch and Tensor IR, but prim-to-loop turns it into a
    # `loop.for` of extent 0, which the Loop-IR verifier rejects: "the IR does not verify
    # after pass 'prim-to-loop': loop.for extent must be positive, got 0".
    "zero_extent_elementwise": Bug(
        """\
func.func @forward(%x: tensor<0x4xf32>) -> tensor<0x4xf32> {
  %0 = prim.elementwise (%x) : (tensor<0x4xf32>) -> tensor<0x4xf32> {
  ^bb0(%a: f32):
    prim.yield %a : f32
  }
  func.return %0 : tensor<0x4xf32>
}
""",
        ("-p", "prim-to-loop"),
        "lowering/prim_to_loop.py (or a check in dialects/prim.py)",
    ),
    "zero_extent_torch": Bug(
        """\
func.func @forward(%x: tensor<0x4xf32>) -> tensor<0x4xf32> {
  %0 = torch.neg %x : tensor<0x4xf32> -> tensor<0x4xf32>
  func.return %0 : tensor<0x4xf32>
}
""",
        ("-p", "lower-to-cuda"),
        "lowering/prim_to_loop.py (or a check in dialects/torch.py)",
    ),
    # The mean over a zero extent divides by zero while torch-to-prim builds its scale:
    # "internal error in pass 'torch-to-prim': ZeroDivisionError: float division by zero".
    "mean_over_zero_extent": Bug(
        """\
func.func @forward(%x: tensor<2x0xf32>) -> tensor<2x1xf32> {
  %0 = torch.mean %x {dims = [-1], keepdim = true} : tensor<2x0xf32> -> tensor<2x1xf32>
  func.return %0 : tensor<2x1xf32>
}
""",
        ("-p", "torch-to-prim"),
        "lowering/torch_to_prim.py (or a check in dialects/torch.py)",
    ),
    # prim.reduce accepts an unsigned element type, which no reduction below Tensor IR can
    # combine (arith is signless): "the IR does not verify after pass 'prim-to-loop': a
    # reduction yields a float, signless integer or index scalar, got ui32". torch.sum
    # already rejects ui32; prim.reduce should too.
    "unsigned_prim_reduce": Bug(
        """\
func.func @forward(%x: tensor<3x8xui32>) -> tensor<3x1xui32> {
  %s = prim.reduce add %x dims [1] : tensor<3x8xui32> -> tensor<3x1xui32>
  func.return %s : tensor<3x1xui32>
}
""",
        ("-p", "prim-to-loop"),
        "dialects/prim.py (the prim.reduce verifier)",
    ),
    # prim.index_map accepts a division by zero in its map; the Loop-IR verifier rejects the
    # load prim-to-loop makes of it: "the IR does not verify after pass 'prim-to-loop':
    # loop.load: an index divides by zero ('floordiv 0')".
    "index_map_divides_by_zero": Bug(
        """\
func.func @forward(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = prim.index_map (%x) [(d0) -> (d0 floordiv 0)] : (tensor<8xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}
""",
        ("-p", "prim-to-loop"),
        "dialects/prim.py (the prim.index_map verifier)",
    ),
    # A stage fill that stores at an index other than its forall's points (%c4) made
    # async-copy's remapped maps disagree in arity: "internal error in pass 'async-copy':
    # AssertionError". Such a fill is not a fill async-copy (or prefetch-stages) rewrites.
    "fill_stores_off_its_points": Bug(
        (INPUTS / "fill_stores_off_its_points.mlir").read_text(),
        ("-p", "async-copy,prefetch-stages{prefetch=1},tile-to-kernel,kernel-to-cuda",
         "-t", "cuda"),
        "passes/tile/prefetch_stages.py (match_fill)",
        status=0,
    ),
}


@pytest.mark.parametrize("name", sorted(KNOWN_BUGS))
def test_known_bug(name: str, tmp_path: Path) -> None:
    """The input gets a located diagnostic (exit 1), or passes (exit 0); never an internal
    error."""
    bug = KNOWN_BUGS[name]
    path = tmp_path / f"{name}.mlir"
    path.write_text(bug.text)
    status, _, stderr, escaped = fuzz.run_llm_opt([str(path), *bug.args], timeout=60)
    assert escaped is None, escaped
    assert status == bug.status, stderr
    assert "internal error" not in stderr
    if bug.status == 1:
        assert f"{name}.mlir:{bug.located}: error:" in stderr, stderr
