// A captured RMSNorm in bf16, lowered to CUDA with every pass checked numerically on the CPU:
// the interpreters hold bf16 values (ml_dtypes) and round where the GPU rounds, and the
// tolerance is that of the f32 arithmetic plus 4 ulps of bf16 (16 * 2^-23 * sqrt(256) + 4 * 2^-7),
// too coarse to catch rmsnorm.mlir's 1% perturbation of the constants.
// RUN: llm-opt %s -p lower-to-cuda --check-numerics 2>&1 >/dev/null | filecheck %s

builtin.module {
  func.func @forward(%weight: tensor<256xbf16> {llmopt.param = "weight"}, %x: tensor<1x8x256xbf16> {llmopt.input = "x"}) -> tensor<1x8x256xbf16> {
    %pow = torch.pow %x {exponent = 2.0} : tensor<1x8x256xbf16> -> tensor<1x8x256xbf16>
    %mean = torch.mean %pow {dims = [-1], keepdim = true} : tensor<1x8x256xbf16> -> tensor<1x8x1xbf16>
    %0 = torch.constant 1.0e-05 : tensor<bf16>
    %add = torch.add %mean, %0 : tensor<1x8x1xbf16>, tensor<bf16> -> tensor<1x8x1xbf16>
    %rsqrt = torch.rsqrt %add : tensor<1x8x1xbf16> -> tensor<1x8x1xbf16>
    %mul = torch.mul %x, %rsqrt : tensor<1x8x256xbf16>, tensor<1x8x1xbf16> -> tensor<1x8x256xbf16>
    %mul_1 = torch.mul %weight, %mul : tensor<256xbf16>, tensor<1x8x256xbf16> -> tensor<1x8x256xbf16>
    func.return %mul_1 : tensor<1x8x256xbf16>
  }
}

// CHECK: // numerics: tolerance 3.13e-02
// CHECK-NEXT: torch-to-prim {{.*}} ok
// CHECK: prim-to-loop {{.*}} ok
// CHECK: fuse-kernels {{.*}} ok
// CHECK: loop-to-tile {{.*}} ok
// CHECK: tile-to-kernel {{.*}} ok
// CHECK: kernel-to-cuda {{.*}}(not interpreted
