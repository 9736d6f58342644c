// RUN: llm-opt %s -p 'prefetch-stages{prefetch=1}' | filecheck %s
// RUN: llm-opt %s -p prefetch-stages | filecheck %s --check-prefix=OFF
// RUN: llm-opt %s -p 'prefetch-stages{prefetch=1},tile-to-kernel' | filecheck %s --check-prefix=BARRIERS
// RUN: llm-opt %s -p 'prefetch-stages{prefetch=1},pad-shared,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// The staged K loop of a register-tiled linear (what stage-inputs makes of M=32 N=128 K=64:
// chunks of 32, a 32x32 and a 64x32 tile). With prefetch on, each thread loads its points of
// the next chunk into registers before the chunk's arithmetic and stores them into the tiles
// after it; chunk 0 is loaded and committed before the loop.

// CHECK:        %[[NA:.*]] = tile.alloc registers : memref<256x4xf32>
// CHECK:        tile.forall (%[[T:.*]]) in [256] over block_threads {
// CHECK-NEXT:     loop.for %[[R:.*]] = 0 to 4 {
// CHECK-NEXT:       %[[V:.*]] = loop.load %{{.*}}[(((%[[R]] * 8) + (%bm * 32)) + (%[[T]] floordiv 32)), {{.*}}] : memref<32x64xf32>
// CHECK-NEXT:       loop.store %[[V]], %[[NA]][%[[T]], %[[R]]] : memref<256x4xf32>
// CHECK-NEXT:     } {unroll = 0 : i64}
// CHECK-NEXT:   } {llmopt.role = "prefetch"}
// CHECK:        } {llmopt.role = "commit"}
// CHECK:        %[[NB:.*]] = tile.alloc registers : memref<256x8xf32>
// CHECK:        } {llmopt.role = "prefetch"}
// CHECK:        } {llmopt.role = "commit"}
// CHECK:        scf.for %k0 = {{.*}} {
// The next chunk, (k0 + 1) mod 2, comes first ...
// CHECK:          loop.load %{{.*}}[{{.*}}(((%k0 + 1) floordiv 2) * -64){{.*}}] : memref<32x64xf32>
// CHECK:          } {llmopt.role = "prefetch"}
// CHECK:          } {llmopt.role = "prefetch"}
// ... then the chunk's arithmetic on the tiles, then the commits.
// CHECK:          scf.for %kk = {{.*}} {
// CHECK:          } {llmopt.role = "commit"}
// CHECK:          } {llmopt.role = "commit"}
// CHECK-NEXT:   } {llmopt.role = "k_loop", llmopt.prefetch = "registers"}
// CHECK-NOT:    llmopt.role = "stage"

// Off unless asked for (pass option or the kernel's llmopt.schedule).
// OFF-NOT:      llmopt.role = "prefetch"
// OFF:          llmopt.role = "stage"

// Barriers: after the first commit, before the commits inside the loop (the chunk's
// reads of the tiles are done) and at the end of the loop body (before the next reads).
// BARRIERS:     scf.for %k0
// BARRIERS-NOT: kernel.barrier
// BARRIERS:     scf.for %kk
// BARRIERS:     kernel.barrier
// BARRIERS:     kernel.barrier
// BARRIERS-NEXT: }

// NUM:      prefetch-stages {{.*}} ok
// NUM:      tile-to-kernel {{.*}} ok
// NUM-NOT:  FAIL

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
        %stage = tile.alloc shared {llmopt.pad = 4 : i64} : memref<32x32xf32>
        %stage_1 = tile.alloc shared {llmopt.pad = 4 : i64} : memref<32x64xf32>
        %10 = arith.constant 0 : index
        %11 = arith.constant 2 : index
        %12 = arith.constant 1 : index
        %13 = arith.constant 32 : index
        scf.for %k0 = %10 to %11 step %12 {
          tile.forall (%s0, %s1) in [32, 32] over block_threads {
            %14 = loop.load %5[((%bm * 32) + %s0), ((%k0 * 32) + %s1)] : memref<32x64xf32>
            loop.store %14, %stage[%s1, %s0] : memref<32x32xf32>
          } {llmopt.role = "stage"}
          tile.forall (%s0_1, %s1_1) in [64, 32] over block_threads {
            %15 = loop.load %4[((%bn * 64) + %s0_1), ((%k0 * 32) + %s1_1)] : memref<128x64xf32>
            loop.store %15, %stage_1[%s1_1, %s0_1] : memref<32x64xf32>
          } {llmopt.role = "stage"}
          scf.for %kk = %10 to %13 step %12 {
            %16 = arith.muli %k0, %13 : index
            %k = arith.addi %16, %kk : index
            tile.forall (%ti_1, %tj_1) in [16, 16] over block_threads {
              loop.for %mi_1 = 0 to 2 {
                loop.for %nj_1 = 0 to 4 {
                  %17 = loop.load %stage[%kk, ((%ti_1 * 2) + %mi_1)] : memref<32x32xf32>
                  %18 = loop.load %stage_1[%kk, ((%tj_1 * 4) + %nj_1)] : memref<32x64xf32>
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
              %22 = loop.load %3[(((%bn * 64) + (%tj_2 * 4)) + %nj_2)] : memref<128xf32>
              %23 = arith.addf %sum, %22 : f32
              %24 = loop.load %1[(((%bm * 32) + (%ti_2 * 2)) + %mi_2), (((%bn * 64) + (%tj_2 * 4)) + %nj_2)] : memref<32x128xf32>
              %25 = arith.addf %23, %24 : f32
              loop.store %25, %2[(((%bm * 32) + (%ti_2 * 2)) + %mi_2), (((%bn * 64) + (%tj_2 * 4)) + %nj_2)] : memref<32x128xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "epilogue"}
      }
    }
    func.return %0 : memref<32x128xf32>
  }
}

