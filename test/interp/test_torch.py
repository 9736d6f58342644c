"""Torch IR interpretation, checked against PyTorch itself (float64 on the CPU)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

from llmopt.interp import random_inputs, run

torch = pytest.importorskip("torch")

Parse = Callable[[str], ModuleOp]

# f32 results against a float64 PyTorch reference: dot products and sums of up to 256 terms
# of magnitude ~1 round to ~sqrt(256) * 6e-8 ~ 1e-6 absolute (random-walk growth), and
# softmax/exp amplify relative errors by at most the exponent's magnitude (< 10 here).
F32 = {"rtol": 1e-5, "atol": 1e-5}

MLP = """
func.func @rms_norm_mlp(%w: tensor<256xf32>, %wg: tensor<512x256xf32>, %bg: tensor<512xf32>,
                        %wu: tensor<512x256xf32>, %x: tensor<1x8x256xf32>)
    -> tensor<1x8x512xf32> {
  %eps = torch.constant 1.0e-05 : tensor<f32>
  %0 = torch.pow %x {exponent = 2.0} : tensor<1x8x256xf32> -> tensor<1x8x256xf32>
  %1 = torch.mean %0 {dims = [-1], keepdim = true} : tensor<1x8x256xf32> -> tensor<1x8x1xf32>
  %2 = torch.add %1, %eps : tensor<1x8x1xf32>, tensor<f32> -> tensor<1x8x1xf32>
  %3 = torch.rsqrt %2 : tensor<1x8x1xf32> -> tensor<1x8x1xf32>
  %4 = torch.mul %x, %3 : tensor<1x8x256xf32>, tensor<1x8x1xf32> -> tensor<1x8x256xf32>
  %5 = torch.mul %w, %4 : tensor<256xf32>, tensor<1x8x256xf32> -> tensor<1x8x256xf32>
  %6 = torch.linear %5, %wg, %bg
       : tensor<1x8x256xf32>, tensor<512x256xf32>, tensor<512xf32> -> tensor<1x8x512xf32>
  %7 = torch.linear %5, %wu : tensor<1x8x256xf32>, tensor<512x256xf32> -> tensor<1x8x512xf32>
  %8 = torch.silu %6 : tensor<1x8x512xf32> -> tensor<1x8x512xf32>
  %9 = torch.mul %8, %7 : tensor<1x8x512xf32>, tensor<1x8x512xf32> -> tensor<1x8x512xf32>
  func.return %9 : tensor<1x8x512xf32>
}
"""


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def test_rms_norm_mlp(parse: Parse) -> None:
    module = parse(MLP)
    inputs = random_inputs(module, seed=0)
    inputs[1] /= 16  # keep the linear layers' outputs of order one
    inputs[3] /= 16
    (y,) = run(module, inputs)
    w, wg, bg, wu, x = map(_t, inputs)
    h = w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))
    ref = torch.nn.functional.silu(torch.nn.functional.linear(h, wg, bg)) * (h @ wu.T)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, ref.numpy(), **F32)


def test_attention_data_movement(parse: Parse) -> None:
    module = parse("""
func.func @attention(%q: tensor<1x8x128xf64>, %k: tensor<1x8x128xf64>) -> tensor<1x4x8x8xf64> {
  %0 = torch.reshape %q : tensor<1x8x128xf64> -> tensor<1x8x4x32xf64>
  %1 = torch.transpose %0 {dim0 = 1, dim1 = 2} : tensor<1x8x4x32xf64> -> tensor<1x4x8x32xf64>
  %2 = torch.slice %1 {dim = -1, start = 0, end = 16, step = 1}
       : tensor<1x4x8x32xf64> -> tensor<1x4x8x16xf64>
  %3 = torch.slice %1 {dim = 3, start = 16, end = 32, step = 1}
       : tensor<1x4x8x32xf64> -> tensor<1x4x8x16xf64>
  %4 = torch.neg %3 : tensor<1x4x8x16xf64> -> tensor<1x4x8x16xf64>
  %5 = torch.cat %4, %2 {dim = -1}
       : tensor<1x4x8x16xf64>, tensor<1x4x8x16xf64> -> tensor<1x4x8x32xf64>
  %6 = torch.reshape %k : tensor<1x8x128xf64> -> tensor<1x8x4x32xf64>
  %7 = torch.permute %6 {dims = [0, 2, 3, 1]} : tensor<1x8x4x32xf64> -> tensor<1x4x32x8xf64>
  %8 = torch.matmul %5, %7 : tensor<1x4x8x32xf64>, tensor<1x4x32x8xf64> -> tensor<1x4x8x8xf64>
  %9 = torch.softmax %8 {dim = -1} : tensor<1x4x8x8xf64> -> tensor<1x4x8x8xf64>
  func.return %9 : tensor<1x4x8x8xf64>
}
""")
    q, k = random_inputs(module, seed=1)
    (y,) = run(module, [q, k])
    tq = _t(q).view(1, 8, 4, 32).transpose(1, 2)
    rot = torch.cat([-tq[..., 16:], tq[..., :16]], dim=-1)
    tk = _t(k).view(1, 8, 4, 32).permute(0, 2, 3, 1)
    ref = torch.softmax(rot @ tk, dim=-1)
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-12, atol=1e-15)


UNARY = {
    "exp": torch.exp, "sqrt": lambda t: torch.sqrt(t.abs()), "sigmoid": torch.sigmoid,
    "relu": torch.relu, "tanh": torch.tanh, "neg": torch.neg,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(parse: Parse, name: str) -> None:
    pre = "%a = torch.maximum %x, %x : tensor<4x5xf32>, tensor<4x5xf32> -> tensor<4x5xf32>"
    if name == "sqrt":
        pre = ("%z = torch.neg %x : tensor<4x5xf32> -> tensor<4x5xf32>\n"
               "  %a = torch.maximum %x, %z : tensor<4x5xf32>, tensor<4x5xf32> -> tensor<4x5xf32>")
    module = parse(f"""
func.func @f(%x: tensor<4x5xf32>) -> tensor<4x5xf32> {{
  {pre}
  %y = torch.{name} %a : tensor<4x5xf32> -> tensor<4x5xf32>
  func.return %y : tensor<4x5xf32>
}}
""")
    (x,) = random_inputs(module, seed=2)
    (y,) = run(module, [x])
    np.testing.assert_allclose(y, UNARY[name](_t(x)).numpy(), **F32)


def test_reductions_broadcasts_and_casts(parse: Parse) -> None:
    module = parse("""
func.func @f(%x: tensor<2x3x4xf32>, %b: tensor<2x4x5xf32>, %w: tensor<4xf32>)
    -> (tensor<3xf32>, tensor<2x1x4xf32>, tensor<2x3x5xf64>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) {
  %s = torch.sum %x {dims = [0, 2], keepdim = false} : tensor<2x3x4xf32> -> tensor<3xf32>
  %m = torch.amax %x {dims = [1], keepdim = true} : tensor<2x3x4xf32> -> tensor<2x1x4xf32>
  %p = torch.bmm %x, %b : tensor<2x3x4xf32>, tensor<2x4x5xf32> -> tensor<2x3x5xf32>
  %d = torch.to %p : tensor<2x3x5xf32> -> tensor<2x3x5xf64>
  %u = torch.unsqueeze %w {dim = 0} : tensor<4xf32> -> tensor<1x4xf32>
  %e = torch.expand %u : tensor<1x4xf32> -> tensor<2x3x4xf32>
  %q = torch.div %x, %e : tensor<2x3x4xf32>, tensor<2x3x4xf32> -> tensor<2x3x4xf32>
  %r = torch.sub %q, %m : tensor<2x3x4xf32>, tensor<2x1x4xf32> -> tensor<2x3x4xf32>
  %n = torch.rms_norm %x, %w {normalized_rank = 1, eps = 1.0e-06}
       : tensor<2x3x4xf32>, tensor<4xf32> -> tensor<2x3x4xf32>
  func.return %s, %m, %d, %r, %n
      : tensor<3xf32>, tensor<2x1x4xf32>, tensor<2x3x5xf64>, tensor<2x3x4xf32>, tensor<2x3x4xf32>
}
""")
    x, b, w = random_inputs(module, seed=3)
    s, m, d, r, n = run(module, [x, b, w])
    tx, tb, tw = _t(x), _t(b), _t(w)
    np.testing.assert_allclose(s, tx.sum(dim=(0, 2)).numpy(), **F32)
    np.testing.assert_array_equal(m, x.max(axis=1, keepdims=True))
    assert d.dtype == np.float64
    np.testing.assert_allclose(d, torch.bmm(tx, tb).numpy(), **F32)
    q = tx / tw.expand(2, 3, 4)
    np.testing.assert_allclose(r, (q - tx.amax(dim=1, keepdim=True)).numpy(), rtol=1e-5,
                               atol=1e-4)
    ref = torch.nn.functional.rms_norm(tx, (4,), tw, eps=1e-6)
    np.testing.assert_allclose(n, ref.numpy(), **F32)


LLM_OPS = """
func.func @llm(%w: tensor<11x6xf32>, %ids: tensor<2x3xi64>, %q: tensor<1x4x5x8xf32>,
               %k: tensor<1x2x5x8xf32>, %v: tensor<1x2x5x8xf32>, %m: tensor<5x5xi1>)
    -> (tensor<2x3x6xf32>, tensor<7xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>,
        tensor<5x5xf32>) {
  %e = torch.embedding %w, %ids : tensor<11x6xf32>, tensor<2x3xi64> -> tensor<2x3x6xf32>
  %a = torch.arange {start = 9, end = 2, step = -1} : tensor<7xi64>
  %f = torch.to %a : tensor<7xi64> -> tensor<7xf32>
  %c = torch.cos %f : tensor<7xf32> -> tensor<7xf32>
  %s = torch.sin %f : tensor<7xf32> -> tensor<7xf32>
  %cs = torch.mul %c, %s : tensor<7xf32>, tensor<7xf32> -> tensor<7xf32>
  %causal = torch.sdpa %q, %k, %v {is_causal = true, scale = 0.3, enable_gqa = true}
      : tensor<1x4x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32> -> tensor<1x4x5x8xf32>
  %masked = torch.sdpa %q, %k, %v, %m {is_causal = false, scale = 0.3, enable_gqa = true}
      : tensor<1x4x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<5x5xi1>
      -> tensor<1x4x5x8xf32>
  %zero = torch.constant 0.0 : tensor<f32>
  %one = torch.constant 1.0 : tensor<f32>
  %n = torch.logical_not %m : tensor<5x5xi1> -> tensor<5x5xi1>
  %w2 = torch.where %n, %one, %zero : tensor<5x5xi1>, tensor<f32>, tensor<f32> -> tensor<5x5xf32>
  func.return %e, %cs, %causal, %masked, %w2
      : tensor<2x3x6xf32>, tensor<7xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>,
        tensor<5x5xf32>
}
"""


def test_llm_ops(parse: Parse) -> None:
    module = parse(LLM_OPS)
    inputs = random_inputs(module, seed=1)
    assert inputs[1].max() < 11  # the ids index the embedding's 11 rows
    inputs[5] = np.tril(np.ones((5, 5), bool)) | np.eye(5, k=1, dtype=bool)
    e, cs, causal, masked, where = run(module, inputs)
    w, ids, q, k, v, m = inputs
    F = torch.nn.functional
    np.testing.assert_array_equal(e, w[ids])
    pos = torch.arange(9, 2, -1).double()
    np.testing.assert_allclose(cs, (pos.cos() * pos.sin()).numpy(), **F32)
    tq, tk, tv = _t(q), _t(k), _t(v)
    ref = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True, scale=0.3, enable_gqa=True)
    np.testing.assert_allclose(causal, ref.numpy(), **F32)
    ref = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.from_numpy(m), scale=0.3,
                                         enable_gqa=True)
    np.testing.assert_allclose(masked, ref.numpy(), **F32)
    np.testing.assert_array_equal(where, (~m).astype(np.float32))


def test_embedding_index_out_of_range(parse: Parse) -> None:
    from llmopt.interp import InterpretError

    module = parse("""
func.func @f(%w: tensor<4x2xf32>, %ids: tensor<3xi64>) -> tensor<3x2xf32> {
  %e = torch.embedding %w, %ids : tensor<4x2xf32>, tensor<3xi64> -> tensor<3x2xf32>
  func.return %e : tensor<3x2xf32>
}""")
    with pytest.raises(InterpretError, match="index 4 is out of range for an embedding of 4"):
        run(module, [np.zeros((4, 2)), np.array([0, 4, 1])])
