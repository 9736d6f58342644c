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

// -----

func.func @coord_outside(%x: tensor<4xf32>) -> index {
  %0 = prim.coord 0 : index
  func.return %0 : index
}
// CHECK: prim.coord must be directly in a prim.elementwise body

// -----

func.func @coord_dim(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = prim.elementwise (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: f32):
    %i = prim.coord 1 : index
    prim.yield %a : f32
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: dim 1 out of range for the rank-1 result of the elementwise op

// -----

func.func @gather_float_indices(%t: tensor<9x4xf32>, %i: tensor<3xf32>) -> tensor<3x4xf32> {
  %0 = prim.gather %t[%i] axis 0 : (tensor<9x4xf32>, tensor<3xf32>) -> tensor<3x4xf32>
  func.return %0 : tensor<3x4xf32>
}
// CHECK: indices must be an integer tensor, got f32

// -----

func.func @gather_shape(%t: tensor<9x4xf32>, %i: tensor<3xi64>) -> tensor<4x3xf32> {
  %0 = prim.gather %t[%i] axis 1 : (tensor<9x4xf32>, tensor<3xi64>) -> tensor<4x3xf32>
  func.return %0 : tensor<4x3xf32>
}
// CHECK: result shape [4, 3] does not match [9, 3] (table dims before the axis, the indices' shape, table dims after it)

// -----

func.func @zero_extent(%x: tensor<0x4xf32>) -> tensor<0x4xf32> {
  %0 = prim.elementwise (%x) : (tensor<0x4xf32>) -> tensor<0x4xf32> {
  ^bb0(%a: f32):
    prim.yield %a : f32
  }
  func.return %0 : tensor<0x4xf32>
}
// CHECK: zero extents are not supported, got tensor<0x4xf32>

// -----

func.func @unsigned_reduce(%x: tensor<3x8xui32>) -> tensor<3x1xui32> {
  %s = prim.reduce add %x dims [1] : tensor<3x8xui32> -> tensor<3x1xui32>
  func.return %s : tensor<3x1xui32>
}
// CHECK: reductions combine floats or signless integers, got ui32

// -----

func.func @divide_by_zero(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = prim.index_map (%x) [(d0) -> (d0 floordiv 0)] : (tensor<8xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}
// CHECK: map #0 divides by zero ('floordiv 0') in coordinate 0

// -----

func.func @divide_by_negative(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = prim.index_map (%x) [(d0) -> (d0 floordiv -2)] : (tensor<8xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}
// CHECK: map #0 divides by a negative constant ('floordiv -2') in coordinate 0

// -----

// A coordinate computed from the result's indices leaves the input: index d0 of a result of
// 12 reads rows 0 to 11 of an input of 3 (a fuzzer find that prim-to-loop lowered into an
// out-of-bounds loop.load, rejected only after the pass).
func.func @reads_past_the_input(%s: tensor<3x1xf32>) -> tensor<12xf32> {
  %0 = prim.index_map (%s) [(d0) -> ((d0 floordiv 1), 0)] : (tensor<3x1xf32>) -> tensor<12xf32>
  func.return %0 : tensor<12xf32>
}
// CHECK: map #0 reads coordinates 0 to 11 of dim 0 of input #0 (extent 3) over the result's indices

// -----

func.func @reads_before_the_input(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = prim.index_map (%x) [(d0) -> (d0 - 1)] : (tensor<8xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}
// CHECK: map #0 reads coordinates -1 to 6 of dim 0 of input #0 (extent 8)
