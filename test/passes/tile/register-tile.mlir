// RUN: llm-opt %s --split-input-file -p 'register-tile{bm=16 bn=64 tm=2 tn=4 blocked=1}' | filecheck %s --check-prefix=KNOBS
// RUN: llm-opt %s --split-input-file -p register-tile | filecheck %s --check-prefix=AUTO
// RUN: llm-opt %s --split-input-file -p 'register-tile{bm=16 bn=64 tm=2 tn=4 blocked=2}' | filecheck %s --check-prefix=CYCLIC
// RUN: llm-opt %s --split-input-file -p register-tile,tile-to-kernel,canonicalize,cse,kernel-to-cuda --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p 'register-tile{bm=16 bn=64 tm=2 tn=4},tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p 'register-tile{bm=32 bn=32 tm=4 tn=4 blocked=3}' | filecheck %s --check-prefix=MMA
// RUN: llm-opt %s --split-input-file -p 'register-tile{bm=32 bn=32 tm=4 tn=4 blocked=3},tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: not llm-opt %s --split-input-file -p 'register-tile{bm=16 bn=64 tm=1 tn=4 blocked=3}' 2>&1 | filecheck %s --check-prefix=MMA-ODD
// A matrix-product kernel (one forall over threads, loop.reduce adds of products over one K,
// an epilogue) becomes a forall over blocks of bm x bn output tiles, each thread accumulating
// a tm x tn micro-tile in registers per reduction. The inputs are Tile IR as loop-to-tile
// makes it from captured PyTorch programs (the last chunk is written by hand).

// linear + bias + residual: x 32x64, weight 128x64, M=32 N=128 K=64.
builtin.module {
  func.func @forward(%l.weight: memref<128x64xf32> {llmopt.param = "l.weight"}, %l.bias: memref<128xf32> {llmopt.param = "l.bias"}, %x: memref<32x64xf32> {llmopt.input = "x"}, %r: memref<32x128xf32> {llmopt.input = "r"}) -> memref<32x128xf32> {
    %0 = memref.alloc() : memref<32x128xf32>
    tile.kernel @elementwise_7 grid [16, 1, 1] block [256, 1, 1] (%1 = %r : memref<32x128xf32>, %2 = %0 : memref<32x128xf32>, %3 = %l.bias : memref<128xf32>, %4 = %l.weight : memref<128x64xf32>, %5 = %x : memref<32x64xf32>) {
      tile.forall (%i0, %i1) in [32, 128] over threads {
        %6 = loop.reduce add %r_1 = 0 to 64 : f32 {
          %7 = loop.load %5[%i0, %r_1] : memref<32x64xf32>
          %8 = loop.load %4[%i1, %r_1] : memref<128x64xf32>
          %9 = arith.mulf %7, %8 : f32
          loop.yield %9 : f32
        }
        %10 = loop.load %3[%i1] : memref<128xf32>
        %11 = arith.addf %6, %10 : f32
        %12 = loop.load %1[%i0, %i1] : memref<32x128xf32>
        %13 = arith.addf %11, %12 : f32
        loop.store %13, %2[%i0, %i1] : memref<32x128xf32>
      }
    }
    func.return %0 : memref<32x128xf32>
  }
}

// The options: 16x64 block tiles, 2x4 per thread: 8x16 = 128 threads, 2x2 blocks.
// KNOBS-LABEL: func.func @forward
// KNOBS:       tile.kernel @elementwise_7 grid [4, 1, 1] block [128, 1, 1] (
// KNOBS-NEXT:    tile.forall (%[[BM:.*]], %[[BN:.*]]) in [2, 2] over blocks {
// KNOBS-NEXT:      %[[ACC:.*]] = tile.alloc registers : memref<8x16x2x4xf32>
// KNOBS-NEXT:      tile.forall (%[[TI:.*]], %[[TJ:.*]]) in [8, 16] over block_threads {
// KNOBS-NEXT:        loop.for %[[MI:.*]] = 0 to 2 {
// KNOBS-NEXT:          loop.for %[[NJ:.*]] = 0 to 4 {
// KNOBS-NEXT:            %[[Z:.*]] = arith.constant 0.000000e+00 : f32
// KNOBS-NEXT:            loop.store %[[Z]], %[[ACC]][%[[TI]], %[[TJ]], %[[MI]], %[[NJ]]] : memref<8x16x2x4xf32>
// KNOBS-NEXT:          } {unroll = 0 : i64}
// KNOBS-NEXT:        } {unroll = 0 : i64}
// KNOBS-NEXT:      } {llmopt.role = "init"}
// KNOBS-NEXT:      %[[C0:.*]] = arith.constant 0 : index
// KNOBS-NEXT:      %[[CK:.*]] = arith.constant 64 : index
// KNOBS-NEXT:      %[[C1:.*]] = arith.constant 1 : index
// KNOBS-NEXT:      scf.for %[[K:.*]] = %[[C0]] to %[[CK]] step %[[C1]] {
// KNOBS-NEXT:        tile.forall (%[[TI1:.*]], %[[TJ1:.*]]) in [8, 16] over block_threads {
// KNOBS-NEXT:          loop.for %[[MI1:.*]] = 0 to 2 {
// KNOBS-NEXT:            loop.for %[[NJ1:.*]] = 0 to 4 {
// Rows m = 16 bm + 2 ti + mi and columns n = 64 bn + 4 tj + nj: each thread's outputs are
// adjacent (blocked=1; the default is cyclic, below).
// KNOBS-NEXT:              %[[X:.*]] = loop.load %5[(((%[[BM]] * 16) + (%[[TI1]] * 2)) + %[[MI1]]), %[[K]]] : memref<32x64xf32>
// KNOBS-NEXT:              %[[W:.*]] = loop.load %4[(((%[[BN]] * 64) + (%[[TJ1]] * 4)) + %[[NJ1]]), %[[K]]] : memref<128x64xf32>
// KNOBS-NEXT:              %[[P:.*]] = arith.mulf %[[X]], %[[W]] : f32
// KNOBS-NEXT:              %[[OLD:.*]] = loop.load %[[ACC]][%[[TI1]], %[[TJ1]], %[[MI1]], %[[NJ1]]] : memref<8x16x2x4xf32>
// KNOBS-NEXT:              %[[NEW:.*]] = arith.addf %[[OLD]], %[[P]] : f32
// KNOBS-NEXT:              loop.store %[[NEW]], %[[ACC]][%[[TI1]], %[[TJ1]], %[[MI1]], %[[NJ1]]] : memref<8x16x2x4xf32>
// KNOBS-NEXT:            } {unroll = 0 : i64}
// KNOBS-NEXT:          } {unroll = 0 : i64}
// KNOBS-NEXT:        } {llmopt.role = "update"}
// KNOBS-NEXT:      } {llmopt.role = "k_loop"}
// The epilogue (bias, residual) once per output, after the K loop.
// KNOBS-NEXT:      tile.forall (%[[TI2:.*]], %[[TJ2:.*]]) in [8, 16] over block_threads {
// KNOBS-NEXT:        loop.for %[[MI2:.*]] = 0 to 2 {
// KNOBS-NEXT:          loop.for %[[NJ2:.*]] = 0 to 4 {
// KNOBS-NEXT:            %[[SUM:.*]] = loop.load %[[ACC]][%[[TI2]], %[[TJ2]], %[[MI2]], %[[NJ2]]] : memref<8x16x2x4xf32>
// KNOBS-NEXT:            %[[B:.*]] = loop.load %3[(((%[[BN]] * 64) + (%[[TJ2]] * 4)) + %[[NJ2]])] : memref<128xf32>
// KNOBS-NEXT:            %[[SB:.*]] = arith.addf %[[SUM]], %[[B]] : f32
// KNOBS-NEXT:            %[[RES:.*]] = loop.load %1[(((%[[BM]] * 16) + (%[[TI2]] * 2)) + %[[MI2]]), (((%[[BN]] * 64) + (%[[TJ2]] * 4)) + %[[NJ2]])] : memref<32x128xf32>
// KNOBS-NEXT:            %[[OUT:.*]] = arith.addf %[[SB]], %[[RES]] : f32
// KNOBS-NEXT:            loop.store %[[OUT]], %2[(((%[[BM]] * 16) + (%[[TI2]] * 2)) + %[[MI2]]), (((%[[BN]] * 64) + (%[[TJ2]] * 4)) + %[[NJ2]])] : memref<32x128xf32>
// KNOBS-NEXT:          } {unroll = 0 : i64}
// KNOBS-NEXT:        } {unroll = 0 : i64}
// KNOBS-NEXT:      } {llmopt.role = "epilogue"}
// KNOBS-NEXT:    }
// KNOBS-NEXT:  }
// KNOBS-NOT:   loop.reduce

// The heuristic: the largest reuse with at least 8 outputs a thread, 32x64 of 2x4 (two
// blocks; split-k, not a smaller tile, fills the GPU).
// AUTO-LABEL: func.func @forward
// AUTO:       tile.kernel @elementwise_7 grid [2, 1, 1] block [256, 1, 1] (
// AUTO-NEXT:    tile.forall (%[[BM:.*]], %[[BN:.*]]) in [1, 2] over blocks {
// AUTO-NEXT:      %[[ACC:.*]] = tile.alloc registers : memref<16x16x2x4xf32>
// AUTO:           scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// AUTO:             loop.load %5[(((%[[BM]] * 32) + (%{{.*}} * 16)) + %{{.*}}), %[[K]]] : memref<32x64xf32>
// AUTO-NEXT:        loop.load %4[(((%[[BN]] * 64) + (%{{.*}} * 16)) + %{{.*}}), %[[K]]] : memref<128x64xf32>
// AUTO:           } {llmopt.role = "k_loop"}
// AUTO-NOT:     loop.reduce

// blocked=2: cyclic, m = 16 bm + 8 mi + ti and n = 64 bn + 16 nj + tj (consecutive threads
// on consecutive outputs).
// CYCLIC-LABEL: func.func @forward
// CYCLIC:       tile.forall (%[[BM:.*]], %[[BN:.*]]) in [2, 2] over blocks {
// CYCLIC:         scf.for
// CYCLIC-NEXT:      tile.forall (%[[TI:.*]], %[[TJ:.*]]) in [8, 16] over block_threads {
// CYCLIC-NEXT:      loop.for %[[MI:.*]] = 0 to 2 {
// CYCLIC-NEXT:        loop.for %[[NJ:.*]] = 0 to 4 {
// CYCLIC-NEXT:          loop.load %5[(((%[[BM]] * 16) + (%[[MI]] * 8)) + %[[TI]]), %{{.*}}] : memref<32x64xf32>
// CYCLIC-NEXT:          loop.load %4[(((%[[BN]] * 64) + (%[[NJ]] * 16)) + %[[TJ]]), %{{.*}}] : memref<128x64xf32>
// CYCLIC:       loop.store %{{.*}}, %2[(((%[[BM]] * 16) + (%{{.*}} * 8)) + %{{.*}}), (((%[[BN]] * 64) + (%{{.*}} * 16)) + %{{.*}})] : memref<32x128xf32>

// blocked=3: the tensor-core layout of mma-fragments. Warps (wi, wj) own 32x16 outputs (8·tm x
// 4·tn); lane 4g+t owns rows g + 16i + 8rh and columns 2t + 8j + rl: the C/D elements of
// mma.sync's 16x8 fragments.
// MMA-LABEL: func.func @forward
// MMA:         %[[ACC:.*]] = tile.alloc registers : memref<1x2x8x4x2x2x2x2xf32>
// MMA:         scf.for %k =
// MMA-NEXT:      tile.forall (%[[WI:.*]], %[[WJ:.*]], %[[G:.*]], %[[T:.*]]) in [1, 2, 8, 4] over block_threads {
// MMA-NEXT:      loop.for %[[I:.*]] = 0 to 2 {
// MMA-NEXT:        loop.for %[[RH:.*]] = 0 to 2 {
// MMA-NEXT:          loop.for %[[J:.*]] = 0 to 2 {
// MMA-NEXT:            loop.for %[[RL:.*]] = 0 to 2 {
// MMA-NEXT:              loop.load %5[(((((%bm * 32) + (%[[WI]] * 32)) + %[[G]]) + (%[[I]] * 16)) + (%[[RH]] * 8)), %k] : memref<32x64xf32>
// MMA-NEXT:              loop.load %4[(((((%bn * 32) + (%[[WJ]] * 16)) + (%[[T]] * 2)) + (%[[J]] * 8)) + %[[RL]]), %k] : memref<128x64xf32>
// MMA:         } {llmopt.role = "update", llmopt.layout = "mma"}
// MMA-ODD:     register-tile: blocked=3 (tensor-core fragments) needs f32 sums, even tm and tn

// NUM:      // numerics: tolerance
// NUM-NEXT: register-tile {{.*}} ok
// NUM-NEXT: tile-to-kernel {{.*}} ok
// NUM-NEXT: canonicalize {{.*}} ok
// NUM-NEXT: cse {{.*}} ok
// NUM-NEXT: kernel-to-cuda {{.*}}(not interpreted

// -----

// The same product with its schedule knobs on the kernel (as apply-tuned sets them): 32x32
// tiles of 2x2. A pass option still wins over them.
builtin.module {
  func.func @forward(%l.weight: memref<128x64xf32> {llmopt.param = "l.weight"}, %l.bias: memref<128xf32> {llmopt.param = "l.bias"}, %x: memref<32x64xf32> {llmopt.input = "x"}, %r: memref<32x128xf32> {llmopt.input = "r"}) -> memref<32x128xf32> {
    %0 = memref.alloc() : memref<32x128xf32>
    tile.kernel @tuned grid [16, 1, 1] block [256, 1, 1] (%1 = %r : memref<32x128xf32>, %2 = %0 : memref<32x128xf32>, %3 = %l.bias : memref<128xf32>, %4 = %l.weight : memref<128x64xf32>, %5 = %x : memref<32x64xf32>) {
      tile.forall (%i0, %i1) in [32, 128] over threads {
        %6 = loop.reduce add %r_1 = 0 to 64 : f32 {
          %7 = loop.load %5[%i0, %r_1] : memref<32x64xf32>
          %8 = loop.load %4[%i1, %r_1] : memref<128x64xf32>
          %9 = arith.mulf %7, %8 : f32
          loop.yield %9 : f32
        }
        %10 = loop.load %3[%i1] : memref<128xf32>
        %11 = arith.addf %6, %10 : f32
        %12 = loop.load %1[%i0, %i1] : memref<32x128xf32>
        %13 = arith.addf %11, %12 : f32
        loop.store %13, %2[%i0, %i1] : memref<32x128xf32>
      }
    } {llmopt.schedule = {bm = 32 : i64, bn = 32 : i64, tm = 2 : i64, tn = 2 : i64}}
    func.return %0 : memref<32x128xf32>
  }
}

// KNOBS-LABEL: func.func @forward
// KNOBS:       tile.kernel @tuned grid [4, 1, 1] block [128, 1, 1] (
// KNOBS-NEXT:    tile.forall (%{{.*}}, %{{.*}}) in [2, 2] over blocks {
// KNOBS-NEXT:      tile.alloc registers : memref<8x16x2x4xf32>
// KNOBS:         } {llmopt.schedule = {bm = 32 : i64, bn = 32 : i64, tm = 2 : i64, tn = 2 : i64}}

// AUTO-LABEL: func.func @forward
// AUTO:       tile.kernel @tuned grid [4, 1, 1] block [256, 1, 1] (
// AUTO-NEXT:    tile.forall (%{{.*}}, %{{.*}}) in [1, 4] over blocks {
// AUTO-NEXT:      tile.alloc registers : memref<16x16x2x2xf32>
// AUTO:           tile.forall (%{{.*}}, %{{.*}}) in [16, 16] over block_threads {
// AUTO-NEXT:        loop.for %{{.*}} = 0 to 2 {
// AUTO-NEXT:          loop.for %{{.*}} = 0 to 2 {
// AUTO:         } {llmopt.schedule = {bm = 32 : i64, bn = 32 : i64, tm = 2 : i64, tn = 2 : i64}}

// NUM:      // numerics: tolerance
// NUM-NEXT: register-tile {{.*}} ok
// NUM-NEXT: tile-to-kernel {{.*}} ok
// NUM-NEXT: canonicalize {{.*}} ok
// NUM-NEXT: cse {{.*}} ok
// NUM-NEXT: kernel-to-cuda {{.*}}(not interpreted

// -----

// Attention scores with grouped KV heads (q 1x4x32x32, k 1x2x32x32): the batch dimensions
// (the unit one and the heads) become block dimensions; the KV head h floordiv 2 is kept.
builtin.module {
  func.func @forward(%q: memref<1x4x32x32xf32> {llmopt.input = "q"}, %k: memref<1x2x32x32xf32> {llmopt.input = "k"}) -> memref<1x4x32x32x1xf32> {
    %0 = memref.alloc() : memref<1x4x32x32x1xf32>
    tile.kernel @reduce_3 grid [16, 1, 1] block [256, 1, 1] (%1 = %0 : memref<1x4x32x32x1xf32>, %2 = %k : memref<1x2x32x32xf32>, %3 = %q : memref<1x4x32x32xf32>) {
      tile.forall (%i0, %i1, %i2, %i3) in [1, 4, 32, 32] over threads {
        %4 = loop.reduce add %r = 0 to 32 : f32 {
          %5 = loop.load %3[%i0, %i1, %i2, %r] : memref<1x4x32x32xf32>
          %6 = loop.load %2[%i0, (%i1 floordiv 2), %i3, %r] : memref<1x2x32x32xf32>
          %7 = arith.mulf %5, %6 : f32
          loop.yield %7 : f32
        }
        loop.store %4, %1[%i0, %i1, %i2, %i3, 0] : memref<1x4x32x32x1xf32>
      }
    }
    func.return %0 : memref<1x4x32x32x1xf32>
  }
}

// A 32x32 product per head: no tile of 8 outputs a thread divides it, so a ragged one of
// 32x64 (2x4 a thread) overhangs it by 32 columns, clamped on loads, guarded on stores.
// AUTO-LABEL: func.func @forward
// AUTO:       tile.kernel @reduce_3 grid [4, 1, 1] block [256, 1, 1] (
// AUTO-NEXT:    tile.forall (%[[B0:.*]], %[[B1:.*]], %[[BM:.*]], %[[BN:.*]]) in [1, 4, 1, 1] over blocks {
// AUTO-NEXT:      tile.alloc registers : memref<16x16x2x4xf32>
// AUTO:           scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// AUTO:             loop.load %3[0, %[[B1]], (((%[[BM]] * 32) + {{.*}}) + %{{.*}}), %[[K]]] clamp : memref<1x4x32x32xf32>
// AUTO-NEXT:        loop.load %2[0, (%[[B1]] floordiv 2), (((%[[BN]] * 64) + {{.*}}) + %{{.*}}), %[[K]]] clamp : memref<1x2x32x32xf32>
// AUTO:             arith.cmpi ult
// AUTO-NEXT:        scf.if
// AUTO:               loop.store %{{.*}}, %1[0, %[[B1]], (((%[[BM]] * 32) + {{.*}}) + %{{.*}}), (((%[[BN]] * 64) + {{.*}}) + %{{.*}}), 0] : memref<1x4x32x32x1xf32>

// The options' 64-wide tile overhangs N = 32 too.
// KNOBS-LABEL: func.func @forward
// KNOBS:       tile.kernel @reduce_3 grid [8, 1, 1] block [128, 1, 1] (
// KNOBS-NEXT:    tile.forall (%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) in [1, 4, 2, 1] over blocks {
// KNOBS-NEXT:      tile.alloc registers : memref<8x16x2x4xf32>
// KNOBS:           scf.if

// NUM:      // numerics: tolerance
// NUM-NEXT: register-tile {{.*}} ok
// NUM-NEXT: tile-to-kernel {{.*}} ok
// NUM-NEXT: canonicalize {{.*}} ok
// NUM-NEXT: cse {{.*}} ok
// NUM-NEXT: kernel-to-cuda {{.*}}(not interpreted

// -----

// M = 36 and N = 136 are divisible by no block tile: the tile overhangs the output (2 x 3
// blocks of 32 x 64). Loads from global memory are clamped into their buffers (the rows and
// columns past the edge compute values nobody keeps); the epilogue stores only outputs
// inside the output.
builtin.module {
  func.func @forward(%l.weight: memref<136x48xf32> {llmopt.param = "l.weight"}, %l.bias: memref<136xf32> {llmopt.param = "l.bias"}, %x: memref<36x48xf32> {llmopt.input = "x"}, %r: memref<36x136xf32> {llmopt.input = "r"}) -> memref<36x136xf32> {
    %0 = memref.alloc() : memref<36x136xf32>
    tile.kernel @odd grid [20, 1, 1] block [256, 1, 1] (%1 = %r : memref<36x136xf32>, %2 = %0 : memref<36x136xf32>, %3 = %l.bias : memref<136xf32>, %4 = %l.weight : memref<136x48xf32>, %5 = %x : memref<36x48xf32>) {
      tile.forall (%i0, %i1) in [36, 136] over threads {
        %6 = loop.reduce add %r_1 = 0 to 48 : f32 {
          %7 = loop.load %5[%i0, %r_1] : memref<36x48xf32>
          %8 = loop.load %4[%i1, %r_1] : memref<136x48xf32>
          %9 = arith.mulf %7, %8 : f32
          loop.yield %9 : f32
        }
        %10 = loop.load %3[%i1] : memref<136xf32>
        %11 = arith.addf %6, %10 : f32
        %12 = loop.load %1[%i0, %i1] : memref<36x136xf32>
        %13 = arith.addf %11, %12 : f32
        loop.store %13, %2[%i0, %i1] : memref<36x136xf32>
      }
    }
    func.return %0 : memref<36x136xf32>
  }
}

// AUTO-LABEL: func.func @forward
// AUTO:       tile.kernel @odd grid [6, 1, 1] block [256, 1, 1] (
// AUTO-NEXT:    tile.forall (%[[BM:.*]], %[[BN:.*]]) in [2, 3] over blocks {
// AUTO-NEXT:      tile.alloc registers : memref<16x16x2x4xf32>
// AUTO:           loop.load %5[(((%[[BM]] * 32) + (%{{.*}} * 16)) + %{{.*}}), %{{.*}}] clamp : memref<36x48xf32>
// AUTO-NEXT:      loop.load %4[(((%[[BN]] * 64) + (%{{.*}} * 16)) + %{{.*}}), %{{.*}}] clamp : memref<136x48xf32>
// AUTO:           %[[ROWS:.*]] = arith.constant 36 : index
// AUTO-NEXT:      %[[ROW_IN:.*]] = arith.cmpi ult, %{{.*}}, %[[ROWS]] : index
// AUTO-NEXT:      %[[COLS:.*]] = arith.constant 136 : index
// AUTO-NEXT:      %[[COL_IN:.*]] = arith.cmpi ult, %{{.*}}, %[[COLS]] : index
// AUTO-NEXT:      %[[IN:.*]] = arith.andi %[[ROW_IN]], %[[COL_IN]] : i1
// AUTO-NEXT:      scf.if %[[IN]] {
// AUTO-NEXT:        %sum = loop.load %acc
// AUTO-NEXT:        loop.load %3[{{.*}}] : memref<136xf32>
// AUTO:             loop.store %{{.*}}, %2[(((%[[BM]] * 32) + {{.*}}), (((%[[BN]] * 64) + {{.*}})] : memref<36x136xf32>
// AUTO:         func.return

// KNOBS-LABEL: func.func @forward
// KNOBS:       tile.kernel @odd grid [9, 1, 1] block [128, 1, 1] (
// KNOBS-NEXT:    tile.forall (%{{.*}}, %{{.*}}) in [3, 3] over blocks {
// KNOBS:           loop.load %5[{{.*}}] clamp : memref<36x48xf32>
// KNOBS:           scf.if
// KNOBS:         func.return

// NUM:      // numerics: tolerance
// NUM-NEXT: register-tile {{.*}} ok
// NUM-NEXT: tile-to-kernel {{.*}} ok

// -----

// A plain sum (x 64x64x16 summed over the last dimension) reads one operand: nothing to
// reuse from registers, not tiled even when options ask for it.
builtin.module {
  func.func @forward(%x: memref<64x64x16xf32> {llmopt.input = "x"}) -> memref<64x64xf32> {
    %0 = memref.alloc() : memref<64x64xf32>
    tile.kernel @index_map_1 grid [16, 1, 1] block [256, 1, 1] (%1 = %0 : memref<64x64xf32>, %2 = %x : memref<64x64x16xf32>) {
      tile.forall (%i0, %i1) in [64, 64] over threads {
        %3 = loop.reduce add %r = 0 to 16 : f32 {
          %4 = loop.load %2[%i0, %i1, %r] : memref<64x64x16xf32>
          loop.yield %4 : f32
        }
        loop.store %3, %1[%i0, %i1] : memref<64x64xf32>
      }
    }
    func.return %0 : memref<64x64xf32>
  }
}

// AUTO-LABEL: func.func @forward
// AUTO:       tile.kernel @index_map_1 grid [16, 1, 1] block [256, 1, 1] (
// AUTO-NEXT:    tile.forall (%{{.*}}, %{{.*}}) in [64, 64] over threads {
// AUTO-NEXT:      loop.reduce add %{{.*}} = 0 to 16 : f32 {
// AUTO-NOT:     tile.alloc

// KNOBS-LABEL: func.func @forward
// KNOBS:       tile.kernel @index_map_1 grid [16, 1, 1] block [256, 1, 1] (
// KNOBS-NEXT:    tile.forall (%{{.*}}, %{{.*}}) in [64, 64] over threads {
// KNOBS-NEXT:      loop.reduce add %{{.*}} = 0 to 16 : f32 {
// KNOBS-NOT:     tile.alloc

// NUM:      // numerics: tolerance
// NUM-NEXT: register-tile {{.*}} ok
// NUM-NEXT: tile-to-kernel {{.*}} ok

// -----

// The gate and up projections of silu(x Wg) * (x Wu), fused in one kernel (x 32x32, Wg and
// Wu 128x32): two reductions over the same K, one register tile of accumulators each, both
// updated in the same K step; the silu and the product run once per output.
builtin.module {
  func.func @forward(%g.weight: memref<128x32xf32> {llmopt.param = "g.weight"}, %u.weight: memref<128x32xf32> {llmopt.param = "u.weight"}, %x: memref<32x32xf32> {llmopt.input = "x"}) -> memref<32x128xf32> {
    %0 = memref.alloc() : memref<32x128xf32>
    tile.kernel @elementwise_11 grid [16, 1, 1] block [256, 1, 1] (%1 = %0 : memref<32x128xf32>, %2 = %u.weight : memref<128x32xf32>, %3 = %x : memref<32x32xf32>, %4 = %g.weight : memref<128x32xf32>) {
      %5 = arith.constant 1.000000e+00 : f32
      tile.forall (%i0, %i1) in [32, 128] over threads {
        %6 = loop.reduce add %r = 0 to 32 : f32 {
          %7 = loop.load %3[%i0, %r] : memref<32x32xf32>
          %8 = loop.load %4[%i1, %r] : memref<128x32xf32>
          %9 = arith.mulf %7, %8 : f32
          loop.yield %9 : f32
        }
        %10 = arith.negf %6 : f32
        %11 = math.exp %10 : f32
        %12 = arith.addf %5, %11 : f32
        %13 = arith.divf %5, %12 : f32
        %14 = arith.mulf %6, %13 : f32
        %15 = loop.reduce add %r_1 = 0 to 32 : f32 {
          %16 = loop.load %3[%i0, %r_1] : memref<32x32xf32>
          %17 = loop.load %2[%i1, %r_1] : memref<128x32xf32>
          %18 = arith.mulf %16, %17 : f32
          loop.yield %18 : f32
        }
        %19 = arith.mulf %14, %15 : f32
        loop.store %19, %1[%i0, %i1] : memref<32x128xf32>
      }
    }
    func.return %0 : memref<32x128xf32>
  }
}

// AUTO-LABEL: func.func @forward
// AUTO:       tile.kernel @elementwise_11 grid [2, 1, 1] block [256, 1, 1] (
// AUTO-NEXT:    %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// AUTO-NEXT:    tile.forall (%[[BM:.*]], %[[BN:.*]]) in [1, 2] over blocks {
// AUTO-NEXT:      %[[G:.*]] = tile.alloc registers : memref<16x16x2x4xf32>
// AUTO-NEXT:      %[[U:.*]] = tile.alloc registers : memref<16x16x2x4xf32>
// AUTO-NEXT:      tile.forall
// AUTO-NEXT:        loop.for
// AUTO-NEXT:          loop.for
// AUTO-NEXT:            %[[Z:.*]] = arith.constant 0.000000e+00 : f32
// AUTO-NEXT:            loop.store %[[Z]], %[[G]][
// AUTO-NEXT:            loop.store %[[Z]], %[[U]][
// AUTO:           scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// AUTO:                 loop.load %3[{{.*}}, %[[K]]] : memref<32x32xf32>
// AUTO-NEXT:            loop.load %4[{{.*}}, %[[K]]] : memref<128x32xf32>
// AUTO-NEXT:            arith.mulf
// AUTO-NEXT:            loop.load %[[G]][
// AUTO-NEXT:            arith.addf
// AUTO-NEXT:            loop.store %{{.*}}, %[[G]][
// AUTO-NEXT:            loop.load %3[{{.*}}, %[[K]]] : memref<32x32xf32>
// AUTO-NEXT:            loop.load %2[{{.*}}, %[[K]]] : memref<128x32xf32>
// AUTO-NEXT:            arith.mulf
// AUTO-NEXT:            loop.load %[[U]][
// AUTO-NEXT:            arith.addf
// AUTO-NEXT:            loop.store %{{.*}}, %[[U]][
// AUTO:           } {llmopt.role = "k_loop"}
// AUTO:                 %[[GS:.*]] = loop.load %[[G]][
// AUTO-NEXT:            %[[US:.*]] = loop.load %[[U]][
// AUTO-NEXT:            %[[NEG:.*]] = arith.negf %[[GS]] : f32
// AUTO:                 %[[SILU:.*]] = arith.mulf %[[GS]], %{{.*}} : f32
// AUTO-NEXT:            %[[OUT:.*]] = arith.mulf %[[SILU]], %[[US]] : f32
// AUTO-NEXT:            loop.store %[[OUT]], %1[
// AUTO-NOT:     loop.reduce

// KNOBS-LABEL: func.func @forward
// KNOBS:       tile.kernel @elementwise_11 grid [4, 1, 1] block [128, 1, 1] (
// KNOBS:           tile.alloc registers : memref<8x16x2x4xf32>
// KNOBS-NEXT:      tile.alloc registers : memref<8x16x2x4xf32>

// NUM:      // numerics: tolerance
// NUM-NEXT: register-tile {{.*}} ok
// NUM-NEXT: tile-to-kernel {{.*}} ok

// -----

// The reduction reads a value of the forall body (a per-row scale, a prologue): it is
// recomputed in every K step.
func.func @forward(%x: memref<32x64xf32>, %w: memref<128x64xf32>, %scale: memref<32xf32>) -> memref<32x128xf32> {
  %y = memref.alloc() : memref<32x128xf32>
  tile.kernel @scaled grid [16, 1, 1] block [256, 1, 1] (%a = %x : memref<32x64xf32>, %b = %w : memref<128x64xf32>, %c = %scale : memref<32xf32>, %o = %y : memref<32x128xf32>) {
    tile.forall (%i, %j) in [32, 128] over threads {
      %sc = loop.load %c[%i] : memref<32xf32>
      %s = loop.reduce add %k = 0 to 64 : f32 {
        %u = loop.load %a[%i, %k] : memref<32x64xf32>
        %v = loop.load %b[%j, %k] : memref<128x64xf32>
        %p = arith.mulf %u, %v : f32
        %q = arith.mulf %p, %sc : f32
        loop.yield %q : f32
      }
      loop.store %s, %o[%i, %j] : memref<32x128xf32>
    }
  }
  func.return %y : memref<32x128xf32>
}

// AUTO-LABEL: func.func @forward
// AUTO:       tile.kernel @scaled grid [2, 1, 1] block [256, 1, 1] (
// AUTO:           scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// AUTO-NEXT:        tile.forall (%[[TI:.*]], %[[TJ:.*]]) in [16, 16] over block_threads {
// AUTO-NEXT:          loop.for %[[MI:.*]] = 0 to 2 {
// AUTO-NEXT:            loop.for %{{.*}} = 0 to 4 {
// AUTO-NEXT:              %[[SC:.*]] = loop.load %2[(((%{{.*}} * 32) + (%[[MI]] * 16)) + %[[TI]])] : memref<32xf32>
// AUTO-NEXT:              loop.load %0[{{.*}}, %[[K]]] : memref<32x64xf32>
// AUTO-NEXT:              loop.load %1[{{.*}}, %[[K]]] : memref<128x64xf32>
// AUTO-NEXT:              %[[P:.*]] = arith.mulf
// AUTO-NEXT:              arith.mulf %[[P]], %[[SC]] : f32
// AUTO:           } {llmopt.role = "k_loop"}

// KNOBS-LABEL: func.func @forward
// KNOBS:       tile.kernel @scaled grid [4, 1, 1] block [128, 1, 1] (

// NUM:      // numerics: tolerance
// NUM-NEXT: register-tile {{.*}} ok
// NUM-NEXT: tile-to-kernel {{.*}} ok
