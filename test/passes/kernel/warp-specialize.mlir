// RUN: llm-opt %S/Inputs/wgmma-k512.mlir -p 'wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,warp-specialize{pending=1}' | filecheck %s
// RUN: llm-opt %S/Inputs/wgmma-k512.mlir -p 'wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,warp-specialize{pending=1},canonicalize,cse,kernel-to-cuda{arch=sm_90a}' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %S/Inputs/wgmma-k512.mlir -p 'wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,warp-specialize{pending=1},canonicalize,cse,kernel-to-cuda{arch=sm_90a}' -t cuda | filecheck %s --check-prefix=CUDA
// RUN: llm-opt %S/Inputs/wgmma-k512.mlir -p 'wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,warp-specialize{pending=0}' | filecheck %s --check-prefix=P0
// RUN: llm-opt %S/Inputs/wgmma-k512.mlir -p 'wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,warp-specialize{pending=0},canonicalize,cse' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %S/Inputs/wgmma-k512.mlir -p 'wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,warp-specialize{enabled=false}' | filecheck %s --check-prefix=OFF
// RUN: llm-opt %S/Inputs/wgmma-k512.mlir -p 'mma-fragments,vector-fragments,tile-to-kernel,warp-specialize{pending=1}' | filecheck %s --check-prefix=OFF
// A 128 × 128 × 512 bf16 product, one warpgroup a 64 × 64 tile, eight K chunks through three
// shared slots. warp-specialize adds a producer warpgroup (block 128 → 256, the launch too),
// two barriers a slot (full: 128 producer arrivals; empty: 128 consumer arrivals) set up by
// thread 0, and one loop of 8 + 2 steps with no block barrier: the consumers wait for slot
// n mod 3 of global chunk n, compute and release it; the producer waits for its release
// (parity of the use before), copies with thread ids tid − 128 and arrives when the copies
// land. The accumulators' initialisation and the epilogue become the consumers' alone, and
// no block barrier is left in the tile loop. With pending=1 a step's products stay
// in flight (wgmma.wait 1) and the step releases the previous chunk's slot; the last
// chunk's step then waits for its own products too (wgmma.wait 0 inside the loop: ptxas
// orders the epilogue's reads after a wait there, not after one that follows the loop),
// and after the loop the consumers release its slot. pending=0 waits for each chunk's
// products and releases its slot in the same step.
// Without wgmma-fragments (mma.sync products) or with enabled=false nothing changes. Over a
// symbolic number of rows: warp-specialize-symbolic.mlir.

// CHECK:      kernel.func @elementwise_5({{.*}}) block [256, 1, 1] {
// CHECK:        %bars = kernel.shared : memref<2x3xi64>
// CHECK:        scf.if
// CHECK-COUNT-3: mbarrier.init %bars[{{.*}}] count 128 : memref<2x3xi64>
// CHECK-COUNT-3: mbarrier.init %bars[{{.*}}] count 128 : memref<2x3xi64>
// CHECK:        kernel.barrier
// CHECK:        scf.for %p =
// CHECK-NOT:      kernel.barrier
// CHECK:          %[[CONSUMER:.*]] = arith.cmpi ult, %{{.*}}, %{{.*}} : index
// CHECK:          scf.if %[[CONSUMER]] {
// CHECK:            kernel.store {{.*}} %acc
// CHECK-NOT:      kernel.barrier
// CHECK:          %[[TILE:.*]] = arith.divui
// CHECK:          %[[STEPS:.*]] = arith.constant 10 : index
// CHECK:          scf.for %it = %{{.*}} to %[[STEPS]] step
// CHECK-NEXT:       scf.if %[[CONSUMER]] {
// CHECK:              mbarrier.wait %bars[%{{.*}}, %{{.*}}] parity %{{.*}} : memref<2x3xi64>
// CHECK:              wgmma.fence
// CHECK:              wgmma.wait 1
// CHECK:              scf.if
// CHECK:                mbarrier.arrive %bars[%{{.*}}, %{{.*}}] : memref<2x3xi64>
// CHECK:              %[[LAST:.*]] = arith.cmpi eq, %{{.*}}, %{{.*}} : index
// CHECK-NEXT:         scf.if %[[LAST]] {
// CHECK-COUNT-32:       kernel.load %acc
// CHECK-NEXT:           wgmma.wait 0
// CHECK-COUNT-32:       kernel.store {{.*}} %acc
// CHECK:          } else {
// CHECK:              mbarrier.wait %bars[%{{.*}}, %{{.*}}] parity %{{.*}} : memref<2x3xi64>
// CHECK:              %[[TID:.*]] = kernel.thread_id x
// CHECK:              %[[LANE:.*]] = arith.subi %[[TID]], %{{.*}} : index
// CHECK:              kernel.async_copy
// CHECK:              kernel.async_copy
// CHECK:              mbarrier.arrive_copies %bars[%{{.*}}, %{{.*}}] : memref<2x3xi64>
// CHECK:        } {llmopt.role = "ws_loop"}
// CHECK-NEXT:   scf.if %[[CONSUMER]] {
// CHECK-NOT:      wgmma.wait
// CHECK:          mbarrier.arrive %bars
// CHECK:        kernel.async_wait 0
// CHECK:        scf.if %[[CONSUMER]] {
// CHECK:          kernel.store
// CHECK:      kernel.launch @elementwise_5 grid [4, 1, 1] block [256, 1, 1]

// P0:         scf.for %it =
// P0:           wgmma.wait 0
// P0:           kernel.store
// P0:           mbarrier.arrive %bars
// P0:         } else {
// P0:         } {llmopt.role = "ws_loop"}
// P0-NEXT:    kernel.async_wait 0

// NUM:        warp-specialize {{.*}} ok
// NUM:        cse {{.*}} ok

// CUDA:       __launch_bounds__(256)
// CUDA:       mbarrier.init.shared::cta.b64
// CUDA:       for (long long it = 0; it < 10; it += 1) {
// CUDA:         mbarrier.try_wait.parity.shared::cta.b64
// CUDA:         wgmma.mma_async
// CUDA:         mbarrier.arrive.shared::cta.b64 _, [%0];
// CUDA:       } else {
// CUDA:         mbarrier.try_wait.parity.shared::cta.b64
// CUDA:         __pipeline_memcpy_async
// CUDA:         cp.async.mbarrier.arrive.noinc.shared::cta.b64

// OFF:        kernel.func @elementwise_5({{.*}}) block [128, 1, 1] {
// OFF-NOT:    mbarrier

