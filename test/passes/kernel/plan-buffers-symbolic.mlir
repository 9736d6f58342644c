// RUN: llm-opt %s -p plan-buffers | filecheck %s
// RUN: llm-opt %s -p plan-buffers --check-numerics --check-numerics-at 1,3,8 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// A chain over a symbolic length %n. The temporaries of dynamic size (`?x4`, allocated at
// each call's length) keep their own allocations although their lifetimes would allow
// sharing; the static ones (`4xf32`) still share one.

// out[i, t] = k * in[i, t] for the rows i < n.
kernel.func @scaled(%in: memref<?x4xf32>, %out: memref<?x4xf32>, %n: index, %k: f32) block [4, 1, 1] {
  %b = kernel.block_id x
  %g = kernel.grid_dim x
  %t = kernel.thread_id x
  scf.for %i = %b to %n step %g {
    %v = kernel.load %in[%i, %t] : memref<?x4xf32>
    %w = arith.mulf %v, %k : f32
    kernel.store %w, %out[%i, %t] : memref<?x4xf32>
  }
  kernel.return
}
// out[t] = v
kernel.func @fill(%out: memref<4xf32>, %v: f32) block [4, 1, 1] {
  %t = kernel.thread_id x
  kernel.store %v, %out[%t] : memref<4xf32>
  kernel.return
}
// out[i, t] = x[i, t] + r[t] for the rows i < n.
kernel.func @addrow(%x: memref<?x4xf32>, %r: memref<4xf32>, %out: memref<?x4xf32>, %n: index) block [4, 1, 1] {
  %b = kernel.block_id x
  %g = kernel.grid_dim x
  %t = kernel.thread_id x
  scf.for %i = %b to %n step %g {
    %v = kernel.load %x[%i, %t] : memref<?x4xf32>
    %s = kernel.load %r[%t] : memref<4xf32>
    %w = arith.addf %v, %s : f32
    kernel.store %w, %out[%i, %t] : memref<?x4xf32>
  }
  kernel.return
}
func.func @chain(%x: memref<?x4xf32> {llmopt.input = "x", llmopt.dynamic = ["n"]}, %n: index {llmopt.symbol = "n", llmopt.max = 8 : i64}) -> memref<?x4xf32> {
  %two = arith.constant 2.0 : f32
  %three = arith.constant 3.0 : f32
  %a = memref.alloc(%n) : memref<?x4xf32>
  kernel.launch @scaled grid [%n max 8, 1, 1] block [4, 1, 1] smem 0 (%x, %a, %n, %two) : memref<?x4xf32>, memref<?x4xf32>, index, f32
  %b = memref.alloc(%n) : memref<?x4xf32>
  kernel.launch @scaled grid [%n max 8, 1, 1] block [4, 1, 1] smem 0 (%a, %b, %n, %three) : memref<?x4xf32>, memref<?x4xf32>, index, f32
  %c = memref.alloc(%n) : memref<?x4xf32>
  kernel.launch @scaled grid [%n max 8, 1, 1] block [4, 1, 1] smem 0 (%b, %c, %n, %two) : memref<?x4xf32>, memref<?x4xf32>, index, f32
  %r1 = memref.alloc() : memref<4xf32>
  kernel.launch @fill grid [1, 1, 1] block [4, 1, 1] smem 0 (%r1, %two) : memref<4xf32>, f32
  %d = memref.alloc(%n) : memref<?x4xf32>
  kernel.launch @addrow grid [%n max 8, 1, 1] block [4, 1, 1] smem 0 (%c, %r1, %d, %n) : memref<?x4xf32>, memref<4xf32>, memref<?x4xf32>, index
  %r2 = memref.alloc() : memref<4xf32>
  kernel.launch @fill grid [1, 1, 1] block [4, 1, 1] smem 0 (%r2, %three) : memref<4xf32>, f32
  %e = memref.alloc(%n) : memref<?x4xf32>
  kernel.launch @addrow grid [%n max 8, 1, 1] block [4, 1, 1] smem 0 (%d, %r2, %e, %n) : memref<?x4xf32>, memref<4xf32>, memref<?x4xf32>, index
  func.return %e : memref<?x4xf32>
}

// CHECK-LABEL: func.func @chain
// CHECK:       %a = memref.alloc(%n) : memref<?x4xf32>
// CHECK:       %b = memref.alloc(%n) : memref<?x4xf32>
// CHECK:       %c = memref.alloc(%n) : memref<?x4xf32>
// CHECK:       %[[R:.*]] = memref.alloc() : memref<4xf32>
// CHECK-NEXT:  kernel.launch @fill {{.*}} (%[[R]], %two)
// CHECK:       %d = memref.alloc(%n) : memref<?x4xf32>
// CHECK-NEXT:  kernel.launch @addrow {{.*}} (%c, %[[R]], %d, %n)
// CHECK-NEXT:  kernel.launch @fill {{.*}} (%[[R]], %three)
// CHECK-NEXT:  %e = memref.alloc(%n) : memref<?x4xf32>
// CHECK-NEXT:  kernel.launch @addrow {{.*}} (%d, %[[R]], %e, %n)
// CHECK-NOT:   memref.alloc() : memref<4xf32>

// NUM: plan-buffers {{.*}} ok
