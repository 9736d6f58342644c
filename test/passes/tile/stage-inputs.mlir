// RUN: llm-opt %s --split-input-file -p 'stage-inputs{kmajor=1}' | filecheck %s --check-prefix=AUTO
// RUN: llm-opt %s --split-input-file -p 'stage-inputs{bk=16 kmajor=1}' | filecheck %s --check-prefix=BK16
// RUN: llm-opt %s --split-input-file -p 'stage-inputs{kmajor=2}' | filecheck %s --check-prefix=ROWS
// RUN: llm-opt %s --split-input-file -p stage-inputs | filecheck %s --check-prefix=ROWS
// RUN: llm-opt %s --split-input-file -p stage-inputs,tile-to-kernel,canonicalize,cse,kernel-to-cuda --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p 'stage-inputs{bk=16 kmajor=2},tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p 'stage-inputs{chunk_unroll=2},tile-to-kernel,canonicalize,cse,kernel-to-cuda' -t cuda | filecheck %s --check-prefix=UNROLL2
// RUN: not llm-opt %s --split-input-file -p 'stage-inputs{chunk_unroll=-1}' 2>&1 | filecheck %s --check-prefix=BAD
// The K loop of a register-tiled product walks K in chunks of bk: per chunk, each global
// operand's box is copied into a shared tile by a forall over the block's threads (with the
// global buffer's innermost dimension fastest), then an unrolled loop over the chunk reads
// the tiles. Tiles keep the global buffer's dimension order by default (what async-copy
// fills); K-major tiles (kmajor=1) ask pad-shared for 4 words of padding when that transposes
// them. The inputs are what register-tile makes of captured programs.

// linear + bias + residual, M=32 N=128 K=64, 32x64 block tiles of 2x4.
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
        scf.for %k = %7 to %8 step %9 {
          tile.forall (%ti_1, %tj_1) in [16, 16] over block_threads {
            loop.for %mi_1 = 0 to 2 {
              loop.for %nj_1 = 0 to 4 {
                %10 = loop.load %5[(((%bm * 32) + (%ti_1 * 2)) + %mi_1), %k] : memref<32x64xf32>
                %11 = loop.load %4[(((%bn * 64) + (%tj_1 * 4)) + %nj_1), %k] : memref<128x64xf32>
                %12 = arith.mulf %10, %11 : f32
                %13 = loop.load %acc[%ti_1, %tj_1, %mi_1, %nj_1] : memref<16x16x2x4xf32>
                %14 = arith.addf %13, %12 : f32
                loop.store %14, %acc[%ti_1, %tj_1, %mi_1, %nj_1] : memref<16x16x2x4xf32>
              } {unroll = 0 : i64}
            } {unroll = 0 : i64}
          } {llmopt.role = "update"}
        } {llmopt.role = "k_loop"}
        tile.forall (%ti_2, %tj_2) in [16, 16] over block_threads {
          loop.for %mi_2 = 0 to 2 {
            loop.for %nj_2 = 0 to 4 {
              %sum = loop.load %acc[%ti_2, %tj_2, %mi_2, %nj_2] : memref<16x16x2x4xf32>
              %15 = loop.load %3[(((%bn * 64) + (%tj_2 * 4)) + %nj_2)] : memref<128xf32>
              %16 = arith.addf %sum, %15 : f32
              %17 = loop.load %1[(((%bm * 32) + (%ti_2 * 2)) + %mi_2), (((%bn * 64) + (%tj_2 * 4)) + %nj_2)] : memref<32x128xf32>
              %18 = arith.addf %16, %17 : f32
              loop.store %18, %2[(((%bm * 32) + (%ti_2 * 2)) + %mi_2), (((%bn * 64) + (%tj_2 * 4)) + %nj_2)] : memref<32x128xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "epilogue"}
      }
    }
    func.return %0 : memref<32x128xf32>
  }
}

// K = 64: two chunks of 32. The x box (32 rows x 32 of K) and the weight box (64 rows x 32
// of K) are stored K-major, [32, 32] and [32, 64].
// AUTO-LABEL: func.func @forward
// AUTO:         tile.forall (%[[BM:.*]], %[[BN:.*]]) in [1, 2] over blocks {
// AUTO-NEXT:      %[[ACC:.*]] = tile.alloc registers : memref<16x16x2x4xf32>
// AUTO:           } {llmopt.role = "init"}
// AUTO:           %[[XS:.*]] = tile.alloc shared {llmopt.pad = 4 : i64} : memref<32x32xf32>
// AUTO-NEXT:      %[[WS:.*]] = tile.alloc shared {llmopt.pad = 4 : i64} : memref<32x64xf32>
// AUTO-NEXT:      %[[C0:.*]] = arith.constant 0 : index
// AUTO-NEXT:      %[[CHUNKS:.*]] = arith.constant 2 : index
// AUTO-NEXT:      %[[C1:.*]] = arith.constant 1 : index
// AUTO-NEXT:      %[[BK:.*]] = arith.constant 32 : index
// AUTO-NEXT:      scf.for %[[K0:.*]] = %[[C0]] to %[[CHUNKS]] step %[[C1]] {
// AUTO-NEXT:        tile.forall (%[[S0:.*]], %[[S1:.*]]) in [32, 32] over block_threads {
// AUTO-NEXT:          %[[XV:.*]] = loop.load %5[((%[[BM]] * 32) + %[[S0]]), ((%[[K0]] * 32) + %[[S1]])] : memref<32x64xf32>
// AUTO-NEXT:          loop.store %[[XV]], %[[XS]][%[[S1]], %[[S0]]] : memref<32x32xf32>
// AUTO-NEXT:        } {llmopt.role = "stage"}
// AUTO-NEXT:        tile.forall (%[[T0:.*]], %[[T1:.*]]) in [64, 32] over block_threads {
// AUTO-NEXT:          %[[WV:.*]] = loop.load %4[((%[[BN]] * 64) + %[[T0]]), ((%[[K0]] * 32) + %[[T1]])] : memref<128x64xf32>
// AUTO-NEXT:          loop.store %[[WV]], %[[WS]][%[[T1]], %[[T0]]] : memref<32x64xf32>
// AUTO-NEXT:        } {llmopt.role = "stage"}
// AUTO-NEXT:        scf.for %[[KK:.*]] = %[[C0]] to %[[BK]] step %[[C1]] {
// AUTO:               tile.forall (%[[TI:.*]], %[[TJ:.*]]) in [16, 16] over block_threads {
// AUTO-NEXT:            loop.for %[[MI:.*]] = 0 to 2 {
// AUTO-NEXT:              loop.for %[[NJ:.*]] = 0 to 4 {
// AUTO-NEXT:                loop.load %[[XS]][%[[KK]], ((%[[TI]] * 2) + %[[MI]])] : memref<32x32xf32>
// AUTO-NEXT:                loop.load %[[WS]][%[[KK]], ((%[[TJ]] * 4) + %[[NJ]])] : memref<32x64xf32>
// AUTO:               } {llmopt.role = "update"}
// AUTO-NEXT:        } {unroll = 0 : i64}
// AUTO-NEXT:      } {llmopt.role = "k_loop"}
// The epilogue still reads global memory.
// AUTO:           loop.load %3[{{.*}}] : memref<128xf32>
// AUTO:           } {llmopt.role = "epilogue"}

// BK16-LABEL: func.func @forward
// BK16:         %[[XS:.*]] = tile.alloc shared {llmopt.pad = 4 : i64} : memref<16x32xf32>
// BK16-NEXT:    %[[WS:.*]] = tile.alloc shared {llmopt.pad = 4 : i64} : memref<16x64xf32>
// BK16-NEXT:    %{{.*}} = arith.constant 0 : index
// BK16-NEXT:    %[[CHUNKS:.*]] = arith.constant 4 : index
// BK16-NEXT:    %{{.*}} = arith.constant 1 : index
// BK16-NEXT:    %[[BK:.*]] = arith.constant 16 : index
// BK16-NEXT:    scf.for %[[K0:.*]] = %{{.*}} to %[[CHUNKS]] step %{{.*}} {
// BK16-NEXT:      tile.forall (%{{.*}}, %{{.*}}) in [32, 16] over block_threads {
// BK16-NEXT:        loop.load %5[{{.*}}, ((%[[K0]] * 16) + %{{.*}})] : memref<32x64xf32>
// BK16:           tile.forall (%{{.*}}, %{{.*}}) in [64, 16] over block_threads {
// BK16:           scf.for %{{.*}} = %{{.*}} to %[[BK]] step %{{.*}} {

// In the global buffers' dimension order: [32, 32] and [64, 32], nothing asked of pad-shared.
// ROWS-LABEL: func.func @forward
// ROWS:         %[[XS:.*]] = tile.alloc shared : memref<32x32xf32>
// ROWS-NEXT:    %[[WS:.*]] = tile.alloc shared : memref<64x32xf32>
// ROWS:           tile.forall (%[[S0:.*]], %[[S1:.*]]) in [32, 32] over block_threads {
// ROWS-NEXT:        loop.load %5[{{.*}}] : memref<32x64xf32>
// ROWS-NEXT:        loop.store %{{.*}}, %[[XS]][%[[S0]], %[[S1]]] : memref<32x32xf32>
// ROWS:             loop.load %[[XS]][((%{{.*}} * 2) + %{{.*}}), %{{.*}}] : memref<32x32xf32>
// ROWS-NEXT:        loop.load %[[WS]][((%{{.*}} * 4) + %{{.*}}), %{{.*}}] : memref<64x32xf32>

// NUM:      // numerics: tolerance
// NUM-NEXT: stage-inputs {{.*}} ok
// NUM-NEXT: tile-to-kernel {{.*}} ok
// NUM-NEXT: canonicalize {{.*}} ok
// NUM-NEXT: cse {{.*}} ok
// NUM-NEXT: kernel-to-cuda {{.*}}(not interpreted

// -----

// Attention's P @ V with grouped KV heads (p 1x4x32x32, v 1x2x32x32), 16x16 tiles of 1x1:
// the block part of an index may be any affine form of block values (the KV head
// h floordiv 2, a constant). V's box has K along its rows already: K-major without a
// transposition, so without a padding request.
builtin.module {
  func.func @forward(%p: memref<1x4x32x32xf32> {llmopt.input = "p"}, %v: memref<1x2x32x32xf32> {llmopt.input = "v"}) -> memref<1x4x32x32xf32> {
    %0 = memref.alloc() : memref<1x4x32x32xf32>
    tile.kernel @index_map_16 grid [16, 1, 1] block [256, 1, 1] (%1 = %0 : memref<1x4x32x32xf32>, %2 = %v : memref<1x2x32x32xf32>, %3 = %p : memref<1x4x32x32xf32>) {
      tile.forall (%b0, %b1, %bm, %bn) in [1, 4, 2, 2] over blocks {
        %acc = tile.alloc registers : memref<16x16x1x1xf32>
        tile.forall (%ti, %tj) in [16, 16] over block_threads {
          loop.for %mi = 0 to 1 {
            loop.for %nj = 0 to 1 {
              %4 = arith.constant 0.000000e+00 : f32
              loop.store %4, %acc[%ti, %tj, %mi, %nj] : memref<16x16x1x1xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "init"}
        %5 = arith.constant 0 : index
        %6 = arith.constant 32 : index
        %7 = arith.constant 1 : index
        scf.for %k = %5 to %6 step %7 {
          tile.forall (%ti_1, %tj_1) in [16, 16] over block_threads {
            loop.for %mi_1 = 0 to 1 {
              loop.for %nj_1 = 0 to 1 {
                %8 = loop.load %3[0, %b1, (((%bm * 16) + %ti_1) + %mi_1), %k] : memref<1x4x32x32xf32>
                %9 = loop.load %2[0, (%b1 floordiv 2), %k, (((%bn * 16) + %tj_1) + %nj_1)] : memref<1x2x32x32xf32>
                %10 = arith.mulf %8, %9 : f32
                %11 = loop.load %acc[%ti_1, %tj_1, %mi_1, %nj_1] : memref<16x16x1x1xf32>
                %12 = arith.addf %11, %10 : f32
                loop.store %12, %acc[%ti_1, %tj_1, %mi_1, %nj_1] : memref<16x16x1x1xf32>
              } {unroll = 0 : i64}
            } {unroll = 0 : i64}
          } {llmopt.role = "update"}
        } {llmopt.role = "k_loop"}
        tile.forall (%ti_2, %tj_2) in [16, 16] over block_threads {
          loop.for %mi_2 = 0 to 1 {
            loop.for %nj_2 = 0 to 1 {
              %sum = loop.load %acc[%ti_2, %tj_2, %mi_2, %nj_2] : memref<16x16x1x1xf32>
              loop.store %sum, %1[0, %b1, (((%bm * 16) + %ti_2) + %mi_2), (((%bn * 16) + %tj_2) + %nj_2)] : memref<1x4x32x32xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "epilogue"}
      }
    }
    func.return %0 : memref<1x4x32x32xf32>
  }
}

// AUTO-LABEL: func.func @forward
// AUTO:         tile.forall (%[[B0:.*]], %[[B1:.*]], %[[BM:.*]], %[[BN:.*]]) in [1, 4, 2, 2] over blocks {
// AUTO:           %[[PS:.*]] = tile.alloc shared {llmopt.pad = 4 : i64} : memref<32x16xf32>
// AUTO-NEXT:      %[[VS:.*]] = tile.alloc shared {llmopt.pad = 4 : i64} : memref<32x16xf32>
// AUTO:           scf.for %[[K0:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// AUTO-NEXT:        tile.forall (%[[S0:.*]], %[[S1:.*]]) in [16, 32] over block_threads {
// AUTO-NEXT:          %[[PV:.*]] = loop.load %3[0, %[[B1]], ((%[[BM]] * 16) + %[[S0]]), ((%[[K0]] * 32) + %[[S1]])] : memref<1x4x32x32xf32>
// AUTO-NEXT:          loop.store %[[PV]], %[[PS]][%[[S1]], %[[S0]]] : memref<32x16xf32>
// AUTO-NEXT:        } {llmopt.role = "stage"}
// AUTO-NEXT:        tile.forall (%[[T0:.*]], %[[T1:.*]]) in [32, 16] over block_threads {
// AUTO-NEXT:          %[[VV:.*]] = loop.load %2[0, (%[[B1]] floordiv 2), ((%[[K0]] * 32) + %[[T0]]), ((%[[BN]] * 16) + %[[T1]])] : memref<1x2x32x32xf32>
// AUTO-NEXT:          loop.store %[[VV]], %[[VS]][%[[T0]], %[[T1]]] : memref<32x16xf32>
// AUTO-NEXT:        } {llmopt.role = "stage"}
// AUTO-NEXT:        scf.for %[[KK:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// AUTO:                   loop.load %[[PS]][%[[KK]], (%{{.*}} + %{{.*}})] : memref<32x16xf32>
// AUTO-NEXT:              loop.load %[[VS]][%[[KK]], (%{{.*}} + %{{.*}})] : memref<32x16xf32>
// AUTO:               } {llmopt.role = "update"}
// AUTO-NEXT:        } {unroll = 0 : i64}
// AUTO-NEXT:      } {llmopt.role = "k_loop"}

// BK16-LABEL: func.func @forward
// BK16:         tile.alloc shared {llmopt.pad = 4 : i64} : memref<16x16xf32>
// BK16-NEXT:    tile.alloc shared {llmopt.pad = 4 : i64} : memref<16x16xf32>
// BK16-NEXT:    %{{.*}} = arith.constant 0 : index
// BK16-NEXT:    %{{.*}} = arith.constant 2 : index

// ROWS-LABEL: func.func @forward
// ROWS:         tile.alloc shared : memref<16x32xf32>
// ROWS-NEXT:    tile.alloc shared : memref<32x16xf32>

// NUM:      // numerics: tolerance
// NUM-NEXT: stage-inputs {{.*}} ok
// NUM-NEXT: tile-to-kernel {{.*}} ok
// NUM-NEXT: canonicalize {{.*}} ok
// NUM-NEXT: cse {{.*}} ok
// NUM-NEXT: kernel-to-cuda {{.*}}(not interpreted

// -----

// The fused gate and up projections of silu(x Wg) * (x Wu): both reductions read x at the
// same indices, so x is staged once; three tiles, not four.
builtin.module {
  func.func @forward(%g.weight: memref<128x32xf32> {llmopt.param = "g.weight"}, %u.weight: memref<128x32xf32> {llmopt.param = "u.weight"}, %x: memref<32x32xf32> {llmopt.input = "x"}) -> memref<32x128xf32> {
    %0 = memref.alloc() : memref<32x128xf32>
    tile.kernel @elementwise_11 grid [2, 1, 1] block [256, 1, 1] (%1 = %0 : memref<32x128xf32>, %2 = %u.weight : memref<128x32xf32>, %3 = %x : memref<32x32xf32>, %4 = %g.weight : memref<128x32xf32>) {
      %5 = arith.constant 1.000000e+00 : f32
      tile.forall (%bm, %bn) in [1, 2] over blocks {
        %acc0 = tile.alloc registers : memref<16x16x2x4xf32>
        %acc1 = tile.alloc registers : memref<16x16x2x4xf32>
        tile.forall (%ti, %tj) in [16, 16] over block_threads {
          loop.for %mi = 0 to 2 {
            loop.for %nj = 0 to 4 {
              %6 = arith.constant 0.000000e+00 : f32
              loop.store %6, %acc0[%ti, %tj, %mi, %nj] : memref<16x16x2x4xf32>
              loop.store %6, %acc1[%ti, %tj, %mi, %nj] : memref<16x16x2x4xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "init"}
        %7 = arith.constant 0 : index
        %8 = arith.constant 32 : index
        %9 = arith.constant 1 : index
        scf.for %k = %7 to %8 step %9 {
          tile.forall (%ti_1, %tj_1) in [16, 16] over block_threads {
            loop.for %mi_1 = 0 to 2 {
              loop.for %nj_1 = 0 to 4 {
                %10 = loop.load %3[(((%bm * 32) + (%ti_1 * 2)) + %mi_1), %k] : memref<32x32xf32>
                %11 = loop.load %4[(((%bn * 64) + (%tj_1 * 4)) + %nj_1), %k] : memref<128x32xf32>
                %12 = arith.mulf %10, %11 : f32
                %13 = loop.load %acc0[%ti_1, %tj_1, %mi_1, %nj_1] : memref<16x16x2x4xf32>
                %14 = arith.addf %13, %12 : f32
                loop.store %14, %acc0[%ti_1, %tj_1, %mi_1, %nj_1] : memref<16x16x2x4xf32>
                %15 = loop.load %3[(((%bm * 32) + (%ti_1 * 2)) + %mi_1), %k] : memref<32x32xf32>
                %16 = loop.load %2[(((%bn * 64) + (%tj_1 * 4)) + %nj_1), %k] : memref<128x32xf32>
                %17 = arith.mulf %15, %16 : f32
                %18 = loop.load %acc1[%ti_1, %tj_1, %mi_1, %nj_1] : memref<16x16x2x4xf32>
                %19 = arith.addf %18, %17 : f32
                loop.store %19, %acc1[%ti_1, %tj_1, %mi_1, %nj_1] : memref<16x16x2x4xf32>
              } {unroll = 0 : i64}
            } {unroll = 0 : i64}
          } {llmopt.role = "update"}
        } {llmopt.role = "k_loop"}
        tile.forall (%ti_2, %tj_2) in [16, 16] over block_threads {
          loop.for %mi_2 = 0 to 2 {
            loop.for %nj_2 = 0 to 4 {
              %sum = loop.load %acc0[%ti_2, %tj_2, %mi_2, %nj_2] : memref<16x16x2x4xf32>
              %sum_1 = loop.load %acc1[%ti_2, %tj_2, %mi_2, %nj_2] : memref<16x16x2x4xf32>
              %20 = arith.negf %sum : f32
              %21 = math.exp %20 : f32
              %22 = arith.addf %5, %21 : f32
              %23 = arith.divf %5, %22 : f32
              %24 = arith.mulf %sum, %23 : f32
              %25 = arith.mulf %24, %sum_1 : f32
              loop.store %25, %1[(((%bm * 32) + (%ti_2 * 2)) + %mi_2), (((%bn * 64) + (%tj_2 * 4)) + %nj_2)] : memref<32x128xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "epilogue"}
      }
    }
    func.return %0 : memref<32x128xf32>
  }
}

// AUTO-LABEL: func.func @forward
// AUTO:         %[[XS:.*]] = tile.alloc shared {llmopt.pad = 4 : i64} : memref<32x32xf32>
// AUTO-NEXT:    %[[GS:.*]] = tile.alloc shared {llmopt.pad = 4 : i64} : memref<32x64xf32>
// AUTO-NEXT:    %[[US:.*]] = tile.alloc shared {llmopt.pad = 4 : i64} : memref<32x64xf32>
// AUTO-NOT:     tile.alloc shared
// AUTO:         scf.for
// AUTO:           } {llmopt.role = "stage"}
// AUTO:           } {llmopt.role = "stage"}
// AUTO:           } {llmopt.role = "stage"}
// AUTO-NEXT:      scf.for %[[KK:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// AUTO:               loop.load %[[XS]][%[[KK]], {{.*}}] : memref<32x32xf32>
// AUTO-NEXT:          loop.load %[[GS]][%[[KK]], {{.*}}] : memref<32x64xf32>
// AUTO:               loop.load %[[XS]][%[[KK]], {{.*}}] : memref<32x32xf32>
// AUTO-NEXT:          loop.load %[[US]][%[[KK]], {{.*}}] : memref<32x64xf32>
// AUTO:         } {llmopt.role = "k_loop"}

// BK16-LABEL: func.func @forward
// BK16:         tile.alloc shared {llmopt.pad = 4 : i64} : memref<16x32xf32>
// BK16-NEXT:    tile.alloc shared {llmopt.pad = 4 : i64} : memref<16x64xf32>
// BK16-NEXT:    tile.alloc shared {llmopt.pad = 4 : i64} : memref<16x64xf32>
// BK16-NOT:     tile.alloc shared

// NUM:      // numerics: tolerance
// NUM-NEXT: stage-inputs {{.*}} ok
// NUM-NEXT: tile-to-kernel {{.*}} ok

// -----

// The chunk from the kernel's schedule knobs (bk = 8); the pass option wins over them.
builtin.module {
  func.func @forward(%l.weight: memref<128x64xf32> {llmopt.param = "l.weight"}, %l.bias: memref<128xf32> {llmopt.param = "l.bias"}, %x: memref<32x64xf32> {llmopt.input = "x"}, %r: memref<32x128xf32> {llmopt.input = "r"}) -> memref<32x128xf32> {
    %0 = memref.alloc() : memref<32x128xf32>
    tile.kernel @tuned grid [2, 1, 1] block [256, 1, 1] (%1 = %r : memref<32x128xf32>, %2 = %0 : memref<32x128xf32>, %3 = %l.bias : memref<128xf32>, %4 = %l.weight : memref<128x64xf32>, %5 = %x : memref<32x64xf32>) {
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
        scf.for %k = %7 to %8 step %9 {
          tile.forall (%ti_1, %tj_1) in [16, 16] over block_threads {
            loop.for %mi_1 = 0 to 2 {
              loop.for %nj_1 = 0 to 4 {
                %10 = loop.load %5[(((%bm * 32) + (%ti_1 * 2)) + %mi_1), %k] : memref<32x64xf32>
                %11 = loop.load %4[(((%bn * 64) + (%tj_1 * 4)) + %nj_1), %k] : memref<128x64xf32>
                %12 = arith.mulf %10, %11 : f32
                %13 = loop.load %acc[%ti_1, %tj_1, %mi_1, %nj_1] : memref<16x16x2x4xf32>
                %14 = arith.addf %13, %12 : f32
                loop.store %14, %acc[%ti_1, %tj_1, %mi_1, %nj_1] : memref<16x16x2x4xf32>
              } {unroll = 0 : i64}
            } {unroll = 0 : i64}
          } {llmopt.role = "update"}
        } {llmopt.role = "k_loop"}
        tile.forall (%ti_2, %tj_2) in [16, 16] over block_threads {
          loop.for %mi_2 = 0 to 2 {
            loop.for %nj_2 = 0 to 4 {
              %sum = loop.load %acc[%ti_2, %tj_2, %mi_2, %nj_2] : memref<16x16x2x4xf32>
              %15 = loop.load %3[(((%bn * 64) + (%tj_2 * 4)) + %nj_2)] : memref<128xf32>
              %16 = arith.addf %sum, %15 : f32
              %17 = loop.load %1[(((%bm * 32) + (%ti_2 * 2)) + %mi_2), (((%bn * 64) + (%tj_2 * 4)) + %nj_2)] : memref<32x128xf32>
              %18 = arith.addf %16, %17 : f32
              loop.store %18, %2[(((%bm * 32) + (%ti_2 * 2)) + %mi_2), (((%bn * 64) + (%tj_2 * 4)) + %nj_2)] : memref<32x128xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "epilogue"}
      }
    } {llmopt.schedule = {bk = 8 : i64}}
    func.return %0 : memref<32x128xf32>
  }
}

// AUTO-LABEL: func.func @forward
// AUTO:         tile.alloc shared {llmopt.pad = 4 : i64} : memref<8x32xf32>
// AUTO-NEXT:    tile.alloc shared {llmopt.pad = 4 : i64} : memref<8x64xf32>
// AUTO-NEXT:    %{{.*}} = arith.constant 0 : index
// AUTO-NEXT:    %{{.*}} = arith.constant 8 : index
// AUTO-NEXT:    %{{.*}} = arith.constant 1 : index
// AUTO-NEXT:    %{{.*}} = arith.constant 8 : index
// AUTO:         } {llmopt.schedule = {bk = 8 : i64}}

// BK16-LABEL: func.func @forward
// BK16:         tile.alloc shared {llmopt.pad = 4 : i64} : memref<16x32xf32>
// BK16-NEXT:    tile.alloc shared {llmopt.pad = 4 : i64} : memref<16x64xf32>
// BK16:         } {llmopt.schedule = {bk = 8 : i64}}

// NUM:      // numerics: tolerance
// NUM-NEXT: stage-inputs {{.*}} ok
// NUM-NEXT: tile-to-kernel {{.*}} ok

// -----

// K = 33: no chunk of 2 or more divides it, the K loop stays as it is.
builtin.module {
  func.func @forward(%l.weight: memref<128x33xf32> {llmopt.param = "l.weight"}, %l.bias: memref<128xf32> {llmopt.param = "l.bias"}, %x: memref<32x33xf32> {llmopt.input = "x"}, %r: memref<32x128xf32> {llmopt.input = "r"}) -> memref<32x128xf32> {
    %0 = memref.alloc() : memref<32x128xf32>
    tile.kernel @odd_k grid [2, 1, 1] block [256, 1, 1] (%1 = %r : memref<32x128xf32>, %2 = %0 : memref<32x128xf32>, %3 = %l.bias : memref<128xf32>, %4 = %l.weight : memref<128x33xf32>, %5 = %x : memref<32x33xf32>) {
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
        %8 = arith.constant 33 : index
        %9 = arith.constant 1 : index
        scf.for %k = %7 to %8 step %9 {
          tile.forall (%ti_1, %tj_1) in [16, 16] over block_threads {
            loop.for %mi_1 = 0 to 2 {
              loop.for %nj_1 = 0 to 4 {
                %10 = loop.load %5[(((%bm * 32) + (%ti_1 * 2)) + %mi_1), %k] : memref<32x33xf32>
                %11 = loop.load %4[(((%bn * 64) + (%tj_1 * 4)) + %nj_1), %k] : memref<128x33xf32>
                %12 = arith.mulf %10, %11 : f32
                %13 = loop.load %acc[%ti_1, %tj_1, %mi_1, %nj_1] : memref<16x16x2x4xf32>
                %14 = arith.addf %13, %12 : f32
                loop.store %14, %acc[%ti_1, %tj_1, %mi_1, %nj_1] : memref<16x16x2x4xf32>
              } {unroll = 0 : i64}
            } {unroll = 0 : i64}
          } {llmopt.role = "update"}
        } {llmopt.role = "k_loop"}
        tile.forall (%ti_2, %tj_2) in [16, 16] over block_threads {
          loop.for %mi_2 = 0 to 2 {
            loop.for %nj_2 = 0 to 4 {
              %sum = loop.load %acc[%ti_2, %tj_2, %mi_2, %nj_2] : memref<16x16x2x4xf32>
              %15 = loop.load %3[(((%bn * 64) + (%tj_2 * 4)) + %nj_2)] : memref<128xf32>
              %16 = arith.addf %sum, %15 : f32
              %17 = loop.load %1[(((%bm * 32) + (%ti_2 * 2)) + %mi_2), (((%bn * 64) + (%tj_2 * 4)) + %nj_2)] : memref<32x128xf32>
              %18 = arith.addf %16, %17 : f32
              loop.store %18, %2[(((%bm * 32) + (%ti_2 * 2)) + %mi_2), (((%bn * 64) + (%tj_2 * 4)) + %nj_2)] : memref<32x128xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "epilogue"}
      }
    }
    func.return %0 : memref<32x128xf32>
  }
}

// AUTO-LABEL: func.func @forward
// AUTO-NOT:     tile.alloc shared
// AUTO:         scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// AUTO-NEXT:      tile.forall (%{{.*}}, %{{.*}}) in [16, 16] over block_threads {
// AUTO-NEXT:        loop.for
// AUTO-NEXT:          loop.for
// AUTO-NEXT:            loop.load %5[{{.*}}, %[[K]]] : memref<32x33xf32>
// AUTO-NEXT:            loop.load %4[{{.*}}, %[[K]]] : memref<128x33xf32>
// AUTO-NOT:     tile.alloc shared

// BK16-LABEL: func.func @forward
// BK16-NOT:     tile.alloc shared
// BK16:         scf.for
// BK16-NEXT:      tile.forall (%{{.*}}, %{{.*}}) in [16, 16] over block_threads {
// BK16-NOT:     tile.alloc shared

// NUM:      // numerics: tolerance
// NUM-NEXT: stage-inputs {{.*}} ok
// NUM-NEXT: tile-to-kernel {{.*}} ok

// chunk_unroll=2: the chunk loop is unrolled twice, not whole (the K loop's code stays small).
// UNROLL2:      #pragma unroll 2
// UNROLL2-NEXT: for (long long kk = 0; kk < 32; kk += 1) {
// BAD: invalid options for pass 'stage-inputs': chunk_unroll must be an integer from 0 to 64, got -1
