// RUN: llm-opt %s | llm-opt | filecheck %s
// RUN: llm-opt %s --print-op-generic | llm-opt | filecheck %s
// A warpgroup's product of two swizzled shared tiles: A (64 rows) at row 0, k 16; B (the
// first 16 rows of W[n, k]) at row 0, k 16; eight accumulator values a thread (N = 16).

kernel.func @wg(%x: memref<64x64xbf16>) block [128, 1, 1] {
  %a = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %b = kernel.shared {llmopt.swizzle = 128 : i64} : memref<16x64xbf16>
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %z = arith.constant 0.0 : f32
  wgmma.fence
  %d0, %d1, %d2, %d3, %d4, %d5, %d6, %d7 = wgmma.mma %a[%c0, %c16], %b[%c0, %c16] + (%z, %z, %z, %z, %z, %z, %z, %z) : memref<64x64xbf16>, memref<16x64xbf16>
  wgmma.commit
  %e0, %e1, %e2, %e3, %e4, %e5, %e6, %e7 = wgmma.wait 1 (%d0, %d1, %d2, %d3, %d4, %d5, %d6, %d7)
  kernel.return
}

// CHECK:      wgmma.fence
// CHECK-NEXT: %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} = wgmma.mma %a[%c0, %c16], %b[%c0, %c16] + (%z, %z, %z, %z, %z, %z, %z, %z) : memref<64x64xbf16>, memref<16x64xbf16>
// CHECK-NEXT: wgmma.commit
// CHECK-NEXT: wgmma.wait 1 (%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}})

// b read N-major (transposed): B[k][n] = b[16 + k][0 + n] of a tile [K = 64, N = 128] of two
// atoms, and an a of two atoms (k 64 to 79 of its 128); eight values a thread (N = 16).
kernel.func @wg_n_major(%x: memref<64x64xbf16>) block [128, 1, 1] {
  %a = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x128xbf16>
  %b = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x128xbf16>
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %z = arith.constant 0.0 : f32
  wgmma.fence
  %d0, %d1, %d2, %d3, %d4, %d5, %d6, %d7 = wgmma.mma %a[%c0, %c64], %b[%c16, %c0] transposed + (%z, %z, %z, %z, %z, %z, %z, %z) : memref<64x128xbf16>, memref<64x128xbf16>
  kernel.return
}

// CHECK-LABEL: kernel.func @wg_n_major
// CHECK: wgmma.mma %a[%c0, %c64], %b[%c16, %c0] transposed + (%z, %z, %z, %z, %z, %z, %z, %z) : memref<64x128xbf16>, memref<64x128xbf16>

// A from registers: four pairs a thread (its warp's m16n8k16 A fragment), B from a tile.
kernel.func @wg_registers(%x: memref<64x64xbf16>) block [128, 1, 1] {
  %b = kernel.shared {llmopt.swizzle = 128 : i64} : memref<16x64xbf16>
  %c0 = arith.constant 0 : index
  %h = arith.constant 1.0 : bf16
  %p0 = mma.pack %h, %h : bf16
  %z = arith.constant 0.0 : f32
  wgmma.fence
  %d0, %d1, %d2, %d3, %d4, %d5, %d6, %d7 = wgmma.mma (%p0, %p0, %p0, %p0), %b[%c0, %c0] + (%z, %z, %z, %z, %z, %z, %z, %z) : vector<2xbf16>, memref<16x64xbf16>
  kernel.return
}

// CHECK-LABEL: kernel.func @wg_registers
// CHECK: wgmma.mma (%p0, %p0, %p0, %p0), %b[%c0, %c0] + (%z, %z, %z, %z, %z, %z, %z, %z) : vector<2xbf16>, memref<16x64xbf16>
