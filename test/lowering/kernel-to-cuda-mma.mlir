// RUN: llm-opt %s -p kernel-to-cuda -t cuda | filecheck %s
// RUN: sed 's/xbf16>/xf16>/g' %s | llm-opt -p kernel-to-cuda -t cuda | filecheck %s --check-prefix=F16
// RUN: not llm-opt %s -p 'kernel-to-cuda{arch=sm_75}' 2>&1 | filecheck %s --check-prefix=SM75
// RUN: llm-opt %s -p 'kernel-to-cuda{index_bitwidth=64}' -t cuda | filecheck %s --check-prefix=WIDE
// A kernel of 16-bit mma.sync computes its indices in int by default (the range analysis
// proves them in 32 bits); index_bitwidth=64 keeps long long.
// One warp a block: D = A·B + C from shared tiles, fragments loaded with ldmatrix (B's rows
// transposed on the way), one bf16 m16n8k16 mma.sync. Pairs are unsigned locals written by
// asm volatile (it reads shared memory) and passed to mma.sync as "r" registers.

func.func @main(%a: memref<2x16x16xbf16>, %w: memref<2x8x16xbf16>, %c: memref<2x16x8xf32>)
    -> memref<2x16x8xf32> {
  %d = memref.alloc() : memref<2x16x8xf32>
  kernel.launch @mma grid [2, 1, 1] block [32, 1, 1] smem 0 (%a, %w, %c, %d)
      : memref<2x16x16xbf16>, memref<2x8x16xbf16>, memref<2x16x8xf32>, memref<2x16x8xf32>
  func.return %d : memref<2x16x8xf32>
}
kernel.func @mma(%a: memref<2x16x16xbf16>, %w: memref<2x8x16xbf16>, %c: memref<2x16x8xf32>,
                 %d: memref<2x16x8xf32>) block [32, 1, 1] {
  %sa = kernel.shared : memref<16x24xbf16>
  %sw = kernel.shared : memref<8x24xbf16>
  %lane = kernel.thread_id x
  %blk = kernel.block_id x
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %c128 = arith.constant 128 : index
  %c256 = arith.constant 256 : index
  scf.for %e = %lane to %c256 step %c32 {
    %r = arith.divui %e, %c16 : index
    %k = arith.remui %e, %c16 : index
    %v = kernel.load %a[%blk, %r, %k] : memref<2x16x16xbf16>
    kernel.store %v, %sa[%r, %k] : memref<16x24xbf16>
  }
  scf.for %e = %lane to %c128 step %c32 {
    %r = arith.divui %e, %c16 : index
    %k = arith.remui %e, %c16 : index
    %v = kernel.load %w[%blk, %r, %k] : memref<2x8x16xbf16>
    kernel.store %v, %sw[%r, %k] : memref<8x24xbf16>
  }
  kernel.barrier
  %l8 = arith.remui %lane, %c8 : index
  %m = arith.divui %lane, %c8 : index
  %m2 = arith.remui %m, %c2 : index
  %hi = arith.muli %m2, %c8 : index
  %arow = arith.addi %l8, %hi : index
  %half = arith.divui %lane, %c16 : index
  %acol = arith.muli %half, %c8 : index
  %a0, %a1, %a2, %a3 = mma.ldmatrix x4 %sa[%arow, %acol] : memref<16x24xbf16>
  %b0, %b1 = mma.ldmatrix x2 trans %sw[%l8, %hi] : memref<8x24xbf16>
  %g = arith.divui %lane, %c4 : index
  %t = arith.remui %lane, %c4 : index
  %g8 = arith.addi %g, %c8 : index
  %n0 = arith.muli %t, %c2 : index
  %n1 = arith.addi %n0, %c1 : index
  %x0 = kernel.load %c[%blk, %g, %n0] : memref<2x16x8xf32>
  %x1 = kernel.load %c[%blk, %g, %n1] : memref<2x16x8xf32>
  %x2 = kernel.load %c[%blk, %g8, %n0] : memref<2x16x8xf32>
  %x3 = kernel.load %c[%blk, %g8, %n1] : memref<2x16x8xf32>
  %d0, %d1, %d2, %d3 = mma.sync (%a0, %a1, %a2, %a3) * (%b0, %b1)
      + (%x0, %x1, %x2, %x3) : vector<2xbf16>
  kernel.store %d0, %d[%blk, %g, %n0] : memref<2x16x8xf32>
  kernel.store %d1, %d[%blk, %g, %n1] : memref<2x16x8xf32>
  kernel.store %d2, %d[%blk, %g8, %n0] : memref<2x16x8xf32>
  kernel.store %d3, %d[%blk, %g8, %n1] : memref<2x16x8xf32>
  kernel.return
}

// CHECK:      const int lane = (int)threadIdx.x;
// CHECK:      unsigned int [[A0:a0]];
// CHECK:      unsigned int [[A3:a3]];
// CHECK-NEXT: asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];" : "=r"([[A0]]), "=r"(a1), "=r"(a2), "=r"([[A3]]) : "r"((unsigned int)__cvta_generic_to_shared(&sa[(l8 + hi) * 24 + {{.*}}])));
// CHECK:      asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(b0), "=r"(b1) : "r"((unsigned int)__cvta_generic_to_shared(&sw[l8 * 24 + hi])));
// CHECK:      float d0;
// CHECK:      asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};" : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3) : "r"([[A0]]), "r"(a1), "r"(a2), "r"([[A3]]), "r"(b0), "r"(b1), "f"(c[{{.*}}]), "f"(c[{{.*}}]), "f"(c[{{.*}}]), "f"(c[{{.*}}]));
// CHECK:      d[{{.*}}] = d0;

// WIDE:      const long long lane = (long long)threadIdx.x;
// WIDE-NOT:  const int

// F16: asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"

// SM75: kernel-to-cuda: kernel 'mma' uses mma.sync, which needs sm_80 or newer; the target is sm_75
