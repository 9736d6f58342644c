"""Tests of the PyTorch frontend (``capture``) and of ``torch-to-prim`` on captured programs.

The numeric checks lower captured programs to Tensor IR and run them with the CPU interpreter
(:func:`llmopt.interp.run`), against PyTorch eager on the CPU.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from xdsl.context import Context  # noqa: E402
from xdsl.dialects import arith, builtin, func  # noqa: E402
from xdsl.dialects import math as mathd  # noqa: E402

from llmopt.dialects import prim  # noqa: E402
from llmopt.dialects import torch as torch_dialect  # noqa: E402
from llmopt.frontend.capture import (  # noqa: E402
    INPUT_ATTR,
    PARAM_ATTR,
    CapturedProgram,
    CaptureError,
    capture,
)
from llmopt.interp import run  # noqa: E402
from llmopt.lowering.torch_to_prim import TorchToPrim, reshape_map  # noqa: E402


def _context() -> Context:
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, arith.Arith, mathd.Math, prim.Prim,
                    torch_dialect.Torch):
        ctx.load_dialect(dialect)
    return ctx


def lower_and_run(program: CapturedProgram, inputs: tuple[Any, ...]) -> list[np.ndarray]:
    """torch-to-prim on a clone of the captured module, then evaluate it on ``inputs``."""
    module = program.module.clone()
    TorchToPrim().apply(_context(), module)
    module.verify()
    assert not [op for op in module.walk() if op.name.startswith("torch.")]
    args = [a.detach().numpy() for a in program.arguments(*inputs)]
    return run(module, args)


def op_names(program: CapturedProgram) -> list[str]:
    return [op.name for op in program.func.body.block.ops]


def check_numerics(fn: Callable[..., Any], inputs: tuple[Any, ...], *, rtol: float = 1e-5,
                   atol: float = 1e-6) -> CapturedProgram:
    """Capture ``fn``, lower it to prim and compare with eager PyTorch."""
    program = capture(fn, inputs)
    program.module.verify()
    with torch.no_grad():
        expected = fn(*inputs)
    expected_list = list(expected) if isinstance(expected, tuple | list) else [expected]
    got = lower_and_run(program, inputs)
    assert len(got) == len(expected_list) == program.output_count
    for g, e in zip(got, expected_list, strict=True):
        e_np = e.detach().numpy()
        assert g.shape == e_np.shape
        assert g.dtype == e_np.dtype
        np.testing.assert_allclose(g, e_np, rtol=rtol, atol=atol)
    return program


# --- models -------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    """The Hugging Face Llama RMSNorm."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class MLPBlock(nn.Module):
    """RMSNorm, then a gated MLP with biased gate projection."""

    def __init__(self, dim: int = 16, hidden: int = 24) -> None:
        super().__init__()
        self.norm = RMSNorm(dim)
        self.gate = nn.Linear(dim, hidden)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def _rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype)


def setup_module() -> None:
    torch.manual_seed(0)


# --- capture: structure -------------------------------------------------------------------------


def test_rms_norm_module() -> None:
    model = RMSNorm(32).eval()
    program = capture(model, (_rand(1, 8, 32),))
    program.module.verify()
    assert op_names(program) == [
        "torch.pow", "torch.mean", "torch.constant", "torch.add", "torch.rsqrt", "torch.mul",
        "torch.mul", "func.return",
    ]  # fmt: skip
    assert program.param_names == ["weight"]
    assert program.input_names == ["hidden_states"]
    assert program.output_count == 1
    assert torch.equal(program.params["weight"], model.weight.detach())
    text = str(program.module)
    assert "torch.mean %pow {dims = [-1], keepdim = true} : tensor<1x8x32xf32> -> " \
           "tensor<1x8x1xf32>" in text
    assert "torch.constant 1.0e-06 : tensor<f32>" in text


def test_argument_attributes_and_order() -> None:
    program = capture(MLPBlock().eval(), (_rand(2, 16),))
    fn = program.func
    assert fn.arg_attrs is not None
    attrs = [dict(d.data) for d in fn.arg_attrs.data]
    names = [str(a.get(PARAM_ATTR, a.get(INPUT_ATTR)).data) for a in attrs]
    assert names == ["norm.weight", "gate.weight", "gate.bias", "up.weight", "down.weight", "x"]
    assert [PARAM_ATTR in a for a in attrs] == [True] * 5 + [False]
    assert program.param_names == names[:5]
    assert "torch.linear" in op_names(program)
    assert "torch.silu" in op_names(program)
    # Weights are arguments, never constants in the IR.
    assert len(str(program.module)) < 4000


def test_softmax_linear_with_bias() -> None:
    model = nn.Sequential(nn.Linear(8, 6), nn.Softmax(dim=-1))
    program = capture(model, (_rand(3, 8),))
    assert op_names(program) == ["torch.linear", "torch.softmax", "func.return"]
    assert program.param_names == ["0.weight", "0.bias"]
    text = str(program.module)
    assert "torch.linear %input, %0, %1 : tensor<3x8xf32>, tensor<6x8xf32>, tensor<6xf32> -> " \
           "tensor<3x6xf32>" in text
    assert "torch.softmax %linear {dim = -1} : tensor<3x6xf32> -> tensor<3x6xf32>" in text


def test_function_inputs_are_named() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.silu(a) * b

    program = capture(f, (_rand(4, 8), _rand(4, 8)))
    assert program.input_names == ["a", "b"]
    assert program.param_names == []
    assert op_names(program) == ["torch.silu", "torch.mul", "func.return"]


def test_data_movement_ops() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x.view(2, 4, 8).transpose(1, 2)
        z = torch.cat([y[..., :2], -y[..., 2:]], dim=-1)
        return z.reshape(-1), x.unsqueeze(0).expand(3, -1, -1).permute(2, 0, 1)

    program = capture(f, (_rand(8, 8),))
    names = op_names(program)
    for name in ("torch.reshape", "torch.transpose", "torch.slice", "torch.neg", "torch.cat",
                 "torch.unsqueeze", "torch.expand", "torch.permute"):
        assert name in names, name
    assert program.output_count == 2


def test_dtype_cast_is_explicit() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.to(torch.float64) * y

    program = capture(f, (_rand(4), _rand(4, dtype=torch.float64)))
    assert op_names(program) == ["torch.to", "torch.mul", "func.return"]


def test_identity_and_noop_ops_vanish() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.clone().contiguous().detach().to(torch.float32) + 1

    program = capture(f, (_rand(4),))
    assert op_names(program) == ["torch.constant", "torch.add", "func.return"]


def test_unsupported_op_names_op_and_line() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, 0) + 1

    line = inspect.getsourcelines(f)[1] + 1
    with pytest.raises(CaptureError) as info:
        capture(f, (_rand(4),))
    message = str(info.value)
    assert "cumsum" in message
    assert f"{__file__}:{line}" in message
    assert "torch.cumsum(x, 0)" in message


def test_integer_inputs_are_captured() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    program = check_numerics(f, (torch.arange(4),))
    assert "tensor<4xi64>" in str(program.module)


def test_unsupported_dtypes_are_rejected() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    with pytest.raises(CaptureError, match="unsupported dtype torch.uint8"):
        capture(f, (torch.arange(4, dtype=torch.uint8),))


def test_captured_text_round_trips() -> None:
    from xdsl.parser import Parser

    program = capture(MLPBlock().eval(), (_rand(1, 3, 16),))
    text = str(program.module)
    reparsed = Parser(_context(), text).parse_module()
    reparsed.verify()
    assert str(reparsed) == text


def test_torch_not_imported_by_dialect() -> None:
    import subprocess
    import sys

    code = "import sys, llmopt.dialects.torch; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- torch-to-prim: numerics against eager PyTorch ----------------------------------------------


def test_numeric_rms_norm() -> None:
    check_numerics(RMSNorm(32).eval(), (_rand(2, 5, 32),))


def test_numeric_block() -> None:
    program = check_numerics(MLPBlock().eval(), (_rand(1, 6, 16),), rtol=1e-4, atol=1e-5)
    assert "torch.linear" in op_names(program)


def test_numeric_softmax_and_linear_bias() -> None:
    lin = nn.Linear(8, 6)

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(lin(x) * 3.0, dim=-1)

    check_numerics(f, (_rand(3, 8),))


def test_numeric_silu_mul() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.silu(a) * b

    check_numerics(f, (_rand(4, 8), _rand(4, 8)))


def test_numeric_unary_and_binary() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        pos = torch.sigmoid(x) + 0.5
        return (
            torch.exp(x) - y,
            torch.sqrt(pos) / y,
            torch.rsqrt(pos),
            torch.relu(x),
            torch.tanh(x),
            -x,
            torch.maximum(x, y),
            torch.minimum(x, y),
            x.clamp(-0.5, 0.5),
            pos ** 1.5,
            pos ** -1,
            1.0 - x,
            x.pow(3) + 2 * y,
            torch.sub(x, y, alpha=2),
        )

    check_numerics(f, (_rand(3, 4), _rand(4)))


def test_numeric_reductions() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            x.sum(dim=(0, 2)),
            x.mean(-1, keepdim=True),
            x.amax(dim=1),
            x.amin(dim=1),
            x.amin(dim=(0, 2), keepdim=True),
            x.sum(),
            x.mean(),
            x.amin(),
        )

    check_numerics(f, (_rand(2, 3, 4),))


def _with_nan_and_inf(*shape: int, seed: int, dtype: torch.dtype = torch.float32
                      ) -> torch.Tensor:
    """Seeded random values with a NaN, +inf and -inf, and a whole NaN first row."""
    torch.manual_seed(seed)
    x = torch.randn(*shape).to(dtype)
    flat = x.view(-1)
    flat[-1], flat[-2], flat[-3] = float("nan"), float("inf"), float("-inf")
    x[0] = float("nan")
    return x


def test_numeric_minimum_amin_clamp_with_nan_and_inf() -> None:
    """``minimum``, ``amin`` and every form of ``clamp`` propagate NaN (of the input and of a
    bound) and keep infinities, as PyTorch does."""
    def f(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            torch.minimum(x, lo),
            x.amin(dim=1),
            x.amin(dim=0, keepdim=True),
            x.clamp(min=0.25),
            x.clamp(max=-0.25),
            x.clamp(-0.5, 0.75),
            x.clamp(0.5, -0.5),  # min > max: every non-NaN element is max
            x.clamp(lo, hi),
            x.clamp(min=lo),
            x.clamp(max=hi),
            torch.clamp_min(x, -1.0),
            torch.clamp_max(x, 1.0),
            torch.clamp_min(x, lo),
            torch.clamp_max(x, hi),
            x.clip(-1, 1),
            F.hardtanh(x),
            F.hardtanh(x, -2.0, 3.0),
            F.relu6(x * 4),
        )

    x = _with_nan_and_inf(5, 8, seed=11)
    lo, hi = torch.randn(8) - 1.0, torch.rand(5, 1) + 0.5
    lo[3] = float("nan")
    assert x.isnan().any() and x.isinf().any() and lo.isnan().any()
    check_numerics(f, (x, lo, hi), rtol=0, atol=0)


def test_numeric_two_operand_max_min_and_full_reductions() -> None:
    """``torch.max(x, y)``/``torch.min(x, y)`` are ``maximum``/``minimum``; ``x.max()``/
    ``x.min()`` reduce every dim to a 0-d result, NaN-propagating."""
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.max(x, y), torch.min(x, y), x.max(), y.min(), y.max() - x.min()

    x = _with_nan_and_inf(5, 8, seed=12)
    y = torch.randn(8)
    program = check_numerics(f, (x, y), rtol=0, atol=0)
    names = op_names(program)
    assert names.count("torch.maximum") == 1 and names.count("torch.amax") == 2


def ties_nan_and_inf(*shape: int, seed: int, dtype: torch.dtype = torch.float32
                           ) -> torch.Tensor:
    """Seeded small random integers (every row and column holds ties) of ``dtype``; for
    floats also two NaNs in row 1, two ``+inf`` in row 2, a row of ``-inf`` and a NaN at the
    start of the last row (rows: the last dim)."""
    torch.manual_seed(seed)
    x = torch.randint(-3, 4, shape).to(dtype)
    if dtype.is_floating_point:
        rows = x.view(-1, shape[-1])
        rows[1, 1] = rows[1, 4] = float("nan")
        rows[2, 0] = rows[2, 3] = float("inf")
        rows[3] = float("-inf")
        rows[-1, 0] = float("nan")
    return x


def _arg_extremes(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Every form of ``argmax``/``argmin`` and ``max``/``min`` along a dim: negative dims,
    ``keepdim`` both ways, no dim (the flattened index)."""
    values, indices = x.max(1)
    low = torch.min(x, dim=-1, keepdim=True)
    return (
        x.argmax(-1), x.argmin(1), torch.argmax(x, 0, keepdim=True), x.argmin(-2, keepdim=True),
        x.argmax(), torch.argmin(x), torch.argmax(x, keepdim=True),
        values, indices, low.values, low.indices, x.min(0)[1], x.max(-3, keepdim=True)[0],
    )


def _check_torch_ir(program: CapturedProgram, fn: Callable[..., Any], inputs: tuple[Any, ...]
                    ) -> None:
    """The captured Torch IR itself, in its interpreter, gives ``fn``'s results exactly."""
    got = run(program.module, [a.detach().numpy() for a in program.arguments(*inputs)])
    want = fn(*inputs)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.detach().numpy().dtype
        np.testing.assert_array_equal(g, w.detach().numpy())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64, torch.int64,
                                   torch.int32], ids=str)
def test_numeric_argmax_argmin_and_max_min_along_a_dim(dtype: torch.dtype) -> None:
    """The first index of the extreme wins a tie, a NaN is the extreme of its row (its first
    NaN wins), ``±inf`` are ordinary values; the indices are ``int64`` and the values are
    the input's type, as in PyTorch (Tensor IR and Torch IR interpreters, exactly)."""
    x = ties_nan_and_inf(3, 5, 7, seed=sum(map(ord, str(dtype))), dtype=dtype)
    program = check_numerics(_arg_extremes, (x,), rtol=0, atol=0)
    _check_torch_ir(program, _arg_extremes, (x,))
    names = op_names(program)
    assert "torch.ne" in names if dtype.is_floating_point else "torch.ne" not in names


def test_numeric_max_min_along_a_dim_of_bool_and_rank_0() -> None:
    """``max(dim)`` of a bool tensor compares it as ``i32`` and gives bools back; a rank-0
    tensor's argmax is 0."""
    def f(m: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (*m.max(-1), *m.min(0, keepdim=True), s.argmax(), s.max(0)[1], s.argmin(0,
                keepdim=True))

    torch.manual_seed(8)
    m = torch.rand(4, 6) > 0.5
    program = check_numerics(f, (m, torch.tensor(2.5)), rtol=0, atol=0)
    _check_torch_ir(program, f, (m, torch.tensor(2.5)))


def test_argmax_is_amax_eq_isnan_where_iota_amin() -> None:
    """``argmax(x, 1)`` is captured as the composition of existing ops that gives PyTorch's
    first index: ``amax`` (kept dim), ``eq``, ``ne(x, x)`` (NaN), ``logical_or``, ``arange``
    on the dim, ``where`` (the index, or the extent), ``amin`` of the indices (``i64``)."""
    text = str(capture(lambda x: x.argmax(1), (_rand(2, 5, 3),)).module)
    body = [line.strip() for line in text.splitlines() if "= torch." in line]
    assert body == [
        "%0 = torch.amax %x {dims = [1], keepdim = true} : tensor<2x5x3xf32> -> tensor<2x1x3xf32>",
        "%1 = torch.eq %x, %0 : tensor<2x5x3xf32>, tensor<2x1x3xf32> -> tensor<2x5x3xi1>",
        "%2 = torch.ne %x, %x : tensor<2x5x3xf32>, tensor<2x5x3xf32> -> tensor<2x5x3xi1>",
        "%3 = torch.logical_or %1, %2 : tensor<2x5x3xi1>, tensor<2x5x3xi1> -> tensor<2x5x3xi1>",
        "%4 = torch.arange {start = 0, end = 5, step = 1} : tensor<5xi64>",
        "%5 = torch.reshape %4 : tensor<5xi64> -> tensor<5x1xi64>",
        "%6 = torch.constant 5.0 : tensor<i64>",
        "%7 = torch.where %3, %5, %6 : tensor<2x5x3xi1>, tensor<5x1xi64>, tensor<i64> "
        "-> tensor<2x5x3xi64>",
        "%argmax = torch.amin %7 {dims = [1], keepdim = false} : tensor<2x5x3xi64> "
        "-> tensor<2x3xi64>",
    ], text


def test_max_along_a_dim_shares_its_amax() -> None:
    """``x.max(dim)`` is one ``amax``: its values (reshaped when the dim is dropped) and the
    argmax built on it; the values alone keep no index ops."""
    names = op_names(capture(lambda x: x.max(-1), (_rand(4, 6),)))
    assert names.count("torch.amax") == 1 and names.count("torch.amin") == 1
    names = op_names(capture(lambda x: x.min(0).values, (_rand(4, 6),)))
    assert [n for n in names if n != "func.return"] == ["torch.amin", "torch.reshape"], names


def test_argmax_along_a_symbolic_dim_is_a_capture_error() -> None:
    """Along a static dim of a program with a symbolic extent it is captured (the ``?``
    kept) and right at every length; along the symbolic dim, or over every element, it is a
    diagnostic."""
    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (*x.max(-1), x.argmin(-1, keepdim=True))

    program = capture(f, (torch.randn(1, 5, 8),), dynamic={"x": {1: "seq"}}, max={"seq": 16})
    assert "-> (tensor<1x?xf32>, tensor<1x?xi64>, tensor<1x?x1xi64>)" in str(program.module)
    for length in (4, 11):
        x = ties_nan_and_inf(1, length, 8, seed=length)
        for got, want in zip(run(program.module, [x.numpy()]), f(x), strict=True):
            np.testing.assert_array_equal(got, want.numpy())
    for fn, what in [(lambda x: x.argmin(1), r"aten\.argmin\.default along the symbolic dim 1"),
                     (lambda x: x.max(-2), r"aten\.max\.dim along the symbolic dim 1"),
                     (lambda x: x.argmax(), r"aten\.argmax\.default over every element")]:
        with pytest.raises(CaptureError, match=what + ".* is not supported"):
            capture(fn, (torch.randn(1, 5, 8),), dynamic={"x": {1: "seq"}}, max={"seq": 16})


def test_clamp_is_maximum_then_minimum() -> None:
    def f(x: torch.Tensor, lo: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x.clamp(-1, 2), x.clamp(min=lo), torch.clamp_max(x, 3.0), F.relu6(x)

    names = [n for n in op_names(capture(f, (_rand(4), _rand(4)))) if n != "torch.constant"]
    assert names == ["torch.maximum", "torch.minimum", "torch.maximum", "torch.minimum",
                     "torch.maximum", "torch.minimum", "func.return"]


def test_numeric_minimum_and_clamp_on_integers_and_float16() -> None:
    def f(i: torch.Tensor, j: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.minimum(i, j), i.clamp(-3, 4), i.clamp(min=j), i.clamp(min=1.5),
                F.relu6(j), torch.minimum(h, h[1]), h.amin(-1), h.clamp(-0.3, 0.7),
                i.amin(-1), j.amax(0, keepdim=True))

    torch.manual_seed(5)
    i = torch.randint(-9, 9, (4, 6))
    j = torch.randint(-9, 9, (6,), dtype=torch.int32)
    h = _with_nan_and_inf(4, 6, seed=6, dtype=torch.float16)
    program = check_numerics(f, (i, j, h), rtol=0, atol=0)
    text = str(program.module)
    assert "torch.minimum %i, %0 : tensor<4x6xi64>, tensor<6xi64>" in text  # j promoted
    assert "torch.amin %h {dims = [-1], keepdim = false} : tensor<4x6xf16>" in text
    assert "torch.amin %i {dims = [-1], keepdim = false} : tensor<4x6xi64>" in text


@pytest.mark.parametrize("fn,inputs,message", [
    (lambda x: x.amin(1), (torch.ones(2, 3, dtype=torch.bool),),
     r"aten\.amin\.default.*torch\.amin does not take i1 operands"),
    (lambda x, y: torch.minimum(x, y), (torch.ones(3, dtype=torch.bool),) * 2,
     r"aten\.minimum\.default.*torch\.minimum does not take i1 operands"),
])
def test_unsupported_min_dtypes_are_capture_errors(fn: Callable[..., Any],
                                                    inputs: tuple[Any, ...], message: str) -> None:
    """``i1`` ``amin`` (like ``amax``) and ``i1`` ``minimum`` (like ``maximum``) are
    diagnostics naming the op and the dtype."""
    with pytest.raises(CaptureError, match=message):
        capture(fn, inputs)


def test_numeric_data_movement() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x.view(2, 4, 6).transpose(1, 2)
        rot = torch.cat([-y[..., 2:], y[..., :2]], dim=-1)
        return (
            rot,
            y.reshape(12, 4),
            x.reshape(3, 16),
            x.flatten(),
            x.unsqueeze(1).expand(8, 5, 6),
            x.permute(1, 0),
            x[1:7:3, ::2],
            x[2],
            torch.cat([x, x * 2, x[:1]], dim=0),
            x.t(),
        )

    check_numerics(f, (_rand(8, 6),))


def test_numeric_matmul_forms() -> None:
    def f(a: torch.Tensor, b: torch.Tensor, v: torch.Tensor, c: torch.Tensor
          ) -> tuple[torch.Tensor, ...]:
        return (
            a @ b,  # batched, broadcast batch dims: [2, 1, 3, 4] @ [5, 4, 6]
            torch.bmm(c, c.transpose(1, 2)),
            v @ b,  # 1-D @ batched
            a @ v,  # batched @ 1-D
            torch.mm(c[0], c[1].t()),
            torch.matmul(v, v),
        )

    check_numerics(f, (_rand(2, 1, 3, 4), _rand(5, 4, 6), _rand(4), _rand(2, 3, 5)),
                   rtol=1e-5, atol=1e-5)


def test_numeric_linear_3d_and_float64() -> None:
    lin = nn.Linear(8, 5).double()

    def f(x: torch.Tensor) -> torch.Tensor:
        return lin(x) + F.rms_norm(x, (8,), eps=1e-5).sum(-1, keepdim=True)

    check_numerics(f, (_rand(2, 3, 8, dtype=torch.float64),), rtol=1e-12, atol=1e-12)


def test_numeric_rms_norm_op_with_weight() -> None:
    weight = torch.randn(2, 4)

    def f(x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (2, 4), weight=weight, eps=1e-6)

    program = check_numerics(f, (_rand(3, 2, 4),))
    assert "torch.rms_norm" in op_names(program)


def test_numeric_float16_casts() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x.to(torch.float16) * 2).to(torch.float32)

    check_numerics(f, (_rand(6),))


def test_numeric_split_chunk_unbind() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a, b = x.chunk(2, dim=-1)
        c, d, e = x.split([1, 2, 3], dim=0)
        rows = x.unbind(0)
        return a * b, c.sum() + d.mean() + e.amax(), rows[2] - rows[5]

    program = check_numerics(f, (_rand(6, 4),))
    assert op_names(program).count("torch.slice") == 7


def test_training_mode_is_restored() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train()
    model[0].eval()
    program = capture(model, (_rand(2, 4),))
    assert op_names(program) == ["torch.linear", "func.return"]  # exported in eval mode
    assert model.training and not model[0].training and model[1].training


def test_numeric_float16_model() -> None:
    model = nn.Sequential(nn.Linear(16, 8), nn.Softmax(dim=-1)).half()

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return model(x), x.mean(-1, keepdim=True)

    program = check_numerics(f, (_rand(4, 16, dtype=torch.float16),), rtol=1e-2, atol=1e-3)
    assert "f16" in str(program.module)


# --- torch-to-prim: structure -------------------------------------------------------------------


def test_reshape_map_keeps_straight_dims() -> None:
    assert str(reshape_map((1, 8, 512), (1, 8, 4, 128))) == \
        "(d0, d1, d2, d3) -> (0, d1, ((d2 * 128) + d3))"
    assert str(reshape_map((8, 32), (256,))) == "(d0) -> ((d0 floordiv 32), (d0 mod 32))"
    assert str(reshape_map((4, 6), (6, 4))) == \
        "(d0, d1) -> ((((d0 * 4) + d1) floordiv 6), (((d0 * 4) + d1) mod 6))"


def test_linear_lowers_to_broadcast_mul_reduce() -> None:
    program = capture(nn.Linear(8, 6, bias=False), (_rand(3, 8),))
    module = program.module.clone()
    TorchToPrim().apply(_context(), module)
    names = [op.name for op in module.walk()]
    body = [n for n in names if n.startswith("prim.") and n != "prim.yield"]
    assert body == ["prim.index_map", "prim.index_map", "prim.elementwise", "prim.reduce",
                    "prim.index_map"]
    assert "arith.mulf" in names


def test_numeric_masks_comparisons_and_integers() -> None:
    def f(x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        rows = torch.arange(7)[:, None]
        causal = rows >= torch.arange(7)[None, :]
        keep = (causal & (x > 0)) | ~(x < -1)
        y = x.masked_fill(~keep, -1e4)
        z = torch.where(keep, x, torch.zeros_like(x)) + torch.ones(7, 7) * torch.full((7,), 2.0)
        w = (ids * 2 + 1 - ids.neg()).float() * (ids != 3)
        return y, z, w, torch.arange(2, 9, 3), torch.logical_or(causal, x.eq(x.amax()))

    program = check_numerics(f, (_rand(7, 7), torch.arange(7)))
    names = set(op_names(program))
    assert {"torch.ge", "torch.gt", "torch.lt", "torch.ne", "torch.eq", "torch.logical_and",
            "torch.logical_or", "torch.logical_not", "torch.where", "torch.arange"} <= names


def test_numeric_embedding_rope_and_attention() -> None:
    def f(w: torch.Tensor, ids: torch.Tensor, q: torch.Tensor, k: torch.Tensor
          ) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = torch.arange(4).float()[:, None] * torch.arange(0, 8, 2).float()[None, :]
        e = F.embedding(ids, w) * freqs.cos() + freqs.sin()
        a = F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True)
        return e, a

    program = check_numerics(f, (_rand(10, 4), torch.tensor([3, 0, 9, 3]), _rand(1, 4, 5, 8),
                                 _rand(1, 2, 5, 8)))
    names = op_names(program)
    assert names.count("torch.embedding") == names.count("torch.sdpa") == 1
