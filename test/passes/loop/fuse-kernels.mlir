// RUN: llm-opt %s --split-input-file -p prim-to-loop,fuse-kernels | filecheck %s
// RUN: llm-opt %s --split-input-file -p 'prim-to-loop,fuse-kernels{recompute_limit=0}' | filecheck %s --check-prefix=ONCE
// RUN: llm-opt %s --split-input-file -p 'prim-to-loop,fuse-kernels{permuted_operands=false}' | filecheck %s --check-prefix=KEEP
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

// -----

// Embedding (a gather) fuses into its consumer: the token id is loaded and cast once per row,
// outside the column loop; the table is read at that data-dependent row.
func.func @embed_scale(%t: tensor<97x16xf32>, %ids: tensor<1x7xi64>) -> tensor<1x7x16xf32> {
  %e = prim.gather %t[%ids] axis 0 : (tensor<97x16xf32>, tensor<1x7xi64>) -> tensor<1x7x16xf32>
  %s = prim.elementwise (%e) : (tensor<1x7x16xf32>) -> tensor<1x7x16xf32> {
  ^bb0(%x: f32):
    %c = arith.constant 8.0 : f32
    %r = arith.mulf %x, %c : f32
    prim.yield %r : f32
  }
  func.return %s : tensor<1x7x16xf32>
}
// CHECK-LABEL: func.func @embed_scale
// CHECK-COUNT-1: loop.kernel
// CHECK-NOT: loop.kernel
// CHECK: loop.for %[[I0:.*]] = 0 to 1 {
// CHECK-NEXT: loop.for %[[I1:.*]] = 0 to 7 {
// CHECK-NEXT: %[[ID:.*]] = loop.load %{{.*}}[%[[I0]], %[[I1]]] : memref<1x7xi64>
// CHECK-NEXT: %[[ROW:.*]] = arith.index_cast %[[ID]] : i64 to index
// CHECK-NEXT: loop.for %[[I2:.*]] = 0 to 16 {
// CHECK-NEXT: loop.load %{{.*}}[%[[ROW]], %[[I2]]] : memref<97x16xf32>
// CHECK: func.return

// -----

// A producer read at a data-dependent coordinate (a gather from a computed table) fuses: the
// index varies with the loop around its definition, so each point is computed once.
func.func @gather_computed(%w: tensor<97x16xf32>, %ids: tensor<7xi64>) -> tensor<7x16xf32> {
  %t = prim.elementwise (%w) : (tensor<97x16xf32>) -> tensor<97x16xf32> {
  ^bb0(%x: f32):
    %r = math.tanh %x : f32
    prim.yield %r : f32
  }
  %e = prim.gather %t[%ids] axis 0 : (tensor<97x16xf32>, tensor<7xi64>) -> tensor<7x16xf32>
  func.return %e : tensor<7x16xf32>
}
// CHECK-LABEL: func.func @gather_computed
// CHECK-COUNT-1: loop.kernel
// CHECK-NOT: loop.kernel
// CHECK: %[[ROW:.*]] = arith.index_cast
// CHECK: loop.load %{{.*}}[%[[ROW]], %{{.*}}] : memref<97x16xf32>
// CHECK-NEXT: math.tanh
// CHECK: func.return

// -----

// Attention (scores, causal mask, softmax): the scores' contraction fuses into the softmax
// kernel (recomputed in its max, sum and normalise loops); probs @ v stays a kernel of its
// own: its loop over the value columns does not index the probabilities.
func.func @attention(%q: tensor<1x2x5x8xf32>, %k: tensor<1x1x5x8xf32>, %v: tensor<1x1x5x8xf32>) -> tensor<1x2x5x8xf32> {
  %0 = prim.index_map (%q) [(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)] : (tensor<1x2x5x8xf32>) -> tensor<1x2x5x5x8xf32>
  %1 = prim.index_map (%k) [(d0, d1, d2, d3, d4) -> (d0, (d1 floordiv 2), d3, d4)] : (tensor<1x1x5x8xf32>) -> tensor<1x2x5x5x8xf32>
  %2 = prim.elementwise (%0, %1) : (tensor<1x2x5x5x8xf32>, tensor<1x2x5x5x8xf32>) -> tensor<1x2x5x5x8xf32> {
  ^bb0(%a: f32, %b: f32):
    %r = arith.mulf %a, %b : f32
    prim.yield %r : f32
  }
  %3 = prim.reduce add %2 dims [4] : tensor<1x2x5x5x8xf32> -> tensor<1x2x5x5x1xf32>
  %4 = prim.index_map (%3) [(d0, d1, d2, d3) -> (0, d1, d2, d3, 0)] : (tensor<1x2x5x5x1xf32>) -> tensor<1x2x5x5xf32>
  %5 = prim.elementwise (%4) : (tensor<1x2x5x5xf32>) -> tensor<1x2x5x5xf32> {
  ^bb0(%x: f32):
    %c = arith.constant 0.35 : f32
    %y = arith.mulf %x, %c : f32
    %s = prim.coord 3 : index
    %l = prim.coord 2 : index
    %keep = arith.cmpi sle, %s, %l : index
    %ninf = arith.constant 0xff800000 : f32
    %r = arith.select %keep, %y, %ninf : f32
    prim.yield %r : f32
  }
  %6 = prim.reduce max %5 dims [3] : tensor<1x2x5x5xf32> -> tensor<1x2x5x1xf32>
  %7 = prim.index_map (%6) [(d0, d1, d2, d3) -> (d0, d1, d2, 0)] : (tensor<1x2x5x1xf32>) -> tensor<1x2x5x5xf32>
  %8 = prim.elementwise (%5, %7) : (tensor<1x2x5x5xf32>, tensor<1x2x5x5xf32>) -> tensor<1x2x5x5xf32> {
  ^bb0(%x: f32, %m: f32):
    %d = arith.subf %x, %m : f32
    %e = math.exp %d : f32
    prim.yield %e : f32
  }
  %9 = prim.reduce add %8 dims [3] : tensor<1x2x5x5xf32> -> tensor<1x2x5x1xf32>
  %10 = prim.index_map (%9) [(d0, d1, d2, d3) -> (d0, d1, d2, 0)] : (tensor<1x2x5x1xf32>) -> tensor<1x2x5x5xf32>
  %11 = prim.elementwise (%8, %10) : (tensor<1x2x5x5xf32>, tensor<1x2x5x5xf32>) -> tensor<1x2x5x5xf32> {
  ^bb0(%e: f32, %s: f32):
    %r = arith.divf %e, %s : f32
    prim.yield %r : f32
  }
  %12 = prim.index_map (%11) [(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)] : (tensor<1x2x5x5xf32>) -> tensor<1x2x5x8x5xf32>
  %13 = prim.index_map (%v) [(d0, d1, d2, d3, d4) -> (d0, (d1 floordiv 2), d4, d3)] : (tensor<1x1x5x8xf32>) -> tensor<1x2x5x8x5xf32>
  %14 = prim.elementwise (%12, %13) : (tensor<1x2x5x8x5xf32>, tensor<1x2x5x8x5xf32>) -> tensor<1x2x5x8x5xf32> {
  ^bb0(%a: f32, %b: f32):
    %r = arith.mulf %a, %b : f32
    prim.yield %r : f32
  }
  %15 = prim.reduce add %14 dims [4] : tensor<1x2x5x8x5xf32> -> tensor<1x2x5x8x1xf32>
  %16 = prim.index_map (%15) [(d0, d1, d2, d3) -> (0, d1, d2, d3, 0)] : (tensor<1x2x5x8x1xf32>) -> tensor<1x2x5x8xf32>
  func.return %16 : tensor<1x2x5x8xf32>
}
// With recompute_limit=0 no reduction is computed twice: the scores are a kernel of their own.
// ONCE-LABEL: func.func @attention
// ONCE: loop.kernel @reduce
// ONCE: loop.reduce add %{{.*}} = 0 to 8
// ONCE: loop.kernel
// ONCE-NOT: = 0 to 8
// ONCE: loop.reduce max
// ONCE: loop.kernel
// ONCE: func.return
// CHECK-LABEL: func.func @attention
// CHECK: loop.kernel
// CHECK: loop.reduce max
// CHECK-NEXT: loop.reduce add
// CHECK: arith.cmpi sle
// CHECK: loop.reduce add
// CHECK-NEXT: loop.reduce add
// CHECK: math.exp
// CHECK: loop.for
// CHECK-NEXT: loop.reduce add
// CHECK: arith.divf
// CHECK: loop.store
// CHECK: loop.kernel
// CHECK-NOT: math.exp
// CHECK: loop.reduce add
// CHECK-NOT: loop.kernel
// CHECK: func.return

// -----

// A producer read through a flattened coordinate (h = c floordiv 4 of a loop over h * 4 + f)
// would be recomputed for every f: it is not inlined there.
func.func @flattened(%x: tensor<3x8xf32>) -> tensor<12xf32> {
  %s = prim.reduce add %x dims [1] : tensor<3x8xf32> -> tensor<3x1xf32>
  %b = prim.index_map (%s) [(d0) -> ((d0 floordiv 4), 0)] : (tensor<3x1xf32>) -> tensor<12xf32>
  func.return %b : tensor<12xf32>
}
// CHECK-LABEL: func.func @flattened
// CHECK: loop.kernel @reduce
// CHECK: loop.kernel @index_map
// CHECK: loop.load %{{.*}}[(%{{.*}} floordiv 4), 0] : memref<3x1xf32>

// -----

// A reduction read twice in one loop body (the two halves of a rotate-half cat) would run
// twice per point: it is not inlined.
func.func @rotate_half(%x: tensor<4x8xf32>, %w: tensor<6x8xf32>) -> tensor<4x6xf32> {
  %a = prim.index_map (%x) [(d0, d1, d2) -> (d0, d2)] : (tensor<4x8xf32>) -> tensor<4x6x8xf32>
  %b = prim.index_map (%w) [(d0, d1, d2) -> (d1, d2)] : (tensor<6x8xf32>) -> tensor<4x6x8xf32>
  %p = prim.elementwise (%a, %b) : (tensor<4x6x8xf32>, tensor<4x6x8xf32>) -> tensor<4x6x8xf32> {
  ^bb0(%u: f32, %v: f32):
    %r = arith.mulf %u, %v : f32
    prim.yield %r : f32
  }
  %s = prim.reduce add %p dims [2] : tensor<4x6x8xf32> -> tensor<4x6x1xf32>
  %y = prim.index_map (%s) [(d0, d1) -> (d0, d1, 0)] : (tensor<4x6x1xf32>) -> tensor<4x6xf32>
  %lo = prim.index_map (%y) [(d0, d1) -> (d0, d1)] : (tensor<4x6xf32>) -> tensor<4x3xf32>
  %hi = prim.index_map (%y) [(d0, d1) -> (d0, d1 + 3)] : (tensor<4x6xf32>) -> tensor<4x3xf32>
  %r = prim.index_map (%hi, %lo) concat 1 [(d0, d1) -> (d0, d1), (d0, d1) -> (d0, d1 - 3)] : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x6xf32>
  func.return %r : tensor<4x6xf32>
}
// CHECK-LABEL: func.func @rotate_half
// CHECK: loop.kernel
// CHECK: loop.reduce add
// CHECK: loop.kernel
// CHECK-NOT: loop.reduce
// CHECK: arith.select
// CHECK: func.return

// -----

// An elementwise producer feeding two kernels is copied into both only when it reads
// nothing another kernel writes: a copy reading an intermediate would chain (a residual
// stream recomputed from every earlier layer). Here b = a + x reads a = exp(x), which is a
// result of its own: b stays one kernel, read by u and v.
func.func @shared(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %a = prim.elementwise (%x) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%p: f32):
    %r = math.exp %p : f32
    prim.yield %r : f32
  }
  %b = prim.elementwise (%a, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%p: f32, %q: f32):
    %r = arith.addf %p, %q : f32
    prim.yield %r : f32
  }
  %u = prim.elementwise (%b) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%p: f32):
    %r = math.tanh %p : f32
    prim.yield %r : f32
  }
  %v = prim.elementwise (%b) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%p: f32):
    %r = math.sqrt %p : f32
    prim.yield %r : f32
  }
  func.return %a, %u, %v : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
// CHECK-LABEL: func.func @shared
// CHECK: loop.kernel
// CHECK: math.exp
// CHECK: loop.kernel
// CHECK: arith.addf
// CHECK: loop.kernel
// CHECK-NOT: arith.addf
// CHECK: math.tanh
// CHECK: loop.kernel
// CHECK-NOT: arith.addf
// CHECK: math.sqrt
// CHECK: func.return

// -----

// A copy (a broadcast of a reduction's result over 4 rows) read by two kernels: each reads
// the reduction's buffer itself, and the copy kernel disappears even under
// recompute_limit=0 (a copy recomputes nothing), though the buffer it reads is written by
// a kernel and the rows' loop is one its indices do not use.
func.func @copies(%y: tensor<64x8xf32>, %q: tensor<4x64xf32>) -> (tensor<4x64xf32>, tensor<4x64xf32>) {
  %s = prim.reduce add %y dims [1] : tensor<64x8xf32> -> tensor<64x1xf32>
  %b = prim.index_map (%s) [(d0, d1) -> (d1, 0)] : (tensor<64x1xf32>) -> tensor<4x64xf32>
  %u = prim.elementwise (%q, %b) : (tensor<4x64xf32>, tensor<4x64xf32>) -> tensor<4x64xf32> {
  ^bb0(%a: f32, %c: f32):
    %r = arith.mulf %a, %c : f32
    prim.yield %r : f32
  }
  %v = prim.elementwise (%q, %b) : (tensor<4x64xf32>, tensor<4x64xf32>) -> tensor<4x64xf32> {
  ^bb0(%a: f32, %c: f32):
    %r = arith.addf %a, %c : f32
    prim.yield %r : f32
  }
  func.return %u, %v : tensor<4x64xf32>, tensor<4x64xf32>
}
// ONCE-LABEL: func.func @copies
// ONCE:       %[[S:.*]] = memref.alloc() : memref<64x1xf32>
// ONCE-NEXT:  loop.kernel @reduce_0
// ONCE-NOT:   loop.kernel @index_map
// ONCE:       loop.kernel @elementwise_2 ({{.*}}%[[A:.*]] = %[[S]] : memref<64x1xf32>)
// ONCE:         loop.load %[[A]][%i1, 0] : memref<64x1xf32>
// ONCE:       loop.kernel @elementwise_3 ({{.*}}%[[B:.*]] = %[[S]] : memref<64x1xf32>)
// ONCE:         loop.load %[[B]][%i1, 0] : memref<64x1xf32>

// -----

// x @ w.t(): the transpose only permutes w's coordinates, so the product reads w itself, as
// F.linear's does (loads of plain buffers at loop variables), and no transposed copy is written.
func.func @transposed_weight(%x: tensor<4x8xf32>, %w: tensor<6x8xf32>) -> tensor<4x6xf32> {
  %t = prim.index_map (%w) [(d0, d1) -> (d1, d0)] : (tensor<6x8xf32>) -> tensor<8x6xf32>
  %a = prim.index_map (%x) [(d0, d1, d2) -> (d0, d2)] : (tensor<4x8xf32>) -> tensor<4x6x8xf32>
  %b = prim.index_map (%t) [(d0, d1, d2) -> (d2, d1)] : (tensor<8x6xf32>) -> tensor<4x6x8xf32>
  %p = prim.elementwise (%a, %b) : (tensor<4x6x8xf32>, tensor<4x6x8xf32>) -> tensor<4x6x8xf32> {
  ^bb0(%u: f32, %v: f32):
    %r = arith.mulf %u, %v : f32
    prim.yield %r : f32
  }
  %s = prim.reduce add %p dims [2] : tensor<4x6x8xf32> -> tensor<4x6x1xf32>
  %y = prim.index_map (%s) [(d0, d1) -> (d0, d1, 0)] : (tensor<4x6x1xf32>) -> tensor<4x6xf32>
  func.return %y : tensor<4x6xf32>
}
// With permuted_operands=false the transposed copy is written first, by a kernel of its own.
// KEEP-LABEL: func.func @transposed_weight
// KEEP: loop.kernel @index_map
// KEEP: loop.kernel
// KEEP: loop.reduce add
// KEEP-NOT: loop.kernel
// KEEP: func.return
// CHECK-LABEL: func.func @transposed_weight
// CHECK-COUNT-1: loop.kernel
// CHECK-NOT: loop.kernel
// CHECK: loop.for %[[M:.*]] = 0 to 4 {
// CHECK-NEXT: loop.for %[[N:.*]] = 0 to 6 {
// CHECK-NEXT: loop.reduce add %[[K:.*]] = 0 to 8 : f32 {
// CHECK-DAG: loop.load %{{.*}}[%[[M]], %[[K]]] : memref<4x8xf32>
// CHECK-DAG: loop.load %{{.*}}[%[[N]], %[[K]]] : memref<6x8xf32>
// CHECK: func.return

// -----

// A broadcast is a copy but not a permutation (its load skips a loop of the nest): read by a
// product it stays a kernel of its own, the product's operand a plain buffer.
func.func @broadcast_operand(%x: tensor<4x8xf32>, %v: tensor<8xf32>) -> tensor<4x6xf32> {
  %t = prim.index_map (%v) [(d0, d1) -> (d0)] : (tensor<8xf32>) -> tensor<8x6xf32>
  %a = prim.index_map (%x) [(d0, d1, d2) -> (d0, d2)] : (tensor<4x8xf32>) -> tensor<4x6x8xf32>
  %b = prim.index_map (%t) [(d0, d1, d2) -> (d2, d1)] : (tensor<8x6xf32>) -> tensor<4x6x8xf32>
  %p = prim.elementwise (%a, %b) : (tensor<4x6x8xf32>, tensor<4x6x8xf32>) -> tensor<4x6x8xf32> {
  ^bb0(%u: f32, %v2: f32):
    %r = arith.mulf %u, %v2 : f32
    prim.yield %r : f32
  }
  %s = prim.reduce add %p dims [2] : tensor<4x6x8xf32> -> tensor<4x6x1xf32>
  %y = prim.index_map (%s) [(d0, d1) -> (d0, d1, 0)] : (tensor<4x6x1xf32>) -> tensor<4x6xf32>
  func.return %y : tensor<4x6xf32>
}
// CHECK-LABEL: func.func @broadcast_operand
// CHECK: loop.kernel @index_map
// CHECK: loop.kernel
// CHECK: loop.reduce add
// CHECK-NOT: loop.kernel
// CHECK: func.return
