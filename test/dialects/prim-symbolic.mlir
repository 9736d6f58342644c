// RUN: llm-opt %s | llm-opt | filecheck %s
// RUN: llm-opt %s --print-op-generic | llm-opt | filecheck %s

// Symbolic extents at Tensor IR: every index_map and every fill without inputs takes the
// extents of its result's ? dims (sizes); index_map maps may read symbols (symbols).
func.func @symbolic(%w: tensor<16xf32> {llmopt.param = "w"},
                    %x: tensor<1x?x16xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                    %seq: index {llmopt.symbol = "seq", llmopt.max = 2048, llmopt.min = 2})
    -> (tensor<1x?x16xf32>, tensor<?xi64>, tensor<1x?x16xf32>, tensor<1x1x16xf32>, tensor<?xf32>) {
  %b = prim.index_map (%w) [(d0, d1, d2) -> (d2)] sizes(%seq) : (tensor<16xf32>) -> tensor<1x?x16xf32>
  %m = prim.elementwise (%x, %b) : (tensor<1x?x16xf32>, tensor<1x?x16xf32>) -> tensor<1x?x16xf32> {
  ^bb0(%a: f32, %c: f32):
    %p = arith.mulf %a, %c : f32
    prim.yield %p : f32
  }
  %pos = prim.elementwise () sizes(%seq) : () -> tensor<?xi64> {
    %i = prim.coord 0 : index
    %v = arith.index_cast %i : index to i64
    prim.yield %v : i64
  }
  %c1 = arith.constant 1 : index
  %n = arith.subi %seq, %c1 : index
  %tail = prim.index_map (%m) [(d0, d1, d2)[s0] -> (d0, d1 + s0, d2)] symbols(%c1) sizes(%n) : (tensor<1x?x16xf32>) -> tensor<1x?x16xf32>
  %sum = prim.reduce add %m dims [1] : tensor<1x?x16xf32> -> tensor<1x1x16xf32>
  %c16 = arith.constant 16 : index
  %flat = arith.muli %seq, %c16 : index
  %f = prim.index_map (%m) [(d0) -> (0, d0 floordiv 16, d0 mod 16)] sizes(%flat) : (tensor<1x?x16xf32>) -> tensor<?xf32>
  func.return %m, %pos, %tail, %sum, %f : tensor<1x?x16xf32>, tensor<?xi64>, tensor<1x?x16xf32>, tensor<1x1x16xf32>, tensor<?xf32>
}

// CHECK-LABEL: func.func @symbolic
// CHECK-SAME: %seq: index {llmopt.symbol = "seq", llmopt.max = 2048 : i64, llmopt.min = 2 : i64}
// CHECK: prim.index_map (%w) [(d0, d1, d2) -> (d2)] sizes(%seq) : (tensor<16xf32>) -> tensor<1x?x16xf32>
// CHECK: prim.elementwise (%x, %{{.*}}) : (tensor<1x?x16xf32>, tensor<1x?x16xf32>) -> tensor<1x?x16xf32>
// CHECK: prim.elementwise () sizes(%seq) : () -> tensor<?xi64>
// CHECK:   prim.coord 0 : index
// CHECK: %[[N:.*]] = arith.subi %seq, %[[C1:.*]] : index
// CHECK: prim.index_map (%{{.*}}) [(d0, d1, d2)[s0] -> (d0, (d1 + s0), d2)] symbols(%[[C1]]) sizes(%[[N]]) : (tensor<1x?x16xf32>) -> tensor<1x?x16xf32>
// CHECK: prim.reduce add %{{.*}} dims [1] : tensor<1x?x16xf32> -> tensor<1x1x16xf32>
// CHECK: prim.index_map (%{{.*}}) [(d0) -> (0, (d0 floordiv 16), (d0 mod 16))] sizes(%{{.*}}) : (tensor<1x?x16xf32>) -> tensor<?xf32>

// Concatenation along a symbolic axis: the second segment starts at the symbol s0.
func.func @concat(%a: tensor<?x4xf32> {llmopt.input = "a", llmopt.dynamic = ["seq"]},
                  %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<?x4xf32> {
  %n = arith.addi %seq, %seq : index
  %0 = prim.index_map (%a, %a) concat 0 [(d0, d1)[s0] -> (d0, d1), (d0, d1)[s0] -> (d0 - s0, d1)] symbols(%seq) sizes(%n) : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  func.return %0 : tensor<?x4xf32>
}

// CHECK-LABEL: func.func @concat
// CHECK: prim.index_map (%a, %a) concat 0 [(d0, d1)[s0] -> (d0, d1), (d0, d1)[s0] -> ((d0 + (s0 * -1)), d1)] symbols(%seq) sizes(%{{.*}}) : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
