"""The numerics checker bites: deliberately broken variants of real passes are caught.

Each variant runs the real pass, then plants one classic bug in its output. The checker
must fail on exactly that pass, by a wrong result or by an interpreter error (an
out-of-bounds access or a race).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, ModuleOp, StringAttr
from xdsl.ir.affine import AffineMap
from xdsl.passes import ModulePass

import llmopt
from llmopt import registry
from llmopt.dialects import kernel, loop, tile

RMSNORM = """
func.func @forward(%w: tensor<100xf32>, %x: tensor<1x7x100xf32>) -> tensor<1x7x100xf32> {
  %pow = torch.pow %x {exponent = 2.0} : tensor<1x7x100xf32> -> tensor<1x7x100xf32>
  %mean = torch.mean %pow {dims = [-1], keepdim = true} : tensor<1x7x100xf32> -> tensor<1x7x1xf32>
  %eps = torch.constant 1.0e-05 : tensor<f32>
  %add = torch.add %mean, %eps : tensor<1x7x1xf32>, tensor<f32> -> tensor<1x7x1xf32>
  %rs = torch.rsqrt %add : tensor<1x7x1xf32> -> tensor<1x7x1xf32>
  %mul = torch.mul %x, %rs : tensor<1x7x100xf32>, tensor<1x7x1xf32> -> tensor<1x7x100xf32>
  %out = torch.mul %w, %mul : tensor<100xf32>, tensor<1x7x100xf32> -> tensor<1x7x100xf32>
  func.return %out : tensor<1x7x100xf32>
}
"""


def _broken(real: str, sabotage: Callable[[ModuleOp], None]) -> type[ModulePass]:
    base = registry.PASSES[real]()

    @dataclass(frozen=True)
    class Broken(base):  # type: ignore[misc, valid-type]
        name = f"broken-{real}"

        def apply(self, ctx: Context, op: ModuleOp) -> None:
            super().apply(ctx, op)
            sabotage(op)

    return Broken


def off_by_one(module: ModuleOp) -> None:
    """Shift the last load along its last axis by one (wrapping, so still in bounds)."""
    load = [op for op in module.walk() if isinstance(op, loop.LoadOp)][-1]
    old = load.map.data
    extent = load.buffer.type.get_shape()[-1]  # type: ignore[attr-defined]
    results = (*old.results[:-1], (old.results[-1] + 1) % extent)
    load.map = type(load.map)(AffineMap(old.num_dims, 0, results))


def drop_guard(module: ModuleOp) -> None:
    """Make a thread-strided loop run to the next multiple of the block: no bounds check."""
    for op in module.walk():
        if isinstance(op, scf.ForOp) and isinstance(op.ub.owner, arith.ConstantOp):
            start = op.lb.owner
            if isinstance(start, kernel.ThreadIdOp):
                bound = op.ub.owner.value.value.data  # type: ignore[attr-defined]
                padded = arith.ConstantOp.from_int_and_width(-(-bound // 128) * 128, IndexType())
                op.parent_block().insert_op_before(padded, op)  # type: ignore[union-attr]
                op.operands[1] = padded.result
                return
    raise AssertionError("no thread-strided loop found")


def drop_barriers(module: ModuleOp) -> None:
    for op in list(module.walk()):
        if isinstance(op, kernel.BarrierOp):
            op.detach()
            op.erase()


def wrong_combiner(module: ModuleOp) -> None:
    for op in module.walk():
        if isinstance(op, tile.CoopReduceOp) and op.kind.data == "add":
            op.kind = StringAttr("max")
            return
    raise AssertionError("no cooperative sum found")


CASES = [
    ("off-by-one index", "prim-to-loop", off_by_one),
    ("dropped bounds guard", "tile-to-kernel", drop_guard),
    ("missing barrier", "tile-to-kernel", drop_barriers),
    ("wrong reduction combiner", "loop-to-tile", wrong_combiner),
]


@pytest.fixture
def module() -> ModuleOp:
    return llmopt.parse(RMSNORM)


@pytest.fixture(autouse=True)
def _restore_registry() -> Iterator[None]:
    saved = dict(registry.PASSES)
    yield
    registry.PASSES.clear()
    registry.PASSES.update(saved)


def test_the_real_pipeline_passes(module: ModuleOp) -> None:
    report = llmopt.check_numerics(module, "lower-to-cuda")
    assert report.ok, str(report)


@pytest.mark.parametrize("label,real,sabotage", CASES, ids=[c[0] for c in CASES])
def test_broken_pass_is_caught(module: ModuleOp, label: str, real: str,
                               sabotage: Callable[[ModuleOp], None]) -> None:
    broken = _broken(real, sabotage)
    registry.PASSES[broken.name] = lambda: broken
    pipeline = registry.expand_pipeline("lower-to-cuda").replace(real, broken.name, 1)
    report = llmopt.check_numerics(module, pipeline)
    assert not report.ok, f"{label} went unnoticed:\n{report}"
    failure = report.first_failure
    assert failure is not None and failure.name == broken.name, str(report)
