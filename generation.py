"""Greedy text generation with a KV cache: :class:`Generator` and :func:`generate`.

A :class:`Generator` captures a causal LM's two cached steps once (see
:mod:`llmopt.frontend.decode`): ``prefill`` for the prompt, symbolic in its length, and
``decode`` for one token, symbolic in the cache length. Both are lowered by the same
pipeline; every later prompt and every step runs those two programs::

    gen = llmopt.Generator(model, max_ctx=2048)          # on a GPU: CUDA kernels
    out = gen.generate(prompt_ids, new_tokens=128)
    print(out.tokens, f"{out.tok_s:.0f} tok/s")

On a GPU the programs are compiled with NVRTC and run by
:class:`~llmopt.codegen.executor.CompiledProgram`, both through the compile cache (a second
generator of the same config, dtype and ``max_ctx`` parses the lowered IR; nothing is
captured). The caches are one buffer per layer and kind, allocated for ``max_ctx``
positions, and each step passes their first ``ctx`` rows, which the decode program updates
in place. The decode program is lowered with ``lengths-in-memory``, so every step is the
same CUDA graph whatever the position: once it is captured its static buffers are the
caches. Up to ``steps_per_graph`` steps are then captured back to back into one graph, each
followed by the argmax of its logits written into the next step's token input, and each
reading its lengths from a device table at a cursor it advances: a replay decodes several
tokens with nothing returning to the host between them. The token ids stay on the GPU
until the end. Without a GPU
(``device="cpu"``) the programs are lowered to Kernel IR and run by the CPU interpreter:
slow, but the same IR, so the tokens can be checked anywhere.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

    from llmopt.codegen.graph import StepsGraph
    from llmopt.frontend.capture import CapturedProgram

__all__ = ["Generation", "GenerationError", "Generator", "copy_bandwidth", "divergence",
           "generate", "step_bytes"]


class GenerationError(ValueError):
    """A prompt or a number of tokens the generator cannot serve (empty, too long)."""


@dataclass
class Generation:
    """What :meth:`Generator.generate` produced: the new tokens and how long they took."""

    tokens: list[int]
    """The generated token ids (the prompt not included)."""
    prefill_seconds: float
    """The prompt's step, to the first new token."""
    decode_seconds: float
    """All decode steps together (the tokens after the first)."""
    compile_seconds: float = 0.0
    """Capture, lowering and compilation of both programs (0 when they were reused)."""
    timings: dict[str, float] = field(default_factory=dict[str, float])
    issue_seconds: float = 0.0
    """Of :attr:`decode_seconds`, the host's time to issue every decode step (until the
    last was queued, before waiting for the GPU); on a GPU the steps run meanwhile."""

    @property
    def ms_per_token(self) -> float:
        """Milliseconds per decode step (``nan`` without one)."""
        steps = len(self.tokens) - 1
        return self.decode_seconds * 1e3 / steps if steps > 0 else float("nan")

    @property
    def tok_s(self) -> float:
        """Decode tokens per second (``nan`` without a decode step)."""
        steps = len(self.tokens) - 1
        return steps / self.decode_seconds if steps > 0 and self.decode_seconds else float("nan")


def _default_device() -> str:
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


class Generator:
    """Greedy generation for a Hugging Face causal LM (Llama, Qwen2) through llmopt.

    Args:
        model: the model (its weights are bound by ``state_dict`` name).
        max_ctx: the longest context (prompt plus new tokens) served; the caches hold that
            many positions.
        device: ``"cuda"`` (compile and run the CUDA kernels) or ``"cpu"`` (the Kernel-IR
            interpreter); by default the GPU when there is one.
        pipeline: the pass pipeline both programs are lowered by.
        cuda_graph: on a GPU, replay every decode step from one CUDA graph (the decode
            program is lowered with ``lengths-in-memory``, so that its kernels read the
            cache length from memory); ``False`` launches each kernel from the host.
        steps_per_graph: with ``cuda_graph``, how many decode steps one replay runs at most
            (each picks its token on the GPU and feeds it to the next, inside the graph;
            graphs of 1, 2, 4, … steps are captured as the tokens left need them); ``0``
            replays one step at a time and picks each token between the replays.
    """

    def __init__(self, model: PreTrainedModel, *, max_ctx: int, device: str | None = None,
                 pipeline: str = "lower-to-cuda", cuda_graph: bool = True,
                 steps_per_graph: int = 8) -> None:
        self.model = model
        self.steps_per_graph = int(steps_per_graph)
        self.max_ctx = int(max_ctx)
        self.device = device or _default_device()
        self.cuda_graph = cuda_graph
        if self.device not in ("cuda", "cpu"):
            raise GenerationError(f"device must be 'cuda' or 'cpu', got {self.device!r}")
        if self.max_ctx < 2:
            raise GenerationError(f"max_ctx must be at least 2, got {self.max_ctx}")
        if self.steps_per_graph < 0:
            raise GenerationError(f"steps_per_graph must be 0 or more, got {steps_per_graph}")
        began = time.perf_counter()
        self._captured: dict[str, CapturedProgram] = {}
        self.timings: dict[str, float] = {}
        """Seconds each program took to build: ``prefill`` and ``decode`` (capture and
        lowering, or parsing a compile-cache hit: ``*_cached``), ``compile`` (NVRTC,
        through the kernel cache, and loading)."""
        if self.device == "cuda":
            self._programs = self._compile(pipeline)
        else:
            self._programs = self._lower_for_cpu(pipeline)
        self.compile_seconds = time.perf_counter() - began
        self._compiled_once = False
        self._cache_buffers: list[Any] | None = None
        self._static_token: Any = None  # the decode graph's token input, once captured
        # graphs of several steps by their count, each with the tokens its steps pick
        self._steps_graphs: dict[int, tuple[StepsGraph, Any]] = {}
        self._lengths: Any = None  # the decode step's lengths at every cache length

    @property
    def prefill(self) -> CapturedProgram:
        """The prefill step as captured (captured on first use)."""
        from llmopt.frontend.decode import capture_prefill

        if "prefill" not in self._captured:
            self._captured["prefill"] = capture_prefill(self.model, self.max_ctx)
        return self._captured["prefill"]

    @property
    def decode(self) -> CapturedProgram:
        """The decode step as captured (captured on first use)."""
        from llmopt.frontend.decode import capture_decode

        if "decode" not in self._captured:
            self._captured["decode"] = capture_decode(self.model, self.max_ctx)
        return self._captured["decode"]

    @property
    def launches_per_step(self) -> int:
        """The kernel launches of one decode step (what ``fuse-launches`` and ``fuse-tails``
        reduce): of the compiled program's plan on a GPU, of the lowered Kernel IR on the
        CPU."""
        from llmopt.codegen.plan import LaunchStep
        from llmopt.dialects import kernel

        decode = self._programs[1]
        if self.device == "cuda":
            return sum(isinstance(step, LaunchStep) for step in decode.plan.steps)
        return sum(isinstance(op, kernel.LaunchOp) for op in decode.walk())

    # --- building -------------------------------------------------------------------------

    def _compile(self, pipeline: str) -> tuple[Any, Any]:
        """Both programs lowered (through the compile cache: for a model of the same config,
        dtype and ``max_ctx`` lowered before, only the host side is parsed and the cached
        CUDA source goes to NVRTC, nothing is captured or lowered again), compiled and
        loaded, the model's weights bound by name."""
        import torch

        import llmopt
        from llmopt import registry
        from llmopt.codegen.executor import CompiledProgram
        from llmopt.codegen.program_cache import cached_program, program_cache_key
        from llmopt.target import current_target

        arch = current_target(torch.cuda.current_device()).arch
        weights = {**dict(self.model.named_buffers(remove_duplicate=False)),
                   **dict(self.model.named_parameters(remove_duplicate=False))}
        dtype = str(next(self.model.parameters()).dtype).removeprefix("torch.")
        identity = "generator:" + self.model.config.to_json_string(use_diff=False)
        lowering = registry.with_arch(pipeline, arch)
        programs = []
        for which in ("prefill", "decode"):
            began = time.perf_counter()
            graph = self.cuda_graph and which == "decode"
            spec = (registry.insert_before(lowering, "kernel-to-cuda", "lengths-in-memory")
                    if graph else lowering)
            key = program_cache_key(f"{identity}\nstep={which}", self.max_ctx, dtype, [spec])
            program = cached_program(
                key, lambda which=which, spec=spec: llmopt.lower(  # type: ignore[misc]
                    getattr(self, which).module, spec))
            host, source = program.host, program.source  # a hit parses no kernel
            lowered = time.perf_counter()
            self.timings[f"{which}_cached" if program.hit else which] = lowered - began
            programs.append(CompiledProgram(host, params=weights, arch=arch,
                                            cuda_graph=graph, source=source))
            self.timings["compile"] = (self.timings.get("compile", 0.0)
                                       + time.perf_counter() - lowered)
        return programs[0], programs[1]

    def _lower_for_cpu(self, pipeline: str) -> tuple[Any, Any]:
        import llmopt
        from llmopt.registry import split_at_level as split_pipeline

        to_kernel, _ = split_pipeline(pipeline, "kernel")
        for which in ("prefill", "decode"):
            began = time.perf_counter()
            llmopt.lower(getattr(self, which).module, ",".join(to_kernel))
            self.timings[which] = time.perf_counter() - began
        return self.prefill.module, self.decode.module

    # --- running --------------------------------------------------------------------------

    def _check(self, prompt: Sequence[int], new_tokens: int) -> None:
        if len(prompt) < 1:
            raise GenerationError("the prompt is empty: give at least one token id")
        if new_tokens < 1:
            raise GenerationError(f"new_tokens must be at least 1, got {new_tokens}")
        total = len(prompt) + new_tokens - 1  # the last token is never fed back
        if total > self.max_ctx:
            raise GenerationError(f"a prompt of {len(prompt)} tokens and {new_tokens} new "
                                  f"tokens need a context of {total}, above max_ctx "
                                  f"{self.max_ctx}")
        vocab = self.model.config.vocab_size
        bad = [t for t in prompt if not 0 <= int(t) < vocab]
        if bad:
            raise GenerationError(f"token id {bad[0]} is outside the vocabulary [0, {vocab})")

    def generate(self, prompt: Sequence[int] | torch.Tensor, new_tokens: int) -> Generation:
        """Greedily generate ``new_tokens`` tokens after ``prompt`` (token ids)."""
        ids = [int(t) for t in (prompt.reshape(-1).tolist() if hasattr(prompt, "reshape")
                                else prompt)]
        self._check(ids, new_tokens)
        run = self._run_cuda if self.device == "cuda" else self._run_cpu
        out = run(ids, new_tokens)
        if not self._compiled_once:
            out.compile_seconds = self.compile_seconds
            out.timings = dict(self.timings)
            self._compiled_once = True
        return out

    def _run_cuda(self, prompt: list[int], new_tokens: int) -> Generation:
        import torch

        prefill, decode = self._programs
        caches = self._caches()
        n = len(prompt)
        tokens = torch.empty((new_tokens, 1), dtype=torch.long, device="cuda")
        ids = torch.tensor([prompt], dtype=torch.long, device="cuda")
        torch.cuda.synchronize()
        began = time.perf_counter()
        (logits,) = prefill(ids, *(c[:n] for c in caches))
        tokens[0] = logits.argmax(-1)
        torch.cuda.synchronize()
        prefilled = time.perf_counter()
        step = 1
        while step < new_tokens:
            if self._static_token is not None and self.steps_per_graph > 0:
                step += self._decode_graphed(tokens, step, n + step)
                continue
            ctx = n + step
            (logits,) = decode(tokens[step - 1:step], *(c[:ctx] for c in caches))
            decode.check = False  # the first call checked every argument
            if decode.graph_captured and decode.one_graph:
                # The graph's own buffers are the caches (the step reads them in place) and
                # its token input is where each next token goes.
                self._static_token, *self._cache_buffers = decode.static_inputs
                caches = self._cache_buffers
            tokens[step] = logits.argmax(-1)
            step += 1
        issued = time.perf_counter()
        torch.cuda.synchronize()
        done = time.perf_counter()
        return Generation(tokens.view(-1).tolist(), prefilled - began, done - prefilled,
                          issue_seconds=issued - prefilled)

    def _decode_graphed(self, tokens: Any, step: int, ctx: int) -> int:
        """Decode steps ``step, step + 1, …`` (the first at cache length ``ctx``) from one
        replay of a graph of several steps, each picking its token on the GPU and writing
        it into the next step's input; returns how many steps ran: the largest power of two
        up to :attr:`steps_per_graph` that the tokens left allow, so at most a handful of
        graphs are ever captured."""
        import torch

        decode = self._programs[1]
        left = min(tokens.shape[0] - step, self.steps_per_graph)
        count = 1 << (left.bit_length() - 1)
        if self._lengths is None:  # the lengths of every cache length, row ctx - 1
            symbols = list(decode.symbolic.symbols)
            if len(symbols) != 1:
                raise GenerationError(f"the decode step has symbols {sorted(symbols)}; "
                                      "several steps a replay need its one cache length")
            (name,) = symbols
            self._lengths = decode.lengths_table([{name: length} for length in
                                                  range(1, self.max_ctx + 1)])
        if count not in self._steps_graphs:
            picked = torch.empty((count, 1), dtype=torch.long, device="cuda")
            self._steps_graphs[count] = (decode.capture_steps(
                count, lambda i, results: self._pick(picked[i], results), self._lengths),
                picked)
        graph, picked = self._steps_graphs[count]
        token = self._static_token
        token.copy_(tokens[step - 1].view(token.shape))
        graph.replay(ctx - 1)
        tokens[step:step + count].copy_(picked)
        return count

    def _pick(self, picked: Any, results: tuple[Any, ...]) -> None:
        """A decode step's greedy pick, captured into a graph of several steps: the argmax
        of the logits into ``picked`` (one element), then into the token input."""
        import torch

        (logits,) = results
        torch.argmax(logits.reshape(-1), dim=0, keepdim=True, out=picked)
        self._static_token.view(-1).copy_(picked)

    def _caches(self) -> list[Any]:
        """The cache buffers, allocated for ``max_ctx`` positions on first use (once the
        decode step's CUDA graph is captured, its static input buffers)."""
        import torch

        from llmopt.frontend.decode import cache_shape

        if self._cache_buffers is None:
            dtype = next(self.model.parameters()).dtype
            self._cache_buffers = [
                torch.empty(cache_shape(self.model, self.max_ctx), dtype=dtype, device="cuda")
                for _ in self._cache_names()]
        return self._cache_buffers

    def _cache_names(self) -> list[str]:
        from llmopt.frontend.decode import cache_names
        from llmopt.frontend.models import decoder_layers

        return cache_names(len(decoder_layers(self.model)))

    def _run_cpu(self, prompt: list[int], new_tokens: int) -> Generation:
        import numpy as np

        from llmopt.frontend.decode import cache_shape

        caches = [np.zeros(cache_shape(self.model, self.max_ctx), np.float32)
                  for _ in self._cache_names()]
        began = time.perf_counter()
        out = [self._interpret(0, prompt, caches, len(prompt))]
        prefilled = time.perf_counter()
        while len(out) < new_tokens:
            out.append(self._interpret(1, [out[-1]], caches, len(prompt) + len(out)))
        done = time.perf_counter()
        return Generation(out, prefilled - began, done - prefilled)

    def _interpret(self, which: int, ids: list[int], caches: list[Any], ctx: int) -> int:
        """Run program ``which`` (0 prefill, 1 decode) on ``ids`` and the first ``ctx`` rows
        of ``caches`` (updated from the written results); the next token."""
        import numpy as np
        import torch

        import llmopt.interp
        from llmopt.interp.host import interpreter_arrays

        captured = (self.prefill, self.decode)[which]
        inputs = [torch.tensor([ids], dtype=torch.long),
                  *(torch.from_numpy(c[:ctx]) for c in caches)]
        args = interpreter_arrays(captured.arguments(*inputs))
        results = llmopt.interp.run(self._programs[which], args, check_races=False)
        for cache, new in zip(caches, results[1:], strict=True):
            cache[:ctx] = new
        return int(np.argmax(results[0].reshape(-1)))


def generate(model: PreTrainedModel, prompt: Sequence[int] | torch.Tensor, new_tokens: int,
             *, max_ctx: int | None = None, device: str | None = None) -> Generation:
    """Greedily generate ``new_tokens`` tokens after ``prompt`` with a one-off
    :class:`Generator` (``max_ctx`` defaults to exactly what this call needs)."""
    length = len(prompt.reshape(-1)) if hasattr(prompt, "reshape") else len(prompt)
    needed = max(2, length + new_tokens - 1)
    return Generator(model, max_ctx=max_ctx or needed, device=device).generate(prompt,
                                                                               new_tokens)


def copy_bandwidth() -> float:
    """Bytes per second of a device-to-device copy of 1 GiB (read + written), median of 5."""
    import torch

    a = torch.empty(1 << 28, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    times = []
    for _ in range(6):
        torch.cuda.synchronize()
        began = time.perf_counter()
        b.copy_(a)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - began)
    return 2 * a.numel() * 4 / sorted(times[1:])[2]


def step_bytes(model: PreTrainedModel, context: int) -> int:
    """What one decode step reads at least: every weight once (one row of the embedding
    table) and the keys and values of ``context`` positions."""
    from llmopt.frontend.decode import cache_shape

    total = 0
    for name, p in model.named_parameters():
        total += (p[0].numel() if name.endswith("embed_tokens.weight") else p.numel()) * \
            p.element_size()
    rows, heads, dim = cache_shape(model, context)
    layers = model.config.num_hidden_layers
    return total + 2 * layers * rows * heads * dim * next(model.parameters()).element_size()


NEAR_TIE_UNITS = 2
"""A divergence is a near-tie when the reference's logit gap is below this many units of
the dtype's rounding (its machine epsilon) at the scale of the largest logit."""


def float64_twin(model: PreTrainedModel, device: Any = None) -> PreTrainedModel:
    """``model`` with its weights (the same values, its dtype's) held and computed in
    float64, to judge which of two tokens a forward without rounding prefers. On
    ``device``; by default the model's, unless that GPU's free memory does not hold eight
    bytes a parameter (and some), then the CPU."""
    import torch

    from llmopt.frontend.models import build_model

    if device is None:
        device = model.device
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            if free < 9 * sum(p.numel() for p in model.parameters()):
                device = torch.device("cpu")
    twin = build_model(model.config, device=device, dtype=torch.float64)
    twin.load_state_dict(model.state_dict())
    return twin


def divergence(model: PreTrainedModel, prompt: Sequence[int], tokens: Sequence[int],
               reference: Sequence[int], exact: PreTrainedModel | None = None
               ) -> dict[str, Any] | None:
    """Where greedy ``tokens`` first leave ``reference`` (both after ``prompt``), and how
    close the reference's choice was there: ``None`` when they agree; else the step, both
    tokens, the gap between their logits in ``model``'s own forward (its dtype) on the
    prompt and the reference's tokens before that step (negative when that forward prefers
    ``tokens``' choice), the bound ``NEAR_TIE_UNITS · eps · max |logit|`` and whether the
    gap is at most the bound (a near-tie: an order of rounding can pick either token).

    With ``exact`` (``model``'s :func:`float64_twin`) the same gap in float64 too
    (``float64_gap``) and which choice that forward prefers (``float64_prefers``:
    ``"tokens"``, ``"reference"`` or ``"neither"`` on an exact tie)."""
    import torch

    step = next((k for k, (a, b) in enumerate(zip(tokens, reference, strict=False))
                 if a != b), None)
    if step is None:
        return None
    ids = torch.tensor([[*prompt, *reference[:step]]], device=model.device)
    with torch.no_grad():
        logits = model(ids).logits[0, -1].float()
    ours, theirs = int(tokens[step]), int(reference[step])
    gap = float(logits[theirs] - logits[ours])
    eps = torch.finfo(next(model.parameters()).dtype).eps
    bound = NEAR_TIE_UNITS * eps * float(logits.abs().max())
    found: dict[str, Any] = {"step": step, "token": ours, "reference_token": theirs,
                             "logit_gap": gap, "bound": bound, "near_tie": gap <= bound}
    if exact is not None:
        with torch.no_grad():
            wide = exact(ids.to(exact.device)).logits[0, -1].double()
        gap64 = float(wide[theirs] - wide[ours])
        found["float64_gap"] = gap64
        found["float64_prefers"] = ("reference" if gap64 > 0 else "tokens" if gap64 < 0
                                    else "neither")
    return found
