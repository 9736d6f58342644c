// A captured RMSNorm, lowered to CUDA with every pass checked numerically on the CPU.
// RUN: llm-opt %s -p lower-to-cuda --check-numerics 2>&1 >/dev/null | filecheck %s
// RUN: not llm-opt %s --load-plugin %S/Inputs/perturb_plugin.py -p torch-to-prim,prim-to-loop,perturb-constants,fuse-kernels --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=BROKEN

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

// CHECK: // numerics: tolerance
// CHECK-NEXT: torch-to-prim {{.*}} ok
// CHECK: prim-to-loop {{.*}} ok
// CHECK: fuse-kernels {{.*}} ok
// CHECK: loop-to-tile {{.*}} ok
// CHECK: tile-to-kernel {{.*}} ok
// CHECK: kernel-to-cuda {{.*}}(not interpreted

// BROKEN: prim-to-loop {{.*}} ok
// BROKEN-NEXT: perturb-constants {{.*}} FAIL
// BROKEN-NEXT: error: --check-numerics: pass 'perturb-constants' changed the result
