builtin.module {
  func.func @forward(%l.weight: tensor<136x64xf32> {llmopt.param = "l.weight"}, %l.bias: tensor<136xf32> {llmopt.param = "l.bias"}, %x: tensor<1x100x64xf32> {llmopt.input = "x"}, %r: tensor<1x100x136xf32> {llmopt.input = "r"}) -> tensor<1x100x136xf32> {
    %linear = torch.linear %x, %l.weight, %l.bias : tensor<1x100x64xf32>, tensor<136x64xf32>, tensor<136xf32> -> tensor<1x100x136xf32>
    %add = torch.add %linear, %r : tensor<1x100x136xf32>, tensor<1x100x136xf32> -> tensor<1x100x136xf32>
    func.return %add : tensor<1x100x136xf32>
  }
}
