// A bf16 fused gate/up, silu(x·Wgᵀ)·(x·Wuᵀ) (M=128, N=256, K=128), at Torch IR: on sm_90a
// lower-to-cuda gives it a warpgroup tile of 128 × 64 (two reductions: 64 accumulators a
// thread), and wgmma-fragments two chains of four products a chunk.
builtin.module {
  func.func @forward(%g.weight: tensor<256x128xbf16> {llmopt.param = "g.weight"}, %u.weight: tensor<256x128xbf16> {llmopt.param = "u.weight"}, %x: tensor<1x128x128xbf16> {llmopt.input = "x"}) -> tensor<1x128x256xbf16> {
    %linear = torch.linear %x, %g.weight : tensor<1x128x128xbf16>, tensor<256x128xbf16> -> tensor<1x128x256xbf16>
    %silu = torch.silu %linear : tensor<1x128x256xbf16> -> tensor<1x128x256xbf16>
    %linear_1 = torch.linear %x, %u.weight : tensor<1x128x128xbf16>, tensor<256x128xbf16> -> tensor<1x128x256xbf16>
    %mul = torch.mul %silu, %linear_1 : tensor<1x128x256xbf16>, tensor<1x128x256xbf16> -> tensor<1x128x256xbf16>
    func.return %mul : tensor<1x128x256xbf16>
  }
}