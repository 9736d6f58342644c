"""``llmopt.compile(..., dynamic=, max=)`` without a GPU: the program it loads
(:func:`llmopt.prepare`, the same capture and lowering) is one module for every length; lowered
to Kernel IR it is run by the interpreter at several lengths against PyTorch in float64, within
:func:`llmopt.numerics.tolerance` at that length. Where there is no GPU, ``compile`` itself
fails as the static ``compile`` does (the program needs CUDA to load)."""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")

import llmopt  # noqa: E402
from llmopt.frontend.capture import CapturedProgram  # noqa: E402
from llmopt.numerics import compare, tolerance  # noqa: E402
from llmopt.tools.llmopt_cli import split_pipeline  # noqa: E402

MAX = 48


class Block(torch.nn.Module):
    """An RMSNorm, a linear and a softmax over the features."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.norm = torch.nn.Parameter(1 + 0.1 * torch.randn(16, generator=gen))
        self.proj = torch.nn.Linear(16, 24)
        with torch.no_grad():
            self.proj.weight.copy_(torch.randn(24, 16, generator=gen) / 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm
        return self.proj(x).softmax(-1)


@functools.cache
def prepared() -> tuple[Block, CapturedProgram]:
    model = Block()
    to_kernel, _ = split_pipeline("lower-to-cuda", "kernel")
    example = torch.randn(1, 5, 16, generator=torch.Generator().manual_seed(1))
    return model, llmopt.prepare(model, (example,), ",".join(to_kernel),
                                 dynamic={"x": {1: "seq"}}, max={"seq": MAX})


@pytest.mark.parametrize("length", [1, 7, 31, MAX])
def test_one_program_at_every_length(length: int) -> None:
    import llmopt.interp

    model, program = prepared()
    assert "llmopt.symbol = \"seq\"" in str(program.module)
    x = torch.randn(1, length, 16, generator=torch.Generator().manual_seed(length + 10))
    with torch.no_grad():
        want = model.double()(x.double()).numpy()
        model.float()
    inputs = [a.detach().numpy() if isinstance(a, torch.Tensor) else a
              for a in program.arguments(x)]
    (got,) = llmopt.interp.run(program.module, inputs, check_races=False)
    assert got.shape == want.shape
    _, rel = compare([got], [want])
    assert rel <= tolerance(program.module, length), rel


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_compile_without_a_gpu_fails_as_the_static_compile_does() -> None:
    x = torch.randn(1, 5, 16, generator=torch.Generator().manual_seed(2))
    with pytest.raises(Exception) as static:
        llmopt.compile(Block(), (x,))
    with pytest.raises(type(static.value)):
        llmopt.compile(Block(), (x,), dynamic={"x": {1: "seq"}}, max={"seq": MAX})
