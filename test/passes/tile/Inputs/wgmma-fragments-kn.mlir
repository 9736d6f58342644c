// A bf16 x·W with W stored [K, N] (M = N = K = 128) after loop-to-tile, register-tile{bm=64
// bn=64 tm=2 tn=16 blocked=3}, stage-inputs, async-copy and prefetch-stages (sm_90a): the W
// tile is [64, 64], k in its rows (wgmma-fragments-n-major.mlir).
builtin.module {
  func.func @forward(%weight: memref<128x128xbf16> {llmopt.param = "weight"}, %x: memref<1x128x128xbf16> {llmopt.input = "x"}) -> memref<1x128x128xbf16> {
    %0 = memref.alloc() : memref<1x128x128xbf16>
    tile.kernel @elementwise_5 grid [4, 1, 1] block [128, 1, 1] (%1 = %0 : memref<1x128x128xbf16>, %2 = %weight : memref<128x128xbf16>, %3 = %x : memref<1x128x128xbf16>) {
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
            tile.async_copy %2[((%p * 64) + %c0_1), ((%c1_1 * 8) + (%bn * 64))] to %stage_1[%p, %c0_1, (%c1_1 * 8)] count 8 : memref<128x128xbf16> to memref<3x64x64xbf16>
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
            tile.async_copy %2[((%fetch * 64) + %c0_3), ((%c1_3 * 8) + (%bn * 64))] to %stage_1[%fill_slot, %c0_3, (%c1_3 * 8)] count 8 : memref<128x128xbf16> to memref<3x64x64xbf16>
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
                      %23 = loop.load %stage_1[%slot, %kk, ((((%wj_1 * 64) + (%t_1 * 2)) + (%j_1 * 8)) + %rl_1)] : memref<3x64x64xbf16>
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
    } {llmopt.schedule = {bk = 64 : i64}}
    func.return %0 : memref<1x128x128xbf16>
  }
}
