"""``bench/decode.py`` on the CPU: ``--variant`` arguments, and that a variant's system is
written beside the others (JSON and Markdown)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import decode  # noqa: E402


def test_variant_arguments() -> None:
    assert decode._variant("nopf=lower-to-cuda,x{a=1}") == ("nopf", "lower-to-cuda,x{a=1}")
    for bad in ("lower-to-cuda", "=lower-to-cuda", "name="):
        with pytest.raises(ValueError, match="NAME=PIPELINE"):
            decode._variant(bad)


def test_variant_rows_are_written(tmp_path: Path) -> None:
    def system(tok_s: float) -> dict[str, object]:
        return decode.measure([1, 2], 1 / tok_s, [1, 2], 10**9, 4e12)

    doc = {"meta": [{"gpu": "NVIDIA H200"}],
           "records": [{"model": "tinyllama", "dtype": "bfloat16", "context": c,
                        "systems": {"llmopt": system(900.0), "llmopt[nopf]": system(850.0),
                                    "static_graph": system(400.0)}} for c in (128, 512)]}
    decode.write_results(doc, tmp_path, "h200")
    table = (tmp_path / "decode-h200.md").read_text()
    assert "| tinyllama | bfloat16 | 512 | llmopt[nopf] | 850 |" in table
    saved = json.loads((tmp_path / "decode-h200.json").read_text())
    assert saved["records"][1]["systems"]["llmopt[nopf]"]["tok_s"] == pytest.approx(850.0)
