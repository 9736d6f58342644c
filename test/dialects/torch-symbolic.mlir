// RUN: llm-opt %s | llm-opt | filecheck %s
// RUN: llm-opt %s --print-op-generic | llm-opt | filecheck %s

// Symbolic extents: ? in the types, the symbol %seq an index argument bound by the
// llmopt.dynamic names of the tensor arguments; the sizes the ops need are index operands.
func.func @rms_norm_linear(%w: tensor<16xf32> {llmopt.param = "norm.weight"},
                           %wl: tensor<8x16xf32> {llmopt.param = "proj.weight"},
                           %x: tensor<1x?x16xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                           %seq: index {llmopt.symbol = "seq", llmopt.max = 2048})
    -> (tensor<1x?x8xf32>, tensor<?xf32>, tensor<1x?x4x2xf32>) {
  %eps = torch.constant 1.0e-05 : tensor<f32>
  %0 = torch.pow %x {exponent = 2.0} : tensor<1x?x16xf32> -> tensor<1x?x16xf32>
  %1 = torch.mean %0 {dims = [-1], keepdim = true} : tensor<1x?x16xf32> -> tensor<1x?x1xf32>
  %2 = torch.add %1, %eps : tensor<1x?x1xf32>, tensor<f32> -> tensor<1x?x1xf32>
  %3 = torch.rsqrt %2 : tensor<1x?x1xf32> -> tensor<1x?x1xf32>
  %4 = torch.mul %x, %3 : tensor<1x?x16xf32>, tensor<1x?x1xf32> -> tensor<1x?x16xf32>
  %5 = torch.mul %w, %4 : tensor<16xf32>, tensor<1x?x16xf32> -> tensor<1x?x16xf32>
  %6 = torch.linear %5, %wl : tensor<1x?x16xf32>, tensor<8x16xf32> -> tensor<1x?x8xf32>
  %7 = torch.softmax %6 {dim = -1} : tensor<1x?x8xf32> -> tensor<1x?x8xf32>
  %c8 = arith.constant 8 : index
  %n = arith.muli %c8, %seq : index
  %8 = torch.reshape %7 [%n] : tensor<1x?x8xf32> -> tensor<?xf32>
  %9 = torch.reshape %7 [%seq] : tensor<1x?x8xf32> -> tensor<1x?x4x2xf32>
  func.return %7, %8, %9 : tensor<1x?x8xf32>, tensor<?xf32>, tensor<1x?x4x2xf32>
}

// CHECK-LABEL: func.func @rms_norm_linear
// CHECK-SAME: %x: tensor<1x?x16xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]}
// CHECK-SAME: %seq: index {llmopt.symbol = "seq", llmopt.max = 2048 : i64}
// CHECK: torch.mean %{{.*}} {dims = [-1], keepdim = true} : tensor<1x?x16xf32> -> tensor<1x?x1xf32>
// CHECK: torch.mul %{{.*}}, %{{.*}} : tensor<16xf32>, tensor<1x?x16xf32> -> tensor<1x?x16xf32>
// CHECK: torch.linear %{{.*}}, %{{.*}} : tensor<1x?x16xf32>, tensor<8x16xf32> -> tensor<1x?x8xf32>
// CHECK: %[[N:.*]] = arith.muli %{{.*}}, %seq : index
// CHECK: torch.reshape %{{.*}} [%[[N]]] : tensor<1x?x8xf32> -> tensor<?xf32>
// CHECK: torch.reshape %{{.*}} [%seq] : tensor<1x?x8xf32> -> tensor<1x?x4x2xf32>

// Causal attention over a symbolic number of queries and keys; the length also reaches an
// arange (positions), a broadcast (expand) and slices with index bounds.
func.func @attention(%q: tensor<1x4x?x16xf32> {llmopt.input = "q", llmopt.dynamic = ["seq"]},
                     %k: tensor<1x2x?x16xf32> {llmopt.input = "k", llmopt.dynamic = ["seq"]},
                     %seq: index {llmopt.symbol = "seq", llmopt.max = 512, llmopt.min = 2})
    -> (tensor<1x4x?x16xf32>, tensor<?xi64>, tensor<4x?x16xf32>, tensor<1x4x?x16xf32>, tensor<1x4x?x8xf32>) {
  %0 = torch.sdpa %q, %k, %k {is_causal = true, scale = 0.25, enable_gqa = true} : tensor<1x4x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32> -> tensor<1x4x?x16xf32>
  %1 = torch.arange [%seq] {start = 0, step = 1} : tensor<?xi64>
  %2 = torch.reshape %0 [%seq] : tensor<1x4x?x16xf32> -> tensor<4x?x16xf32>
  %c1 = arith.constant 1 : index
  %3 = torch.slice %0 [%c1, %seq] {dim = 2, step = 1} : tensor<1x4x?x16xf32> -> tensor<1x4x?x16xf32>
  %4 = torch.slice %0 {dim = 3, start = 0, end = 8, step = 1} : tensor<1x4x?x16xf32> -> tensor<1x4x?x8xf32>
  %5 = torch.unsqueeze %1 {dim = 0} : tensor<?xi64> -> tensor<1x?xi64>
  %6 = torch.expand %5 [%seq] : tensor<1x?xi64> -> tensor<3x?xi64>
  func.return %0, %1, %2, %3, %4 : tensor<1x4x?x16xf32>, tensor<?xi64>, tensor<4x?x16xf32>, tensor<1x4x?x16xf32>, tensor<1x4x?x8xf32>
}

// CHECK-LABEL: func.func @attention
// CHECK-SAME: %seq: index {llmopt.symbol = "seq", llmopt.max = 512 : i64, llmopt.min = 2 : i64}
// CHECK: torch.sdpa %q, %k, %k {is_causal = true, scale = 0.25, enable_gqa = true} : tensor<1x4x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32> -> tensor<1x4x?x16xf32>
// CHECK: torch.arange [%seq] {start = 0, step = 1} : tensor<?xi64>
// CHECK: torch.reshape %{{.*}} [%seq] : tensor<1x4x?x16xf32> -> tensor<4x?x16xf32>
// CHECK: torch.slice %{{.*}} [%{{.*}}, %seq] {dim = 2, step = 1} : tensor<1x4x?x16xf32> -> tensor<1x4x?x16xf32>
// CHECK: torch.slice %{{.*}} {dim = 3, start = 0, end = 8, step = 1} : tensor<1x4x?x16xf32> -> tensor<1x4x?x8xf32>
// CHECK: torch.expand %{{.*}} [%seq] : tensor<1x?xi64> -> tensor<3x?xi64>
