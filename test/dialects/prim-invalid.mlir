// RUN: llm-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @shape_mismatch(%x: tensor<4x8xf32>, %y: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = prim.elementwise (%x, %y) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %b : f32
    prim.yield %s : f32
  }
  func.return %0 : tensor<4x8xf32>
}
// CHECK: input #1 has shape [8], expected the result shape [4, 8]

// -----

func.func @bad_reduce(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  %0 = prim.reduce add %x dims [1] : tensor<4x8xf32> -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
// CHECK: result shape [4] does not match [4, 1]

// -----

func.func @bad_kind(%x: tensor<4x8xf32>) -> tensor<4x1xf32> {
  %0 = prim.reduce avg %x dims [1] : tensor<4x8xf32> -> tensor<4x1xf32>
  func.return %0 : tensor<4x1xf32>
}
// CHECK: unknown reduction kind 'avg'

// -----

func.func @bad_map(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  %0 = prim.index_map (%x) [(d0, d1) -> (d1)] : (tensor<4x8xf32>) -> tensor<8x4xf32>
  func.return %0 : tensor<8x4xf32>
}
// CHECK: map #0 yields 1 coordinates, input #0 has rank 2

// -----

func.func @bad_concat(%x: tensor<4xf32>) -> tensor<9xf32> {
  %0 = prim.index_map (%x, %x) concat 0 [(d0) -> (d0), (d0) -> (d0 - 4)] : (tensor<4xf32>, tensor<4xf32>) -> tensor<9xf32>
  func.return %0 : tensor<9xf32>
}
// CHECK: concat segments cover 8 of axis 0, result extent is 9

// -----

func.func @bad_yield(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = prim.elementwise (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: f32):
    %c = arith.constant 1 : i32
    prim.yield %c : i32
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: body yields i32, expected f32
