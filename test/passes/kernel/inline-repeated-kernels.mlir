// RUN: llm-opt %s -p inline-repeated-kernels | filecheck %s
// RUN: llm-opt %s -p inline-repeated-kernels --check-numerics --check-numerics-at 1,50 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'loop-to-tile,length-buckets{bounds=8,32},tile-to-kernel,inline-repeated-kernels,dedup-kernels' | filecheck %s --check-prefix=LOWERED
// RUN: llm-opt %s -p 'loop-to-tile,length-buckets{bounds=8,32},tile-to-kernel,inline-repeated-kernels' --check-numerics --check-numerics-at 1,8,9,50 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// The callee of a kernel repeated twice (two layers' products, as outline-repeated-kernels
// leaves them) goes back inline at each call, with the call's buffers. Lowered first, each
// call becomes a copy of the callee's host code: the scf.if between length buckets and the
// grid computed from the length, launching the kernel variants that were lowered once.

builtin.module {
  func.func @forward(%x: memref<?x256xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]}, %w0: memref<64x256xf32> {llmopt.param = "layers.0.w"}, %w1: memref<64x256xf32> {llmopt.param = "layers.1.w"}, %seq: index {llmopt.symbol = "seq", llmopt.max = 64 : i64}) -> memref<?x64xf32> {
    %h0 = memref.alloc(%seq) : memref<?x64xf32>
    func.call @linear_0_repeated(%h0, %x, %w0, %seq) : (memref<?x64xf32>, memref<?x256xf32>, memref<64x256xf32>, index) -> ()
    %h1 = memref.alloc(%seq) : memref<?x64xf32>
    func.call @linear_0_repeated(%h1, %x, %w1, %seq) : (memref<?x64xf32>, memref<?x256xf32>, memref<64x256xf32>, index) -> ()
    func.return %h1 : memref<?x64xf32>
  }
  func.func private @linear_0_repeated(%h0: memref<?x64xf32> {llmopt.dynamic = ["seq"]}, %x: memref<?x256xf32> {llmopt.dynamic = ["seq"]}, %w0: memref<64x256xf32>, %seq: index {llmopt.symbol = "seq", llmopt.max = 64 : i64}) attributes {llmopt.repeated = 2 : i64} {
    loop.kernel @linear_0 (%o = %h0 : memref<?x64xf32>, %a = %x : memref<?x256xf32>, %w = %w0 : memref<64x256xf32>, %n = %seq : index) {
      loop.for %i = 0 to %n max 64 {
        loop.for %j = 0 to 64 {
          %s = loop.reduce add %k = 0 to 256 : f32 {
            %v = loop.load %a[%i, %k] : memref<?x256xf32>
            %u = loop.load %w[%j, %k] : memref<64x256xf32>
            %m = arith.mulf %v, %u : f32
            loop.yield %m : f32
          }
          loop.store %s, %o[%i, %j] : memref<?x64xf32>
        }
      }
    }
    func.return
  }
}


// CHECK-LABEL: func.func @forward
// CHECK:       %[[H0:.*]] = memref.alloc(%seq) : memref<?x64xf32>
// CHECK-NEXT:  loop.kernel @linear_0 (%{{.*}} = %[[H0]] : memref<?x64xf32>, %{{.*}} = %x : memref<?x256xf32>, %{{.*}} = %w0 : memref<64x256xf32>, %{{.*}} = %seq : index)
// CHECK:       %[[H1:.*]] = memref.alloc(%seq) : memref<?x64xf32>
// CHECK-NEXT:  loop.kernel @linear_0 (%{{.*}} = %[[H1]] : memref<?x64xf32>, %{{.*}} = %x : memref<?x256xf32>, %{{.*}} = %w1 : memref<64x256xf32>, %{{.*}} = %seq : index)
// CHECK-NOT:   func.call
// CHECK-NOT:   func.func private

// The three variants, lowered once, ahead of the host function in the order of their
// first launch.
// LOWERED:       kernel.func @linear_0_coop1
// LOWERED:       kernel.func @linear_0_le8
// LOWERED:       kernel.func @linear_0(
// LOWERED-LABEL: func.func @forward
// LOWERED:       %[[H0:.*]] = memref.alloc(%seq) : memref<?x64xf32>
// LOWERED:       scf.if
// LOWERED:         kernel.launch @linear_0_coop1 {{.*}}(%[[H0]], %x, %w0, %seq)
// LOWERED:         kernel.launch @linear_0_le8 {{.*}}(%[[H0]], %x, %w0, %seq)
// LOWERED:         kernel.launch @linear_0 {{.*}}(%[[H0]], %x, %w0, %seq)
// LOWERED:       %[[H1:.*]] = memref.alloc(%seq) : memref<?x64xf32>
// LOWERED:       scf.if
// LOWERED:         kernel.launch @linear_0_coop1 {{.*}}(%[[H1]], %x, %w1, %seq)
// LOWERED:         kernel.launch @linear_0_le8 {{.*}}(%[[H1]], %x, %w1, %seq)
// LOWERED:         kernel.launch @linear_0 {{.*}}(%[[H1]], %x, %w1, %seq)
// LOWERED-NOT:   func.call
// LOWERED-NOT:   func.func private
// LOWERED-NOT:   kernel.func

// NUM: inline-repeated-kernels {{.*}} ok
