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


class ModelError(CaptureError):
    """A model that cannot be built as asked: a bad config (naming the file and the key), a
    damaged or mismatched checkpoint (naming the file and the tensor), more layers asked for
    than the model has."""


SUPPORTED_MODEL_TYPES = ("llama", "qwen2")
"""The model types whose architecture llmopt captures (decoder layers of RMSNorm,
rotary attention with grouped KV heads, a SiLU-gated MLP)."""

#: The config keys that are sizes: positive integers.
_SIZES = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
          "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings")


def model_config(name_or_config: str | Path | PretrainedConfig | Mapping[str, Any], *,
                 layers: int | None = None) -> PretrainedConfig:
    """The transformers config of a preset name, a ``config.json`` path, a local model
    directory, a config object (copied) or a dict with a ``model_type``; with ``layers``,
    only the first that many decoder layers. Attention is set to ``sdpa``.

    Raises :class:`ModelError` (naming the file and the key) for a config llmopt cannot
    build: not a JSON object, an unknown or unsupported ``model_type``
    (:data:`SUPPORTED_MODEL_TYPES`), sizes that are not positive integers, a hidden size
    the heads do not divide, more ``layers`` than the model has."""
    from transformers import PretrainedConfig

    where = "the config"
    if isinstance(name_or_config, PretrainedConfig):
        config = copy.deepcopy(name_or_config)
    elif isinstance(name_or_config, Mapping):
        config = _config_from_dict(dict(name_or_config), where)
    elif isinstance(name_or_config, str) and name_or_config.lower() in PRESETS:
        where = f"preset '{name_or_config.lower()}'"
        config = _config_from_dict(dict(PRESETS[name_or_config.lower()]), where)
    else:
        path = Path(name_or_config)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise ModelError(f"'{name_or_config}' is neither a preset ({', '.join(PRESETS)}), "
                             "a config.json nor a local model directory")
        where = str(path)
        config = _config_from_dict(_read_config(path), where)
    check_config(config, where)
    if layers is not None:
        if layers < 1:
            raise ModelError(f"layers must be positive, got {layers}")
        if layers > config.num_hidden_layers:
            raise ModelError(f"{where}: the model has {config.num_hidden_layers} decoder "
                             f"layers, fewer than the {layers} asked for")
        config.num_hidden_layers = layers
        if getattr(config, "layer_types", None):
            config.layer_types = list(config.layer_types)[:layers]
    config._attn_implementation = "sdpa"
    return config


def _read_config(path: Path) -> dict[str, Any]:
    """The JSON object of a ``config.json`` (:class:`ModelError` naming the file and what is
    wrong with it otherwise)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise ModelError(f"{path}: cannot read it ({err.strerror})") from None
    except UnicodeDecodeError:
        raise ModelError(f"{path}: not a text file (a config.json is JSON)") from None
    if not text.strip():
        raise ModelError(f"{path}: the file is empty (a config.json is a JSON object)")
    try:
        values = json.loads(text)
    except json.JSONDecodeError as err:
        raise ModelError(f"{path}:{err.lineno}:{err.colno}: invalid JSON: {err.msg}") from None
    if not isinstance(values, dict):
        raise ModelError(f"{path}: a config.json is a JSON object, not a "
                         f"{_json_kind(values)}")
    return values


def _json_kind(value: object) -> str:
    kinds = ((list, "JSON array"), (str, "JSON string"), (bool, "JSON boolean"),
             (int | float, "JSON number"), (type(None), "JSON null"))
    return next((name for cls, name in kinds if isinstance(value, cls)), "JSON value")


def _config_from_dict(values: dict[str, Any], where: str = "the config") -> PretrainedConfig:
    """A transformers config from JSON-like ``values`` (``where`` names them in errors)."""
    from transformers import AutoConfig

    values = dict(values)
    model_type = values.pop("model_type", None)
    if model_type is None:
        raise ModelError(f"{where}: a model config needs a 'model_type' (one of "
                         f"{', '.join(SUPPORTED_MODEL_TYPES)})")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ModelError(f"{where}: model_type '{model_type}' is not supported: llmopt "
                         f"compiles {', '.join(SUPPORTED_MODEL_TYPES)}")
    for key in _SIZES:
        _check_size(values, key, where)
    hidden, heads = values.get("hidden_size"), values.get("num_attention_heads")
    if hidden and heads and hidden % heads:
        raise ModelError(f"{where}: 'hidden_size' {hidden} is not a multiple of "
                         f"'num_attention_heads' {heads}")
    try:
        return AutoConfig.for_model(model_type, **values)
    except Exception as err:  # transformers' own validation of the values
        message = " ".join(str(err).split())[:300] or type(err).__name__
        raise ModelError(f"{where}: transformers rejects the config: {message}") from None


def _check_size(values: Mapping[str, Any], key: str, where: str) -> None:
    """``values[key]``, when present (and not ``null``, where that means "derived"), is a
    positive integer."""
    value = values.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelError(f"{where}: '{key}' must be a positive integer, got "
                         f"{json.dumps(value)}")


def check_config(config: PretrainedConfig, where: str = "the config") -> None:
    """Raise :class:`ModelError` (``where`` naming the config) unless llmopt can build and
    capture ``config``: a supported ``model_type``, positive integer sizes, KV heads that
    divide the heads, a positive finite ``rms_norm_eps``. (That the heads divide the hidden
    size is checked when a config is read: transformers refuses to build one otherwise.)"""
    import math

    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ModelError(f"{where}: model_type '{model_type}' is not supported: llmopt "
                         f"compiles {', '.join(SUPPORTED_MODEL_TYPES)}")
    for key in _SIZES:
        _check_size({key: getattr(config, key, None)}, key, where)
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    if heads % kv:
        raise ModelError(f"{where}: 'num_attention_heads' {heads} is not a multiple of "
                         f"'num_key_value_heads' {kv}")
    eps = getattr(config, "rms_norm_eps", None)
    if eps is not None and (isinstance(eps, bool) or not isinstance(eps, int | float)
                            or not math.isfinite(eps) or eps <= 0):
        raise ModelError(f"{where}: 'rms_norm_eps' must be a positive number, got {eps!r}")


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
                seed: int = 0, layers: int | None = None, allow_nonfinite: bool = False
                ) -> PreTrainedModel:
    """A causal LM in eval mode, built offline (see :func:`model_config` for what
    ``name_or_config`` may be).

    A local directory with weights is loaded with ``from_pretrained`` (local files only)
    unless ``device`` is ``meta``; anything else gets transformers' initialisation under
    ``torch.manual_seed(seed)`` (the global RNG state is restored). ``dtype`` defaults to
    ``float32``; ``layers`` keeps the first decoder layers only.

    A checkpoint is checked before it is loaded (:func:`check_checkpoint`: every tensor the
    model needs is there, undamaged, of its shape and a floating-point dtype) and after
    (every weight finite, unless ``allow_nonfinite``); a problem is a :class:`ModelError`
    naming the file and the tensor, never a model run with weights made up in their place.
    """
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch.float32 if dtype is None else dtype
    device = torch.device(device)
    config = model_config(name_or_config, layers=layers)
    checkpoint = _checkpoint_dir(name_or_config)
    if checkpoint is not None and device.type != "meta":
        check_checkpoint(checkpoint, config)
        try:
            model, info = AutoModelForCausalLM.from_pretrained(
                str(checkpoint), config=config, dtype=dtype, local_files_only=True,
                attn_implementation="sdpa", output_loading_info=True,
            )
        except Exception as err:  # what the checks above cannot see coming
            message = str(err).strip().split("\n")[0] or type(err).__name__
            raise ModelError(f"{checkpoint}: cannot load the checkpoint: {message}") from None
        missing = sorted(set(info.get("missing_keys", ())) - _derived_names(model))
        if missing:
            raise ModelError(f"{checkpoint}: the checkpoint has no tensor '{missing[0]}'"
                             + (f" (and {len(missing) - 1} more are missing)"
                                if len(missing) > 1 else ""))
        if not allow_nonfinite:
            check_finite(model, str(checkpoint))
        return model.to(device).eval()
    with torch.random.fork_rng(devices=[]), device:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype,
                                                 attn_implementation="sdpa")
    return model.eval()


# --- checking checkpoints -------------------------------------------------------------------

#: safetensors dtype names -> (bytes per element, floating point)
_SAFETENSORS_DTYPES = {
    "F64": (8, True), "F32": (4, True), "F16": (2, True), "BF16": (2, True),
    "F8_E4M3": (1, True), "F8_E5M2": (1, True), "I64": (8, False), "I32": (4, False),
    "I16": (2, False), "I8": (1, False), "U64": (8, False), "U32": (4, False),
    "U16": (2, False), "U8": (1, False), "BOOL": (1, False),
}
#: The largest safetensors header read (the format's own limit).
_MAX_HEADER = 100_000_000


def safetensors_index(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The tensors of a ``.safetensors`` file, name -> (dtype, shape), read from its header
    alone; :class:`ModelError` naming the file for anything damaged: a file shorter than its
    header says, a header that is not a JSON object of well-formed entries, tensor data
    that overlaps or lies beyond the end of the file."""
    import struct

    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise ModelError(f"{path}: damaged safetensors file: {size} bytes, too short "
                                 "for a header")
            (length,) = struct.unpack("<Q", head)
            if length > min(_MAX_HEADER, size - 8):
                raise ModelError(f"{path}: damaged safetensors file: its header claims "
                                 f"{length} bytes, the file has {size - 8} after the length "
                                 "(truncated, or not a safetensors file)")
            header = handle.read(length)
    except OSError as err:
        raise ModelError(f"{path}: cannot read it ({err.strerror})") from None
    try:
        entries = json.loads(header.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ModelError(f"{path}: damaged safetensors file: the header is not JSON") from None
    if not isinstance(entries, dict):
        raise ModelError(f"{path}: damaged safetensors file: the header is not a JSON object")
    data = size - 8 - length
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
    spans: list[tuple[int, int, str]] = []
    for name, entry in entries.items():
        if name == "__metadata__":
            continue
        dtype = entry.get("dtype") if isinstance(entry, dict) else None
        shape = entry.get("shape") if isinstance(entry, dict) else None
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if (dtype not in _SAFETENSORS_DTYPES or not isinstance(shape, list)
                or not all(isinstance(d, int) and d >= 0 for d in shape)
                or not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) for o in offsets)):
            raise ModelError(f"{path}: damaged safetensors file: tensor '{name}' has a "
                             "malformed header entry")
        count = 1
        for d in shape:
            count *= d
        begin, end = offsets
        if not 0 <= begin <= end or end - begin != count * _SAFETENSORS_DTYPES[dtype][0]:
            raise ModelError(f"{path}: damaged safetensors file: tensor '{name}' "
                             f"({dtype} {shape}) does not fit its data offsets {offsets}")
        if end > data:
            raise ModelError(f"{path}: damaged safetensors file: tensor '{name}' ends at byte "
                             f"{end} of the data, which has {data} (truncated)")
        tensors[name] = (dtype, tuple(shape))
        spans.append((begin, end, name))
    spans.sort()
    for (_, end, first), (begin, _, second) in zip(spans, spans[1:], strict=False):
        if begin < end:
            raise ModelError(f"{path}: damaged safetensors file: tensors '{first}' and "
                             f"'{second}' overlap")
    return tensors


def _checkpoint_tensors(directory: Path) -> dict[str, tuple[str, str, tuple[int, ...]]]:
    """name -> (file, dtype, shape) of every tensor of the checkpoint in ``directory``
    (safetensors files, else ``pytorch_model*.bin``), each file checked for damage."""
    import torch

    out: dict[str, tuple[str, str, tuple[int, ...]]] = {}
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text()).get("weight_map", {})
        except (OSError, ValueError, AttributeError):
            raise ModelError(f"{index}: not a safetensors index (a JSON object with a "
                             "'weight_map')") from None
        for shard in sorted(set(weight_map.values()) if isinstance(weight_map, dict) else ()):
            if not (directory / str(shard)).is_file():
                raise ModelError(f"{index}: names the shard '{shard}', which is missing")
    files = sorted(directory.glob("*.safetensors"))
    for file in files:
        for name, (dtype, shape) in safetensors_index(file).items():
            out[name] = (file.name, dtype, shape)
    if files:
        return out
    for file in sorted(directory.glob("pytorch_model*.bin")):
        try:
            state = torch.load(str(file), map_location="meta", weights_only=True)
        except Exception as err:
            message = str(err).strip().split("\n")[0] or type(err).__name__
            raise ModelError(f"{file}: cannot read the checkpoint: {message}") from None
        if not isinstance(state, dict):
            raise ModelError(f"{file}: not a state dict")
        for name, tensor in state.items():
            if isinstance(tensor, torch.Tensor):
                floating = "F32" if tensor.is_floating_point() else "I64"
                out[str(name)] = (file.name, floating, tuple(tensor.shape))
    return out


def _derived_names(model: torch.nn.Module) -> set[str]:
    """State-dict names a checkpoint need not hold: tied weights (``lm_head.weight`` of a
    model with tied embeddings) and buffers the model computes."""
    names = {name for name, _ in model.named_buffers()}
    config = getattr(model, "config", None)
    if getattr(config, "tie_word_embeddings", False):
        names.add("lm_head.weight")
    return names


def check_checkpoint(directory: Path, config: PretrainedConfig) -> None:
    """Raise :class:`ModelError` unless the checkpoint in ``directory`` can be loaded into
    the model of ``config`` as it is: its files undamaged (:func:`safetensors_index`), every
    tensor the model needs present (tied and computed ones aside), of the model's shape and
    a floating-point dtype (other floating dtypes are converted). Tensors the model does not
    use (layers beyond ``num_hidden_layers``) are ignored. Nothing but headers is read."""
    import torch
    from transformers import AutoModelForCausalLM

    found = _checkpoint_tensors(directory)
    with torch.device("meta"):
        meta = AutoModelForCausalLM.from_config(config)
    wanted = meta.state_dict()
    derived = _derived_names(meta)
    missing = [name for name in wanted if name not in found and name not in derived]
    if missing:
        more = f" (and {len(missing) - 1} more are missing)" if len(missing) > 1 else ""
        raise ModelError(f"{directory}: the checkpoint has no tensor '{missing[0]}'{more}")
    for name, tensor in wanted.items():
        if name not in found:
            continue
        file, dtype, shape = found[name]
        if tuple(tensor.shape) != shape:
            raise ModelError(f"{directory / file}: tensor '{name}' has shape {list(shape)}, "
                             f"the model's is {list(tensor.shape)}")
        if tensor.is_floating_point() and not _SAFETENSORS_DTYPES.get(dtype, (0, True))[1]:
            raise ModelError(f"{directory / file}: tensor '{name}' is {dtype}, not a "
                             "floating-point dtype as the model's weights are")


def check_finite(model: torch.nn.Module, where: str) -> None:
    """Raise :class:`ModelError` naming the first parameter of ``model`` holding a NaN or an
    infinity (``where`` names the checkpoint)."""
    import torch

    for name, param in model.named_parameters():
        if param.is_floating_point() and not bool(torch.isfinite(param).all()):
            bad = int((~torch.isfinite(param)).sum())
            raise ModelError(f"{where}: tensor '{name}' holds {bad} non-finite value"
                             f"{'s' if bad > 1 else ''} (NaN or infinity); pass "
                             "--allow-nonfinite to run it anyway")


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
    _check_positions(model, seq_len)
    bounds = _seq_bounds(model, seq_len, dynamic, max_seq)
    device, _ = _device_and_dtype(model)
    call = model.forward

    def forward(input_ids: torch.Tensor) -> torch.Tensor:
        return call(input_ids=input_ids, use_cache=False).logits

    ids = torch.zeros((batch, seq_len), dtype=torch.long, device=device)
    spec = {"input_ids": {1: SEQ}} if bounds else None
    with _capturing(model, forward):
        return capture(model, (ids,), dynamic=spec, max=bounds or None)


def _check_positions(model: torch.nn.Module, seq_len: int) -> None:
    """A sequence no longer than the model's ``max_position_embeddings``."""
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if isinstance(limit, int) and seq_len > limit:
        raise ModelError(f"a sequence of {seq_len} tokens is longer than the model's "
                         f"max_position_embeddings ({limit})")


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

    _check_positions(model, seq_len)
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
                 model: PreTrainedModel | None = None, strict: bool = True,
                 allow_nonfinite: bool = False) -> CapturedProgram:
    """``program`` with its weights read from ``source`` (see :meth:`CapturedProgram.bind`).

    ``source`` is a local checkpoint directory or ``.safetensors`` file (only the tensors the
    program uses are read; a damaged file is a :class:`ModelError` naming it), a state dict,
    or a module. Floating-point tensors are converted to the dtype of their argument; an
    integer tensor for a floating-point argument, or one holding NaN or infinity (unless
    ``allow_nonfinite``), is a :class:`ModelError` naming it. A tied ``lm_head.weight``
    missing from the checkpoint is read from ``model.embed_tokens.weight``. With ``model``
    given, the buffers no checkpoint holds (the rotary frequencies) are recomputed from its
    config (:func:`computed_buffers`).
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
    for name in sorted(wanted & tensors.keys()):
        tensor = tensors[name]
        dtype = _torch_dtype(types[name].element_type)  # type: ignore[attr-defined]
        if isinstance(tensor, torch.Tensor) and dtype.is_floating_point:
            if not tensor.is_floating_point():
                raise ModelError(f"tensor '{name}' is {tensor.dtype}, not a floating-point "
                                 f"dtype as the program's argument ({dtype}) is")
            if not allow_nonfinite and tensor.device.type != "meta" and not bool(
                    torch.isfinite(tensor).all()):
                raise ModelError(f"tensor '{name}' holds non-finite values (NaN or "
                                 "infinity); pass allow_nonfinite=True to use it anyway")
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
            safetensors_index(file)  # a damaged file is an error naming it
            with safe_open(str(file), framework="pt") as handle:
                for key in handle.keys():  # noqa: SIM118 - safe_open is not a dict
                    if key in wanted or key in ("model.embed_tokens.weight", "lm_head.weight"):
                        out[key] = handle.get_tensor(key)
        return out
    bins = [path] if path.is_file() else sorted(path.glob("pytorch_model*.bin"))
    if not bins:
        raise CaptureError(f"no checkpoint (*.safetensors or pytorch_model*.bin) at {path}")
    for file in bins:
        try:
            state = torch.load(str(file), map_location="cpu", weights_only=True)
        except Exception as err:
            message = str(err).strip().split("\n")[0] or type(err).__name__
            raise ModelError(f"{file}: cannot read the checkpoint: {message}") from None
        out.update({k: v for k, v in state.items() if k in wanted})
    return out


__all__ = [
    "ATTENTION", "PRESETS", "SEQ", "SUPPORTED_MODEL_TYPES", "ModelError", "build_model",
    "capture_layer", "capture_model", "check_checkpoint", "check_config", "check_finite",
    "computed_buffers", "decoder_layers", "head_dim", "load_weights", "model_config",
    "position_embeddings", "prefixed", "register_attention", "safetensors_index",
]  # fmt: skip
