// RUN: llm-opt %s -p fuse-tails | filecheck %s
// RUN: llm-opt %s -p fuse-tails --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p "fuse-tails{max_rounds=2}" | filecheck %s --check-prefix=ROUNDS
// RUN: llm-opt %s -p "fuse-tails{max_rounds=2}" --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM2
// RUN: llm-opt %s -p fuse-tails,kernel-to-cuda -t cuda | filecheck %s --check-prefix=CUDA
// RUN: not llm-opt %s -p "fuse-tails{max_rounds=0}" 2>&1 | filecheck %s --check-prefix=BAD
// A one-block launch that reads what the launch before it wrote runs in that launch's last
// block (kernel.last_block), a second such launch after it joins the same tail behind a
// barrier, and the host allocates one zeroed counter for all tails. A tail of two rounds
// (two blocks, or twice the threads of the block that runs it) waits for max_rounds=2; a
// launch that reads nothing of the one before stays apart.

// out[i] = in[i] * 2, 64 elements in blocks of 32 threads.
kernel.func @twice(%out: memref<64xf32>, %in: memref<64xf32>) block [32, 1, 1] {
  %b = kernel.block_id x
  %t = kernel.thread_id x
  %c32 = arith.constant 32 : index
  %two = arith.constant 2.0 : f32
  %base = arith.muli %b, %c32 : index
  %i = arith.addi %base, %t : index
  %v = kernel.load %in[%i] : memref<64xf32>
  %w = arith.mulf %v, %two : f32
  kernel.store %w, %out[%i] : memref<64xf32>
  kernel.return
}

// total[b] = the sum of in[32 b .. 32 b + 31], through shared memory and a barrier.
kernel.func @sum(%total: memref<2xf32>, %in: memref<64xf32>) block [32, 1, 1] {
  %part = kernel.shared : memref<32xf32>
  %b = kernel.block_id x
  %t = kernel.thread_id x
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %zero = arith.constant 0.0 : f32
  %base = arith.muli %b, %c32 : index
  %i = arith.addi %base, %t : index
  %v = kernel.load %in[%i] : memref<64xf32>
  kernel.store %v, %part[%t] : memref<32xf32>
  kernel.barrier
  %first = arith.cmpi eq, %t, %c0 : index
  scf.if %first {
    %s = scf.for %j = %c0 to %c32 step %c1 iter_args(%acc = %zero) -> (f32) {
      %p = kernel.load %part[%j] : memref<32xf32>
      %a = arith.addf %acc, %p : f32
      scf.yield %a : f32
    }
    kernel.store %s, %total[%b] : memref<2xf32>
  }
  kernel.return
}

// out[i] = in[i] - total[0] for i < 64, a thread an element, 64 threads a block.
kernel.func @center(%out: memref<64xf32>, %in: memref<64xf32>, %total: memref<2xf32>) block [64, 1, 1] {
  %b = kernel.block_id x
  %n = kernel.block_dim x
  %t = kernel.thread_id x
  %c0 = arith.constant 0 : index
  %base = arith.muli %b, %n : index
  %i = arith.addi %base, %t : index
  %s = kernel.load %total[%c0] : memref<2xf32>
  %v = kernel.load %in[%i] : memref<64xf32>
  %d = arith.subf %v, %s : f32
  kernel.store %d, %out[%i] : memref<64xf32>
  kernel.return
}

func.func @main(%x: memref<64xf32>, %y: memref<64xf32>)
    -> (memref<64xf32>, memref<2xf32>, memref<64xf32>, memref<2xf32>, memref<64xf32>, memref<2xf32>,
        memref<2xf32>) {
  // twice then a one-block sum of its first half: the sum is the tail; then a center of a
  // different block shape and 64 threads, two rounds of 32: only with max_rounds=2.
  %a = memref.alloc() : memref<64xf32>
  kernel.launch @twice grid [2, 1, 1] block [32, 1, 1] smem 0 (%a, %x) : memref<64xf32>, memref<64xf32>
  %s = memref.alloc() : memref<2xf32>
  kernel.launch @sum grid [1, 1, 1] block [32, 1, 1] smem 0 (%s, %a) : memref<2xf32>, memref<64xf32>
  %c = memref.alloc() : memref<64xf32>
  kernel.launch @center grid [1, 1, 1] block [64, 1, 1] smem 0 (%c, %a, %s) : memref<64xf32>, memref<64xf32>, memref<2xf32>
  // twice then a sum of both halves (two rounds: only with max_rounds=2).
  %b = memref.alloc() : memref<64xf32>
  kernel.launch @twice grid [2, 1, 1] block [32, 1, 1] smem 0 (%b, %y) : memref<64xf32>, memref<64xf32>
  %u = memref.alloc() : memref<2xf32>
  kernel.launch @sum grid [2, 1, 1] block [32, 1, 1] smem 0 (%u, %b) : memref<2xf32>, memref<64xf32>
  // a sum that reads nothing twice wrote stays apart; the sum after it reads twice's
  // output, so twice moves past the independent sum and takes it as its tail.
  %d = memref.alloc() : memref<64xf32>
  kernel.launch @twice grid [2, 1, 1] block [32, 1, 1] smem 0 (%d, %x) : memref<64xf32>, memref<64xf32>
  %v = memref.alloc() : memref<2xf32>
  kernel.launch @sum grid [1, 1, 1] block [32, 1, 1] smem 0 (%v, %y) : memref<2xf32>, memref<64xf32>
  %r = memref.alloc() : memref<2xf32>
  kernel.launch @sum grid [1, 1, 1] block [32, 1, 1] smem 0 (%r, %d) : memref<2xf32>, memref<64xf32>
  // a sum with dynamic shared memory, and one with a runtime grid: apart.
  %e = memref.alloc() : memref<64xf32>
  kernel.launch @twice grid [2, 1, 1] block [32, 1, 1] smem 0 (%e, %x) : memref<64xf32>, memref<64xf32>
  %q = memref.alloc() : memref<2xf32>
  kernel.launch @sum grid [1, 1, 1] block [32, 1, 1] smem 128 (%q, %e) : memref<2xf32>, memref<64xf32>
  %one = arith.constant 1 : index
  kernel.launch @sum grid [%one max 1, 1, 1] block [32, 1, 1] smem 0 (%q, %e) : memref<2xf32>, memref<64xf32>
  func.return %a, %s, %c, %u, %d, %v, %r : memref<64xf32>, memref<2xf32>, memref<64xf32>, memref<2xf32>, memref<64xf32>, memref<2xf32>, memref<2xf32>
}

// The one-block sum in twice's last block: its block id is 0, its grid 1, its shared buffer
// at the top of the kernel; the counter is the kernel's last parameter.
// CHECK-LABEL: kernel.func @twice__last_sum(
// CHECK-SAME:      %out: memref<64xf32>, %in: memref<64xf32>, %s: memref<2xf32>, %tail_counter: memref<1xi32>) block [32, 1, 1] {
// CHECK-NEXT:    %part = kernel.shared : memref<32xf32>
// CHECK:         kernel.store %w, %out[%i] : memref<64xf32>
// CHECK-NEXT:    kernel.last_block %tail_counter : memref<1xi32> {
// CHECK-NEXT:      %[[ZERO:.*]] = arith.constant 0 : index
// CHECK-NOT:       kernel.block_id
// CHECK:           %[[BASE:.*]] = arith.muli %[[ZERO]], %{{.*}} : index
// CHECK:           kernel.store %{{.*}}, %part[%{{.*}}] : memref<32xf32>
// CHECK-NEXT:      kernel.barrier
// CHECK:           kernel.store %{{.*}}, %s[%[[ZERO]]] : memref<2xf32>
// CHECK:         kernel.return
// CHECK-NOT:   kernel.func @twice__last_sum_2
// CHECK-LABEL: func.func @main(
// CHECK-NEXT:    %tail_counter = memref.alloc() {llmopt.zeroed} : memref<1xi32>
// CHECK:         kernel.launch @twice__last_sum grid [2, 1, 1] block [32, 1, 1] smem 0 (%a, %x, %s, %tail_counter)
// CHECK:         kernel.launch @center grid [1, 1, 1] block [64, 1, 1]
// CHECK:         kernel.launch @twice grid [2, 1, 1]
// CHECK:         kernel.launch @sum grid [2, 1, 1]
// CHECK:         %v = memref.alloc
// CHECK-NEXT:    kernel.launch @sum grid [1, 1, 1] block [32, 1, 1] smem 0 (%v, %y)
// CHECK-NEXT:    %r = memref.alloc
// CHECK-NEXT:    kernel.launch @twice__last_sum grid [2, 1, 1] block [32, 1, 1] smem 0 (%d, %x, %r, %tail_counter)
// CHECK:         kernel.launch @twice grid [2, 1, 1]
// CHECK-NEXT:    memref.alloc
// CHECK-NEXT:    kernel.launch @sum grid [1, 1, 1] block [32, 1, 1] smem 128
// CHECK:         kernel.launch @sum grid [%{{.*}} max 1, 1, 1]
// CHECK-NEXT:    func.return

// NUM: fuse-tails {{.*}} ok
// NUM2: fuse-tails {{.*}} ok

// Two rounds: the sum of two blocks loops over them, a barrier closing each (its shared
// buffer serves the next); center, of 64 threads, joins the first tail behind a barrier,
// its threads strided over the 32 of the block, the counter passed once.
// ROUNDS-LABEL: kernel.func @twice__last_sum_2(
// ROUNDS:         kernel.last_block %tail_counter : memref<1xi32> {
// ROUNDS:           scf.for %tail_block = %{{.*}} to %{{.*}} step %{{.*}} {
// ROUNDS:             arith.muli %tail_block, %{{.*}} : index
// ROUNDS:             kernel.store %{{.*}}, %u[%tail_block] : memref<2xf32>
// ROUNDS:             kernel.barrier
// ROUNDS-NEXT:      }
// ROUNDS-LABEL: kernel.func @twice__last_sum__last_center(
// ROUNDS-SAME:      %s: memref<2xf32>, %tail_counter: memref<1xi32>, %c: memref<64xf32>) block [32, 1, 1] {
// ROUNDS:           kernel.store %{{.*}}, %s[%{{.*}}] : memref<2xf32>
// ROUNDS:           kernel.barrier
// ROUNDS:           %[[TID:.*]] = kernel.thread_id x
// ROUNDS:           scf.for %tail_thread = %[[TID]] to %{{.*}} step %{{.*}} {
// ROUNDS-NEXT:        %{{.*}} = arith.divui %tail_thread, %{{.*}} : index
// ROUNDS-NEXT:        %{{.*}} = arith.remui %tail_thread, %{{.*}} : index
// ROUNDS:             kernel.store %{{.*}}, %c[%{{.*}}] : memref<64xf32>
// ROUNDS-LABEL: func.func @main(
// ROUNDS:         kernel.launch @twice__last_sum__last_center grid [2, 1, 1] block [32, 1, 1] smem 0 (%a, %x, %s, %tail_counter, %c)
// ROUNDS:         kernel.launch @twice__last_sum_2 grid [2, 1, 1] block [32, 1, 1] smem 0 (%b, %y, %u, %tail_counter)
// ROUNDS:         kernel.launch @sum grid [1, 1, 1] block [32, 1, 1] smem 0 (%v, %y)
// ROUNDS:         kernel.launch @twice__last_sum grid [2, 1, 1] block [32, 1, 1] smem 0 (%d, %x, %r, %tail_counter)

// Thread 0 takes a ticket between two fences; the block whose ticket completes the grid runs
// the tail and puts the counter back.
// CUDA-LABEL: void __launch_bounds__(32) twice__last_sum(
// CUDA:         out[i] = in[i] * 2.0f;
// CUDA-NEXT:    __syncthreads();
// CUDA-NEXT:    int last_block = 0;
// CUDA-NEXT:    if ((threadIdx.x | threadIdx.y | threadIdx.z) == 0u) {
// CUDA-NEXT:      __threadfence();
// CUDA-NEXT:      last_block = (int)(atomicAdd(tail_counter, 1) == (int)(gridDim.x * gridDim.y * gridDim.z) - 1);
// CUDA-NEXT:      __threadfence();
// CUDA-NEXT:    }
// CUDA-NEXT:    if ((bool)__syncthreads_or(last_block)) {
// CUDA:           s[0] = acc;
// CUDA:           if ((threadIdx.x | threadIdx.y | threadIdx.z) == 0u) {
// CUDA-NEXT:        tail_counter[0] = 0;
// CUDA-NEXT:      }
// CUDA-NEXT:    }
// CUDA-NEXT:  }

// BAD: max_rounds must be an integer of at least 1, got 0
