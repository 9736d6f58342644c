builtin.module {
  func.func @forward(%l.weight: tensor<128x64xf32> {llmopt.param = "l.weight"}, %l.bias: tensor<128xf32> {llmopt.param = "l.bias"}, %x: tensor<1x64x64xf32> {llmopt.input = "x"}, %r: tensor<1x64x128xf32> {llmopt.input = "r"}) -> tensor<1x64x128xf32> {
    %linear = torch.linear %x, %l.weight, %l.bias : tensor<1x64x64xf32>, tensor<128x64xf32>, tensor<128xf32> -> tensor<1x64x128xf32>
    %add = torch.add %linear, %r : tensor<1x64x128xf32>, tensor<1x64x128xf32> -> tensor<1x64x128xf32>
    func.return %add : tensor<1x64x128xf32>
  }
}