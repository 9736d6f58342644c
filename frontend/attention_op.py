"""``llmopt::sdpa``: scaled dot-product attention as one opaque op while a program is captured.

``torch.export`` keeps ``aten.scaled_dot_product_attention`` in the graph, but to infer its
output it runs the device's kernel choice on fake tensors. On a CUDA device with a symbolic
length that choice (FP32 and ``enable_gqa`` take the math kernel, which repeats the key/value
heads) leaves guards over ``Min`` of strides that export cannot prove for the declared range,
so a capture that works on the CPU fails there with ``Constraints violated``. Llmopt lowers
attention itself and needs none of that: :func:`sdpa_as_leaf` routes every
``torch.nn.functional.scaled_dot_product_attention`` call during a capture to ``llmopt::sdpa``,
a custom op with the same signature whose fake kernel only states the output shape, so the
capture is the same on every device. Run eagerly it calls PyTorch's attention.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

__all__ = ["OP_NAME", "sdpa", "sdpa_as_leaf"]

OP_NAME = "llmopt.sdpa.default"
"""The op's name in an exported graph (``str(node.target)``)."""


@torch.library.custom_op("llmopt::sdpa", mutates_args=())
def sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
         attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
         is_causal: bool = False, scale: float | None = None,
         enable_gqa: bool = False) -> torch.Tensor:
    """``torch.nn.functional.scaled_dot_product_attention``, opaque to tracing."""
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask,
                                          dropout_p=dropout_p, is_causal=is_causal,
                                          scale=scale, enable_gqa=enable_gqa)


@sdpa.register_fake
def _sdpa_shape(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                is_causal: bool = False, scale: float | None = None,
                enable_gqa: bool = False) -> torch.Tensor:
    return query.new_empty((*query.shape[:-1], value.shape[-1]))


class _AttentionAsLeaf(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            return sdpa(*args, **kwargs)
        return func(*args, **kwargs)


@contextlib.contextmanager
def sdpa_as_leaf() -> Iterator[None]:
    """Meanwhile, ``F.scaled_dot_product_attention`` calls are ``llmopt::sdpa``."""
    with _AttentionAsLeaf():
        yield
