// RUN: llm-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @index_map_needs_size(%w: tensor<16xf32>, %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<1x?x16xf32> {
  %0 = prim.index_map (%w) [(d0, d1, d2) -> (d2)] : (tensor<16xf32>) -> tensor<1x?x16xf32>
  func.return %0 : tensor<1x?x16xf32>
}
// CHECK: expected 1 size operand(s) (one per ? extent of the result), got 0

// -----

func.func @fill_needs_size(%seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<?xi64> {
  %0 = prim.elementwise () : () -> tensor<?xi64> {
    %i = prim.coord 0 : index
    %v = arith.index_cast %i : index to i64
    prim.yield %v : i64
  }
  func.return %0 : tensor<?xi64>
}
// CHECK: expected 1 size operand(s) (one per ? extent of the result), got 0

// -----

func.func @inputs_give_the_shape(%x: tensor<?xf32> {llmopt.dynamic = ["seq"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<?xf32> {
  %0 = prim.elementwise (%x) sizes(%seq) : (tensor<?xf32>) -> tensor<?xf32> {
  ^bb0(%a: f32):
    prim.yield %a : f32
  }
  func.return %0 : tensor<?xf32>
}
// CHECK: expected 0 size operand(s) (the inputs give the shape), got 1

// -----

func.func @symbolic_vs_static(%x: tensor<?xf32> {llmopt.dynamic = ["seq"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<8xf32> {
  %0 = prim.elementwise (%x) : (tensor<?xf32>) -> tensor<8xf32> {
  ^bb0(%a: f32):
    prim.yield %a : f32
  }
  func.return %0 : tensor<8xf32>
}
// CHECK: input #0 has shape [?], expected the result shape [8] (broadcast with prim.index_map first)

// -----

func.func @map_symbols(%x: tensor<?xf32> {llmopt.dynamic = ["seq"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<?xf32> {
  %0 = prim.index_map (%x) [(d0)[s0] -> (d0 + s0)] sizes(%seq) : (tensor<?xf32>) -> tensor<?xf32>
  func.return %0 : tensor<?xf32>
}
// CHECK: map #0 must take 1 dims (the result rank) and 0 symbol(s) (the symbols operands), got 1 and 1

// -----

func.func @concat_axis(%a: tensor<?x4xf32> {llmopt.dynamic = ["seq"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<8x4xf32> {
  %0 = prim.index_map (%a, %a) concat 0 [(d0, d1)[s0] -> (d0, d1), (d0, d1)[s0] -> (d0 - s0, d1)] symbols(%seq) : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<8x4xf32>
  func.return %0 : tensor<8x4xf32>
}
// CHECK: concat axis 0 of the result is ? exactly when an input's is

// -----

func.func @no_symbol(%x: tensor<?xf32>) -> tensor<1xf32> {
  %0 = prim.reduce add %x dims [0] : tensor<?xf32> -> tensor<1xf32>
  func.return %0 : tensor<1xf32>
}
// CHECK: ? extents need a symbol declared by the enclosing function
