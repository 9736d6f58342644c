"""Capture the RMSNorm of Llama-family models (as Hugging Face writes it) into Torch IR."""

import torch

import llmopt


class RMSNorm(torch.nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.pow(2).mean(-1, keepdim=True)  # the sum of squares, divided by 256
        return self.weight * (x * torch.rsqrt(var + self.eps))


module = llmopt.capture(RMSNorm(256), (torch.randn(1, 8, 256),))
print(module)
