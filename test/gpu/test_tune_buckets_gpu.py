"""``llmopt tune`` times a symbolic program's length-bucket kernels on the GPU: each gets an
entry under its own structural hash (or none where the heuristics' schedule was fastest),
every timed candidate computed the kernel, and ``apply-tuned`` gives the bucket's kernel the
recorded knobs."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import llmopt  # noqa: E402
from llmopt.dialects import tile  # noqa: E402
from llmopt.passes.tile._schedule import SCHEDULE_ATTR  # noqa: E402
from llmopt.tools import tune  # noqa: E402

SOURCE = Path(__file__).parents[1] / "passes" / "tile" / "length-buckets.mlir"


def test_bucket_kernels_are_tuned_and_their_knobs_applied(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    from llmopt.target import current_target

    arch = current_target().arch
    module = llmopt.lower(llmopt.parse(SOURCE.read_text()),
                          "length-buckets{bounds=8,32 coop_rows=0}")
    kernels = [op for op in module.walk() if isinstance(op, tile.KernelOp)]
    assert len(kernels) == 2
    lines: list[str] = []
    entries = tune.tune_module(module, arch, reps=5, limit=3, log=lines.append)
    assert not any("wrong result" in line for line in lines), "\n".join(lines)
    keys = {tune.schedule_key(k) for k in kernels}
    assert len(keys) == 2 and all(any(e.startswith(k) for e in entries) for k in keys), lines
    table = tmp_path / "tuned.json"
    tune.save_table(table, {k: v for k, v in entries.items() if v is not None})
    monkeypatch.setenv("LLMOPT_TUNE_CACHE", str(table))
    applied = llmopt.lower(module.clone(), f"apply-tuned{{arch={arch}}}")
    for kernel in (op for op in applied.walk() if isinstance(op, tile.KernelOp)):
        entry = next((v for e, v in entries.items()
                      if e.startswith(tune.schedule_key(kernel)) and v is not None), None)
        if entry is not None:
            knobs = {k: a.value.data for k, a in kernel.attributes[SCHEDULE_ATTR].data.items()}
            assert knobs == entry["knobs"]
