// y = 2 * x + r in Torch IR: the input of the "write your own pass" tutorial.
func.func @forward(%x: tensor<4x64xf32> {llmopt.input = "x"}, %r: tensor<4x64xf32> {llmopt.input = "r"}) -> tensor<4x64xf32> {
  %two = torch.constant 2.0 : tensor<f32>
  %0 = torch.mul %x, %two : tensor<4x64xf32>, tensor<f32> -> tensor<4x64xf32>
  %1 = torch.add %0, %r : tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x64xf32>
  func.return %1 : tensor<4x64xf32>
}
