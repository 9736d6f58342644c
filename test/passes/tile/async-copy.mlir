// RUN: llm-opt %s -p async-copy | filecheck %s
// RUN: llm-opt %s -p 'async-copy{stages=2}' | filecheck %s --check-prefix=TWO
// RUN: llm-opt %s -p 'async-copy{stages=1}' | filecheck %s --check-prefix=OFF
// RUN: llm-opt %s -p 'async-copy{carry=2}' | filecheck %s --check-prefix=MOD
// RUN: llm-opt %s -p 'async-copy{carry=2 lag=1}' | filecheck %s --check-prefix=LAG
// RUN: llm-opt %s -p 'async-copy{carry=2 lag=1},pad-shared,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'async-copy{carry=2},pad-shared,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'async-copy,pad-shared,tile-to-kernel' | filecheck %s --check-prefix=BARRIERS
// RUN: llm-opt %s -p 'async-copy,pad-shared,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'async-copy,pad-shared,tile-to-kernel,canonicalize,cse,kernel-to-cuda' -t cuda | filecheck %s --check-prefix=CUDA
// RUN: llm-opt %S/Inputs/async-copy-steps.mlir -p async-copy | filecheck %s --check-prefix=STEPS
// RUN: llm-opt %S/Inputs/async-copy-steps.mlir -p 'async-copy,pad-shared,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// The staged K loop of a register-tiled linear (what stage-inputs makes of M=32 N=128 K=64
// with chunks of 16: a 32x16 and a 64x16 tile in the global buffers' order). async-copy gives
// each tile three slots, fills two chunks ahead with 16-byte copies, and waits for a chunk
// only right before computing on it.

// CHECK:        %[[A:.*]] = tile.alloc shared {llmopt.pad = 4 : i64} : memref<3x32x16xf32>
// CHECK:        %[[B:.*]] = tile.alloc shared {llmopt.pad = 4 : i64} : memref<3x64x16xf32>
// With lag=1 one of the three slots is kept for readers still in flight: one chunk ahead
// (a prologue of one, nothing left outstanding at the wait), chunk k0 + 1 into slot
// (k0 + 1) mod 3, which the chunk two before read.
// LAG:      scf.for %p = {{.*}} {
// LAG:      } {unroll = 0 : i64, llmopt.role = "prologue"}
// LAG-NEXT: scf.for %k0
// LAG-NEXT:   tile.async_wait 0
// LAG-NEXT:   kernel.barrier
// LAG:        tile.async_copy {{.*}}(((%k0 + 1) floordiv 4) * -64)) + 16)] to %{{.*}}[((%k0 + 1) mod 3),
// LAG:      } {llmopt.role = "k_loop", llmopt.prefetch = "async3", llmopt.lag = 1 : i64}

// The previous block point's readers are done before the prologue overwrites the slots.
// CHECK:        kernel.barrier
// CHECK-NEXT:   scf.for %[[P:.*]] = {{.*}} {
// CHECK-NEXT:     tile.forall (%[[C0:.*]], %[[C1:.*]]) in [32, 4] over block_threads {
// CHECK-NEXT:       tile.async_copy %{{.*}}[(%[[C0]] + (%bm * 32)), ((%[[P]] * 16) + (%[[C1]] * 4))] to %[[A]][%[[P]], %[[C0]], (%[[C1]] * 4)] count 4 : memref<32x64xf32> to memref<3x32x16xf32>
// CHECK:          tile.async_copy {{.*}} count 4 : memref<128x64xf32> to memref<3x64x16xf32>
// CHECK:          tile.async_commit
// CHECK-NEXT:   } {unroll = 0 : i64, llmopt.role = "prologue"}
// The slot read (k0 mod 3), the slot filled ((k0 + 2) mod 3) and the chunk fetched
// ((k0 + 2) mod 4) are counters carried by the loop, starting at 0, 2 and 2 (the numerics
// check below runs the loop).
// CHECK:        scf.for %k0 = {{.*}} iter_args(%[[SLOT:.*]] = %{{.*}}, %[[FILL:.*]] = %{{.*}}, %[[FETCH:.*]] = %{{.*}}) -> (index, index, index) {
// CHECK-NEXT:     tile.async_wait 1
// CHECK-NEXT:     kernel.barrier
// Chunk (k0 + 2) mod 4 goes to slot (k0 + 2) mod 3 ...
// CHECK:            tile.async_copy %{{.*}}[{{.*}}, ((%[[FETCH]] * 16) + (%{{.*}} * 4))] to %[[A]][%[[FILL]], {{.*}} count 4
// CHECK:            tile.async_copy {{.*}} to %[[B]][%[[FILL]], {{.*}} count 4
// CHECK:          tile.async_commit
// ... while the arithmetic reads slot k0 mod 3.
// CHECK:          scf.for %kk
// CHECK:            loop.load %[[A]][%[[SLOT]], {{.*}}, %kk] : memref<3x32x16xf32>
// CHECK:            loop.load %[[B]][%[[SLOT]], {{.*}}, %kk] : memref<3x64x16xf32>
// Each counter steps by one and wraps at its modulus.
// CHECK:          %[[ONE:.*]] = arith.constant 1 : index
// CHECK:          %[[S1:.*]] = arith.addi %[[SLOT]], %[[ONE]] : index
// CHECK-NEXT:     %[[SIN:.*]] = arith.cmpi slt, %[[S1]], %[[THREE:.*]] : index
// CHECK-NEXT:     %[[SN:.*]] = arith.select %[[SIN]], %[[S1]], %{{.*}} : index
// CHECK:          %[[F1:.*]] = arith.addi %[[FETCH]], %[[ONE]] : index
// CHECK-NEXT:     %[[FIN:.*]] = arith.cmpi slt, %[[F1]], %[[FOUR:.*]] : index
// CHECK-NEXT:     %[[FN:.*]] = arith.select %[[FIN]], %[[F1]], %{{.*}} : index
// CHECK-NEXT:     scf.yield %[[SN]], %{{.*}}, %[[FN]] : index, index, index
// CHECK:        } {llmopt.role = "k_loop", llmopt.prefetch = "async3"}
// CHECK-NEXT:   tile.async_wait 0
// CHECK-NOT:    llmopt.role = "stage"}
// CHECK:        llmopt.role = "epilogue"

// TWO:          tile.alloc shared {llmopt.pad = 4 : i64} : memref<2x32x16xf32>
// TWO:          scf.for %k0
// TWO-NEXT:       tile.async_wait 0

// carry=2: the slots and the chunk are recomputed from k0 every chunk.
// MOD:          scf.for %k0 = %{{.*}} to %{{.*}} step %{{.*}} {
// MOD:            tile.async_copy {{.*}}(((%k0 + 2) floordiv 4) * -64)) + 32)] to %{{.*}}[((%k0 + 2) mod 3), {{.*}} count 4
// MOD:            loop.load %{{.*}}[(%k0 mod 3), {{.*}}, %kk] : memref<3x32x16xf32>
// MOD-NOT:        scf.yield %

// OFF-NOT:      tile.async_copy
// OFF:          loop.store %{{.*}}, %stage[%s0, %s1] : memref<32x16xf32>

// One barrier per chunk: tile-to-kernel adds none to the ones async-copy placed.
// BARRIERS:      kernel.barrier
// BARRIERS:      scf.for %k0
// BARRIERS-NEXT:   kernel.async_wait 1
// BARRIERS-NEXT:   kernel.barrier
// BARRIERS-NOT:    kernel.barrier
// BARRIERS:      kernel.async_wait 0

// A loop whose fill is followed by a step other than a chunk loop, with a bound that is a
// value, min(b + 1, 4) (Inputs/async-copy-steps.mlir): at most 4 chunks, so three slots;
// the commit follows the fill, the step reads slot %slot, and the counters are carried, the
// chunk fetched wrapping at the bound. Every fill is guarded by the bound: the prologue
// fills chunk %p only if %p < bound (a block with one chunk fills one slot), a step fetches
// only chunk k0 + 2 < bound (the last two fetch nothing); each commit stays unguarded, so
// the waits count the same groups.
// STEPS:      %[[T:.*]] = tile.alloc shared {llmopt.pad = 4 : i64} : memref<3x16x16xf32>
// STEPS:      %[[UB:.*]] = arith.minui
// STEPS:      scf.for %p = %{{[0-9]+}} to %[[SA:[0-9]+]] step
// STEPS-NEXT:   %[[HAS:.*]] = arith.cmpi slt, %p, %[[UB]] : index
// STEPS-NEXT:   scf.if %[[HAS]] {
// STEPS-NEXT:     tile.forall
// STEPS-NEXT:       tile.async_copy %1[((%p * 16) + %{{.*}}), (%{{.*}} * 4)] to %[[T]][%p,
// STEPS-NEXT:     } {llmopt.role = "stage"}
// STEPS-NEXT:   }
// STEPS-NEXT:   tile.async_commit
// STEPS-NEXT: } {unroll = 0 : i64, llmopt.role = "prologue"}
// STEPS-NEXT: scf.for %k0 = %{{.*}} to %[[UB]] step %{{.*}} iter_args(%slot = %{{.*}}, %fill_slot = %{{.*}}, %fetch = %{{.*}})
// STEPS-NEXT:   tile.async_wait 1
// STEPS-NEXT:   kernel.barrier
// STEPS-NEXT:   %[[AHEAD:.*]] = arith.addi %k0, %[[SA]] : index
// STEPS-NEXT:   %[[FRESH:.*]] = arith.cmpi slt, %[[AHEAD]], %[[UB]] : index
// STEPS-NEXT:   scf.if %[[FRESH]] {
// STEPS-NEXT:   tile.forall
// STEPS-NEXT:     tile.async_copy %1[((%fetch * 16) + %{{.*}}), (%{{.*}} * 4)] to %[[T]][%fill_slot,
// STEPS-NEXT:   } {llmopt.role = "stage"}
// STEPS-NEXT:   }
// STEPS-NEXT:   tile.async_commit
// STEPS-NEXT:   tile.forall
// STEPS:          loop.load %[[T]][%slot, %r, %{{.*}}]
// STEPS:        } {llmopt.role = "column_sums"}
// STEPS:        %[[NEXT:.*]] = arith.addi %fetch, %{{.*}} : index
// STEPS-NEXT:   %[[IN:.*]] = arith.cmpi slt, %[[NEXT]], %[[UB]] : index
// STEPS-NEXT:   %[[FETCH:.*]] = arith.select %[[IN]], %[[NEXT]], %{{.*}} : index
// STEPS-NEXT:   scf.yield %{{.*}}, %{{.*}}, %[[FETCH]] : index, index, index
// STEPS-NEXT: } {llmopt.prefetch = "async3"}

// NUM:      async-copy {{.*}} ok
// NUM:      tile-to-kernel {{.*}} ok
// NUM-NOT:  FAIL

// CUDA:     #include <cuda_pipeline_primitives.h>
// CUDA:     __pipeline_memcpy_async(&stage[p * 640 + {{.*}}], 16);
// CUDA:     __pipeline_commit();
// CUDA:     __pipeline_wait_prior(1);
// CUDA-NEXT: __syncthreads();

builtin.module {
  func.func @forward(%l.weight: memref<128x64xf32> {llmopt.param = "l.weight"}, %l.bias: memref<128xf32> {llmopt.param = "l.bias"}, %x: memref<32x64xf32> {llmopt.input = "x"}, %r: memref<32x128xf32> {llmopt.input = "r"}) -> memref<32x128xf32> {
    %0 = memref.alloc() : memref<32x128xf32>
    tile.kernel @elementwise_7 grid [2, 1, 1] block [256, 1, 1] (%1 = %r : memref<32x128xf32>, %2 = %0 : memref<32x128xf32>, %3 = %l.bias : memref<128xf32>, %4 = %l.weight : memref<128x64xf32>, %5 = %x : memref<32x64xf32>) {
      tile.forall (%bm, %bn) in [1, 2] over blocks {
        %acc = tile.alloc registers : memref<16x16x2x4xf32>
        tile.forall (%ti, %tj) in [16, 16] over block_threads {
          loop.for %mi = 0 to 2 {
            loop.for %nj = 0 to 4 {
              %6 = arith.constant 0.000000e+00 : f32
              loop.store %6, %acc[%ti, %tj, %mi, %nj] : memref<16x16x2x4xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "init"}
        %7 = arith.constant 0 : index
        %8 = arith.constant 64 : index
        %9 = arith.constant 1 : index
        %stage = tile.alloc shared : memref<32x16xf32>
        %stage_1 = tile.alloc shared : memref<64x16xf32>
        %10 = arith.constant 0 : index
        %11 = arith.constant 4 : index
        %12 = arith.constant 1 : index
        %13 = arith.constant 16 : index
        scf.for %k0 = %10 to %11 step %12 {
          tile.forall (%s0, %s1) in [32, 16] over block_threads {
            %14 = loop.load %5[((%bm * 32) + %s0), ((%k0 * 16) + %s1)] : memref<32x64xf32>
            loop.store %14, %stage[%s0, %s1] : memref<32x16xf32>
          } {llmopt.role = "stage"}
          tile.forall (%s0_1, %s1_1) in [64, 16] over block_threads {
            %15 = loop.load %4[((%bn * 64) + %s0_1), ((%k0 * 16) + %s1_1)] : memref<128x64xf32>
            loop.store %15, %stage_1[%s0_1, %s1_1] : memref<64x16xf32>
          } {llmopt.role = "stage"}
          scf.for %kk = %10 to %13 step %12 {
            %16 = arith.muli %k0, %13 : index
            %k = arith.addi %16, %kk : index
            tile.forall (%ti_1, %tj_1) in [16, 16] over block_threads {
              loop.for %mi_1 = 0 to 2 {
                loop.for %nj_1 = 0 to 4 {
                  %17 = loop.load %stage[((%mi_1 * 16) + %ti_1), %kk] : memref<32x16xf32>
                  %18 = loop.load %stage_1[((%nj_1 * 16) + %tj_1), %kk] : memref<64x16xf32>
                  %19 = arith.mulf %17, %18 : f32
                  %20 = loop.load %acc[%ti_1, %tj_1, %mi_1, %nj_1] : memref<16x16x2x4xf32>
                  %21 = arith.addf %20, %19 : f32
                  loop.store %21, %acc[%ti_1, %tj_1, %mi_1, %nj_1] : memref<16x16x2x4xf32>
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {llmopt.role = "update"}
          } {unroll = 0 : i64}
        } {llmopt.role = "k_loop"}
        tile.forall (%ti_2, %tj_2) in [16, 16] over block_threads {
          loop.for %mi_2 = 0 to 2 {
            loop.for %nj_2 = 0 to 4 {
              %sum = loop.load %acc[%ti_2, %tj_2, %mi_2, %nj_2] : memref<16x16x2x4xf32>
              %22 = loop.load %3[(((%bn * 64) + (%nj_2 * 16)) + %tj_2)] : memref<128xf32>
              %23 = arith.addf %sum, %22 : f32
              %24 = loop.load %1[(((%bm * 32) + (%mi_2 * 16)) + %ti_2), (((%bn * 64) + (%nj_2 * 16)) + %tj_2)] : memref<32x128xf32>
              %25 = arith.addf %23, %24 : f32
              loop.store %25, %2[(((%bm * 32) + (%mi_2 * 16)) + %ti_2), (((%bn * 64) + (%nj_2 * 16)) + %tj_2)] : memref<32x128xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "epilogue"}
      }
    }
    func.return %0 : memref<32x128xf32>
  }
}
