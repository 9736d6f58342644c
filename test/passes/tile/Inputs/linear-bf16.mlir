// A bf16 projection (512 × 2048 × 2048) at Torch IR: lower-to-cuda's heuristics give it
// the tensor-core layout.
func.func @forward(%proj.weight: tensor<2048x2048xbf16> {llmopt.param = "proj.weight"}, %x: tensor<1x512x2048xbf16> {llmopt.input = "x"}) -> tensor<1x512x2048xbf16> {
  %0 = torch.linear %x, %proj.weight : tensor<1x512x2048xbf16>, tensor<2048x2048xbf16> -> tensor<1x512x2048xbf16>
  func.return %0 : tensor<1x512x2048xbf16>
}
