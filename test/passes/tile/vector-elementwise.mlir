// RUN: llm-opt %s --split-input-file -p vector-elementwise | filecheck %s
// RUN: llm-opt %s --split-input-file -p 'vector-elementwise{bytes=8}' | filecheck %s --check-prefix=EIGHT
// RUN: llm-opt %s --split-input-file -p 'vector-elementwise,tile-to-kernel,canonicalize,cse' --check-numerics --check-numerics-lengths 3 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p 'vector-elementwise,tile-to-kernel,canonicalize,cse,kernel-to-cuda' -t cuda | filecheck %s --check-prefix=CUDA
// Thread-mapped elementwise kernels as loop-to-tile schedules them. vector-elementwise gives
// each thread 16 bytes of every access that runs along the innermost coordinate: copies into
// registers of the point, the old body once per element, the result copied out.

// SiLU(g) * u in bf16: eight elements a thread, the grid divided by 8.
func.func @silu_mul(%g: memref<1x4x64xbf16> {llmopt.input = "g"}, %u: memref<1x4x64xbf16> {llmopt.input = "u"}) -> memref<1x4x64xbf16> {
  %0 = memref.alloc() : memref<1x4x64xbf16>
  tile.kernel @silu_mul grid [4, 1, 1] block [64, 1, 1] (%uu = %u : memref<1x4x64xbf16>, %out = %0 : memref<1x4x64xbf16>, %gg = %g : memref<1x4x64xbf16>) {
    %one = arith.constant 1.000000e+00 : f32
    tile.forall (%i0, %i1, %i2) in [1, 4, 64] over threads {
      %5 = loop.load %gg[%i0, %i1, %i2] : memref<1x4x64xbf16>
      %6 = arith.extf %5 : bf16 to f32
      %7 = arith.negf %6 : f32
      %8 = math.exp %7 : f32
      %9 = arith.addf %one, %8 : f32
      %10 = arith.divf %one, %9 : f32
      %11 = arith.mulf %6, %10 : f32
      %12 = arith.truncf %11 : f32 to bf16
      %13 = loop.load %uu[%i0, %i1, %i2] : memref<1x4x64xbf16>
      %14 = arith.extf %12 : bf16 to f32
      %15 = arith.extf %13 : bf16 to f32
      %16 = arith.mulf %14, %15 : f32
      %17 = arith.truncf %16 : f32 to bf16
      loop.store %17, %out[%i0, %i1, %i2] : memref<1x4x64xbf16>
    }
  }
  func.return %0 : memref<1x4x64xbf16>
}
// CHECK-LABEL: func.func @silu_mul
// CHECK:       tile.kernel @silu_mul grid [1, 1, 1] block [64, 1, 1]
// CHECK:         tile.forall (%i0, %i1, %q) in [1, 4, 8] over threads {
// CHECK-NEXT:      %[[G:.*]] = tile.alloc registers : memref<8xbf16>
// CHECK-NEXT:      tile.copy %gg[%i0, %i1, (%q * 8)] to %[[G]][0] count 8
// CHECK-NEXT:      %[[U:.*]] = tile.alloc registers : memref<8xbf16>
// CHECK-NEXT:      tile.copy %uu[%i0, %i1, (%q * 8)] to %[[U]][0] count 8
// CHECK-NEXT:      %[[O:.*]] = tile.alloc registers : memref<8xbf16>
// CHECK:           scf.for %v =
// CHECK:             loop.load %[[G]][%v] : memref<8xbf16>
// CHECK:             loop.load %[[U]][%v] : memref<8xbf16>
// CHECK:             loop.store %{{.*}}, %[[O]][%v] : memref<8xbf16>
// CHECK-NEXT:      } {unroll = 0 : i64}
// CHECK-NEXT:      tile.copy %[[O]][0] to %out[%i0, %i1, (%q * 8)] count 8
// EIGHT-LABEL: func.func @silu_mul
// EIGHT:       tile.kernel @silu_mul grid [1, 1, 1]
// EIGHT:         tile.forall (%i0, %i1, %q) in [1, 4, 16] over threads {
// EIGHT:           tile.copy %gg[%i0, %i1, (%q * 4)] to %{{.*}}[0] count 4

// -----

// A rotary-like map: f32 and bf16 inputs, a bf16 output. The widest access (f32) sets four
// elements a thread. The rotated half, read at (i + 32) mod 64, is four consecutive elements
// too (4 divides 32 and 64): read 16 bytes at a time from ((4·q + 32) mod 64). A neighbour
// read at (i + 1) mod 64 is not, and stays a scalar load (its coordinate written 4·q + v, whose
// range tile-to-kernel knows: an unsigned remainder); so does the row-broadcast angle, read
// once per point before the element loop.
func.func @rotate(%x: memref<3x64xf32> {llmopt.input = "x"}, %c: memref<3x64xbf16> {llmopt.input = "c"},
                  %s: memref<3xf32> {llmopt.input = "s"}) -> memref<3x64xbf16> {
  %0 = memref.alloc() : memref<3x64xbf16>
  tile.kernel @rotate grid [1, 1, 1] block [192, 1, 1] (%o = %0 : memref<3x64xbf16>, %xx = %x : memref<3x64xf32>, %cc = %c : memref<3x64xbf16>, %ss = %s : memref<3xf32>) {
    tile.forall (%r, %i) in [3, 64] over threads {
      %a = loop.load %xx[%r, %i] : memref<3x64xf32>
      %b = loop.load %xx[%r, (%i + 32) mod 64] : memref<3x64xf32>
      %e = loop.load %xx[%r, (%i + 1) mod 64] : memref<3x64xf32>
      %k = loop.load %cc[%r, %i] : memref<3x64xbf16>
      %t = loop.load %ss[%r] : memref<3xf32>
      %kf = arith.extf %k : bf16 to f32
      %m = arith.mulf %a, %kf : f32
      %n = arith.mulf %b, %t : f32
      %y = arith.subf %m, %n : f32
      %z = arith.addf %y, %e : f32
      %yb = arith.truncf %z : f32 to bf16
      loop.store %yb, %o[%r, %i] : memref<3x64xbf16>
    }
  }
  func.return %0 : memref<3x64xbf16>
}
// CHECK-LABEL: func.func @rotate
// CHECK:         tile.forall (%r, %q) in [3, 16] over threads {
// CHECK-NEXT:      %t = loop.load %ss[%r] : memref<3xf32>
// CHECK-NEXT:      %[[A:.*]] = tile.alloc registers : memref<4xf32>
// CHECK-NEXT:      tile.copy %xx[%r, (%q * 4)] to %[[A]][0] count 4 : memref<3x64xf32> to memref<4xf32>
// CHECK-NEXT:      %[[B:.*]] = tile.alloc registers : memref<4xf32>
// CHECK-NEXT:      tile.copy %xx[%r, (((%q * 4) + 32) mod 64)] to %[[B]][0] count 4 : memref<3x64xf32> to memref<4xf32>
// CHECK-NEXT:      %[[K:.*]] = tile.alloc registers : memref<4xbf16>
// CHECK-NEXT:      tile.copy %cc[%r, (%q * 4)] to %[[K]][0] count 4 : memref<3x64xbf16> to memref<4xbf16>
// CHECK:           scf.for %v =
// CHECK:             %a = loop.load %[[A]][%v] : memref<4xf32>
// CHECK-NEXT:        %b = loop.load %[[B]][%v] : memref<4xf32>
// CHECK-NEXT:        %e = loop.load %xx[%r, ((((%q * 4) + %v) + 1) mod 64)] : memref<3x64xf32>
// CHECK-NEXT:        %k = loop.load %[[K]][%v] : memref<4xbf16>
// CHECK:           tile.copy %{{.*}}[0] to %o[%r, (%q * 4)] count 4 : memref<4xbf16> to memref<3x64xbf16>

// -----

// Heads split out of a row (Qwen2.5's queries: [rows, heads·64] read as [heads, rows, 64]): the
// innermost coordinate h·64 + i starts a chunk at a multiple of 4, so it is read 16 bytes at
// a time; the same row read 2 elements further on is not aligned and stays scalar.
func.func @heads(%x: memref<3x136xf32> {llmopt.input = "x"}) -> memref<2x3x64xbf16> {
  %0 = memref.alloc() : memref<2x3x64xbf16>
  tile.kernel @heads grid [2, 1, 1] block [256, 1, 1] (%o = %0 : memref<2x3x64xbf16>, %xx = %x : memref<3x136xf32>) {
    tile.forall (%h, %r, %i) in [2, 3, 64] over threads {
      %a = loop.load %xx[%r, (%h * 64) + %i] : memref<3x136xf32>
      %b = loop.load %xx[%r, ((%h * 64) + %i) + 2] : memref<3x136xf32>
      %y = arith.addf %a, %b : f32
      %yb = arith.truncf %y : f32 to bf16
      loop.store %yb, %o[%h, %r, %i] : memref<2x3x64xbf16>
    }
  }
  func.return %0 : memref<2x3x64xbf16>
}
// CHECK-LABEL: func.func @heads
// CHECK:       tile.kernel @heads grid [1, 1, 1]
// CHECK:         tile.forall (%h, %r, %q) in [2, 3, 16] over threads {
// CHECK-NEXT:      %[[A:.*]] = tile.alloc registers : memref<4xf32>
// CHECK-NEXT:      tile.copy %xx[%r, ((%h * 64) + (%q * 4))] to %[[A]][0] count 4 : memref<3x136xf32> to memref<4xf32>
// CHECK:           scf.for %v =
// CHECK:             %a = loop.load %[[A]][%v] : memref<4xf32>
// CHECK-NEXT:        %b = loop.load %xx[%r, (((%h * 64) + ((%q * 4) + %v)) + 2)] : memref<3x136xf32>

// -----

// A gather: the row's token id is read once a point, the table's row 16 bytes at a time
// (16 rows: the numerics check draws ids below 16).
func.func @gather(%ids: memref<5xi64> {llmopt.input = "ids"}, %table: memref<16x16xbf16> {llmopt.param = "table"}) -> memref<5x16xbf16> {
  %0 = memref.alloc() : memref<5x16xbf16>
  tile.kernel @gather grid [1, 1, 1] block [96, 1, 1] (%o = %0 : memref<5x16xbf16>, %d = %ids : memref<5xi64>, %tb = %table : memref<16x16xbf16>) {
    tile.forall (%r, %i) in [5, 16] over threads {
      %id = loop.load %d[%r] : memref<5xi64>
      %row = arith.index_cast %id : i64 to index
      %e = loop.load %tb[%row, %i] : memref<16x16xbf16>
      loop.store %e, %o[%r, %i] : memref<5x16xbf16>
    }
  }
  func.return %0 : memref<5x16xbf16>
}
// CHECK-LABEL: func.func @gather
// CHECK:         tile.forall (%r, %q) in [5, 2] over threads {
// CHECK-NEXT:      %id = loop.load %d[%r] : memref<5xi64>
// CHECK-NEXT:      %row = arith.index_cast %id : i64 to index
// CHECK-NEXT:      %[[E:.*]] = tile.alloc registers : memref<8xbf16>
// CHECK-NEXT:      tile.copy %tb[%row, (%q * 8)] to %[[E]][0] count 8

// -----

// A symbolic number of rows: the forall keeps its runtime extent, the runtime grid is
// divided before the launch.
func.func @scale(%x: memref<?x32xbf16> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                 %seq: index {llmopt.symbol = "seq", llmopt.max = 16}) -> memref<?x32xbf16> {
  %out = memref.alloc(%seq) : memref<?x32xbf16>
  %c32 = arith.constant 32 : index
  %points = arith.muli %seq, %c32 : index
  %c64 = arith.constant 64 : index
  %grid = arith.ceildivui %points, %c64 : index
  tile.kernel @scale grid [%grid max 8, 1, 1] block [64, 1, 1] (%o = %out : memref<?x32xbf16>, %n = %seq : index, %a = %x : memref<?x32xbf16>) {
    %two = arith.constant 2.000000e+00 : f32
    tile.forall (%r, %i) in [%n max 16, 32] over threads {
      %v = loop.load %a[%r, %i] : memref<?x32xbf16>
      %f = arith.extf %v : bf16 to f32
      %y = arith.mulf %f, %two : f32
      %b = arith.truncf %y : f32 to bf16
      loop.store %b, %o[%r, %i] : memref<?x32xbf16>
    }
  }
  func.return %out : memref<?x32xbf16>
}
// CHECK-LABEL: func.func @scale
// CHECK:         %[[DIV:.*]] = arith.ceildivui %grid, %{{.*}} : index
// CHECK-NEXT:    tile.kernel @scale grid [%[[DIV]] max 1, 1, 1]
// CHECK:           tile.forall (%r, %q) in [%n max 16, 4] over threads {
// CHECK-NEXT:        %[[X:.*]] = tile.alloc registers : memref<8xbf16>
// CHECK-NEXT:        tile.copy %a[%r, (%q * 8)] to %[[X]][0] count 8 : memref<?x32xbf16> to memref<8xbf16>

// -----

// A split-k sum: four f32 partial slices summed into bf16 rows. Each slice's chunk is one
// copy into a row of registers (the slice's index a constant); the sum runs per element
// over the slices in order, as before, unrolled.
func.func @slices(%p: memref<4x3x32xf32> {llmopt.input = "p"}) -> memref<3x32xbf16> {
  %0 = memref.alloc() : memref<3x32xbf16>
  tile.kernel @slices grid [1, 1, 1] block [96, 1, 1] (%o = %0 : memref<3x32xbf16>, %pp = %p : memref<4x3x32xf32>) {
    tile.forall (%r, %i) in [3, 32] over threads {
      %sum = loop.reduce add %s = 0 to 4 : f32 {
        %x = loop.load %pp[%s, %r, %i] : memref<4x3x32xf32>
        loop.yield %x : f32
      }
      %b = arith.truncf %sum : f32 to bf16
      loop.store %b, %o[%r, %i] : memref<3x32xbf16>
    }
  }
  func.return %0 : memref<3x32xbf16>
}

// CHECK-LABEL: func.func @slices
// CHECK:         tile.forall (%r, %q) in [3, 8] over threads {
// CHECK-NEXT:      %[[P:.*]] = tile.alloc registers : memref<4x4xf32>
// CHECK-NEXT:      %[[S0:.*]] = arith.constant 0 : index
// CHECK-NEXT:      tile.copy %pp[%[[S0]], %r, (%q * 4)] to %[[P]][0, 0] count 4
// CHECK:           tile.copy %pp[%{{.*}}, %r, (%q * 4)] to %[[P]][3, 0] count 4
// CHECK:           scf.for %v =
// CHECK:             loop.reduce add %s = 0 to 4 : f32 {
// CHECK-NEXT:          %x = loop.load %[[P]][%s, %v] : memref<4x4xf32>
// CHECK:             } {unroll = 0 : i64}
// CHECK:           tile.copy %{{.*}}[0] to %o[%r, (%q * 4)] count 4 : memref<4xbf16> to memref<3x32xbf16>

// -----

// Left alone: a transposing store (its innermost coordinate is not the innermost variable),
// an update in place (a buffer both loaded and stored), rows of 12 bf16 (not a multiple of 8),
// bytes stored from 8-byte ids (two a thread would store 2 bytes: no copy moves that).
func.func @alone(%x: memref<8x16xbf16> {llmopt.input = "x"}, %y: memref<4x12xbf16> {llmopt.input = "y"}, %ids: memref<4x16xi64> {llmopt.input = "ids"}) -> (memref<16x8xbf16>, memref<8x16xbf16>, memref<4x12xbf16>, memref<4x16xi8>) {
  %0 = memref.alloc() : memref<16x8xbf16>
  tile.kernel @transpose grid [1, 1, 1] block [128, 1, 1] (%o = %0 : memref<16x8xbf16>, %a = %x : memref<8x16xbf16>) {
    tile.forall (%r, %i) in [8, 16] over threads {
      %v = loop.load %a[%r, %i] : memref<8x16xbf16>
      loop.store %v, %o[%i, %r] : memref<16x8xbf16>
    }
  }
  tile.kernel @in_place grid [1, 1, 1] block [128, 1, 1] (%a = %x : memref<8x16xbf16>) {
    tile.forall (%r, %i) in [8, 16] over threads {
      %v = loop.load %a[%r, %i] : memref<8x16xbf16>
      %f = arith.extf %v : bf16 to f32
      %g = arith.addf %f, %f : f32
      %b = arith.truncf %g : f32 to bf16
      loop.store %b, %a[%r, %i] : memref<8x16xbf16>
    }
  }
  %1 = memref.alloc() : memref<4x12xbf16>
  tile.kernel @twelve grid [1, 1, 1] block [64, 1, 1] (%o = %1 : memref<4x12xbf16>, %a = %y : memref<4x12xbf16>) {
    tile.forall (%r, %i) in [4, 12] over threads {
      %v = loop.load %a[%r, %i] : memref<4x12xbf16>
      loop.store %v, %o[%r, %i] : memref<4x12xbf16>
    }
  }
  %2 = memref.alloc() : memref<4x16xi8>
  tile.kernel @narrow grid [1, 1, 1] block [64, 1, 1] (%o = %2 : memref<4x16xi8>, %a = %ids : memref<4x16xi64>) {
    tile.forall (%r, %i) in [4, 16] over threads {
      %v = loop.load %a[%r, %i] : memref<4x16xi64>
      %t = arith.trunci %v : i64 to i8
      loop.store %t, %o[%r, %i] : memref<4x16xi8>
    }
  }
  func.return %0, %x, %1, %2 : memref<16x8xbf16>, memref<8x16xbf16>, memref<4x12xbf16>, memref<4x16xi8>
}
// CHECK-LABEL: func.func @alone
// CHECK-NOT:   tile.copy
// CHECK:       tile.forall (%r, %i) in [8, 16] over threads
// CHECK:       tile.forall (%r, %i) in [8, 16] over threads
// CHECK:       tile.forall (%r, %i) in [4, 12] over threads
// CHECK:       tile.forall (%r, %i) in [4, 16] over threads
// EIGHT-LABEL: func.func @alone
// EIGHT:       tile.kernel @twelve
// EIGHT:         tile.forall (%r, %q) in [4, 3] over threads

// Every kernel computes what it computed before (the interpreters, bit for bit).
// NUM-COUNT-7: vector-elementwise {{.*}} max abs 0.000e+00 {{.*}} ok

// The chunks are 16-byte accesses of registers private to each thread; indices stay 32-bit.
// CUDA-LABEL: silu_mul_1(
// CUDA:       __align__(16) __nv_bfloat16 vec[8];
// CUDA:       for (int p =
// CUDA:         ((uint4*)&vec[0])[0] = ((const uint4*)&{{.*}})[0];
// CUDA:         #pragma unroll
// CUDA:         ((uint4*)&{{.*}})[0] = ((uint4*)&vec{{[0-9]*}}[0])[0];
// CUDA-LABEL: rotate_1(
// CUDA:         ((float4*)&vec[0])[0] = ((const float4*)&xx[{{.*}}])[0];
// CUDA:         (int)((unsigned int)(v1 + v + 1) % 64u)
// CUDA:         ((uint2*)&o[{{.*}}])[0] = ((uint2*)&vec{{[0-9]}}[0])[0];
// CUDA-LABEL: slices_1(
// CUDA:         ((float4*)&vec[12])[0] = ((const float4*)&pp[{{.*}} + 288])[0];
// CUDA:         float acc = 0.0f;
// CUDA-NEXT:    #pragma unroll
// CUDA-NEXT:    for (int s = 0; s < 4; s += 1) {
// CUDA-NEXT:      acc = acc + vec[s * 4 + v];
