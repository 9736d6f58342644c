// RUN: llm-opt %s -p mma-fragments | filecheck %s
// RUN: llm-opt %s -p 'mma-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: sed 's/bf16/f16/g' %s | llm-opt -p 'mma-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'mma-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' -t cuda | filecheck %s --check-prefix=CUDA
// RUN: sed 's/bf16/f16/g' %s | llm-opt -p 'mma-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' -t cuda | filecheck %s --check-prefix=F16
// RUN: llm-opt %S/Inputs/mma-fragments-halves-x2.mlir -p mma-fragments | filecheck %s --check-prefix=X2
// RUN: llm-opt %S/Inputs/mma-fragments-halves-x2.mlir -p 'mma-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: sed 's/bf16/f16/g' %S/Inputs/mma-fragments-halves-x2.mlir | llm-opt -p 'mma-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %S/Inputs/mma-fragments-halves-trans.mlir -p mma-fragments | filecheck %s --check-prefix=TRANS
// RUN: llm-opt %S/Inputs/mma-fragments-halves-trans.mlir -p 'mma-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: sed 's/bf16/f16/g' %S/Inputs/mma-fragments-halves-trans.mlir | llm-opt -p 'mma-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %S/Inputs/mma-fragments-halves-trans.mlir -p 'mma-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' -t cuda | filecheck %s --check-prefix=TRANSCUDA
// RUN: llm-opt %S/../../fuzz/Inputs/bf16_product_in_mma_layout.mlir -p mma-fragments | filecheck %s --check-prefix=BF16SUM
// RUN: llm-opt %S/Inputs/linear-bf16.mlir -p lower-to-cuda -t cuda | filecheck %s --check-prefix=PIPE
// RUN: llm-opt %S/Inputs/mma-fragments-halves-registers.mlir -p mma-fragments | filecheck %s --check-prefix=REGS
// RUN: llm-opt %S/Inputs/mma-fragments-halves-registers.mlir -p 'mma-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: sed 's/bf16/f16/g' %S/Inputs/mma-fragments-halves-registers.mlir | llm-opt -p 'mma-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %S/Inputs/mma-fragments-halves-registers.mlir -p 'mma-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' -t cuda | filecheck %s --check-prefix=REGSCUDA
// RUN: sed -e 's/memref<32x32xbf16>/memref<32x32xf32>/g' -e 's/loop.store %e, %%p\[/%er = arith.truncf %e : f32 to bf16\n loop.store %er, %%p[/' %S/Inputs/mma-fragments-halves-registers.mlir | llm-opt -p mma-fragments | filecheck %s --check-prefix=ROUNDED
// RUN: sed -e 's/memref<32x32xbf16>/memref<32x32xf32>/g' -e 's/loop.store %e, %%p\[/%er = arith.truncf %e : f32 to bf16\n loop.store %er, %%p[/' %S/Inputs/mma-fragments-halves-registers.mlir | llm-opt -p 'mma-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: sed -e 's/memref<32x32xbf16>/memref<32x32xf32>/g' -e 's/loop.store %e, %%p\[/%er = arith.truncf %e : f32 to bf16\n loop.store %er, %%p[/' %S/Inputs/mma-fragments-halves-registers.mlir | llm-opt -p 'mma-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' -t cuda | filecheck %s --check-prefix=ROUNDEDCUDA
// A bf16 x·Wᵀ (M=100 N=80 K=64, ragged in both: the last row and column blocks overhang)
// in the tensor-core layout — register-tile{bm=64 bn=32 tm=4 tn=4 blocked=3}: four warps of
// 32×16 outputs a block — after stage-inputs{bk=32}, async-copy (three slots) and pad-shared
// (rows of 32 padded to 40: 80 bytes, an odd multiple of 16, so ldmatrix rows are aligned
// and conflict-free). mma-fragments turns each step of 16 into ldmatrix.x4 per 16 rows of A,
// one ldmatrix.x4 for two 8-column pieces of W (its rows: no transpose) and one m16n8k16
// mma.sync per 16×8 piece, accumulating straight into the f32 accumulators.

// CHECK:      scf.for %kq = %{{.*}} to %[[TWO:.*]] step
// CHECK-NEXT:   tile.forall (%[[WI:.*]], %[[WJ:.*]], %[[G:.*]], %[[T:.*]]) in [2, 2, 8, 4] over block_threads {
// A's rows: 32·wi + 4·(g mod 2) + t + 8·((g floordiv 2) mod 2) (lane mod 8, then 8 more for
// lanes 8-15 and 24-31); its column 16·kq + 8·(g floordiv 4) (8 more for lanes 16-31).
// CHECK:          %[[GM:.*]] = arith.remui %[[G]], %[[C2:.*]] : index
// CHECK:          %[[GM4:.*]] = arith.muli %[[GM]], %[[C4:.*]] : index
// CHECK:          %[[L8:.*]] = arith.addi %[[GM4]], %[[T]] : index
// CHECK:          %[[R0:.*]] = arith.addi %{{.*}}, %[[L8]] : index
// CHECK:          %[[GD:.*]] = arith.divui %[[G]], %[[C2]] : index
// CHECK:          %[[GDM:.*]] = arith.remui %[[GD]], %[[C2]] : index
// CHECK:          %[[HI:.*]] = arith.muli %[[GDM]], %[[C8:.*]] : index
// CHECK:          %[[ROW:.*]] = arith.addi %[[R0]], %[[HI]] : index
// CHECK:          %[[C16:.*]] = arith.constant 16 : index
// CHECK:          %[[K0:.*]] = arith.muli %kq, %[[C16]] : index
// CHECK:          %[[Q:.*]] = arith.divui %[[G]], %[[C4]] : index
// CHECK:          %[[Q8:.*]] = arith.muli %[[Q]], %[[C8]] : index
// CHECK:          %[[COL:.*]] = arith.addi %[[K0]], %[[Q8]] : index
// CHECK:          %[[A0:fa0]], %[[A1:fa0_1]], %[[A2:fa0_2]], %[[A3:fa0_3]] = mma.ldmatrix x4 %stage[%slot, %[[ROW]], %[[COL]]] : memref<3x64x40xbf16>
// The second 16 rows: the same with 16 added.
// CHECK:          mma.ldmatrix x4 %stage[%slot, %{{.*}}, %{{.*}}] : memref<3x64x40xbf16>
// W's rows 16·wj + 8·(g floordiv 4) + lane mod 8 (two 8-column pieces), column 16·kq +
// 8·((g floordiv 2) mod 2).
// CHECK:          %[[B0:fb0]], %[[B1:fb0_1]], %[[B2:fb1]], %[[B3:fb1_1]] = mma.ldmatrix x4 %stage_1[%slot, %{{.*}}, %{{.*}}] : memref<3x32x40xbf16>
// The piece (i, j) = (0, 0): its four accumulators in and out, element 2·rh + rl.
// CHECK-NEXT:     %[[C00:.*]] = loop.load %acc[%[[WI]], %[[WJ]], %[[G]], %[[T]], 0, 0, 0, 0]
// CHECK-NEXT:     %[[C01:.*]] = loop.load %acc[%[[WI]], %[[WJ]], %[[G]], %[[T]], 0, 0, 0, 1]
// CHECK-NEXT:     %[[C10:.*]] = loop.load %acc[%[[WI]], %[[WJ]], %[[G]], %[[T]], 0, 1, 0, 0]
// CHECK-NEXT:     %[[C11:.*]] = loop.load %acc[%[[WI]], %[[WJ]], %[[G]], %[[T]], 0, 1, 0, 1]
// CHECK-NEXT:     %[[D0:.*]], %[[D1:.*]], %[[D2:.*]], %[[D3:.*]] = mma.sync(%[[A0]], %[[A1]], %[[A2]], %[[A3]]) * (%[[B0]], %[[B1]]) + (%[[C00]], %[[C01]], %[[C10]], %[[C11]]) : vector<2xbf16>
// CHECK-NEXT:     loop.store %[[D0]], %acc[%[[WI]], %[[WJ]], %[[G]], %[[T]], 0, 0, 0, 0]
// CHECK-NEXT:     loop.store %[[D1]], %acc[%[[WI]], %[[WJ]], %[[G]], %[[T]], 0, 0, 0, 1]
// CHECK-NEXT:     loop.store %[[D2]], %acc[%[[WI]], %[[WJ]], %[[G]], %[[T]], 0, 1, 0, 0]
// CHECK-NEXT:     loop.store %[[D3]], %acc[%[[WI]], %[[WJ]], %[[G]], %[[T]], 0, 1, 0, 1]
// CHECK:          mma.sync(%[[A0]], %[[A1]], %[[A2]], %[[A3]]) * (%[[B2]], %[[B3]])
// CHECK-COUNT-2:  mma.sync(
// CHECK-NOT:      mma.sync(
// CHECK:        } {llmopt.role = "update", llmopt.layout = "mma"}
// CHECK-NOT:    scf.for %kk
// CHECK-NOT:    arith.extf

// NUM:       mma-fragments {{.*}} ok
// NUM:       tile-to-kernel {{.*}} ok
// NUM-NOT:   FAIL

// CUDA:      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];" : "=r"(fa0), "=r"(fa01), "=r"(fa02), "=r"(fa03) : "r"((unsigned int)__cvta_generic_to_shared(&stage[
// CUDA:      asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};" : "=f"(mma0), "=f"(mma1), "=f"(mma2), "=f"(mma3) : "r"(fa0), "r"(fa01), "r"(fa02), "r"(fa03), "r"(fb0), "r"(fb01), "f"(acc[0]), "f"(acc[1]), "f"(acc[4]), "f"(acc[5]));
// CUDA-NOT:  __bfloat162float

// F16:       mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32

// One 8-column piece a warp: W's fragments by ldmatrix.x2 (lanes 0-15 give the rows).
// X2:        mma.ldmatrix x4 %stage[
// X2:        mma.ldmatrix x4 %stage[
// X2:        %[[B0:fb0]], %[[B1:fb0_1]] = mma.ldmatrix x2 %stage_1[%{{.*}}, %{{.*}}] : memref<16x40xbf16>
// X2:        mma.sync({{.*}}) * (%[[B0]], %[[B1]])
// X2:        mma.sync({{.*}}) * (%[[B0]], %[[B1]])
// X2-NOT:    mma.sync(

// A product summed in bf16 (not f32) keeps its FMA loop: the tensor cores sum in f32.
// BF16SUM-NOT: mma.
// BF16SUM:     arith.mulf %{{.*}}, %{{.*}} : bf16

// The named pipeline on a bf16 projection: the heuristics choose the tensor-core layout,
// mma-fragments the m16n8k16 products.
// PIPE:      ldmatrix.sync.aligned.m8n8.x4.shared.b16
// PIPE:      mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// PIPE-NOT:  __bfloat162float(frag

builtin.module {
  func.func @forward(%proj.weight: memref<80x64xbf16> {llmopt.param = "proj.weight"}, %x: memref<1x100x64xbf16> {llmopt.input = "x"}) -> memref<1x100x80xbf16> {
    %0 = memref.alloc() : memref<1x100x80xbf16>
    tile.kernel @elementwise_5 grid [6, 1, 1] block [128, 1, 1] (%1 = %0 : memref<1x100x80xbf16>, %2 = %proj.weight : memref<80x64xbf16>, %3 = %x : memref<1x100x64xbf16>) {
      tile.forall (%b0, %bm, %bn) in [1, 2, 3] over blocks {
        %acc = tile.alloc registers : memref<2x2x8x4x2x2x2x2xf32>
        tile.forall (%wi, %wj, %g, %t) in [2, 2, 8, 4] over block_threads {
          loop.for %i = 0 to 2 {
            loop.for %rh = 0 to 2 {
              loop.for %j = 0 to 2 {
                loop.for %rl = 0 to 2 {
                  %4 = arith.constant 0.000000e+00 : f32
                  loop.store %4, %acc[%wi, %wj, %g, %t, %i, %rh, %j, %rl] : memref<2x2x8x4x2x2x2x2xf32>
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "init", llmopt.layout = "mma"}
        %5 = arith.constant 0 : index
        %6 = arith.constant 64 : index
        %7 = arith.constant 1 : index
        %stage = tile.alloc shared : memref<3x64x40xbf16>
        %stage_1 = tile.alloc shared : memref<3x32x40xbf16>
        %8 = arith.constant 0 : index
        %9 = arith.constant 2 : index
        %10 = arith.constant 1 : index
        %11 = arith.constant 32 : index
        %12 = arith.constant 0 : index
        %13 = arith.constant 2 : index
        %14 = arith.constant 0 : index
        %15 = arith.constant 0 : index
        %16 = arith.constant 1 : index
        %17 = arith.constant 2 : index
        kernel.barrier
        scf.for %p = %15 to %17 step %16 {
          tile.forall (%c0, %c1) in [64, 4] over block_threads {
            tile.async_copy %3[0, (%c0 + (%bm * 64)), ((%p * 32) + (%c1 * 8))] clamp to %stage[%p, %c0, (%c1 * 8)] count 8 : memref<1x100x64xbf16> to memref<3x64x40xbf16>
          } {llmopt.role = "stage"}
          tile.forall (%c0_1, %c1_1) in [32, 4] over block_threads {
            tile.async_copy %2[(%c0_1 + (%bn * 32)), ((%p * 32) + (%c1_1 * 8))] clamp to %stage_1[%p, %c0_1, (%c1_1 * 8)] count 8 : memref<80x64xbf16> to memref<3x32x40xbf16>
          } {llmopt.role = "stage"}
          tile.async_commit
        } {unroll = 0 : i64, llmopt.role = "prologue"}
        %18, %19, %20 = scf.for %k0 = %8 to %9 step %10 iter_args(%slot = %12, %fill_slot = %13, %fetch = %14) -> (index, index, index) {
          tile.async_wait 1
          kernel.barrier
          tile.forall (%c0_2, %c1_2) in [64, 4] over block_threads {
            tile.async_copy %3[0, (%c0_2 + (%bm * 64)), ((%fetch * 32) + (%c1_2 * 8))] clamp to %stage[%fill_slot, %c0_2, (%c1_2 * 8)] count 8 : memref<1x100x64xbf16> to memref<3x64x40xbf16>
          } {llmopt.role = "stage"}
          tile.forall (%c0_3, %c1_3) in [32, 4] over block_threads {
            tile.async_copy %2[(%c0_3 + (%bn * 32)), ((%fetch * 32) + (%c1_3 * 8))] clamp to %stage_1[%fill_slot, %c0_3, (%c1_3 * 8)] count 8 : memref<80x64xbf16> to memref<3x32x40xbf16>
          } {llmopt.role = "stage"}
          tile.async_commit
          scf.for %kk = %8 to %11 step %10 {
            %21 = arith.muli %k0, %11 : index
            %k = arith.addi %21, %kk : index
            tile.forall (%wi_1, %wj_1, %g_1, %t_1) in [2, 2, 8, 4] over block_threads {
              loop.for %i_1 = 0 to 2 {
                loop.for %rh_1 = 0 to 2 {
                  loop.for %j_1 = 0 to 2 {
                    loop.for %rl_1 = 0 to 2 {
                      %22 = loop.load %stage[%slot, ((((%wi_1 * 32) + %g_1) + (%i_1 * 16)) + (%rh_1 * 8)), %kk] : memref<3x64x40xbf16>
                      %23 = loop.load %stage_1[%slot, ((((%wj_1 * 16) + (%t_1 * 2)) + (%j_1 * 8)) + %rl_1), %kk] : memref<3x32x40xbf16>
                      %24 = arith.extf %22 : bf16 to f32
                      %25 = arith.extf %23 : bf16 to f32
                      %26 = arith.mulf %24, %25 : f32
                      %27 = loop.load %acc[%wi_1, %wj_1, %g_1, %t_1, %i_1, %rh_1, %j_1, %rl_1] : memref<2x2x8x4x2x2x2x2xf32>
                      %28 = arith.addf %27, %26 : f32
                      loop.store %28, %acc[%wi_1, %wj_1, %g_1, %t_1, %i_1, %rh_1, %j_1, %rl_1] : memref<2x2x8x4x2x2x2x2xf32>
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
        tile.forall (%wi_2, %wj_2, %g_2, %t_2) in [2, 2, 8, 4] over block_threads {
          loop.for %i_2 = 0 to 2 {
            loop.for %rh_2 = 0 to 2 {
              loop.for %j_2 = 0 to 2 {
                loop.for %rl_2 = 0 to 2 {
                  %43 = arith.constant 0 : index
                  %44 = arith.constant 32 : index
                  %45 = arith.muli %bn, %44 : index
                  %46 = arith.addi %43, %45 : index
                  %47 = arith.constant 16 : index
                  %48 = arith.muli %wj_2, %47 : index
                  %49 = arith.addi %46, %48 : index
                  %50 = arith.constant 2 : index
                  %51 = arith.muli %t_2, %50 : index
                  %52 = arith.addi %49, %51 : index
                  %53 = arith.constant 8 : index
                  %54 = arith.muli %j_2, %53 : index
                  %55 = arith.addi %52, %54 : index
                  %56 = arith.addi %55, %rl_2 : index
                  %57 = arith.constant 0 : index
                  %58 = arith.constant 64 : index
                  %59 = arith.muli %bm, %58 : index
                  %60 = arith.addi %57, %59 : index
                  %61 = arith.constant 32 : index
                  %62 = arith.muli %wi_2, %61 : index
                  %63 = arith.addi %60, %62 : index
                  %64 = arith.addi %63, %g_2 : index
                  %65 = arith.constant 16 : index
                  %66 = arith.muli %i_2, %65 : index
                  %67 = arith.addi %64, %66 : index
                  %68 = arith.constant 8 : index
                  %69 = arith.muli %rh_2, %68 : index
                  %70 = arith.addi %67, %69 : index
                  %71 = arith.constant 100 : index
                  %72 = arith.cmpi ult, %70, %71 : index
                  %73 = arith.constant 80 : index
                  %74 = arith.cmpi ult, %56, %73 : index
                  %75 = arith.andi %72, %74 : i1
                  scf.if %75 {
                    %sum = loop.load %acc[%wi_2, %wj_2, %g_2, %t_2, %i_2, %rh_2, %j_2, %rl_2] : memref<2x2x8x4x2x2x2x2xf32>
                    %76 = arith.truncf %sum : f32 to bf16
                    loop.store %76, %1[0, (((((%bm * 64) + (%wi_2 * 32)) + %g_2) + (%i_2 * 16)) + (%rh_2 * 8)), (((((%bn * 32) + (%wj_2 * 16)) + (%t_2 * 2)) + (%j_2 * 8)) + %rl_2)] : memref<1x100x80xbf16>
                  }
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "epilogue", llmopt.layout = "mma"}
      }
    }
    func.return %0 : memref<1x100x80xbf16>
  }
}


// W stored [k, n] (Inputs/mma-fragments-halves-trans.mlir, as flash-attention stages V):
// %kk is the tile's row, so W's fragments come from ldmatrix.trans of its rows
// 16·kq + 8·((g floordiv 2) mod 2) + (lane mod 8) at columns 16·wj + 8·(g floordiv 4) (two
// 8-column pieces: x4); x's fragments as above.
// TRANS:      %[[KQ16:.*]] = arith.muli %kq, %{{.*}} : index
// TRANS:      mma.ldmatrix x4 %stage[
// TRANS:      mma.ldmatrix x4 %stage[
// TRANS:      %[[B0:fb0]], %[[B1:fb0_1]], %[[B2:fb1]], %[[B3:fb1_1]] = mma.ldmatrix x4 trans %stage_1[%{{.*}}, %{{.*}}] : memref<32x40xbf16>
// TRANS:      mma.sync({{.*}}) * (%[[B0]], %[[B1]])
// TRANS:      mma.sync({{.*}}) * (%[[B2]], %[[B3]])
// TRANS:      mma.sync({{.*}}) * (%[[B0]], %[[B1]])
// TRANS:      mma.sync({{.*}}) * (%[[B2]], %[[B3]])
// TRANS-NOT:  mma.sync(
// TRANSCUDA:  ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16

// A written by the same warps in the accumulator layout, one warp across (P of the flash
// kernel with row_warps): the writer also keeps its values in registers, the A fragments are
// packed from them (pairs of columns 2t, 2t + 1 of rows g, g + 8 and of the next 8 columns),
// and the shared %p, its store and its ldmatrix are gone.
// REGS:       %p_regs = tile.alloc registers : memref<2x1x8x4x1x2x4x2xbf16>
// REGS-NOT:   %p = tile.alloc
// REGS:       %e = loop.load %xa[
// REGS-NEXT:    loop.store %e, %p_regs[%wi_1, %wj_1, %g_1, %t_1, %i_1, %rh_1, %j_1, %rl_1]
// REGS-NOT:     loop.store %e, %p[
// REGS:       scf.for %kq
// REGS:         %[[L0:.*]] = loop.load %p_regs[%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, 0, 0, (%kq * 2), 0]
// REGS-NEXT:    %[[H0:.*]] = loop.load %p_regs[%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, 0, 0, (%kq * 2), 1]
// REGS-NEXT:    %fa0 = mma.pack %[[L0]], %[[H0]] : bf16
// REGS:         %fa0_1 = mma.pack
// REGS:         loop.load %p_regs[%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, 0, 0, ((%kq * 2) + 1), 0]
// REGS:         %fa0_2 = mma.pack
// REGS:         %fa0_3 = mma.pack
// REGS-NOT:     mma.ldmatrix x4 %p
// REGS:         mma.ldmatrix x4 trans %vs
// REGS:         mma.sync(%fa0, %fa0_1, %fa0_2, %fa0_3)

// REGSCUDA:   __nv_bfloat16 p_regs[16];
// REGSCUDA:   const unsigned int fa0 = (unsigned int)__bfloat16_as_ushort(p_regs[{{.*}}]) | ((unsigned int)__bfloat16_as_ushort(p_regs[{{.*}}]) << 16u);
// REGSCUDA-NOT: __shared__ {{.*}} p[

// The same P written as f32 values rounded to bf16 (the flash kernel's exp): the registers
// keep the f32 values and each fragment rounds its pair where it packs it, which
// kernel-to-cuda writes as one paired conversion.
// ROUNDED:       %p_regs = tile.alloc registers : memref<2x1x8x4x1x2x4x2xf32>
// ROUNDED:       %e = loop.load %xa[
// ROUNDED-NEXT:  %er = arith.truncf %e : f32 to bf16
// ROUNDED-NEXT:  loop.store %e, %p_regs[
// ROUNDED:       %[[L0:.*]] = loop.load %p_regs[{{.*}}, (%kq * 2), 0]
// ROUNDED-NEXT:  %[[LR:.*]] = arith.truncf %[[L0]] : f32 to bf16
// ROUNDED-NEXT:  %[[H0:.*]] = loop.load %p_regs[{{.*}}, (%kq * 2), 1]
// ROUNDED-NEXT:  %[[HR:.*]] = arith.truncf %[[H0]] : f32 to bf16
// ROUNDED-NEXT:  %fa0 = mma.pack %[[LR]], %[[HR]] : bf16

// ROUNDEDCUDA:     float p_regs[16];
// ROUNDEDCUDA:     asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(fa0) : "f"(p_regs[[[HI:.*]]]), "f"(p_regs[[[LO:.*]]]));
// ROUNDEDCUDA-NOT: __bfloat16_as_ushort
