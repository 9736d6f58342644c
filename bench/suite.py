"""llmopt's benchmark suite: single ops and whole blocks against PyTorch eager (plain and
replayed from a CUDA graph) and torch.compile.

Usage (on a GPU host)::

    python bench/suite.py ops --out-dir DIR [--models tinyllama qwen2.5-7b] [--seqs 32 128 512]
                              [--ops q_proj softmax ...] [--reps 100] [--rounds 5]
                              [--dtype float32|bfloat16|float16] [--commit SHA] [--fresh]
    python bench/suite.py blocks --out-dir DIR [--models ...] [--seqs 128 512] [--whole-model]
                                 [--model-seq 128] [--no-layers] [--reps 100] [--rounds 5]
                                 [--dtype ...] [--commit SHA]
    python bench/suite.py ops --list          # the case names, nothing run (no GPU needed)
    python bench/suite.py ops --dry-run [...] # capture and lower the cases on the CPU

``--models``, ``--seqs`` and ``--ops`` pick a subset (a cheap run on a GPU: one model, one
length, a few ops, ``--reps 30 --rounds 3``); ``--dry-run`` captures and lowers the selected
cases for the GPU's architecture on the CPU first, so that a case that would fail to compile
costs no GPU time.

**Cases.** ``ops``: 14 ops at the real dimensions of TinyLlama-1.1B and Qwen2.5-7B, each at
sequence lengths 32, 128 and 512 (84 cases, named ``tinyllama/s128/q_proj``): the seven
projections (``nn.Linear`` on ``x: [1, seq, in]``), ``rmsnorm`` (Hugging Face's LlamaRMSNorm
formula), ``softmax`` of attention scores ``[1, heads, seq, seq]``, ``silu_mul``
(``silu(g) * u``), ``sdpa`` (causal, GQA), ``naive_attention`` (the same attention written
out: key/value heads repeated by expand + reshape, which is ``repeat_interleave`` on the head
dim, a form llmopt captures; ``q @ k^T * scale``, a causal ``masked_fill`` with ``-inf``
from a boolean upper-triangle buffer, softmax, ``@ v``), ``matmul_residual``
(``o_proj(x) + residual``) and ``silu_mul_down`` (``down_proj(silu(g) * u)``). Weights are
seeded normal with std ``1/sqrt(fan_in)``, biases N(0, 0.1²), the norm weight 1 + N(0, 0.1²)
(never trivial), inputs seeded standard normal; the seed is
derived from the case name, so a subset reproduces the full run's data. ``blocks``: one
Hugging Face decoder layer of each model (seq 128 and 512, inputs hidden states and the rotary
``cos``/``sin``) and, with ``--whole-model``, the whole model's prefill logits (seq 128); built
from the model configs with seeded weights (every 1-D parameter, i.e. norm weights and
biases, perturbed by N(0, 0.1) so none is trivial).

**Systems.** In one process, for every case: PyTorch eager; eager replayed from a CUDA graph
(``torch.cuda.CUDAGraph``: warm-up calls on a side stream, one call captured, replayed on its
static input buffers — how llmopt is timed, so this is the like-for-like baseline without
PyTorch's per-launch host overhead); ``torch.compile(module,
dynamic=False)`` (default mode, dynamo reset before each case); llmopt:
``llmopt.compile(module, inputs, cuda_graph=True)`` for ops (capture, ``lower-to-cuda``,
NVRTC, CUDA-graph replay) and, for blocks, ``capture_layer``/``capture_model`` lowered with
``lower-to-cuda`` and run by a ``CompiledProgram`` with ``cuda_graph=True``. Everything is
FP32 with TF32 off, unless ``--dtype`` says otherwise.

**16 bits.** With ``--dtype bfloat16`` (or ``float16``) the weights and inputs are drawn as
in float32 and rounded to that dtype (:func:`cast_params_`: parameters only, a model's rotary
``inv_freq`` stays float32 as ``from_pretrained`` leaves it), and every system runs on them
in that dtype; PyTorch's setting for reduced-precision reductions in cuBLAS is left at its
default and recorded (``reduced_precision_reduction``). Two things are added. Every op case
that is a matrix product (:data:`PRODUCT_OPS`: the projections, ``matmul_residual``,
``silu_mul_down``; blocks have none) also times cuBLAS (``cublas_ms``,
:func:`build_cublas`): the bare ``F.linear`` of that product in the same dtype (without the
residual; on ``silu(g) * u`` computed beforehand) replayed from a CUDA graph like the eager
graph and timed in the same interleaved rounds; the row records the product's ``mnk``
(``[M, N, K]``) and ``bench/report.py`` adds ``vs_cublas = cublas_ms / llmopt_ms`` (goal:
at least 0.8) and ``llmopt_tflops``/``cublas_tflops`` (``2·M·N·K`` / time). And every case
judges llmopt's error against PyTorch eager's own 16-bit error on the same inputs
(:func:`half_errors` is the measure, shared with the GPU tests of 16-bit ops):
``err_vs_eager = max_err_rel / eager_err_rel`` (the goal: at most 2) and ``ok_vs_eager``
(:func:`within_error_goal`: at most twice eager's error plus one epsilon of the dtype, what
the GPU tests assert).

**Timing.** The same for all of them: each timed call runs between two CUDA events and is
followed by a synchronisation, so a time is the latency of one call as its caller sees it
(host launch overhead included). Every system is built and checked first; then the systems
are timed in ``--rounds`` interleaved rounds (default 5): in each round every system in turn
runs ``--warmup`` untimed calls (default 10) and then ``ceil(reps / rounds)`` timed calls
(``--reps``, default 100), and the order is rotated from one round to the next, so no system
is always first. The speed of a GPU shared with other work drifts; interleaving spreads that
drift over all the systems alike instead of favouring the one timed in a quiet moment (all
systems are resident at once for it). The median in milliseconds over all of a
system's timed calls is recorded (``eager_ms``, ``eager_graph_ms``, ``compile_ms``,
``llmopt_ms``). llmopt and the eager graph are
called as a CUDA-graph program is used in a loop: with their static input buffers
(``CompiledProgram.static_inputs``, which hold the case's inputs), so a call is one graph
replay; ``llmopt_copy_ms`` and ``eager_graph_copy_ms`` are calls with other tensors, which
first copy them into those buffers (context only, not used in the ratios). Inputs stay
resident in L2 where they fit, for every system alike. ``torch_compile_s`` and
``llmopt_compile_s`` are the seconds to the first result (compilation plus the first call;
both compilers cache on disk, so a second run is faster), ``eager_graph_capture_s`` the
seconds to warm up and capture the eager graph; ``kernels`` is the number of kernel
launches in llmopt's host plan.

With ``--compile-graphs`` a fifth system, ``torch.compile(mode="reduce-overhead")``
(Inductor's kernels replayed from CUDA graphs, like llmopt's), is timed into
``compile_graphs_ms`` with ``vs_compile_graphs = compile_graphs_ms / llmopt_ms``.

**Ratios.** ``vs_eager = eager_ms / llmopt_ms``, ``vs_eager_graph = eager_graph_ms /
llmopt_ms``, ``vs_compile = compile_ms / llmopt_ms`` and ``vs_best`` = the fastest PyTorch
time (eager, eager graph, torch.compile, and torch.compile with CUDA graphs when timed) /
``llmopt_ms``: above 1 llmopt is faster. The top level holds their geometric means over the
cases with an llmopt time, their minima (``min_vs_best``, ``min_vs_compile``,
``min_vs_eager_graph``, ...), and how many cases failed (no llmopt time).

**Accuracy.** Every output is compared with the same module evaluated in float64 on the same
inputs (``copy.deepcopy(module).double()``; from 16-bit values the widening is exact, see
:func:`reference`): ``max_err_rel = max|out - ref| / max|ref|`` for llmopt
(``eager_err_rel`` and ``compile_err_rel`` for context; ``cublas_err_rel`` is cuBLAS's on its
bare product), and ``ok`` says whether it is within :func:`llmopt.numerics.tolerance` of the
captured program (``16 * eps * sqrt(n)``, ``n`` its longest reduction; for a 16-bit program
that of its float32 arithmetic plus four epsilons of the 16-bit dtype), recorded as ``tol``.

**Results.** ``DIR/ops-h200.json`` / ``DIR/blocks-h200.json`` (in a 16-bit dtype
``DIR/ops-bfloat16-h200.json`` ..., :func:`report.results_stem`; the suffix is the GPU's model,
:func:`report.gpu_tag`, so an H100 writes ``ops-h100.json``), rewritten after every case
(a run cut short keeps what it measured; cases already in the file from an earlier run into
the same directory are kept unless re-run, or dropped with ``--fresh``), then the Markdown
table and plot of ``bench/report.py``. A case whose llmopt compilation or run raises records the
error's first line in ``error`` and ``llmopt_ms = null``; the suite goes on.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import functools
import gc
import math
import statistics
import subprocess
import sys
import time
import traceback
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from report import (
    DEFAULT_DTYPE,
    DEFAULT_TAG,
    DTYPES,
    ERROR_GOAL,
    Case,
    Doc,
    add_ratios,
    doc_dtype,
    gpu_tag,
    load,
    results_stem,
    table,
    with_summary,
    write_json,
    write_report,
)
from torch import nn

import llmopt
from llmopt.codegen.executor import CompiledProgram, LaunchStep
from llmopt.numerics import tolerance

ROOT = Path(__file__).resolve().parents[1]


# --- the models' dimensions and the op cases ----------------------------------------------------


@dataclass(frozen=True)
class ModelDims:
    """The dimensions of a model that its ops are benchmarked at."""

    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    qkv_bias: bool


MODELS: dict[str, ModelDims] = {
    "tinyllama": ModelDims("tinyllama", hidden=2048, intermediate=5632, heads=32, kv_heads=4,
                           head_dim=64, eps=1e-5, qkv_bias=False),
    "qwen2.5-7b": ModelDims("qwen2.5-7b", hidden=3584, intermediate=18944, heads=28,
                            kv_heads=4, head_dim=128, eps=1e-6, qkv_bias=True),
}
"""TinyLlama-1.1B and Qwen2.5-7B (the presets of :mod:`llmopt.frontend.models`)."""

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
OPS = (*PROJECTIONS, "rmsnorm", "softmax", "silu_mul", "sdpa", "naive_attention",
       "matmul_residual", "silu_mul_down")
"""The op kinds, in case order."""

PRODUCT_OPS = (*PROJECTIONS, "matmul_residual", "silu_mul_down")
"""The op kinds that are one matrix product (with a bias, residual or gated input around
it): those a 16-bit run also times cuBLAS on (:func:`build_cublas`)."""

HALF_EPS = {"bfloat16": 2.0**-7, "float16": 2.0**-10}
"""The machine epsilon of the 16-bit dtypes (by ``--dtype`` name)."""

OP_SEQS = (32, 128, 512)
BLOCK_SEQS = (128, 512)
WHOLE_MODEL_SEQ = 128

DEFAULT_PIPELINE = "lower-to-cuda"
"""What llmopt lowers every case with, unless ``--pipeline`` says otherwise."""

BLOCKS = ("decoder_layer", "whole_model")

BIAS_STD = 0.1
"""Standard deviation of the projections' biases and of the perturbation of 1-D weights."""


def case_name(model: str, seq: int, what: str) -> str:
    """``model/s<seq>/<what>``, e.g. ``tinyllama/s128/q_proj``."""
    return f"{model}/s{seq}/{what}"


def case_seed(name: str) -> int:
    """The seed of a case's weights and inputs, derived from its name (stable across runs
    and subsets)."""
    return zlib.crc32(name.encode())


def op_case_names(models: Sequence[str] = tuple(MODELS), seqs: Sequence[int] = OP_SEQS,
                  ops: Sequence[str] = OPS) -> list[str]:
    """The names of the op cases, model by model, then sequence length, then op."""
    return [case_name(m, s, op) for m in models for s in seqs for op in ops]


def block_case_names(models: Sequence[str] = tuple(MODELS), seqs: Sequence[int] = BLOCK_SEQS,
                     *, layers: bool = True, whole_model: bool = False,
                     model_seq: int = WHOLE_MODEL_SEQ) -> list[str]:
    """The names of the block cases: decoder layers at ``seqs``, then (``whole_model``) the
    whole model at ``model_seq``, model by model."""
    names: list[str] = []
    for m in models:
        if layers:
            names += [case_name(m, s, "decoder_layer") for s in seqs]
        if whole_model:
            names.append(case_name(m, model_seq, "whole_model"))
    return names


def projection_shape(dims: ModelDims, op: str) -> tuple[int, int, bool]:
    """``(in_features, out_features, bias)`` of a projection of ``dims``."""
    attn, kv = dims.heads * dims.head_dim, dims.kv_heads * dims.head_dim
    table_ = {
        "q_proj": (dims.hidden, attn, dims.qkv_bias),
        "k_proj": (dims.hidden, kv, dims.qkv_bias),
        "v_proj": (dims.hidden, kv, dims.qkv_bias),
        "o_proj": (attn, dims.hidden, False),
        "gate_proj": (dims.hidden, dims.intermediate, False),
        "up_proj": (dims.hidden, dims.intermediate, False),
        "down_proj": (dims.intermediate, dims.hidden, False),
    }
    return table_[op]


# --- the op modules -----------------------------------------------------------------------------


def seeded_linear(n_in: int, n_out: int, bias: bool, gen: torch.Generator,
                  device: str | torch.device) -> nn.Linear:
    """An ``nn.Linear`` on ``device`` with weights ~ N(0, 1/n_in) and biases ~ N(0, 0.1²)
    drawn from ``gen`` (no default initialisation is run)."""
    layer = nn.Linear(n_in, n_out, bias=bias, device="meta").to_empty(device=device)
    with torch.no_grad():
        layer.weight.normal_(0.0, n_in**-0.5, generator=gen)
        if layer.bias is not None:
            layer.bias.normal_(0.0, BIAS_STD, generator=gen)
    return layer


class RMSNorm(nn.Module):
    """Hugging Face's LlamaRMSNorm: ``x * rsqrt(mean(x²) + eps) * weight``."""

    def __init__(self, weight: torch.Tensor, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` over its last dim."""
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Softmax(nn.Module):
    """Softmax over the last dim (of attention scores)."""

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        """``softmax(scores, -1)``."""
        return torch.softmax(scores, dim=-1)


class SiluMul(nn.Module):
    """The gated activation of a SwiGLU MLP: ``silu(g) * u``."""

    def forward(self, g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """``silu(g) * u``."""
        return F.silu(g) * u


class CausalSdpa(nn.Module):
    """Causal grouped-query attention through ``scaled_dot_product_attention``."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``sdpa(q, k, v, is_causal=True, enable_gqa=True)``."""
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def repeat_kv(x: torch.Tensor, times: int) -> torch.Tensor:
    """Each key/value head ``times`` times in a row (``[b, kv, s, d] -> [b, kv*times, s, d]``):
    ``x.repeat_interleave(times, dim=1)`` written as expand + reshape, as Hugging Face's
    ``repeat_kv`` does (llmopt captures no ``repeat_interleave``)."""
    b, kv, s, d = x.shape
    return x[:, :, None].expand(b, kv, times, s, d).reshape(b, kv * times, s, d)


class NaiveAttention(nn.Module):
    """Causal grouped-query attention written out: repeated key/value heads, scaled scores,
    a causal ``masked_fill`` with ``-inf`` (the mask is a boolean buffer, upper triangle
    above the diagonal), softmax, weighted sum of the values."""

    def __init__(self, heads: int, kv_heads: int, seq: int, head_dim: int,
                 device: str | torch.device = "cpu") -> None:
        super().__init__()
        self.groups = heads // kv_heads
        self.scale = head_dim**-0.5
        mask = torch.ones(seq, seq, dtype=torch.bool, device=device).triu(1)
        self.register_buffer("causal_mask", mask)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``softmax(mask(q @ k^T * scale)) @ v``."""
        k, v = repeat_kv(k, self.groups), repeat_kv(v, self.groups)
        scores = q @ k.transpose(-1, -2) * self.scale
        scores = scores.masked_fill(self.causal_mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


class MatmulResidual(nn.Module):
    """The attention output projection with the residual added: ``o_proj(x) + residual``."""

    def __init__(self, o_proj: nn.Linear) -> None:
        super().__init__()
        self.o_proj = o_proj

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """``o_proj(x) + residual``."""
        return self.o_proj(x) + residual


class SiluMulDown(nn.Module):
    """The end of a SwiGLU MLP: ``down_proj(silu(g) * u)``."""

    def __init__(self, down_proj: nn.Linear) -> None:
        super().__init__()
        self.down_proj = down_proj

    def forward(self, g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """``down_proj(silu(g) * u)``."""
        return self.down_proj(F.silu(g) * u)


@dataclass
class OpCase:
    """One op case: its module (weights on the device) and inputs."""

    name: str
    model: str
    seq: int
    op: str
    module: nn.Module
    inputs: tuple[torch.Tensor, ...]


def cast_params_(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    """Cast ``module``'s floating-point parameters to ``dtype`` in place, its buffers left as
    they are; returns ``module``.

    Everything is drawn in float32 and then cast, so a 16-bit case holds the float32 case's
    weights and inputs rounded (same seed, same data). Buffers stay: a Hugging Face model
    keeps its rotary ``inv_freq`` in float32 whatever the weights' dtype (as
    ``from_pretrained(dtype=...)`` and ``build_model(dtype=...)`` leave it) and computes the
    angles from it in float32; a bfloat16 ``inv_freq`` (what ``module.to(dtype)`` would make)
    is off by up to ``2**-9`` relative, which at position 2047 turns a rotation by radians.
    Each parameter's data is replaced, so tied weights stay one parameter.
    """
    with torch.no_grad():
        for param in module.parameters():
            if param.is_floating_point() and param.dtype != dtype:
                param.data = param.data.to(dtype)
    return module


def make_case(dims: ModelDims, seq: int, op: str, *, device: str | torch.device = "cpu",
              seed: int | None = None, dtype: torch.dtype = torch.float32) -> OpCase:
    """The module and inputs of op ``op`` at ``dims`` and sequence length ``seq`` on
    ``device``, seeded by ``seed`` (default: :func:`case_seed` of the name), drawn in float32
    and cast to ``dtype`` (:func:`cast_params_`)."""
    name = case_name(dims.name, seq, op)
    gen = torch.Generator(device=device).manual_seed(case_seed(name) if seed is None else seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=gen, device=device)

    module: nn.Module
    if op in PROJECTIONS:
        n_in, n_out, bias = projection_shape(dims, op)
        module = seeded_linear(n_in, n_out, bias, gen, device)
        inputs = (randn(1, seq, n_in),)
    elif op == "rmsnorm":
        module = RMSNorm(1.0 + BIAS_STD * randn(dims.hidden), dims.eps)
        inputs = (randn(1, seq, dims.hidden),)
    elif op == "softmax":
        module = Softmax()
        inputs = (randn(1, dims.heads, seq, seq),)
    elif op == "silu_mul":
        module = SiluMul()
        inputs = (randn(1, seq, dims.intermediate), randn(1, seq, dims.intermediate))
    elif op in ("sdpa", "naive_attention"):
        module = (CausalSdpa() if op == "sdpa" else
                  NaiveAttention(dims.heads, dims.kv_heads, seq, dims.head_dim, device))
        inputs = (randn(1, dims.heads, seq, dims.head_dim),
                  randn(1, dims.kv_heads, seq, dims.head_dim),
                  randn(1, dims.kv_heads, seq, dims.head_dim))
    elif op == "matmul_residual":
        n_in, n_out, bias = projection_shape(dims, "o_proj")
        module = MatmulResidual(seeded_linear(n_in, n_out, bias, gen, device))
        inputs = (randn(1, seq, n_in), randn(1, seq, n_out))
    elif op == "silu_mul_down":
        n_in, n_out, bias = projection_shape(dims, "down_proj")
        module = SiluMulDown(seeded_linear(n_in, n_out, bias, gen, device))
        inputs = (randn(1, seq, n_in), randn(1, seq, n_in))
    else:
        raise ValueError(f"unknown op '{op}' (known: {', '.join(OPS)})")
    inputs = tuple(t.to(dtype) for t in inputs)  # float32 -> float32 is the tensor itself
    return OpCase(name, dims.name, seq, op, cast_params_(module, dtype).eval(), inputs)


def product_layer(module: nn.Module) -> nn.Linear | None:
    """The linear layer of an op module that is one matrix product (a projection, the
    ``o_proj`` of :class:`MatmulResidual`, the ``down_proj`` of :class:`SiluMulDown`), else
    ``None``."""
    if isinstance(module, nn.Linear):
        return module
    if isinstance(module, MatmulResidual):
        return module.o_proj
    if isinstance(module, SiluMulDown):
        return module.down_proj
    return None


def product_mnk(module: nn.Module, inputs: Sequence[torch.Tensor]) -> list[int] | None:
    """``[M, N, K]`` of an op case's matrix product (rows, outputs, reduction length; its
    FLOPs are ``2·M·N·K``), or ``None`` when the case is not one."""
    layer = product_layer(module)
    if layer is None:
        return None
    x = inputs[0]  # the product's input, or (silu_mul_down) a factor of its shape
    return [x.numel() // x.shape[-1], layer.out_features, layer.in_features]


def bare_product(module: nn.Module, inputs: Sequence[torch.Tensor]
                 ) -> tuple[nn.Linear, tuple[torch.Tensor]]:
    """The bare matrix product of an op case as cuBLAS runs it: its linear layer
    (``F.linear`` of input, weight and bias) and that layer's input — the case's input for a
    projection, ``x`` without the residual for ``matmul_residual``, ``silu(g) * u`` computed
    here, in the case's dtype, for ``silu_mul_down``.

    Raises:
        ValueError: the case is not a matrix product.
    """
    layer = product_layer(module)
    if layer is None:
        raise ValueError(f"{type(module).__name__} is not a matrix product")
    if isinstance(module, SiluMulDown):
        g, u = inputs
        with torch.no_grad():
            return layer, (F.silu(g) * u,)
    return layer, (inputs[0],)


# --- the systems --------------------------------------------------------------------------------


@dataclass
class Built:
    """A system ready to run a case: ``fn(*inputs)`` returns the output tensor.

    ``compile_s``: seconds to the first result; ``tol``: the accuracy tolerance of the
    captured program; ``kernels``: kernel launches per call; ``replay``: a call with the
    inputs already in the CUDA graph's static buffers (the replayed systems). ``own_err``:
    set by a system that computes a part of the case rather than its output (cuBLAS's bare
    product): its own error against float64, recorded instead of checking ``fn(*inputs)``
    against the case's reference; such a system is timed by its replay alone.
    """

    fn: Callable[..., Any]
    compile_s: float | None = None
    tol: float | None = None
    kernels: int | None = None
    replay: Callable[[], Any] | None = None
    own_err: float | None = None


Builder = Callable[[nn.Module, tuple[torch.Tensor, ...]], Built]
"""Makes a system's :class:`Built` for a module and its example inputs."""

Timer = Callable[[Callable[[], Any], int, int], list[float]]
"""``timer(call, reps, warmup)``: ``warmup`` untimed calls of ``call``, then the times of
``reps`` calls, in milliseconds. :func:`measure` calls it once per system and round and takes
the median over all the rounds' samples, so the timer returns samples rather than a summary."""

DEFAULT_ROUNDS = 5
"""Interleaved timing rounds per case, unless ``--rounds`` says otherwise."""

SYSTEMS = ("eager", "eager_graph", "compile", "graphs", "cublas", "llmopt")
"""Every system a case may time, in build order; ``graphs`` (torch.compile with CUDA graphs)
only with ``--compile-graphs``, ``cublas`` (the bare product) only for the matrix products
of a 16-bit run."""
MS_FIELD = {"eager": "eager_ms", "eager_graph": "eager_graph_ms", "compile": "compile_ms",
            "graphs": "compile_graphs_ms", "cublas": "cublas_ms", "llmopt": "llmopt_ms"}
ERR_FIELD = {"eager": "eager_err_rel", "eager_graph": "eager_graph_err_rel",
             "compile": "compile_err_rel", "graphs": "compile_graphs_err_rel",
             "cublas": "cublas_err_rel", "llmopt": "max_err_rel"}
ERROR_FIELD = {"eager": "eager_error", "eager_graph": "eager_graph_error",
               "compile": "compile_error", "graphs": "compile_graphs_error",
               "cublas": "cublas_error", "llmopt": "error"}
COMPILE_FIELD = {"eager_graph": "eager_graph_capture_s", "compile": "torch_compile_s",
                 "graphs": "torch_compile_graphs_s", "cublas": "cublas_capture_s",
                 "llmopt": "llmopt_compile_s"}
OPTIONAL_SYSTEMS = ("graphs", "cublas")
"""Systems timed only when asked for: their time field stays absent otherwise."""


def _default_times(row: Case) -> None:
    """Give ``row`` a time field (``None``) for every default system that has none."""
    for system in SYSTEMS:
        if system not in OPTIONAL_SYSTEMS:
            row.setdefault(MS_FIELD[system], None)


def _sync(inputs: Sequence[Any]) -> None:
    """Wait for the GPU when the inputs live on one."""
    if any(isinstance(t, torch.Tensor) and t.is_cuda for t in inputs):
        torch.cuda.synchronize()


def _first(out: Any) -> torch.Tensor:
    """The first output of a call (systems return a tensor or a tuple of them)."""
    return out[0] if isinstance(out, tuple | list) else out


def build_eager(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> Built:
    """PyTorch eager: the module itself."""
    return Built(fn=module)


GRAPH_WARMUP = 3
"""Eager calls on a side stream before the eager CUDA graph is captured."""


def build_eager_graph(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> Built:
    """PyTorch eager replayed from a CUDA graph, as llmopt is: :data:`GRAPH_WARMUP` calls on a
    side stream (so that what eager creates lazily — cuBLAS handles and workspaces, blocks of
    the caching allocator — exists before the capture, as ``torch.cuda.graphs`` prescribes),
    then one call captured into a ``torch.cuda.CUDAGraph`` reading static copies of the
    inputs. ``fn(*args)`` copies ``args`` into those buffers and replays; ``replay`` replays
    on them as they are (what is timed, like llmopt's replay). Both return the graph's static
    output."""
    start = time.perf_counter()
    static = tuple(t.clone() for t in inputs)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(GRAPH_WARMUP):
            module(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = module(*static)
    torch.cuda.synchronize()

    def replay() -> Any:
        graph.replay()
        return out

    def fn(*args: torch.Tensor) -> Any:
        for buffer, arg in zip(static, args, strict=True):
            if buffer.data_ptr() != arg.data_ptr():
                buffer.copy_(arg)
        return replay()

    return Built(fn=fn, compile_s=time.perf_counter() - start, replay=replay)


def build_torch_compile(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> Built:
    """``torch.compile(module, dynamic=False)``, default mode, compiled by a first call."""
    torch._dynamo.reset()
    start = time.perf_counter()
    compiled = torch.compile(module, dynamic=False)
    compiled(*inputs)
    _sync(inputs)
    return Built(fn=compiled, compile_s=time.perf_counter() - start)


def build_torch_compile_graphs(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> Built:
    """``torch.compile(module, dynamic=False, mode="reduce-overhead")``: Inductor's kernels
    replayed from CUDA graphs, as llmopt's are, so the comparison leaves out PyTorch's
    per-launch host overhead. Compiled, recorded and replayed by three first calls (no
    dynamo reset here: that would drop the default-mode system built before it)."""
    start = time.perf_counter()
    compiled = torch.compile(module, dynamic=False, mode="reduce-overhead")
    for _ in range(3):
        compiled(*inputs)
    _sync(inputs)
    return Built(fn=compiled, compile_s=time.perf_counter() - start)


def build_cublas(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> Built:
    """cuBLAS on the case's bare matrix product (:func:`bare_product`: ``F.linear`` in the
    case's dtype), replayed from a CUDA graph as the eager graph is
    (:func:`build_eager_graph`), so that its time is the library's kernel with no host
    overhead: the yardstick of llmopt's products. It computes a part of the case, so it
    carries its own error against the product in float64 (``own_err``) and is timed by its
    replay alone; ``fn`` takes the product's input."""
    layer, args = bare_product(module, inputs)
    graph = build_eager_graph(layer, args)
    err = rel_error(_first(graph.replay()), reference(layer, args))
    return Built(fn=graph.fn, compile_s=graph.compile_s, replay=graph.replay, own_err=err)


def launch_count(program: CompiledProgram) -> int:
    """The number of kernel launches in one call of ``program``."""
    return sum(isinstance(step, LaunchStep) for step in program.plan.steps)


def static_replay(call: Callable[..., Any], program: CompiledProgram
                  ) -> Callable[[], Any] | None:
    """``call`` with the program's CUDA-graph static input buffers as arguments (no input
    copy before the replay), or ``None`` when the program has not captured a graph."""
    args = program.static_inputs
    if not program.graph_captured or len(args) != len(program.input_names):
        return None
    return lambda: call(*args)


def build_llmopt(module: nn.Module, inputs: tuple[torch.Tensor, ...],
                 pipeline: str = DEFAULT_PIPELINE) -> Built:
    """``llmopt.compile(module, inputs, pipeline, cuda_graph=True)``, its graph captured by a
    first call; the tolerance comes from a separate capture of the same module."""
    tol = tolerance(llmopt.capture(module, inputs))
    start = time.perf_counter()
    compiled = llmopt.compile(module, inputs, pipeline, cuda_graph=True)
    compiled(*inputs)
    _sync(inputs)
    seconds = time.perf_counter() - start
    program = compiled.program
    return Built(fn=compiled, compile_s=seconds, tol=tol, kernels=launch_count(program),
                 replay=static_replay(compiled, program))


def llmopt_program_builder(capture_fn: Callable[[], Any],
                           pipeline: str = DEFAULT_PIPELINE) -> Builder:
    """A builder running llmopt on a program captured by ``capture_fn`` (``capture_layer``
    or ``capture_model`` of a model): ``pipeline`` for the GPU's architecture, then a
    :class:`CompiledProgram` with ``cuda_graph=True`` and the weights bound by name."""

    def build(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> Built:
        from llmopt.api import program_arch
        from llmopt.registry import with_arch
        from llmopt.target import current_target

        start = time.perf_counter()
        captured = capture_fn()
        tol = tolerance(captured.module)
        arch = program_arch(pipeline, current_target().arch)
        llmopt.lower(captured.module, with_arch(pipeline, arch))
        program = CompiledProgram(captured.module, params=captured.params, cuda_graph=True,
                                  arch=arch)

        def call(*args: torch.Tensor) -> torch.Tensor:
            return program(*args)[0]

        call(*inputs)
        _sync(inputs)
        return Built(fn=call, compile_s=time.perf_counter() - start, tol=tol,
                     kernels=launch_count(program), replay=static_replay(call, program))

    return build


def default_builders(pipeline: str = DEFAULT_PIPELINE) -> dict[str, Builder]:
    """Eager, eager replayed from a CUDA graph, torch.compile and llmopt (``llmopt.compile``
    with ``pipeline``) for op cases."""
    return {"eager": build_eager, "eager_graph": build_eager_graph,
            "compile": build_torch_compile,
            "llmopt": functools.partial(build_llmopt, pipeline=pipeline)}


# --- measuring ----------------------------------------------------------------------------------


def cuda_samples_ms(call: Callable[[], Any], reps: int, warmup: int) -> list[float]:
    """The CUDA-event times of ``reps`` calls of ``call()`` (each followed by a
    synchronisation), after ``warmup`` untimed calls, in milliseconds: the suite's
    :data:`Timer`."""
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    times: list[float] = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def cuda_time_ms(call: Callable[[], Any], reps: int, warmup: int) -> float:
    """The median of :func:`cuda_samples_ms`: one system timed on its own, in milliseconds."""
    return statistics.median(cuda_samples_ms(call, reps, warmup))


def timed_per_round(reps: int, rounds: int) -> int:
    """Timed calls of a system in each of ``rounds`` rounds: ``ceil(reps / rounds)``, so
    that every system gets at least ``reps`` samples in all."""
    return math.ceil(reps / rounds)


@dataclass(frozen=True)
class TimedCall:
    """One timed series of a case: ``call()`` is timed into ``row[field]`` on behalf of
    ``system`` (whose failure drops all its series)."""

    system: str
    field: str
    call: Callable[[], Any]


def interleaved_samples(calls: Sequence[TimedCall], timer: Timer, *, reps: int, warmup: int,
                        rounds: int) -> tuple[dict[str, list[float]], dict[str, Exception]]:
    """Time ``calls`` in ``rounds`` interleaved rounds and return the samples of each field
    and the error of each system whose call raised.

    In round ``r`` the calls still being timed run in their given order rotated left by
    ``r`` (round 0: as given, round 1: from the second on, then the first, ...), each as
    one ``timer`` call of
    ``warmup`` untimed and :func:`timed_per_round` timed calls; a field's samples are those
    of all rounds. Alternating the systems exposes them to the same slow and fast moments of
    a shared GPU, and rotating keeps any one from always running right after another's
    warm-up or always first. A call that raises drops every series of its system, samples
    included, from this and the remaining rounds; the other systems go on.

    Raises:
        ValueError: ``rounds`` or ``reps`` is not positive, or ``warmup`` is negative.
    """
    if rounds < 1 or reps < 1 or warmup < 0:
        raise ValueError(f"need rounds >= 1, reps >= 1 and warmup >= 0 "
                         f"(got {rounds}, {reps}, {warmup})")
    per_round = timed_per_round(reps, rounds)
    active = list(calls)
    samples: dict[str, list[float]] = {c.field: [] for c in active}
    errors: dict[str, Exception] = {}
    for r in range(rounds):
        if not active:
            break
        shift = r % len(active)
        for entry in active[shift:] + active[:shift]:
            if entry.system in errors:
                continue  # an earlier series of the same system failed in this round
            try:
                samples[entry.field] += timer(entry.call, per_round, warmup)
            except Exception as err:  # one system's failure must not hide the others
                errors[entry.system] = err
        for entry in active:
            if entry.system in errors:
                samples.pop(entry.field, None)
        active = [c for c in active if c.system not in errors]
    return samples, errors


def error_text(err: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters)."""
    lines = str(err).strip().splitlines()
    text = f"{type(err).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text[:300]


def reference(module: nn.Module | Callable[..., Any], inputs: Sequence[torch.Tensor]
              ) -> torch.Tensor:
    """The module (or function) evaluated in float64 on the same inputs (a module's deep
    copy is widened; integer inputs stay as they are).

    Widening a bfloat16 or float16 value to float64 is exact, so for a 16-bit case this is
    the exact result (to float64's rounding, far below 16-bit errors) of the very weights and
    inputs every system gets, not of the float32 values they were rounded from: each
    system's error against it is its own arithmetic's alone. The comparison is the same in
    every dtype, and PyTorch eager's own error is measured by it too (:func:`half_errors`).
    """
    wide = copy.deepcopy(module).double() if isinstance(module, nn.Module) else module
    args = [t.double() if t.is_floating_point() else t for t in inputs]
    with torch.no_grad():
        out = _first(wide(*args)).detach()
    del wide, args
    return out


def rel_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """``max|got - ref| / max|ref|`` (the absolute error when ``ref`` is all zeros).

    Raises:
        ValueError: the shapes differ.
    """
    if tuple(got.shape) != tuple(ref.shape):
        raise ValueError(f"output shape {tuple(got.shape)} != reference {tuple(ref.shape)}")
    diff = (got.detach().double() - ref.double()).abs().max().item()
    scale = ref.double().abs().max().item()
    return diff / scale if scale > 0 else diff


def half_errors(fn: nn.Module | Callable[..., Any], args: Sequence[torch.Tensor],
                run: Callable[..., Any]) -> tuple[float, float]:
    """``(error of run(*args), error of PyTorch's fn(*args))``, both :func:`rel_error`
    against ``fn`` in float64 on the same (16-bit) values (:func:`reference`): llmopt's
    error beside PyTorch's own in the same dtype, judged by :func:`within_error_goal`. The
    suite measures exactly this (``max_err_rel`` beside ``eager_err_rel``) for every case of
    a 16-bit run."""
    ref = reference(fn, args)
    with torch.no_grad():
        own = _first(fn(*args))
        ours = _first(run(*args))
    return rel_error(ours, ref), rel_error(own, ref)


def within_error_goal(ours: float, theirs: float, dtype: str) -> bool:
    """Whether an error ``ours`` against float64 meets the 16-bit goal beside PyTorch's own
    error ``theirs`` on the same inputs: at most :data:`report.ERROR_GOAL` times it plus one
    epsilon of ``dtype`` (:data:`HALF_EPS`). llmopt computes in float32 and rounds where
    PyTorch rounds, so its error should be PyTorch's; the epsilon covers outputs PyTorch
    gets exactly (a data movement), which llmopt may still round once differently. It is
    what the GPU tests of 16-bit ops assert; the records keep the plain ratio beside it
    (``err_vs_eager``), whose goal has no epsilon. A NaN error never meets it."""
    return ours <= ERROR_GOAL * theirs + HALF_EPS[dtype]


def dtype_name(dtype: torch.dtype) -> str:
    """``bfloat16`` for ``torch.bfloat16``: the name ``--dtype`` and the results use."""
    return str(dtype).removeprefix("torch.")


def add_error_goal(row: Case, dtype: torch.dtype) -> Case:
    """In a 16-bit run, set ``err_vs_eager`` (llmopt's error / PyTorch eager's own 16-bit
    error on the same inputs; ``None`` where either is missing or eager's is 0) and
    ``ok_vs_eager`` (:func:`within_error_goal`; ``None`` without both errors) of ``row``, in
    place; a float32 row is left as it is. Returns ``row``."""
    name = dtype_name(dtype)
    if name not in HALF_EPS:
        return row
    ours, theirs = row.get("max_err_rel"), row.get("eager_err_rel")
    if isinstance(ours, float) and isinstance(theirs, float):
        row["err_vs_eager"] = ours / theirs if theirs > 0 else None
        row["ok_vs_eager"] = bool(within_error_goal(ours, theirs, name))
    else:
        row["err_vs_eager"] = row["ok_vs_eager"] = None
    return row


def _record_failure(row: Case, system: str, err: Exception) -> None:
    """Put ``system``'s failure into ``row`` (the error's first line, no time) and print it."""
    row[ERROR_FIELD[system]] = error_text(err)
    row[MS_FIELD[system]] = None
    print(f"  {row.get('name')}: {system} failed: {error_text(err)}", flush=True)
    traceback.print_exception(err, limit=4)


def timed_calls(system: str, built: Built, inputs: tuple[torch.Tensor, ...],
                copies: bool = True) -> list[TimedCall]:
    """What is timed of a built system: ``fn(*inputs)`` into its time field or, when it has
    a ``replay``, the replay there and (with ``copies``, for a system that computes the
    whole case) ``fn(*inputs)``, which copies the inputs into the static buffers first, into
    ``<system>_copy_ms``."""

    def call() -> Any:
        return built.fn(*inputs)

    if built.replay is None:
        return [TimedCall(system, MS_FIELD[system], call)]
    # The graph reads the static buffers the check's call filled with ``inputs``.
    replayed = TimedCall(system, MS_FIELD[system], built.replay)
    if copies and built.own_err is None:
        return [replayed, TimedCall(system, f"{system}_copy_ms", call)]
    return [replayed]


def build_systems(row: Case, module: nn.Module, inputs: tuple[torch.Tensor, ...],
                  ref: torch.Tensor, builders: Mapping[str, Builder]) -> dict[str, Built]:
    """Build every system of ``builders`` (in :data:`SYSTEMS` order) and check its output
    against ``ref``, recording compile time, tolerance, kernel count and error in ``row``.

    Returns the systems that built and checked, to be timed together; one that raises gets
    its failure recorded (:func:`_record_failure`) and is left out, and the others still
    build. What a failed build made is garbage when this returns.
    """
    built: dict[str, Built] = {}
    for system in SYSTEMS:
        builder = builders.get(system)
        if builder is None:
            continue
        try:
            made = builder(module, inputs)
            if made.compile_s is not None and system in COMPILE_FIELD:
                row[COMPILE_FIELD[system]] = made.compile_s
            if made.tol is not None:
                row["tol"] = made.tol
            if made.kernels is not None:
                row["kernels"] = made.kernels
            row[ERR_FIELD[system]] = (made.own_err if made.own_err is not None
                                      else rel_error(_first(made.fn(*inputs)), ref))
            built[system] = made
        except Exception as err:  # one system's failure must not hide the others
            _record_failure(row, system, err)
    return built


def measure(row: Case, module: nn.Module, inputs: tuple[torch.Tensor, ...],
            ref: torch.Tensor, builders: Mapping[str, Builder], *, timer: Timer, reps: int,
            warmup: int, rounds: int = DEFAULT_ROUNDS, copies: bool = True,
            dtype: torch.dtype = torch.float32) -> Case:
    """Build, check and time every system of ``builders`` on one case, into ``row``
    (``copies``: also time the copying calls of the replayed systems, see
    :func:`timed_calls`; ``dtype``: the case's, for :func:`add_error_goal`).

    Every system is built and checked against ``ref`` first and kept alive; then all are
    timed together by :func:`interleaved_samples` (``rounds`` rounds of ``warmup`` untimed
    and ``ceil(reps / rounds)`` timed calls each, in rotating order), so that a GPU whose
    speed drifts during the case slows every system alike; each time is the median of all
    the system's samples. A system that raises, in its build, its check or its timing, gets
    its error's first line in its error field (``error`` for llmopt) and no time; the others
    still run. Everything built is freed at the end. Sets ``ok`` (llmopt within ``tol``),
    in 16 bits the error goal against eager's own error, and the ratios. Returns ``row``.
    """
    built = build_systems(row, module, inputs, ref, builders)
    try:
        samples, errors = interleaved_samples(
            [c for system, b in built.items()
             for c in timed_calls(system, b, inputs, copies)],
            timer, reps=reps, warmup=warmup, rounds=rounds)
        for field, times in samples.items():
            row[field] = statistics.median(times) if times else None
        for system, err in errors.items():
            _record_failure(row, system, err)
    finally:
        # Compiled programs and their CUDA graphs go before the next case is built.
        built.clear()
        gc.collect()
    _default_times(row)
    err, tol = row.get("max_err_rel"), row.get("tol")
    row["ok"] = (bool(math.isfinite(err) and err <= tol)
                 if isinstance(err, float) and isinstance(tol, float) else None)
    add_error_goal(row, dtype)
    return add_ratios(row)


def cleanup() -> None:
    """Free what a case left behind: Python garbage, dynamo's caches, cached GPU memory."""
    gc.collect()
    torch._dynamo.reset()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_op_case(dims: ModelDims, seq: int, op: str, *, device: str | torch.device = "cuda",
                reps: int = 100, warmup: int = 10, rounds: int = DEFAULT_ROUNDS,
                timer: Timer | None = None, builders: Mapping[str, Builder] | None = None,
                pipeline: str = DEFAULT_PIPELINE, dtype: torch.dtype = torch.float32) -> Case:
    """Build one op case in ``dtype``, its float64 reference, and measure every system on it
    (llmopt lowered by ``pipeline``; ``reps``, ``warmup`` and ``rounds`` as :func:`measure`
    takes them). When ``builders`` time cuBLAS the row gets the product's ``mnk``, for the
    TFLOP/s."""
    name = case_name(dims.name, seq, op)
    row: Case = {"name": name, "model": dims.name, "seq": seq, "op": op}
    case: OpCase | None = None
    ref: torch.Tensor | None = None
    chosen = default_builders(pipeline) if builders is None else builders
    try:
        with torch.no_grad():
            case = make_case(dims, seq, op, device=device, dtype=dtype)
            row["shapes"] = [list(t.shape) for t in case.inputs]
            if "cublas" in chosen:
                row["mnk"] = product_mnk(case.module, case.inputs)
            ref = reference(case.module, case.inputs)
            measure(row, case.module, case.inputs, ref, chosen, timer=timer or cuda_samples_ms,
                    reps=reps, warmup=warmup, rounds=rounds, dtype=dtype)
    except Exception as err:  # the case itself could not be built
        row.setdefault("error", error_text(err))
        traceback.print_exc(limit=4)
    finally:
        del case, ref
        cleanup()
    _default_times(row)
    return add_ratios(row)


# --- blocks -------------------------------------------------------------------------------------


class LayerCall(nn.Module):
    """A Hugging Face decoder layer called as ``(hidden_states, cos, sin) -> hidden_states``
    (causal attention, no mask, no cache), as :func:`capture_layer` captures it."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                ) -> torch.Tensor:
        """The layer's output hidden states."""
        out = self.layer(hidden_states, attention_mask=None, position_embeddings=(cos, sin))
        return out[0] if isinstance(out, tuple) else out


class LogitsCall(nn.Module):
    """A causal LM called as ``input_ids -> logits`` (prefill, no cache), as
    :func:`capture_model` captures it."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The logits of every position."""
        return self.model(input_ids=input_ids, use_cache=False).logits


def perturb_(model: nn.Module, seed: int) -> None:
    """Add N(0, 0.1²) noise to every 1-D parameter (norm weights, biases), in place, so that
    none keeps its trivial initial value (ones or zeros)."""
    params = [p for p in model.parameters() if p.dim() == 1]
    if not params:
        return
    gen = torch.Generator(device=params[0].device).manual_seed(seed)
    with torch.no_grad():
        for p in params:
            p.add_(torch.randn(p.shape, generator=gen, device=p.device, dtype=p.dtype)
                   * BIAS_STD)


def block_model(source: Any, what: str, *, device: str | torch.device,
                dtype: torch.dtype = torch.float32, perturb_seed: int | None = None) -> Any:
    """The model of a block case, built from ``source`` (a preset name or a config, as
    :func:`~llmopt.frontend.models.build_model` takes it) on ``device``: one decoder layer
    for ``what = "decoder_layer"``, every layer otherwise; in float32 with seeded weights,
    every 1-D parameter perturbed by ``perturb_seed`` (:func:`perturb_`, unless ``None``),
    then its parameters cast to ``dtype`` (:func:`cast_params_`). The suite, the sweep and
    the programs they capture on the meta device all build models so."""
    from llmopt.frontend.models import build_model

    model = build_model(source, device=device, dtype=torch.float32, seed=0,
                        layers=1 if what == "decoder_layer" else None)
    if perturb_seed is not None:
        perturb_(model, perturb_seed)
    return cast_params_(model, dtype)


def run_block_case(model_name: str, seq: int, what: str, *, config: Any = None,
                   device: str = "cuda", reps: int = 100, warmup: int = 10,
                   rounds: int = DEFAULT_ROUNDS, timer: Timer | None = None,
                   builders: Mapping[str, Builder] | None = None,
                   pipeline: str = DEFAULT_PIPELINE, dtype: torch.dtype = torch.float32
                   ) -> Case:
    """One block case (``what`` is ``decoder_layer`` or ``whole_model``): the model built
    from its preset (or from ``config``, a transformers config, when given) with seeded,
    perturbed weights, in ``dtype`` (:func:`block_model`), its float64 reference, and every
    system measured on it (llmopt lowered by ``pipeline``; ``reps``, ``warmup`` and
    ``rounds`` as :func:`measure` takes them). ``builders`` replace the default systems by
    name."""
    from llmopt.frontend.models import (
        capture_layer,
        capture_model,
        decoder_layers,
        position_embeddings,
    )

    name = case_name(model_name, seq, what)
    row: Case = {"name": name, "model": model_name, "seq": seq, "op": what}
    model: Any = None
    wrapper: nn.Module | None = None
    inputs: tuple[torch.Tensor, ...] = ()
    ref: torch.Tensor | None = None
    try:
        with torch.no_grad():
            seed = case_seed(name)
            model = block_model(model_name if config is None else config, what, device=device,
                                dtype=dtype, perturb_seed=seed)
            gen = torch.Generator(device=device).manual_seed(seed + 1)
            if what == "decoder_layer":
                wrapper = LayerCall(decoder_layers(model)[0])
                x = torch.randn(1, seq, model.config.hidden_size, generator=gen, device=device)
                # cos and sin come in the weights' dtype, as the model hands them its layers
                cos, sin = (t.to(device) for t in position_embeddings(model, seq))
                inputs = (x.to(dtype), cos, sin)
                llm = llmopt_program_builder(lambda m=model: capture_layer(m, seq), pipeline)
            elif what == "whole_model":
                wrapper = LogitsCall(model)
                inputs = (torch.randint(0, model.config.vocab_size, (1, seq), generator=gen,
                                        device=device),)
                llm = llmopt_program_builder(lambda m=model: capture_model(m, seq), pipeline)
            else:
                raise ValueError(f"unknown block '{what}' (known: {', '.join(BLOCKS)})")
            row["shapes"] = [list(t.shape) for t in inputs]
            ref = reference(wrapper, inputs)
            cleanup()  # the float64 copy is gone: give its memory back before compiling
            systems = {"eager": build_eager, "eager_graph": build_eager_graph,
                       "compile": build_torch_compile, "llmopt": llm, **(builders or {})}
            measure(row, wrapper, inputs, ref, systems, timer=timer or cuda_samples_ms,
                    reps=reps, warmup=warmup, rounds=rounds, dtype=dtype)
    except Exception as err:
        row.setdefault("error", error_text(err))
        traceback.print_exc(limit=4)
    finally:
        del model, wrapper, inputs, ref
        cleanup()
    _default_times(row)
    return add_ratios(row)


# --- results ------------------------------------------------------------------------------------


def _command(args: Sequence[str]) -> str | None:
    """The first line a command prints, or ``None`` when it cannot run."""
    try:
        out = subprocess.run(list(args), capture_output=True, text=True, timeout=30,
                             cwd=ROOT, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out else None


def git_commit() -> str | None:
    """The repository's ``HEAD`` (``-dirty`` when the tree has changes), if it is a git
    checkout."""
    sha = _command(["git", "rev-parse", "HEAD"])
    if sha is None:
        return None
    dirty = _command(["git", "status", "--porcelain", "--untracked-files=no"])
    return sha + ("-dirty" if dirty else "")


def reduced_precision_reduction(dtype: str) -> bool | None:
    """Whether PyTorch lets cuBLAS reduce a ``dtype`` product in reduced precision
    (``torch.backends.cuda.matmul.allow_{bf16,fp16}_reduced_precision_reduction``); ``None``
    for float32 or where this torch has no such setting. The suite leaves it at PyTorch's
    default, as a user gets it, and records it: it bears on eager's and cuBLAS's error and
    speed in 16 bits."""
    flag = {"bfloat16": "allow_bf16_reduced_precision_reduction",
            "float16": "allow_fp16_reduced_precision_reduction"}.get(dtype)
    try:
        value = getattr(torch.backends.cuda.matmul, flag) if flag else None
    except Exception:  # a torch whose backend settings have moved: nothing to record
        return None
    return value if isinstance(value, bool) else None


def run_metadata(kind: str, *, commit: str | None, reps: int, warmup: int,
                 rounds: int = DEFAULT_ROUNDS, pipeline: str = DEFAULT_PIPELINE,
                 dtype: str = DEFAULT_DTYPE) -> Doc:
    """The top-level fields of a results file: what ran where, in which dtype, how it was
    timed (and, when it is not ``lower-to-cuda``, the pipeline llmopt lowered with; in 16
    bits, :func:`reduced_precision_reduction`)."""
    per_round = timed_per_round(reps, rounds)
    cuda = torch.cuda.is_available()
    half = dtype != DEFAULT_DTYPE
    return {
        "kind": kind,
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "driver": _command(["nvidia-smi", "--query-gpu=driver_version",
                            "--format=csv,noheader"]),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "llmopt": llmopt.__version__,
        "commit": commit,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "dtype": dtype,
        "tf32": False,
        **({"reduced_precision_reduction": reduced_precision_reduction(dtype)} if half else {}),
        "reps": reps,
        "warmup": warmup,
        "rounds": rounds,
        "timing": f"median of {rounds * per_round} calls per system, each between CUDA events "
                  f"and synchronised, in {rounds} interleaved rounds: in each round every "
                  f"system in turn, in an order rotated from round to round, runs {warmup} "
                  f"warm-up calls and then {per_round} timed calls",
        **({} if pipeline == DEFAULT_PIPELINE else {"pipeline": pipeline}),
    }


class ResultsFile:
    """A results file rewritten after every case (see :func:`report.write_json`).

    Cases already in the file (of the same kind and dtype) are kept unless ``fresh``; a new
    case replaces an old one of the same name, in its place.
    """

    def __init__(self, path: Path, meta: Doc, *, fresh: bool = False) -> None:
        self.path = path
        self.meta = meta
        self.cases: dict[str, Case] = {}
        if not fresh and path.is_file():
            try:
                old = load(path)
            except (OSError, ValueError) as err:
                print(f"note: ignoring unreadable {path}: {err}")
            else:
                if (old.get("kind") == meta.get("kind")
                        and doc_dtype(old) == doc_dtype(meta)):
                    self.cases = {c["name"]: c for c in old.get("cases", [])}
        self.write()

    def add(self, case: Case) -> None:
        """Record ``case`` and rewrite the file."""
        self.cases[case["name"]] = case
        self.write()

    def doc(self) -> Doc:
        """The results document: metadata, cases, summary."""
        return with_summary({**self.meta, "cases": list(self.cases.values())})

    def write(self) -> None:
        """Rewrite the file."""
        write_json(self.doc(), self.path)


def configure_precision() -> None:
    """FP32 matmuls and convolutions at full precision: TF32 off. (It changes nothing in 16
    bits, where cuBLAS's reductions follow :func:`reduced_precision_reduction`.)"""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def _short(case: Case) -> str:
    """One progress line for a finished case."""

    def ms(key: str) -> str:
        value = case.get(key)
        return f"{value:.4f}" if isinstance(value, float) else "-"

    ratio = case.get("vs_best")
    text = (f"eager {ms('eager_ms')} ms, eager graph {ms('eager_graph_ms')} ms, compile "
            f"{ms('compile_ms')} ms, llmopt {ms('llmopt_ms')} ms, vs best "
            f"{f'{ratio:.2f}' if isinstance(ratio, float) else '-'}, err "
            f"{case.get('max_err_rel', '-')}, ok {case.get('ok')}")
    if "cublas_ms" in case:
        text += (f"; cuBLAS {ms('cublas_ms')} ms, {ms('cublas_tflops')} vs "
                 f"{ms('llmopt_tflops')} TFLOP/s")
    if "err_vs_eager" in case:
        text += (f"; err / eager's {ms('err_vs_eager')} (eager {ms('eager_err_rel')}), "
                 f"goal met {case.get('ok_vs_eager')}")
    return text + (f"  [{case['error']}]" if case.get("error") else "")


# --- command line -------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="kind", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out-dir", type=Path, help="where the results files go")
    common.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    common.add_argument("--commit", help="the commit measured (default: git HEAD, if any)")
    common.add_argument("--reps", type=int, default=100,
                        help="timed calls per system, over all rounds (rounded up to a "
                             "multiple of --rounds)")
    common.add_argument("--warmup", type=int, default=10,
                        help="untimed calls before each round's timed calls")
    common.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                        help="interleaved timing rounds, the systems in rotating order, each "
                             "with ceil(reps / rounds) timed calls (%(default)s)")
    common.add_argument("--tag", default=None,
                        help=f"file-name suffix (default: the GPU's model, {DEFAULT_TAG} "
                        "without a GPU)")
    common.add_argument("--fresh", action="store_true",
                        help="drop the cases an earlier run left in the results file")
    common.add_argument("--list", action="store_true", help="print the case names and exit")
    common.add_argument("--compile-graphs", action="store_true",
                        help="also time torch.compile(mode='reduce-overhead'), whose kernels "
                             "replay from CUDA graphs as llmopt's do (compile_graphs_ms, "
                             "vs_compile_graphs; part of vs_best)")
    common.add_argument("--pipeline", default=DEFAULT_PIPELINE,
                        help="the pass pipeline llmopt lowers with (%(default)s), e.g. to A/B "
                             "a pass; recorded in the results file; "
                             "lower-to-cuda{arch=sm_90a} on an H100/H200 compiles for sm_90a "
                             "(16-bit products on wgmma)")
    common.add_argument("--dtype", choices=DTYPES, default=DEFAULT_DTYPE,
                        help="the weights' and inputs' dtype, every system's (%(default)s); "
                             "a 16-bit run also times cuBLAS on the matrix products and "
                             "judges llmopt's error against PyTorch's own, into "
                             "<kind>-<dtype>-<tag>.*")
    common.add_argument("--dry-run", action="store_true",
                        help="capture and lower every selected case on the CPU (no GPU, "
                             "nothing timed) and print its kernels and tolerance")
    ops = sub.add_parser("ops", parents=[common], help="single ops")
    ops.add_argument("--seqs", nargs="+", type=int, default=list(OP_SEQS))
    ops.add_argument("--ops", nargs="+", choices=list(OPS), default=list(OPS))
    blocks = sub.add_parser("blocks", parents=[common], help="decoder layers, whole models")
    blocks.add_argument("--seqs", nargs="+", type=int, default=list(BLOCK_SEQS))
    blocks.add_argument("--whole-model", action="store_true",
                        help="also the whole model's prefill logits")
    blocks.add_argument("--model-seq", type=int, default=WHOLE_MODEL_SEQ,
                        help="sequence length of the whole model (%(default)s)")
    blocks.add_argument("--no-layers", action="store_true", help="skip the decoder layers")
    args = parser.parse_args(argv)
    args.tag = args.tag or gpu_tag()
    if not (args.list or args.dry_run) and args.out_dir is None:
        parser.error("--out-dir is required")
    if args.reps < 1 or args.rounds < 1 or args.warmup < 0:
        parser.error("--reps and --rounds must be positive and --warmup not negative")
    return args


def planned_cases(args: argparse.Namespace) -> list[tuple[str, str, int, str]]:
    """``(name, model, seq, what)`` of every case the arguments ask for, in run order."""
    if args.kind == "ops":
        return [(case_name(m, s, op), m, s, op)
                for m in args.models for s in args.seqs for op in args.ops]
    plan: list[tuple[str, str, int, str]] = []
    for m in args.models:
        if not args.no_layers:
            plan += [(case_name(m, s, "decoder_layer"), m, s, "decoder_layer")
                     for s in args.seqs]
        if args.whole_model:
            plan.append((case_name(m, args.model_seq, "whole_model"), m, args.model_seq,
                         "whole_model"))
    return plan


def extra_builders(kind: str, what: str, dtype: str, *, compile_graphs: bool = False
                   ) -> dict[str, Builder]:
    """The optional systems of a case: torch.compile with CUDA graphs (``compile_graphs``)
    and, for an op case that is a matrix product (:data:`PRODUCT_OPS`) in a 16-bit dtype,
    cuBLAS on its bare product (:func:`build_cublas`)."""
    extra: dict[str, Builder] = {}
    if compile_graphs:
        extra["graphs"] = build_torch_compile_graphs
    if kind == "ops" and what in PRODUCT_OPS and dtype != DEFAULT_DTYPE:
        extra["cublas"] = build_cublas
    return extra


def dry_run(args: argparse.Namespace, plan: Sequence[tuple[str, str, int, str]]) -> int:
    """Capture every planned case in ``args.dtype`` and lower it with ``args.pipeline`` for
    the current target (the sm_90 default without a GPU), printing its kernels, tolerance
    and, for a product, ``M×N×K``: what a GPU run would compile, checked on the CPU first.
    Op cases are built on the CPU, blocks on the meta device. Returns 1 when any case fails
    to capture or lower, else 0."""
    from llmopt.frontend.models import capture_layer, capture_model
    from llmopt.registry import pipeline_arch, with_arch
    from llmopt.target import current_target

    dtype = getattr(torch, args.dtype)
    spec = with_arch(args.pipeline, current_target().arch)
    arch = pipeline_arch(spec)
    status = 0
    for name, model, seq, what in plan:
        start = time.perf_counter()
        try:
            note = ""
            if args.kind == "ops":
                case = make_case(MODELS[model], seq, what, dtype=dtype)
                module = llmopt.capture(case.module, case.inputs)
                mnk = product_mnk(case.module, case.inputs)
                note = f", product {'x'.join(map(str, mnk))}" if mnk else ""
            else:
                meta = block_model(model, what, device="meta", dtype=dtype)
                captured = (capture_layer(meta, seq) if what == "decoder_layer"
                            else capture_model(meta, seq))
                module = captured.module
            tol = tolerance(module)
            llmopt.lower(module, spec)
            kernels = llmopt.cuda_source(module).count("__global__")
            print(f"{name}: {args.dtype}, lowered for {arch} in "
                  f"{time.perf_counter() - start:.1f} s, {kernels} kernels, tol {tol:.1e}"
                  f"{note}", flush=True)
        except Exception as err:  # reported, and the other cases still lowered
            print(f"{name}: failed: {error_text(err)}", flush=True)
            status = 1
        finally:
            gc.collect()
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite (see the module docstring); returns the exit status."""
    args = parse_args(argv)
    plan = planned_cases(args)
    if args.list:
        print("\n".join(name for name, *_ in plan))
        return 0
    if args.dry_run:
        return dry_run(args, plan)
    if not torch.cuda.is_available():
        print("the benchmark suite needs a CUDA GPU (torch.cuda.is_available() is False); "
              "--dry-run lowers the cases on the CPU", file=sys.stderr)
        return 2
    configure_precision()
    dtype = getattr(torch, args.dtype)
    commit = args.commit or git_commit()
    meta = run_metadata(args.kind, commit=commit, reps=args.reps, warmup=args.warmup,
                        rounds=args.rounds, pipeline=args.pipeline, dtype=args.dtype)
    path = args.out_dir / f"{results_stem(args.kind, args.tag, args.dtype)}.json"
    results = ResultsFile(path, meta, fresh=args.fresh)
    print(f"{len(plan)} {args.kind} cases in {args.dtype} on {meta['gpu']} (torch "
          f"{meta['torch']}, CUDA {meta['cuda']}, commit {commit}) -> {results.path}",
          flush=True)
    for k, (name, model, seq, what) in enumerate(plan, 1):
        print(f"[{k}/{len(plan)}] {name}", flush=True)
        start = time.perf_counter()
        extra = extra_builders(args.kind, what, args.dtype,
                               compile_graphs=args.compile_graphs)
        if args.kind == "ops":
            row = run_op_case(MODELS[model], seq, what, device="cuda", reps=args.reps,
                              warmup=args.warmup, rounds=args.rounds, pipeline=args.pipeline,
                              builders={**default_builders(args.pipeline), **extra},
                              dtype=dtype)
        else:
            row = run_block_case(model, seq, what, device="cuda", reps=args.reps,
                                 warmup=args.warmup, rounds=args.rounds,
                                 pipeline=args.pipeline, builders=extra, dtype=dtype)
        row["commit"] = commit
        row["case_s"] = time.perf_counter() - start
        results.add(row)
        print(f"  {_short(row)}", flush=True)
    doc = results.doc()
    for path in write_report(doc, args.out_dir, args.tag):
        print(f"wrote {path}")
    print(table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
