"""The symbolic tiny Llama layer through ``lower-to-cuda`` to Kernel IR: ``merge-branches``
and ``fuse-launches`` put one length bucket's variants of sibling products into shared
launches (fewer launches than without ``merge-branches`` at short lengths, never more), and
the program they leave computes the layer at lengths in several buckets (the Kernel
interpreter against the layer in float64); ``kernel-to-cuda`` gives its kernels without a
register array 32-bit indices."""

from __future__ import annotations

import copy
import functools
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_models import tiny_model  # noqa: E402
from xdsl.dialects import func  # noqa: E402
from xdsl.dialects.builtin import ModuleOp  # noqa: E402

import llmopt  # noqa: E402
import llmopt.interp  # noqa: E402
from llmopt import registry  # noqa: E402
from llmopt.codegen.executor import LaunchStep, plan_host_function  # noqa: E402
from llmopt.codegen.symbolic import SymbolicHost, layout_call  # noqa: E402
from llmopt.dialects import kernel  # noqa: E402
from llmopt.frontend.capture import CapturedProgram  # noqa: E402
from llmopt.frontend.models import (  # noqa: E402
    capture_layer,
    decoder_layers,
    position_embeddings,
)
from llmopt.numerics import tolerance  # noqa: E402
from llmopt.tools.llmopt_cli import interpreter_arrays, split_pipeline  # noqa: E402

MAX = 128
LENGTHS = (1, 2, 3, 17, 100)
"""One length in each of the tiny layer's buckets (one row, two rows, up to 32, the rest)."""


@functools.cache
def to_kernel(merge: bool) -> tuple[CapturedProgram, ModuleOp]:
    """The symbolic layer and its module lowered to Kernel IR by ``lower-to-cuda`` (with or
    without ``merge-branches``)."""
    program = capture_layer(tiny_model("llama"), 7, dynamic=True, max_seq=MAX)
    pipeline = (registry.for_device("lower-to-cuda") if merge
                else registry.without("lower-to-cuda", "merge-branches"))
    passes, _ = split_pipeline(pipeline, "kernel")
    module = program.module.clone()
    llmopt.lower(module, ",".join(passes))
    return program, module


def launches(module: ModuleOp, seq: int) -> int:
    """The launches a call at ``seq`` tokens makes (the active launch steps of the host plan
    of ``module`` lowered to CUDA)."""
    module = module.clone()
    llmopt.lower(module, "kernel-to-cuda")
    plan = plan_host_function(module)
    (fn,) = [op for op in module.ops if isinstance(op, func.FuncOp) and op.body.blocks]
    layout = layout_call(plan, SymbolicHost(fn), {"seq": seq})
    return sum(1 for k, step in enumerate(plan.steps)
               if isinstance(step, LaunchStep) and k not in layout.inactive)


def test_merged_buckets_launch_fewer_kernels() -> None:
    merged, apart = to_kernel(True)[1], to_kernel(False)[1]
    counts = {seq: (launches(merged, seq), launches(apart, seq)) for seq in LENGTHS}
    assert all(m <= a for m, a in counts.values()), counts
    assert any(m < a for m, a in counts.values()), counts


def layer_error(program: CapturedProgram, module: ModuleOp, seq: int, seed: int) -> float:
    """The largest error of ``module`` (the symbolic tiny layer ``program`` lowered to
    Kernel IR) at ``seq`` tokens against the layer in float64, relative to its largest
    output (the Kernel interpreter on seeded random hidden states)."""
    model = tiny_model("llama")
    x = torch.randn(1, seq, 64, generator=torch.Generator().manual_seed(seed))
    cos, sin = position_embeddings(model, seq)
    args = program.arguments(x, cos, sin)
    (out,) = llmopt.interp.run(module, interpreter_arrays(args), check_races=False)
    layer = copy.deepcopy(decoder_layers(model)[0]).double()
    with torch.no_grad():
        want = layer(x.double(), attention_mask=None,
                     position_embeddings=(cos.double(), sin.double()))
    want = (want[0] if isinstance(want, tuple) else want).numpy()
    return float(np.abs(np.asarray(out, dtype=np.float64) - want).max() / np.abs(want).max())


@pytest.mark.parametrize("seq", [1, 3, 17])
def test_merged_program_computes_the_layer(seq: int) -> None:
    program, module = to_kernel(True)
    err = layer_error(program, module, seq, 100 + seq)
    assert err <= tolerance(program.module), err


def test_kernels_without_a_register_array_index_in_int() -> None:
    """``kernel-to-cuda``'s default widths on the symbolic layer: every kernel that keeps no
    register array (elementwise maps, norms, the block-per-output products of the two-row
    bucket; the 16-byte chunks of ``vector-elementwise`` are not one) computes its indices in
    ``int``, its length bounded by the symbol's maximum; every kernel with one (the products'
    register tiles, attention) keeps ``long long``."""
    module = to_kernel(True)[1]
    plain = {op.sym_name.data for op in module.ops if isinstance(op, kernel.FuncOp)
             and not any(isinstance(o, kernel.LocalOp) and kernel.POINT_ATTR not in o.attributes
                         for o in op.walk())}
    chunked = {op.sym_name.data for op in module.ops if isinstance(op, kernel.FuncOp)
               and any(kernel.POINT_ATTR in o.attributes for o in op.walk())}
    assert chunked and chunked <= plain, (sorted(chunked), sorted(plain))
    source = llmopt.cuda_source(module.clone(), "kernel-to-cuda")
    texts = {chunk.split("(")[0]: chunk for chunk in re.split(
        r'extern "C" __global__ void __launch_bounds__\([^)]*\) ', source)[1:]}
    narrow = {name for name, text in texts.items() if "long long" not in text}
    assert plain and narrow == plain, (sorted(plain), sorted(narrow))
    assert all("int seq" in texts[name] for name in narrow if "seq" in texts[name])
