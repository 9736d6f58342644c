"""``length-buckets`` at lengths chosen to land in each bucket: the host ``scf.if`` runs the
right variant in the interpreters (results against float64), the executor's plan marks the
other variant's launches inactive at that length, and the buckets whose heuristic schedules
agree share one variant. The lit test beside it checks the IR."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

import llmopt
import llmopt.interp
from llmopt.codegen.executor import LaunchStep, plan_host_function
from llmopt.codegen.symbolic import SymbolicHost, layout_call
from llmopt.dialects import tile
from llmopt.passes.tile.length_buckets import LengthBuckets
from llmopt.passes.tile.register_tile import match_contraction

SOURCE = Path(__file__).with_name("length-buckets.mlir")
BUCKETS = "length-buckets{bounds=8,32}"
TO_KERNEL = ("split-k,register-tile,stage-inputs,async-copy,prefetch-stages,pad-shared,"
             "vector-fragments,tile-to-kernel")


@functools.cache
def bucketed(pipeline: str) -> ModuleOp:
    return llmopt.lower(llmopt.parse(SOURCE.read_text()), pipeline)


def inputs(seq: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seq)
    return (rng.standard_normal((64, 256)).astype(np.float32),
            rng.standard_normal((seq, 256)).astype(np.float32))


@pytest.mark.parametrize("seq", [1, 2, 5, 8, 9, 40, 64])
@pytest.mark.parametrize("pipeline", [BUCKETS, f"{BUCKETS},{TO_KERNEL}"])
def test_each_bucket_computes_the_product(seq: int, pipeline: str) -> None:
    w, x = inputs(seq)
    (out,) = llmopt.interp.run(bucketed(pipeline), [w, x], check_races=False)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    # f32 sums of 256 terms: well inside 1e-4 of the largest result.
    assert np.abs(out - ref).max() <= 1e-4 * np.abs(ref).max()


def lowered() -> ModuleOp:
    return bucketed(f"{BUCKETS},{TO_KERNEL},kernel-to-cuda")


@pytest.mark.parametrize(("seq", "bucket"), [(1, "coop1"), (2, "coop2"), (3, "le8"), (8, "le8"),
                                             (9, "max"), (64, "max")])
def test_the_plan_launches_one_variant_per_length(seq: int, bucket: str) -> None:
    module = lowered()
    plan = plan_host_function(module)
    (fn,) = [op for op in module.ops if isinstance(op, func.FuncOp) and op.body.blocks]
    host = SymbolicHost(fn)
    layout = layout_call(plan, host, {"seq": seq})
    ran = {plan.steps[k].kernel for k, s in enumerate(plan.steps)
           if isinstance(s, LaunchStep) and k not in layout.inactive}
    names = {s.kernel for s in plan.steps if isinstance(s, LaunchStep)}
    variants = {b: {n for n in names if b in n} for b in ("coop1", "coop2", "le8")}
    variants["max"] = names - set().union(*variants.values())
    assert all(variants.values()) and ran == variants[bucket]


def test_the_cooperative_variant_is_the_static_one_token_schedule() -> None:
    """At one row the variant has loop-to-tile's schedule of a static matrix-vector
    product: a block per output, the reduction cooperative, one thread storing. A symbol
    is at least 1, so its one-row bucket is exactly one row: extents and grid static."""
    module = bucketed(BUCKETS)
    (coop,) = [op for op in module.walk() if isinstance(op, tile.KernelOp)
               and "llmopt.coop" in op.attributes and op.sym_name.data.endswith("coop1")]
    (forall,) = [op for op in coop.body.block.ops if isinstance(op, tile.ForallOp)]
    assert forall.mapping.data == "blocks" and forall.shape == (64, 1)
    assert [type(op) for op in forall.body.block.ops] == [tile.CoopReduceOp, tile.ForallOp]
    assert not forall.runtime_sizes
    assert coop.block_shape[0] == 256 and coop.grid_size is None and coop.grid_shape[0] == 64
    assert match_contraction(coop) is None  # split-k and register-tile leave it alone


def test_the_two_row_variant_keeps_the_runtime_rows() -> None:
    """Up to two rows the cooperative variant's rows and grid follow the length."""
    module = bucketed(BUCKETS)
    (coop,) = [op for op in module.walk() if isinstance(op, tile.KernelOp)
               and op.sym_name.data.endswith("coop2")]
    (forall,) = [op for op in coop.body.block.ops if isinstance(op, tile.ForallOp)]
    assert forall.shape == (64, 2) and forall.runtime_sizes and coop.grid_size is not None


def test_no_cooperative_variant_when_asked() -> None:
    module = llmopt.lower(llmopt.parse(SOURCE.read_text()),
                          "length-buckets{bounds=8,32 coop_rows=0}")
    assert not [op for op in module.walk()
                if isinstance(op, tile.KernelOp) and "llmopt.coop" in op.attributes]


def test_buckets_with_one_schedule_are_left_alone() -> None:
    module = llmopt.parse(SOURCE.read_text())  # at most 32 rows it is tiled as at 64
    LengthBuckets(bounds=(32,), coop_rows=0).apply(llmopt.make_context(), module)
    kernels = [op for op in module.walk() if isinstance(op, tile.KernelOp)]
    assert len(kernels) == 1 and match_contraction(kernels[0]) is not None


@pytest.mark.parametrize("bounds", [(), (1,), (32, 8), (8, 8)])
def test_bad_bounds_are_refused(bounds: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="bounds"):
        LengthBuckets(bounds=bounds)


GUARDED = """
func.func @f(%x: memref<?x4xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
             %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> memref<?x4xf32> {
  %c8 = arith.constant 8 : index
  %le8 = arith.cmpi ule, %seq, %c8 : index
  scf.if %le8 {
    %p = memref.alloc(%seq) : memref<2x?x4xf32>
    scf.yield
  } else {
    %q = memref.alloc(%seq) : memref<2x?x4xf32>
    scf.yield
  }
  func.return %x : memref<?x4xf32>
}
"""


def test_an_allocation_in_a_bucket_is_sized_for_its_bound() -> None:
    """An allocation under ``%seq <= 8`` (a bucket's split-k partial sums) is allocated for 8
    rows, the one in the else branch for the maximum; at a call, the branch that does not
    run has an empty shape."""
    (fn,) = [op for op in llmopt.parse(GUARDED).ops if isinstance(op, func.FuncOp)]
    host = SymbolicHost(fn)
    assert host.max_shapes() == ((2, 8, 4), (2, 64, 4))
    assert host.evaluate({"seq": 5}).shapes == ((2, 5, 4), (0, 0, 0))
    assert host.evaluate({"seq": 9}).shapes == ((0, 0, 0), (2, 9, 4))
