"""Clusters of ``warp-specialize`` (``cluster``, the knob ``multicast``): which products run
in them, and what the verifier and the interpreter refuse of the ops they use. The bits of a
clustered kernel are checked by ``warp-specialize-cluster.mlir`` (``--check-numerics``) and
on the GPU by ``test/gpu/test_warp_specialize_gpu.py``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from xdsl.utils.exceptions import PassFailedException, VerifyException

import llmopt
from llmopt import api, registry
from llmopt.dialects import kernel
from llmopt.interp import InterpretError, random_inputs, run

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from sweep_gemm import Linear  # noqa: E402  (x @ W^T + r, as the product benchmark)

LOWER = "lower-to-cuda{arch=sm_90a roles=2}"


def _cuda(m: int, n: int, k: int, pipeline: str) -> str:
    """The CUDA source of a bf16 ``m × n × k`` product with a residual."""
    block = Linear(k, n).to(torch.bfloat16)
    x = torch.randn(1, m, k).to(torch.bfloat16)
    r = torch.randn(1, m, n).to(torch.bfloat16)
    return api.cuda_source(api.capture(block, (x, r)), pipeline)


def test_a_wide_product_of_two_row_bands_runs_in_clusters_by_default() -> None:
    """256 rows (two row bands of 128) and 12288 columns (64 column blocks of 192): the
    schedule asks for clusters of two, and the weight's copy is a multicast."""
    source = _cuda(256, 12288, 512, LOWER)
    assert "__cluster_dims__(2, 1, 1)" in source
    assert source.count(".multicast::cluster") == 1


@pytest.mark.parametrize(("m", "n", "pipeline"), [
    (256, 2048, LOWER),  # 16 column blocks: too narrow for the default rule
    (256, 12288, "lower-to-cuda{arch=sm_90a roles=2 cluster=1}"),  # turned off
])
def test_other_products_run_without_clusters(m: int, n: int, pipeline: str) -> None:
    source = _cuda(m, n, 512, pipeline)
    assert "__cluster_dims__" not in source and "multicast" not in source
    assert "mbarrier.arrive.shared::cta" in source  # specialised all the same


def test_tiles_whose_neighbours_share_no_box_run_without_clusters() -> None:
    """Three row bands (192 rows of 64): tiles 2c and 2c+1 are in different column bands or
    row bands, so no box is the same for both, even with ``cluster=2`` asked for."""
    source = _cuda(192, 512, 256, "lower-to-cuda{arch=sm_90a warp_specialize=true cluster=2}")
    assert "__cluster_dims__" not in source


KERNEL = """
builtin.module {
  kernel.func @k(%x: memref<256xCOLSxbf16>) block [128, 1, 1] cluster CLUSTER {
    %stage = kernel.shared : memref<2xROWSxCOLSxbf16>
    %bars = kernel.shared : memref<2xi64>
    %c0 = arith.constant 0 : index
    tma.load %x[%c0, %c0] to %stage[%c0] on %bars[%c0] multicast MULTI
        : memref<256xCOLSxbf16> to memref<2xROWSxCOLSxbf16>, memref<2xi64>
    kernel.return
  }
}
"""


@pytest.mark.parametrize(("rows", "cols", "n", "cluster", "why"), [
    (128, 64, 3, 3, "does not split into 3 parts"),
    (2, 32, 2, 2, "parts of 64 bytes; each must start at a multiple of 128 bytes"),
    (128, 64, 16, 2, r"multicast to 16 blocks \(2 to 8\)"),
    (128, 64, 2, 4, "multicast to 2 blocks in a kernel of clusters of 4"),
])
def test_the_verifier_refuses_multicast_parts_that_are_not_whole_aligned_rows(
        rows: int, cols: int, n: int, cluster: int, why: str) -> None:
    with pytest.raises(VerifyException, match=why):
        llmopt.parse(_kernel(rows, cols, n, cluster)).verify()


def test_the_verifier_accepts_whole_aligned_parts() -> None:
    llmopt.parse(_kernel(8, 64, 2, 2)).verify()


def _kernel(rows: int, cols: int, n: int, cluster: int) -> str:
    """``KERNEL`` with its tile, multicast and cluster."""
    return (KERNEL.replace("ROWS", str(rows)).replace("COLS", str(cols))
            .replace("MULTI", str(n)).replace("CLUSTER", str(cluster)))


ARRIVE = """
builtin.module {
  func.func @f(%x: memref<4xf32>) {
    kernel.launch @k grid [2, 1, 1] block [32, 1, 1] smem 0 (%x) : memref<4xf32>
    func.return
  }
  kernel.func @k(%x: memref<4xf32>) block [32, 1, 1] cluster 2 {
    %bars = kernel.shared : memref<1xi64>
    %c0 = arith.constant 0 : index
    %c2 = arith.constant 2 : index
    %tid = kernel.thread_id x
    %first = arith.cmpi eq, %tid, %c0 : index
    scf.if %first {
      mbarrier.init %bars[%c0] count 1 : memref<1xi64>
      mbarrier.arrive_cluster %bars[%c0] cta %c2 : memref<1xi64>
    }
    kernel.return
  }
}
"""


def test_the_interpreter_refuses_an_arrival_outside_the_cluster() -> None:
    module = llmopt.parse(ARRIVE)
    fn = next(op for op in module.walk() if op.name == "func.func")
    with pytest.raises(InterpretError, match=re.escape("arrives at block 2 of a cluster of 2")):
        run(module, random_inputs(fn, 0))


PRODUCT = """
func.func @forward(%proj.weight: tensor<512x256xbf16> {llmopt.param = "proj.weight"},
                   %x: tensor<1x200x256xbf16> {llmopt.input = "x"},
                   %r: tensor<1x200x512xbf16> {llmopt.input = "r"}) -> tensor<1x200x512xbf16> {
  %0 = torch.linear %x, %proj.weight : tensor<1x200x256xbf16>, tensor<512x256xbf16>
      -> tensor<1x200x512xbf16>
  %1 = torch.add %0, %r : tensor<1x200x512xbf16>, tensor<1x200x512xbf16> -> tensor<1x200x512xbf16>
  func.return %1 : tensor<1x200x512xbf16>
}
"""


def _lowered(pipeline: str) -> tuple[object, list[list[int]]]:
    """``PRODUCT`` lowered by ``pipeline`` (to Kernel IR) and its launches' grids."""
    module = llmopt.parse(PRODUCT)
    llmopt.lower(module, pipeline)
    return module, [list(op.grid_shape) for op in module.walk()
                    if isinstance(op, kernel.LaunchOp)]


@pytest.mark.parametrize("cluster", [1, 2])
def test_blocks_that_take_several_tiles_keep_the_bits(cluster: int) -> None:
    """Sixteen tiles on four blocks (``max_blocks=4``, as a persistent grid on a GPU of four
    multiprocessors): each block runs four tiles, its producer running on into the next
    tile's slots, in clusters of two or not; the interpreter gives the bits of the kernel
    with a block a tile."""
    base = f"lower-to-cuda{{arch=sm_90a cluster={cluster} roles=2}}"
    kernel_ir = ",kernel-to-cuda{arch=sm_90a}"
    few = registry.with_options(base, "warp-specialize{max_blocks=4}").replace(kernel_ir, "")
    many = registry.with_options(base, "warp-specialize{persistent=false}").replace(
        kernel_ir, "")
    (one_each, grids), (shared, fewer) = _lowered(many), _lowered(few)
    assert [16, 1, 1] in grids and [4, 1, 1] in fewer
    assert ("cluster 2 {" in str(shared)) == (cluster == 2)
    fn = next(op for op in llmopt.parse(PRODUCT).walk() if op.name == "func.func")
    inputs = random_inputs(fn, 1)
    (want,) = run(one_each, inputs)
    (got,) = run(shared, inputs)
    np.testing.assert_array_equal(got, want)


def test_three_computing_warpgroups_keep_the_bits() -> None:
    """A 192 × 192 tile (three computing warpgroups, ``register-tile`` knobs) beside its
    producer: 512 threads, whose consumers get the 152 registers that fit
    (``consumer_share``), six tiles on two blocks; the interpreter gives the bits of the
    default tiles."""
    base = "lower-to-cuda{arch=sm_90a cluster=1 roles=2}"
    kernel_ir = ",kernel-to-cuda{arch=sm_90a}"
    wide = registry.with_options(base, "register-tile{bm=192 bn=192 tm=2 tn=48 blocked=3}",
                                 "warp-specialize{max_blocks=2}").replace(kernel_ir, "")
    plain = registry.expand_pipeline(base).replace(kernel_ir, "")
    (three, grids), (default, _) = _lowered(wide), _lowered(plain)
    assert grids == [[2, 1, 1]]
    assert "block [512, 1, 1]" in str(three) and "inc 152" in str(three)
    fn = next(op for op in llmopt.parse(PRODUCT).walk() if op.name == "func.func")
    inputs = random_inputs(fn, 1)
    (want,) = run(default, inputs)
    (got,) = run(three, inputs)
    np.testing.assert_array_equal(got, want)


def test_kernel_to_cuda_refuses_a_grid_that_clusters_do_not_make_up() -> None:
    """A launch of three blocks of a kernel in clusters of two: the driver would refuse it,
    so ``kernel-to-cuda`` says so."""
    module = llmopt.parse(ARRIVE.replace("grid [2, 1, 1]", "grid [3, 1, 1]"))
    with pytest.raises(PassFailedException, match=re.escape(
            "kernel 'k' runs in clusters of 2 blocks along x, but a launch has grid [3, 1, 1]")):
        llmopt.lower(module, "kernel-to-cuda{arch=sm_90a}")
