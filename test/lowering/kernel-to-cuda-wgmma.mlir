// RUN: llm-opt %s -p 'kernel-to-cuda{arch=sm_90a}' -t cuda | filecheck %s
// RUN: not llm-opt %s -p 'kernel-to-cuda{arch=sm_90}' 2>&1 | filecheck %s --check-prefix=SM90
// One warpgroup: thread t stores x's row t / 2, half (t mod 2), as 16-byte chunks into a
// swizzled tile (chunk c of row r lands at chunk c xor (r mod 8)), fences, multiplies the
// tile at k = 16 by a second tile's first 8 rows (N = 8, four values a thread) and waits.
// Shared memory is dynamic and 1024-byte aligned; each descriptor holds the tile's address
// over 16 (bits 0-13), 1024 / 16 = 64 in bits 32-45, 1 in bits 16-29 and 62-63.

kernel.func @wg(%x: memref<64x64xbf16>, %o: memref<128x4xf32>) block [128, 1, 1] {
  %a = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %b = kernel.shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %t = kernel.thread_id x
  %row = arith.divui %t, %c2 : index
  %half = arith.remui %t, %c2 : index
  %col0 = arith.muli %half, %c32 : index
  scf.for %q = %c0 to %c4 step %c1 {
    %q8 = arith.muli %q, %c8 : index
    %col = arith.addi %col0, %q8 : index
    kernel.copy %x[%row, %col] to %a[%row, %col] count 8 : memref<64x64xbf16> to memref<64x64xbf16>
  }
  kernel.barrier
  %z = arith.constant 0.0 : f32
  wgmma.fence
  %d0, %d1, %d2, %d3 = wgmma.mma %a[%c0, %c16], %b[%c0, %c16] + (%z, %z, %z, %z) : memref<64x64xbf16>, memref<64x64xbf16>
  wgmma.commit
  %e0, %e1, %e2, %e3 = wgmma.wait 0 (%d0, %d1, %d2, %d3)
  kernel.store %e0, %o[%t, %c0] : memref<128x4xf32>
  kernel.store %e3, %o[%t, %c2] : memref<128x4xf32>
  kernel.return
}

// CHECK:      extern __shared__ __align__(1024) unsigned char smem[];
// CHECK-NEXT: __nv_bfloat16* const a = (__nv_bfloat16*)&smem[0];
// CHECK-NEXT: __nv_bfloat16* const b = (__nv_bfloat16*)&smem[8192];
// CHECK:      &a[row * 64 + (col ^ ((row & 7) * 8))]
// The accumulators the products start from are copied into their locals before the
// fence, which names them as operands (so no copy sinks below it), and the products and
// the wait read and write those locals in place.
// CHECK:      float wg0 = 0.0f;
// CHECK:      float wg3 = 0.0f;
// CHECK-NEXT: asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
// CHECK-NEXT: asm volatile("wgmma.fence.sync.aligned;" : "+f"(wg0), "+f"(wg1), "+f"(wg2), "+f"(wg3) :  : "memory");
// CHECK-NEXT: const unsigned long long desc = ((__cvta_generic_to_shared(&a[16]) >> 4ull) & 16383ull) | 0x4000004000010000ull;
// CHECK-NEXT: const unsigned long long desc1 = ((__cvta_generic_to_shared(&b[16]) >> 4ull) & 16383ull) | 0x4000004000010000ull;
// CHECK-NEXT: asm volatile("{ .reg .pred p; setp.ne.b32 p, %6, 0; wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0; }" : "+f"(wg0), "+f"(wg1), "+f"(wg2), "+f"(wg3) : "l"(desc), "l"(desc1), "r"(1) : "memory");
// CHECK-NEXT: asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
// CHECK-NEXT: asm volatile("wgmma.wait_group.sync.aligned 0;" : "+f"(wg0), "+f"(wg1), "+f"(wg2), "+f"(wg3) :  : "memory");
// CHECK:      o[{{.*}}] = wg0;

// SM90: kernel-to-cuda: kernel 'wg' uses wgmma.fence, which only sm_90a has; the target is sm_90
