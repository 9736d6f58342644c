// ex.gelu_tanh rejects what it cannot compute, pointing at the op.
// RUN: llm-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @integers(%x: tensor<4xi32>) -> tensor<4xi32> {
  %y = ex.gelu_tanh %x : tensor<4xi32>
  func.return %y : tensor<4xi32>
}
// CHECK: expected a floating-point tensor, got tensor<4xi32>

// -----

func.func @not_a_tensor(%x: f32) -> f32 {
  %y = ex.gelu_tanh %x : f32
  func.return %y : f32
}
// CHECK: f32 should be of base attribute tensor

// -----

func.func @dynamic(%x: tensor<?xf32>) -> tensor<?xf32> {
  %y = ex.gelu_tanh %x : tensor<?xf32>
  func.return %y : tensor<?xf32>
}
// CHECK: expected a static shape, got tensor<?xf32>
