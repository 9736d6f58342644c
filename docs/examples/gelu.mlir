// GELU (tanh approximation) as one op of the example plugin's `ex` dialect.
func.func @forward(%x: tensor<4x64xf32> {llmopt.input = "x"}) -> tensor<4x64xf32> {
  %y = ex.gelu_tanh %x : tensor<4x64xf32>
  func.return %y : tensor<4x64xf32>
}
