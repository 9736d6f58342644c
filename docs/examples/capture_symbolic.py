"""Capture an RMSNorm followed by a linear once for every length up to 2048, then run the one
program at two lengths with the Torch-IR interpreter."""

import numpy as np
import torch

import llmopt
from llmopt.frontend.capture import capture


class NormLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(64))
        self.proj = torch.nn.Linear(64, 32, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        y = self.proj(self.weight * (x * torch.rsqrt(var + 1e-5)))
        return y.view(-1, 2, 16)  # one row per token: -1 is the length


program = capture(NormLinear(), (torch.randn(1, 8, 64),),
                  dynamic={"x": {1: "seq"}}, max={"seq": 2048})
print(program.module)
for length in (3, 100):
    args = program.arguments(torch.randn(1, length, 64))  # weights, x, then seq = length
    inputs = [a.detach().numpy() if isinstance(a, torch.Tensor) else a for a in args]
    (out,) = llmopt.interp.run(program.module, inputs)
    print(f"seq = {args[-1]}: output {list(out.shape)}, finite: {bool(np.isfinite(out).all())}")
try:
    program.arguments(torch.randn(1, 3000, 64))
except Exception as err:
    print(f"{type(err).__name__}: {err}")
