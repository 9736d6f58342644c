// ex-to-prim lowers ex.gelu_tanh into one prim.elementwise; llmopt's pipeline does the rest.
// RUN: llm-opt %s -p ex-to-prim | filecheck %s
// RUN: llm-opt %s -p ex-to-prim,lower-to-cuda -t cuda | filecheck %s --check-prefix=CUDA
// With the interpretation of ex.gelu_tanh loaded, every pass is checked numerically:
// RUN: llm-opt %s --load-plugin llmopt_example.interp -p ex-to-prim,lower-to-cuda \
// RUN:   --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUMERICS

func.func @forward(%x: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %y = ex.gelu_tanh %x : tensor<4x64xf32>
  func.return %y : tensor<4x64xf32>
}

// CHECK:      %y = prim.elementwise (%x) : (tensor<4x64xf32>) -> tensor<4x64xf32> {
// CHECK-NEXT: ^bb0(%[[X:.*]]: f32):
// CHECK:      math.tanh
// CHECK:      prim.yield
// CHECK-NOT:  ex.gelu_tanh

// CUDA: __global__ void
// CUDA: tanhf(0.7978846f * (

// NUMERICS: ex-to-prim {{.*}} ok
// NUMERICS: tile-to-kernel {{.*}} ok
// NUMERICS-NOT: FAIL
