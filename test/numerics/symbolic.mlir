// A symbolic RMSNorm and linear (one program for every length up to 2048), checked pass by
// pass at random lengths: two by default, as many as --check-numerics-lengths says, or at
// the lengths --check-numerics-at gives (a length outside the symbol's bounds is an error).
// RUN: llm-opt %s -p torch-to-prim,canonicalize,cse --check-numerics 2>&1 >/dev/null | filecheck %s
// RUN: llm-opt %s -p torch-to-prim --check-numerics --check-numerics-lengths 4 2>&1 >/dev/null | filecheck %s --check-prefix=FOUR
// RUN: llm-opt %s -p lower-to-cuda --check-numerics 2>&1 | filecheck %s --check-prefix=BELOW
// RUN: llm-opt %s -p torch-to-prim --check-numerics --check-numerics-at 1,33 2>&1 >/dev/null | filecheck %s --check-prefix=AT
// RUN: not llm-opt %s -p torch-to-prim --check-numerics --check-numerics-at 1,4096 2>&1 | filecheck %s --check-prefix=OUTSIDE
// RUN: not llm-opt %s -p torch-to-prim --check-numerics --check-numerics-at 0 2>&1 | filecheck %s --check-prefix=ZERO

builtin.module {
  func.func @forward(%weight: tensor<64xf32> {llmopt.param = "weight"}, %proj: tensor<32x64xf32> {llmopt.param = "proj.weight"}, %x: tensor<1x?x64xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 2048}) -> tensor<1x?x32xf32> {
    %pow = torch.pow %x {exponent = 2.0} : tensor<1x?x64xf32> -> tensor<1x?x64xf32>
    %mean = torch.mean %pow {dims = [-1], keepdim = true} : tensor<1x?x64xf32> -> tensor<1x?x1xf32>
    %0 = torch.constant 1.0e-05 : tensor<f32>
    %add = torch.add %mean, %0 : tensor<1x?x1xf32>, tensor<f32> -> tensor<1x?x1xf32>
    %rsqrt = torch.rsqrt %add : tensor<1x?x1xf32> -> tensor<1x?x1xf32>
    %mul = torch.mul %x, %rsqrt : tensor<1x?x64xf32>, tensor<1x?x1xf32> -> tensor<1x?x64xf32>
    %mul_1 = torch.mul %weight, %mul : tensor<64xf32>, tensor<1x?x64xf32> -> tensor<1x?x64xf32>
    %linear = torch.linear %mul_1, %proj : tensor<1x?x64xf32>, tensor<32x64xf32> -> tensor<1x?x32xf32>
    func.return %linear : tensor<1x?x32xf32>
  }
}

// CHECK:      // numerics: tolerance {{.*}} at seq = {{[0-9]+}}, {{[0-9]+}}{{$}}
// CHECK-NEXT: torch-to-prim {{.*}} ok
// CHECK-NEXT: canonicalize {{.*}} ok
// CHECK-NEXT: cse {{.*}} ok

// FOUR:      // numerics: tolerance {{.*}} at seq = {{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}{{$}}
// FOUR-NEXT: torch-to-prim {{.*}} ok

// AT:      // numerics: tolerance {{.*}} at seq = 1, 33{{$}}
// AT-NEXT: torch-to-prim {{.*}} ok

// OUTSIDE: error: --check-numerics: cannot interpret the input: length 4096 is outside [1, 2048], the bounds of symbol 'seq'
// ZERO:    error: argument --check-numerics-at: lengths must be positive, got '0'

// BELOW:     torch-to-prim {{.*}} ok
// BELOW:     prim-to-loop {{.*}} ok
// BELOW:     fuse-kernels {{.*}} ok
// BELOW:     hoist-reduce-factors {{.*}} ok
// BELOW:     loop-to-tile {{.*}} ok
// BELOW:     vector-fragments {{.*}} ok
// BELOW:     tile-to-kernel {{.*}} ok
// BELOW:     plan-buffers {{.*}} ok
// BELOW:     kernel-to-cuda {{.*}} ok  (not interpreted: CUDA IR is checked by NVRTC and on the GPU)
// BELOW-NOT: Traceback
