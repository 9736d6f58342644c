"""``version-row-groups`` on the symbolic tiny Llama layer: the pass finds register tiles
over the length in its short buckets, and the Kernel IR it leaves computes the layer at
lengths that fill one, some and all of a tile's row groups (the Kernel interpreter against
the layer in float64)."""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_models import tiny_model  # noqa: E402
from test_symbolic_launches import layer_error  # noqa: E402
from xdsl.dialects.builtin import IntegerAttr, ModuleOp  # noqa: E402

import llmopt  # noqa: E402
from llmopt import registry  # noqa: E402
from llmopt.frontend.capture import CapturedProgram  # noqa: E402
from llmopt.frontend.models import capture_layer  # noqa: E402
from llmopt.numerics import tolerance  # noqa: E402
from llmopt.passes.kernel.version_row_groups import GROUPS_ATTR  # noqa: E402
from llmopt.tools.llmopt_cli import split_pipeline  # noqa: E402

MAX = 128


@functools.cache
def versioned() -> tuple[CapturedProgram, ModuleOp]:
    """The symbolic layer lowered to Kernel IR by ``lower-to-cuda`` with
    ``version-row-groups`` before ``inline-repeated-kernels``."""
    program = capture_layer(tiny_model("llama"), 7, dynamic=True, max_seq=MAX)
    pipeline = registry.insert_before("lower-to-cuda", "inline-repeated-kernels",
                                      "version-row-groups")
    passes, _ = split_pipeline(pipeline, "kernel")
    module = program.module.clone()
    llmopt.lower(module, ",".join(passes))
    return program, module


def test_short_buckets_get_a_k_loop_per_count_of_row_groups() -> None:
    _, module = versioned()
    counts = {op.attributes[GROUPS_ATTR].value.data for op in module.walk()
              if isinstance(op.attributes.get(GROUPS_ATTR), IntegerAttr)}
    assert 1 in counts and len(counts) >= 2, counts


@pytest.mark.parametrize("seq", [3, 9, 17, 100])
def test_versioned_program_computes_the_layer(seq: int) -> None:
    program, module = versioned()
    err = layer_error(program, module, seq, 200 + seq)
    assert err <= tolerance(program.module), err
