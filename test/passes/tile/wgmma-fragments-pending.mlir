// RUN: llm-opt %s -p 'async-copy{arch=sm_90a stages=4 lag=1},prefetch-stages,wgmma-fragments{arch=sm_90a pending=1}' | filecheck %s
// RUN: llm-opt %s -p 'async-copy{arch=sm_90a stages=4},prefetch-stages,wgmma-fragments{arch=sm_90a pending=1}' | filecheck %s --check-prefix=NOLAG
// RUN: llm-opt %s -p 'async-copy{arch=sm_90a stages=4 lag=1},prefetch-stages,wgmma-fragments{arch=sm_90a pending=1},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda{arch=sm_90a}' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'async-copy{arch=sm_90a stages=4 lag=1},prefetch-stages,wgmma-fragments{arch=sm_90a pending=1},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda{arch=sm_90a}' -t cuda | filecheck %s --check-prefix=CUDA
// A bf16 x·Wᵀ (M = N = 128, K = 512) after register-tile{bm=64 bn=128 tm=2 tn=32
// blocked=3}, split-k{split_k=1} and stage-inputs{bk=64}: eight chunks of 64, one warpgroup
// a block. With async-copy{lag=1} the K loop keeps one slot for the products still in
// flight: of four slots it fetches two chunks ahead (prologue of two, async_wait 1) and is
// marked llmopt.lag = 1; wgmma-fragments{pending=1} then leaves the newest group in flight
// at each chunk's wait and waits for it after the loop, before the epilogue reads the
// accumulators. The interpreters check the schedule under --check-numerics: each group's
// tiles count as read until the wait that retires it, so a refill one barrier after a
// product in flight reads its slot would be a race (test/interp/test_wgmma.py). Without
// the lag the wait stays 0.

// CHECK:      scf.for %p = %{{.*}} to %[[TWO:.*]] step
// CHECK:      } {unroll = 0 : i64, llmopt.role = "prologue"}
// CHECK-NEXT: scf.for %k0 = {{.*}} iter_args(%slot = %{{.*}}, %fill_slot = %{{.*}}, %fetch = %{{.*}})
// CHECK-NEXT:   tile.async_wait 1
// CHECK-NEXT:   kernel.barrier
// CHECK:        wgmma.commit
// CHECK-NEXT:   %{{.*}} = wgmma.wait 1 (
// CHECK:      } {llmopt.role = "k_loop", llmopt.prefetch = "async4", llmopt.lag = 1 : i64}
// CHECK-NEXT: tile.forall (%wi_2, %wj_2, %g_2, %t_2) in [4, 1, 8, 4] over block_threads {
// CHECK-COUNT-64: loop.load %acc
// CHECK-NEXT:   = wgmma.wait 0 (
// CHECK-COUNT-64: loop.store
// CHECK-NEXT: } {llmopt.role = "wgmma_wait", llmopt.layout = "mma"}
// CHECK-NEXT: tile.async_wait 0
// CHECK-NEXT: tile.forall (%wi_{{.*}}) in [4, 1, 8, 4] over block_threads {
// CHECK:      } {llmopt.role = "epilogue", llmopt.layout = "mma"}

// NOLAG:     tile.async_wait 2
// NOLAG-NOT: llmopt.lag
// NOLAG:     wgmma.wait 0 (
// NOLAG-NOT: wgmma.wait

// NUM: wgmma-fragments {{.*}} ok
// NUM: tile-to-kernel {{.*}} ok

// CUDA:      for (long long k0 = 0; k0 < 8; k0 += 1) {
// CUDA-NEXT:   __pipeline_wait_prior(1);
// CUDA-NEXT:   __syncthreads();
// CUDA:        wgmma.wait_group.sync.aligned 1;
// CUDA:      }
// CUDA-NEXT: float wgd0 = acc[0];
// CUDA:      wgmma.wait_group.sync.aligned 0;
// CUDA-NOT:  wgmma.mma_async
// CUDA:      __pipeline_wait_prior(0);

builtin.module {
  func.func @forward(%weight: memref<128x512xbf16> {llmopt.param = "weight"}, %input: memref<1x128x512xbf16> {llmopt.input = "input"}) -> memref<1x128x128xbf16> {
    %0 = memref.alloc() : memref<1x128x128xbf16>
    tile.kernel @elementwise_5 grid [2, 1, 1] block [128, 1, 1] (%1 = %0 : memref<1x128x128xbf16>, %2 = %weight : memref<128x512xbf16>, %3 = %input : memref<1x128x512xbf16>) {
      tile.forall (%b0, %bn, %bm) in [1, 1, 2] over blocks {
        %acc = tile.alloc registers : memref<4x1x8x4x1x2x16x2xf32>
        tile.forall (%wi, %wj, %g, %t) in [4, 1, 8, 4] over block_threads {
          loop.for %i = 0 to 1 {
            loop.for %rh = 0 to 2 {
              loop.for %j = 0 to 16 {
                loop.for %rl = 0 to 2 {
                  %4 = arith.constant 0.000000e+00 : f32
                  loop.store %4, %acc[%wi, %wj, %g, %t, %i, %rh, %j, %rl] : memref<4x1x8x4x1x2x16x2xf32>
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "init", llmopt.layout = "mma"}
        %5 = arith.constant 0 : index
        %6 = arith.constant 512 : index
        %7 = arith.constant 1 : index
        %stage = tile.alloc shared : memref<64x64xbf16>
        %stage_1 = tile.alloc shared : memref<128x64xbf16>
        %8 = arith.constant 0 : index
        %9 = arith.constant 8 : index
        %10 = arith.constant 1 : index
        %11 = arith.constant 64 : index
        scf.for %k0 = %8 to %9 step %10 {
          tile.forall (%s0, %s1) in [64, 64] over block_threads {
            %12 = loop.load %3[0, ((%bm * 64) + %s0), ((%k0 * 64) + %s1)] : memref<1x128x512xbf16>
            loop.store %12, %stage[%s0, %s1] : memref<64x64xbf16>
          } {llmopt.role = "stage"}
          tile.forall (%s0_1, %s1_1) in [128, 64] over block_threads {
            %13 = loop.load %2[((%bn * 128) + %s0_1), ((%k0 * 64) + %s1_1)] : memref<128x512xbf16>
            loop.store %13, %stage_1[%s0_1, %s1_1] : memref<128x64xbf16>
          } {llmopt.role = "stage"}
          scf.for %kk = %8 to %11 step %10 {
            %14 = arith.muli %k0, %11 : index
            %k = arith.addi %14, %kk : index
            tile.forall (%wi_1, %wj_1, %g_1, %t_1) in [4, 1, 8, 4] over block_threads {
              loop.for %i_1 = 0 to 1 {
                loop.for %rh_1 = 0 to 2 {
                  loop.for %j_1 = 0 to 16 {
                    loop.for %rl_1 = 0 to 2 {
                      %15 = loop.load %stage[((((%wi_1 * 16) + %g_1) + (%i_1 * 16)) + (%rh_1 * 8)), %kk] : memref<64x64xbf16>
                      %16 = loop.load %stage_1[((((%wj_1 * 128) + (%t_1 * 2)) + (%j_1 * 8)) + %rl_1), %kk] : memref<128x64xbf16>
                      %17 = arith.extf %15 : bf16 to f32
                      %18 = arith.extf %16 : bf16 to f32
                      %19 = arith.mulf %17, %18 : f32
                      %20 = loop.load %acc[%wi_1, %wj_1, %g_1, %t_1, %i_1, %rh_1, %j_1, %rl_1] : memref<4x1x8x4x1x2x16x2xf32>
                      %21 = arith.addf %20, %19 : f32
                      loop.store %21, %acc[%wi_1, %wj_1, %g_1, %t_1, %i_1, %rh_1, %j_1, %rl_1] : memref<4x1x8x4x1x2x16x2xf32>
                    } {unroll = 0 : i64}
                  } {unroll = 0 : i64}
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {llmopt.role = "update", llmopt.layout = "mma"}
          } {unroll = 0 : i64}
        } {llmopt.role = "k_loop"}
        tile.forall (%wi_2, %wj_2, %g_2, %t_2) in [4, 1, 8, 4] over block_threads {
          loop.for %i_2 = 0 to 1 {
            loop.for %rh_2 = 0 to 2 {
              loop.for %j_2 = 0 to 16 {
                loop.for %rl_2 = 0 to 2 {
                  %sum = loop.load %acc[%wi_2, %wj_2, %g_2, %t_2, %i_2, %rh_2, %j_2, %rl_2] : memref<4x1x8x4x1x2x16x2xf32>
                  %22 = arith.truncf %sum : f32 to bf16
                  loop.store %22, %1[0, (((((%bm * 64) + (%wi_2 * 16)) + %g_2) + (%i_2 * 16)) + (%rh_2 * 8)), (((((%bn * 128) + (%wj_2 * 128)) + (%t_2 * 2)) + (%j_2 * 8)) + %rl_2)] : memref<1x128x128xbf16>
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "epilogue", llmopt.layout = "mma"}
      }
    } {llmopt.schedule = {bk = 64 : i64}}
    func.return %0 : memref<1x128x128xbf16>
  }
}
