// RUN: llm-opt %s --split-input-file -p recompute-into-products | filecheck %s
// RUN: llm-opt %s --split-input-file -p recompute-into-products --check-numerics --check-numerics-lengths 3 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// Inputs with a symbolic length. (1) A norm of %seq rows (a prompt of any length) feeding a
// product: it may hold more than one row, so it is left alone. (2) A decode step's one-row
// norm whose product's output is added to a sum over a cache of runtime length %ctx: the
// norm is one row whatever %ctx is, and is recomputed inside the product.

// CHECK-LABEL: func.func @prompt
// CHECK:       loop.kernel @norm
// CHECK:       loop.kernel @proj

func.func @prompt(%x: memref<?x64xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]}, %w: memref<64xf32> {llmopt.input = "w"}, %W: memref<16x64xf32> {llmopt.input = "W"}, %seq: index {llmopt.symbol = "seq", llmopt.max = 8}) -> memref<?x16xf32> {
  %out = memref.alloc(%seq) : memref<?x16xf32>
  %t = memref.alloc(%seq) : memref<?x64xf32>
  loop.kernel @norm (%o = %t : memref<?x64xf32>, %a = %x : memref<?x64xf32>, %g = %w : memref<64xf32>, %n = %seq : index) {
    %eps = arith.constant 1.0e-05 : f32
    %inv = arith.constant 1.562500e-02 : f32
    loop.for %i0 = 0 to %n max 8 {
      %s = loop.reduce add %r = 0 to 64 : f32 {
        %v = loop.load %a[%i0, %r] : memref<?x64xf32>
        %sq = arith.mulf %v, %v : f32
        loop.yield %sq : f32
      }
      %mean = arith.mulf %s, %inv : f32
      %m = arith.addf %mean, %eps : f32
      %rs = math.rsqrt %m : f32
      loop.for %j = 0 to 64 {
        %v = loop.load %a[%i0, %j] : memref<?x64xf32>
        %gv = loop.load %g[%j] : memref<64xf32>
        %nv = arith.mulf %v, %rs : f32
        %y = arith.mulf %nv, %gv : f32
        loop.store %y, %o[%i0, %j] : memref<?x64xf32>
      }
    }
  }
  loop.kernel @proj (%o = %out : memref<?x16xf32>, %m = %W : memref<16x64xf32>, %a = %t : memref<?x64xf32>, %n = %seq : index) {
    loop.for %i = 0 to %n max 8 {
      loop.for %j = 0 to 16 {
        %acc = loop.reduce add %k = 0 to 64 : f32 {
          %u = loop.load %a[%i, %k] : memref<?x64xf32>
          %v = loop.load %m[%j, %k] : memref<16x64xf32>
          %p = arith.mulf %u, %v : f32
          loop.yield %p : f32
        }
        loop.store %acc, %o[%i, %j] : memref<?x16xf32>
      }
    }
  }
  func.return %out : memref<?x16xf32>
}

// -----

// CHECK-LABEL: func.func @step
// CHECK-NOT:   loop.kernel @norm
// CHECK:       loop.kernel @proj
// CHECK:         math.rsqrt
// CHECK:       loop.kernel @attend

func.func @step(%x: memref<1x64xf32> {llmopt.input = "x"}, %w: memref<64xf32> {llmopt.input = "w"}, %W: memref<16x64xf32> {llmopt.input = "W"}, %cache: memref<?x16xf32> {llmopt.input = "cache", llmopt.dynamic = ["ctx"]}, %ctx: index {llmopt.symbol = "ctx", llmopt.max = 8}) -> memref<1x16xf32> {
  %q = memref.alloc() : memref<1x16xf32>
  %t = memref.alloc() : memref<1x64xf32>
  loop.kernel @norm (%o = %t : memref<1x64xf32>, %a = %x : memref<1x64xf32>, %g = %w : memref<64xf32>) {
    %eps = arith.constant 1.0e-05 : f32
    %inv = arith.constant 1.562500e-02 : f32
    loop.for %i0 = 0 to 1 {
      %s = loop.reduce add %r = 0 to 64 : f32 {
        %v = loop.load %a[%i0, %r] : memref<1x64xf32>
        %sq = arith.mulf %v, %v : f32
        loop.yield %sq : f32
      }
      %mean = arith.mulf %s, %inv : f32
      %m = arith.addf %mean, %eps : f32
      %rs = math.rsqrt %m : f32
      loop.for %j = 0 to 64 {
        %v = loop.load %a[%i0, %j] : memref<1x64xf32>
        %gv = loop.load %g[%j] : memref<64xf32>
        %nv = arith.mulf %v, %rs : f32
        %y = arith.mulf %nv, %gv : f32
        loop.store %y, %o[%i0, %j] : memref<1x64xf32>
      }
    }
  }
  loop.kernel @proj (%o = %q : memref<1x16xf32>, %m = %W : memref<16x64xf32>, %a = %t : memref<1x64xf32>) {
    loop.for %i0 = 0 to 1 {
      loop.for %j = 0 to 16 {
        %acc = loop.reduce add %k = 0 to 64 : f32 {
          %u = loop.load %a[%i0, %k] : memref<1x64xf32>
          %v = loop.load %m[%j, %k] : memref<16x64xf32>
          %p = arith.mulf %u, %v : f32
          loop.yield %p : f32
        }
        loop.store %acc, %o[%i0, %j] : memref<1x16xf32>
      }
    }
  }
  %out = memref.alloc() : memref<1x16xf32>
  loop.kernel @attend (%o = %out : memref<1x16xf32>, %qq = %q : memref<1x16xf32>, %c = %cache : memref<?x16xf32>, %n = %ctx : index) {
    loop.for %i0 = 0 to 1 {
      loop.for %j = 0 to 16 {
        %s = loop.reduce add %r = 0 to %n max 8 : f32 {
          %v = loop.load %c[%r, %j] : memref<?x16xf32>
          loop.yield %v : f32
        }
        %qv = loop.load %qq[%i0, %j] : memref<1x16xf32>
        %y = arith.addf %s, %qv : f32
        loop.store %y, %o[%i0, %j] : memref<1x16xf32>
      }
    }
  }
  func.return %out : memref<1x16xf32>
}

// NUM-NOT: FAIL
// NUM: recompute-into-products {{.*}} ok
