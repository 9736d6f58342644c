// ex.gelu_tanh on integers: the verifier rejects it and the error points at the op.
func.func @forward(%x: tensor<8xi32>) -> tensor<8xi32> {
  %y = ex.gelu_tanh %x : tensor<8xi32>
  func.return %y : tensor<8xi32>
}
