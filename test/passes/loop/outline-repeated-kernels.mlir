// RUN: llm-opt %s -p outline-repeated-kernels | filecheck %s
// RUN: llm-opt %s -p outline-repeated-kernels --check-numerics --check-numerics-at 1,37 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p outline-repeated-kernels,outline-repeated-kernels | filecheck %s
// Two "layers" of one kernel bound to different weights become one private callee called
// twice, each call with its own buffers; the symbol the buffers' ? extents equal is passed
// and declared as the caller declares it. The kernel that occurs once stays inline, and so
// does the repeated pair bound to a buffer whose extent is not a symbol (%twice).

func.func @forward(%x: memref<?x16xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                   %w0: memref<16xf32> {llmopt.param = "layers.0.w"},
                   %w1: memref<16xf32> {llmopt.param = "layers.1.w"},
                   %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> memref<?x16xf32> {
  %h0 = memref.alloc(%seq) : memref<?x16xf32>
  loop.kernel @scale_0 (%o = %h0 : memref<?x16xf32>, %a = %x : memref<?x16xf32>, %w = %w0 : memref<16xf32>, %n = %seq : index) {
    loop.for %i = 0 to %n max 64 {
      loop.for %j = 0 to 16 {
        %v = loop.load %a[%i, %j] : memref<?x16xf32>
        %s = loop.load %w[%j] : memref<16xf32>
        %m = arith.mulf %v, %s : f32
        loop.store %m, %o[%i, %j] : memref<?x16xf32>
      }
    }
  }
  %h1 = memref.alloc(%seq) : memref<?x16xf32>
  loop.kernel @scale_1 (%o = %h1 : memref<?x16xf32>, %a = %h0 : memref<?x16xf32>, %w = %w1 : memref<16xf32>, %n = %seq : index) {
    loop.for %i = 0 to %n max 64 {
      loop.for %j = 0 to 16 {
        %v = loop.load %a[%i, %j] : memref<?x16xf32>
        %s = loop.load %w[%j] : memref<16xf32>
        %m = arith.mulf %v, %s : f32
        loop.store %m, %o[%i, %j] : memref<?x16xf32>
      }
    }
  }
  %c2 = arith.constant 2 : index
  %rows = arith.muli %seq, %c2 : index
  %twice = memref.alloc(%rows) : memref<?x16xf32>
  loop.kernel @fill_0 (%o = %twice : memref<?x16xf32>, %n = %rows : index) {
    loop.for %i = 0 to %n max 128 {
      loop.for %j = 0 to 16 {
        %z = arith.constant 1.0 : f32
        loop.store %z, %o[%i, %j] : memref<?x16xf32>
      }
    }
  }
  loop.kernel @fill_1 (%o = %twice : memref<?x16xf32>, %n = %rows : index) {
    loop.for %i = 0 to %n max 128 {
      loop.for %j = 0 to 16 {
        %z = arith.constant 1.0 : f32
        loop.store %z, %o[%i, %j] : memref<?x16xf32>
      }
    }
  }
  %out = memref.alloc(%seq) : memref<?x16xf32>
  loop.kernel @add (%o = %out : memref<?x16xf32>, %a = %h1 : memref<?x16xf32>, %b = %x : memref<?x16xf32>, %n = %seq : index) {
    loop.for %i = 0 to %n max 64 {
      loop.for %j = 0 to 16 {
        %u = loop.load %a[%i, %j] : memref<?x16xf32>
        %v = loop.load %b[%i, %j] : memref<?x16xf32>
        %r = arith.addf %u, %v : f32
        loop.store %r, %o[%i, %j] : memref<?x16xf32>
      }
    }
  }
  func.return %out : memref<?x16xf32>
}

// CHECK-LABEL: func.func @forward
// CHECK:       %[[H0:.*]] = memref.alloc(%seq) : memref<?x16xf32>
// CHECK-NEXT:  func.call @scale_0_repeated(%[[H0]], %x, %w0, %seq) : (memref<?x16xf32>, memref<?x16xf32>, memref<16xf32>, index) -> ()
// CHECK-NEXT:  %[[H1:.*]] = memref.alloc(%seq) : memref<?x16xf32>
// CHECK-NEXT:  func.call @scale_0_repeated(%[[H1]], %[[H0]], %w1, %seq) : (memref<?x16xf32>, memref<?x16xf32>, memref<16xf32>, index) -> ()
// CHECK:       loop.kernel @fill_0
// CHECK:       loop.kernel @fill_1
// CHECK:       loop.kernel @add
// CHECK-NOT:   func.call
// CHECK:       func.return
// CHECK:       func.func private @scale_0_repeated(%{{.*}}: memref<?x16xf32> {llmopt.dynamic = ["seq"]}, %{{.*}}: memref<?x16xf32> {llmopt.dynamic = ["seq"]}, %{{.*}}: memref<16xf32>, %[[N:.*]]: index {llmopt.symbol = "seq", llmopt.max = 64 : i64}) attributes {llmopt.repeated = 2 : i64} {
// CHECK-NEXT:    loop.kernel @scale_0 (%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} = %[[N]] : index) {
// CHECK:         func.return
// CHECK-NOT:   func.func

// NUM: outline-repeated-kernels {{.*}} ok
