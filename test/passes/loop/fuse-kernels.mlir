// RUN: llm-opt %s --split-input-file -p prim-to-loop,fuse-kernels | filecheck %s
// Producers fuse into consumers: RMSNorm, softmax, silu(a) * b and linear + bias are one kernel each.

// RMSNorm: the row reduction is hoisted out of the column loop and computed once per row.
func.func @f(%x: tensor<1x8x256xf32>, %w: tensor<256xf32>) -> tensor<1x8x256xf32> {
  %1 = prim.elementwise (%x) : (tensor<1x8x256xf32>) -> tensor<1x8x256xf32> {
  ^bb0(%a: f32):
    %s = arith.mulf %a, %a : f32
    prim.yield %s : f32
  }
  %2 = prim.reduce add %1 dims [2] : tensor<1x8x256xf32> -> tensor<1x8x1xf32>
  %3 = prim.elementwise (%2) : (tensor<1x8x1xf32>) -> tensor<1x8x1xf32> {
  ^bb0(%a: f32):
    %c = arith.constant 3.906250e-03 : f32
    %m = arith.mulf %a, %c : f32
    %e = arith.constant 1.0e-05 : f32
    %s = arith.addf %m, %e : f32
    %r = math.rsqrt %s : f32
    prim.yield %r : f32
  }
  %4 = prim.index_map (%3) [(d0, d1, d2) -> (d0, d1, 0)] : (tensor<1x8x1xf32>) -> tensor<1x8x256xf32>
  %5 = prim.index_map (%w) [(d0, d1, d2) -> (d2)] : (tensor<256xf32>) -> tensor<1x8x256xf32>
  %6 = prim.elementwise (%x, %4, %5) : (tensor<1x8x256xf32>, tensor<1x8x256xf32>, tensor<1x8x256xf32>) -> tensor<1x8x256xf32> {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    %r = arith.mulf %m, %c : f32
    prim.yield %r : f32
  }
  func.return %6 : tensor<1x8x256xf32>
}

// CHECK-LABEL: func.func @f
// CHECK-COUNT-1: loop.kernel
// CHECK-NOT: loop.kernel
// CHECK: loop.for %[[I0:.*]] = 0 to 1 {
// CHECK-NEXT: loop.for %[[I1:.*]] = 0 to 8 {
// CHECK-NEXT: %[[SUM:.*]] = loop.reduce add %[[R:.*]] = 0 to 256 : f32 {
// CHECK: %[[RS:.*]] = math.rsqrt
// CHECK-NEXT: loop.for %[[I2:.*]] = 0 to 256 {
// CHECK: arith.mulf %{{.*}}, %[[RS]] : f32
// CHECK: loop.store
// CHECK: func.return

// -----

// Softmax (max, exp, sum, divide) is one kernel of three passes over a row; the max is
// computed once although two consumers read it.
func.func @f(%x: tensor<4x100xf32>) -> tensor<4x100xf32> {
  %m = prim.reduce max %x dims [1] : tensor<4x100xf32> -> tensor<4x1xf32>
  %bm = prim.index_map (%m) [(d0, d1) -> (d0, 0)] : (tensor<4x1xf32>) -> tensor<4x100xf32>
  %d = prim.elementwise (%x, %bm) : (tensor<4x100xf32>, tensor<4x100xf32>) -> tensor<4x100xf32> {
  ^bb0(%p: f32, %q: f32):
    %r = arith.subf %p, %q : f32
    prim.yield %r : f32
  }
  %e = prim.elementwise (%d) : (tensor<4x100xf32>) -> tensor<4x100xf32> {
  ^bb0(%p: f32):
    %r = math.exp %p : f32
    prim.yield %r : f32
  }
  %s = prim.reduce add %e dims [1] : tensor<4x100xf32> -> tensor<4x1xf32>
  %bs = prim.index_map (%s) [(d0, d1) -> (d0, 0)] : (tensor<4x1xf32>) -> tensor<4x100xf32>
  %o = prim.elementwise (%e, %bs) : (tensor<4x100xf32>, tensor<4x100xf32>) -> tensor<4x100xf32> {
  ^bb0(%p: f32, %q: f32):
    %r = arith.divf %p, %q : f32
    prim.yield %r : f32
  }
  func.return %o : tensor<4x100xf32>
}

// CHECK-LABEL: func.func @f
// CHECK-COUNT-1: loop.kernel
// CHECK-NOT: loop.kernel
// CHECK: loop.for %{{.*}} = 0 to 4 {
// CHECK-NEXT: %[[MAX:.*]] = loop.reduce max
// CHECK: %[[SUM:.*]] = loop.reduce add
// CHECK: arith.subf %{{.*}}, %[[MAX]]
// CHECK: loop.for %{{.*}} = 0 to 100 {
// CHECK: arith.subf %{{.*}}, %[[MAX]]
// CHECK: arith.divf %{{.*}}, %[[SUM]]
// CHECK-NOT: loop.reduce max
// CHECK: func.return

// -----

// silu(a) * b: one kernel.
func.func @silu_mul(%a: tensor<7x100xf32>, %b: tensor<7x100xf32>) -> tensor<7x100xf32> {
  %s = prim.elementwise (%a) : (tensor<7x100xf32>) -> tensor<7x100xf32> {
  ^bb0(%x: f32):
    %n = arith.negf %x : f32
    %e = math.exp %n : f32
    %one = arith.constant 1.0 : f32
    %d = arith.addf %one, %e : f32
    %r = arith.divf %x, %d : f32
    prim.yield %r : f32
  }
  %m = prim.elementwise (%s, %b) : (tensor<7x100xf32>, tensor<7x100xf32>) -> tensor<7x100xf32> {
  ^bb0(%x: f32, %y: f32):
    %r = arith.mulf %x, %y : f32
    prim.yield %r : f32
  }
  func.return %m : tensor<7x100xf32>
}
// CHECK-LABEL: func.func @silu_mul
// CHECK-COUNT-1: loop.kernel
// CHECK-NOT: loop.kernel
// CHECK: math.exp
// CHECK: arith.divf
// CHECK: arith.mulf
// CHECK: func.return

// -----

// linear with bias (x @ w^T + b): the broadcast product, its K reduction and the bias add
// become one kernel; the [M, N, K] product never reaches memory.
func.func @linear(%x: tensor<7x33xf32>, %w: tensor<5x33xf32>, %bias: tensor<5xf32>) -> tensor<7x5xf32> {
  %a3 = prim.index_map (%x) [(d0, d1, d2) -> (d0, d2)] : (tensor<7x33xf32>) -> tensor<7x5x33xf32>
  %b3 = prim.index_map (%w) [(d0, d1, d2) -> (d1, d2)] : (tensor<5x33xf32>) -> tensor<7x5x33xf32>
  %p3 = prim.elementwise (%a3, %b3) : (tensor<7x5x33xf32>, tensor<7x5x33xf32>) -> tensor<7x5x33xf32> {
  ^bb0(%p: f32, %q: f32):
    %r = arith.mulf %p, %q : f32
    prim.yield %r : f32
  }
  %r3 = prim.reduce add %p3 dims [2] : tensor<7x5x33xf32> -> tensor<7x5x1xf32>
  %mm = prim.index_map (%r3) [(d0, d1) -> (d0, d1, 0)] : (tensor<7x5x1xf32>) -> tensor<7x5xf32>
  %bb = prim.index_map (%bias) [(d0, d1) -> (d1)] : (tensor<5xf32>) -> tensor<7x5xf32>
  %o = prim.elementwise (%mm, %bb) : (tensor<7x5xf32>, tensor<7x5xf32>) -> tensor<7x5xf32> {
  ^bb0(%p: f32, %q: f32):
    %r = arith.addf %p, %q : f32
    prim.yield %r : f32
  }
  func.return %o : tensor<7x5xf32>
}
// CHECK-LABEL: func.func @linear
// CHECK-COUNT-1: loop.kernel
// CHECK-NOT: loop.kernel
// CHECK: loop.for %[[M:.*]] = 0 to 7 {
// CHECK-NEXT: loop.for %[[N:.*]] = 0 to 5 {
// CHECK-NEXT: %[[DOT:.*]] = loop.reduce add %[[K:.*]] = 0 to 33 : f32 {
// CHECK-DAG: loop.load %{{.*}}[%[[M]], %[[K]]] : memref<7x33xf32>
// CHECK-DAG: loop.load %{{.*}}[%[[N]], %[[K]]] : memref<5x33xf32>
// CHECK: %[[B:.*]] = loop.load %{{.*}}[%[[N]]] : memref<5xf32>
// CHECK: arith.addf %[[DOT]], %[[B]]
// CHECK: func.return

// -----

// An elementwise producer read inside a reduction whose indices skip an outer loop would be
// recomputed for every value of that loop: it stays a kernel of its own (h feeds a matmul).
func.func @no_recompute(%g: tensor<4x8xf32>, %w: tensor<3x8xf32>) -> tensor<4x3xf32> {
  %h = prim.elementwise (%g) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: f32):
    %r = math.tanh %x : f32
    prim.yield %r : f32
  }
  %a3 = prim.index_map (%h) [(d0, d1, d2) -> (d0, d2)] : (tensor<4x8xf32>) -> tensor<4x3x8xf32>
  %b3 = prim.index_map (%w) [(d0, d1, d2) -> (d1, d2)] : (tensor<3x8xf32>) -> tensor<4x3x8xf32>
  %p3 = prim.elementwise (%a3, %b3) : (tensor<4x3x8xf32>, tensor<4x3x8xf32>) -> tensor<4x3x8xf32> {
  ^bb0(%p: f32, %q: f32):
    %r = arith.mulf %p, %q : f32
    prim.yield %r : f32
  }
  %r3 = prim.reduce add %p3 dims [2] : tensor<4x3x8xf32> -> tensor<4x3x1xf32>
  %mm = prim.index_map (%r3) [(d0, d1) -> (d0, d1, 0)] : (tensor<4x3x1xf32>) -> tensor<4x3xf32>
  func.return %mm : tensor<4x3xf32>
}
// CHECK-LABEL: func.func @no_recompute
// CHECK: loop.kernel @elementwise
// CHECK: math.tanh
// CHECK: loop.kernel
// CHECK-NOT: math.tanh
// CHECK: loop.reduce add
// CHECK-NOT: loop.kernel
// CHECK: func.return
