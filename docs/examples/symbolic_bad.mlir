// A symbolic program whose input names a symbol the function does not declare.
func.func @forward(%x: tensor<?x4xf32> {llmopt.input = "x", llmopt.dynamic = ["len"]},
                   %seq: index {llmopt.symbol = "seq", llmopt.max = 8}) -> tensor<?x4xf32> {
  %0 = torch.neg %x : tensor<?x4xf32> -> tensor<?x4xf32>
  func.return %0 : tensor<?x4xf32>
}
