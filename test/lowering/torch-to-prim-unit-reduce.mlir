// RUN: llm-opt %s -p torch-to-prim | filecheck %s
// RUN: llm-opt %s -p torch-to-prim --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p lower-to-cuda | filecheck %s --check-prefix=LOOP

// A reduction whose reduced dims all have extent 1 combines one element: torch-to-prim
// emits no prim.reduce for it. Rotary embeddings' frequencies are such a product,
// inv_freq[32, 1] @ position[1, 1] (K = 1): an elementwise product, which then fuses with
// the concatenation after it into one kernel.
func.func @forward(%inv: tensor<32x1xf32>, %pos: tensor<1x1xf32>) -> tensor<1x64xf32> {
  %0 = torch.matmul %inv, %pos : tensor<32x1xf32>, tensor<1x1xf32> -> tensor<32x1xf32>
  %1 = torch.transpose %0 {dim0 = 0, dim1 = 1} : tensor<32x1xf32> -> tensor<1x32xf32>
  %2 = torch.cat %1, %1 {dim = 1} : tensor<1x32xf32>, tensor<1x32xf32> -> tensor<1x64xf32>
  func.return %2 : tensor<1x64xf32>
}
// CHECK-LABEL: func.func @forward
// CHECK-NOT:     prim.reduce
// CHECK:         prim.elementwise
// CHECK-NOT:     prim.reduce
// CHECK:         func.return

// A sum over a dim of extent 1 is its input; over a longer dim it stays a reduction.
func.func @sums(%x: tensor<4x1x8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>) {
  %0 = torch.sum %x {dims = [1], keepdim = false} : tensor<4x1x8xf32> -> tensor<4x8xf32>
  %1 = torch.amax %x {dims = [2], keepdim = false} : tensor<4x1x8xf32> -> tensor<4x1xf32>
  func.return %0, %1 : tensor<4x8xf32>, tensor<4x1xf32>
}
// CHECK-LABEL: func.func @sums
// CHECK:         prim.reduce max %{{.*}} dims [2] : tensor<4x1x8xf32>
// CHECK-NOT:     prim.reduce

// NUM: torch-to-prim {{.*}} ok

// LOOP-LABEL: func.func @forward
// LOOP:         kernel.launch
// LOOP-NOT:     kernel.launch
// LOOP:         func.return
