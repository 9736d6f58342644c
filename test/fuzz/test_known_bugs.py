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
    # Two K loops staging into one shared tile: async-copy pipelined the first, replacing
    # the tile while the second still used it: "internal error in pass 'async-copy':
    # ValueError: Attempting to delete SSA value that still has uses". Both stay as they are.
    "two_k_loops_one_tile": Bug(
        (INPUTS / "two_k_loops_one_tile.mlir").read_text(),
        ("-p", "async-copy,prefetch-stages{prefetch=1},pad-shared,tile-to-kernel,canonicalize,"
         "cse,kernel-to-cuda", "-t", "cuda"),
        "passes/tile/async_copy.py (tiles used outside the loop)",
        status=0,
    ),
    # A bf16 product in the tensor-core register layout: mma-fragments took it for an f32
    # one and bitcast its bf16 values as 32-bit words, "the IR does not verify after pass
    # 'mma-fragments': operand and result types must have equal bitwidths". It splits only
    # f32 factors into TF32 parts now and takes bf16/f16 factors only when they are summed in
    # f32 (m16n8k16); this product, summed in bf16, keeps its FMA loop.
    "bf16_product_in_mma_layout": Bug(
        (INPUTS / "bf16_product_in_mma_layout.mlir").read_text(),
        ("-p", "lower-to-cuda", "-t", "cuda"),
        "passes/tile/_mma_match.py (chunk_updates)",
        status=0,
    ),
    # A tensor-core product whose K loop has one step: canonicalize inlines that loop, so
    # the chunk loop sits right in the block's forall, and mma-fragments put its partial
    # sums' allocation after the scf.for it had just made in front of the chunk: "the IR
    # does not verify after pass 'mma-fragments': operand #1 (%part) is used before its
    # definition". They are allocated before that loop is made now.
    "k_loop_of_one_step": Bug(
        (INPUTS / "k_loop_of_one_step.mlir").read_text(),
        ("-p", "lower-to-cuda", "-t", "cuda"),
        "passes/tile/mma_fragments.py (_rewrite)",
        status=0,
    ),
    # A kernel over a length computed by arith.remui from the symbol: loop-to-tile bounds a
    # runtime grid's least value to keep it at one block at least, and raised "ExtentError:
    # cannot bound an extent computed by arith.remui". remui is evaluated like remsi now,
    # and arithmetic it cannot bound (shrui) keeps the floor of one block.
    "extent_by_remui": Bug(
        (INPUTS / "extent_by_remui.mlir").read_text(),
        ("-p", "lower-to-cuda", "-t", "cuda"),
        "lowering/loop_to_tile.py (_may_be_below_one), lowering/_extents.py",
        status=0,
    ),
    "extent_by_shrui": Bug(
        (INPUTS / "extent_by_remui.mlir").read_text().replace("arith.remui %seq",
                                                             "arith.shrui %seq"),
        ("-p", "lower-to-cuda", "-t", "cuda"),
        "lowering/loop_to_tile.py (_may_be_below_one)",
        status=0,
    ),
    # A shared-tile read whose index uses a value computed in the chunk loop (`k0 * 16`,
    # from the index arithmetic before the forall): vector-fragments read it into a
    # fragment before that arithmetic, "Operation using value defined out of its
    # IsolatedFromAbove parent" after the pass. Such a read now stays a scalar load.
    "index_from_the_chunk_loop": Bug(
        (INPUTS / "index_from_the_chunk_loop.mlir").read_text(),
        ("-p", "lower-to-cuda"),
        "passes/tile/_vector_match.py (vectorizable)",
        status=0,
    ),
    # A ring slot carried by a K loop of one step, scaled far past its buffer: the verifier
    # had no range for a loop-carried value, and the access was found out of bounds only
    # once canonicalize had inlined the loop ("the IR does not verify after pass
    # 'canonicalize'"). A value carried by a loop that runs once now has its initial
    # value's range.
    "carried_by_a_one_step_loop": Bug(
        (INPUTS / "carried_by_a_one_step_loop.mlir").read_text(),
        ("-p", "lower-to-cuda"),
        "dialects/loop.py (_carried_once)",
        located="51:13",
    ),
    # A symbolic kernel of two independent loop nests over runtime extents (the divide nest
    # of fuse-kernels-symbolic.mlir, twice): loop-to-tile splits it into two kernels, and
    # computed the second one's grid from the first kernel's body after moving it away
    # ("'block' property of Region class is only available for single-block regions"),
    # then kept the second forall's runtime extents bound to the first kernel's arguments.
    "two_phases_of_runtime_extent": Bug(
        (INPUTS / "two_phases_of_runtime_extent.mlir").read_text(),
        ("-p", "lower-to-cuda", "--check-numerics"),
        "lowering/loop_to_tile.py (runtime_grid, build_unit)",
        status=0,
    ),
    # An integer sum of a row (fuse-kernels.mlir retyped to i64) looks like a
    # matrix-vector product to warp-gemv, whose partial sums start at a float 0.0
    # ("'IntegerType' object has no attribute 'round'"). It now matches float sums only.
    "integer_row_sum": Bug(
        """\
func.func @flattened(%x: tensor<3x8xi64>) -> tensor<12xi64> {
  %s = prim.reduce add %x dims [1] : tensor<3x8xi64> -> tensor<3x1xi64>
  %b = prim.index_map (%s) [(d0) -> ((d0 floordiv 4), 0)] : (tensor<3x1xi64>) -> tensor<12xi64>
  func.return %b : tensor<12xi64>
}
""",
        ("-p", "lower-to-cuda", "--check-numerics"),
        "passes/tile/_gemv_match.py (match_gemv)",
        status=0,
    ),
    # A Tile-IR read of a one-element tile at 31 - %j, %j in [0, 1): out of bounds, but only
    # a constant after lowering and folding, when the Kernel-IR verifier rejected it as "the
    # IR does not verify after pass 'canonicalize'". The Tile-IR verifier now bounds each
    # index over its loops.
    "index_out_of_its_loops_range": Bug(
        """\
func.func @forward(%x: memref<2x1xf32>) -> memref<2x1xf32> {
  %y = memref.alloc() : memref<2x1xf32>
  tile.kernel @rev grid [1, 1, 1] block [1, 1, 1] (%a = %x : memref<2x1xf32>,
                                                    %o = %y : memref<2x1xf32>) {
    tile.forall (%r) in [2] over blocks {
      %t = tile.alloc shared : memref<1xf32>
      tile.forall (%j) in [1] over block_threads {
        %v = loop.load %a[%r, %j] : memref<2x1xf32>
        loop.store %v, %t[%j] : memref<1xf32>
      }
      tile.forall (%j) in [1] over block_threads {
        %v = loop.load %t[31 - %j] : memref<1xf32>
        loop.store %v, %o[%r, %j] : memref<2x1xf32>
      }
    }
  }
  func.return %y : memref<2x1xf32>
}
""",
        ("-p", "lower-to-cuda", "-t", "cuda"),
        "dialects/loop.py (verify_access)",
        located="12:9",
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
