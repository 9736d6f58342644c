// A bf16 projection over a symbolic number of rows (up to 300), K = 96, N = 300: neither
// extent a multiple of the 128 × 256 block tile.
func.func @forward(%proj.weight: tensor<300x96xbf16> {llmopt.param = "proj.weight"},
                   %x: tensor<1x?x96xbf16> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                   %seq: index {llmopt.symbol = "seq", llmopt.max = 300}) -> tensor<1x?x300xbf16> {
  %0 = torch.linear %x, %proj.weight : tensor<1x?x96xbf16>, tensor<300x96xbf16> -> tensor<1x?x300xbf16>
  func.return %0 : tensor<1x?x300xbf16>
}
