// RUN: llm-opt %S/Inputs/wgmma-k512.mlir -p 'wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,warp-specialize{tensor_copies=true},canonicalize,cse' | filecheck %s
// RUN: llm-opt %S/Inputs/wgmma-k512.mlir -p 'wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,warp-specialize{tensor_copies=true},canonicalize,cse,kernel-to-cuda{arch=sm_90a}' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %S/Inputs/wgmma-k512.mlir -p 'wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,warp-specialize{tensor_copies=true},canonicalize,cse,kernel-to-cuda{arch=sm_90a}' -t cuda | filecheck %s --check-prefix=CUDA
// RUN: llm-opt %s -p 'lower-to-cuda{arch=sm_90a warp_specialize=true tensor_copies=true}' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'lower-to-cuda{arch=sm_90a warp_specialize=true tensor_copies=true}' --print-ir-after warp-specialize 2>&1 >/dev/null | filecheck %s --check-prefix=RAGGED
// The product of warp-specialize.mlir (a 128 × 128 × 512 bf16 product, eight K chunks of 64
// through three slots) with tensor_copies: every stage fill is a box of a kernel argument,
// so the slots' full barriers expect one arrival, and in each producer step the producer's
// first thread (thread id 128) announces the step's 16384 bytes (two 64 × 64 bf16 tiles)
// and issues one tma.load a tile, whose corners are the rows of the block's tile and the
// chunk's 64 columns. No cp.async copy is left. The consumers are as before. The
// interpreters give the bits of the input (the bulk copies land when a consumer's wait sees
// their bytes complete), and the CUDA source takes one tensor map a box shape and source
// (const __grid_constant__ parameters, made on the host), fences the barriers'
// initialisation for the copy engine and announces the bytes with expect_tx.
//
// The second input (below) has 100 rows, which no 64-row tile divides: the copies of x
// clamp their row to 99, and the box of x drops the clamp (the bulk copy reads zeros past
// the last row, and only rows the epilogue never stores read them).

// CHECK:      kernel.func @elementwise_5({{.*}}) block [256, 1, 1] {
// CHECK:        %bars = kernel.shared : memref<2x3xi64>
// CHECK-COUNT-3: mbarrier.init %bars[{{.*}}] count 1 : memref<2x3xi64>
// CHECK-COUNT-3: mbarrier.init %bars[{{.*}}] count 128 : memref<2x3xi64>
// CHECK-NOT:    kernel.async_copy
// CHECK:        scf.for %it =
// CHECK:          } else {
// CHECK:            mbarrier.wait %bars[%{{.*}}, %[[SLOT:.*]]] parity
// CHECK:            %[[FIRST:.*]] = arith.cmpi eq, %{{.*}}, %{{.*}} : index
// CHECK:            scf.if %[[FIRST]] {
// CHECK-NEXT:         mbarrier.expect_bytes %bars[%[[FULL:.*]], %[[SLOT]]] bytes 16384 : memref<2x3xi64>
// CHECK:              tma.load %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] to %stage[%[[SLOT]]] on %bars[%[[FULL]], %[[SLOT]]] : memref<1x128x512xbf16> to memref<3x64x64xbf16>, memref<2x3xi64>
// CHECK:              tma.load %{{.*}}[%{{.*}}, %{{.*}}] to %stage_1[%[[SLOT]]] on %bars[%[[FULL]], %[[SLOT]]] : memref<128x512xbf16> to memref<3x64x64xbf16>, memref<2x3xi64>
// CHECK-NOT:        kernel.async_copy
// CHECK:        } {llmopt.role = "ws_loop"}

// NUM:        warp-specialize {{.*}} ok
// NUM:        cse {{.*}} ok

// CUDA:       struct __align__(64) llmopt_tensor_map { unsigned long long bits[16]; };
// CUDA:       const __grid_constant__ llmopt_tensor_map tmap0,
// CUDA-NEXT:  const __grid_constant__ llmopt_tensor_map tmap1) {
// CUDA:       fence.mbarrier_init.release.cluster;
// CUDA:       mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;{{.*}}"r"(16384)
// CUDA:       cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes {{.*}}&tmap0
// CUDA:       cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes {{.*}}&tmap1
// CUDA-NOT:   __pipeline_memcpy_async

// RAGGED:       tma.load %{{.*}} : memref<1x100x256xbf16> to
// RAGGED-NOT:   arith.minsi
// RAGGED:       } {llmopt.role = "ws_loop"}

func.func @forward(%proj.weight: tensor<128x256xbf16> {llmopt.param = "proj.weight"},
                   %x: tensor<1x100x256xbf16> {llmopt.input = "x"},
                   %r: tensor<1x100x128xbf16> {llmopt.input = "r"}) -> tensor<1x100x128xbf16> {
  %0 = torch.linear %x, %proj.weight : tensor<1x100x256xbf16>, tensor<128x256xbf16> -> tensor<1x100x128xbf16>
  %1 = torch.add %0, %r : tensor<1x100x128xbf16>, tensor<1x100x128xbf16> -> tensor<1x100x128xbf16>
  func.return %1 : tensor<1x100x128xbf16>
}
