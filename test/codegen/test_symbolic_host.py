"""The host side of a symbolic call on the CPU (:mod:`llmopt.codegen.symbolic`): lengths read
from the inputs' shapes and checked against the bounds, grids and buffer shapes evaluated from
the host function's index arithmetic, the grid checked against its launch's maximum."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import func

import llmopt
from llmopt.codegen.executor import ExecutorError
from llmopt.codegen.symbolic import SymbolicHost, binding_key

HOST = """
kernel.func @double(%a: memref<?x64xf32>, %o: memref<?x64xf32>, %n: index) block [256, 1, 1] {
  kernel.return
}
kernel.func @pairs(%a: memref<?x?xf32>, %n: index) block [128, 1, 1] {
  kernel.return
}
func.func @forward(%x: memref<?x64xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                   %seq: index {llmopt.symbol = "seq", llmopt.max = 300 : i64}) -> memref<?x?xf32> {
  %out = memref.alloc(%seq) : memref<?x64xf32>
  %c64 = arith.constant 64 : index
  %points = arith.muli %seq, %c64 : index
  %c256 = arith.constant 256 : index
  %grid = arith.ceildivui %points, %c256 : index
  kernel.launch @double grid [%grid max 75, 1, 1] block [256, 1, 1] smem 0
      (%x, %out, %seq) : memref<?x64xf32>, memref<?x64xf32>, index
  %sq = memref.alloc(%seq, %seq) : memref<?x?xf32>
  %c3 = arith.constant 3 : index
  %g2 = arith.addi %seq, %c3 : index
  %g3 = arith.divui %g2, %c3 : index
  kernel.launch @pairs grid [%g3 max MAXPAIRS, 1, 1] block [128, 1, 1] smem 0
      (%sq, %seq) : memref<?x?xf32>, index
  func.return %sq : memref<?x?xf32>
}
"""


def host(max_pairs: int = 101) -> SymbolicHost:
    module = llmopt.parse(HOST.replace("MAXPAIRS", str(max_pairs)))
    (fn,) = [op for op in module.ops if isinstance(op, func.FuncOp)]
    return SymbolicHost(fn)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grids_and_shapes_follow_the_length(seed: int) -> None:
    rng = np.random.default_rng(seed)
    length = int(rng.integers(1, 301))
    h = host()
    x = rng.standard_normal((length, 64)).astype(np.float32)
    symbols = h.bind([x])
    assert symbols == {"seq": length}
    call = h.evaluate(symbols)
    assert call.grids == (((length * 64 + 255) // 256, 1, 1), ((length + 3) // 3, 1, 1))
    assert call.shapes == ((length, 64), (length, length))
    assert h.max_shapes() == ((300, 64), (300, 300))


def test_length_above_the_maximum_names_the_argument_and_bound() -> None:
    x = np.random.default_rng(3).standard_normal((301, 64)).astype(np.float32)
    with pytest.raises(ExecutorError, match=r"input 'x' dim 0 is 301, outside \[1, 300\], "
                                            r"the bounds of symbol 'seq'"):
        host().bind([x])


def test_shape_that_does_not_match_is_an_error() -> None:
    x = np.random.default_rng(4).standard_normal((7, 63)).astype(np.float32)
    with pytest.raises(ExecutorError, match=r"input 'x' has shape \[7, 63\].*dim 1 must be 64"):
        host().bind([x])
    with pytest.raises(ExecutorError, match=r"symbol 'seq' is passed as 8, but input 'x' dim 0 "
                                            r"is 7"):
        host().bind([x[:, :1].repeat(64, 1), 8])


def test_a_binding_is_remembered_per_shape_and_a_bad_call_still_fails() -> None:
    rng = np.random.default_rng(5)
    h = host()
    lengths = [int(n) for n in rng.integers(1, 301, size=4)]
    for length in lengths + lengths:  # the second time from the remembered bindings
        x = rng.standard_normal((length, 64)).astype(np.float32)
        assert h.bind([x]) == {"seq": length}
        assert h.bind([x, length]) == {"seq": length}
    x = rng.standard_normal((lengths[0], 64)).astype(np.float32)
    h.bind([x])["seq"] = 0  # the caller's copy: the remembered binding is untouched
    assert h.bind([x]) == {"seq": lengths[0]}
    with pytest.raises(ExecutorError, match="is passed as"):
        h.bind([x, lengths[0] + 1])  # the same shape, another value: its own key
    with pytest.raises(ExecutorError, match="outside"):
        h.bind([rng.standard_normal((301, 64)).astype(np.float32)])
    with pytest.raises(ExecutorError, match="outside"):  # not remembered when it failed
        h.bind([rng.standard_normal((301, 64)).astype(np.float32)])


def test_binding_key_reads_shapes_ints_and_nothing_else() -> None:
    x = np.zeros((3, 64), dtype=np.float32)
    assert binding_key([x, None, 7]) == ((3, 64), None, 7)
    assert binding_key([x, np.int64(7)]) is None  # a NumPy scalar's value is not its shape
    assert binding_key([np.array(7)]) is None  # a 0-d array
    assert binding_key([True]) is None  # a bool is not a length
    torch = pytest.importorskip("torch")
    key = binding_key([torch.empty(3, 64), 7])
    assert key == ((3, 64), 7) and hash(key) == hash(((3, 64), 7))  # torch.Size is its key


def test_grid_above_its_maximum_is_an_error() -> None:
    h = host(max_pairs=50)
    assert h.evaluate({"seq": 147}).grids[1] == (50, 1, 1)
    with pytest.raises(ExecutorError, match=r"kernel.launch @pairs: grid x is 51 at "
                                            r"\{'seq': 150\}, outside \[1, 50\]"):
        h.evaluate({"seq": 150})
