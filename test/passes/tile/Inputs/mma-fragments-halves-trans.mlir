// A bf16 x·W with W stored [K, N] (M=100 N=72 K=32: one chunk, no slots) in the
// tensor-core layout with two 16×8 pieces of columns a warp (bm=32 bn=32 tm=4 tn=4), after
// stage-inputs and pad-shared: W's tile is [k, n] (rows of 32 columns padded to 40), so the
// chunk loop's %kk is its outer index, as flash-attention stages V for P·V.
builtin.module {
  func.func @forward(%proj.weight: memref<32x72xbf16> {llmopt.param = "proj.weight"}, %x: memref<1x100x32xbf16> {llmopt.input = "x"}) -> memref<1x100x72xbf16> {
    %0 = memref.alloc() : memref<1x100x72xbf16>
    tile.kernel @elementwise_5 grid [12, 1, 1] block [64, 1, 1] (%1 = %0 : memref<1x100x72xbf16>, %2 = %proj.weight : memref<32x72xbf16>, %3 = %x : memref<1x100x32xbf16>) {
      tile.forall (%b0, %bm, %bn) in [1, 4, 3] over blocks {
        %acc = tile.alloc registers : memref<1x2x8x4x2x2x2x2xf32>
        tile.forall (%wi, %wj, %g, %t) in [1, 2, 8, 4] over block_threads {
          loop.for %i = 0 to 2 {
            loop.for %rh = 0 to 2 {
              loop.for %j = 0 to 2 {
                loop.for %rl = 0 to 2 {
                  %4 = arith.constant 0.000000e+00 : f32
                  loop.store %4, %acc[%wi, %wj, %g, %t, %i, %rh, %j, %rl] : memref<1x2x8x4x2x2x2x2xf32>
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "init", llmopt.layout = "mma"}
        %5 = arith.constant 0 : index
        %6 = arith.constant 32 : index
        %7 = arith.constant 1 : index
        %stage = tile.alloc shared : memref<32x40xbf16>
        %stage_1 = tile.alloc shared : memref<32x40xbf16>
        %8 = arith.constant 0 : index
        %9 = arith.constant 1 : index
        %10 = arith.constant 1 : index
        %11 = arith.constant 32 : index
        scf.for %k0 = %8 to %9 step %10 {
          tile.forall (%s0, %s1) in [32, 32] over block_threads {
            %12 = loop.load %3[0, ((%bm * 32) + %s0), ((%k0 * 32) + %s1)] clamp : memref<1x100x32xbf16>
            loop.store %12, %stage[%s0, %s1] : memref<32x40xbf16>
          } {llmopt.role = "stage"}
          tile.forall (%s0_1, %s1_1) in [32, 32] over block_threads {
            %13 = loop.load %2[((%k0 * 32) + %s0_1), ((%bn * 32) + %s1_1)] clamp : memref<32x72xbf16>
            loop.store %13, %stage_1[%s0_1, %s1_1] : memref<32x40xbf16>
          } {llmopt.role = "stage"}
          scf.for %kk = %8 to %11 step %10 {
            %14 = arith.muli %k0, %11 : index
            %k = arith.addi %14, %kk : index
            tile.forall (%wi_1, %wj_1, %g_1, %t_1) in [1, 2, 8, 4] over block_threads {
              loop.for %i_1 = 0 to 2 {
                loop.for %rh_1 = 0 to 2 {
                  loop.for %j_1 = 0 to 2 {
                    loop.for %rl_1 = 0 to 2 {
                      %15 = loop.load %stage[((((%wi_1 * 32) + %g_1) + (%i_1 * 16)) + (%rh_1 * 8)), %kk] : memref<32x40xbf16>
                      %16 = loop.load %stage_1[%kk, ((((%wj_1 * 16) + (%t_1 * 2)) + (%j_1 * 8)) + %rl_1)] : memref<32x40xbf16>
                      %17 = arith.extf %15 : bf16 to f32
                      %18 = arith.extf %16 : bf16 to f32
                      %19 = arith.mulf %17, %18 : f32
                      %20 = loop.load %acc[%wi_1, %wj_1, %g_1, %t_1, %i_1, %rh_1, %j_1, %rl_1] : memref<1x2x8x4x2x2x2x2xf32>
                      %21 = arith.addf %20, %19 : f32
                      loop.store %21, %acc[%wi_1, %wj_1, %g_1, %t_1, %i_1, %rh_1, %j_1, %rl_1] : memref<1x2x8x4x2x2x2x2xf32>
                    } {unroll = 0 : i64}
                  } {unroll = 0 : i64}
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {llmopt.role = "update", llmopt.layout = "mma"}
          } {unroll = 0 : i64}
        } {llmopt.role = "k_loop"}
        tile.forall (%wi_2, %wj_2, %g_2, %t_2) in [1, 2, 8, 4] over block_threads {
          loop.for %i_2 = 0 to 2 {
            loop.for %rh_2 = 0 to 2 {
              loop.for %j_2 = 0 to 2 {
                loop.for %rl_2 = 0 to 2 {
                  %22 = arith.constant 0 : index
                  %23 = arith.constant 32 : index
                  %24 = arith.muli %bn, %23 : index
                  %25 = arith.addi %22, %24 : index
                  %26 = arith.constant 16 : index
                  %27 = arith.muli %wj_2, %26 : index
                  %28 = arith.addi %25, %27 : index
                  %29 = arith.constant 2 : index
                  %30 = arith.muli %t_2, %29 : index
                  %31 = arith.addi %28, %30 : index
                  %32 = arith.constant 8 : index
                  %33 = arith.muli %j_2, %32 : index
                  %34 = arith.addi %31, %33 : index
                  %35 = arith.addi %34, %rl_2 : index
                  %36 = arith.constant 0 : index
                  %37 = arith.constant 32 : index
                  %38 = arith.muli %bm, %37 : index
                  %39 = arith.addi %36, %38 : index
                  %40 = arith.constant 32 : index
                  %41 = arith.muli %wi_2, %40 : index
                  %42 = arith.addi %39, %41 : index
                  %43 = arith.addi %42, %g_2 : index
                  %44 = arith.constant 16 : index
                  %45 = arith.muli %i_2, %44 : index
                  %46 = arith.addi %43, %45 : index
                  %47 = arith.constant 8 : index
                  %48 = arith.muli %rh_2, %47 : index
                  %49 = arith.addi %46, %48 : index
                  %50 = arith.constant 100 : index
                  %51 = arith.cmpi ult, %49, %50 : index
                  %52 = arith.constant 72 : index
                  %53 = arith.cmpi ult, %35, %52 : index
                  %54 = arith.andi %51, %53 : i1
                  scf.if %54 {
                    %sum = loop.load %acc[%wi_2, %wj_2, %g_2, %t_2, %i_2, %rh_2, %j_2, %rl_2] : memref<1x2x8x4x2x2x2x2xf32>
                    %55 = arith.truncf %sum : f32 to bf16
                    loop.store %55, %1[0, (((((%bm * 32) + (%wi_2 * 32)) + %g_2) + (%i_2 * 16)) + (%rh_2 * 8)), (((((%bn * 32) + (%wj_2 * 16)) + (%t_2 * 2)) + (%j_2 * 8)) + %rl_2)] : memref<1x100x72xbf16>
                  }
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "epilogue", llmopt.layout = "mma"}
      }
    }
    func.return %0 : memref<1x100x72xbf16>
  }
}

