// The named pipeline takes a captured RMSNorm through all six levels to one CUDA kernel.
// RUN: llm-opt %s -p lower-to-cuda -t cuda | filecheck %s
// RUN: llm-opt %s -p lower-to-cuda --print-ir-after-all -o /dev/null 2>&1 | filecheck %s --check-prefix=LEVELS

func.func @forward(%weight: tensor<2048xf32> {llmopt.param = "weight"}, %x: tensor<1x128x2048xf32> {llmopt.input = "x"}) -> tensor<1x128x2048xf32> {
  %pow = torch.pow %x {exponent = 2.0} : tensor<1x128x2048xf32> -> tensor<1x128x2048xf32>
  %mean = torch.mean %pow {dims = [-1], keepdim = true} : tensor<1x128x2048xf32> -> tensor<1x128x1xf32>
  %0 = torch.constant 1.0e-05 : tensor<f32>
  %add = torch.add %mean, %0 : tensor<1x128x1xf32>, tensor<f32> -> tensor<1x128x1xf32>
  %rsqrt = torch.rsqrt %add : tensor<1x128x1xf32> -> tensor<1x128x1xf32>
  %mul = torch.mul %x, %rsqrt : tensor<1x128x2048xf32>, tensor<1x128x1xf32> -> tensor<1x128x2048xf32>
  %mul_1 = torch.mul %weight, %mul : tensor<2048xf32>, tensor<1x128x2048xf32> -> tensor<1x128x2048xf32>
  func.return %mul_1 : tensor<1x128x2048xf32>
}

// CHECK-COUNT-1: extern "C" __global__ void __launch_bounds__(256)
// CHECK-NOT: __global__
// CHECK: __shfl_xor_sync
// CHECK: __syncthreads()
// CHECK: rsqrtf

// LEVELS: IR Dump After torch-to-prim
// LEVELS: prim.reduce add
// LEVELS: IR Dump After prim-to-loop
// LEVELS: loop.kernel
// LEVELS: IR Dump After fuse-kernels
// LEVELS: loop.reduce add
// LEVELS: IR Dump After loop-to-tile
// LEVELS: tile.forall
// LEVELS: tile.coop_reduce add
// LEVELS: IR Dump After tile-to-kernel
// LEVELS: kernel.func
// LEVELS: kernel.shuffle_xor
// LEVELS: kernel.launch
// LEVELS: IR Dump After kernel-to-cuda
// LEVELS: cuda.kernel
