"""The default schedule (``loop-to-tile``) and its lowering to Kernel IR (``tile-to-kernel``).

* which schedule each kernel shape gets, and the launch shape it asks for;
* the IR verifies after each pass, and no Loop/Tile op survives ``tile-to-kernel``;
* bad input and bad options are diagnostics, not tracebacks;
* numerics: every case is interpreted at Loop, Tile and Kernel IR on random inputs, under
  several block sizes and grid caps (a capped grid makes blocks and threads stride over
  several points). Loop and Tile IR agree to rounding (a cooperative reduction sums in a
  different order: the tolerance, 1e-5 of the largest output, is that of a sum of a few
  hundred float32 terms, see ``test/interp/conftest.py``); Tile and Kernel IR agree bit for
  bit, because the Tile-IR interpreter models the order that ``tile-to-kernel`` generates.
  The Kernel-IR interpreter checks for data races, so a missing barrier fails the test;
* on a GPU host, the same cases compiled to CUDA and run, against the Loop-IR interpreter.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, math, memref, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.exceptions import PassFailedException

from llmopt.dialects import kernel, loop, tile
from llmopt.lowering._loop_bands import perfect_band
from llmopt.lowering.loop_to_tile import LoopToTile, choose_schedule
from llmopt.lowering.tile_to_kernel import TileToKernel


def parse(text: str) -> ModuleOp:
    """Parse and verify IR text (builtin, func, arith, math, memref, scf, loop, tile, kernel)."""
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, arith.Arith, math.Math, memref.MemRef, scf.Scf,
                    loop.Loop, tile.Tile, kernel.Kernel):
        ctx.load_dialect(dialect)
    module = Parser(ctx, text).parse_module()
    module.verify()
    return module


def ops_of(module: Operation, cls: type[Operation]) -> list[Operation]:
    return [op for op in module.walk() if isinstance(op, cls)]


def lower(text: str, **options: int) -> tuple[ModuleOp, ModuleOp, ModuleOp]:
    """The module at Loop, Tile and Kernel IR (each verified)."""
    at_loop = parse(text)
    at_tile = at_loop.clone()
    LoopToTile(**options).apply(Context(), at_tile)  # type: ignore[arg-type]
    at_tile.verify()
    at_kernel = at_tile.clone()
    TileToKernel().apply(Context(), at_kernel)
    at_kernel.verify()
    return at_loop, at_tile, at_kernel


# --- cases ---------------------------------------------------------------------------------------

ELEMENTWISE = """
func.func @f(%x: memref<7x100xf32>) -> memref<7x100xf32> {
  %y = memref.alloc() : memref<7x100xf32>
  loop.kernel @shift (%a = %x : memref<7x100xf32>, %b = %y : memref<7x100xf32>) {
    loop.for %i = 0 to 7 {
      loop.for %j = 0 to 100 {
        %v = loop.load %a[%i, %j] : memref<7x100xf32>
        %w = arith.mulf %v, %v : f32
        loop.store %w, %b[%i, (%j + 1) mod 100] : memref<7x100xf32>
      }
    }
  }
  func.return %y : memref<7x100xf32>
}
"""

def rmsnorm(rows: int, cols: int) -> str:
    """RMSNorm over ``cols``: a reduction and a free loop in one row."""
    t = f"memref<{rows}x{cols}xf32>"
    return f"""
func.func @f(%x: {t}, %w: memref<{cols}xf32>) -> {t} {{
  %y = memref.alloc() : {t}
  loop.kernel @rmsnorm (%a = %x : {t}, %g = %w : memref<{cols}xf32>, %o = %y : {t}) {{
    %eps = arith.constant 1.0e-05 : f32
    %n = arith.constant {1.0 / cols:.8e} : f32
    loop.for %i = 0 to {rows} {{
      %s = loop.reduce add %k = 0 to {cols} : f32 {{
        %v = loop.load %a[%i, %k] : {t}
        %sq = arith.mulf %v, %v : f32
        loop.yield %sq : f32
      }}
      %m = arith.mulf %s, %n : f32
      %e = arith.addf %m, %eps : f32
      %r = math.rsqrt %e : f32
      loop.for %j = 0 to {cols} {{
        %v = loop.load %a[%i, %j] : {t}
        %wj = loop.load %g[%j] : memref<{cols}xf32>
        %u0 = arith.mulf %v, %r : f32
        %u = arith.mulf %u0, %wj : f32
        loop.store %u, %o[%i, %j] : {t}
      }}
    }}
  }}
  func.return %y : {t}
}}
"""


RMSNORM = rmsnorm(5, 300)

def softmax(rows: int, cols: int) -> str:
    """Softmax over ``cols``, the exponentials going through the output buffer: the second
    reduction reads, in another order, what the block's threads wrote, and the last step
    overwrites it."""
    t = f"memref<{rows}x{cols}xf32>"
    return f"""
func.func @f(%x: {t}) -> {t} {{
  %y = memref.alloc() : {t}
  loop.kernel @softmax (%a = %x : {t}, %o = %y : {t}) {{
    loop.for %i = 0 to {rows} {{
      %m = loop.reduce max %k = 0 to {cols} : f32 {{
        %v = loop.load %a[%i, %k] : {t}
        loop.yield %v : f32
      }}
      loop.for %j = 0 to {cols} {{
        %v = loop.load %a[%i, %j] : {t}
        %d = arith.subf %v, %m : f32
        %e = math.exp %d : f32
        loop.store %e, %o[%i, %j] : {t}
      }}
      %s = loop.reduce add %k = 0 to {cols} : f32 {{
        %v = loop.load %o[%i, (%k + 37) mod {cols}] : {t}
        loop.yield %v : f32
      }}
      loop.for %j = 0 to {cols} {{
        %v = loop.load %o[%i, %j] : {t}
        %q = arith.divf %v, %s : f32
        loop.store %q, %o[%i, %j] : {t}
      }}
    }}
  }}
  func.return %y : {t}
}}
"""


SOFTMAX = softmax(6, 100)

MATMUL = """
func.func @f(%x: memref<12x40xf32>, %w: memref<24x40xf32>) -> memref<12x24xf32> {
  %y = memref.alloc() : memref<12x24xf32>
  loop.kernel @matmul (%a = %x : memref<12x40xf32>, %b = %w : memref<24x40xf32>,
                    %o = %y : memref<12x24xf32>) {
    loop.for %i = 0 to 12 {
      loop.for %j = 0 to 24 {
        %s = loop.reduce add %k = 0 to 40 : f32 {
          %u = loop.load %a[%i, %k] : memref<12x40xf32>
          %v = loop.load %b[%j, %k] : memref<24x40xf32>
          %p = arith.mulf %u, %v : f32
          loop.yield %p : f32
        }
        loop.store %s, %o[%i, %j] : memref<12x24xf32>
      }
    }
  }
  func.return %y : memref<12x24xf32>
}
"""

FULL_REDUCE = """
func.func @f(%x: memref<1000xi32>) -> memref<2xi32> {
  %y = memref.alloc() : memref<2xi32>
  loop.kernel @sum_max (%a = %x : memref<1000xi32>, %o = %y : memref<2xi32>) {
    %s = loop.reduce add %k = 0 to 1000 : i32 {
      %v = loop.load %a[%k] : memref<1000xi32>
      loop.yield %v : i32
    }
    %m = loop.reduce max %k = 0 to 1000 : i32 {
      %v = loop.load %a[999 - %k] : memref<1000xi32>
      loop.yield %v : i32
    }
    loop.store %s, %o[0] : memref<2xi32>
    loop.store %m, %o[1] : memref<2xi32>
  }
  func.return %y : memref<2xi32>
}
"""

NESTS = """
func.func @f(%x: memref<64xf32>) -> (memref<64xf32>, memref<32xf32>) {
  %y = memref.alloc() : memref<64xf32>
  %z = memref.alloc() : memref<32xf32>
  loop.kernel @nests (%a = %x : memref<64xf32>, %b = %y : memref<64xf32>,
                    %c = %z : memref<32xf32>) {
    %one = arith.constant 1.0 : f32
    loop.for %i = 0 to 64 {
      %v = loop.load %a[%i] : memref<64xf32>
      %w = arith.addf %v, %one : f32
      loop.store %w, %b[%i] : memref<64xf32>
    }
    loop.for %i = 0 to 32 {
      %v = loop.load %b[63 - %i] : memref<64xf32>
      %w = arith.mulf %v, %v : f32
      loop.store %w, %c[%i] : memref<32xf32>
    }
  }
  func.return %y, %z : memref<64xf32>, memref<32xf32>
}
"""

# Coordinates that go negative before `mod` / `floordiv` / `ceildiv` (as concat and slicing
# produce), and a broadcast load that sinks into the inner loop.
INDEXING = """
func.func @f(%x: memref<4x3xf32>, %z: memref<4x5xf32>) -> memref<4x8xf32> {
  %y = memref.alloc() : memref<4x8xf32>
  loop.kernel @cat (%a = %x : memref<4x3xf32>, %b = %z : memref<4x5xf32>,
                    %o = %y : memref<4x8xf32>) {
    loop.for %i = 0 to 4 {
      %r = loop.load %b[%i, 0] : memref<4x5xf32>
      loop.for %j = 0 to 8 {
        %u = loop.load %a[%i, %j mod 3] : memref<4x3xf32>
        %v = loop.load %b[%i, (%j - 3) mod 5] : memref<4x5xf32>
        %w = loop.load %b[(%i - 2) floordiv 2 + 1, (%j - 4) ceildiv 3 + 1] : memref<4x5xf32>
        %c3 = arith.constant 3 : index
        %lt = arith.cmpi ult, %j, %c3 : index
        %s = arith.select %lt, %u, %v : f32
        %t = arith.addf %s, %w : f32
        %q = arith.mulf %t, %r : f32
        loop.store %q, %o[%i, %j] : memref<4x8xf32>
      }
    }
  }
  func.return %y : memref<4x8xf32>
}
"""

# A full reduction whose result scales a loop nest (RMSNorm of a 1-D vector), with a constant
# defined after the reduction: one row-scheduled unit on one block.
VECTOR_NORM = """
func.func @f(%x: memref<300xf32>) -> memref<300xf32> {
  %y = memref.alloc() : memref<300xf32>
  loop.kernel @vnorm (%a = %x : memref<300xf32>, %b = %y : memref<300xf32>) {
    %s = loop.reduce add %k = 0 to 300 : f32 {
      %v = loop.load %a[%k] : memref<300xf32>
      %sq = arith.mulf %v, %v : f32
      loop.yield %sq : f32
    }
    %n = arith.constant 3.3333333e-03 : f32
    %m = arith.mulf %s, %n : f32
    %r = math.rsqrt %m : f32
    loop.for %i = 0 to 300 {
      %v = loop.load %a[%i] : memref<300xf32>
      %w = arith.mulf %v, %r : f32
      loop.store %w, %b[%i] : memref<300xf32>
    }
  }
  func.return %y : memref<300xf32>
}
"""

ROW_SUMS = """
func.func @f(%x: memref<64x40xf32>, %t: memref<40x64xf32>) -> memref<64x2xf32> {
  %y = memref.alloc() : memref<64x2xf32>
  loop.kernel @row_sums (%a = %x : memref<64x40xf32>, %b = %t : memref<40x64xf32>,
                         %o = %y : memref<64x2xf32>) {
    loop.for %i = 0 to 64 {
      %s = loop.reduce add %k = 0 to 40 : f32 {
        %u = loop.load %a[%i, %k] : memref<64x40xf32>
        loop.yield %u : f32
      }
      loop.store %s, %o[%i, 0] : memref<64x2xf32>
      %c = loop.reduce max %k = 0 to 40 : f32 {
        %v = loop.load %b[%k, %i] : memref<40x64xf32>
        loop.yield %v : f32
      }
      loop.store %c, %o[%i, 1] : memref<64x2xf32>
    }
  }
  func.return %y : memref<64x2xf32>
}
"""

ROW_SUM = """
func.func @f(%x: memref<64x40xf32>) -> memref<64xf32> {
  %y = memref.alloc() : memref<64xf32>
  loop.kernel @row_sum (%a = %x : memref<64x40xf32>, %o = %y : memref<64xf32>) {
    loop.for %i = 0 to 64 {
      %s = loop.reduce add %k = 0 to 40 : f32 {
        %u = loop.load %a[%i, %k] : memref<64x40xf32>
        loop.yield %u : f32
      }
      loop.store %s, %o[%i] : memref<64xf32>
    }
  }
  func.return %y : memref<64xf32>
}
"""

CASES = {
    "elementwise": ELEMENTWISE, "rmsnorm": RMSNORM, "softmax": SOFTMAX, "matmul": MATMUL,
    "full_reduce": FULL_REDUCE, "nests": NESTS, "indexing": INDEXING,
    "vector_norm": VECTOR_NORM, "row_sum": ROW_SUM, "row_sums": ROW_SUMS,
}

KNOBS = [
    {},
    {"block_size": 32, "max_grid": 2},
    {"block_size": 64, "coop_threshold": 0, "max_grid": 3},
    {"block_size": 1024, "max_grid": 1},
]


# --- the schedule choice -------------------------------------------------------------------------


def only_band(text: str) -> tuple[list[int], loop.ForOp]:
    module = parse(text)
    (kern,) = ops_of(module, loop.KernelOp)
    outer = next(op for op in kern.body.block.ops if isinstance(op, loop.ForOp))
    band = perfect_band(outer)  # type: ignore[arg-type]
    return [f.trip_count for f in band], band[-1]


@pytest.mark.parametrize(
    ("case", "threshold", "mapping", "threads"),
    [
        ("elementwise", 16384, "threads", 256),
        ("rmsnorm", 16384, "blocks", 256),  # imperfect nest: a row a block
        # at least `threshold` rows: 8 points of the 300-long row a thread
        ("rmsnorm", 0, "blocks", 64),
        ("softmax", 16384, "blocks", 128),  # the widest step is 100 long
        ("matmul", 16384, "blocks", 64),  # 288 outputs: too few for one a thread
        ("matmul", 0, "threads", 256),
        ("indexing", 16384, "threads", 32),  # the loads sink: a perfect 4x8 band
        # a sum along rows of one buffer: a block per row even with rows enough for a
        # thread each (8 of the 40 points a thread), so that a warp reads one row
        ("row_sum", 0, "blocks", 32),
        # ... unless a reduction reads down a column (threads then read adjacent words)
        ("row_sums", 0, "threads", 64),
    ],
)
def test_schedule_choice(case: str, threshold: int, mapping: str, threads: int) -> None:
    extents, innermost = only_band(CASES[case])
    schedule = choose_schedule(extents, innermost.body.block, 256, threshold)
    assert (schedule.mapping, schedule.threads) == (mapping, threads)


def test_thread_schedule_launch_shape() -> None:
    _, at_tile, _ = lower(ELEMENTWISE)
    (kern,) = ops_of(at_tile, tile.KernelOp)
    assert kern.grid_shape == (3, 1, 1) and kern.block_shape == (256, 1, 1)
    (forall,) = ops_of(at_tile, tile.ForallOp)
    assert forall.shape == (7, 100) and forall.mapping.data == "threads"
    # The band's loops are gone; the body was moved, not cloned.
    assert not ops_of(at_tile, loop.ForOp)


def test_row_schedule_structure() -> None:
    _, at_tile, _ = lower(SOFTMAX)
    (kern,) = ops_of(at_tile, tile.KernelOp)
    assert kern.grid_shape == (6, 1, 1) and kern.block_shape == (128, 1, 1)
    foralls = ops_of(at_tile, tile.ForallOp)
    assert [f.mapping.data for f in foralls] == ["blocks", "block_threads", "block_threads"]
    assert [c.kind.data for c in ops_of(at_tile, tile.CoopReduceOp)] == ["max", "add"]
    assert not ops_of(at_tile, loop.ReduceOp) and not ops_of(at_tile, loop.ForOp)


def test_dependent_nests_split_into_kernels() -> None:
    _, at_tile, at_kernel = lower(NESTS)
    names = [k.sym_name.data for k in ops_of(at_tile, tile.KernelOp)]
    assert names == ["nests", "nests_1"]
    launches = ops_of(at_kernel, kernel.LaunchOp)
    assert [op.kernel.root_reference.data for op in launches] == names


def test_full_reduction_gets_one_block() -> None:
    _, at_tile, _ = lower(FULL_REDUCE)
    (kern,) = ops_of(at_tile, tile.KernelOp)
    assert kern.grid_shape == (1, 1, 1) and kern.block_shape == (256, 1, 1)
    (outer, store) = ops_of(at_tile, tile.ForallOp)
    assert outer.mapping.data == "blocks" and outer.shape == (1,)
    assert store.mapping.data == "block_threads" and store.shape == (1,)


# --- tile-to-kernel ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_kernel_ir_is_explicit(case: str) -> None:
    _, at_tile, at_kernel = lower(CASES[case])
    leftovers = [op.name for op in at_kernel.walk() if op.dialect_name() in ("loop", "tile")]
    assert not leftovers
    funcs = ops_of(at_kernel, kernel.FuncOp)
    assert len(funcs) == len(ops_of(at_tile, tile.KernelOp))
    for fn in funcs:
        assert isinstance(fn.parent_op(), ModuleOp)
    for launch in ops_of(at_kernel, kernel.LaunchOp):
        assert launch.shared_bytes == 0  # every shared buffer is static


def test_coop_reduce_lowering() -> None:
    _, _, at_kernel = lower(RMSNORM)
    shuffles = ops_of(at_kernel, kernel.ShuffleXorOp)
    assert [s.offset.value.data for s in shuffles] == [16, 8, 4, 2, 1]
    (shared,) = ops_of(at_kernel, kernel.SharedOp)
    assert shared.result.type.get_shape() == (8,)  # 256 threads: 8 warps
    assert len(ops_of(at_kernel, kernel.BarrierOp)) == 2


def test_single_warp_needs_no_shared_memory() -> None:
    _, _, at_kernel = lower(RMSNORM, block_size=32)
    assert not ops_of(at_kernel, kernel.SharedOp)
    assert not ops_of(at_kernel, kernel.BarrierOp)  # and no step depends on another's writes


def test_barrier_between_dependent_steps() -> None:
    _, at_tile, _ = lower(SOFTMAX, block_size=32)
    at_kernel = at_tile.clone()
    TileToKernel().apply(Context(), at_kernel)
    # One warp: the coop reductions have no barrier of their own. The row writes %o, reads
    # it back in another order (barrier), then overwrites what the reduction read (barrier).
    assert len(ops_of(at_kernel, kernel.BarrierOp)) == 2


def test_unsupported_launch_shape() -> None:
    module = parse("""
    func.func @f(%x: memref<4xf32>) {
      tile.kernel @k grid [1, 2, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
        tile.forall (%i) in [4] over threads {
          %v = loop.load %a[%i] : memref<4xf32>
          loop.store %v, %a[%i] : memref<4xf32>
        }
      }
      func.return
    }
    """)
    with pytest.raises(PassFailedException, match="1-D launch shapes"):
        TileToKernel().apply(Context(), module)


# --- diagnostics ---------------------------------------------------------------------------------


def test_reduction_feeding_a_nest_runs_on_one_block() -> None:
    """A full reduction and the loop nest that uses its result share one row-scheduled unit
    (they cannot be separate foralls), and the constant defined between them is hoisted."""
    _, at_tile, _ = lower(VECTOR_NORM)
    (kern,) = ops_of(at_tile, tile.KernelOp)
    assert kern.grid_shape == (1, 1, 1) and kern.block_shape == (256, 1, 1)
    assert isinstance(kern.body.block.first_op, arith.ConstantOp)
    outer, inner = ops_of(at_tile, tile.ForallOp)
    assert (outer.mapping.data, outer.shape) == ("blocks", (1,))
    assert (inner.mapping.data, inner.shape) == ("block_threads", (300,))
    assert len(ops_of(at_tile, tile.CoopReduceOp)) == 1


@pytest.mark.parametrize(
    "options",
    [{"block_size": 100}, {"block_size": 2048}, {"arch": "hopper"}, {"max_grid": 0}],
)
def test_bad_options(options: dict[str, object]) -> None:
    with pytest.raises(PassFailedException):
        LoopToTile(**options).apply(Context(), parse(ELEMENTWISE))  # type: ignore[arg-type]


def test_options_from_pipeline_text() -> None:
    from llmopt.registry import build_pipeline

    pipeline = build_pipeline("loop-to-tile{block_size=64 coop_threshold=0},tile-to-kernel")
    first = pipeline.passes[0]
    assert isinstance(first, LoopToTile)
    assert (first.block_size, first.coop_threshold) == (64, 0)


# --- numerics ------------------------------------------------------------------------------------


def scale(values: np.ndarray) -> float:
    """The magnitude that rounding errors of sums with cancellation are relative to."""
    return float(np.max(np.abs(values), initial=1.0))


def knob_id(knobs: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in knobs.items()) or "default"


@pytest.mark.parametrize("knobs", KNOBS, ids=knob_id)
@pytest.mark.parametrize("case", sorted(CASES))
def test_interpreted_results_agree(case: str, knobs: dict[str, int]) -> None:
    interp = pytest.importorskip("llmopt.interp")
    at_loop, at_tile, at_kernel = lower(CASES[case], **knobs)
    inputs = interp.random_inputs(at_loop)
    expected = interp.run(at_loop, inputs)
    tiled = interp.run(at_tile, inputs)
    kernels = interp.run(at_kernel, inputs)  # raises RaceError on a missing barrier
    for want, got_tile, got_kernel in zip(expected, tiled, kernels, strict=True):
        np.testing.assert_allclose(got_tile, want, rtol=1e-5, atol=scale(want) * 1e-5)
        np.testing.assert_array_equal(got_kernel, got_tile)


def test_missing_barrier_is_a_race() -> None:
    """The row barriers are needed: without the first one the second reduction reads
    exponentials other threads have not written yet."""
    interp = pytest.importorskip("llmopt.interp")
    at_loop, _, at_kernel = lower(SOFTMAX, block_size=32)
    barrier = ops_of(at_kernel, kernel.BarrierOp)[0]
    barrier.detach()
    barrier.erase()
    with pytest.raises(interp.RaceError):
        interp.run(at_kernel, interp.random_inputs(at_loop))


GPU_CASES = {**CASES, "rmsnorm_large": rmsnorm(512, 2048), "softmax_large": softmax(300, 1000)}
"""On the GPU also rows of LLM width, many blocks at once."""


def gpu_cases() -> Iterator[tuple[str, dict[str, int]]]:
    for case in sorted(GPU_CASES):
        for knobs in KNOBS:
            yield case, knobs


@pytest.mark.gpu
@pytest.mark.parametrize(("case", "knobs"), list(gpu_cases()),
                         ids=[f"{c}-{knob_id(k)}" for c, k in gpu_cases()])
def test_gpu_results_agree(case: str, knobs: dict[str, int]) -> None:
    """Compiled to CUDA and run: real threads, real races, real shuffles."""
    interp = pytest.importorskip("llmopt.interp")
    torch = pytest.importorskip("torch")
    from llmopt.codegen.executor import CompiledProgram
    from llmopt.lowering.kernel_to_cuda import KernelToCuda

    at_loop, _, at_kernel = lower(GPU_CASES[case], **knobs)
    KernelToCuda().apply(Context(), at_kernel)
    program = CompiledProgram(at_kernel)
    inputs = interp.random_inputs(at_loop)
    expected = interp.run(at_loop, inputs)
    for _ in range(3):  # a race shows up as a result that differs from run to run
        outputs = program(*[torch.from_numpy(x).cuda() for x in inputs])
        torch.cuda.synchronize()
        for want, got in zip(expected, outputs, strict=True):
            np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-5,
                                       atol=scale(want) * 1e-5)
