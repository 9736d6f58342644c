// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p programmatic-launch | filecheck %s
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p programmatic-launch --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p "programmatic-launch{arch=sm_80}" | filecheck %s --check-prefix=OLD
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p programmatic-launch,kernel-to-cuda -t cuda | filecheck %s --check-prefix=CUDA
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p programmatic-launch | not llm-opt -p "kernel-to-cuda{arch=sm_80}" 2>&1 | filecheck %s --check-prefix=ARCH
// RUN: sed -n '/^\/\/ ERRORS BELOW/,/^\/\/ -----/p' %s | not llm-opt 2>&1 | filecheck %s --check-prefix=ERR
// RUN: sed -n '/^\/\/ EARLY LOAD/,/^\/\/ -----/p' %s | not llm-opt 2>&1 | filecheck %s --check-prefix=EARLY
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p programmatic-launch | filecheck %s --check-prefix=SPREAD
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p "programmatic-launch{spread=0}" | filecheck %s --check-prefix=NOSPREAD
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p "programmatic-launch,kernel-to-cuda" --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: not llm-opt -p "programmatic-launch{spread=2}" %s 2>&1 | filecheck %s --check-prefix=BADSPREAD
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p "programmatic-launch{carveout=100}" | filecheck %s --check-prefix=CARVE
// RUN: not llm-opt -p "programmatic-launch{carveout=101}" %s 2>&1 | filecheck %s --check-prefix=BADCARVE
// RUN: sed -n '/^\/\/ BAD CARVEOUT/,$p' %s | not llm-opt 2>&1 | filecheck %s --check-prefix=CARVEIR
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p "programmatic-launch{prefetch_first=false},kernel-to-cuda" -t cuda | filecheck %s --check-prefix=WAITFIRST
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p "programmatic-launch{prefetch_after=132}" | filecheck %s --check-prefix=BEHIND
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p "programmatic-launch{prefetch_after=133}" | filecheck %s --check-prefix=CHECK
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p "programmatic-launch{prefetch_after=132},kernel-to-cuda" --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// Every launch may overlap the one before it: launches are marked {programmatic} and each
// kernel opens with the wait for the grids before it (once, however often it is launched)
// and then lets its own successor be scheduled; a kernel that prefetches first waits after
// its prefetches. Below sm_90 nothing changes.

// out[t] = in[t] * 2
kernel.func @twice(%out: memref<32xf32>, %in: memref<32xf32>) block [32, 1, 1] {
  %t = kernel.thread_id x
  %two = arith.constant 2.0 : f32
  %v = kernel.load %in[%t] : memref<32xf32>
  %w = arith.mulf %v, %two : f32
  kernel.store %w, %out[%t] : memref<32xf32>
  kernel.return
}
// out[t] = a[t] + b[t]
kernel.func @add(%out: memref<32xf32>, %a: memref<32xf32>, %b: memref<32xf32>) block [32, 1, 1] {
  %t = kernel.thread_id x
  %x = kernel.load %a[%t] : memref<32xf32>
  %y = kernel.load %b[%t] : memref<32xf32>
  %s = arith.addf %x, %y : f32
  kernel.store %s, %out[%t] : memref<32xf32>
  kernel.return
}
// out[b, t] = in[t]: a grid of 133 blocks, one more than an sm_90 has multiprocessors
kernel.func @rows(%out: memref<133x32xf32>, %in: memref<32xf32>) block [32, 1, 1] {
  %b = kernel.block_id x
  %t = kernel.thread_id x
  %v = kernel.load %in[%t] : memref<32xf32>
  kernel.store %v, %out[%b, %t] : memref<133x32xf32>
  kernel.return
}
// out[b, t] = w[b, t] * 2, each block first asking the L2 cache for its row of w: the
// wait goes after the prefetch, inside the loop over blocks (a hint needs no wait).
kernel.func @scaled_rows(%out: memref<133x32xf32>, %w: memref<133x32xf32>) block [32, 1, 1] {
  %bid = kernel.block_id x
  %gdim = kernel.grid_dim x
  %n = arith.constant 133 : index
  %c0 = arith.constant 0 : index
  %two = arith.constant 2.0 : f32
  scf.for %b = %bid to %n step %gdim {
    %t = kernel.thread_id x
    %first = arith.cmpi eq, %t, %c0 : index
    scf.if %first {
      kernel.prefetch %w[%b, %c0] count 32 : memref<133x32xf32>
    }
    %v = kernel.load %w[%b, %t] : memref<133x32xf32>
    %s = arith.mulf %v, %two : f32
    kernel.store %s, %out[%b, %t] : memref<133x32xf32>
  }
  kernel.return
}
func.func @main(%x: memref<32xf32>, %y: memref<133x32xf32>) -> (memref<133x32xf32>, memref<133x32xf32>) {
  %a = memref.alloc() : memref<32xf32>
  kernel.launch @twice grid [1, 1, 1] block [32, 1, 1] smem 0 (%a, %x) : memref<32xf32>, memref<32xf32>
  %b = memref.alloc() : memref<32xf32>
  kernel.launch @twice grid [1, 1, 1] block [32, 1, 1] smem 0 (%b, %a) : memref<32xf32>, memref<32xf32>
  %c = memref.alloc() : memref<32xf32>
  kernel.launch @add grid [1, 1, 1] block [32, 1, 1] smem 0 (%c, %a, %b) : memref<32xf32>, memref<32xf32>, memref<32xf32>
  %d = memref.alloc() : memref<133x32xf32>
  kernel.launch @rows grid [133, 1, 1] block [32, 1, 1] smem 0 (%d, %c) : memref<133x32xf32>, memref<32xf32>
  %e = memref.alloc() : memref<133x32xf32>
  kernel.launch @scaled_rows grid [133, 1, 1] block [32, 1, 1] smem 0 (%e, %y) : memref<133x32xf32>, memref<133x32xf32>
  func.return %d, %e : memref<133x32xf32>, memref<133x32xf32>
}

// CHECK:      kernel.func @twice(%out: memref<32xf32>, %in: memref<32xf32>) block [32, 1, 1] {
// CHECK-NEXT:   kernel.wait_prior_grids
// CHECK-NEXT:   kernel.launch_dependents
// CHECK-NEXT:   %t = kernel.thread_id x
// CHECK-NOT:    kernel.wait_prior_grids
// CHECK:      kernel.func @add(
// CHECK-NEXT:   kernel.wait_prior_grids
// CHECK-NEXT:   kernel.launch_dependents
// CHECK:      kernel.func @scaled_rows(
// CHECK-NOT:    kernel.wait_prior_grids
// CHECK:        scf.for %b = %bid to %n step %gdim {
// CHECK:          scf.if %first {
// CHECK-NEXT:       kernel.prefetch %w[%b, %c0] count 32 : memref<133x32xf32>
// CHECK-NEXT:     }
// CHECK-NEXT:     kernel.wait_prior_grids
// CHECK-NEXT:     kernel.launch_dependents
// CHECK-NEXT:     %v = kernel.load %w[%b, %t] : memref<133x32xf32>
// CHECK:      func.func @main
// CHECK:        kernel.launch @twice {{.*}} (%a, %x) {programmatic}
// CHECK:        kernel.launch @twice {{.*}} (%b, %a) {programmatic}
// CHECK:        kernel.launch @add {{.*}} (%c, %a, %b) {programmatic}
// CHECK:        kernel.launch @rows grid [133, 1, 1] {{.*}} smem 0 (%d, %c) {programmatic}

// By default (spread=1) a launch of at most one block a multiprocessor (132 on sm_90)
// reserves half of a multiprocessor's 228 KiB of shared memory and 1 KiB more, so that no
// two of its blocks share one; a larger grid keeps what it asked for. spread=0: no change.
// SPREAD:      kernel.launch @twice grid [1, 1, 1] block [32, 1, 1] smem 117760 (%a, %x) {programmatic}
// SPREAD:      kernel.launch @add grid [1, 1, 1] block [32, 1, 1] smem 117760 (%c, %a, %b) {programmatic}
// SPREAD:      kernel.launch @rows grid [133, 1, 1] block [32, 1, 1] smem 0 (%d, %c) {programmatic}
// NOSPREAD:    kernel.launch @twice grid [1, 1, 1] block [32, 1, 1] smem 0 (%a, %x) {programmatic}
// NOSPREAD:    kernel.launch @add grid [1, 1, 1] block [32, 1, 1] smem 0 (%c, %a, %b) {programmatic}
// BADSPREAD: spread must be 0 or 1, got 2

// carveout=N: every launch prefers N% of the unified L1/shared memory as shared memory, so
// kernels that follow each other can share a multiprocessor; by default none says (CHECK).
// CARVE:       kernel.launch @twice {{.*}} {programmatic, carveout = 100 : i64}
// CARVE:       kernel.launch @rows grid [133, 1, 1] {{.*}} smem 0 (%d, %c) {programmatic, carveout = 100 : i64}
// CHECK-NOT:   carveout
// BADCARVE: carveout must be an integer from -1 to 100, got 101

// prefetch_after=N: a kernel keeps its prefetches only where every launch of it follows a
// launch of at most N blocks. @scaled_rows follows @rows' 133 blocks: with N=133 it keeps
// them (CHECK above), with N=132 they go, with the branch that held them and the compare
// only it used, and the kernel waits first like any other.
// BEHIND:      kernel.func @scaled_rows(
// BEHIND-NEXT:   kernel.wait_prior_grids
// BEHIND-NEXT:   kernel.launch_dependents
// BEHIND-NOT:    kernel.prefetch
// BEHIND-NOT:    scf.if
// BEHIND-NOT:    arith.cmpi
// BEHIND:        %v = kernel.load %w[%b, %t] : memref<133x32xf32>
// BEHIND:      func.func @main

// NUM: programmatic-launch {{.*}} ok

// OLD-NOT: kernel.wait_prior_grids
// OLD-NOT: {programmatic}

// The wait keeps every load and store behind it (the "memory" clobber); the trigger orders
// nothing.
// CUDA:      twice(
// CUDA:        asm volatile("griddepcontrol.wait;" ::: "memory");
// CUDA-NEXT:   asm volatile("griddepcontrol.launch_dependents;");

// CUDA:      scaled_rows(
// CUDA:          asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :  : "l"(__cvta_generic_to_global(&w[b * 32])), "r"(128) : "memory");
// CUDA-NEXT:   }
// CUDA-NEXT:   asm volatile("griddepcontrol.wait;" ::: "memory");

// prefetch_first=false: a kernel that prefetches waits first like any other, its
// prefetches after the wait.
// WAITFIRST:      scaled_rows(
// WAITFIRST-NEXT:   float* __restrict__ out,
// WAITFIRST-NEXT:   const float* __restrict__ w) {
// WAITFIRST-NEXT:   asm volatile("griddepcontrol.wait;" ::: "memory");
// WAITFIRST:          asm volatile("cp.async.bulk.prefetch.L2.global

// ARCH: kernel 'twice' uses kernel.wait_prior_grids, which needs sm_90 or newer; the target is sm_80

// ERRORS BELOW

// A programmatic launch of a kernel that does not wait could read what the previous kernel
// is still writing.
kernel.func @nowait(%out: memref<32xf32>) block [32, 1, 1] {
  %t = kernel.thread_id x
  %zero = arith.constant 0.0 : f32
  kernel.store %zero, %out[%t] : memref<32xf32>
  kernel.return
}
func.func @bad() -> memref<32xf32> {
  %a = memref.alloc() : memref<32xf32>
  kernel.launch @nowait grid [1, 1, 1] block [32, 1, 1] smem 0 (%a) {programmatic} : memref<32xf32>
  func.return %a : memref<32xf32>
}
// ERR: a programmatic launch of @nowait, whose body touches memory before kernel.wait_prior_grids

// -----
// EARLY LOAD

// Only prefetches, ids, declarations, index arithmetic and the lengths the host wrote may
// come before the wait: here a load does.
kernel.func @early(%out: memref<32xf32>, %in: memref<32xf32>) block [32, 1, 1] {
  %t = kernel.thread_id x
  %v = kernel.load %in[%t] : memref<32xf32>
  kernel.wait_prior_grids
  kernel.store %v, %out[%t] : memref<32xf32>
  kernel.return
}
func.func @bad(%x: memref<32xf32>) -> memref<32xf32> {
  %a = memref.alloc() : memref<32xf32>
  kernel.launch @early grid [1, 1, 1] block [32, 1, 1] smem 0 (%a, %x) {programmatic} : memref<32xf32>, memref<32xf32>
  func.return %a : memref<32xf32>
}
// EARLY: a programmatic launch of @early, whose body touches memory before kernel.wait_prior_grids

// -----
// BAD CARVEOUT

kernel.func @one(%out: memref<32xf32>) block [32, 1, 1] {
  %t = kernel.thread_id x
  %zero = arith.constant 0.0 : f32
  kernel.store %zero, %out[%t] : memref<32xf32>
  kernel.return
}
func.func @bad() -> memref<32xf32> {
  %a = memref.alloc() : memref<32xf32>
  kernel.launch @one grid [1, 1, 1] block [32, 1, 1] smem 0 (%a) {carveout = 150 : i64} : memref<32xf32>
  func.return %a : memref<32xf32>
}
// CARVEIR: carveout must be an integer percentage 0-100, got 150 : i64
