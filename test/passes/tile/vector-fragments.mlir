// RUN: llm-opt %s -p vector-fragments | filecheck %s
// RUN: llm-opt %s -p 'vector-fragments,tile-to-kernel' | filecheck %s --check-prefix=KERNEL
// RUN: llm-opt %s -p 'vector-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'vector-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' -t cuda | filecheck %s --check-prefix=CUDA
// RUN: llm-opt %s -p 'vector-fragments{kv_order=2}' | filecheck %s --check-prefix=INNER
// RUN: llm-opt %s -p 'vector-fragments{kv_order=2},tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// The K loop of a register-tiled linear (M=32 N=128 K=64, chunks of 16, 2x4 micro-tiles) after
// async-copy and pad-shared: both tiles keep the global buffers' order, rows of 16 padded to
// 20 words. vector-fragments reads each thread's rows of both tiles 4 elements at a time into
// registers and runs the multiply-adds from there, in the same order. A second kernel reads
// rows of 9 words, which are not 16-byte aligned: it is left alone.

// The fragments: per thread, 2 rows of x and 4 rows of W, 4 elements each.
// CHECK:        %[[FA:frag]] = tile.alloc registers : memref<16x16x2x4xf32>
// CHECK-NEXT:   %[[FB:frag_1]] = tile.alloc registers : memref<16x16x4x4xf32>
// CHECK-NEXT:   scf.for %k0 =
// CHECK:          scf.for %kq = %{{.*}} to %[[FOUR:.*]] step %{{.*}} {
// CHECK-NEXT:       tile.forall (%[[TI:.*]], %[[TJ:.*]]) in [16, 16] over block_threads {
// CHECK-NEXT:         loop.for %[[MI:.*]] = 0 to 2 {
// CHECK-NEXT:           tile.copy %stage[(%k0 mod 3), ((%[[MI]] * 16) + %[[TI]]), (%kq * 4)] to %[[FA]][%[[TI]], %[[TJ]], %[[MI]], 0] count 4 : memref<3x32x20xf32> to memref<16x16x2x4xf32>
// CHECK-NEXT:         } {unroll = 0 : i64}
// CHECK-NEXT:         loop.for %[[NJ:.*]] = 0 to 4 {
// CHECK-NEXT:           tile.copy %stage_1[(%k0 mod 3), ((%[[NJ]] * 16) + %[[TJ]]), (%kq * 4)] to %[[FB]][%[[TI]], %[[TJ]], %[[NJ]], 0] count 4 : memref<3x64x20xf32> to memref<16x16x4x4xf32>
// CHECK-NEXT:         } {unroll = 0 : i64}
// The old body, once per element of the fragments, in order (kk = 4 kq + kv).
// CHECK:              scf.for %kv = {{.*}} {
// CHECK:                %kk = arith.addi %{{.*}}, %kv : index
// CHECK:                loop.for %[[MI2:.*]] = 0 to 2 {
// CHECK-NEXT:             loop.for %[[NJ2:.*]] = 0 to 4 {
// CHECK-NEXT:               %{{.*}} = loop.load %[[FA]][%[[TI]], %[[TJ]], %[[MI2]], %kv] : memref<16x16x2x4xf32>
// CHECK-NEXT:               %{{.*}} = loop.load %[[FB]][%[[TI]], %[[TJ]], %[[NJ2]], %kv] : memref<16x16x4x4xf32>
// CHECK:                  } {unroll = 0 : i64}
// CHECK-NEXT:             } {unroll = 0 : i64}
// CHECK-NEXT:           } {unroll = 0 : i64}
// CHECK-NEXT:     } {llmopt.role = "update"}
// CHECK-NEXT:   } {unroll = 0 : i64}
// CHECK-NEXT: } {llmopt.role = "k_loop", llmopt.prefetch = "async3"}
// Rows of 9 words: unchanged.
// CHECK:      tile.kernel @odd_pitch
// CHECK-NOT:  tile.copy
// CHECK:      scf.for %kk =
// CHECK:        loop.load %s[((%{{.*}} * -1) + 3), %kk] : memref<4x9xf32>

// Registers become per-thread arrays; the copies keep their count.
// KERNEL:       %frag = kernel.local : memref<2x4xf32>
// KERNEL:       %frag_1 = kernel.local : memref<4x4xf32>
// KERNEL:       kernel.copy %stage[{{.*}}] to %frag[{{.*}}] count 4 : memref<3x32x20xf32> to memref<2x4xf32>

// NUM:       vector-fragments {{.*}} ok
// NUM:       tile-to-kernel {{.*}} ok
// NUM-NOT:   FAIL

// With kv_order=2 the loop over a fragment's elements goes inside the micro-tile's loops:
// each accumulator takes its 4 multiply-adds in a row, in the same order as before.
// INNER:            tile.copy %stage_1
// INNER:            loop.for %[[MI:.*]] = 0 to 2 {
// INNER-NEXT:         loop.for %[[NJ:.*]] = 0 to 4 {
// INNER-NEXT:           scf.for %kv = {{.*}} {
// INNER:                  %kk = arith.addi %{{.*}}, %kv : index
// INNER:                  loop.load %frag[%{{.*}}, %{{.*}}, %[[MI]], %kv]
// INNER-NEXT:             loop.load %frag_1[%{{.*}}, %{{.*}}, %[[NJ]], %kv]
// INNER:                  loop.store %{{.*}}, %acc[%{{.*}}, %{{.*}}, %[[MI]], %[[NJ]]]
// INNER-NEXT:           } {unroll = 0 : i64}
// INNER-NEXT:         } {unroll = 0 : i64}
// INNER-NEXT:       } {unroll = 0 : i64}
// INNER-NEXT:     } {llmopt.role = "update"}

// CUDA:      __align__(16) float frag[8];
// CUDA:      ((float4*)&frag[
// CUDA-SAME: ])[0] = ((float4*)&stage[
builtin.module {
  func.func @forward(%proj.weight: memref<128x64xf32> {llmopt.param = "proj.weight"}, %x: memref<1x32x64xf32> {llmopt.input = "x"}, %r: memref<1x32x128xf32> {llmopt.input = "r"}, %u: memref<4x8xf32> {llmopt.input = "u"}) -> (memref<1x32x128xf32>, memref<4xf32>) {
    %0 = memref.alloc() : memref<1x32x128xf32>
    tile.kernel @elementwise_5 grid [2, 1, 1] block [256, 1, 1] (%1 = %r : memref<1x32x128xf32>, %2 = %0 : memref<1x32x128xf32>, %3 = %proj.weight : memref<128x64xf32>, %4 = %x : memref<1x32x64xf32>) {
      tile.forall (%b0, %bm, %bn) in [1, 1, 2] over blocks {
        %acc = tile.alloc registers : memref<16x16x2x4xf32>
        tile.forall (%ti, %tj) in [16, 16] over block_threads {
          loop.for %mi = 0 to 2 {
            loop.for %nj = 0 to 4 {
              %5 = arith.constant 0.000000e+00 : f32
              loop.store %5, %acc[%ti, %tj, %mi, %nj] : memref<16x16x2x4xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "init"}
        %6 = arith.constant 0 : index
        %7 = arith.constant 64 : index
        %8 = arith.constant 1 : index
        %stage = tile.alloc shared : memref<3x32x20xf32>
        %stage_1 = tile.alloc shared : memref<3x64x20xf32>
        %9 = arith.constant 0 : index
        %10 = arith.constant 4 : index
        %11 = arith.constant 1 : index
        %12 = arith.constant 16 : index
        %13 = arith.constant 0 : index
        %14 = arith.constant 1 : index
        %15 = arith.constant 2 : index
        kernel.barrier
        scf.for %p = %13 to %15 step %14 {
          tile.forall (%c0, %c1) in [32, 4] over block_threads {
            tile.async_copy %4[0, (%c0 + (%bm * 32)), ((%p * 16) + (%c1 * 4))] to %stage[%p, %c0, (%c1 * 4)] count 4 : memref<1x32x64xf32> to memref<3x32x20xf32>
          } {llmopt.role = "stage"}
          tile.forall (%c0_1, %c1_1) in [64, 4] over block_threads {
            tile.async_copy %3[(%c0_1 + (%bn * 64)), ((%p * 16) + (%c1_1 * 4))] to %stage_1[%p, %c0_1, (%c1_1 * 4)] count 4 : memref<128x64xf32> to memref<3x64x20xf32>
          } {llmopt.role = "stage"}
          tile.async_commit
        } {unroll = 0 : i64, llmopt.role = "prologue"}
        scf.for %k0 = %9 to %10 step %11 {
          tile.async_wait 1
          kernel.barrier
          tile.forall (%c0_2, %c1_2) in [32, 4] over block_threads {
            tile.async_copy %4[0, (%c0_2 + (%bm * 32)), ((((%k0 * 16) + (%c1_2 * 4)) + (((%k0 + 2) floordiv 4) * -64)) + 32)] to %stage[((%k0 + 2) mod 3), %c0_2, (%c1_2 * 4)] count 4 : memref<1x32x64xf32> to memref<3x32x20xf32>
          } {llmopt.role = "stage"}
          tile.forall (%c0_3, %c1_3) in [64, 4] over block_threads {
            tile.async_copy %3[(%c0_3 + (%bn * 64)), ((((%k0 * 16) + (%c1_3 * 4)) + (((%k0 + 2) floordiv 4) * -64)) + 32)] to %stage_1[((%k0 + 2) mod 3), %c0_3, (%c1_3 * 4)] count 4 : memref<128x64xf32> to memref<3x64x20xf32>
          } {llmopt.role = "stage"}
          tile.async_commit
          scf.for %kk = %9 to %12 step %11 {
            %16 = arith.muli %k0, %12 : index
            %k = arith.addi %16, %kk : index
            tile.forall (%ti_1, %tj_1) in [16, 16] over block_threads {
              loop.for %mi_1 = 0 to 2 {
                loop.for %nj_1 = 0 to 4 {
                  %17 = loop.load %stage[(%k0 mod 3), ((%mi_1 * 16) + %ti_1), %kk] : memref<3x32x20xf32>
                  %18 = loop.load %stage_1[(%k0 mod 3), ((%nj_1 * 16) + %tj_1), %kk] : memref<3x64x20xf32>
                  %19 = arith.mulf %17, %18 : f32
                  %20 = loop.load %acc[%ti_1, %tj_1, %mi_1, %nj_1] : memref<16x16x2x4xf32>
                  %21 = arith.addf %20, %19 : f32
                  loop.store %21, %acc[%ti_1, %tj_1, %mi_1, %nj_1] : memref<16x16x2x4xf32>
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {llmopt.role = "update"}
          } {unroll = 0 : i64}
        } {llmopt.role = "k_loop", llmopt.prefetch = "async3"}
        tile.async_wait 0
        tile.forall (%ti_2, %tj_2) in [16, 16] over block_threads {
          loop.for %mi_2 = 0 to 2 {
            loop.for %nj_2 = 0 to 4 {
              %sum = loop.load %acc[%ti_2, %tj_2, %mi_2, %nj_2] : memref<16x16x2x4xf32>
              %22 = loop.load %1[0, (((%bm * 32) + (%mi_2 * 16)) + %ti_2), (((%bn * 64) + (%nj_2 * 16)) + %tj_2)] : memref<1x32x128xf32>
              %23 = arith.addf %sum, %22 : f32
              loop.store %23, %2[0, (((%bm * 32) + (%mi_2 * 16)) + %ti_2), (((%bn * 64) + (%nj_2 * 16)) + %tj_2)] : memref<1x32x128xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "epilogue"}
      }
    }
    %rows = memref.alloc() : memref<4xf32>
    tile.kernel @odd_pitch grid [1, 1, 1] block [4, 1, 1] (%a = %u : memref<4x8xf32>, %o = %rows : memref<4xf32>) {
      tile.forall (%b) in [1] over blocks {
        %sums = tile.alloc registers : memref<4x1xf32>
        tile.forall (%t) in [4] over block_threads {
          %z = arith.constant 0.000000e+00 : f32
          loop.store %z, %sums[%t, 0] : memref<4x1xf32>
        } {llmopt.role = "init"}
        %s = tile.alloc shared : memref<4x9xf32>
        tile.forall (%t) in [4] over block_threads {
          loop.for %j = 0 to 8 {
            %v = loop.load %a[%t, %j] : memref<4x8xf32>
            loop.store %v, %s[%t, %j] : memref<4x9xf32>
          }
        } {llmopt.role = "stage"}
        %c0 = arith.constant 0 : index
        %c1 = arith.constant 1 : index
        %c8 = arith.constant 8 : index
        scf.for %kk = %c0 to %c8 step %c1 {
          tile.forall (%t) in [4] over block_threads {
            %v = loop.load %s[(3 - %t), %kk] : memref<4x9xf32>
            %w = loop.load %sums[%t, 0] : memref<4x1xf32>
            %y = arith.addf %w, %v : f32
            loop.store %y, %sums[%t, 0] : memref<4x1xf32>
          } {llmopt.role = "update"}
        } {unroll = 0 : i64}
        tile.forall (%t) in [4] over block_threads {
          %v = loop.load %sums[%t, 0] : memref<4x1xf32>
          loop.store %v, %o[%t] : memref<4xf32>
        } {llmopt.role = "epilogue"}
      }
    }
    func.return %0, %rows : memref<1x32x128xf32>, memref<4xf32>
  }
}
