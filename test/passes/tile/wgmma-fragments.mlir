// RUN: llm-opt %s -p 'wgmma-fragments{arch=sm_90a}' | filecheck %s
// RUN: llm-opt %s -p wgmma-fragments | filecheck %s --check-prefix=SM90
// RUN: llm-opt %s -p 'wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda{arch=sm_90a}' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda{arch=sm_90a}' -t cuda | filecheck %s --check-prefix=CUDA
// RUN: llm-opt %S/mma-fragments-halves.mlir -p 'wgmma-fragments{arch=sm_90a}' | filecheck %s --check-prefix=OTHER
// RUN: llm-opt %S/Inputs/gate-up-bf16.mlir -p 'lower-to-cuda{arch=sm_90a}' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %S/Inputs/gate-up-bf16.mlir -p 'lower-to-cuda{arch=sm_90a}' -t cuda | filecheck %s --check-prefix=GATEUP
// A bf16 x·Wᵀ (M = N = K = 128) after register-tile{bm=64 bn=64 tm=2 tn=16 blocked=3},
// stage-inputs{bk=64}, async-copy and prefetch-stages (three slots): four warps of 16 rows
// each and every one of the 64 columns, so the block's 128 threads hold one warpgroup's
// m64n64 accumulator; tile rows of 64 bf16, 128 bytes. On sm_90a the chunk loop becomes
// the forall with four chained wgmma.mma (k = 0, 16, 32, 48) between a fence, a commit and
// a wait, and both tiles are swizzled (pad-shared then leaves them unpadded). sm_90 and a
// layout that is no warpgroup's (mma-fragments-halves.mlir: two warp columns) are left
// alone.

builtin.module {
  func.func @forward(%proj.weight: memref<128x128xbf16> {llmopt.param = "proj.weight"}, %x: memref<1x128x128xbf16> {llmopt.input = "x"}) -> memref<1x128x128xbf16> {
    %0 = memref.alloc() : memref<1x128x128xbf16>
    tile.kernel @elementwise_5 grid [4, 1, 1] block [128, 1, 1] (%1 = %0 : memref<1x128x128xbf16>, %2 = %proj.weight : memref<128x128xbf16>, %3 = %x : memref<1x128x128xbf16>) {
      tile.forall (%b0, %bn, %bm) in [1, 2, 2] over blocks {
        %acc = tile.alloc registers : memref<4x1x8x4x1x2x8x2xf32>
        tile.forall (%wi, %wj, %g, %t) in [4, 1, 8, 4] over block_threads {
          loop.for %i = 0 to 1 {
            loop.for %rh = 0 to 2 {
              loop.for %j = 0 to 8 {
                loop.for %rl = 0 to 2 {
                  %4 = arith.constant 0.000000e+00 : f32
                  loop.store %4, %acc[%wi, %wj, %g, %t, %i, %rh, %j, %rl] : memref<4x1x8x4x1x2x8x2xf32>
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "init", llmopt.layout = "mma"}
        %5 = arith.constant 0 : index
        %6 = arith.constant 128 : index
        %7 = arith.constant 1 : index
        %stage = tile.alloc shared {llmopt.pad = 8 : i64} : memref<3x64x64xbf16>
        %stage_1 = tile.alloc shared {llmopt.pad = 8 : i64} : memref<3x64x64xbf16>
        %8 = arith.constant 0 : index
        %9 = arith.constant 2 : index
        %10 = arith.constant 1 : index
        %11 = arith.constant 64 : index
        %12 = arith.constant 0 : index
        %13 = arith.constant 2 : index
        %14 = arith.constant 0 : index
        %15 = arith.constant 0 : index
        %16 = arith.constant 1 : index
        %17 = arith.constant 2 : index
        kernel.barrier
        scf.for %p = %15 to %17 step %16 {
          tile.forall (%c0, %c1) in [64, 8] over block_threads {
            tile.async_copy %3[0, (%c0 + (%bm * 64)), ((%p * 64) + (%c1 * 8))] to %stage[%p, %c0, (%c1 * 8)] count 8 : memref<1x128x128xbf16> to memref<3x64x64xbf16>
          } {llmopt.role = "stage"}
          tile.forall (%c0_1, %c1_1) in [64, 8] over block_threads {
            tile.async_copy %2[(%c0_1 + (%bn * 64)), ((%p * 64) + (%c1_1 * 8))] to %stage_1[%p, %c0_1, (%c1_1 * 8)] count 8 : memref<128x128xbf16> to memref<3x64x64xbf16>
          } {llmopt.role = "stage"}
          tile.async_commit
        } {unroll = 0 : i64, llmopt.role = "prologue"}
        %18, %19, %20 = scf.for %k0 = %8 to %9 step %10 iter_args(%slot = %12, %fill_slot = %13, %fetch = %14) -> (index, index, index) {
          tile.async_wait 1
          kernel.barrier
          tile.forall (%c0_2, %c1_2) in [64, 8] over block_threads {
            tile.async_copy %3[0, (%c0_2 + (%bm * 64)), ((%fetch * 64) + (%c1_2 * 8))] to %stage[%fill_slot, %c0_2, (%c1_2 * 8)] count 8 : memref<1x128x128xbf16> to memref<3x64x64xbf16>
          } {llmopt.role = "stage"}
          tile.forall (%c0_3, %c1_3) in [64, 8] over block_threads {
            tile.async_copy %2[(%c0_3 + (%bn * 64)), ((%fetch * 64) + (%c1_3 * 8))] to %stage_1[%fill_slot, %c0_3, (%c1_3 * 8)] count 8 : memref<128x128xbf16> to memref<3x64x64xbf16>
          } {llmopt.role = "stage"}
          tile.async_commit
          scf.for %kk = %8 to %11 step %10 {
            %21 = arith.muli %k0, %11 : index
            %k = arith.addi %21, %kk : index
            tile.forall (%wi_1, %wj_1, %g_1, %t_1) in [4, 1, 8, 4] over block_threads {
              loop.for %i_1 = 0 to 1 {
                loop.for %rh_1 = 0 to 2 {
                  loop.for %j_1 = 0 to 8 {
                    loop.for %rl_1 = 0 to 2 {
                      %22 = loop.load %stage[%slot, ((((%wi_1 * 16) + %g_1) + (%i_1 * 16)) + (%rh_1 * 8)), %kk] : memref<3x64x64xbf16>
                      %23 = loop.load %stage_1[%slot, ((((%wj_1 * 64) + (%t_1 * 2)) + (%j_1 * 8)) + %rl_1), %kk] : memref<3x64x64xbf16>
                      %24 = arith.extf %22 : bf16 to f32
                      %25 = arith.extf %23 : bf16 to f32
                      %26 = arith.mulf %24, %25 : f32
                      %27 = loop.load %acc[%wi_1, %wj_1, %g_1, %t_1, %i_1, %rh_1, %j_1, %rl_1] : memref<4x1x8x4x1x2x8x2xf32>
                      %28 = arith.addf %27, %26 : f32
                      loop.store %28, %acc[%wi_1, %wj_1, %g_1, %t_1, %i_1, %rh_1, %j_1, %rl_1] : memref<4x1x8x4x1x2x8x2xf32>
                    } {unroll = 0 : i64}
                  } {unroll = 0 : i64}
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {llmopt.role = "update", llmopt.layout = "mma"}
          } {unroll = 0 : i64}
          %29 = arith.constant 0 : index
          %30 = arith.constant 1 : index
          %31 = arith.constant 3 : index
          %32 = arith.addi %slot, %30 : index
          %33 = arith.cmpi slt, %32, %31 : index
          %34 = arith.select %33, %32, %29 : index
          %35 = arith.constant 3 : index
          %36 = arith.addi %fill_slot, %30 : index
          %37 = arith.cmpi slt, %36, %35 : index
          %38 = arith.select %37, %36, %29 : index
          %39 = arith.constant 2 : index
          %40 = arith.addi %fetch, %30 : index
          %41 = arith.cmpi slt, %40, %39 : index
          %42 = arith.select %41, %40, %29 : index
          scf.yield %34, %38, %42 : index, index, index
        } {llmopt.role = "k_loop", llmopt.prefetch = "async3"}
        tile.async_wait 0
        tile.forall (%wi_2, %wj_2, %g_2, %t_2) in [4, 1, 8, 4] over block_threads {
          loop.for %i_2 = 0 to 1 {
            loop.for %rh_2 = 0 to 2 {
              loop.for %j_2 = 0 to 8 {
                loop.for %rl_2 = 0 to 2 {
                  %sum = loop.load %acc[%wi_2, %wj_2, %g_2, %t_2, %i_2, %rh_2, %j_2, %rl_2] : memref<4x1x8x4x1x2x8x2xf32>
                  %43 = arith.truncf %sum : f32 to bf16
                  loop.store %43, %1[0, (((((%bm * 64) + (%wi_2 * 16)) + %g_2) + (%i_2 * 16)) + (%rh_2 * 8)), (((((%bn * 64) + (%wj_2 * 64)) + (%t_2 * 2)) + (%j_2 * 8)) + %rl_2)] : memref<1x128x128xbf16>
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "epilogue", llmopt.layout = "mma"}
      }
    }
    func.return %0 : memref<1x128x128xbf16>
  }
}


// CHECK:      %stage = tile.alloc shared {llmopt.pad = 8 : i64, llmopt.swizzle = 128 : i64} : memref<3x64x64xbf16>
// CHECK-NEXT: %stage_1 = tile.alloc shared {llmopt.pad = 8 : i64, llmopt.swizzle = 128 : i64} : memref<3x64x64xbf16>
// CHECK:      scf.for %k0
// CHECK-NOT:  scf.for %kk
// CHECK:        tile.forall (%[[WI:.*]], %[[WJ:.*]], %[[G:.*]], %[[T:.*]]) in [4, 1, 8, 4] over block_threads {
// The first warp of the thread's warpgroup, 4·(wi floordiv 4), times 16: A's first row.
// CHECK:          %[[Q:.*]] = arith.divui %[[WI]], %{{.*}} : index
// Value i of the thread: rh = (i / 2) mod 2, j = i / 4, rl = i mod 2; read before the
// fence, which the products follow.
// CHECK:          %{{.*}} = loop.load %acc[%[[WI]], %[[WJ]], %[[G]], %[[T]], 0, 0, 0, 0]
// CHECK-NEXT:     %{{.*}} = loop.load %acc[%[[WI]], %[[WJ]], %[[G]], %[[T]], 0, 0, 0, 1]
// CHECK-NEXT:     %{{.*}} = loop.load %acc[%[[WI]], %[[WJ]], %[[G]], %[[T]], 0, 1, 0, 0]
// CHECK-NEXT:     %{{.*}} = loop.load %acc[%[[WI]], %[[WJ]], %[[G]], %[[T]], 0, 1, 0, 1]
// CHECK-NEXT:     %{{.*}} = loop.load %acc[%[[WI]], %[[WJ]], %[[G]], %[[T]], 0, 0, 1, 0]
// CHECK:          wgmma.fence
// CHECK-COUNT-4:  wgmma.mma %stage[%slot, %{{.*}}, %{{.*}}], %stage_1[%slot, %{{.*}}, %{{.*}}] + ({{.*}}) : memref<3x64x64xbf16>, memref<3x64x64xbf16>
// CHECK-NEXT:     wgmma.commit
// CHECK-NEXT:     wgmma.wait 0
// CHECK-NEXT:     loop.store %{{.*}}, %acc[%[[WI]], %[[WJ]], %[[G]], %[[T]], 0, 0, 0, 0]
// CHECK:        } {llmopt.role = "update", llmopt.layout = "mma"}

// SM90:     scf.for %kk
// SM90-NOT: wgmma

// NUM: wgmma-fragments {{.*}} ok
// NUM: tile-to-kernel {{.*}} ok

// CUDA:      extern __shared__ __align__(1024) unsigned char smem[];
// CUDA:      __pipeline_wait_prior(1);
// CUDA-NEXT: __syncthreads();
// CUDA:      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
// CUDA-NEXT: asm volatile("wgmma.fence.sync.aligned;" : "+f"(wg0), {{.*}}, "+f"(wg31) :  : "memory");
// CUDA-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CUDA:      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
// CUDA:      asm volatile("wgmma.wait_group.sync.aligned 0;"

// OTHER:     scf.for %kk
// OTHER-NOT: wgmma

// The fused gate/up: both chains between one fence and one commit, eight m64n64 products.
// GATEUP:           asm volatile("wgmma.fence.sync.aligned;" : "+f"(wg0), {{.*}} :  : "memory");
// GATEUP-COUNT-8:   wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// GATEUP:           asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
