builtin.module {
  func.func @forward(%weight: tensor<256xf32> {llmopt.param = "weight"}, %x: tensor<1x8x256xf32> {llmopt.input = "x"}) -> tensor<1x8x256xf32> {
    %pow = torch.pow %x {exponent = 2.0} : tensor<1x8x256xf32> -> tensor<1x8x256xf32>
    %mean = torch.mean %pow {dims = [-1], keepdim = true} : tensor<1x8x256xf32> -> tensor<1x8x1xf32>
    %0 = torch.constant 1.0e-05 : tensor<f32>
    %add = torch.add %mean, %0 : tensor<1x8x1xf32>, tensor<f32> -> tensor<1x8x1xf32>
    %rsqrt = torch.rsqrt %add : tensor<1x8x1xf32> -> tensor<1x8x1xf32>
    %mul = torch.mul %x, %rsqrt : tensor<1x8x256xf32>, tensor<1x8x1xf32> -> tensor<1x8x256xf32>
    %mul_1 = torch.mul %weight, %mul : tensor<256xf32>, tensor<1x8x256xf32> -> tensor<1x8x256xf32>
    func.return %mul_1 : tensor<1x8x256xf32>
  }
}
