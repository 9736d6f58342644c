// P·V as the flash kernel with flash-attention{row_warps} leaves it before wgmma-fragments
// (64 rows, 4 warps of 16 whole rows: one warpgroup; 64 keys, 64 columns of V): the first
// forall writes P (here a bf16 input) in the accumulator layout of the warps that own its
// rows, into the shared %p; the chunk loop reads %p as the product's A and V, stored [key,
// column], as its B (wgmma-fragments-registers.mlir).
builtin.module {
  func.func @pv(%x: memref<64x64xbf16> {llmopt.input = "x"}, %v: memref<64x64xbf16> {llmopt.input = "v"}) -> memref<64x64xf32> {
    %0 = memref.alloc() : memref<64x64xf32>
    tile.kernel @pv grid [1, 1, 1] block [128, 1, 1] (%o = %0 : memref<64x64xf32>, %xa = %x : memref<64x64xbf16>, %va = %v : memref<64x64xbf16>) {
      tile.forall (%b) in [1] over blocks {
        %acc = tile.alloc registers : memref<4x1x8x4x1x2x8x2xf32>
        %p = tile.alloc shared : memref<64x64xbf16>
        %vs = tile.alloc shared : memref<64x64xbf16>
        tile.forall (%wi, %wj, %g, %t) in [4, 1, 8, 4] over block_threads {
          loop.for %i = 0 to 1 {
            loop.for %rh = 0 to 2 {
              loop.for %j = 0 to 8 {
                loop.for %rl = 0 to 2 {
                  %z = arith.constant 0.000000e+00 : f32
                  loop.store %z, %acc[%wi, %wj, %g, %t, %i, %rh, %j, %rl] : memref<4x1x8x4x1x2x8x2xf32>
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "init", llmopt.layout = "mma"}
        tile.forall (%wi_0, %wj_0, %g_0, %t_0) in [4, 1, 8, 4] over block_threads {
          loop.for %i_0 = 0 to 1 {
            loop.for %rh_0 = 0 to 2 {
              loop.for %j_0 = 0 to 8 {
                loop.for %rl_0 = 0 to 2 {
                  %e = loop.load %xa[((((%wi_0 * 16) + %g_0) + (%i_0 * 16)) + (%rh_0 * 8)), (((%t_0 * 2) + (%j_0 * 8)) + %rl_0)] : memref<64x64xbf16>
                  loop.store %e, %p[((((%wi_0 * 16) + %g_0) + (%i_0 * 16)) + (%rh_0 * 8)), (((%t_0 * 2) + (%j_0 * 8)) + %rl_0)] : memref<64x64xbf16>
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "exp"}
        tile.forall (%s0, %s1) in [64, 64] over block_threads {
          %w = loop.load %va[%s0, %s1] : memref<64x64xbf16>
          loop.store %w, %vs[%s0, %s1] : memref<64x64xbf16>
        } {llmopt.role = "stage"}
        %lb = arith.constant 0 : index
        %ub = arith.constant 64 : index
        %one = arith.constant 1 : index
        scf.for %kk = %lb to %ub step %one {
          tile.forall (%wi_1, %wj_1, %g_1, %t_1) in [4, 1, 8, 4] over block_threads {
            loop.for %i_1 = 0 to 1 {
              loop.for %rh_1 = 0 to 2 {
                loop.for %j_1 = 0 to 8 {
                  loop.for %rl_1 = 0 to 2 {
                    %a = loop.load %p[((((%wi_1 * 16) + %g_1) + (%i_1 * 16)) + (%rh_1 * 8)), %kk] : memref<64x64xbf16>
                    %bv = loop.load %vs[%kk, ((((%wj_1 * 64) + (%t_1 * 2)) + (%j_1 * 8)) + %rl_1)] : memref<64x64xbf16>
                    %af = arith.extf %a : bf16 to f32
                    %bf = arith.extf %bv : bf16 to f32
                    %m = arith.mulf %af, %bf : f32
                    %c = loop.load %acc[%wi_1, %wj_1, %g_1, %t_1, %i_1, %rh_1, %j_1, %rl_1] : memref<4x1x8x4x1x2x8x2xf32>
                    %s = arith.addf %c, %m : f32
                    loop.store %s, %acc[%wi_1, %wj_1, %g_1, %t_1, %i_1, %rh_1, %j_1, %rl_1] : memref<4x1x8x4x1x2x8x2xf32>
                  } {unroll = 0 : i64}
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {unroll = 0 : i64}
          } {llmopt.role = "update", llmopt.layout = "mma"}
        } {unroll = 0 : i64}
        tile.forall (%wi_2, %wj_2, %g_2, %t_2) in [4, 1, 8, 4] over block_threads {
          loop.for %i_2 = 0 to 1 {
            loop.for %rh_2 = 0 to 2 {
              loop.for %j_2 = 0 to 8 {
                loop.for %rl_2 = 0 to 2 {
                  %r = loop.load %acc[%wi_2, %wj_2, %g_2, %t_2, %i_2, %rh_2, %j_2, %rl_2] : memref<4x1x8x4x1x2x8x2xf32>
                  loop.store %r, %o[((((%wi_2 * 16) + %g_2) + (%i_2 * 16)) + (%rh_2 * 8)), ((((%wj_2 * 64) + (%t_2 * 2)) + (%j_2 * 8)) + %rl_2)] : memref<64x64xf32>
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "epilogue"}
      }
    }
    func.return %0 : memref<64x64xf32>
  }
}
