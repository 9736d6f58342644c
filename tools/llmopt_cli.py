"""The ``llmopt`` command: compile PyTorch programs through llmopt's six levels.

``llmopt demo`` captures a small PyTorch function (RMSNorm by default), lowers it through
every level and prints the IR after each lowering and the generated CUDA. With a GPU it
also runs the kernels and compares them with PyTorch.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

#: the level a module is at after each lowering pass
LEVEL_AFTER = {
    "torch-to-prim": "Tensor IR (prim)",
    "fuse-kernels": "Loop IR (loop), fused",
    "loop-to-tile": "Tile IR (tile)",
    "tile-to-kernel": "Kernel IR (kernel)",
    "kernel-to-cuda": "CUDA IR (cuda)",
}


def _demo_programs() -> dict[str, tuple[Callable[..., Any], Callable[[tuple[int, ...]], tuple]]]:
    import torch

    class RMSNorm(torch.nn.Module):
        """The RMSNorm of Llama-family models, as Hugging Face writes it."""

        def __init__(self, hidden: int, eps: float = 1e-5) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(hidden))
            self.eps = eps

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            var = x.pow(2).mean(-1, keepdim=True)
            return self.weight * (x * torch.rsqrt(var + self.eps))

    def softmax(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)

    def silu_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(a) * b

    def one(shape: tuple[int, ...]) -> tuple:
        return (torch.randn(shape),)

    def two(shape: tuple[int, ...]) -> tuple:
        return (torch.randn(shape), torch.randn(shape))

    return {
        "rmsnorm": (lambda shape: RMSNorm(shape[-1]), one),
        "softmax": (lambda shape: softmax, one),
        "silu-mul": (lambda shape: silu_mul, two),
    }


def demo(args: argparse.Namespace) -> int:
    import torch

    import llmopt

    torch.manual_seed(0)
    programs = _demo_programs()
    make_fn, make_inputs = programs[args.program]
    shape = tuple(args.shape)
    fn = make_fn(shape)
    inputs = make_inputs(shape)
    module = llmopt.capture(fn, inputs)
    print(f"// ===== Torch IR (torch): {args.program} {list(shape)} =====")
    print(module)

    snapshots: dict[str, Any] = {}

    def show(pass_: Any, mod: Any) -> None:
        if pass_.name == "tile-to-kernel":
            snapshots["kernel"] = mod.clone()
        level = LEVEL_AFTER.get(pass_.name)
        if level is not None and (args.all or pass_.name != "kernel-to-cuda"):
            print(f"\n// ===== {level}, after {pass_.name} =====")
            print(mod)

    llmopt.lower(module, args.pipeline, callback=show)
    print("\n// ===== CUDA (printed from CUDA IR) =====")
    source = llmopt.cuda_source(module)
    print(source)
    from llmopt.codegen.nvrtc import compile_cuda, default_arch

    arch = default_arch()
    cubin = compile_cuda(source, arch=arch)
    kernels = source.count("__global__")
    print(f"// NVRTC: {kernels} kernel(s) compiled to {len(cubin)} bytes of CUBIN for {arch}")
    reference = fn.double() if isinstance(fn, torch.nn.Module) else fn
    params = list(fn.parameters()) if isinstance(fn, torch.nn.Module) else []
    if torch.cuda.is_available():
        compiled = llmopt.compile(fn, [t.cuda() for t in inputs])
        got = compiled(*[t.cuda() for t in inputs]).double().cpu()
        where = "GPU run"
    else:
        outputs = llmopt.interp.run(
            snapshots["kernel"], [t.detach().numpy() for t in [*params, *inputs]]
        )
        got = torch.from_numpy(outputs[0]).double()
        where = "no GPU here; Kernel IR interpreted on the CPU"
    want = reference(*[t.double() for t in inputs]).detach()
    err = ((got - want).abs().max() / want.abs().max()).item()
    print(f"// {where}: max |error| / max |PyTorch float64| = {err:.3e}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llmopt", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    d = sub.add_parser("demo", help="lower a small PyTorch function and print every level")
    d.add_argument(
        "program", nargs="?", default="rmsnorm", choices=["rmsnorm", "softmax", "silu-mul"]
    )
    d.add_argument("--shape", type=int, nargs="+", default=[1, 8, 256])
    d.add_argument("--pipeline", default="lower-to-cuda")
    d.add_argument("--all", action="store_true", help="also print the CUDA IR ops")
    d.set_defaults(run=demo)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args(["demo", *argv])
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
