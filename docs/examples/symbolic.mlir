// An RMSNorm and a linear for every length up to 2048 (docs/examples/capture_symbolic.py).
func.func @forward(%weight: tensor<64xf32> {llmopt.param = "weight"},
                   %proj.weight: tensor<32x64xf32> {llmopt.param = "proj.weight"},
                   %x: tensor<1x?x64xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                   %seq: index {llmopt.symbol = "seq", llmopt.max = 2048}) -> tensor<?x2x16xf32> {
  %pow = torch.pow %x {exponent = 2.0} : tensor<1x?x64xf32> -> tensor<1x?x64xf32>
  %mean = torch.mean %pow {dims = [-1], keepdim = true} : tensor<1x?x64xf32> -> tensor<1x?x1xf32>
  %0 = torch.constant 1.0e-05 : tensor<f32>
  %add = torch.add %mean, %0 : tensor<1x?x1xf32>, tensor<f32> -> tensor<1x?x1xf32>
  %rsqrt = torch.rsqrt %add : tensor<1x?x1xf32> -> tensor<1x?x1xf32>
  %mul = torch.mul %x, %rsqrt : tensor<1x?x64xf32>, tensor<1x?x1xf32> -> tensor<1x?x64xf32>
  %mul_1 = torch.mul %weight, %mul : tensor<64xf32>, tensor<1x?x64xf32> -> tensor<1x?x64xf32>
  %linear = torch.linear %mul_1, %proj.weight : tensor<1x?x64xf32>, tensor<32x64xf32> -> tensor<1x?x32xf32>
  %view = torch.reshape %linear [%seq] : tensor<1x?x32xf32> -> tensor<?x2x16xf32>
  func.return %view : tensor<?x2x16xf32>
}
