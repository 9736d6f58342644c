"""The Torch- and Tensor-IR interpreters on symbolic programs (``?`` extents, symbol arguments).

One program runs at every length its symbol allows: the length comes from the inputs' shapes
(or is passed and checked), sized ops take their ``index`` operands, ``index_map`` reads its
map symbols; a bad length or shape is an error naming the argument and the bound. The
numbers are checked against numpy in float64.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

from llmopt.interp import InterpretError, random_inputs, run
from llmopt.interp.host import random_lengths
from llmopt.numerics import check_numerics

Parse = Callable[[str], ModuleOp]

TORCH = """
func.func @forward(%w: tensor<16xf32> {llmopt.param = "w"},
                   %x: tensor<1x?x16xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                   %seq: index {llmopt.symbol = "seq", llmopt.max = 100, llmopt.min = 2})
    -> (tensor<1x?x16xf32>, tensor<?xf32>, tensor<?xi64>, tensor<1x?x16xf32>,
        tensor<3x?x16xf32>) {
  %0 = torch.mul %x, %w : tensor<1x?x16xf32>, tensor<16xf32> -> tensor<1x?x16xf32>
  %1 = torch.softmax %0 {dim = 1} : tensor<1x?x16xf32> -> tensor<1x?x16xf32>
  %c16 = arith.constant 16 : index
  %n = arith.muli %seq, %c16 : index
  %2 = torch.reshape %1 [%n] : tensor<1x?x16xf32> -> tensor<?xf32>
  %3 = torch.arange [%seq] {start = 5, step = 3} : tensor<?xi64>
  %c1 = arith.constant 1 : index
  %4 = torch.slice %1 [%c1, %seq] {dim = 1, step = 1} : tensor<1x?x16xf32> -> tensor<1x?x16xf32>
  %5 = torch.expand %1 [%seq] : tensor<1x?x16xf32> -> tensor<3x?x16xf32>
  func.return %1, %2, %3, %4, %5
      : tensor<1x?x16xf32>, tensor<?xf32>, tensor<?xi64>, tensor<1x?x16xf32>, tensor<3x?x16xf32>
}
"""


def reference(w: np.ndarray, x: np.ndarray) -> list[np.ndarray]:
    """What :data:`TORCH` computes, in float64."""
    y = x.astype(np.float64) * w
    e = np.exp(y - y.max(axis=1, keepdims=True))
    s = e / e.sum(axis=1, keepdims=True)
    n = x.shape[1]
    return [s, s.reshape(-1), 5 + 3 * np.arange(n), s[:, 1:], np.broadcast_to(s, (3, n, 16))]


@pytest.mark.parametrize("length", [2, 7, 100])
@pytest.mark.parametrize("level", ["torch", "prim"])
def test_one_program_every_length(parse: Parse, length: int, level: str) -> None:
    module = parse(TORCH)
    if level == "prim":
        from llmopt.api import lower

        lower(module, "torch-to-prim")
        assert not [op for op in module.walk() if op.name.startswith("torch.")]
    rng = np.random.default_rng(length)
    w = rng.standard_normal(16).astype(np.float32)
    x = rng.standard_normal((1, length, 16)).astype(np.float32)
    got = run(module, [w, x])
    for g, want in zip(got, reference(w, x), strict=True):
        assert g.shape == want.shape
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)
    # The symbol may be passed too; it must agree with the shapes.
    explicit = run(module, [w, x, length])
    np.testing.assert_array_equal(explicit[0], got[0])


@pytest.mark.parametrize("args, message", [
    (lambda w: [w, np.zeros((1, 101, 16), np.float32)],
     r"@forward: input 'x' dim 1 is 101, outside \[2, 100\], the bounds of symbol 'seq'"),
    (lambda w: [w, np.zeros((1, 1, 16), np.float32)], r"dim 1 is 1, outside \[2, 100\]"),
    (lambda w: [w, np.zeros((1, 4, 15), np.float32)],
     r"input 'x' has shape \[1, 4, 15\], the function takes tensor<1x\?x16xf32> "
     r"\(dim 2 must be 16\)"),
    (lambda w: [w, np.zeros((4, 16), np.float32)], r"input 'x' has shape \[4, 16\]"),
    (lambda w: [w, np.zeros((1, 4, 16), np.float32), 5],
     r"symbol 'seq' is passed as 5, but input 'x' dim 1 is 4"),
    (lambda w: [w], r"takes 3 \(or 2 without the symbols\) arguments, 1 given"),
])
def test_bad_lengths_and_shapes(parse: Parse, args: Callable[[np.ndarray], list[object]],
                                message: str) -> None:
    module = parse(TORCH)
    with pytest.raises(InterpretError, match=message):
        run(module, args(np.ones(16, np.float32)))


def test_runtime_checks_of_sized_ops(parse: Parse) -> None:
    module = parse("""
func.func @f(%x: tensor<?x4xf32> {llmopt.dynamic = ["n"]},
             %n: index {llmopt.symbol = "n", llmopt.max = 64}, %k: index) -> tensor<?xf32> {
  %0 = torch.reshape %x [%k] : tensor<?x4xf32> -> tensor<?xf32>
  func.return %0 : tensor<?xf32>
}
func.func @g(%x: tensor<?x4xf32> {llmopt.dynamic = ["n"]},
             %n: index {llmopt.symbol = "n", llmopt.max = 64}, %s: index) -> tensor<?x4xf32> {
  %0 = torch.slice %x [%s, %n] {dim = 0, step = 1} : tensor<?x4xf32> -> tensor<?x4xf32>
  func.return %0 : tensor<?x4xf32>
}
""")
    x = np.ones((3, 4), np.float32)
    assert run(module, [x, 3, 12], "f")[0].shape == (12,)
    with pytest.raises(InterpretError, match=r"torch.reshape: cannot reshape \[3, 4\] \(12 "
                       r"elements\) to \[13\]"):
        run(module, [x, 3, 13], "f")
    assert run(module, [x, 3, 1], "g")[0].shape == (2, 4)
    with pytest.raises(InterpretError, match=r"torch.slice: slice bounds \[3, 3\) must satisfy"):
        run(module, [x, 3, 3], "g")


def test_unbound_symbol_must_be_passed(parse: Parse) -> None:
    module = parse("""
func.func @forward(%n: index {llmopt.symbol = "n", llmopt.max = 8}) -> tensor<?xi64> {
  %0 = torch.arange [%n] {start = 0, step = 1} : tensor<?xi64>
  func.return %0 : tensor<?xi64>
}
""")
    np.testing.assert_array_equal(run(module, [5])[0], np.arange(5))
    with pytest.raises(InterpretError, match=r"symbol 'n' is 9, outside its bounds \[1, 8\]"):
        run(module, [9])


def test_prim_map_symbols_and_fills(parse: Parse) -> None:
    module = parse("""
func.func @forward(%x: tensor<?x4xf32> {llmopt.dynamic = ["n"]},
                   %n: index {llmopt.symbol = "n", llmopt.max = 64, llmopt.min = 2})
    -> (tensor<?x4xf32>, tensor<?xi64>, tensor<?x4xf32>) {
  %c1 = arith.constant 1 : index
  %m = arith.subi %n, %c1 : index
  %0 = prim.index_map (%x) [(d0, d1)[s0] -> (d0 + s0, d1)] symbols(%c1) sizes(%m)
       : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %1 = prim.elementwise () sizes(%n) : () -> tensor<?xi64> {
    %i = prim.coord 0 : index
    %v = arith.index_cast %i : index to i64
    prim.yield %v : i64
  }
  %t = arith.addi %n, %n : index
  %2 = prim.index_map (%x, %x) concat 0 [(d0, d1)[s0] -> (d0, d1), (d0, d1)[s0] -> (d0 - s0, d1)]
       symbols(%n) sizes(%t) : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  func.return %0, %1, %2 : tensor<?x4xf32>, tensor<?xi64>, tensor<?x4xf32>
}
""")
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    tail, positions, doubled = run(module, [x])
    np.testing.assert_array_equal(tail, x[1:])
    np.testing.assert_array_equal(positions, np.arange(5))
    np.testing.assert_array_equal(doubled, np.concatenate([x, x]))


def test_random_lengths_and_inputs(parse: Parse) -> None:
    module = parse(TORCH)
    bindings = random_lengths(module, 3, seed=4)
    assert bindings == random_lengths(module, 3, seed=4)
    values = [b["seq"] for b in bindings]
    assert len(set(values)) == 3 and all(2 <= v <= 64 for v in values)
    inputs = random_inputs(module, seed=1, lengths={"seq": 9})
    assert inputs[1].shape == (1, 9, 16) and int(inputs[2]) == 9
    assert [r.shape[1] for r in run(module, inputs)[:1]] == [9]
    assert random_lengths(parse("func.func @f() {\n func.return\n}"), 2) == [{}]


def test_check_numerics_at_several_lengths(parse: Parse) -> None:
    report = check_numerics(parse(TORCH), "torch-to-prim,canonicalize,cse", lengths=3)
    assert report.ok, str(report)
    assert [p.name for p in report.passes] == ["torch-to-prim", "canonicalize", "cse"]
