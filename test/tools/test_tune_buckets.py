"""``llmopt tune`` on a symbolic program: each length bucket's kernel (rows up to its bound)
gets candidates that may overhang the bound, a one-kernel module with the length as its
symbol and its grid computed again from it, which the scheduling passes lower with each
candidate's knobs to a program that computes what the kernel computed at lengths up to the
bound (the interpreters against the unscheduled kernel), and inputs at the bound. The
timing itself needs a GPU (``test/gpu``)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import IndexType, ModuleOp

import llmopt
from llmopt.dialects import tile
from llmopt.dialects._symbols import SYMBOL_ATTR
from llmopt.numerics import check_numerics
from llmopt.passes.tile.length_buckets import BUCKET_ATTR
from llmopt.tools import tune
from llmopt.tools.llmopt_cli import main

SOURCE = Path(__file__).parents[1] / "passes" / "tile" / "length-buckets.mlir"
BUCKETS = "length-buckets{bounds=8,32 coop_rows=0}"
SCHEDULED = tune.SCHEDULED.format(arch="sm_90")


@functools.cache
def bucketed() -> ModuleOp:
    return llmopt.lower(llmopt.parse(SOURCE.read_text()), BUCKETS)


def variant(bound: int) -> tile.KernelOp:
    """The kernel of the bucket of at most ``bound`` rows."""
    return next(op for op in bucketed().walk() if isinstance(op, tile.KernelOp)
                and getattr(op.attributes.get(BUCKET_ATTR), "value", None) is not None
                and op.attributes[BUCKET_ATTR].value.data == bound)  # type: ignore[union-attr]


def test_a_bucket_kernel_gets_candidates_that_overhang_its_bound() -> None:
    kernel = variant(8)
    assert tune.match_contraction(kernel) is not None
    found = tune.candidates(kernel, "sm_90") + tune.mma_candidates(kernel, "sm_90", 8)
    assert found, "no candidate for the 8-row bucket"
    assert any(8 % knobs["bm"] for knobs in found), "no ragged candidate"


def test_the_one_kernel_module_declares_the_length_and_computes_the_grid() -> None:
    kernel = variant(8)
    module = tune.one_kernel_module(kernel, None)
    module.verify()
    (fn,) = [op for op in module.ops if isinstance(op, func.FuncOp)]
    symbols = [a for a, attrs in zip(fn.body.block.args, fn.arg_attrs.data, strict=True)
               if SYMBOL_ATTR in attrs.data]
    assert len(symbols) == 1 and isinstance(symbols[0].type, IndexType)
    (copy,) = [op for op in fn.walk() if isinstance(op, tile.KernelOp)]
    assert copy.grid_size is not None and copy.grid_size.owner.parent_op() is fn
    types, slots = tune.call_types(fn)
    assert len(types) == len(fn.body.block.args) - 1
    assert symbols[0].index not in slots
    assert sorted(t.get_shape() for t in types) == [(8, 64), (8, 256), (64, 256)], types
    # the output is the one argument written (the kernel's grid operand is no buffer)
    (written,) = tune.written_arguments(fn)
    assert types[slots.index(written)].get_shape() == (8, 64)


@pytest.mark.parametrize("bound", [8, 64])
def test_every_candidate_of_a_bucket_computes_the_kernel(bound: int) -> None:
    kernel = variant(bound)
    for knobs in tune.candidates(kernel, "sm_90")[:3]:
        report = check_numerics(tune.one_kernel_module(kernel, knobs), SCHEDULED, lengths=3)
        assert report.ok, f"{knobs}: {report}"


def test_max_seq_needs_dynamic(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "tinyllama", "--max-seq", "64"]) == 1
    assert "--max-seq bounds a symbolic length: add --dynamic" in capsys.readouterr().err
