"""Generation with a KV cache: a causal LM's prefill and decode steps as Torch IR.

Greedy generation without a cache recomputes the whole prefix for every new token. With one
it runs two programs, each captured once and symbolic in its length:

* :func:`capture_prefill` — ``prefill(input_ids: i64[1, seq], cache_k_0, cache_v_0, ...)
  -> logits[1, vocab]``: the prompt's ``seq`` tokens, causal attention, the logits of the
  last position; it **writes** the keys and values of every position into the caches, each
  ``[seq, kv_heads, head_dim]``;
* :func:`capture_decode` — ``decode(input_ids: i64[1, 1], cache_k_0, cache_v_0, ...) ->
  logits[1, vocab]``: one token at position ``ctx - 1``, where ``ctx`` is the caches' length
  (``[ctx, kv_heads, head_dim]``, rows ``0 .. ctx-2`` written by earlier steps); it writes
  row ``ctx - 1`` of every cache and attends over all ``ctx`` rows.

The caches are the programs' inputs, written in place: ``torch.export`` turns
``cache[-1] = k`` into a ``slice_scatter`` whose result replaces the input, which Torch IR
keeps as a result marked ``llmopt.updates`` and Loop IR as a store into the argument's own
buffer, marked ``llmopt.written`` (see :mod:`llmopt.dialects._updates`). A cache is laid
out position-major (row ``p`` holds every head's key of position ``p``), so the first
``ctx`` rows of a buffer allocated for the maximum are a cache of length ``ctx`` at the same
addresses: a caller keeps one buffer per cache and passes its first ``ctx`` rows.

The steps are written here from the model's own modules (embedding, norms, projections,
rotary embedding, MLP and head, with their weights under the model's ``state_dict`` names)
rather than through transformers' cache classes, which ``torch.export`` cannot follow
through a runtime length. Their arithmetic is the model's: the same modules, the same
rotary function, ``scaled_dot_product_attention`` with GQA.
"""

from __future__ import annotations

import inspect
import sys
from typing import TYPE_CHECKING, Any

from llmopt.frontend.capture import CapturedProgram, CaptureError, capture
from llmopt.frontend.models import decoder_layers, head_dim, register_attention

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

SEQ = "seq"
"""The symbol of the prompt length of a prefill program."""
CTX = "ctx"
"""The symbol of the cache length of a decode program (the new token's position + 1)."""


def cache_names(layers: int) -> list[str]:
    """The input names of the caches, in order: ``cache_k_0, cache_v_0, cache_k_1, ...``."""
    return [f"cache_{kind}_{layer}" for layer in range(layers) for kind in "kv"]


def cache_shape(model: PreTrainedModel, length: int) -> tuple[int, int, int]:
    """The shape of one cache of ``length`` positions: ``(length, kv_heads, head_dim)``."""
    config = model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    return (length, heads, head_dim(config))


def _module_of(model: PreTrainedModel) -> Any:
    """The Python module of the model's implementation (its ``apply_rotary_pos_emb``)."""
    layer = decoder_layers(model)[0]
    module = sys.modules.get(type(layer.self_attn).__module__)
    if module is None or not hasattr(module, "apply_rotary_pos_emb"):
        raise CaptureError(f"{type(model).__name__}: no apply_rotary_pos_emb beside its "
                           "attention; only Llama-style models have cached steps")
    return module


class _Step:
    """The forward of a prefill (``prefill=True``) or decode step over ``model``'s modules,
    taking the token ids and then one tensor per cache (see the module docstring)."""

    def __init__(self, model: PreTrainedModel, prefill: bool) -> None:
        config = model.config
        self.model = model
        self.inner = getattr(model, "model", model)
        self.prefill = prefill
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = head_dim(config)
        self.rotate = _module_of(model).apply_rotary_pos_emb

    def __call__(self, input_ids: torch.Tensor, *caches: torch.Tensor) -> torch.Tensor:
        import torch
        from torch.nn.functional import scaled_dot_product_attention as sdpa

        inner = self.inner
        n = input_ids.shape[1]
        length = caches[0].shape[0]
        x = inner.embed_tokens(input_ids)
        positions = torch.arange(length, device=input_ids.device).unsqueeze(0)
        if not self.prefill:  # the new token's position is the last of the cache: its
            positions = positions[:, -1].unsqueeze(1)  # rotary row alone, not the cache's
        cos, sin = inner.rotary_emb(x, positions)
        for k, layer in enumerate(decoder_layers(self.model)):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q = attn.q_proj(h).view(1, n, self.heads, self.head_dim).transpose(1, 2)
            key = attn.k_proj(h).view(1, n, self.kv_heads, self.head_dim).transpose(1, 2)
            value = attn.v_proj(h).view(1, n, self.kv_heads, self.head_dim).transpose(1, 2)
            q, key = self.rotate(q, key, cos, sin)
            cache_k, cache_v = caches[2 * k], caches[2 * k + 1]
            if self.prefill:
                cache_k.copy_(key[0].transpose(0, 1))
                cache_v.copy_(value[0].transpose(0, 1))
                out = sdpa(q, key, value, is_causal=True, enable_gqa=True)
            else:
                cache_k[-1] = key[0, :, 0]
                cache_v[-1] = value[0, :, 0]
                keys = cache_k.permute(1, 0, 2).unsqueeze(0)
                values = cache_v.permute(1, 0, 2).unsqueeze(0)
                out = sdpa(q, keys, values, enable_gqa=True)
            out = out.transpose(1, 2).reshape(1, n, self.heads * self.head_dim)
            x = x + attn.o_proj(out)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.model.lm_head(inner.norm(x[:, -1]))


def _step_module(model: PreTrainedModel, prefill: bool) -> torch.nn.Module:
    """``model`` itself with its ``forward`` replaced by the step, under a signature that
    names every input (``torch.export`` and ``dynamic=`` address inputs by name)."""
    step = _Step(model, prefill)
    names = ["input_ids", *cache_names(len(decoder_layers(model)))]

    def forward(*args: torch.Tensor) -> torch.Tensor:
        return step(*args)

    forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])
    return forward  # type: ignore[return-value]


def _capture_step(model: PreTrainedModel, prefill: bool, maximum: int) -> CapturedProgram:
    import torch

    from llmopt.frontend.models import _capturing, _check_positions, _device_and_dtype

    symbol = SEQ if prefill else CTX
    if maximum < 2:
        raise CaptureError(f"the maximum {symbol} must be at least 2, got {maximum}")
    _check_positions(model, maximum)
    device, dtype = _device_and_dtype(model)
    example = min(5, maximum)
    ids = torch.zeros((1, example if prefill else 1), dtype=torch.long, device=device)
    caches = [torch.zeros(cache_shape(model, example), dtype=dtype, device=device)
              for _ in cache_names(len(decoder_layers(model)))]
    names = cache_names(len(caches) // 2)
    dynamic = {n: {0: symbol} for n in names}
    if prefill:
        dynamic["input_ids"] = {1: symbol}
    register_attention()
    with _capturing(model, _step_module(model, prefill)):
        return capture(model, (ids, *caches), name="prefill" if prefill else "decode",
                       dynamic=dynamic, max={symbol: maximum})


def capture_prefill(model: PreTrainedModel, max_seq: int) -> CapturedProgram:
    """The prefill step of ``model`` for prompts of up to ``max_seq`` tokens (see the module
    docstring): ``@prefill(weights..., input_ids, caches..., seq) -> logits[1, vocab]``,
    the caches written."""
    return _capture_step(model, True, max_seq)


def capture_decode(model: PreTrainedModel, max_ctx: int) -> CapturedProgram:
    """The decode step of ``model`` for caches of up to ``max_ctx`` positions (see the module
    docstring): ``@decode(weights..., input_ids, caches..., ctx) -> logits[1, vocab]``, row
    ``ctx - 1`` of every cache written."""
    return _capture_step(model, False, max_ctx)


__all__ = ["CTX", "SEQ", "cache_names", "cache_shape", "capture_decode", "capture_prefill"]
