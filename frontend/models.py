"""Whole Hugging Face causal language models (Llama, Qwen2) as Torch IR.

:func:`build_model` makes a ``LlamaForCausalLM``/``Qwen2ForCausalLM`` offline: from a preset
name (``"tinyllama"``, ``"qwen2.5-7b"``: the real dimensions), a ``config.json``, a config
object, or a local Hugging Face directory (its checkpoint is loaded when it has one; nothing is
ever downloaded). Without a checkpoint the weights are Hugging Face's initialisation, seeded.
On the ``meta`` device no weight is materialised, so the 7B model builds in a second on any
machine.

:func:`capture_model` captures ``input_ids: i64[batch, seq] -> logits: [batch, seq, vocab]``
and :func:`capture_layer` one decoder layer ``(hidden_states, cos, sin) -> hidden_states``
(``cos``/``sin`` are the rotary position embeddings the model computes once and hands to every
layer). Both work on ``meta`` models: the program's ``params`` are then ``meta`` tensors (names
and shapes) and :func:`load_weights` (or :meth:`CapturedProgram.bind`) supplies the data later::

    model = build_model("qwen2.5-7b", device="meta")
    program = capture_model(model, seq_len=128)          # Torch IR, no weight in memory
    llmopt.lower(program.module, "lower-to-cuda")
    program = load_weights(program, "/models/Qwen2.5-7B")  # safetensors, read by name

With ``dynamic=True`` the sequence length is a symbol ``seq`` (``?`` in the types, an
``index`` argument bound from the input's shape): one program for every length up to
``max_seq`` (the config's ``max_position_embeddings`` by default); ``seq_len`` is then only
the example length export traces with (at least 2)::

    program = capture_model(model, seq_len=8, dynamic=True, max_seq=2048)

**Attention.** Prefill with no padding and no cache is plain causal attention. Eager
transformers then calls ``scaled_dot_product_attention(is_causal=True, enable_gqa=True)``;
under ``torch.export`` it instead materialises a boolean mask (it cannot know that an exported
graph will never be reused for decoding or padded batches), built from ``arange``,
``cumsum``, ``diff``, advanced indexing and comparisons, and expands the key/value heads with
``repeat_kv``. The captures here fix the shapes and take no mask, so they register an attention
implementation, ``llmopt_sdpa``, that is transformers' own SDPA attention with a mask function
returning ``None`` for exactly that case (no padding mask, no cache offset, as many queries as
keys) — the graph then holds what eager runs: ``sdpa`` with ``is_causal`` and GQA. The model's
configured implementation is restored afterwards.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, StringAttr
from xdsl.ir import SSAValue

from llmopt.frontend.capture import PARAM_ATTR, CapturedProgram, CaptureError, capture

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig, PreTrainedModel

ATTENTION = "llmopt_sdpa"
"""The attention implementation the captures register and use (see the module docstring)."""

PRESETS: dict[str, dict[str, Any]] = {
    "tinyllama": {
        "model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632,
        "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4,
        "head_dim": 64, "vocab_size": 32000, "rms_norm_eps": 1e-5, "rope_theta": 1e4,
        "max_position_embeddings": 2048, "tie_word_embeddings": False,
    },
    "qwen2.5-7b": {
        "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
        "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
        "vocab_size": 152064, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
        "max_position_embeddings": 32768, "tie_word_embeddings": False,
        "use_sliding_window": False,
    },
}  # fmt: skip
"""The real dimensions of the models llmopt targets first (TinyLlama-1.1B, Qwen2.5-7B)."""

_WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin")


# --- configs and models ---------------------------------------------------------------------------


def model_config(name_or_config: str | Path | PretrainedConfig | Mapping[str, Any], *,
                 layers: int | None = None) -> PretrainedConfig:
    """The transformers config of a preset name, a ``config.json`` path, a local model
    directory, a config object (copied) or a dict with a ``model_type``; with ``layers``,
    only the first that many decoder layers. Attention is set to ``sdpa``."""
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(name_or_config, PretrainedConfig):
        config = copy.deepcopy(name_or_config)
    elif isinstance(name_or_config, Mapping):
        config = _config_from_dict(dict(name_or_config))
    elif isinstance(name_or_config, str) and name_or_config.lower() in PRESETS:
        config = _config_from_dict(dict(PRESETS[name_or_config.lower()]))
    else:
        path = Path(name_or_config)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise CaptureError(f"'{name_or_config}' is neither a preset ({', '.join(PRESETS)}), "
                               "a config.json nor a local model directory")
        try:
            config = AutoConfig.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError):
            config = _config_from_dict(json.loads(path.read_text()))
    if layers is not None:
        if layers < 1:
            raise CaptureError(f"layers must be positive, got {layers}")
        config.num_hidden_layers = layers
        if getattr(config, "layer_types", None):
            config.layer_types = list(config.layer_types)[:layers]
    config._attn_implementation = "sdpa"
    return config


def _config_from_dict(values: dict[str, Any]) -> PretrainedConfig:
    from transformers import AutoConfig

    model_type = values.pop("model_type", None)
    if model_type is None:
        raise CaptureError("a model config needs a 'model_type' (e.g. 'llama', 'qwen2')")
    return AutoConfig.for_model(model_type, **values)


def _checkpoint_dir(name_or_config: object) -> Path | None:
    """The directory of a local checkpoint (a config plus weight files), if that is what
    ``name_or_config`` names."""
    if not isinstance(name_or_config, str | Path):
        return None
    path = Path(name_or_config)
    if path.is_file():
        path = path.parent
    if not path.is_dir():
        return None
    if any(any(path.glob(pattern)) for pattern in _WEIGHT_FILES):
        return path
    return None


def build_model(name_or_config: str | Path | PretrainedConfig | Mapping[str, Any], *,
                device: str | torch.device = "cpu", dtype: torch.dtype | None = None,
                seed: int = 0, layers: int | None = None) -> PreTrainedModel:
    """A causal LM in eval mode, built offline (see :func:`model_config` for what
    ``name_or_config`` may be).

    A local directory with weights is loaded with ``from_pretrained`` (local files only)
    unless ``device`` is ``meta``; anything else gets transformers' initialisation under
    ``torch.manual_seed(seed)`` (the global RNG state is restored). ``dtype`` defaults to
    ``float32``; ``layers`` keeps the first decoder layers only.
    """
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch.float32 if dtype is None else dtype
    device = torch.device(device)
    config = model_config(name_or_config, layers=layers)
    checkpoint = _checkpoint_dir(name_or_config)
    if checkpoint is not None and device.type != "meta":
        model = AutoModelForCausalLM.from_pretrained(
            str(checkpoint), config=config, dtype=dtype, local_files_only=True,
            attn_implementation="sdpa",
        )
        return model.to(device).eval()
    with torch.random.fork_rng(devices=[]), device:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype,
                                                 attn_implementation="sdpa")
    return model.eval()


# --- capture ------------------------------------------------------------------------------------


def _causal_mask(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0,
                 kv_offset: int = 0, attention_mask: Any = None, **kwargs: Any) -> Any:
    """transformers' SDPA mask, except ``None`` (``is_causal``) for prefill without padding:
    no 2-D mask, no cache offset, as many queries as keys, no sliding window shorter than
    the keys and no custom mask function (those set ``use_vmap``)."""
    from transformers.masking_utils import sdpa_mask

    window = kwargs.get("local_size")
    if (attention_mask is None and q_offset == 0 and kv_offset == 0 and q_length == kv_length
            and not kwargs.get("use_vmap") and (window is None or kv_length <= window)):
        return None
    return sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length,
                     q_offset=q_offset, kv_offset=kv_offset, attention_mask=attention_mask,
                     **kwargs)


def register_attention() -> None:
    """Register the ``llmopt_sdpa`` attention and mask functions with transformers."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface
    from transformers.modeling_utils import AttentionInterface

    AttentionInterface.register(ATTENTION, sdpa_attention_forward)
    AttentionMaskInterface.register(ATTENTION, _causal_mask)


@contextlib.contextmanager
def _capturing(model: torch.nn.Module, forward: Callable[..., Any]) -> Iterator[None]:
    """``model.forward`` is ``forward`` and attention is ``llmopt_sdpa`` meanwhile."""
    register_attention()
    config = getattr(model, "config", None)
    saved_attention = getattr(config, "_attn_implementation", None)
    had_forward = "forward" in model.__dict__
    saved_forward = model.__dict__.get("forward")
    try:
        if config is not None:
            config._attn_implementation = ATTENTION
        object.__setattr__(model, "forward", forward)
        yield
    finally:
        if had_forward:
            object.__setattr__(model, "forward", saved_forward)
        else:
            del model.__dict__["forward"]
        if config is not None:
            config._attn_implementation = saved_attention


def _device_and_dtype(model: torch.nn.Module) -> tuple[torch.device, torch.dtype]:
    param = next(model.parameters(), None)
    if param is None:
        raise CaptureError("the model has no parameters")
    return param.device, param.dtype


SEQ = "seq"
"""The name of the symbolic sequence length of dynamic captures."""


def _seq_bounds(model: torch.nn.Module, seq_len: int, dynamic: bool, max_seq: int | None
                ) -> dict[str, Any]:
    """``capture``'s ``max`` argument for a dynamic capture (``{}`` for a static one)."""
    if not dynamic:
        if max_seq is not None:
            raise CaptureError("max_seq bounds a dynamic capture: pass dynamic=True")
        return {}
    if max_seq is None:
        max_seq = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if max_seq is None:
        raise CaptureError("a dynamic capture needs max_seq (the model's config has no "
                           "max_position_embeddings)")
    if seq_len < 2 or seq_len > max_seq:
        raise CaptureError(f"a dynamic capture traces an example length in [2, {max_seq}], "
                           f"got seq_len={seq_len}")
    return {SEQ: int(max_seq)}


def capture_model(model: PreTrainedModel, seq_len: int, *, batch: int = 1,
                  dynamic: bool = False, max_seq: int | None = None) -> CapturedProgram:
    """Capture ``model`` (a causal LM) as ``forward(input_ids: i64[batch, seq_len]) ->
    logits[batch, seq_len, vocab]``: prefill of ``seq_len`` tokens, positions ``0 ..
    seq_len - 1``, causal attention, no cache. Weights keep their ``state_dict`` names;
    a ``meta`` model gives ``meta`` params (see :func:`load_weights`). With ``dynamic`` the
    length is the symbol ``seq``, at most ``max_seq`` (see the module docstring)."""
    import torch

    if seq_len < 1 or batch < 1:
        raise CaptureError(f"seq_len and batch must be positive, got {seq_len}, {batch}")
    bounds = _seq_bounds(model, seq_len, dynamic, max_seq)
    device, _ = _device_and_dtype(model)
    call = model.forward

    def forward(input_ids: torch.Tensor) -> torch.Tensor:
        return call(input_ids=input_ids, use_cache=False).logits

    ids = torch.zeros((batch, seq_len), dtype=torch.long, device=device)
    spec = {"input_ids": {1: SEQ}} if bounds else None
    with _capturing(model, forward):
        return capture(model, (ids,), dynamic=spec, max=bounds or None)


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The decoder layers of a causal LM (``model.model.layers``)."""
    inner = getattr(model, "model", model)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise CaptureError(f"{type(model).__name__} has no decoder layers at .model.layers")
    return layers


def head_dim(config: PretrainedConfig) -> int:
    """The attention head dim of a config (``head_dim``, else hidden / heads)."""
    explicit = getattr(config, "head_dim", None)
    return explicit or config.hidden_size // config.num_attention_heads


def capture_layer(model: PreTrainedModel, seq_len: int, *, layer: int = 0, batch: int = 1,
                  dynamic: bool = False, max_seq: int | None = None) -> CapturedProgram:
    """Capture decoder layer ``layer`` of ``model`` as ``forward(hidden_states: [batch,
    seq_len, hidden], cos: [batch, seq_len, head_dim], sin: ...) -> hidden_states`` (causal
    attention, no cache; ``cos``/``sin`` as :func:`position_embeddings` computes them). Its
    weights are named as in the whole model's ``state_dict`` (``model.layers.<k>. ...``).
    With ``dynamic`` the length of all three inputs is the symbol ``seq`` (at most
    ``max_seq``)."""
    import torch

    bounds = _seq_bounds(model, seq_len, dynamic, max_seq)
    decoder = decoder_layers(model)[layer]
    device, dtype = _device_and_dtype(decoder)
    config = model.config
    call = decoder.forward

    def forward(hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                ) -> torch.Tensor:
        out = call(hidden_states, attention_mask=None, position_embeddings=(cos, sin))
        return out[0] if isinstance(out, tuple) else out

    x = torch.zeros((batch, seq_len, config.hidden_size), dtype=dtype, device=device)
    cos, sin = (torch.zeros((batch, seq_len, head_dim(config)), dtype=dtype, device=device)
                for _ in range(2))  # distinct tensors: export would alias one passed twice
    spec = {name: {1: SEQ} for name in ("hidden_states", "cos", "sin")} if bounds else None
    with _capturing(decoder, forward), _attention_of(config):
        program = capture(decoder, (x, cos, sin), dynamic=spec, max=bounds or None)
    return prefixed(program, f"{_layers_prefix(model)}{layer}.")


@contextlib.contextmanager
def _attention_of(config: PretrainedConfig) -> Iterator[None]:
    saved = config._attn_implementation
    try:
        config._attn_implementation = ATTENTION
        yield
    finally:
        config._attn_implementation = saved


def _layers_prefix(model: torch.nn.Module) -> str:
    layers = decoder_layers(model)
    for name, module in model.named_modules():
        if module is layers:
            return f"{name}." if name else ""
    return ""


def prefixed(program: CapturedProgram, prefix: str) -> CapturedProgram:
    """``program`` with ``prefix`` before every weight name (arguments, params), in place."""
    if not prefix:
        return program
    fn = program.func
    assert fn.arg_attrs is not None
    attrs = list(fn.arg_attrs.data)
    block = fn.body.block
    for k, name in enumerate(program.param_names):
        entries = dict(attrs[k].data)
        entries[PARAM_ATTR] = StringAttr(prefix + name)
        attrs[k] = DictionaryAttr(entries)
        if SSAValue.is_valid_name(prefix + name):
            block.args[k].name_hint = prefix + name
    fn.arg_attrs = ArrayAttr(attrs)
    program.params = {prefix + n: t for n, t in program.params.items()}
    program.param_names = [prefix + n for n in program.param_names]
    return program


def position_embeddings(model: PreTrainedModel, seq_len: int, *, batch: int = 1
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotary ``(cos, sin)`` the model hands its layers for positions ``0 .. seq_len-1``,
    computed on the CPU (also for a ``meta`` model, from its config), in its dtype."""
    import torch

    _, dtype = _device_and_dtype(model)
    rotary = _rotary_on_cpu(model)
    x = torch.zeros((batch, seq_len, 1), dtype=dtype)
    positions = torch.arange(seq_len).unsqueeze(0).expand(batch, -1)
    with torch.no_grad():
        cos, sin = rotary(x, positions)
    return cos, sin


def _rotary_on_cpu(model: torch.nn.Module) -> torch.nn.Module:
    inner = getattr(model, "model", model)
    rotary = getattr(inner, "rotary_emb", None)
    if rotary is None:
        raise CaptureError(f"{type(model).__name__} has no rotary embedding at .model.rotary_emb")
    import torch

    with torch.device("cpu"):
        return type(rotary)(config=model.config)


# --- weights ------------------------------------------------------------------------------------


def computed_buffers(model: PreTrainedModel) -> dict[str, torch.Tensor]:
    """The buffers a checkpoint does not hold, recomputed on the CPU from the config: the
    rotary embedding's ``inv_freq`` (and ``original_inv_freq``), by their names in
    ``model``'s ``state_dict`` namespace."""
    rotary = _rotary_on_cpu(model)
    inner = getattr(model, "model", model)
    prefix = "model.rotary_emb." if inner is not model else "rotary_emb."
    _, dtype = _device_and_dtype(model)
    own = dict(inner.rotary_emb.named_buffers())
    out = {}
    for name, tensor in rotary.named_buffers():
        want = own.get(name)
        out[prefix + name] = tensor.to(want.dtype if want is not None else dtype)
    return out


def load_weights(program: CapturedProgram,
                 source: str | Path | Mapping[str, torch.Tensor] | torch.nn.Module, *,
                 model: PreTrainedModel | None = None, strict: bool = True
                 ) -> CapturedProgram:
    """``program`` with its weights read from ``source`` (see :meth:`CapturedProgram.bind`).

    ``source`` is a local checkpoint directory or ``.safetensors`` file (only the tensors the
    program uses are read), a state dict, or a module. Tensors are converted to the dtype of
    their argument. A tied ``lm_head.weight`` missing from the checkpoint is read from
    ``model.embed_tokens.weight``. With ``model`` given, the buffers no checkpoint holds (the
    rotary frequencies) are recomputed from its config (:func:`computed_buffers`).
    """
    import torch

    wanted = set(program.param_names)
    tensors: dict[str, torch.Tensor]
    if isinstance(source, torch.nn.Module):
        tensors = {
            **dict(source.named_buffers(remove_duplicate=False)),
            **dict(source.named_parameters(remove_duplicate=False)),
        }
    elif isinstance(source, Mapping):
        tensors = dict(source)
    else:
        tensors = _read_checkpoint(Path(source), wanted)
    aliases = {"lm_head.weight": "model.embed_tokens.weight",
               "model.embed_tokens.weight": "lm_head.weight"}
    for name, other in aliases.items():
        if name in wanted and name not in tensors and other in tensors:
            tensors[name] = tensors[other]
    if model is not None:
        for name, tensor in computed_buffers(model).items():
            tensors.setdefault(name, tensor)
    types = dict(zip(program.param_names, program.func.function_type.inputs.data, strict=False))
    converted: dict[str, torch.Tensor] = {}
    for name in wanted & tensors.keys():
        tensor = tensors[name]
        dtype = _torch_dtype(types[name].element_type)  # type: ignore[attr-defined]
        converted[name] = tensor.to(dtype) if tensor.dtype != dtype else tensor
    return program.bind(converted, strict=strict)


def _torch_dtype(element: Any) -> torch.dtype:
    import torch

    from llmopt.frontend.capture import element_type

    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                  torch.int32, torch.int16, torch.int8, torch.bool):
        if element_type(dtype) == element:
            return dtype
    raise CaptureError(f"no torch dtype for {element}")


def _read_checkpoint(path: Path, wanted: set[str]) -> dict[str, torch.Tensor]:
    """The ``wanted`` tensors of a local checkpoint (safetensors files, else ``.bin``)."""
    import torch

    files = [path] if path.is_file() else sorted(path.glob("*.safetensors"))
    out: dict[str, torch.Tensor] = {}
    if files and all(f.suffix == ".safetensors" for f in files):
        from safetensors import safe_open

        for file in files:
            with safe_open(str(file), framework="pt") as handle:
                for key in handle.keys():  # noqa: SIM118 - safe_open is not a dict
                    if key in wanted or key in ("model.embed_tokens.weight", "lm_head.weight"):
                        out[key] = handle.get_tensor(key)
        return out
    bins = [path] if path.is_file() else sorted(path.glob("pytorch_model*.bin"))
    if not bins:
        raise CaptureError(f"no checkpoint (*.safetensors or pytorch_model*.bin) at {path}")
    for file in bins:
        state = torch.load(str(file), map_location="cpu", weights_only=True)
        out.update({k: v for k, v in state.items() if k in wanted})
    return out


__all__ = [
    "ATTENTION", "PRESETS", "SEQ", "build_model", "capture_layer", "capture_model",
    "computed_buffers", "decoder_layers", "head_dim", "load_weights", "model_config",
    "position_embeddings", "prefixed", "register_attention",
]  # fmt: skip
