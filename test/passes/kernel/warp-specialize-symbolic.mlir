// RUN: llm-opt %s -p 'lower-to-cuda{arch=sm_90a warp_specialize=true}' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'lower-to-cuda{arch=sm_90a}' --print-ir-after tile-to-kernel 2>&1 >/dev/null | llm-opt -p warp-specialize | filecheck %s
// RUN: llm-opt %s -p 'lower-to-cuda{arch=sm_90a warp_specialize=true}' -t cuda | filecheck %s --check-prefix=CUDA
// A bf16 projection with a residual over a symbolic number of rows (up to 200), K = 256,
// N = 128: K chunks of 64 for warpgroup products on sm_90a, rows no tile divides.
// The product kernel over the runtime rows (64 × 128 warpgroup tiles, split in two along K) gets its
// producer warpgroup as a static one does (warp-specialize.mlir); the clamped copies of the
// ragged last rows move to the producer unchanged. Checked at two random lengths.

func.func @forward(%proj.weight: tensor<128x256xbf16> {llmopt.param = "proj.weight"},
                   %x: tensor<1x?x256xbf16> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                   %r: tensor<1x?x128xbf16> {llmopt.input = "r", llmopt.dynamic = ["seq"]},
                   %seq: index {llmopt.symbol = "seq", llmopt.max = 200}) -> tensor<1x?x128xbf16> {
  %0 = torch.linear %x, %proj.weight : tensor<1x?x256xbf16>, tensor<128x256xbf16> -> tensor<1x?x128xbf16>
  %1 = torch.add %0, %r : tensor<1x?x128xbf16>, tensor<1x?x128xbf16> -> tensor<1x?x128xbf16>
  func.return %1 : tensor<1x?x128xbf16>
}

// CHECK:      kernel.func @elementwise_6_split({{.*}}) block [256, 1, 1] {
// CHECK:        %bars = kernel.shared : memref<2x3xi64>
// CHECK:        scf.for %it =
// CHECK:          mbarrier.wait
// CHECK:          wgmma.mma
// CHECK:          mbarrier.arrive %bars
// CHECK:          kernel.async_copy
// CHECK:          mbarrier.arrive_copies %bars
// CHECK:        } {llmopt.role = "ws_loop"}

// NUM:        warp-specialize {{.*}} ok
// NUM:        kernel-to-cuda

// CUDA:       mbarrier.init.shared::cta.b64
// CUDA:       cp.async.mbarrier.arrive.noinc.shared::cta.b64
