// RUN: llm-opt %s -p fuse-launches | filecheck %s
// RUN: llm-opt %s -p fuse-launches --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p "fuse-launches{shared_slack=0}" | filecheck %s --check-prefix=SLACK
// RUN: llm-opt %s -p "fuse-launches,kernel-to-cuda{index_bitwidth=64}" -t cuda | filecheck %s --check-prefix=CUDA
// RUN: not llm-opt %s -p "fuse-launches{shared_slack=-1}" 2>&1 | filecheck %s --check-prefix=BAD
// Independent launches of one block shape become one launch whose blocks run each member in
// turn; a launch that reads what another writes comes after it, one of another block shape
// or with dynamic shared memory stays apart, a host store ends the run. The two layers'
// identical pairs share one fused kernel, and the kernels no launch is left for are erased.

// A grid-stride kernel: out[i] = in[i] * 2 for i < 48, blocks of 32 threads.
kernel.func @twice(%out: memref<48xf32>, %in: memref<48xf32>) block [32, 1, 1] {
  %b = kernel.block_id x
  %g = kernel.grid_dim x
  %t = kernel.thread_id x
  %n = kernel.block_dim x
  %c48 = arith.constant 48 : index
  %two = arith.constant 2.0 : f32
  %base = arith.muli %b, %n : index
  %first = arith.addi %base, %t : index
  %stride = arith.muli %g, %n : index
  scf.for %i = %first to %c48 step %stride {
    %v = kernel.load %in[%i] : memref<48xf32>
    %w = arith.mulf %v, %two : f32
    kernel.store %w, %out[%i] : memref<48xf32>
  }
  kernel.return
}

// A block sum through shared memory and a barrier: out[b] = sum of in[32 b .. 32 b + 31].
kernel.func @sums(%out: memref<4xf32>, %in: memref<128xf32>) block [32, 1, 1] {
  %part = kernel.shared : memref<32xf32>
  %b = kernel.block_id x
  %t = kernel.thread_id x
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %zero = arith.constant 0.0 : f32
  %base = arith.muli %b, %c32 : index
  %i = arith.addi %base, %t : index
  %v = kernel.load %in[%i] : memref<128xf32>
  kernel.store %v, %part[%t] : memref<32xf32>
  kernel.barrier
  %first = arith.cmpi eq, %t, %c0 : index
  scf.if %first {
    %s = scf.for %j = %c0 to %c32 step %c1 iter_args(%acc = %zero) -> (f32) {
      %p = kernel.load %part[%j] : memref<32xf32>
      %a = arith.addf %acc, %p : f32
      scf.yield %a : f32
    }
    kernel.store %s, %out[%b] : memref<4xf32>
  }
  kernel.return
}

// The last element of each block's 32, through 8 KiB of shared memory.
kernel.func @big_sums(%out: memref<4xf32>, %in: memref<128xf32>) block [32, 1, 1] {
  %part = kernel.shared : memref<2048xf32>
  %b = kernel.block_id x
  %t = kernel.thread_id x
  %c32 = arith.constant 32 : index
  %base = arith.muli %b, %c32 : index
  %i = arith.addi %base, %t : index
  %v = kernel.load %in[%i] : memref<128xf32>
  kernel.store %v, %part[%t] : memref<2048xf32>
  kernel.barrier
  %c0 = arith.constant 0 : index
  %c31 = arith.constant 31 : index
  %first = arith.cmpi eq, %t, %c0 : index
  scf.if %first {
    %w = kernel.load %part[%c31] : memref<2048xf32>
    kernel.store %w, %out[%b] : memref<4xf32>
  }
  kernel.return
}

// 64 threads a block: never fused with the others.
kernel.func @wide(%out: memref<48xf32>, %in: memref<48xf32>) block [64, 1, 1] {
  %t = kernel.thread_id x
  %c48 = arith.constant 48 : index
  %inside = arith.cmpi ult, %t, %c48 : index
  scf.if %inside {
    %v = kernel.load %in[%t] : memref<48xf32>
    kernel.store %v, %out[%t] : memref<48xf32>
  }
  kernel.return
}

func.func @main(%x: memref<48xf32>, %y: memref<128xf32>, %z: memref<48xf32>)
    -> (memref<48xf32>, memref<4xf32>, memref<48xf32>, memref<4xf32>, memref<4xf32>,
        memref<48xf32>, memref<48xf32>) {
  // Layer 1: twice(x), sums(y) and two big_sums(y) are independent (level 0); the two
  // big_sums share their 8 KiB buffer, which the sums' 128 bytes do not exceed by more than
  // the slack (without slack, nothing joins the big ones).
  %a = memref.alloc() : memref<48xf32>
  kernel.launch @twice grid [2, 1, 1] block [32, 1, 1] smem 0 (%a, %x) : memref<48xf32>, memref<48xf32>
  %s = memref.alloc() : memref<4xf32>
  kernel.launch @sums grid [4, 1, 1] block [32, 1, 1] smem 0 (%s, %y) : memref<4xf32>, memref<128xf32>
  %u = memref.alloc() : memref<4xf32>
  kernel.launch @big_sums grid [4, 1, 1] block [32, 1, 1] smem 0 (%u, %y) : memref<4xf32>, memref<128xf32>
  %v = memref.alloc() : memref<4xf32>
  kernel.launch @big_sums grid [4, 1, 1] block [32, 1, 1] smem 0 (%v, %y) : memref<4xf32>, memref<128xf32>
  %w = memref.alloc() : memref<48xf32>
  kernel.launch @wide grid [1, 1, 1] block [64, 1, 1] smem 0 (%w, %z) : memref<48xf32>, memref<48xf32>
  // Layer 2 (level 1): twice reads a; sums writes s again.
  %b = memref.alloc() : memref<48xf32>
  kernel.launch @twice grid [2, 1, 1] block [32, 1, 1] smem 0 (%b, %a) : memref<48xf32>, memref<48xf32>
  kernel.launch @sums grid [4, 1, 1] block [32, 1, 1] smem 0 (%s, %y) : memref<4xf32>, memref<128xf32>
  // Layer 3 (level 2): the same pair as layer 2, so the same fused kernel.
  %c = memref.alloc() : memref<48xf32>
  kernel.launch @twice grid [2, 1, 1] block [32, 1, 1] smem 0 (%c, %b) : memref<48xf32>, memref<48xf32>
  kernel.launch @sums grid [4, 1, 1] block [32, 1, 1] smem 0 (%s, %y) : memref<4xf32>, memref<128xf32>
  // A host store ends the run: the launches after it stay after it, and a launch with
  // dynamic shared memory stays alone.
  %c0 = arith.constant 0 : index
  %one = arith.constant 1.0 : f32
  memref.store %one, %z[%c0] : memref<48xf32>
  %d = memref.alloc() : memref<48xf32>
  kernel.launch @twice grid [2, 1, 1] block [32, 1, 1] smem 0 (%d, %z) : memref<48xf32>, memref<48xf32>
  %e = memref.alloc() : memref<48xf32>
  kernel.launch @twice grid [2, 1, 1] block [32, 1, 1] smem 128 (%e, %x) : memref<48xf32>, memref<48xf32>
  func.return %c, %s, %w, %u, %v, %d, %e : memref<48xf32>, memref<4xf32>, memref<48xf32>, memref<4xf32>, memref<4xf32>, memref<48xf32>, memref<48xf32>
}

// The pair of layers 2 and 3, built once: block b runs twice while b < 2 (with b and a
// grid of 2), then sums with b - 2 and its barrier, behind a block-uniform condition.
// CHECK-LABEL: kernel.func @twice__sums(
// CHECK-SAME:      %b: memref<48xf32>, %a: memref<48xf32>, %s: memref<4xf32>, %y: memref<128xf32>) block [32, 1, 1] {
// CHECK-NEXT:    %part = kernel.shared : memref<32xf32>
// CHECK-NEXT:    %[[BID:.*]] = kernel.block_id x
// CHECK-NEXT:    %[[G:.*]] = arith.constant 2 : index
// CHECK-NEXT:    %[[IN0:.*]] = arith.cmpi ult, %[[BID]], %[[G]] : index
// CHECK-NEXT:    scf.if %[[IN0]] {
// CHECK-NOT:       kernel.block_id
// CHECK-NOT:       kernel.grid_dim
// CHECK:           %base = arith.muli %[[BID]], %n : index
// CHECK:           %stride = arith.muli %[[G]], %n : index
// CHECK:         } else {
// CHECK-NEXT:      %[[START:.*]] = arith.constant 2 : index
// CHECK-NEXT:      %[[LOCAL:.*]] = arith.subi %[[BID]], %[[START]] : index
// CHECK-NEXT:      %[[SIZE:.*]] = arith.constant 4 : index
// CHECK-NEXT:      %[[IN1:.*]] = arith.cmpi ult, %[[LOCAL]], %[[SIZE]] : index
// CHECK-NEXT:      scf.if %[[IN1]] {
// CHECK-NOT:         kernel.block_id
// CHECK:             arith.muli %[[LOCAL]], %c32 : index
// CHECK:             kernel.barrier
// CHECK:             kernel.store %{{.*}}, %s[%[[LOCAL]]] : memref<4xf32>
// CHECK:         kernel.return
// CHECK-NEXT:  }

// Level 0 of the first run: twice, sums and both big_sums. A block runs one member, so the
// two big_sums share one 8 KiB buffer: the group holds 8 KiB and the 128 bytes of sums.
// CHECK-LABEL: kernel.func @twice__sums__big_sums__big_sums(
// CHECK-SAME:      %a: memref<48xf32>, %x: memref<48xf32>, %s: memref<4xf32>, %y: memref<128xf32>, %u: memref<4xf32>, %v: memref<4xf32>)
// CHECK-NEXT:    %part = kernel.shared : memref<32xf32>
// CHECK-NEXT:    %[[BIG:.*]] = kernel.shared : memref<2048xf32>
// CHECK-NEXT:    kernel.block_id x
// CHECK:         kernel.store %{{.*}}, %[[BIG]]
// CHECK:         kernel.store %{{.*}}, %[[BIG]]

// CHECK-LABEL: func.func @main
// CHECK:         kernel.launch @twice__sums__big_sums__big_sums grid [14, 1, 1] block [32, 1, 1] smem 0 (%a, %x, %s, %y, %u, %v)
// CHECK-NEXT:    kernel.launch @wide grid [1, 1, 1] block [64, 1, 1] smem 0 (%w, %z)
// CHECK-NEXT:    kernel.launch @twice__sums grid [6, 1, 1] block [32, 1, 1] smem 0 (%b, %a, %s, %y)
// CHECK-NEXT:    kernel.launch @twice__sums grid [6, 1, 1] block [32, 1, 1] smem 0 (%c, %b, %s, %y)
// CHECK:         memref.store
// CHECK:         kernel.launch @twice grid [2, 1, 1] block [32, 1, 1] smem 0 (%d, %z)
// CHECK:         kernel.launch @twice grid [2, 1, 1] block [32, 1, 1] smem 128 (%e, %x)

// sums and big_sums are launched only as members now, so they are gone; twice and wide
// stay.
// CHECK-NOT:   kernel.func @sums(
// CHECK-NOT:   kernel.func @big_sums(

// NUM: fuse-launches {{.*}} ok

// With no slack the big_sums join no group holding other shared memory, only each other.
// SLACK-LABEL: func.func @main
// SLACK:         kernel.launch @twice__sums grid [6, 1, 1] block [32, 1, 1] smem 0 (%a, %x, %s, %y)
// SLACK-NEXT:    kernel.launch @big_sums__big_sums grid [8, 1, 1] block [32, 1, 1] smem 0 (%u, %y, %v)

// CUDA-LABEL: void __launch_bounds__(32) twice__sums(
// CUDA:         if ((unsigned long long){{.*}} < 2ull) {
// CUDA:         } else {
// CUDA:           __syncthreads();

// BAD: shared_slack must be a non-negative integer, got -1
