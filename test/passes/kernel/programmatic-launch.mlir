// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p programmatic-launch | filecheck %s
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p programmatic-launch --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p "programmatic-launch{arch=sm_80}" | filecheck %s --check-prefix=OLD
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p programmatic-launch,kernel-to-cuda -t cuda | filecheck %s --check-prefix=CUDA
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt -p programmatic-launch | not llm-opt -p "kernel-to-cuda{arch=sm_80}" 2>&1 | filecheck %s --check-prefix=ARCH
// RUN: sed -n '/^\/\/ ERRORS BELOW/,$p' %s | not llm-opt 2>&1 | filecheck %s --check-prefix=ERR
// Every launch may overlap the one before it: launches are marked {programmatic} and each
// kernel opens with the wait for the grids before it (once, however often it is launched)
// and then lets its own successor be scheduled. Below sm_90 nothing changes.

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
func.func @main(%x: memref<32xf32>) -> memref<32xf32> {
  %a = memref.alloc() : memref<32xf32>
  kernel.launch @twice grid [1, 1, 1] block [32, 1, 1] smem 0 (%a, %x) : memref<32xf32>, memref<32xf32>
  %b = memref.alloc() : memref<32xf32>
  kernel.launch @twice grid [1, 1, 1] block [32, 1, 1] smem 0 (%b, %a) : memref<32xf32>, memref<32xf32>
  %c = memref.alloc() : memref<32xf32>
  kernel.launch @add grid [1, 1, 1] block [32, 1, 1] smem 0 (%c, %a, %b) : memref<32xf32>, memref<32xf32>, memref<32xf32>
  func.return %c : memref<32xf32>
}

// CHECK:      kernel.func @twice(%out: memref<32xf32>, %in: memref<32xf32>) block [32, 1, 1] {
// CHECK-NEXT:   kernel.wait_prior_grids
// CHECK-NEXT:   kernel.launch_dependents
// CHECK-NEXT:   %t = kernel.thread_id x
// CHECK-NOT:    kernel.wait_prior_grids
// CHECK:      kernel.func @add(
// CHECK-NEXT:   kernel.wait_prior_grids
// CHECK-NEXT:   kernel.launch_dependents
// CHECK:      func.func @main
// CHECK:        kernel.launch @twice {{.*}} (%a, %x) {programmatic}
// CHECK:        kernel.launch @twice {{.*}} (%b, %a) {programmatic}
// CHECK:        kernel.launch @add {{.*}} (%c, %a, %b) {programmatic}

// NUM: programmatic-launch {{.*}} ok

// OLD-NOT: kernel.wait_prior_grids
// OLD-NOT: {programmatic}

// The wait keeps every load and store behind it (the "memory" clobber); the trigger orders
// nothing.
// CUDA:      twice(
// CUDA:        asm volatile("griddepcontrol.wait;" ::: "memory");
// CUDA-NEXT:   asm volatile("griddepcontrol.launch_dependents;");

// ARCH: kernel 'twice' uses kernel.wait_prior_grids, which needs sm_90 or newer; the target is sm_80

// ERRORS BELOW

// A programmatic launch of a kernel that does not wait could read what the previous kernel
// is still writing.
kernel.func @nowait(%out: memref<32xf32>) block [32, 1, 1] {
  kernel.return
}
func.func @bad() -> memref<32xf32> {
  %a = memref.alloc() : memref<32xf32>
  kernel.launch @nowait grid [1, 1, 1] block [32, 1, 1] smem 0 (%a) {programmatic} : memref<32xf32>
  func.return %a : memref<32xf32>
}
// ERR: a programmatic launch of @nowait, whose body does not begin with kernel.wait_prior_grids
