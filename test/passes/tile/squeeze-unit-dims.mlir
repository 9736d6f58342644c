// RUN: llm-opt %s --split-input-file -p squeeze-unit-dims | filecheck %s
// RUN: llm-opt %s --split-input-file -p 'squeeze-unit-dims,vector-elementwise' | filecheck %s --check-prefix=VEC
// RUN: llm-opt %s --split-input-file -p 'squeeze-unit-dims,vector-elementwise,tile-to-kernel,canonicalize,cse' --check-numerics --check-numerics-lengths 5 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// A product that keeps its reduced dimension writes [rows, cols, 1]; the kernels after it
// read it so. squeeze-unit-dims hands each kernel a view without the trailing unit
// dimensions, so that the columns are the innermost dimension again.

// A split-K sum writing [1, 4, 64, 1] of f32, and a map reading it back into bf16: both
// kernels get one view [1, 4, 64], made right after the allocation, and, after
// vector-elementwise, four columns a copy.
func.func @sum(%p: memref<2x1x4x64xf32> {llmopt.input = "p"}) -> memref<1x4x64xbf16> {
  %0 = memref.alloc() : memref<1x4x64x1xf32>
  tile.kernel @sum grid [1, 1, 1] block [256, 1, 1] (%s = %0 : memref<1x4x64x1xf32>, %pp = %p : memref<2x1x4x64xf32>) {
    tile.forall (%i0, %i1, %i2) in [1, 4, 64] over threads {
      %1 = loop.reduce add %k = 0 to 2 : f32 {
        %2 = loop.load %pp[%k, %i0, %i1, %i2] : memref<2x1x4x64xf32>
        loop.yield %2 : f32
      }
      loop.store %1, %s[%i0, %i1, %i2, 0] : memref<1x4x64x1xf32>
    }
  }
  %3 = memref.alloc() : memref<1x4x64xbf16>
  tile.kernel @round grid [1, 1, 1] block [256, 1, 1] (%o = %3 : memref<1x4x64xbf16>, %ss = %0 : memref<1x4x64x1xf32>) {
    tile.forall (%j0, %j1, %j2) in [1, 4, 64] over threads {
      %4 = loop.load %ss[%j0, %j1, %j2, 0] : memref<1x4x64x1xf32>
      %5 = arith.truncf %4 : f32 to bf16
      loop.store %5, %o[%j0, %j1, %j2] : memref<1x4x64xbf16>
    }
  }
  func.return %3 : memref<1x4x64xbf16>
}
// CHECK-LABEL: func.func @sum
// CHECK:         %[[V:.*]] = memref.collapse_shape %0 {{\[}}[0 : i64], [1 : i64], [2 : i64, 3 : i64]] : memref<1x4x64x1xf32> into memref<1x4x64xf32>
// CHECK-NEXT:    tile.kernel @sum grid [1, 1, 1] block [256, 1, 1] (%s = %[[V]] : memref<1x4x64xf32>, %pp = %p : memref<2x1x4x64xf32>) {
// CHECK:           loop.store %{{.*}}, %s[%i0, %i1, %i2] : memref<1x4x64xf32>
// CHECK-NOT:     memref.collapse_shape
// CHECK:         tile.kernel @round {{.*}} %ss = %[[V]] : memref<1x4x64xf32>) {
// CHECK:           loop.load %ss[%j0, %j1, %j2] : memref<1x4x64xf32>
// VEC-LABEL: func.func @sum
// VEC:         tile.copy %{{.*}}[0] to %s[%i0, %i1, (%q * 4)] count 4
// VEC:         tile.copy %ss[%j0, %j1, (%q * 4)] to %{{.*}}[0] count 4
// NUM: squeeze-unit-dims {{.*}} max abs 0.000e+00 {{.*}} ok

// -----

// A symbolic number of rows: the view keeps the runtime extent ([?, 32] of [?, 32, 1]).
func.func @rows(%x: memref<?x32xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                %seq: index {llmopt.symbol = "seq", llmopt.max = 8}) -> memref<?x32x1xf32> {
  %0 = memref.alloc(%seq) : memref<?x32x1xf32>
  tile.kernel @rows grid [1, 1, 1] block [256, 1, 1] (%o = %0 : memref<?x32x1xf32>, %xx = %x : memref<?x32xf32>, %n = %seq : index) {
    tile.forall (%i, %j) in [%n max 8, 32] over threads {
      %1 = loop.load %xx[%i, %j] : memref<?x32xf32>
      %2 = arith.mulf %1, %1 : f32
      loop.store %2, %o[%i, %j, 0] : memref<?x32x1xf32>
    }
  }
  func.return %0 : memref<?x32x1xf32>
}
// CHECK-LABEL: func.func @rows
// CHECK:         memref.collapse_shape %0 {{\[}}[0 : i64], [1 : i64, 2 : i64]] : memref<?x32x1xf32> into memref<?x32xf32>
// CHECK:           loop.store %{{.*}}, %o[%i, %j] : memref<?x32xf32>
// NUM: squeeze-unit-dims {{.*}} max abs 0.000e+00 {{.*}} ok

// -----

// Left alone: a unit dimension indexed by a variable (an access the pass cannot drop), a
// buffer of a single dimension, and one whose unit dimension is not last.
func.func @alone(%x: memref<4x1xf32> {llmopt.input = "x"}, %y: memref<1xf32> {llmopt.input = "y"},
                 %z: memref<1x8xf32> {llmopt.input = "z"}) -> memref<1x8xf32> {
  %0 = memref.alloc() : memref<1x8xf32>
  tile.kernel @alone grid [1, 1, 1] block [32, 1, 1] (%o = %0 : memref<1x8xf32>, %xx = %x : memref<4x1xf32>, %yy = %y : memref<1xf32>, %zz = %z : memref<1x8xf32>) {
    tile.forall (%i, %u) in [8, 1] over threads {
      %1 = loop.load %xx[(%i mod 4), %u] : memref<4x1xf32>
      %2 = loop.load %yy[0] : memref<1xf32>
      %3 = loop.load %zz[0, %i] : memref<1x8xf32>
      %4 = arith.addf %1, %2 : f32
      %5 = arith.addf %4, %3 : f32
      loop.store %5, %o[0, %i] : memref<1x8xf32>
    }
  }
  func.return %0 : memref<1x8xf32>
}
// CHECK-LABEL: func.func @alone
// CHECK-NOT:     memref.collapse_shape
// CHECK:         loop.load %xx[(%i mod 4), %u] : memref<4x1xf32>

// -----

// A kernel inside a length bucket's branch: the view goes right after the allocation,
// outside the branch (the executor runs views only in a function's top block). A buffer
// allocated inside the branch is left alone.
func.func @bucket(%x: memref<?x32xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                  %seq: index {llmopt.symbol = "seq", llmopt.max = 8}) -> memref<?x32x1xf32> {
  %0 = memref.alloc(%seq) : memref<?x32x1xf32>
  %c1 = arith.constant 1 : index
  %short = arith.cmpi ule, %seq, %c1 : index
  scf.if %short {
    %1 = memref.alloc() : memref<8x32x1xf32>
    tile.kernel @short grid [1, 1, 1] block [32, 1, 1] (%o = %0 : memref<?x32x1xf32>, %xx = %x : memref<?x32xf32>, %t = %1 : memref<8x32x1xf32>, %n = %seq : index) {
      tile.forall (%i, %j) in [%n max 8, 32] over threads {
        %2 = loop.load %xx[%i, %j] : memref<?x32xf32>
        loop.store %2, %o[%i, %j, 0] : memref<?x32x1xf32>
        loop.store %2, %t[%i, %j, 0] : memref<8x32x1xf32>
      }
    }
  } else {
    tile.kernel @long grid [1, 1, 1] block [32, 1, 1] (%o1 = %0 : memref<?x32x1xf32>, %xx1 = %x : memref<?x32xf32>, %n1 = %seq : index) {
      tile.forall (%i1, %j1) in [%n1 max 8, 32] over threads {
        %3 = loop.load %xx1[%i1, %j1] : memref<?x32xf32>
        %4 = arith.addf %3, %3 : f32
        loop.store %4, %o1[%i1, %j1, 0] : memref<?x32x1xf32>
      }
    }
  }
  func.return %0 : memref<?x32x1xf32>
}
// CHECK-LABEL: func.func @bucket
// CHECK:         %0 = memref.alloc(%seq) : memref<?x32x1xf32>
// CHECK-NEXT:    %[[V:.*]] = memref.collapse_shape %0 {{\[}}[0 : i64], [1 : i64, 2 : i64]] : memref<?x32x1xf32> into memref<?x32xf32>
// CHECK:         scf.if
// CHECK-NEXT:      %[[T:.*]] = memref.alloc() : memref<8x32x1xf32>
// CHECK-NEXT:      tile.kernel @short {{.*}}(%o = %[[V]] : memref<?x32xf32>, %xx = %x : memref<?x32xf32>, %t = %[[T]] : memref<8x32x1xf32>
// CHECK:         } else {
// CHECK-NEXT:      tile.kernel @long {{.*}}(%o1 = %[[V]] : memref<?x32xf32>
// NUM: squeeze-unit-dims {{.*}} max abs 0.000e+00 {{.*}} ok
