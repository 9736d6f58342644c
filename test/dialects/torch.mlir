// RUN: llm-opt %s | llm-opt | filecheck %s
// RUN: llm-opt %s --print-op-generic | llm-opt | filecheck %s

// An HF-style RMSNorm followed by a gated MLP, as captured from PyTorch.
func.func @rms_norm_mlp(%w: tensor<256xf32> {llmopt.param = "norm.weight"},
                        %wg: tensor<512x256xf32> {llmopt.param = "mlp.gate.weight"},
                        %bg: tensor<512xf32> {llmopt.param = "mlp.gate.bias"},
                        %wu: tensor<512x256xf32> {llmopt.param = "mlp.up.weight"},
                        %x: tensor<1x8x256xf32> {llmopt.input = "x"}) -> tensor<1x8x512xf32> {
  %eps = torch.constant 1.0e-05 : tensor<f32>
  %0 = torch.pow %x {exponent = 2.0} : tensor<1x8x256xf32> -> tensor<1x8x256xf32>
  %1 = torch.mean %0 {dims = [-1], keepdim = true} : tensor<1x8x256xf32> -> tensor<1x8x1xf32>
  %2 = torch.add %1, %eps : tensor<1x8x1xf32>, tensor<f32> -> tensor<1x8x1xf32>
  %3 = torch.rsqrt %2 : tensor<1x8x1xf32> -> tensor<1x8x1xf32>
  %4 = torch.mul %x, %3 : tensor<1x8x256xf32>, tensor<1x8x1xf32> -> tensor<1x8x256xf32>
  %5 = torch.mul %w, %4 : tensor<256xf32>, tensor<1x8x256xf32> -> tensor<1x8x256xf32>
  %6 = torch.linear %5, %wg, %bg : tensor<1x8x256xf32>, tensor<512x256xf32>, tensor<512xf32> -> tensor<1x8x512xf32>
  %7 = torch.linear %5, %wu : tensor<1x8x256xf32>, tensor<512x256xf32> -> tensor<1x8x512xf32>
  %8 = torch.silu %6 : tensor<1x8x512xf32> -> tensor<1x8x512xf32>
  %9 = torch.mul %8, %7 {llmopt.note = "gate"} : tensor<1x8x512xf32>, tensor<1x8x512xf32> -> tensor<1x8x512xf32>
  func.return %9 : tensor<1x8x512xf32>
}

// CHECK-LABEL: func.func @rms_norm_mlp
// CHECK-SAME: {llmopt.param = "norm.weight"}
// CHECK-SAME: {llmopt.input = "x"}
// CHECK: %[[EPS:.*]] = torch.constant 1.0e-05 : tensor<f32>
// CHECK: %[[P:.*]] = torch.pow %{{.*}} {exponent = 2.0} : tensor<1x8x256xf32> -> tensor<1x8x256xf32>
// CHECK: %[[M:.*]] = torch.mean %[[P]] {dims = [-1], keepdim = true} : tensor<1x8x256xf32> -> tensor<1x8x1xf32>
// CHECK: torch.add %[[M]], %[[EPS]] : tensor<1x8x1xf32>, tensor<f32> -> tensor<1x8x1xf32>
// CHECK: torch.rsqrt %{{.*}} : tensor<1x8x1xf32> -> tensor<1x8x1xf32>
// CHECK: torch.mul %{{.*}}, %{{.*}} : tensor<1x8x256xf32>, tensor<1x8x1xf32> -> tensor<1x8x256xf32>
// CHECK: torch.mul %{{.*}}, %{{.*}} : tensor<256xf32>, tensor<1x8x256xf32> -> tensor<1x8x256xf32>
// CHECK: torch.linear %{{.*}}, %{{.*}}, %{{.*}} : tensor<1x8x256xf32>, tensor<512x256xf32>, tensor<512xf32> -> tensor<1x8x512xf32>
// CHECK: torch.linear %{{.*}}, %{{.*}} : tensor<1x8x256xf32>, tensor<512x256xf32> -> tensor<1x8x512xf32>
// CHECK: torch.silu %{{.*}} : tensor<1x8x512xf32> -> tensor<1x8x512xf32>
// CHECK: torch.mul %{{.*}}, %{{.*}} {llmopt.note = "gate"} : tensor<1x8x512xf32>, tensor<1x8x512xf32> -> tensor<1x8x512xf32>

// Attention-style data movement: view, transpose, rotate-half (slice/neg/cat), scores.
func.func @attention(%q: tensor<1x8x128xf32>, %k: tensor<1x8x128xf32>) -> tensor<1x4x8x8xf32> {
  %0 = torch.reshape %q : tensor<1x8x128xf32> -> tensor<1x8x4x32xf32>
  %1 = torch.transpose %0 {dim0 = 1, dim1 = 2} : tensor<1x8x4x32xf32> -> tensor<1x4x8x32xf32>
  %2 = torch.slice %1 {dim = -1, start = 0, end = 16, step = 1} : tensor<1x4x8x32xf32> -> tensor<1x4x8x16xf32>
  %3 = torch.slice %1 {dim = 3, start = 16, end = 32, step = 1} : tensor<1x4x8x32xf32> -> tensor<1x4x8x16xf32>
  %4 = torch.neg %3 : tensor<1x4x8x16xf32> -> tensor<1x4x8x16xf32>
  %5 = torch.cat %4, %2 {dim = -1} : tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32> -> tensor<1x4x8x32xf32>
  %6 = torch.reshape %k : tensor<1x8x128xf32> -> tensor<1x8x4x32xf32>
  %7 = torch.permute %6 {dims = [0, 2, 3, 1]} : tensor<1x8x4x32xf32> -> tensor<1x4x32x8xf32>
  %8 = torch.matmul %5, %7 : tensor<1x4x8x32xf32>, tensor<1x4x32x8xf32> -> tensor<1x4x8x8xf32>
  %9 = torch.softmax %8 {dim = -1} : tensor<1x4x8x8xf32> -> tensor<1x4x8x8xf32>
  func.return %9 : tensor<1x4x8x8xf32>
}

// CHECK-LABEL: func.func @attention
// CHECK: torch.reshape %{{.*}} : tensor<1x8x128xf32> -> tensor<1x8x4x32xf32>
// CHECK: torch.transpose %{{.*}} {dim0 = 1, dim1 = 2} : tensor<1x8x4x32xf32> -> tensor<1x4x8x32xf32>
// CHECK: torch.slice %{{.*}} {dim = -1, start = 0, end = 16, step = 1} : tensor<1x4x8x32xf32> -> tensor<1x4x8x16xf32>
// CHECK: torch.slice %{{.*}} {dim = 3, start = 16, end = 32, step = 1}
// CHECK: torch.neg
// CHECK: torch.cat %{{.*}}, %{{.*}} {dim = -1} : tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32> -> tensor<1x4x8x32xf32>
// CHECK: torch.permute %{{.*}} {dims = [0, 2, 3, 1]} : tensor<1x8x4x32xf32> -> tensor<1x4x32x8xf32>
// CHECK: torch.matmul %{{.*}}, %{{.*}} : tensor<1x4x8x32xf32>, tensor<1x4x32x8xf32> -> tensor<1x4x8x8xf32>
// CHECK: torch.softmax %{{.*}} {dim = -1} : tensor<1x4x8x8xf32> -> tensor<1x4x8x8xf32>

// Every other op once: reductions, unary and binary elementwise, casts, broadcasts.
func.func @misc(%a: tensor<2x3x4xf64>, %b: tensor<3x1xf64>, %c: tensor<2x4x5xf64>, %h: tensor<4xbf16>,
                %v: tensor<4xf64>) -> (tensor<2x3x5xf64>, tensor<3xf64>, tensor<4xbf16>, tensor<2x4x3xf64>) {
  %inf = torch.constant 0xFFF0000000000000 : tensor<f64>
  %half = torch.constant -0.5 : tensor<f64>
  %0 = torch.bmm %a, %c : tensor<2x3x4xf64>, tensor<2x4x5xf64> -> tensor<2x3x5xf64>
  %1 = torch.sum %a {dims = [0, 2], keepdim = false} : tensor<2x3x4xf64> -> tensor<3xf64>
  %2 = torch.amax %a {dims = [1], keepdim = true} : tensor<2x3x4xf64> -> tensor<2x1x4xf64>
  %3 = torch.sub %a, %b : tensor<2x3x4xf64>, tensor<3x1xf64> -> tensor<2x3x4xf64>
  %4 = torch.div %3, %half : tensor<2x3x4xf64>, tensor<f64> -> tensor<2x3x4xf64>
  %5 = torch.maximum %4, %inf : tensor<2x3x4xf64>, tensor<f64> -> tensor<2x3x4xf64>
  %6 = torch.exp %5 : tensor<2x3x4xf64> -> tensor<2x3x4xf64>
  %7 = torch.sqrt %6 : tensor<2x3x4xf64> -> tensor<2x3x4xf64>
  %8 = torch.sigmoid %7 : tensor<2x3x4xf64> -> tensor<2x3x4xf64>
  %9 = torch.relu %8 : tensor<2x3x4xf64> -> tensor<2x3x4xf64>
  %10 = torch.tanh %9 : tensor<2x3x4xf64> -> tensor<2x3x4xf64>
  %11 = torch.to %h : tensor<4xbf16> -> tensor<4xf64>
  %12 = torch.rms_norm %11 {normalized_rank = 1, eps = 1.0e-06} : tensor<4xf64> -> tensor<4xf64>
  %13 = torch.rms_norm %10, %v {normalized_rank = 1, eps = 1.0e-06} : tensor<2x3x4xf64>, tensor<4xf64> -> tensor<2x3x4xf64>
  %14 = torch.to %12 : tensor<4xf64> -> tensor<4xbf16>
  %15 = torch.unsqueeze %1 {dim = -1} : tensor<3xf64> -> tensor<3x1xf64>
  %16 = torch.expand %15 : tensor<3x1xf64> -> tensor<2x3x4xf64>
  %17 = torch.add %16, %13 : tensor<2x3x4xf64>, tensor<2x3x4xf64> -> tensor<2x3x4xf64>
  %18 = torch.transpose %17 {dim0 = -1, dim1 = -2} : tensor<2x3x4xf64> -> tensor<2x4x3xf64>
  %19 = torch.slice %18 {dim = 2, start = 0, end = 3, step = 2} : tensor<2x4x3xf64> -> tensor<2x4x2xf64>
  %20 = torch.matmul %v, %c : tensor<4xf64>, tensor<2x4x5xf64> -> tensor<2x5xf64>
  %21 = torch.minimum %4, %b : tensor<2x3x4xf64>, tensor<3x1xf64> -> tensor<2x3x4xf64>
  %22 = torch.amin %a {dims = [0, -1], keepdim = false} : tensor<2x3x4xf64> -> tensor<3xf64>
  %23 = torch.arange {start = 0, end = 4, step = 1} : tensor<4xi64>
  %24 = torch.amax %23 {dims = [0], keepdim = true} : tensor<4xi64> -> tensor<1xi64>
  func.return %0, %1, %14, %18 : tensor<2x3x5xf64>, tensor<3xf64>, tensor<4xbf16>, tensor<2x4x3xf64>
}

// CHECK-LABEL: func.func @misc
// CHECK: torch.constant 0xFFF0000000000000 : tensor<f64>
// CHECK: torch.constant -0.5 : tensor<f64>
// CHECK: torch.bmm %{{.*}}, %{{.*}} : tensor<2x3x4xf64>, tensor<2x4x5xf64> -> tensor<2x3x5xf64>
// CHECK: torch.sum %{{.*}} {dims = [0, 2], keepdim = false} : tensor<2x3x4xf64> -> tensor<3xf64>
// CHECK: torch.amax %{{.*}} {dims = [1], keepdim = true} : tensor<2x3x4xf64> -> tensor<2x1x4xf64>
// CHECK: torch.sub %{{.*}}, %{{.*}} : tensor<2x3x4xf64>, tensor<3x1xf64> -> tensor<2x3x4xf64>
// CHECK: torch.div
// CHECK: torch.maximum
// CHECK: torch.exp
// CHECK: torch.sqrt
// CHECK: torch.sigmoid
// CHECK: torch.relu
// CHECK: torch.tanh
// CHECK: torch.to %{{.*}} : tensor<4xbf16> -> tensor<4xf64>
// CHECK: torch.rms_norm %{{.*}} {normalized_rank = 1, eps = 1.0e-06} : tensor<4xf64> -> tensor<4xf64>
// CHECK: torch.rms_norm %{{.*}}, %{{.*}} {normalized_rank = 1, eps = 1.0e-06} : tensor<2x3x4xf64>, tensor<4xf64> -> tensor<2x3x4xf64>
// CHECK: torch.to %{{.*}} : tensor<4xf64> -> tensor<4xbf16>
// CHECK: torch.unsqueeze %{{.*}} {dim = -1} : tensor<3xf64> -> tensor<3x1xf64>
// CHECK: torch.expand %{{.*}} : tensor<3x1xf64> -> tensor<2x3x4xf64>
// CHECK: torch.add
// CHECK: torch.transpose %{{.*}} {dim0 = -1, dim1 = -2} : tensor<2x3x4xf64> -> tensor<2x4x3xf64>
// CHECK: torch.slice %{{.*}} {dim = 2, start = 0, end = 3, step = 2} : tensor<2x4x3xf64> -> tensor<2x4x2xf64>
// CHECK: torch.matmul %{{.*}}, %{{.*}} : tensor<4xf64>, tensor<2x4x5xf64> -> tensor<2x5xf64>
// CHECK: torch.minimum %{{.*}}, %{{.*}} : tensor<2x3x4xf64>, tensor<3x1xf64> -> tensor<2x3x4xf64>
// CHECK: torch.amin %{{.*}} {dims = [0, -1], keepdim = false} : tensor<2x3x4xf64> -> tensor<3xf64>
// CHECK: torch.amax %{{.*}} {dims = [0], keepdim = true} : tensor<4xi64> -> tensor<1xi64>

// Language-model ops: embedding of i64 ids, the rotary embedding's arange/cast/cos/sin,
// causal GQA attention, integer arithmetic, comparisons, masks and where.
func.func @llm(%table: tensor<97x16xf32> {llmopt.param = "embed.weight"},
               %ids: tensor<1x7xi64> {llmopt.input = "input_ids"},
               %q: tensor<1x4x7x16xf32>, %k: tensor<1x2x7x16xf32>, %v: tensor<1x2x7x16xf32>,
               %m: tensor<7x7xi1>, %fm: tensor<1x7x7xf32>)
    -> (tensor<1x7x16xf32>, tensor<7xf32>, tensor<1x4x7x16xf32>, tensor<1x4x7x16xf32>, tensor<7x7xf32>) {
  %e = torch.embedding %table, %ids : tensor<97x16xf32>, tensor<1x7xi64> -> tensor<1x7x16xf32>
  %pos = torch.arange {start = 0, end = 7, step = 1} : tensor<7xi64>
  %two = torch.constant 2.0 : tensor<i64>
  %p2 = torch.mul %pos, %two : tensor<7xi64>, tensor<i64> -> tensor<7xi64>
  %pf = torch.to %p2 : tensor<7xi64> -> tensor<7xf32>
  %c = torch.cos %pf : tensor<7xf32> -> tensor<7xf32>
  %s = torch.sin %pf : tensor<7xf32> -> tensor<7xf32>
  %cs = torch.add %c, %s : tensor<7xf32>, tensor<7xf32> -> tensor<7xf32>
  %a = torch.sdpa %q, %k, %v {is_causal = true, scale = 0.25, enable_gqa = true} : tensor<1x4x7x16xf32>, tensor<1x2x7x16xf32>, tensor<1x2x7x16xf32> -> tensor<1x4x7x16xf32>
  %b = torch.sdpa %q, %k, %v, %m {is_causal = false, scale = 0.25, enable_gqa = true} : tensor<1x4x7x16xf32>, tensor<1x2x7x16xf32>, tensor<1x2x7x16xf32>, tensor<7x7xi1> -> tensor<1x4x7x16xf32>
  %row = torch.unsqueeze %pos {dim = 1} : tensor<7xi64> -> tensor<7x1xi64>
  %le = torch.le %pos, %row : tensor<7xi64>, tensor<7x1xi64> -> tensor<7x7xi1>
  %and = torch.logical_and %le, %m : tensor<7x7xi1>, tensor<7x7xi1> -> tensor<7x7xi1>
  %not = torch.logical_not %and : tensor<7x7xi1> -> tensor<7x7xi1>
  %ninf = torch.constant 0xFFF0000000000000 : tensor<f32>
  %fm2 = torch.reshape %fm : tensor<1x7x7xf32> -> tensor<7x7xf32>
  %w = torch.where %not, %ninf, %fm2 : tensor<7x7xi1>, tensor<f32>, tensor<7x7xf32> -> tensor<7x7xf32>
  func.return %e, %cs, %a, %b, %w : tensor<1x7x16xf32>, tensor<7xf32>, tensor<1x4x7x16xf32>, tensor<1x4x7x16xf32>, tensor<7x7xf32>
}

// CHECK-LABEL: func.func @llm
// CHECK: torch.embedding %{{.*}}, %{{.*}} : tensor<97x16xf32>, tensor<1x7xi64> -> tensor<1x7x16xf32>
// CHECK: torch.arange {start = 0, end = 7, step = 1} : tensor<7xi64>
// CHECK: torch.constant 2.0 : tensor<i64>
// CHECK: torch.mul %{{.*}}, %{{.*}} : tensor<7xi64>, tensor<i64> -> tensor<7xi64>
// CHECK: torch.to %{{.*}} : tensor<7xi64> -> tensor<7xf32>
// CHECK: torch.cos %{{.*}} : tensor<7xf32> -> tensor<7xf32>
// CHECK: torch.sin %{{.*}} : tensor<7xf32> -> tensor<7xf32>
// CHECK: torch.sdpa %{{.*}}, %{{.*}}, %{{.*}} {is_causal = true, scale = 0.25, enable_gqa = true} : tensor<1x4x7x16xf32>, tensor<1x2x7x16xf32>, tensor<1x2x7x16xf32> -> tensor<1x4x7x16xf32>
// CHECK: torch.sdpa %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {is_causal = false, scale = 0.25, enable_gqa = true} : {{.*}}, tensor<7x7xi1> -> tensor<1x4x7x16xf32>
// CHECK: torch.le %{{.*}}, %{{.*}} : tensor<7xi64>, tensor<7x1xi64> -> tensor<7x7xi1>
// CHECK: torch.logical_and
// CHECK: torch.logical_not %{{.*}} : tensor<7x7xi1> -> tensor<7x7xi1>
// CHECK: torch.where %{{.*}}, %{{.*}}, %{{.*}} : tensor<7x7xi1>, tensor<f32>, tensor<7x7xf32> -> tensor<7x7xf32>
