builtin.module {
  func.func @forward(%proj.weight: memref<64x32xf32> {llmopt.param = "proj.weight"}, %x: memref<1x64x32xf32> {llmopt.input = "x"}, %r: memref<1x64x64xf32> {llmopt.input = "r"}) -> memref<1x64x64xf32> {
    %0 = memref.alloc() : memref<1x64x64xf32>
    tile.kernel @elementwise_5 grid [4, 1, 1] block [64, 1, 1] (%1 = %r : memref<1x64x64xf32>, %2 = %0 : memref<1x64x64xf32>, %3 = %proj.weight : memref<64x32xf32>, %4 = %x : memref<1x64x32xf32>) {
      tile.forall (%b0, %bm, %bn) in [1, 2, 2] over blocks {
        %acc = tile.alloc registers : memref<1x2x8x4x2x2x2x2xf32>
        tile.forall (%wi, %wj, %g, %t) in [1, 2, 8, 4] over block_threads {
          loop.for %i = 0 to 2 {
            loop.for %rh = 0 to 2 {
              loop.for %j = 0 to 2 {
                loop.for %rl = 0 to 2 {
                  %5 = arith.constant 0.000000e+00 : f32
                  loop.store %5, %acc[%wi, %wj, %g, %t, %i, %rh, %j, %rl] : memref<1x2x8x4x2x2x2x2xf32>
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "init", llmopt.layout = "mma"}
        %6 = arith.constant 0 : index
        %7 = arith.constant 32 : index
        %8 = arith.constant 1 : index
        %stage = tile.alloc shared : memref<3x32x20xf32>
        %stage_1 = tile.alloc shared : memref<3x32x20xf32>
        %9 = arith.constant 0 : index
        %10 = arith.constant 2 : index
        %11 = arith.constant 1 : index
        %12 = arith.constant 16 : index
        %13 = arith.constant 0 : index
        %14 = arith.constant 2 : index
        %15 = arith.constant 0 : index
        %16 = arith.constant 0 : index
        %17 = arith.constant 1 : index
        %18 = arith.constant 2 : index
        kernel.barrier
        scf.for %p = %16 to %18 step %17 {
          tile.forall (%c0, %c1) in [32, 4] over block_threads {
            tile.async_copy %4[0, (%c0 + (%bm * 32)), ((%p * 16) + (%c1 * 4))] to %stage[%p, %c0, (%c1 * 4)] count 4 : memref<1x64x32xf32> to memref<3x32x20xf32>
          } {llmopt.role = "stage"}
          tile.forall (%c0_1, %c1_1) in [32, 4] over block_threads {
            tile.async_copy %3[(%c0_1 + (%bn * 32)), ((%p * 16) + (%c1_1 * 4))] to %stage_1[%p, %c0_1, (%c1_1 * 4)] count 4 : memref<64x32xf32> to memref<3x32x20xf32>
          } {llmopt.role = "stage"}
          tile.async_commit
        } {unroll = 0 : i64, llmopt.role = "prologue"}
        %19, %20, %21 = scf.for %k0 = %9 to %8 step %11 iter_args(%slot = %13, %fill_slot = %14, %fetch = %15) -> (index, index, index) {
          tile.async_wait 1
          kernel.barrier
          tile.forall (%c0_2, %c1_2) in [32, 4] over block_threads {
            tile.async_copy %4[0, (%c0_2 + (%bm * 32)), ((%fetch * 16) + (%c1_2 * 4))] to %stage[%fill_slot, %c0_2, (%c1_2 * 4)] count 4 : memref<1x64x32xf32> to memref<3x32x20xf32>
          } {llmopt.role = "stage"}
          tile.forall (%c0_3, %c1_3) in [32, 4] over block_threads {
            tile.async_copy %3[(%c0_3 + (%bn * 32)), ((%fetch * 16) + (%c1_3 * 4))] to %stage_1[%fill_slot * 4611686018427387904, %c0_3, (%c1_3 * 4)] count 4 : memref<64x32xf32> to memref<3x32x20xf32>
          } {llmopt.role = "stage"}
          tile.async_commit
          scf.for %kk = %9 to %12 step %11 {
            %22 = arith.muli %k0, %12 : index
            %k = arith.addi %22, %kk : index
            tile.forall (%wi_1, %wj_1, %g_1, %t_1) in [1, 2, 8, 4] over block_threads {
              loop.for %i_1 = 0 to 2 {
                loop.for %rh_1 = 0 to 2 {
                  loop.for %j_1 = 0 to 2 {
                    loop.for %rl_1 = 0 to 2 {
                      %23 = loop.load %stage[%slot, ((((%wi_1 * 32) + %g_1) + (%i_1 * 16)) + (%rh_1 * 8)), %kk] : memref<3x32x20xf32>
                      %24 = loop.load %stage_1[%slot, ((((%wj_1 * 16) + (%t_1 * 2)) + (%j_1 * 8)) + %rl_1), %kk] : memref<3x32x20xf32>
                      %25 = arith.mulf %23, %24 : f32
                      %26 = loop.load %acc[%wi_1, %wj_1, %g_1, %t_1, %i_1, %rh_1, %j_1, %rl_1] : memref<1x2x8x4x2x2x2x2xf32>
                      %27 = arith.addf %26, %25 : f32
                      loop.store %27, %acc[%wi_1, %wj_1, %g_1, %t_1, %i_1, %rh_1, %j_1, %rl_1] : memref<1x2x8x4x2x2x2x2xf32>
                    } {unroll = 0 : i64}
                  } {unroll = 0 : i64}
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {llmopt.role = "update", llmopt.layout = "mma"}
          } {unroll = 0 : i64}
          %28 = arith.constant 0 : index
          %29 = arith.constant 1 : index
          %30 = arith.constant 3 : index
          %31 = arith.addi %slot, %29 : index
          %32 = arith.cmpi slt, %31, %30 : index
          %33 = arith.select %32, %31, %28 : index
          %34 = arith.constant 3 : index
          %35 = arith.maxui %fill_slot, %29 : index
          %36 = arith.cmpi slt, %35, %34 : index
          %37 = arith.select %36, %35, %28 : index
          %38 = arith.constant 2 : index
          %39 = arith.addi %fetch, %29 : index
          %40 = arith.cmpi slt, %39, %38 : index
          %41 = arith.select %40, %39, %28 : index
          scf.yield %33, %37, %41 : index, index, index
        } {llmopt.role = "k_loop", llmopt.prefetch = "async3"}
        tile.async_wait 0
        tile.forall (%wi_2, %wj_2, %g_2, %t_2) in [1, 2, 8, 4] over block_threads {
          loop.for %i_2 = 0 to 2 {
            loop.for %rh_2 = 0 to 2 {
              loop.for %j_2 = 0 to 2 {
                loop.for %rl_2 = 0 to 2 {
                  %sum = loop.load %acc[%wi_2, %wj_2, %g_2, %t_2, %i_2, %rh_2, %j_2, %rl_2] : memref<1x2x8x4x2x2x2x2xf32>
                  %42 = loop.load %1[0, (((((%bm * 32) + (%wi_2 * 32)) + %g_2) + (%i_2 * 16)) + (%rh_2 * 8)), (((((%bn * 32) + (%wj_2 * 16)) + (%t_2 * 2)) + (%j_2 * 8)) + %rl_2)] : memref<1x64x64xf32>
                  %43 = arith.addf %sum, %42 : f32
                  loop.store %43, %2[0, (((((%bm * 32) + (%wi_2 * 32)) + %g_2) + (%i_2 * 16)) + (%rh_2 * 8)), (((((%bn * 32) + (%wj_2 * 16)) + (%t_2 * 2)) + (%j_2 * 8)) + %rl_2)] : memref<1x64x64xf32>
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "epilogue", llmopt.layout = "mma"}
      }
    }
    func.return %0 : memref<1x64x64xf32>
  }
}
