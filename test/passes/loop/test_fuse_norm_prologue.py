"""``fuse-norm-prologue`` on captured programs: numerics against PyTorch and what it changed.

* An RMSNorm followed by a linear layer, and tiny Llama and Qwen2 decoder layers (whose q/k/v
  and gate/up projections read normalised rows), go through ``lower-to-cuda`` to Kernel IR
  with every pass checked by :func:`llmopt.check_numerics`; the Kernel IR, interpreted on the
  CPU, matches PyTorch evaluated in float64 within :func:`llmopt.numerics.tolerance` of the
  captured program (``16 · eps(f32) · sqrt(longest reduction)`` relative to the largest
  output: the scale factored out of the sums only reorders roundings).
* Structurally, at Loop IR: no norm kernel stores its normalised rows any more, only one
  scale per row (a ``[.., rows, 1]`` buffer), and every projection reading them binds that
  scale instead.
* At Tile IR, the rewritten projections are still matrix products for ``register-tile`` and
  ``stage-inputs``: every kernel that had register accumulators without the pass has them with
  it, and at least as many staged tiles (the norm weight is one more operand of the K loop).
"""

from __future__ import annotations

import copy
import re
from typing import Any

import numpy as np
import pytest
from xdsl.dialects import memref
from xdsl.dialects.builtin import MemRefType, ModuleOp

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import llmopt  # noqa: E402
from llmopt.dialects import loop  # noqa: E402
from llmopt.frontend.capture import CapturedProgram, capture  # noqa: E402
from llmopt.frontend.models import build_model, capture_layer, position_embeddings  # noqa: E402
from llmopt.numerics import compare, tolerance  # noqa: E402
from llmopt.tools.llmopt_cli import split_pipeline  # noqa: E402


class NormLinear(torch.nn.Module):
    """``linear(x * rsqrt(mean(x²) + eps) * g)``: an RMSNorm feeding a projection."""

    def __init__(self, hidden: int, out: int) -> None:
        super().__init__()
        self.g = torch.nn.Parameter(torch.randn(hidden))
        self.proj = torch.nn.Linear(hidden, out, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = x.pow(2).mean(-1, keepdim=True)
        return self.proj(x * torch.rsqrt(v + 1e-6) * self.g)


def norm_linear(rows: int, hidden: int = 64, out: int = 32) -> tuple[Any, torch.Tensor,
                                                                     CapturedProgram]:
    torch.manual_seed(0)
    model = NormLinear(hidden, out)
    x = torch.randn(1, rows, hidden, generator=torch.Generator().manual_seed(1))
    return model, x, capture(model, (x,))


def tiny_layer(kind: str) -> Any:
    """A seeded one-layer Llama (head dim 16, GQA 4/2) or Qwen2 (q/k/v bias), hidden 64, every
    parameter perturbed by N(0, 0.1) so that the norm weights are not all ones."""
    sizes = {"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 97, "max_position_embeddings": 128}
    if kind == "llama":
        config = transformers.LlamaConfig(**sizes, intermediate_size=96, head_dim=16,
                                          rms_norm_eps=1e-5)
    else:
        config = transformers.Qwen2Config(**sizes, intermediate_size=100, rms_norm_eps=1e-6,
                                          rope_theta=1e6)
    model = build_model(config, seed=1)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * 0.1)
    return model


def pipeline_to(level: str, with_pass: bool = True) -> list[str]:
    """The passes of ``lower-to-cuda`` that take Torch IR to ``level`` IR, with
    ``fuse-norm-prologue`` and its clean-ups inserted after ``fuse-kernels``' if
    ``with_pass`` (the default pipeline leaves it out: see the pass's docstring)."""
    passes, _ = split_pipeline("lower-to-cuda", level)
    if with_pass:
        at = passes.index("fuse-kernels{recompute_limit=0}") + 3
        passes = passes[:at] + ["fuse-norm-prologue", "canonicalize", "cse"] + passes[at:]
    return passes


def stages(level: str) -> tuple[str, str]:
    """``lower-to-cuda`` cut into the part that ends at Loop IR and the part from there to
    ``level`` IR."""
    to_loop, to_level = pipeline_to("loop"), pipeline_to(level)
    return ",".join(to_loop), ",".join(to_level[len(to_loop):])


def norm_kernels(module: ModuleOp) -> list[loop.KernelOp]:
    """The Loop-IR kernels computing an RMSNorm's ``rsqrt``."""
    return [k for k in loop.kernels(module) if any(op.name == "math.rsqrt" for op in k.walk())]


def stored_shapes(kernel: loop.KernelOp) -> list[tuple[int, ...]]:
    """The shapes of the buffers ``kernel`` stores to, one per store."""
    out: list[tuple[int, ...]] = []
    for op in kernel.walk():
        if isinstance(op, loop.StoreOp):
            assert isinstance(op.buffer.type, MemRefType)
            out.append(tuple(op.buffer.type.get_shape()))
    return out


def scale_readers(kernel: loop.KernelOp) -> list[loop.KernelOp]:
    """The other kernels bound to the buffers ``kernel`` stores (its readers)."""
    args = list(kernel.body.block.args)
    written = {kernel.buffers[args.index(op.buffer)] for op in kernel.walk()
               if isinstance(op, loop.StoreOp)}
    return [use.operation for b in written for use in b.uses
            if isinstance(use.operation, loop.KernelOp) and use.operation is not kernel]


def test_pass_is_opt_in() -> None:
    """``lower-to-cuda`` leaves the pass out (slower on the H200, see its docstring); it is
    registered for pipelines that name it, right after fusion."""
    default, _ = split_pipeline("lower-to-cuda", "cuda")
    assert "fuse-norm-prologue" not in default
    passes = pipeline_to("cuda")
    at = passes.index("fuse-norm-prologue")
    assert passes[at - 3:at + 4] == ["fuse-kernels{recompute_limit=0}", "canonicalize", "cse",
                                     "fuse-norm-prologue", "canonicalize", "cse",
                                     "hoist-reduce-factors"]


def test_norm_linear_stores_only_the_row_scale_and_matches_pytorch() -> None:
    model, x, program = norm_linear(8)
    to_loop, to_kernel = stages("kernel")
    assert "fuse-norm-prologue" in to_loop
    # Without the pass the norm stores its 1x8x64 normalised rows, which the linear reads.
    plain = llmopt.lower(program.module.clone(), ",".join(pipeline_to("loop", False)))
    (norm,) = norm_kernels(plain)
    assert stored_shapes(norm) == [(1, 8, 64)]
    # With it, one scale per row; the linear reads x and g (recomputing x·g in its sum).
    module = program.module.clone()
    llmopt.lower(module, to_loop)
    (norm,) = norm_kernels(module)
    assert stored_shapes(norm) == [(1, 8, 1)]
    assert not [op for op in module.walk() if isinstance(op, memref.AllocOp)
                and op.memref.type.get_shape() == (1, 8, 64)]
    (linear,) = scale_readers(norm)
    assert {"g", "x", "proj.weight"} <= {b.name_hint for b in linear.buffers}

    report = llmopt.check_numerics(program.module, ",".join(pipeline_to("cuda")), seed=4)
    assert report.ok, str(report)
    assert "fuse-norm-prologue" in [p.name for p in report.passes]

    llmopt.lower(module, to_kernel)
    args = [a.detach().numpy() for a in program.arguments(x)]
    (got,) = llmopt.interp.run(module, args)
    want = copy.deepcopy(model).double()(x.double()).detach().numpy()
    _, rel = compare([got], [want])
    assert rel <= tolerance(program.module), (rel, tolerance(program.module))


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_decoder_layer_projections_read_the_input_and_match_pytorch(kind: str) -> None:
    model = tiny_layer(kind)
    seq = 7
    program = capture_layer(model, seq)
    to_loop, to_kernel = stages("kernel")
    module = program.module.clone()
    llmopt.lower(module, to_loop)
    norms = norm_kernels(module)
    assert len(norms) == 2  # input and post-attention norms
    for norm in norms:
        assert stored_shapes(norm) == [(1, seq, 1)]
    # q, k and v read the first norm's scale; the fused gate/up kernel the second one's.
    assert sorted(len(scale_readers(n)) for n in norms) == [1, 3]

    report = llmopt.check_numerics(program.module, ",".join(pipeline_to("cuda")), seed=3)
    assert report.ok, str(report)

    llmopt.lower(module, to_kernel)
    x = torch.randn(1, seq, 64, generator=torch.Generator().manual_seed(seq))
    cos, sin = position_embeddings(model, seq)
    args = [a.detach().numpy() for a in program.arguments(x, cos, sin)]
    (got,) = llmopt.interp.run(module, args)
    wide = copy.deepcopy(model).double()
    with torch.no_grad():
        out = wide.model.layers[0](x.double(), attention_mask=None,
                                   position_embeddings=(cos.double(), sin.double()))
    want = (out[0] if isinstance(out, tuple) else out).numpy()
    _, rel = compare([got], [want])
    assert rel <= tolerance(program.module), (rel, tolerance(program.module))
    assert np.isfinite(got).all()


def tile_schedule(program: CapturedProgram, with_pass: bool) -> dict[str, tuple[bool, int]]:
    """Per Tile-IR kernel: (whether it has register accumulators, how many shared tiles it
    stages) after ``lower-to-cuda`` up to ``async-copy``, with or without
    ``fuse-norm-prologue``."""
    passes = pipeline_to("tile", with_pass)
    last = next(k for k, p in enumerate(passes) if p.startswith("async-copy"))
    module = llmopt.lower(program.module.clone(), ",".join(passes[: last + 1]))
    counts: dict[str, tuple[bool, int]] = {}
    name = ""
    for line in str(module).splitlines():
        found = re.search(r"tile\.kernel @(\w+)", line)
        if found:
            name = found.group(1)
            counts[name] = (False, 0)
        if name:
            regs, shared = counts[name]
            counts[name] = (regs or "alloc registers" in line, shared + ("alloc shared" in line))
    return counts


@pytest.mark.parametrize("program", ["norm_linear", "llama"])
def test_projections_stay_register_tiled(program: str) -> None:
    """At sizes where register-tile applies (64 rows), every kernel with register
    accumulators without the pass keeps them with it and stages at least as many tiles; the
    rewritten projections stage one more (the norm weight)."""
    captured = norm_linear(64, out=128)[2] if program == "norm_linear" else capture_layer(
        tiny_layer("llama"), 64)
    without = tile_schedule(captured, with_pass=False)
    with_ = tile_schedule(captured, with_pass=True)
    tiled = {k for k, (regs, _) in without.items() if regs}
    assert len(tiled) >= (1 if program == "norm_linear" else 4)
    for name in tiled:
        assert with_[name][0] == without[name][0], name
        assert with_[name][1] >= without[name][1], name
    assert sum(s for _, s in with_.values()) > sum(s for _, s in without.values())
