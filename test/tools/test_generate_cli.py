"""``llmopt generate``: a checkpoint the test writes (a small Qwen2 in safetensors) loaded
from its directory, greedy tokens through the CPU interpreter equal to transformers'
``generate`` (``--check``), a prompt read from a file; bad prompts and contexts are one
error line and exit 1."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llmopt.tools.llmopt_cli import main  # noqa: E402


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-layer Qwen2 (hidden 32, 2 heads of 16, 1 kv head, q/k/v bias), saved with
    seeded random weights as a Hugging Face directory."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model("qwen2", hidden_size=32, intermediate_size=48,
                                  num_hidden_layers=1, num_attention_heads=2,
                                  num_key_value_heads=1, vocab_size=83,
                                  max_position_embeddings=64, tie_word_embeddings=False)
    torch.manual_seed(3)
    model = AutoModelForCausalLM.from_config(config)
    directory = tmp_path_factory.mktemp("qwen2")
    model.save_pretrained(directory)
    assert any(directory.glob("*.safetensors"))
    return directory


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMOPT_CACHE_DIR", str(tmp_path / "cache"))


def test_generate_from_a_checkpoint_matches_transformers(
        checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = tmp_path / "prompt.txt"
    ids.write_text("5, 17 2\n40 81")
    assert main(["generate", str(checkpoint), "--cpu", "--prompt-ids", str(ids),
                 "--new-tokens", "7", "--check"]) == 0
    out = capsys.readouterr().out
    assert "weights from" in out and "prompt of 5 tokens, 7 new" in out
    tokens = next(line for line in out.splitlines() if line.startswith("tokens:"))
    assert len(tokens.split()) == 1 + 7
    assert "ms/token" in out and "transformers generate: the same tokens" in out
    assert re.search(r"// compiled in [0-9.]+ s; [1-9][0-9]* kernel launches a decode step", out)


@pytest.mark.parametrize(("text", "message"), [
    ("1 two 3", "expected token ids"),
    ("[]", "the prompt is empty"),
    ("4 83", "token id 83 is outside the vocabulary [0, 83)"),
])
def test_bad_prompt_files(checkpoint: Path, tmp_path: Path, text: str, message: str,
                          capsys: pytest.CaptureFixture[str]) -> None:
    ids = tmp_path / "prompt.txt"
    ids.write_text(text)
    assert main(["generate", str(checkpoint), "--cpu", "--prompt-ids", str(ids)]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and err[0].startswith(f"llmopt: error: {ids}: ") and message in err[0]


def test_a_context_above_max_ctx_is_refused(checkpoint: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", str(checkpoint), "--cpu", "--prompt-len", "9", "--new-tokens",
                 "4", "--max-ctx", "8"]) == 1
    err = capsys.readouterr().err
    assert "need a context of 12, above --max-ctx 8" in err


@pytest.mark.slow
def test_generate_in_bfloat16_agrees_with_transformers(
        checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """bf16 weights, activations and caches through the CPU interpreter: transformers' bf16
    greedy tokens, or a divergence at a near-tie that --check reports with its logit gap."""
    code = main(["generate", str(checkpoint), "--cpu", "--dtype", "bfloat16", "--prompt-len",
                 "5", "--new-tokens", "6", "--check"])
    out = capsys.readouterr().out
    verdict = next(line for line in out.splitlines() if line.startswith("transformers"))
    assert "the same tokens" in verdict or "a near-tie" in verdict, verdict
    assert code == 0
    tokens = next(line for line in out.splitlines() if line.startswith("tokens:"))
    assert len(tokens.split()) == 1 + 6


def test_a_divergence_is_judged_in_float64(checkpoint: Path) -> None:
    """Against the float64 twin's own greedy tokens, a different token at one step is a
    divergence that the twin's forward prefers the reference's side of, by a positive gap."""
    import torch

    from llmopt.frontend.models import build_model
    from llmopt.generation import divergence, float64_twin

    model = build_model(checkpoint, dtype=torch.bfloat16)
    exact = float64_twin(model)
    assert next(exact.parameters()).dtype == torch.float64
    prompt = [3, 1, 4, 1, 5]
    with torch.no_grad():
        ids = torch.tensor([prompt])
        reference = exact.generate(ids, max_new_tokens=4, min_new_tokens=4,
                                   do_sample=False)[0, len(prompt):].tolist()
    tokens = [*reference[:2], (reference[2] + 1) % model.config.vocab_size, reference[3]]
    found = divergence(model, prompt, tokens, reference, exact)
    assert found is not None and found["step"] == 2
    assert found["float64_prefers"] == "reference" and found["float64_gap"] > 0
    assert divergence(model, prompt, reference, reference, exact) is None
