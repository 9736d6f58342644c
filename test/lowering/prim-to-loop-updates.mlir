// RUN: llm-opt %s --split-input-file -p torch-to-prim,prim-to-loop | filecheck %s
// RUN: llm-opt %s --split-input-file -p torch-to-prim,prim-to-loop --check-numerics --check-numerics-lengths 3 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// In-place updates of arguments: a result marked llmopt.updates becomes a write into its
// argument's buffer, marked llmopt.written, and leaves the results. A slice_scatter into an
// argument nothing else reads (a cache row appended) stores only the new row, in place.

func.func @append(%cache: tensor<?x2x4xf32> {llmopt.input = "cache", llmopt.dynamic = ["ctx"]}, %k: tensor<1x2x4xf32> {llmopt.input = "k"}, %ctx: index {llmopt.symbol = "ctx", llmopt.max = 16}) -> (tensor<1x2x4xf32>, tensor<?x2x4xf32> {llmopt.updates = "cache"}) {
  %c1 = arith.constant 1 : index
  %s = arith.subi %ctx, %c1 : index
  %two = torch.constant 2.0 : tensor<f32>
  %k2 = torch.mul %k, %two : tensor<1x2x4xf32>, tensor<f32> -> tensor<1x2x4xf32>
  %r = torch.slice_scatter %cache, %k2 [%s, %ctx] {dim = 0} : tensor<?x2x4xf32>, tensor<1x2x4xf32> -> tensor<?x2x4xf32>
  func.return %k2, %r : tensor<1x2x4xf32>, tensor<?x2x4xf32>
}
// CHECK-LABEL: func.func @append(%cache: memref<?x2x4xf32> {llmopt.input = "cache", llmopt.dynamic = ["ctx"], llmopt.written}
// CHECK-SAME:    -> memref<1x2x4xf32>
// CHECK-NOT:   memref.alloc{{.*}}memref<?x2x4xf32>
// CHECK:       loop.kernel @insert_{{[0-9]+}} (%{{.*}} = %cache : memref<?x2x4xf32>, %[[S:.*]] = %s : index)
// CHECK:       loop.store %{{.*}}, %{{.*}}[(%i0 + %[[S]]), %i1, %i2] : memref<?x2x4xf32>
// CHECK:       func.return %{{.*}} : memref<1x2x4xf32>
// NUM: prim-to-loop {{.*}} ok

// -----

// A cache written whole (prefill): the argument's buffer replaces the result's allocation.
func.func @fill(%cache: tensor<?x4xf32> {llmopt.input = "cache", llmopt.dynamic = ["seq"]}, %x: tensor<?x4xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 8}) -> (tensor<?x4xf32> {llmopt.updates = "cache"}) {
  %y = torch.neg %x : tensor<?x4xf32> -> tensor<?x4xf32>
  func.return %y : tensor<?x4xf32>
}
// CHECK-LABEL: func.func @fill(%cache: memref<?x4xf32> {llmopt.input = "cache", llmopt.dynamic = ["seq"], llmopt.written}
// CHECK-NOT:   memref.alloc
// CHECK:       loop.kernel @{{.*}}, %[[OUT:.*]] = %cache : memref<?x4xf32>
// CHECK:       loop.store %{{.*}}, %[[OUT]][%i0, %i1] : memref<?x4xf32>
// CHECK:       func.return{{$}}
// NUM: prim-to-loop {{.*}} ok

// -----

// The argument is also read after the update: the insert writes into a copy, stored back
// into the argument before the return.
func.func @reread(%cache: tensor<3x4xf32> {llmopt.input = "cache"}, %k: tensor<1x4xf32> {llmopt.input = "k"}) -> (tensor<3x4xf32>, tensor<3x4xf32> {llmopt.updates = "cache"}) {
  %r = torch.slice_scatter %cache, %k {dim = 0, start = 1, end = 2} : tensor<3x4xf32>, tensor<1x4xf32> -> tensor<3x4xf32>
  %s = torch.add %r, %cache : tensor<3x4xf32>, tensor<3x4xf32> -> tensor<3x4xf32>
  func.return %s, %r : tensor<3x4xf32>, tensor<3x4xf32>
}
// CHECK-LABEL: func.func @reread(%cache: memref<3x4xf32> {llmopt.input = "cache", llmopt.written}
// CHECK:       loop.kernel @copy_{{[0-9]+}} (%{{.*}} = %cache
// CHECK:       loop.kernel @insert_{{[0-9]+}}
// CHECK:       loop.kernel @store_cache
// CHECK:       func.return %{{.*}} : memref<3x4xf32>
// NUM: prim-to-loop {{.*}} ok
