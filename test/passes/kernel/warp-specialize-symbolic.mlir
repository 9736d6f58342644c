// RUN: llm-opt %s -p 'lower-to-cuda{arch=sm_90a warp_specialize=true}' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'lower-to-cuda{arch=sm_90a warp_specialize=true}' --check-numerics --check-numerics-at 1,64,65,200 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'lower-to-cuda{arch=sm_90a}' --print-ir-after tile-to-kernel 2>&1 >/dev/null | llm-opt -p warp-specialize | filecheck %s
// RUN: llm-opt %s -p 'lower-to-cuda{arch=sm_90a}' --print-ir-after tile-to-kernel 2>&1 >/dev/null | llm-opt -p 'warp-specialize{tensor_copies=true}' | filecheck %s --check-prefix=BOX
// RUN: llm-opt %s -p 'lower-to-cuda{arch=sm_90a warp_specialize=true}' -t cuda | filecheck %s --check-prefix=CUDA
// A bf16 projection with a residual over a symbolic number of rows (up to 200), K = 256,
// N = 128: K chunks of 64 for warpgroup products on sm_90a, rows no tile divides.
// The product kernel over the runtime rows (64 × 128 warpgroup tiles) gets its producer
// warpgroup as a static one does (warp-specialize.mlir). With cp.async copies the clamped
// copies of the ragged last rows move to the producer unchanged. With tensor copies (BOX,
// and lower-to-cuda's default) the clamp to the runtime length (`minsi(row, seq - 1)`) is
// dropped as a static clamp is: each producer step is one bulk copy of x's rows and one of
// the weight's, and the copy engine reads zeros past the `seq` rows of the map the host
// encodes from the buffer passed. Checked at two random lengths and at 1, 64, 65 and 200
// rows (one row; a tile exactly; one row past it; the bound).

func.func @forward(%proj.weight: tensor<128x256xbf16> {llmopt.param = "proj.weight"},
                   %x: tensor<1x?x256xbf16> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                   %r: tensor<1x?x128xbf16> {llmopt.input = "r", llmopt.dynamic = ["seq"]},
                   %seq: index {llmopt.symbol = "seq", llmopt.max = 200}) -> tensor<1x?x128xbf16> {
  %0 = torch.linear %x, %proj.weight : tensor<1x?x256xbf16>, tensor<128x256xbf16> -> tensor<1x?x128xbf16>
  %1 = torch.add %0, %r : tensor<1x?x128xbf16>, tensor<1x?x128xbf16> -> tensor<1x?x128xbf16>
  func.return %1 : tensor<1x?x128xbf16>
}

// CHECK:      kernel.func @elementwise_6({{.*}}) block [256, 1, 1] {
// CHECK:        %bars = kernel.shared : memref<2x3xi64>
// CHECK:        scf.for %it =
// CHECK:          mbarrier.wait
// CHECK:          wgmma.mma
// CHECK:          mbarrier.arrive %bars
// CHECK:          arith.minsi
// CHECK:          kernel.async_copy
// CHECK:          mbarrier.arrive_copies %bars
// CHECK:        } {llmopt.role = "ws_loop"}

// BOX:        kernel.func @elementwise_6({{.*}}) block [256, 1, 1] {
// BOX:          %bars = kernel.shared : memref<2x3xi64>
// BOX:          mbarrier.expect_bytes %bars[{{.*}}] bytes 24576
// BOX-NOT:      arith.minsi
// BOX:          tma.load %{{.*}} to %stage[%{{.*}}] on %bars[{{.*}}] : memref<1x?x256xbf16> to memref<3x64x64xbf16>
// BOX:          tma.load %{{.*}} to %stage_1[%{{.*}}] on %bars[{{.*}}] : memref<128x256xbf16> to memref<3x128x64xbf16>
// BOX:        } {llmopt.role = "ws_loop"}
// BOX-NOT:    kernel.async_copy

// NUM:        warp-specialize {{.*}} ok
// NUM:        kernel-to-cuda

// CUDA:       const __grid_constant__ llmopt_tensor_map tmap0,
// CUDA:       mbarrier.init.shared::cta.b64
// CUDA:       fence.mbarrier_init.release.cluster
// CUDA:       mbarrier.arrive.expect_tx.shared::cta.b64
// CUDA:       cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// CUDA-NOT:   cp.async.mbarrier.arrive.noinc
