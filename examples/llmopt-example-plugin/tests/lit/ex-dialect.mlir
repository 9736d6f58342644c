// ex.gelu_tanh round-trips through its custom and its generic syntax.
// RUN: llm-opt %s | llm-opt | filecheck %s
// RUN: llm-opt %s --print-op-generic | llm-opt | filecheck %s

func.func @f(%x: tensor<2x8xf32>, %h: tensor<16xf16>) -> (tensor<2x8xf32>, tensor<16xf16>) {
  %y = ex.gelu_tanh %x : tensor<2x8xf32>
  %z = ex.gelu_tanh %h {note = "half"} : tensor<16xf16>
  func.return %y, %z : tensor<2x8xf32>, tensor<16xf16>
}

// CHECK:      %y = ex.gelu_tanh %x : tensor<2x8xf32>
// CHECK-NEXT: %z = ex.gelu_tanh %h {note = "half"} : tensor<16xf16>
