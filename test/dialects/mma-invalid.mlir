// RUN: llm-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @f(%x: f32) {
  %d0, %d1, %d2, %d3 = mma.sync (%x, %x, %x) * (%x, %x) + (%x, %x, %x, %x)
  func.return
}
// CHECK: mma.sync takes 4 'a' values per thread (m16n8k8, tf32), got 3

// -----

func.func @f(%x: f32) {
  %d0, %d1, %d2, %d3 = mma.sync (%x, %x, %x, %x) * (%x) + (%x, %x, %x, %x)
  func.return
}
// CHECK: mma.sync takes 2 'b' values per thread (m16n8k8, tf32), got 1

// -----

func.func @f(%x: f64) {
  %h = mma.to_tf32 %x
  func.return
}
// CHECK: f32

// -----

func.func @f(%x: vector<2xbf16>, %y: vector<2xf16>, %c: f32) {
  %d0, %d1, %d2, %d3 = mma.sync (%x, %x, %x, %x) * (%y, %y) + (%c, %c, %c, %c) : vector<2xbf16>
  func.return
}
// CHECK: operand is used with type vector<2xbf16>, but has been previously used or defined with type vector<2xf16>

// -----

func.func @f(%x: vector<2xbf16>, %c: f32) {
  %d0, %d1, %d2, %d3 = mma.sync (%x, %x, %x) * (%x, %x) + (%c, %c, %c, %c) : vector<2xbf16>
  func.return
}
// CHECK: mma.sync takes 4 'a' values per thread (m16n8k16, bf16 pairs), got 3

// -----

func.func @f(%x: vector<4xbf16>, %c: f32) {
  %d0, %d1, %d2, %d3 = mma.sync (%x, %x, %x, %x) * (%x, %x) + (%c, %c, %c, %c) : vector<4xbf16>
  func.return
}
// CHECK: mma.sync multiplies f32 (m16n8k8, tf32) or vector<2xbf16>/vector<2xf16> pairs (m16n8k16), all 'a' and 'b' values of one type; got vector<4xbf16>

// -----

kernel.func @k() block [32, 1, 1] {
  %s = kernel.shared : memref<16x16xbf16>
  %c0 = arith.constant 0 : index
  %r0, %r1, %r2 = mma.ldmatrix x3 %s[%c0, %c0] : memref<16x16xbf16>
  kernel.return
}
// CHECK: mma.ldmatrix: expected x1, x2 or x4, got 'x3'

// -----

kernel.func @k() block [32, 1, 1] {
  %s = kernel.shared : memref<16x16xf32>
  %c0 = arith.constant 0 : index
  %r0 = mma.ldmatrix x1 %s[%c0, %c0] : memref<16x16xf32>
  kernel.return
}
// CHECK: mma.ldmatrix loads 16-bit floats (bf16 or f16), the buffer holds f32

// -----

kernel.func @k() block [32, 1, 1] {
  %s = kernel.shared : memref<16x20xbf16>
  %c0 = arith.constant 0 : index
  %r0 = mma.ldmatrix x1 %s[%c0, %c0] : memref<16x20xbf16>
  kernel.return
}
// CHECK: the buffer's rows of 20 elements are not a multiple of 16 bytes (pad them to a multiple of 8)

// -----

kernel.func @k() block [32, 1, 1] {
  %s = kernel.shared : memref<16x24xbf16>
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %r0 = mma.ldmatrix x1 %s[%c0, %c4] : memref<16x24xbf16>
  kernel.return
}
// CHECK: the innermost index must be a multiple of 8, got 4

// -----

kernel.func @k() block [32, 1, 1] {
  %s = kernel.shared : memref<16x24xbf16>
  %c0 = arith.constant 0 : index
  %c24 = arith.constant 24 : index
  %r0 = mma.ldmatrix x1 %s[%c0, %c24] : memref<16x24xbf16>
  kernel.return
}
// CHECK: mma.ldmatrix reads 8 elements from the innermost index 24, past the row's 24

// -----

kernel.func @k(%g: memref<16x16xbf16>) block [32, 1, 1] {
  %c0 = arith.constant 0 : index
  %r0 = mma.ldmatrix x1 %g[%c0, %c0] : memref<16x16xbf16>
  kernel.return
}
// CHECK: mma.ldmatrix reads shared memory: its buffer must be a 'tile.alloc shared' or a 'kernel.shared'

// -----

kernel.func @k() block [32, 1, 1] {
  %s = kernel.shared : memref<16x16xbf16>
  %c0 = arith.constant 0 : index
  %r0 = mma.ldmatrix x1 %s[%c0] : memref<16x16xbf16>
  kernel.return
}
// CHECK: mma.ldmatrix: 1 indices for a rank-2 buffer

// -----

func.func @f(%x: vector<2xbf16>, %y: vector<2xf16>, %c: f32) {
  %d0, %d1, %d2, %d3 = "mma.sync"(%x, %x, %x, %x, %y, %y, %c, %c, %c, %c) <{operandSegmentSizes = array<i32: 4, 2, 4>}> : (vector<2xbf16>, vector<2xbf16>, vector<2xbf16>, vector<2xbf16>, vector<2xf16>, vector<2xf16>, f32, f32, f32, f32) -> (f32, f32, f32, f32)
  func.return
}
// CHECK: all 'a' and 'b' values of one type; got vector<2xbf16>, vector<2xf16>
