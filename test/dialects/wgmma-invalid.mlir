// RUN: llm-opt %s --split-input-file --verify-diagnostics | filecheck %s

kernel.func @k(%x: memref<64x64xbf16>) block [128, 1, 1] {
  %a = kernel.shared : memref<64x64xbf16>
  %b = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c56 = arith.constant 56 : index
  %z = arith.constant 0.0 : f32
  %d0, %d1, %d2, %d3 = wgmma.mma %a[%c0, %c0], %b[%c0, %c0] + (%z, %z, %z, %z) : memref<64x64xbf16>, memref<64x64xbf16>
  kernel.return
}
// CHECK: wgmma.mma: 'a''s buffer must be marked llmopt.swizzle = 128

// -----

kernel.func @k(%x: memref<64x64xbf16>) block [128, 1, 1] {
  %a = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %b = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c56 = arith.constant 56 : index
  %z = arith.constant 0.0 : f32
  %d0, %d1, %d2, %d3 = wgmma.mma %a[%c0, %c0], %x[%c0, %c0] + (%z, %z, %z, %z) : memref<64x64xbf16>, memref<64x64xbf16>
  kernel.return
}
// CHECK: wgmma.mma reads 'b' from shared memory

// -----

kernel.func @k(%x: memref<64x64xbf16>) block [128, 1, 1] {
  %a = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x32xbf16>
  %b = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c56 = arith.constant 56 : index
  %z = arith.constant 0.0 : f32
  %d0, %d1, %d2, %d3 = wgmma.mma %a[%c0, %c0], %b[%c0, %c0] + (%z, %z, %z, %z) : memref<64x32xbf16>, memref<64x64xbf16>
  kernel.return
}
// CHECK: wgmma.mma: 'a''s buffer must be …xRx(a·64) (rows of atoms of 128 bytes, R a multiple of 8), got memref<64x32xbf16>

// -----

kernel.func @k(%x: memref<64x64xbf16>) block [128, 1, 1] {
  %a = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %b = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c56 = arith.constant 56 : index
  %z = arith.constant 0.0 : f32
  %d0, %d1, %d2 = wgmma.mma %a[%c0, %c0], %b[%c0, %c0] + (%z, %z, %z) : memref<64x64xbf16>, memref<64x64xbf16>
  kernel.return
}
// CHECK: wgmma.mma: N = 2 x the accumulator values is 8 to 256, a multiple of 8

// -----

kernel.func @k(%x: memref<64x64xbf16>) block [128, 1, 1] {
  %a = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %b = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c56 = arith.constant 56 : index
  %z = arith.constant 0.0 : f32
  %d0, %d1, %d2, %d3 = wgmma.mma %a[%c4, %c0], %b[%c0, %c0] + (%z, %z, %z, %z) : memref<64x64xbf16>, memref<64x64xbf16>
  kernel.return
}
// CHECK: wgmma.mma: 'a''s first row 4 must be a multiple of 8 with 64 rows below its 64

// -----

kernel.func @k(%x: memref<64x64xbf16>) block [128, 1, 1] {
  %a = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %b = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c56 = arith.constant 56 : index
  %z = arith.constant 0.0 : f32
  %d0, %d1, %d2, %d3 = wgmma.mma %a[%c0, %c8], %b[%c0, %c0] + (%z, %z, %z, %z) : memref<64x64xbf16>, memref<64x64xbf16>
  kernel.return
}
// CHECK: wgmma.mma: 'a''s first k 8 must be a multiple of 16 within the row

// -----

kernel.func @k(%x: memref<64x64xbf16>) block [128, 1, 1] {
  %a = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %b = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c56 = arith.constant 56 : index
  %z = arith.constant 0.0 : f32
  %d0, %d1, %d2, %d3, %d4, %d5, %d6, %d7 = wgmma.mma %a[%c0, %c0], %b[%c56, %c0] + (%z, %z, %z, %z, %z, %z, %z, %z) : memref<64x64xbf16>, memref<64x64xbf16>
  kernel.return
}
// CHECK: wgmma.mma: 'b''s first row 56 must be a multiple of 8 with 16 rows below its 64

// -----

kernel.func @k(%x: memref<64x64xbf16>) block [128, 1, 1] {
  %a = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %b = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xf16>
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c56 = arith.constant 56 : index
  %z = arith.constant 0.0 : f32
  %d0, %d1, %d2, %d3 = wgmma.mma %a[%c0, %c0], %b[%c0, %c0] + (%z, %z, %z, %z) : memref<64x64xbf16>, memref<64x64xf16>
  kernel.return
}
// CHECK: wgmma.mma: 'a' holds bf16, 'b' f16; they must match

// -----

kernel.func @k(%x: memref<64x64xbf16>) block [128, 1, 1] {
  %a = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %b = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c56 = arith.constant 56 : index
  %z = arith.constant 0.0 : f32
  %e = wgmma.wait -1 (%z)
  kernel.return
}
// CHECK: wgmma.wait: pending must be at least 0, got -1

// -----

// A transposed (N-major) b: its first k must be a multiple of 16 with 16 rows of k below it.
kernel.func @k(%x: memref<64x64xbf16>) block [128, 1, 1] {
  %a = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %b = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %c0 = arith.constant 0 : index
  %c56 = arith.constant 56 : index
  %z = arith.constant 0.0 : f32
  %d0, %d1, %d2, %d3, %d4, %d5, %d6, %d7 = wgmma.mma %a[%c0, %c0], %b[%c56, %c0] transposed + (%z, %z, %z, %z, %z, %z, %z, %z) : memref<64x64xbf16>, memref<64x64xbf16>
  kernel.return
}
// CHECK: wgmma.mma: the transposed 'b''s first k 56 must be a multiple of 16 with 16 rows below its 64

// -----

// A transposed b's N columns start at an atom and stay in the row: 64 + 128 > 128.
kernel.func @k(%x: memref<64x64xbf16>) block [128, 1, 1] {
  %a = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %b = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x128xbf16>
  %c0 = arith.constant 0 : index
  %c64 = arith.constant 64 : index
  %z = arith.constant 0.0 : f32
  %d:64 = wgmma.mma %a[%c0, %c0], %b[%c0, %c64] transposed + (%z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z, %z) : memref<64x64xbf16>, memref<64x128xbf16>
  kernel.return
}
// CHECK: wgmma.mma: the transposed 'b''s first column 64 must be a multiple of 64 with 128 columns from it in its 128

// -----

// An a in registers is four pairs of b's element type.
kernel.func @k(%x: memref<64x64xbf16>) block [128, 1, 1] {
  %b = kernel.shared {llmopt.swizzle = 128 : i64} : memref<16x64xbf16>
  %c0 = arith.constant 0 : index
  %h = arith.constant 1.0 : f16
  %p = mma.pack %h, %h : f16
  %z = arith.constant 0.0 : f32
  %d0, %d1, %d2, %d3, %d4, %d5, %d6, %d7 = wgmma.mma (%p, %p, %p), %b[%c0, %c0] + (%z, %z, %z, %z, %z, %z, %z, %z) : vector<2xf16>, memref<16x64xbf16>
  kernel.return
}
// CHECK: wgmma.mma: an 'a' in registers is 4 pairs of type vector<2xbf16> ('b''s element) and no indices
