// RUN: llm-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @mean_wrong_shape(%x: tensor<1x8x256xf32>) -> tensor<1x8x256xf32> {
  %0 = torch.mean %x {dims = [-1], keepdim = true} : tensor<1x8x256xf32> -> tensor<1x8x256xf32>
  func.return %0 : tensor<1x8x256xf32>
}
// CHECK: result type tensor<1x8x256xf32> does not match tensor<1x8x1xf32>, computed from the operands

// -----

func.func @add_no_broadcast(%x: tensor<4x8xf32>, %y: tensor<4xf32>) -> tensor<4x8xf32> {
  %0 = torch.add %x, %y : tensor<4x8xf32>, tensor<4xf32> -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}
// CHECK: shapes [4, 8] and [4] do not broadcast (extents [4, 8] at result dim 1)

// -----

func.func @mixed_dtypes(%x: tensor<4xf32>, %y: tensor<4xf16>) -> tensor<4xf32> {
  %0 = torch.mul %x, %y : tensor<4xf32>, tensor<4xf16> -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
// CHECK: operands must share one element type (cast with torch.to), got f32, f16

// -----

func.func @linear_features(%x: tensor<8x16xf32>, %w: tensor<32x8xf32>) -> tensor<8x32xf32> {
  %0 = torch.linear %x, %w : tensor<8x16xf32>, tensor<32x8xf32> -> tensor<8x32xf32>
  func.return %0 : tensor<8x32xf32>
}
// CHECK: linear input features 16 differ from weight's 8

// -----

func.func @matmul_contraction(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) -> tensor<2x5xf32> {
  %0 = torch.matmul %a, %b : tensor<2x3xf32>, tensor<4x5xf32> -> tensor<2x5xf32>
  func.return %0 : tensor<2x5xf32>
}
// CHECK: matmul contraction extents differ: [2, 3] @ [4, 5] (3 vs 4)

// -----

func.func @reshape_count(%x: tensor<4x8xf32>) -> tensor<30xf32> {
  %0 = torch.reshape %x : tensor<4x8xf32> -> tensor<30xf32>
  func.return %0 : tensor<30xf32>
}
// CHECK: cannot reshape [4, 8] (32 elements) to [30] (30 elements)

// -----

func.func @slice_bounds(%x: tensor<4x8xf32>) -> tensor<4x4xf32> {
  %0 = torch.slice %x {dim = 1, start = 6, end = 10, step = 1} : tensor<4x8xf32> -> tensor<4x4xf32>
  func.return %0 : tensor<4x4xf32>
}
// CHECK: slice bounds must satisfy 0 <= start (6) <= end (10) <= 8

// -----

func.func @softmax_dim(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "torch.softmax"(%x) <{dim = 3 : i64}> : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
// CHECK: dim 3 out of range for rank 1

// -----

func.func @cat_mismatch(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>) -> tensor<2x6xf32> {
  %0 = torch.cat %a, %b {dim = 1} : tensor<2x3xf32>, tensor<4x3xf32> -> tensor<2x6xf32>
  func.return %0 : tensor<2x6xf32>
}
// CHECK: cat inputs [2, 3], [4, 3] differ outside dim 1

// -----

func.func @expand_bad(%x: tensor<3x2xf32>) -> tensor<3x4xf32> {
  %0 = torch.expand %x : tensor<3x2xf32> -> tensor<3x4xf32>
  func.return %0 : tensor<3x4xf32>
}
// CHECK: cannot expand [3, 2] to [3, 4]

// -----

func.func @permute_repeat(%x: tensor<3x2xf32>) -> tensor<3x3xf32> {
  %0 = torch.permute %x {dims = [0, -2]} : tensor<3x2xf32> -> tensor<3x3xf32>
  func.return %0 : tensor<3x3xf32>
}
// CHECK: dims [0, -2] repeat a dimension

// -----

func.func @to_shape(%x: tensor<3x2xf32>) -> tensor<2x3xf16> {
  %0 = torch.to %x : tensor<3x2xf32> -> tensor<2x3xf16>
  func.return %0 : tensor<2x3xf16>
}
// CHECK: result type tensor<2x3xf16> does not match tensor<3x2xf16>, computed from the operands

// -----

func.func @rms_norm_weight(%x: tensor<2x8xf32>, %w: tensor<4xf32>) -> tensor<2x8xf32> {
  %0 = torch.rms_norm %x, %w {normalized_rank = 1, eps = 1.0e-06} : tensor<2x8xf32>, tensor<4xf32> -> tensor<2x8xf32>
  func.return %0 : tensor<2x8xf32>
}
// CHECK: rms_norm weight shape [4] must equal the normalized shape [8]

// -----

func.func @constant_rank(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = torch.constant 1.0 : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
// CHECK: torch.constant must have rank 0, got tensor<2xf32>

// -----

func.func @integer_tensor(%x: tensor<4xi32>) -> tensor<4xi32> {
  %0 = torch.exp %x : tensor<4xi32> -> tensor<4xi32>
  func.return %0 : tensor<4xi32>
}
// CHECK: operand #0 element type must be f16, bf16, f32 or f64, got i32

// -----

func.func @integer_sum(%x: tensor<4xi32>) -> tensor<i32> {
  %0 = torch.sum %x {dims = [0], keepdim = false} : tensor<4xi32> -> tensor<i32>
  func.return %0 : tensor<i32>
}
// CHECK: operand #0 element type must be f16, bf16, f32 or f64, got i32

// -----

func.func @bool_amax(%x: tensor<4xi1>) -> tensor<i1> {
  %0 = torch.amax %x {dims = [0], keepdim = false} : tensor<4xi1> -> tensor<i1>
  func.return %0 : tensor<i1>
}
// CHECK: torch.amax does not take i1 operands (cast with torch.to first)

// -----

func.func @missing_property(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = torch.softmax %x : tensor<4xf32> -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
// CHECK: torch.softmax needs properties dim

// -----

func.func @unknown_property(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = torch.exp %x {dim = 0} : tensor<4xf32> -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
// CHECK: torch.exp has no property 'dim' (properties: none)

// -----

func.func @bad_property_kind(%x: tensor<4xf32>) -> tensor<1xf32> {
  %0 = torch.sum %x {dims = 0, keepdim = true} : tensor<4xf32> -> tensor<1xf32>
  func.return %0 : tensor<1xf32>
}
// CHECK: property 'dims': expected a list of integers

// -----

func.func @embedding_float_ids(%w: tensor<10x4xf32>, %ids: tensor<3xf32>) -> tensor<3x4xf32> {
  %0 = torch.embedding %w, %ids : tensor<10x4xf32>, tensor<3xf32> -> tensor<3x4xf32>
  func.return %0 : tensor<3x4xf32>
}
// CHECK: embedding indices must be integers, got f32

// -----

func.func @embedding_shape(%w: tensor<10x4xf32>, %ids: tensor<3xi64>) -> tensor<3x5xf32> {
  %0 = torch.embedding %w, %ids : tensor<10x4xf32>, tensor<3xi64> -> tensor<3x5xf32>
  func.return %0 : tensor<3x5xf32>
}
// CHECK: result type tensor<3x5xf32> does not match tensor<3x4xf32>, computed from the operands

// -----

func.func @sdpa_gqa_heads(%q: tensor<1x6x5x8xf32>, %k: tensor<1x4x5x8xf32>) -> tensor<1x6x5x8xf32> {
  %0 = torch.sdpa %q, %k, %k {is_causal = true, scale = 0.5, enable_gqa = true} : tensor<1x6x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32> -> tensor<1x6x5x8xf32>
  func.return %0 : tensor<1x6x5x8xf32>
}
// CHECK: sdpa with enable_gqa: 4 key/value heads must divide 6 query heads

// -----

func.func @sdpa_mask_and_causal(%q: tensor<2x5x8xf32>, %m: tensor<5x5xi1>) -> tensor<2x5x8xf32> {
  %0 = torch.sdpa %q, %q, %q, %m {is_causal = true, scale = 0.5, enable_gqa = false} : tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<5x5xi1> -> tensor<2x5x8xf32>
  func.return %0 : tensor<2x5x8xf32>
}
// CHECK: sdpa takes either a mask or is_causal, not both

// -----

func.func @sdpa_mask_type(%q: tensor<2x5x8xf32>, %m: tensor<5x5xi32>) -> tensor<2x5x8xf32> {
  %0 = torch.sdpa %q, %q, %q, %m {is_causal = false, scale = 0.5, enable_gqa = false} : tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<5x5xi32> -> tensor<2x5x8xf32>
  func.return %0 : tensor<2x5x8xf32>
}
// CHECK: sdpa mask must be i1 or f32, got i32

// -----

func.func @arange_extent() -> tensor<8xi64> {
  %0 = torch.arange {start = 0, end = 7, step = 1} : tensor<8xi64>
  func.return %0 : tensor<8xi64>
}
// CHECK: result type tensor<8xi64> does not match tensor<7xi64>, computed from the operands

// -----

func.func @integer_constant() -> tensor<i64> {
  %0 = torch.constant 0.5 : tensor<i64>
  func.return %0 : tensor<i64>
}
// CHECK: torch.constant of type i64 needs an integral value, got 0.5

// -----

func.func @bool_arithmetic(%m: tensor<4xi1>) -> tensor<4xi1> {
  %0 = torch.add %m, %m : tensor<4xi1>, tensor<4xi1> -> tensor<4xi1>
  func.return %0 : tensor<4xi1>
}
// CHECK: torch.add does not take i1 operands (cast with torch.to first)

// -----

func.func @where_condition(%c: tensor<4xf32>) -> tensor<4xf32> {
  %0 = torch.where %c, %c, %c : tensor<4xf32>, tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
// CHECK: torch.where condition must be i1, got f32
