// RUN: llm-opt %s --split-input-file -p 'split-k{split_k=2}' | filecheck %s --check-prefix=TWO
// RUN: llm-opt %s --split-input-file -p split-k | filecheck %s --check-prefix=AUTO
// RUN: llm-opt %s --split-input-file -p 'split-k{split_k=1}' | filecheck %s --check-prefix=ONE
// RUN: llm-opt %s --split-input-file -p 'split-k{split_k=2},register-tile' | filecheck %s --check-prefix=TILED
// RUN: llm-opt %s --split-input-file -p 'split-k{split_k=2},tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p split-k,register-tile,stage-inputs,pad-shared,tile-to-kernel,canonicalize,cse,kernel-to-cuda --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// A matrix product is cut along K into S slices: a first kernel (<name>_split) writes the
// S partial sums of every output into a new buffer, a second (<name>) adds them in slice
// order and applies the epilogue. The inputs are Tile IR as loop-to-tile makes it from
// captured programs.

// linear + bias + residual, M=32 N=128 K=64.
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

// TWO-LABEL: func.func @forward
// TWO-NEXT:    %[[OUT:.*]] = memref.alloc() : memref<32x128xf32>
// TWO-NEXT:    %[[PART:.*]] = memref.alloc() : memref<2x32x128xf32>
// TWO-NEXT:    tile.kernel @elementwise_7_split grid [32, 1, 1] block [256, 1, 1] (%{{.*}} = %r : memref<32x128xf32>, %{{.*}} = %[[OUT]] : memref<32x128xf32>, %{{.*}} = %l.bias : memref<128xf32>, %[[W:.*]] = %l.weight : memref<128x64xf32>, %[[X:.*]] = %x : memref<32x64xf32>, %[[P:.*]] = %[[PART]] : memref<2x32x128xf32>) {
// TWO-NEXT:      tile.forall (%[[S:.*]], %[[I0:.*]], %[[I1:.*]]) in [2, 32, 128] over threads {
// TWO-NEXT:        %[[SUM:.*]] = loop.reduce add %[[KK:.*]] = 0 to 32 : f32 {
// TWO-NEXT:          %[[A:.*]] = loop.load %[[X]][%[[I0]], ((%[[S]] * 32) + %[[KK]])] : memref<32x64xf32>
// TWO-NEXT:          %[[B:.*]] = loop.load %[[W]][%[[I1]], ((%[[S]] * 32) + %[[KK]])] : memref<128x64xf32>
// TWO-NEXT:          %[[AB:.*]] = arith.mulf %[[A]], %[[B]] : f32
// TWO-NEXT:          loop.yield %[[AB]] : f32
// TWO-NEXT:        }
// TWO-NEXT:        loop.store %[[SUM]], %[[P]][%[[S]], %[[I0]], %[[I1]]] : memref<2x32x128xf32>
// TWO-NEXT:      }
// TWO-NEXT:    } {llmopt.split = "partial"}
// TWO-NEXT:    tile.kernel @elementwise_7 grid [16, 1, 1] block [256, 1, 1] (%[[R:.*]] = %r : memref<32x128xf32>, %[[O:.*]] = %[[OUT]] : memref<32x128xf32>, %[[BIAS:.*]] = %l.bias : memref<128xf32>, %{{.*}} = %l.weight : memref<128x64xf32>, %{{.*}} = %x : memref<32x64xf32>, %[[P2:.*]] = %[[PART]] : memref<2x32x128xf32>) {
// TWO-NEXT:      tile.forall (%[[J0:.*]], %[[J1:.*]]) in [32, 128] over threads {
// TWO-NEXT:        %[[TOT:.*]] = loop.reduce add %[[SS:.*]] = 0 to 2 : f32 {
// TWO-NEXT:          %[[PV:.*]] = loop.load %[[P2]][%[[SS]], %[[J0]], %[[J1]]] : memref<2x32x128xf32>
// TWO-NEXT:          loop.yield %[[PV]] : f32
// TWO-NEXT:        }
// TWO-NEXT:        %[[BV:.*]] = loop.load %[[BIAS]][%[[J1]]] : memref<128xf32>
// TWO-NEXT:        %[[T1:.*]] = arith.addf %[[TOT]], %[[BV]] : f32
// TWO-NEXT:        %[[RV:.*]] = loop.load %[[R]][%[[J0]], %[[J1]]] : memref<32x128xf32>
// TWO-NEXT:        %[[T2:.*]] = arith.addf %[[T1]], %[[RV]] : f32
// TWO-NEXT:        loop.store %[[T2]], %[[O]][%[[J0]], %[[J1]]] : memref<32x128xf32>
// TWO-NEXT:      }
// TWO-NEXT:    } {llmopt.split = "total"}
// TWO-NEXT:    func.return %[[OUT]] : memref<32x128xf32>

// The heuristic keeps each slice at least 128 long: K = 64 is not split.
// AUTO-LABEL: func.func @forward
// AUTO-NOT:     memref.alloc() : memref<{{.*}}x32x128xf32>
// AUTO:         tile.kernel @elementwise_7 grid [16, 1, 1] block [256, 1, 1]
// AUTO-NEXT:      tile.forall (%{{.*}}, %{{.*}}) in [32, 128] over threads {
// AUTO-NEXT:        loop.reduce add %{{.*}} = 0 to 64 : f32 {
// AUTO-NOT:     _split

// ONE-LABEL: func.func @forward
// ONE-NOT:     _split
// ONE:         loop.reduce add %{{.*}} = 0 to 64 : f32 {
// ONE-NOT:     _split

// register-tile then tiles the partial kernel, the slice a batch dimension of its blocks;
// the kernel summing the slices is a plain sum and stays one thread per output.
// TILED-LABEL: func.func @forward
// TILED:         tile.kernel @elementwise_7_split grid [4, 1, 1] block [256, 1, 1]
// TILED-NEXT:      tile.forall (%{{.*}}, %{{.*}}, %{{.*}}) in [2, 1, 2] over blocks {
// TILED-NEXT:        tile.alloc registers : memref<16x16x2x4xf32>
// TILED:           } {llmopt.split = "partial"}
// TILED-NEXT:      tile.kernel @elementwise_7 grid [16, 1, 1] block [256, 1, 1]
// TILED-NEXT:        tile.forall (%{{.*}}, %{{.*}}) in [32, 128] over threads {
// TILED-NEXT:          loop.reduce add %{{.*}} = 0 to 2 : f32 {

// NUM:      // numerics: tolerance
// NUM-NEXT: split-k {{.*}} ok
// NUM:      tile-to-kernel {{.*}} ok
// NUM-NEXT: canonicalize {{.*}} ok
// NUM-NEXT: cse {{.*}} ok
// NUM-NEXT: kernel-to-cuda {{.*}}(not interpreted

// -----

// K = 256: the heuristic cuts it in two slices of 128 (the two 32x64 blocks of the
// register tile are far fewer than the multiprocessors).
builtin.module {
  func.func @forward(%l.weight: memref<128x256xf32> {llmopt.param = "l.weight"}, %l.bias: memref<128xf32> {llmopt.param = "l.bias"}, %x: memref<32x256xf32> {llmopt.input = "x"}, %r: memref<32x128xf32> {llmopt.input = "r"}) -> memref<32x128xf32> {
    %0 = memref.alloc() : memref<32x128xf32>
    tile.kernel @k256 grid [16, 1, 1] block [256, 1, 1] (%1 = %r : memref<32x128xf32>, %2 = %0 : memref<32x128xf32>, %3 = %l.bias : memref<128xf32>, %4 = %l.weight : memref<128x256xf32>, %5 = %x : memref<32x256xf32>) {
      tile.forall (%i0, %i1) in [32, 128] over threads {
        %6 = loop.reduce add %r_1 = 0 to 256 : f32 {
          %7 = loop.load %5[%i0, %r_1] : memref<32x256xf32>
          %8 = loop.load %4[%i1, %r_1] : memref<128x256xf32>
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

// TWO-LABEL: func.func @forward
// TWO:         memref.alloc() : memref<2x32x128xf32>
// TWO-NEXT:    tile.kernel @k256_split grid [32, 1, 1]
// TWO:           loop.reduce add %{{.*}} = 0 to 128 : f32 {

// AUTO-LABEL: func.func @forward
// AUTO:         %[[PART:.*]] = memref.alloc() : memref<2x32x128xf32>
// AUTO-NEXT:    tile.kernel @k256_split grid [32, 1, 1] block [256, 1, 1]
// AUTO-NEXT:      tile.forall (%[[S:.*]], %{{.*}}, %{{.*}}) in [2, 32, 128] over threads {
// AUTO-NEXT:        loop.reduce add %[[KK:.*]] = 0 to 128 : f32 {
// AUTO-NEXT:          loop.load %{{.*}}[%{{.*}}, ((%[[S]] * 128) + %[[KK]])] : memref<32x256xf32>
// The heuristic's register tile for the slices goes with them.
// AUTO:         } {llmopt.split = "partial", llmopt.schedule = {bm = 32 : i64, bn = 64 : i64, tm = 2 : i64, tn = 4 : i64}}
// AUTO-NEXT:    tile.kernel @k256 grid [16, 1, 1] block [256, 1, 1]
// AUTO-NEXT:      tile.forall
// AUTO-NEXT:        loop.reduce add %{{.*}} = 0 to 2 : f32 {
// AUTO:         } {llmopt.split = "total"}

// ONE-LABEL: func.func @forward
// ONE-NOT:     _split
// ONE:         loop.reduce add %{{.*}} = 0 to 256 : f32 {
// ONE-NOT:     _split

// TILED-LABEL: func.func @forward
// TILED:         tile.kernel @k256_split
// TILED-NEXT:      tile.forall (%{{.*}}, %{{.*}}, %{{.*}}) in [2, 1, 2] over blocks {

// NUM:      // numerics: tolerance
// NUM-NEXT: split-k {{.*}} ok
// NUM:      tile-to-kernel {{.*}} ok

// -----

// The kernel's schedule knobs ask for 4 slices (of 16); the partial kernel keeps the knobs
// (for register-tile), the summing kernel drops them. The pass option wins over them.
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
    } {llmopt.schedule = {bm = 32 : i64, bn = 32 : i64, split_k = 4 : i64, tm = 2 : i64, tn = 2 : i64}}
    func.return %0 : memref<32x128xf32>
  }
}

// TWO-LABEL: func.func @forward
// TWO:         memref.alloc() : memref<2x32x128xf32>
// TWO-NEXT:    tile.kernel @tuned_split grid [32, 1, 1]
// TWO:           loop.reduce add %{{.*}} = 0 to 32 : f32 {

// AUTO-LABEL: func.func @forward
// AUTO:         memref.alloc() : memref<4x32x128xf32>
// AUTO-NEXT:    tile.kernel @tuned_split grid [64, 1, 1] block [256, 1, 1]
// AUTO-NEXT:      tile.forall (%{{.*}}, %{{.*}}, %{{.*}}) in [4, 32, 128] over threads {
// AUTO-NEXT:        loop.reduce add %{{.*}} = 0 to 16 : f32 {
// AUTO:         } {llmopt.split = "partial", llmopt.schedule = {bm = 32 : i64, bn = 32 : i64, split_k = 4 : i64, tm = 2 : i64, tn = 2 : i64}}
// AUTO-NEXT:    tile.kernel @tuned grid [16, 1, 1] block [256, 1, 1]
// AUTO-NEXT:      tile.forall
// AUTO-NEXT:        loop.reduce add %{{.*}} = 0 to 4 : f32 {
// AUTO:         } {llmopt.split = "total"}

// ONE-LABEL: func.func @forward
// ONE-NOT:     _split
// ONE:         loop.reduce add %{{.*}} = 0 to 64 : f32 {
// ONE:         } {llmopt.schedule = {bm = 32 : i64, bn = 32 : i64, split_k = 4 : i64, tm = 2 : i64, tn = 2 : i64}}

// The partial kernel's knobs choose its register tile: 32x32 of 2x2.
// TILED-LABEL: func.func @forward
// TILED:         tile.kernel @tuned_split grid [8, 1, 1] block [256, 1, 1]
// TILED-NEXT:      tile.forall (%{{.*}}, %{{.*}}, %{{.*}}) in [2, 1, 4] over blocks {
// TILED-NEXT:        tile.alloc registers : memref<16x16x2x2xf32>

// NUM:      // numerics: tolerance
// NUM-NEXT: split-k {{.*}} ok
// NUM:      tile-to-kernel {{.*}} ok

// -----

// K = 33 is not divisible by 2 slices: left alone.
builtin.module {
  func.func @forward(%l.weight: memref<128x33xf32> {llmopt.param = "l.weight"}, %l.bias: memref<128xf32> {llmopt.param = "l.bias"}, %x: memref<32x33xf32> {llmopt.input = "x"}, %r: memref<32x128xf32> {llmopt.input = "r"}) -> memref<32x128xf32> {
    %0 = memref.alloc() : memref<32x128xf32>
    tile.kernel @k33 grid [16, 1, 1] block [256, 1, 1] (%1 = %r : memref<32x128xf32>, %2 = %0 : memref<32x128xf32>, %3 = %l.bias : memref<128xf32>, %4 = %l.weight : memref<128x33xf32>, %5 = %x : memref<32x33xf32>) {
      tile.forall (%i0, %i1) in [32, 128] over threads {
        %6 = loop.reduce add %r_1 = 0 to 33 : f32 {
          %7 = loop.load %5[%i0, %r_1] : memref<32x33xf32>
          %8 = loop.load %4[%i1, %r_1] : memref<128x33xf32>
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

// TWO-LABEL: func.func @forward
// TWO-NOT:     _split
// TWO:         tile.kernel @k33 grid [16, 1, 1]
// TWO-NEXT:      tile.forall (%{{.*}}, %{{.*}}) in [32, 128] over threads {
// TWO-NEXT:        loop.reduce add %{{.*}} = 0 to 33 : f32 {
// TWO-NOT:     _split

// NUM:      // numerics: tolerance
// NUM-NEXT: split-k {{.*}} ok

// -----

// M = 36, N = 136: no register tile divides the output; a ragged tile overhangs it, and the
// slices are cut as for any other product (the heuristic keeps K = 48 whole).
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

// TWO-LABEL: func.func @forward
// TWO:         %partial = memref.alloc() : memref<2x36x136xf32>
// TWO:         tile.kernel @odd_split grid [39, 1, 1]
// TWO-NEXT:      tile.forall (%{{.*}}, %{{.*}}, %{{.*}}) in [2, 36, 136] over threads {
// TWO-NEXT:        loop.reduce add %{{.*}} = 0 to 24 : f32 {
// TWO:         tile.kernel @odd grid [20, 1, 1]
// TWO-NEXT:      tile.forall (%{{.*}}, %{{.*}}) in [36, 136] over threads {
// TWO-NEXT:        loop.reduce add %{{.*}} = 0 to 2 : f32 {

// AUTO-LABEL:   tile.kernel @odd grid [20, 1, 1]
// AUTO-NEXT:      tile.forall (%{{.*}}, %{{.*}}) in [36, 136] over threads {
// AUTO-NEXT:        loop.reduce add %{{.*}} = 0 to 48 : f32 {

// NUM:      // numerics: tolerance
// NUM-NEXT: split-k {{.*}} ok

// -----

// A plain sum is not a matrix product: not split.
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

// TWO-LABEL: func.func @forward
// TWO-NOT:     _split
// TWO:         tile.kernel @index_map_1 grid [16, 1, 1]
// TWO-NEXT:      tile.forall (%{{.*}}, %{{.*}}) in [64, 64] over threads {
// TWO-NEXT:        loop.reduce add %{{.*}} = 0 to 16 : f32 {
// TWO-NOT:     _split

// NUM:      // numerics: tolerance
// NUM-NEXT: split-k {{.*}} ok

// -----

// The reduction reads a per-row scale loaded before it (a prologue): the partial kernel
// loads it too.
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

// TWO-LABEL: func.func @forward
// TWO:         %[[PART:.*]] = memref.alloc() : memref<2x32x128xf32>
// TWO-NEXT:    tile.kernel @scaled_split grid [32, 1, 1] block [256, 1, 1]
// TWO-NEXT:      tile.forall (%[[S:.*]], %[[I:.*]], %[[J:.*]]) in [2, 32, 128] over threads {
// TWO-NEXT:        %[[SC:.*]] = loop.load %{{.*}}[%[[I]]] : memref<32xf32>
// TWO-NEXT:        loop.reduce add %{{.*}} = 0 to 32 : f32 {
// TWO:               arith.mulf %{{.*}}, %[[SC]] : f32
// TWO:         } {llmopt.split = "partial"}
// TWO:         } {llmopt.split = "total"}

// NUM:      // numerics: tolerance
// NUM-NEXT: split-k {{.*}} ok
// NUM:      tile-to-kernel {{.*}} ok

// -----

// Two reductions over the same K in one kernel (the fused gate and up projections): one
// partial-sum buffer per reduction; the total kernel sums each and applies silu(g)·u.
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

// TWO-LABEL: func.func @forward
// TWO:         %[[PG:.*]] = memref.alloc() : memref<2x32x128xf32>
// TWO-NEXT:    %[[PU:.*]] = memref.alloc() : memref<2x32x128xf32>
// TWO-NEXT:    tile.kernel @elementwise_11_split grid [32, 1, 1] block [256, 1, 1] ({{.*}}, %[[G:.*]] = %[[PG]] : memref<2x32x128xf32>, %[[U:.*]] = %[[PU]] : memref<2x32x128xf32>) {
// TWO:           tile.forall (%[[S:.*]], %[[I0:.*]], %[[I1:.*]]) in [2, 32, 128] over threads {
// TWO-NEXT:        %[[SG:.*]] = loop.reduce add %{{.*}} = 0 to 16 : f32 {
// TWO:             loop.store %[[SG]], %[[G]][%[[S]], %[[I0]], %[[I1]]] : memref<2x32x128xf32>
// TWO-NEXT:        %[[SU:.*]] = loop.reduce add %{{.*}} = 0 to 16 : f32 {
// TWO:             loop.store %[[SU]], %[[U]][%[[S]], %[[I0]], %[[I1]]] : memref<2x32x128xf32>
// TWO-NEXT:      }
// TWO-NEXT:    } {llmopt.split = "partial"}
// TWO-NEXT:    tile.kernel @elementwise_11 grid [16, 1, 1]
// TWO:           tile.forall (%{{.*}}, %{{.*}}) in [32, 128] over threads {
// TWO-NEXT:        %[[TG:.*]] = loop.reduce add %{{.*}} = 0 to 2 : f32 {
// TWO:             %[[TU:.*]] = loop.reduce add %{{.*}} = 0 to 2 : f32 {
// TWO:             %[[NEG:.*]] = arith.negf %[[TG]] : f32
// TWO:             %[[SILU:.*]] = arith.mulf %[[TG]], %{{.*}} : f32
// TWO-NEXT:        %{{.*}} = arith.mulf %[[SILU]], %[[TU]] : f32
// TWO:         } {llmopt.split = "total"}

// The heuristic leaves kernels with several reductions whole.
// AUTO-LABEL: func.func @forward
// AUTO-NOT:     _split

// The partial kernel keeps both reductions, so register-tile gives each thread two
// micro-tiles of accumulators.
// TILED-LABEL: func.func @forward
// TILED:         tile.kernel @elementwise_11_split
// TILED:           tile.alloc registers
// TILED-NEXT:      tile.alloc registers
// TILED:         } {llmopt.split = "partial"}

// NUM:      // numerics: tolerance
// NUM-NEXT: split-k {{.*}} ok
