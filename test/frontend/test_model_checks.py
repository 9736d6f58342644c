"""Models llmopt cannot build as asked are refused by name (``frontend/models.py``): bad
configs, damaged or mismatched checkpoints, more layers than there are, non-finite weights.
Never a model run with made-up weights, never a traceback from deep inside transformers."""

from __future__ import annotations

import json
import struct
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from safetensors.torch import load_file, save_file  # noqa: E402

from llmopt.frontend.models import (  # noqa: E402
    ModelError,
    build_model,
    capture_model,
    check_checkpoint,
    load_weights,
    model_config,
    safetensors_index,
)
from llmopt.tools.fuzz_cli import BASE_CONFIG, VICTIM, build_base  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_base(tmp_path_factory.mktemp("models") / "base")


def _copy(base: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(base, tmp_path / "ckpt"))


@pytest.mark.parametrize(("changes", "message"), [
    ({"model_type": "mistral"}, "model_type 'mistral' is not supported"),
    ({"hidden_size": 0}, "'hidden_size' must be a positive integer, got 0"),
    ({"num_key_value_heads": 3}, "is not a multiple of 'num_key_value_heads' 3"),
    ({"hidden_size": 30}, "'hidden_size' 30 is not a multiple of 'num_attention_heads' 4"),
    ({"rms_norm_eps": 0.0}, "'rms_norm_eps' must be a positive number, got 0.0"),
    ({"vocab_size": -1}, "'vocab_size' must be a positive integer, got -1"),
])
def test_bad_configs_are_refused_naming_the_key(changes: dict[str, object], message: str
                                                ) -> None:
    with pytest.raises(ModelError, match=message.replace("(", r"\(").replace(")", r"\)")):
        model_config({**BASE_CONFIG, **changes})


def test_heads_divide_the_hidden_size_even_with_a_head_dim() -> None:
    """transformers requires it of Llama and Qwen2; the error is ours, naming the keys."""
    with pytest.raises(ModelError, match="'hidden_size' 30 is not a multiple of "
                                         "'num_attention_heads' 4$"):
        model_config({**BASE_CONFIG, "hidden_size": 30, "head_dim": 8})
    assert model_config({**BASE_CONFIG, "head_dim": 16}).head_dim == 16


def test_more_layers_than_the_model_has() -> None:
    with pytest.raises(ModelError, match="has 2 decoder layers, fewer than the 3 asked for"):
        model_config(BASE_CONFIG, layers=3)
    assert model_config(BASE_CONFIG, layers=1).num_hidden_layers == 1


def test_a_good_checkpoint_passes_every_check(base: Path) -> None:
    check_checkpoint(base, model_config(base))
    names = safetensors_index(base / "model.safetensors")
    assert names[VICTIM] == ("F32", (48, 32))
    model = build_model(base)
    assert torch.isfinite(model.model.norm.weight).all()


def test_fewer_layers_of_a_checkpoint_ignore_the_rest(base: Path) -> None:
    check_checkpoint(base, model_config(base, layers=1))
    assert len(build_model(base, layers=1).model.layers) == 1


def test_truncated_file_names_the_tensor_that_does_not_fit(base: Path, tmp_path: Path) -> None:
    ckpt = _copy(base, tmp_path)
    path = ckpt / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ModelError, match=r"model.safetensors: damaged safetensors file: tensor"):
        safetensors_index(path)
    with pytest.raises(ModelError, match="truncated"):
        build_model(ckpt)


def test_overlapping_tensors_are_damage(base: Path, tmp_path: Path) -> None:
    ckpt = _copy(base, tmp_path)
    path = ckpt / "model.safetensors"
    blob = path.read_bytes()
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + length])
    names = sorted((k for k in header if k != "__metadata__"),
                   key=lambda k: header[k]["data_offsets"][0])
    first, second = header[names[0]], header[names[1]]
    size = second["data_offsets"][1] - second["data_offsets"][0]
    if first["data_offsets"][1] - first["data_offsets"][0] == size and first["dtype"] == \
            second["dtype"] and first["shape"] == second["shape"]:
        second["data_offsets"] = list(first["data_offsets"])
    else:
        pytest.skip("the first two tensors differ in size")
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + blob[8 + length:])
    with pytest.raises(ModelError, match="overlap"):
        safetensors_index(path)


def test_missing_tensor_is_never_initialised(base: Path, tmp_path: Path) -> None:
    ckpt = _copy(base, tmp_path)
    tensors = load_file(str(ckpt / "model.safetensors"))
    del tensors[VICTIM]
    save_file(tensors, str(ckpt / "model.safetensors"))
    with pytest.raises(ModelError, match=f"the checkpoint has no tensor '{VICTIM}'"):
        build_model(ckpt)


def test_nan_weight_is_refused_unless_allowed(base: Path, tmp_path: Path) -> None:
    ckpt = _copy(base, tmp_path)
    tensors = load_file(str(ckpt / "model.safetensors"))
    tensors[VICTIM][0, 0] = float("nan")
    save_file(tensors, str(ckpt / "model.safetensors"))
    with pytest.raises(ModelError, match=f"tensor '{VICTIM}' holds 1 non-finite value"):
        build_model(ckpt)
    model = build_model(ckpt, allow_nonfinite=True)
    assert torch.isnan(model.state_dict()[VICTIM]).any()


def test_load_weights_refuses_damage_integers_and_nan(base: Path, tmp_path: Path) -> None:
    """The Python API's path (a program captured on ``meta``, weights bound later) checks
    what the command line does."""
    meta = build_model(base, device="meta")
    program = capture_model(meta, 3)
    assert not load_weights(program, base, model=meta).unbound
    tensors = load_file(str(base / "model.safetensors"))
    as_int = {**tensors, VICTIM: tensors[VICTIM].int()}
    with pytest.raises(ModelError, match=f"tensor '{VICTIM}' is torch.int32"):
        load_weights(program, as_int, model=meta)
    poisoned = {**tensors, VICTIM: tensors[VICTIM].clone().fill_(float("inf"))}
    with pytest.raises(ModelError, match="non-finite"):
        load_weights(program, poisoned, model=meta)
    assert not load_weights(program, poisoned, model=meta, allow_nonfinite=True).unbound
    ckpt = _copy(base, tmp_path)
    (ckpt / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00not json")
    with pytest.raises(ModelError, match="model.safetensors: damaged safetensors file"):
        load_weights(program, ckpt, model=meta)
