// RUN: llm-opt %s -p 'wgmma-fragments{arch=sm_90a}' | filecheck %s
// RUN: llm-opt %s -p 'wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda{arch=sm_90a}' --check-numerics --check-numerics-at 1,2,17,32,33,100,128 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// The bf16 x·Wᵀ of wgmma-fragments.mlir over a symbolic number of rows (up to 128) after
// length-buckets and the same schedule (bm=64 bn=64 tm=2 tn=16 blocked=3, bk=64): the
// one- and two-row buckets are cooperative kernels, the 32-row bucket and the rest (up to 128) register
// tiles whose row blocks overhang the length (the copies that fill the A tiles clamp their
// rows; the tile loads are not clamped). Both register-tiled buckets become warpgroup
// products; the cooperative ones are left alone.

builtin.module {
  func.func @forward(%proj.weight: memref<128x128xbf16> {llmopt.param = "proj.weight"}, %x: memref<1x?x128xbf16> {llmopt.input = "x", llmopt.dynamic = ["seq"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 128 : i64}) -> memref<1x?x128xbf16> {
    %0 = memref.alloc(%seq) : memref<1x?x128xbf16>
    %1 = arith.constant 128 : index
    %2 = arith.muli %seq, %1 : index
    %3 = arith.constant 256 : index
    %grid = arith.ceildivui %2, %3 : index
    %c1 = arith.constant 1 : index
    %le1 = arith.cmpi ule, %seq, %c1 : index
    scf.if %le1 {
      tile.kernel @elementwise_5_coop1 grid [128, 1, 1] block [32, 1, 1] (%4 = %0 : memref<1x?x128xbf16>, %seq_1 = %seq : index, %5 = %proj.weight : memref<128x128xbf16>, %6 = %x : memref<1x?x128xbf16>) {
        tile.forall (%i0, %nb, %i1) in [1, 128, 1] over blocks {
          %part = tile.alloc shared : memref<1x32xf32>
          %frag = tile.alloc registers : memref<1x32x8xbf16>
          %frag_1 = tile.alloc registers : memref<1x32x8xbf16>
          tile.forall (%w, %l) in [1, 32] over block_threads {
            %7 = arith.constant 0 : index
            %8 = arith.constant 1 : index
            %9 = arith.constant 1 : index
            %10 = arith.constant 0.000000e+00 : f32
            %11 = scf.for %c = %7 to %8 step %9 iter_args(%acc = %10) -> (f32) {
              tile.copy %6[0, %i1, ((%c * 256) + (%l * 8))] clamp to %frag[%w, %l, 0] count 8 : memref<1x?x128xbf16> to memref<1x32x8xbf16>
              tile.copy %5[(%nb + %w), ((%c * 256) + (%l * 8))] clamp to %frag_1[%w, %l, 0] count 8 : memref<128x128xbf16> to memref<1x32x8xbf16>
              %12 = loop.reduce add %v = 0 to 8 : f32 {
                %13 = arith.constant 0 : index
                %14 = arith.constant 256 : index
                %15 = arith.muli %c, %14 : index
                %16 = arith.addi %13, %15 : index
                %17 = arith.constant 8 : index
                %18 = arith.muli %l, %17 : index
                %19 = arith.addi %16, %18 : index
                %20 = arith.addi %19, %v : index
                %21 = loop.load %frag[%w, %l, %v] : memref<1x32x8xbf16>
                %22 = loop.load %frag_1[%w, %l, %v] : memref<1x32x8xbf16>
                %23 = arith.extf %21 : bf16 to f32
                %24 = arith.extf %22 : bf16 to f32
                %25 = arith.mulf %23, %24 : f32
                %26 = arith.constant 128 : index
                %27 = arith.cmpi ult, %20, %26 : index
                %28 = arith.constant 0.000000e+00 : f32
                %29 = arith.select %27, %25, %28 : f32
                loop.yield %29 : f32
              } {unroll = 0 : i64}
              %30 = arith.addf %acc, %12 : f32
              scf.yield %30 : f32
            } {unroll = 4 : i64}
            loop.store %11, %part[%w, %l] : memref<1x32xf32>
          }
          tile.forall (%w_1) in [1] over block_threads {
            %31 = loop.reduce add %lane = 0 to 32 : f32 {
              %32 = loop.load %part[%w_1, %lane] : memref<1x32xf32>
              loop.yield %32 : f32
            } {unroll = 0 : i64}
            %33 = arith.constant 0 : index
            %34 = arith.truncf %31 : f32 to bf16
            loop.store %34, %4[%i0, %i1, (%nb + %w_1)] : memref<1x?x128xbf16>
          }
        }
      } {llmopt.bucket = 1 : i64, llmopt.coop, llmopt.gemv = {rows = 1 : i64, vector = 8 : i64}}
    } else {
      %c2 = arith.constant 2 : index
      %le2 = arith.cmpi ule, %seq, %c2 : index
      scf.if %le2 {
        %4 = arith.constant 128 : index
        %grid_coop2 = arith.muli %seq, %4 : index
        tile.kernel @elementwise_5_coop2 grid [%grid_coop2 max 256, 1, 1] block [128, 1, 1] (%5 = %0 : memref<1x?x128xbf16>, %seq_1 = %seq : index, %6 = %proj.weight : memref<128x128xbf16>, %7 = %x : memref<1x?x128xbf16>) {
          tile.forall (%i0, %i2, %i1) in [1, 128, %seq_1 max 2] over blocks {
            %8 = tile.coop_reduce add %r = 0 to 128 : f32 {
              %9 = loop.load %7[0, %i1, %r] : memref<1x?x128xbf16>
              %10 = loop.load %6[%i2, %r] : memref<128x128xbf16>
              %11 = arith.extf %9 : bf16 to f32
              %12 = arith.extf %10 : bf16 to f32
              %13 = arith.mulf %11, %12 : f32
              tile.yield %13 : f32
            }
            %14 = arith.truncf %8 : f32 to bf16
            tile.forall (%once) in [1] over block_threads {
              loop.store %14, %5[%i0, %i1, %i2] : memref<1x?x128xbf16>
            }
          }
        } {llmopt.bucket = 2 : i64, llmopt.coop}
      } else {
        %c32 = arith.constant 32 : index
        %le32 = arith.cmpi ule, %seq, %c32 : index
        scf.if %le32 {
          %5 = arith.constant 64 : index
          %6 = arith.ceildivui %seq, %5 : index
          %7 = arith.constant 2 : index
          %grid_1 = arith.muli %6, %7 : index
          tile.kernel @elementwise_5_le32 grid [%grid_1 max 2, 1, 1] block [128, 1, 1] (%8 = %0 : memref<1x?x128xbf16>, %9 = %seq : index, %10 = %proj.weight : memref<128x128xbf16>, %11 = %x : memref<1x?x128xbf16>) {
            %12 = arith.constant 64 : index
            %13 = arith.ceildivui %9, %12 : index
            tile.forall (%b0, %bn, %bm) in [1, 2, %13 max 1] over blocks {
              %acc = tile.alloc registers : memref<4x1x8x4x1x2x8x2xf32>
              tile.forall (%wi, %wj, %g, %t) in [4, 1, 8, 4] over block_threads {
                loop.for %i = 0 to 1 {
                  loop.for %rh = 0 to 2 {
                    loop.for %j = 0 to 8 {
                      loop.for %rl = 0 to 2 {
                        %14 = arith.constant 0.000000e+00 : f32
                        loop.store %14, %acc[%wi, %wj, %g, %t, %i, %rh, %j, %rl] : memref<4x1x8x4x1x2x8x2xf32>
                      } {unroll = 0 : i64}
                    } {unroll = 0 : i64}
                  } {unroll = 0 : i64}
                } {unroll = 0 : i64}
              } {llmopt.role = "init", llmopt.layout = "mma"}
              %15 = arith.constant 0 : index
              %16 = arith.constant 128 : index
              %17 = arith.constant 1 : index
              %stage = tile.alloc shared {llmopt.pad = 8 : i64} : memref<3x64x64xbf16>
              %stage_1 = tile.alloc shared {llmopt.pad = 8 : i64} : memref<3x64x64xbf16>
              %18 = arith.constant 0 : index
              %19 = arith.constant 2 : index
              %20 = arith.constant 1 : index
              %21 = arith.constant 64 : index
              %22 = arith.constant 0 : index
              %23 = arith.constant 2 : index
              %24 = arith.constant 0 : index
              %25 = arith.constant 0 : index
              %26 = arith.constant 1 : index
              %27 = arith.constant 2 : index
              kernel.barrier
              scf.for %p = %25 to %27 step %26 {
                tile.forall (%c0, %c1_1) in [64, 8] over block_threads {
                  tile.async_copy %11[0, (%c0 + (%bm * 64)), ((%p * 64) + (%c1_1 * 8))] clamp to %stage[%p, %c0, (%c1_1 * 8)] count 8 : memref<1x?x128xbf16> to memref<3x64x64xbf16>
                } {llmopt.role = "stage"}
                tile.forall (%c0_1, %c1_2) in [64, 8] over block_threads {
                  tile.async_copy %10[(%c0_1 + (%bn * 64)), ((%p * 64) + (%c1_2 * 8))] clamp to %stage_1[%p, %c0_1, (%c1_2 * 8)] count 8 : memref<128x128xbf16> to memref<3x64x64xbf16>
                } {llmopt.role = "stage"}
                tile.async_commit
              } {unroll = 0 : i64, llmopt.role = "prologue"}
              %28, %29, %30 = scf.for %k0 = %18 to %19 step %20 iter_args(%slot = %22, %fill_slot = %23, %fetch = %24) -> (index, index, index) {
                tile.async_wait 1
                kernel.barrier
                tile.forall (%c0_2, %c1_3) in [64, 8] over block_threads {
                  tile.async_copy %11[0, (%c0_2 + (%bm * 64)), ((%fetch * 64) + (%c1_3 * 8))] clamp to %stage[%fill_slot, %c0_2, (%c1_3 * 8)] count 8 : memref<1x?x128xbf16> to memref<3x64x64xbf16>
                } {llmopt.role = "stage"}
                tile.forall (%c0_3, %c1_4) in [64, 8] over block_threads {
                  tile.async_copy %10[(%c0_3 + (%bn * 64)), ((%fetch * 64) + (%c1_4 * 8))] clamp to %stage_1[%fill_slot, %c0_3, (%c1_4 * 8)] count 8 : memref<128x128xbf16> to memref<3x64x64xbf16>
                } {llmopt.role = "stage"}
                tile.async_commit
                scf.for %kk = %18 to %21 step %20 {
                  %31 = arith.muli %k0, %21 : index
                  %k = arith.addi %31, %kk : index
                  tile.forall (%wi_1, %wj_1, %g_1, %t_1) in [4, 1, 8, 4] over block_threads {
                    loop.for %i_1 = 0 to 1 {
                      loop.for %rh_1 = 0 to 2 {
                        loop.for %j_1 = 0 to 8 {
                          loop.for %rl_1 = 0 to 2 {
                            %32 = loop.load %stage[%slot, ((((%wi_1 * 16) + %g_1) + (%i_1 * 16)) + (%rh_1 * 8)), %kk] : memref<3x64x64xbf16>
                            %33 = loop.load %stage_1[%slot, ((((%wj_1 * 64) + (%t_1 * 2)) + (%j_1 * 8)) + %rl_1), %kk] : memref<3x64x64xbf16>
                            %34 = arith.extf %32 : bf16 to f32
                            %35 = arith.extf %33 : bf16 to f32
                            %36 = arith.mulf %34, %35 : f32
                            %37 = loop.load %acc[%wi_1, %wj_1, %g_1, %t_1, %i_1, %rh_1, %j_1, %rl_1] : memref<4x1x8x4x1x2x8x2xf32>
                            %38 = arith.addf %37, %36 : f32
                            loop.store %38, %acc[%wi_1, %wj_1, %g_1, %t_1, %i_1, %rh_1, %j_1, %rl_1] : memref<4x1x8x4x1x2x8x2xf32>
                          } {unroll = 0 : i64}
                        } {unroll = 0 : i64}
                      } {unroll = 0 : i64}
                    } {unroll = 0 : i64}
                  } {llmopt.role = "update", llmopt.layout = "mma"}
                } {unroll = 0 : i64}
                %39 = arith.constant 0 : index
                %40 = arith.constant 1 : index
                %41 = arith.constant 3 : index
                %42 = arith.addi %slot, %40 : index
                %43 = arith.cmpi slt, %42, %41 : index
                %44 = arith.select %43, %42, %39 : index
                %45 = arith.constant 3 : index
                %46 = arith.addi %fill_slot, %40 : index
                %47 = arith.cmpi slt, %46, %45 : index
                %48 = arith.select %47, %46, %39 : index
                %49 = arith.constant 2 : index
                %50 = arith.addi %fetch, %40 : index
                %51 = arith.cmpi slt, %50, %49 : index
                %52 = arith.select %51, %50, %39 : index
                scf.yield %44, %48, %52 : index, index, index
              } {llmopt.role = "k_loop", llmopt.prefetch = "async3"}
              tile.async_wait 0
              tile.forall (%wi_2, %wj_2, %g_2, %t_2) in [4, 1, 8, 4] over block_threads {
                loop.for %i_2 = 0 to 1 {
                  loop.for %rh_2 = 0 to 2 {
                    loop.for %j_2 = 0 to 8 {
                      loop.for %rl_2 = 0 to 2 {
                        %53 = arith.constant 0 : index
                        %54 = arith.constant 64 : index
                        %55 = arith.muli %bm, %54 : index
                        %56 = arith.addi %53, %55 : index
                        %57 = arith.constant 16 : index
                        %58 = arith.muli %wi_2, %57 : index
                        %59 = arith.addi %56, %58 : index
                        %60 = arith.addi %59, %g_2 : index
                        %61 = arith.constant 16 : index
                        %62 = arith.muli %i_2, %61 : index
                        %63 = arith.addi %60, %62 : index
                        %64 = arith.constant 8 : index
                        %65 = arith.muli %rh_2, %64 : index
                        %66 = arith.addi %63, %65 : index
                        %67 = arith.cmpi ult, %66, %9 : index
                        scf.if %67 {
                          %sum = loop.load %acc[%wi_2, %wj_2, %g_2, %t_2, %i_2, %rh_2, %j_2, %rl_2] : memref<4x1x8x4x1x2x8x2xf32>
                          %68 = arith.truncf %sum : f32 to bf16
                          loop.store %68, %8[0, (((((%bm * 64) + (%wi_2 * 16)) + %g_2) + (%i_2 * 16)) + (%rh_2 * 8)), (((((%bn * 64) + (%wj_2 * 64)) + (%t_2 * 2)) + (%j_2 * 8)) + %rl_2)] : memref<1x?x128xbf16>
                        }
                      } {unroll = 0 : i64}
                    } {unroll = 0 : i64}
                  } {unroll = 0 : i64}
                } {unroll = 0 : i64}
              } {llmopt.role = "epilogue", llmopt.layout = "mma"}
            }
          } {llmopt.bucket = 32 : i64}
        } else {
          %8 = arith.constant 64 : index
          %9 = arith.ceildivui %seq, %8 : index
          %10 = arith.constant 2 : index
          %grid_2 = arith.muli %9, %10 : index
          tile.kernel @elementwise_5 grid [%grid_2 max 4, 1, 1] block [128, 1, 1] (%11 = %0 : memref<1x?x128xbf16>, %12 = %seq : index, %13 = %proj.weight : memref<128x128xbf16>, %14 = %x : memref<1x?x128xbf16>) {
            %15 = arith.constant 64 : index
            %16 = arith.ceildivui %12, %15 : index
            tile.forall (%b0, %bn, %bm) in [1, 2, %16 max 2] over blocks {
              %acc = tile.alloc registers : memref<4x1x8x4x1x2x8x2xf32>
              tile.forall (%wi, %wj, %g, %t) in [4, 1, 8, 4] over block_threads {
                loop.for %i = 0 to 1 {
                  loop.for %rh = 0 to 2 {
                    loop.for %j = 0 to 8 {
                      loop.for %rl = 0 to 2 {
                        %17 = arith.constant 0.000000e+00 : f32
                        loop.store %17, %acc[%wi, %wj, %g, %t, %i, %rh, %j, %rl] : memref<4x1x8x4x1x2x8x2xf32>
                      } {unroll = 0 : i64}
                    } {unroll = 0 : i64}
                  } {unroll = 0 : i64}
                } {unroll = 0 : i64}
              } {llmopt.role = "init", llmopt.layout = "mma"}
              %18 = arith.constant 0 : index
              %19 = arith.constant 128 : index
              %20 = arith.constant 1 : index
              %stage = tile.alloc shared {llmopt.pad = 8 : i64} : memref<3x64x64xbf16>
              %stage_1 = tile.alloc shared {llmopt.pad = 8 : i64} : memref<3x64x64xbf16>
              %21 = arith.constant 0 : index
              %22 = arith.constant 2 : index
              %23 = arith.constant 1 : index
              %24 = arith.constant 64 : index
              %25 = arith.constant 0 : index
              %26 = arith.constant 2 : index
              %27 = arith.constant 0 : index
              %28 = arith.constant 0 : index
              %29 = arith.constant 1 : index
              %30 = arith.constant 2 : index
              kernel.barrier
              scf.for %p = %28 to %30 step %29 {
                tile.forall (%c0, %c1_1) in [64, 8] over block_threads {
                  tile.async_copy %14[0, (%c0 + (%bm * 64)), ((%p * 64) + (%c1_1 * 8))] clamp to %stage[%p, %c0, (%c1_1 * 8)] count 8 : memref<1x?x128xbf16> to memref<3x64x64xbf16>
                } {llmopt.role = "stage"}
                tile.forall (%c0_1, %c1_2) in [64, 8] over block_threads {
                  tile.async_copy %13[(%c0_1 + (%bn * 64)), ((%p * 64) + (%c1_2 * 8))] clamp to %stage_1[%p, %c0_1, (%c1_2 * 8)] count 8 : memref<128x128xbf16> to memref<3x64x64xbf16>
                } {llmopt.role = "stage"}
                tile.async_commit
              } {unroll = 0 : i64, llmopt.role = "prologue"}
              %31, %32, %33 = scf.for %k0 = %21 to %22 step %23 iter_args(%slot = %25, %fill_slot = %26, %fetch = %27) -> (index, index, index) {
                tile.async_wait 1
                kernel.barrier
                tile.forall (%c0_2, %c1_3) in [64, 8] over block_threads {
                  tile.async_copy %14[0, (%c0_2 + (%bm * 64)), ((%fetch * 64) + (%c1_3 * 8))] clamp to %stage[%fill_slot, %c0_2, (%c1_3 * 8)] count 8 : memref<1x?x128xbf16> to memref<3x64x64xbf16>
                } {llmopt.role = "stage"}
                tile.forall (%c0_3, %c1_4) in [64, 8] over block_threads {
                  tile.async_copy %13[(%c0_3 + (%bn * 64)), ((%fetch * 64) + (%c1_4 * 8))] clamp to %stage_1[%fill_slot, %c0_3, (%c1_4 * 8)] count 8 : memref<128x128xbf16> to memref<3x64x64xbf16>
                } {llmopt.role = "stage"}
                tile.async_commit
                scf.for %kk = %21 to %24 step %23 {
                  %34 = arith.muli %k0, %24 : index
                  %k = arith.addi %34, %kk : index
                  tile.forall (%wi_1, %wj_1, %g_1, %t_1) in [4, 1, 8, 4] over block_threads {
                    loop.for %i_1 = 0 to 1 {
                      loop.for %rh_1 = 0 to 2 {
                        loop.for %j_1 = 0 to 8 {
                          loop.for %rl_1 = 0 to 2 {
                            %35 = loop.load %stage[%slot, ((((%wi_1 * 16) + %g_1) + (%i_1 * 16)) + (%rh_1 * 8)), %kk] : memref<3x64x64xbf16>
                            %36 = loop.load %stage_1[%slot, ((((%wj_1 * 64) + (%t_1 * 2)) + (%j_1 * 8)) + %rl_1), %kk] : memref<3x64x64xbf16>
                            %37 = arith.extf %35 : bf16 to f32
                            %38 = arith.extf %36 : bf16 to f32
                            %39 = arith.mulf %37, %38 : f32
                            %40 = loop.load %acc[%wi_1, %wj_1, %g_1, %t_1, %i_1, %rh_1, %j_1, %rl_1] : memref<4x1x8x4x1x2x8x2xf32>
                            %41 = arith.addf %40, %39 : f32
                            loop.store %41, %acc[%wi_1, %wj_1, %g_1, %t_1, %i_1, %rh_1, %j_1, %rl_1] : memref<4x1x8x4x1x2x8x2xf32>
                          } {unroll = 0 : i64}
                        } {unroll = 0 : i64}
                      } {unroll = 0 : i64}
                    } {unroll = 0 : i64}
                  } {llmopt.role = "update", llmopt.layout = "mma"}
                } {unroll = 0 : i64}
                %42 = arith.constant 0 : index
                %43 = arith.constant 1 : index
                %44 = arith.constant 3 : index
                %45 = arith.addi %slot, %43 : index
                %46 = arith.cmpi slt, %45, %44 : index
                %47 = arith.select %46, %45, %42 : index
                %48 = arith.constant 3 : index
                %49 = arith.addi %fill_slot, %43 : index
                %50 = arith.cmpi slt, %49, %48 : index
                %51 = arith.select %50, %49, %42 : index
                %52 = arith.constant 2 : index
                %53 = arith.addi %fetch, %43 : index
                %54 = arith.cmpi slt, %53, %52 : index
                %55 = arith.select %54, %53, %42 : index
                scf.yield %47, %51, %55 : index, index, index
              } {llmopt.role = "k_loop", llmopt.prefetch = "async3"}
              tile.async_wait 0
              tile.forall (%wi_2, %wj_2, %g_2, %t_2) in [4, 1, 8, 4] over block_threads {
                loop.for %i_2 = 0 to 1 {
                  loop.for %rh_2 = 0 to 2 {
                    loop.for %j_2 = 0 to 8 {
                      loop.for %rl_2 = 0 to 2 {
                        %56 = arith.constant 0 : index
                        %57 = arith.constant 64 : index
                        %58 = arith.muli %bm, %57 : index
                        %59 = arith.addi %56, %58 : index
                        %60 = arith.constant 16 : index
                        %61 = arith.muli %wi_2, %60 : index
                        %62 = arith.addi %59, %61 : index
                        %63 = arith.addi %62, %g_2 : index
                        %64 = arith.constant 16 : index
                        %65 = arith.muli %i_2, %64 : index
                        %66 = arith.addi %63, %65 : index
                        %67 = arith.constant 8 : index
                        %68 = arith.muli %rh_2, %67 : index
                        %69 = arith.addi %66, %68 : index
                        %70 = arith.cmpi ult, %69, %12 : index
                        scf.if %70 {
                          %sum = loop.load %acc[%wi_2, %wj_2, %g_2, %t_2, %i_2, %rh_2, %j_2, %rl_2] : memref<4x1x8x4x1x2x8x2xf32>
                          %71 = arith.truncf %sum : f32 to bf16
                          loop.store %71, %11[0, (((((%bm * 64) + (%wi_2 * 16)) + %g_2) + (%i_2 * 16)) + (%rh_2 * 8)), (((((%bn * 64) + (%wj_2 * 64)) + (%t_2 * 2)) + (%j_2 * 8)) + %rl_2)] : memref<1x?x128xbf16>
                        }
                      } {unroll = 0 : i64}
                    } {unroll = 0 : i64}
                  } {unroll = 0 : i64}
                } {unroll = 0 : i64}
              } {llmopt.role = "epilogue", llmopt.layout = "mma"}
            }
          } {llmopt.bucket = 128 : i64}
        }
      }
    }
    func.return %0 : memref<1x?x128xbf16>
  }
}


// CHECK:       tile.kernel @elementwise_5_coop1
// CHECK-NOT:   wgmma
// CHECK:       tile.kernel @elementwise_5_le32
// CHECK-COUNT-4: wgmma.mma
// CHECK:       tile.kernel @elementwise_5 grid
// CHECK-COUNT-4: wgmma.mma
// CHECK-NOT:   wgmma.mma

// NUM: wgmma-fragments {{.*}} ok
// NUM: tile-to-kernel {{.*}} ok
