// RUN: llm-opt %s -p mma-fragments | filecheck %s
// RUN: llm-opt %s -p 'mma-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'mma-fragments{order=1 promote=1},tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'mma-fragments{order=1 promote=1}' | filecheck %s --check-prefix=CHAIN
// RUN: llm-opt %s -p 'mma-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' -t cuda | filecheck %s --check-prefix=CUDA
// RUN: llm-opt %s -p 'mma-fragments{split=1}' | filecheck %s --check-prefix=SPLIT1
// RUN: llm-opt %s -p 'mma-fragments{split=1},tile-to-kernel,canonicalize,cse,kernel-to-cuda' -t cuda | filecheck %s --check-prefix=CUDA1
// RUN: llm-opt %s -p 'mma-fragments{split=2}' | filecheck %s --check-prefix=SPLIT2
// RUN: llm-opt %s -p 'mma-fragments{split=1},tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'mma-fragments{split=2},tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: not llm-opt %s -p 'mma-fragments{split=4}' 2>&1 | filecheck %s --check-prefix=BADSPLIT
// RUN: not llm-opt %s -p 'mma-fragments{terms=1},tile-to-kernel' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=TF32
// RUN: not llm-opt %s -p 'mma-fragments{promote=3}' 2>&1 | filecheck %s --check-prefix=BAD
// RUN: llm-opt %S/vector-fragments.mlir -p mma-fragments | filecheck %s --check-prefix=SKIP
// RUN: not llm-opt %s -p 'mma-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda{arch=sm_75}' 2>&1 | filecheck %s --check-prefix=SM75
// RUN: llm-opt %S/Inputs/mma-fragments-kn.mlir -p mma-fragments | filecheck %s --check-prefix=KN
// RUN: llm-opt %S/Inputs/mma-fragments-kn.mlir -p 'mma-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// A register-tiled x·Wᵀ + r (M=64 N=64 K=32) in the tensor-core layout — register-tile{bm=32
// bn=32 tm=4 tn=4 blocked=3}: two warps of 32×16 outputs a block, lane 4g+t holding rows g and
// g+8 and columns 2t and 2t+1 of each 16×8 fragment — after stage-inputs{bk=16}, async-copy and
// pad-shared (rows of 16 padded to 20 words). mma-fragments loads each operand's fragments,
// splits them into TF32 hi and lo parts (by default hi = the value with its low 13 bits
// cleared, lo = the exact rest, which the tensor core truncates to TF32), runs three mma.sync per 16×8×8 product into partial
// sums, and adds those to the accumulators in f32 once per chunk (promote = 2 steps of 8).

// Registers: per thread 2×4 A values and 2×2 B values, each hi and lo; 2×2×4 partial sums.
// CHECK:      %[[AH:a_hi]] = tile.alloc registers : memref<1x2x8x4x2x4xf32>
// CHECK-NEXT: %[[AL:a_lo]] = tile.alloc registers : memref<1x2x8x4x2x4xf32>
// CHECK-NEXT: %[[BH:b_hi]] = tile.alloc registers : memref<1x2x8x4x2x2xf32>
// CHECK-NEXT: %[[BL:b_lo]] = tile.alloc registers : memref<1x2x8x4x2x2xf32>
// CHECK-NEXT: %[[P:part]] = tile.alloc registers : memref<1x2x8x4x2x2x4xf32>
// CHECK:      scf.for %kqo = %{{.*}} to %[[ONE:.*]] step
// CHECK-NEXT:   tile.forall (%[[WI:.*]], %[[WJ:.*]], %[[G:.*]], %[[T:.*]]) in [1, 2, 8, 4] over block_threads {
// CHECK:          loop.store %{{.*}}, %[[P]][%[[WI]], %[[WJ]], %[[G]], %[[T]], %{{.*}}, %{{.*}}, 0]
// CHECK:        scf.for %kqi =
// CHECK:          %kq = arith.addi
// The A fragment: rows g + 8·(q mod 2), columns t + 4·(q floordiv 2) of the 8-step kq.
// CHECK:          %[[X:.*]] = loop.load %stage[%slot, ((((%[[WI]] * 32) + %[[G]]) + (%{{.*}} * 16)) + ((%q mod 2) * 8)), (((%kq * 8) + %[[T]]) + ((%q floordiv 2) * 4))]
// CHECK-NEXT:     %[[XB:.*]] = arith.bitcast %[[X]] : f32 to i32
// CHECK-NEXT:     %[[MASK:.*]] = arith.constant -8192 : i32
// CHECK-NEXT:     %[[XC:.*]] = arith.andi %[[XB]], %[[MASK]] : i32
// CHECK-NEXT:     %[[XH:.*]] = arith.bitcast %[[XC]] : i32 to f32
// CHECK-NEXT:     loop.store %[[XH]], %[[AH]]
// CHECK-NEXT:     %[[XL:.*]] = arith.subf %[[X]], %[[XH]] : f32
// CHECK-NEXT:     loop.store %[[XL]], %[[AL]]
// The B fragment: row n = 16·wj + 8·j + g of W, columns t and t + 4 (2t + rl became g).
// CHECK:          loop.load %stage_1[%slot, (((%[[WJ]] * 16) + (%{{.*}} * 8)) + %[[G]]), (((%kq * 8) + %[[T]]) + (%{{.*}} * 4))]
// Three products, small terms first, each over every (i, j).
// CHECK-COUNT-3:  = mma.sync(
// The partial sums join the accumulators in f32, element 2·rh + rl.
// CHECK:        %[[S:.*]] = loop.load %[[P]][%[[WI]], %[[WJ]], %[[G]], %[[T]], %{{.*}}, %{{.*}}, 3]
// CHECK:        %[[OLD:.*]] = loop.load %acc[%[[WI]], %[[WJ]], %[[G]], %[[T]], %{{.*}}, 1, %{{.*}}, 1]
// CHECK-NEXT:   %[[NEW:.*]] = arith.addf %[[OLD]], %[[S]] : f32
// CHECK-NEXT:   loop.store %[[NEW]], %acc
// CHECK:      } {llmopt.role = "update", llmopt.layout = "mma"}
// CHECK-NOT:  scf.for %kk

// order=1 promote=1: each (i, j)'s three products from zero, straight into the accumulators.
// CHAIN-NOT:   part
// CHAIN:       scf.for %kq =
// CHAIN:       loop.store {{.*}} %b_lo
// CHAIN:       loop.for %[[I:.*]] = 0 to 2 {
// CHAIN-NEXT:    loop.for %[[J:.*]] = 0 to 2 {
// CHAIN:           %[[Z:.*]] = arith.constant 0.000000e+00 : f32
// CHAIN:           %[[D0:.*]], %[[D1:.*]], %[[D2:.*]], %[[D3:.*]] = mma.sync({{.*}}) * ({{.*}}) + (%[[Z]], %[[Z]], %[[Z]], %[[Z]])
// CHAIN:           %[[E0:.*]], %[[E1:.*]], %[[E2:.*]], %[[E3:.*]] = mma.sync({{.*}}) * ({{.*}}) + (%[[D0]], %[[D1]], %[[D2]], %[[D3]])
// CHAIN:           %[[F0:.*]], %{{.*}}, %{{.*}}, %{{.*}} = mma.sync({{.*}}) * ({{.*}}) + (%[[E0]], %[[E1]], %[[E2]], %[[E3]])
// CHAIN-NEXT:      %[[OLD:.*]] = loop.load %acc
// CHAIN-NEXT:      arith.addf %[[OLD]], %[[F0]] : f32

// NUM:       mma-fragments {{.*}} ok
// NUM:       tile-to-kernel {{.*}} ok
// NUM-NOT:   FAIL

// CUDA:      __align__(16) float a_hi[8];
// CUDA:      __align__(16) float part[16];
// CUDA-NOT:  cvt.rna
// CUDA:      const float [[V:v[0-9]+]] = __int_as_float(__float_as_int([[X:v[0-9]+]]) & -8192);
// CUDA:      a_lo[{{.*}}] = [[X]] - [[V]];
// CUDA:      asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};" : "=f"(mma0), "=f"(mma1), "=f"(mma2), "=f"(mma3) : "r"(__float_as_uint(

// split=1: both parts rounded to the nearest TF32 (cvt.rna.tf32.f32).
// SPLIT1:      %[[X:.*]] = loop.load %stage[
// SPLIT1-NEXT: %[[XH:.*]] = mma.to_tf32 %[[X]]
// SPLIT1-NEXT: loop.store %[[XH]], %a_hi
// SPLIT1-NEXT: %[[XR:.*]] = arith.subf %[[X]], %[[XH]] : f32
// SPLIT1-NEXT: %[[XL:.*]] = mma.to_tf32 %[[XR]]
// SPLIT1-NEXT: loop.store %[[XL]], %a_lo
// CUDA1:       asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(tf32_bits) : "f"(
// CUDA1:       const float tf32 = __uint_as_float(tf32_bits);

// split=2: hi rounded, lo left for the tensor core to truncate.
// SPLIT2:      %[[X:.*]] = loop.load %stage[
// SPLIT2-NEXT: %[[XH:.*]] = mma.to_tf32 %[[X]]
// SPLIT2-NEXT: loop.store %[[XH]], %a_hi
// SPLIT2-NEXT: %[[XL:.*]] = arith.subf %[[X]], %[[XH]] : f32
// SPLIT2-NEXT: loop.store %[[XL]], %a_lo

// BADSPLIT:    llm-opt: error: invalid options for pass 'mma-fragments': split must be one of 1, 2, 3 or 0 (not set), got 4

// One TF32 product instead of three is not an f32 product: --check-numerics says so.
// TF32:      mma-fragments {{.*}} FAIL
// TF32:      error: --check-numerics: pass 'mma-fragments' changed the result

// Turing has no TF32 mma.sync: kernel-to-cuda says which kernel needs sm_80.
// SM75:      kernel-to-cuda: kernel 'elementwise_5' uses mma.sync, which needs sm_80 or newer; the target is sm_75

// BAD:       mma-fragments: promote must divide the chunk's 2 steps of 8, got 3

// A B operand stored K first (x·W with W [K, N]; attention's P·V reads V so): the B fragment
// reads rows t and t + 4 of the 8-step kq and column g of its 8 (2·t + rl became g).
// KN:        loop.load %stage_1[%slot, (((%kq * 8) + %[[T:t_[0-9]+]]) + (%{{.*}} * 4)), (((%wj_{{[0-9]+}} * 16) + (%{{.*}} * 8)) + %g_{{[0-9]+}})]
// KN-COUNT-3: mma.sync(

// A cyclic register tile (not the tensor-core layout) is left to vector-fragments.
// SKIP-NOT:  mma.
// SKIP:      tile.kernel
// SKIP-NOT:  mma.

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
        %19, %20, %21 = scf.for %k0 = %9 to %10 step %11 iter_args(%slot = %13, %fill_slot = %14, %fetch = %15) -> (index, index, index) {
          tile.async_wait 1
          kernel.barrier
          tile.forall (%c0_2, %c1_2) in [32, 4] over block_threads {
            tile.async_copy %4[0, (%c0_2 + (%bm * 32)), ((%fetch * 16) + (%c1_2 * 4))] to %stage[%fill_slot, %c0_2, (%c1_2 * 4)] count 4 : memref<1x64x32xf32> to memref<3x32x20xf32>
          } {llmopt.role = "stage"}
          tile.forall (%c0_3, %c1_3) in [32, 4] over block_threads {
            tile.async_copy %3[(%c0_3 + (%bn * 32)), ((%fetch * 16) + (%c1_3 * 4))] to %stage_1[%fill_slot, %c0_3, (%c1_3 * 4)] count 4 : memref<64x32xf32> to memref<3x32x20xf32>
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
          %35 = arith.addi %fill_slot, %29 : index
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
