// RUN: llm-opt %s -p torch-to-prim | filecheck %s

// HF-style RMSNorm: constant fill + broadcast, pow -> x*x, mean -> reduce add and 1/N.
func.func @rms_norm(%w: tensor<256xf32>, %x: tensor<1x8x256xf32>) -> tensor<1x8x256xf32> {
  %eps = torch.constant 1.0e-05 : tensor<f32>
  %0 = torch.pow %x {exponent = 2.0} : tensor<1x8x256xf32> -> tensor<1x8x256xf32>
  %1 = torch.mean %0 {dims = [-1], keepdim = true} : tensor<1x8x256xf32> -> tensor<1x8x1xf32>
  %2 = torch.add %1, %eps : tensor<1x8x1xf32>, tensor<f32> -> tensor<1x8x1xf32>
  %3 = torch.rsqrt %2 : tensor<1x8x1xf32> -> tensor<1x8x1xf32>
  %4 = torch.mul %x, %3 : tensor<1x8x256xf32>, tensor<1x8x1xf32> -> tensor<1x8x256xf32>
  %5 = torch.mul %w, %4 : tensor<256xf32>, tensor<1x8x256xf32> -> tensor<1x8x256xf32>
  func.return %5 : tensor<1x8x256xf32>
}
// CHECK-LABEL: func.func @rms_norm(
// CHECK:      %[[EPS:.*]] = prim.elementwise () : () -> tensor<f32> {
// CHECK-NEXT:   %[[C:.*]] = arith.constant 1.000000e-05 : f32
// CHECK-NEXT:   prim.yield %[[C]] : f32
// CHECK:      prim.elementwise (%x) : (tensor<1x8x256xf32>) -> tensor<1x8x256xf32> {
// CHECK-NEXT: ^{{.*}}(%[[A:.*]]: f32):
// CHECK-NEXT:   arith.mulf %[[A]], %[[A]] : f32
// CHECK:      %[[SUM:.*]] = prim.reduce add %{{.*}} dims [2] : tensor<1x8x256xf32> -> tensor<1x8x1xf32>
// CHECK:      %[[MEAN:.*]] = prim.elementwise (%[[SUM]]) : (tensor<1x8x1xf32>) -> tensor<1x8x1xf32> {
// CHECK:        arith.constant 3.906250e-03 : f32
// CHECK:        arith.mulf
// CHECK:      %[[EPSB:.*]] = prim.index_map (%[[EPS]]) [(d0, d1, d2) -> ()] : (tensor<f32>) -> tensor<1x8x1xf32>
// CHECK:      prim.elementwise (%[[MEAN]], %[[EPSB]])
// CHECK:        arith.addf
// CHECK:      math.rsqrt
// CHECK:      prim.index_map (%{{.*}}) [(d0, d1, d2) -> (d0, d1, 0)] : (tensor<1x8x1xf32>) -> tensor<1x8x256xf32>
// CHECK:      arith.mulf
// CHECK:      prim.index_map (%w) [(d0, d1, d2) -> (d2)] : (tensor<256xf32>) -> tensor<1x8x256xf32>
// CHECK:      arith.mulf
// CHECK-NOT:  torch.
// CHECK:      func.return

// Linear with bias: index_map broadcasts, mul, reduce over k, drop the unit dim, add bias.
func.func @linear(%x: tensor<8x64xf32>, %w: tensor<32x64xf32>, %b: tensor<32xf32>) -> tensor<8x32xf32> {
  %0 = torch.linear %x, %w, %b : tensor<8x64xf32>, tensor<32x64xf32>, tensor<32xf32> -> tensor<8x32xf32>
  func.return %0 : tensor<8x32xf32>
}
// CHECK-LABEL: func.func @linear(
// CHECK-NEXT: %[[X:.*]] = prim.index_map (%x) [(d0, d1, d2) -> (d0, d2)] : (tensor<8x64xf32>) -> tensor<8x32x64xf32>
// CHECK-NEXT: %[[W:.*]] = prim.index_map (%w) [(d0, d1, d2) -> (d1, d2)] : (tensor<32x64xf32>) -> tensor<8x32x64xf32>
// CHECK-NEXT: %[[P:.*]] = prim.elementwise (%[[X]], %[[W]]) : (tensor<8x32x64xf32>, tensor<8x32x64xf32>) -> tensor<8x32x64xf32> {
// CHECK:        arith.mulf
// CHECK:      %[[R:.*]] = prim.reduce add %[[P]] dims [2] : tensor<8x32x64xf32> -> tensor<8x32x1xf32>
// CHECK-NEXT: %[[D:.*]] = prim.index_map (%[[R]]) [(d0, d1) -> (d0, d1, 0)] : (tensor<8x32x1xf32>) -> tensor<8x32xf32>
// CHECK-NEXT: %[[B:.*]] = prim.index_map (%b) [(d0, d1) -> (d1)] : (tensor<32xf32>) -> tensor<8x32xf32>
// CHECK-NEXT: prim.elementwise (%[[D]], %[[B]])
// CHECK:        arith.addf

// Batched matmul with broadcast batch dims.
func.func @matmul(%a: tensor<2x1x3x4xf32>, %b: tensor<5x4x6xf32>) -> tensor<2x5x3x6xf32> {
  %0 = torch.matmul %a, %b : tensor<2x1x3x4xf32>, tensor<5x4x6xf32> -> tensor<2x5x3x6xf32>
  func.return %0 : tensor<2x5x3x6xf32>
}
// CHECK-LABEL: func.func @matmul(
// CHECK-NEXT: prim.index_map (%a) [(d0, d1, d2, d3, d4) -> (d0, 0, d2, d4)] : (tensor<2x1x3x4xf32>) -> tensor<2x5x3x6x4xf32>
// CHECK-NEXT: prim.index_map (%b) [(d0, d1, d2, d3, d4) -> (d1, d4, d3)] : (tensor<5x4x6xf32>) -> tensor<2x5x3x6x4xf32>
// CHECK:      prim.reduce add %{{.*}} dims [4] : tensor<2x5x3x6x4xf32> -> tensor<2x5x3x6x1xf32>
// CHECK-NEXT: prim.index_map (%{{.*}}) [(d0, d1, d2, d3) -> (d0, d1, d2, d3, 0)] : (tensor<2x5x3x6x1xf32>) -> tensor<2x5x3x6xf32>

func.func @bmm(%a: tensor<2x3x4xf64>, %b: tensor<2x4x5xf64>) -> tensor<2x3x5xf64> {
  %0 = torch.bmm %a, %b : tensor<2x3x4xf64>, tensor<2x4x5xf64> -> tensor<2x3x5xf64>
  func.return %0 : tensor<2x3x5xf64>
}
// CHECK-LABEL: func.func @bmm(
// CHECK-NEXT: prim.index_map (%a) [(d0, d1, d2, d3) -> (d0, d1, d3)] : (tensor<2x3x4xf64>) -> tensor<2x3x5x4xf64>
// CHECK-NEXT: prim.index_map (%b) [(d0, d1, d2, d3) -> (d0, d3, d2)] : (tensor<2x4x5xf64>) -> tensor<2x3x5x4xf64>
// CHECK:        arith.mulf %{{.*}}, %{{.*}} : f64
// CHECK:      prim.reduce add %{{.*}} dims [3] : tensor<2x3x5x4xf64> -> tensor<2x3x5x1xf64>

// Softmax: max, exp(x - max), sum, divide.
func.func @softmax(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %0 = torch.softmax %x {dim = -1} : tensor<4x16xf32> -> tensor<4x16xf32>
  func.return %0 : tensor<4x16xf32>
}
// CHECK-LABEL: func.func @softmax(
// CHECK-NEXT: %[[M:.*]] = prim.reduce max %x dims [1] : tensor<4x16xf32> -> tensor<4x1xf32>
// CHECK-NEXT: %[[MB:.*]] = prim.index_map (%[[M]]) [(d0, d1) -> (d0, 0)] : (tensor<4x1xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: %[[E:.*]] = prim.elementwise (%x, %[[MB]])
// CHECK:        arith.subf
// CHECK-NEXT:   math.exp
// CHECK:      %[[S:.*]] = prim.reduce add %[[E]] dims [1] : tensor<4x16xf32> -> tensor<4x1xf32>
// CHECK-NEXT: %[[SB:.*]] = prim.index_map (%[[S]]) [(d0, d1) -> (d0, 0)] : (tensor<4x1xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: prim.elementwise (%[[E]], %[[SB]])
// CHECK:        arith.divf

func.func @rms_norm_op(%x: tensor<2x8xf64>, %w: tensor<8xf64>) -> tensor<2x8xf64> {
  %0 = torch.rms_norm %x, %w {normalized_rank = 1, eps = 1.0e-06} : tensor<2x8xf64>, tensor<8xf64> -> tensor<2x8xf64>
  func.return %0 : tensor<2x8xf64>
}
// CHECK-LABEL: func.func @rms_norm_op(
// CHECK:        arith.mulf %{{.*}}, %{{.*}} : f64
// CHECK:      prim.reduce add %{{.*}} dims [1] : tensor<2x8xf64> -> tensor<2x1xf64>
// CHECK:        arith.constant 1.250000e-01 : f64
// CHECK:        arith.constant 1.000000e-06 : f64
// CHECK:        math.rsqrt
// CHECK:      prim.index_map (%{{.*}}) [(d0, d1) -> (d0, 0)] : (tensor<2x1xf64>) -> tensor<2x8xf64>
// CHECK:      prim.index_map (%w) [(d0, d1) -> (d1)] : (tensor<8xf64>) -> tensor<2x8xf64>
// CHECK:      prim.elementwise (%x, %{{.*}}, %{{.*}}) : (tensor<2x8xf64>, tensor<2x8xf64>, tensor<2x8xf64>) -> tensor<2x8xf64>

// Unary ops and reductions without keepdim.
func.func @unary(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<8xf32>) {
  %0 = torch.silu %x : tensor<4x8xf32> -> tensor<4x8xf32>
  %1 = torch.relu %0 : tensor<4x8xf32> -> tensor<4x8xf32>
  %2 = torch.sigmoid %1 : tensor<4x8xf32> -> tensor<4x8xf32>
  %3 = torch.tanh %2 : tensor<4x8xf32> -> tensor<4x8xf32>
  %4 = torch.pow %3 {exponent = 0.5} : tensor<4x8xf32> -> tensor<4x8xf32>
  %5 = torch.pow %3 {exponent = 1.5} : tensor<4x8xf32> -> tensor<4x8xf32>
  %6 = torch.sum %x {dims = [1], keepdim = false} : tensor<4x8xf32> -> tensor<4xf32>
  %7 = torch.amax %x {dims = [0], keepdim = false} : tensor<4x8xf32> -> tensor<8xf32>
  func.return %0, %4, %5, %6, %7 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<8xf32>
}
// CHECK-LABEL: func.func @unary(
// silu: x * (1 / (1 + exp(-x)))
// CHECK:        arith.negf
// CHECK-NEXT:   math.exp
// CHECK-NEXT:   arith.addf
// CHECK-NEXT:   arith.divf
// CHECK-NEXT:   arith.mulf
// relu
// CHECK:        arith.constant 0.000000e+00 : f32
// CHECK-NEXT:   arith.maximumf
// sigmoid
// CHECK:        arith.negf
// CHECK-NEXT:   math.exp
// CHECK-NEXT:   arith.addf
// CHECK-NEXT:   arith.divf
// CHECK-NEXT:   prim.yield
// CHECK:        math.tanh
// CHECK:        math.sqrt
// CHECK:        arith.constant 1.500000e+00 : f32
// CHECK-NEXT:   math.powf
// CHECK:      %[[S:.*]] = prim.reduce add %x dims [1] : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK-NEXT: prim.index_map (%[[S]]) [(d0) -> (d0, 0)] : (tensor<4x1xf32>) -> tensor<4xf32>
// CHECK-NEXT: %[[A:.*]] = prim.reduce max %x dims [0] : tensor<4x8xf32> -> tensor<1x8xf32>
// CHECK-NEXT: prim.index_map (%[[A]]) [(d0) -> (0, d0)] : (tensor<1x8xf32>) -> tensor<8xf32>

// minimum: broadcasts, then NaN-propagating arith.minimumf (arith.minsi for integers); amin
// is prim.reduce min, over widened values for bf16 (exact), narrowed after.
func.func @minimum_amin(%x: tensor<4x8xf32>, %y: tensor<8xf32>, %i: tensor<4xi64>, %h: tensor<4x16xbf16>) -> (tensor<4x8xf32>, tensor<4xi64>, tensor<1x8xf32>, tensor<4xbf16>) {
  %0 = torch.minimum %x, %y : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %1 = torch.minimum %i, %i : tensor<4xi64>, tensor<4xi64> -> tensor<4xi64>
  %2 = torch.amin %x {dims = [0], keepdim = true} : tensor<4x8xf32> -> tensor<1x8xf32>
  %3 = torch.amin %h {dims = [1], keepdim = false} : tensor<4x16xbf16> -> tensor<4xbf16>
  func.return %0, %1, %2, %3 : tensor<4x8xf32>, tensor<4xi64>, tensor<1x8xf32>, tensor<4xbf16>
}
// CHECK-LABEL: func.func @minimum_amin(
// CHECK:      %[[Y:.*]] = prim.index_map (%y) [(d0, d1) -> (d1)] : (tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: prim.elementwise (%x, %[[Y]]) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK:        arith.minimumf %{{.*}}, %{{.*}} : f32
// CHECK:      prim.elementwise (%i, %i) : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64> {
// CHECK:        arith.minsi %{{.*}}, %{{.*}} : i64
// CHECK:      prim.reduce min %x dims [0] : tensor<4x8xf32> -> tensor<1x8xf32>
// CHECK-NEXT: prim.elementwise (%h) : (tensor<4x16xbf16>) -> tensor<4x16xf32> {
// CHECK:        arith.extf %{{.*}} : bf16 to f32
// CHECK:      prim.reduce min %{{.*}} dims [1] : tensor<4x16xf32> -> tensor<4x1xf32>
// CHECK-NEXT: prim.elementwise (%{{.*}}) : (tensor<4x1xf32>) -> tensor<4x1xbf16> {
// CHECK:        arith.truncf %{{.*}} : f32 to bf16
// CHECK:      prim.index_map (%{{.*}}) [(d0) -> (d0, 0)] : (tensor<4x1xbf16>) -> tensor<4xbf16>

// Integer amax/amin (argmax's index reduction, among others) reduce in their own type: no
// widening, no cast.
func.func @integer_amax_amin(%i: tensor<4x8xi64>, %s: tensor<4x8xi16>) -> (tensor<4xi64>, tensor<1x8xi16>) {
  %0 = torch.amax %i {dims = [-1], keepdim = false} : tensor<4x8xi64> -> tensor<4xi64>
  %1 = torch.amin %s {dims = [0], keepdim = true} : tensor<4x8xi16> -> tensor<1x8xi16>
  func.return %0, %1 : tensor<4xi64>, tensor<1x8xi16>
}
// CHECK-LABEL: func.func @integer_amax_amin(
// CHECK-NEXT: %[[M:.*]] = prim.reduce max %i dims [1] : tensor<4x8xi64> -> tensor<4x1xi64>
// CHECK-NEXT: prim.index_map (%[[M]]) [(d0) -> (d0, 0)] : (tensor<4x1xi64>) -> tensor<4xi64>
// CHECK-NEXT: prim.reduce min %s dims [0] : tensor<4x8xi16> -> tensor<1x8xi16>
// CHECK-NEXT: func.return

// Casts: f32 -> f16 -> bf16 -> f64.
func.func @casts(%x: tensor<4xf32>) -> tensor<4xf64> {
  %0 = torch.to %x : tensor<4xf32> -> tensor<4xf16>
  %1 = torch.to %0 : tensor<4xf16> -> tensor<4xbf16>
  %2 = torch.to %1 : tensor<4xbf16> -> tensor<4xf64>
  func.return %2 : tensor<4xf64>
}
// CHECK-LABEL: func.func @casts(
// CHECK:        arith.truncf %{{.*}} : f32 to f16
// CHECK:        arith.extf %{{.*}} : f16 to f32
// CHECK-NEXT:   arith.truncf %{{.*}} : f32 to bf16
// CHECK:        arith.extf %{{.*}} : bf16 to f64

// Rotate-half: view, transpose, slice, neg, cat.
func.func @data_movement(%q: tensor<1x8x128xf32>) -> (tensor<1x4x8x32xf32>, tensor<3x8x2xf32>, tensor<8x4x2xf32>, tensor<4x2xf32>) {
  %0 = torch.reshape %q : tensor<1x8x128xf32> -> tensor<1x8x4x32xf32>
  %1 = torch.transpose %0 {dim0 = 1, dim1 = 2} : tensor<1x8x4x32xf32> -> tensor<1x4x8x32xf32>
  %2 = torch.slice %1 {dim = -1, start = 0, end = 16, step = 1} : tensor<1x4x8x32xf32> -> tensor<1x4x8x16xf32>
  %3 = torch.slice %1 {dim = 3, start = 16, end = 32, step = 1} : tensor<1x4x8x32xf32> -> tensor<1x4x8x16xf32>
  %4 = torch.neg %3 : tensor<1x4x8x16xf32> -> tensor<1x4x8x16xf32>
  %5 = torch.cat %4, %2 {dim = -1} : tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32> -> tensor<1x4x8x32xf32>
  %6 = torch.reshape %q : tensor<1x8x128xf32> -> tensor<8x64x2xf32>
  %7 = torch.slice %6 {dim = 1, start = 1, end = 9, step = 2} : tensor<8x64x2xf32> -> tensor<8x4x2xf32>
  %8 = torch.permute %7 {dims = [1, 0, 2]} : tensor<8x4x2xf32> -> tensor<4x8x2xf32>
  %9 = torch.unsqueeze %8 {dim = 0} : tensor<4x8x2xf32> -> tensor<1x4x8x2xf32>
  %10 = torch.sum %9 {dims = [1], keepdim = false} : tensor<1x4x8x2xf32> -> tensor<1x8x2xf32>
  %11 = torch.expand %10 : tensor<1x8x2xf32> -> tensor<3x8x2xf32>
  %12 = torch.reshape %7 : tensor<8x4x2xf32> -> tensor<4x16xf32>
  %13 = torch.slice %12 {dim = 1, start = 0, end = 2, step = 1} : tensor<4x16xf32> -> tensor<4x2xf32>
  func.return %5, %11, %7, %13 : tensor<1x4x8x32xf32>, tensor<3x8x2xf32>, tensor<8x4x2xf32>, tensor<4x2xf32>
}
// CHECK-LABEL: func.func @data_movement(
// CHECK-NEXT: %[[V:.*]] = prim.index_map (%q) [(d0, d1, d2, d3) -> (0, d1, ((d2 * 32) + d3))] : (tensor<1x8x128xf32>) -> tensor<1x8x4x32xf32>
// CHECK-NEXT: %[[T:.*]] = prim.index_map (%[[V]]) [(d0, d1, d2, d3) -> (d0, d2, d1, d3)] : (tensor<1x8x4x32xf32>) -> tensor<1x4x8x32xf32>
// CHECK-NEXT: %[[LO:.*]] = prim.index_map (%[[T]]) [(d0, d1, d2, d3) -> (d0, d1, d2, d3)] : (tensor<1x4x8x32xf32>) -> tensor<1x4x8x16xf32>
// CHECK-NEXT: %[[HI:.*]] = prim.index_map (%[[T]]) [(d0, d1, d2, d3) -> (d0, d1, d2, (d3 + 16))] : (tensor<1x4x8x32xf32>) -> tensor<1x4x8x16xf32>
// CHECK:      %[[NEG:.*]] = prim.elementwise (%[[HI]])
// CHECK:        arith.negf
// CHECK:      prim.index_map (%[[NEG]], %[[LO]]) concat 3 [(d0, d1, d2, d3) -> (d0, d1, d2, d3), (d0, d1, d2, d3) -> (d0, d1, d2, (d3 + -16))] : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x32xf32>
// CHECK-NEXT: %[[R:.*]] = prim.index_map (%q) [(d0, d1, d2) -> (0, d0, ((d1 * 2) + d2))] : (tensor<1x8x128xf32>) -> tensor<8x64x2xf32>
// CHECK-NEXT: %[[S:.*]] = prim.index_map (%[[R]]) [(d0, d1, d2) -> (d0, ((d1 * 2) + 1), d2)] : (tensor<8x64x2xf32>) -> tensor<8x4x2xf32>
// CHECK-NEXT: %[[P:.*]] = prim.index_map (%[[S]]) [(d0, d1, d2) -> (d1, d0, d2)] : (tensor<8x4x2xf32>) -> tensor<4x8x2xf32>
// CHECK-NEXT: %[[U:.*]] = prim.index_map (%[[P]]) [(d0, d1, d2, d3) -> (d1, d2, d3)] : (tensor<4x8x2xf32>) -> tensor<1x4x8x2xf32>
// CHECK-NEXT: %[[SUM:.*]] = prim.reduce add %[[U]] dims [1] : tensor<1x4x8x2xf32> -> tensor<1x1x8x2xf32>
// CHECK-NEXT: %[[DROP:.*]] = prim.index_map (%[[SUM]]) [(d0, d1, d2) -> (0, 0, d1, d2)] : (tensor<1x1x8x2xf32>) -> tensor<1x8x2xf32>
// CHECK-NEXT: prim.index_map (%[[DROP]]) [(d0, d1, d2) -> (0, d1, d2)] : (tensor<1x8x2xf32>) -> tensor<3x8x2xf32>
// CHECK-NEXT: prim.index_map (%[[S]]) [(d0, d1) -> ((((d0 * 16) + d1) floordiv 8), ((((d0 * 16) + d1) floordiv 2) mod 4), (((d0 * 16) + d1) mod 2))] : (tensor<8x4x2xf32>) -> tensor<4x16xf32>

// 16-bit contractions and reductions accumulate in f32 and round once at the end.
func.func @linear_bf16(%x: tensor<4x16xbf16>, %w: tensor<8x16xbf16>) -> (tensor<4x8xbf16>, tensor<4x1xbf16>) {
  %0 = torch.linear %x, %w : tensor<4x16xbf16>, tensor<8x16xbf16> -> tensor<4x8xbf16>
  %1 = torch.mean %x {dims = [1], keepdim = true} : tensor<4x16xbf16> -> tensor<4x1xbf16>
  func.return %0, %1 : tensor<4x8xbf16>, tensor<4x1xbf16>
}
// CHECK-LABEL: func.func @linear_bf16(
// CHECK:      prim.elementwise (%{{.*}}, %{{.*}}) : (tensor<4x8x16xbf16>, tensor<4x8x16xbf16>) -> tensor<4x8x16xf32> {
// CHECK:        arith.extf %{{.*}} : bf16 to f32
// CHECK:        arith.extf %{{.*}} : bf16 to f32
// CHECK:        arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK:      prim.reduce add %{{.*}} dims [2] : tensor<4x8x16xf32> -> tensor<4x8x1xf32>
// CHECK:      prim.index_map (%{{.*}}) [(d0, d1) -> (d0, d1, 0)] : (tensor<4x8x1xf32>) -> tensor<4x8xf32>
// CHECK:        arith.truncf %{{.*}} : f32 to bf16
// CHECK:      prim.reduce add %{{.*}} dims [1] : tensor<4x16xf32> -> tensor<4x1xf32>
// CHECK:        arith.constant 6.250000e-02 : f32
// CHECK:        arith.truncf %{{.*}} : f32 to bf16

// 16-bit floats are storage: one torch op widens its inputs, computes in f32 and rounds once
// (silu: neg, exp, add, div, mul between one extf and one truncf); a bias is added to the f32
// sums; amax reduces widened values.
func.func @elementwise_bf16(%x: tensor<4x16xbf16>, %w: tensor<8x16xbf16>, %b: tensor<8xbf16>) -> (tensor<4x16xbf16>, tensor<4x8xbf16>, tensor<4xbf16>) {
  %0 = torch.silu %x : tensor<4x16xbf16> -> tensor<4x16xbf16>
  %1 = torch.linear %x, %w, %b : tensor<4x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16> -> tensor<4x8xbf16>
  %2 = torch.amax %x {dims = [1], keepdim = false} : tensor<4x16xbf16> -> tensor<4xbf16>
  func.return %0, %1, %2 : tensor<4x16xbf16>, tensor<4x8xbf16>, tensor<4xbf16>
}
// CHECK-LABEL: func.func @elementwise_bf16(
// CHECK:      prim.elementwise (%x) : (tensor<4x16xbf16>) -> tensor<4x16xbf16> {
// CHECK-NEXT: ^{{.*}}(%{{.*}}: bf16):
// CHECK-NEXT:   arith.extf %{{.*}} : bf16 to f32
// CHECK-NEXT:   arith.constant 1.000000e+00 : f32
// CHECK-NEXT:   arith.negf %{{.*}} : f32
// CHECK-NEXT:   math.exp %{{.*}} : f32
// CHECK-NEXT:   arith.addf %{{.*}}, %{{.*}} : f32
// CHECK-NEXT:   arith.divf %{{.*}}, %{{.*}} : f32
// CHECK-NEXT:   arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK-NEXT:   arith.truncf %{{.*}} : f32 to bf16
// CHECK-NEXT:   prim.yield %{{.*}} : bf16
// CHECK:      prim.reduce add %{{.*}} dims [2] : tensor<4x8x16xf32> -> tensor<4x8x1xf32>
// CHECK-NOT:  arith.truncf
// CHECK:      prim.elementwise (%{{.*}}, %{{.*}}) : (tensor<4x8xf32>, tensor<4x8xbf16>) -> tensor<4x8xbf16> {
// CHECK:        arith.extf %{{.*}} : bf16 to f32
// CHECK-NEXT:   arith.addf %{{.*}}, %{{.*}} : f32
// CHECK-NEXT:   arith.truncf %{{.*}} : f32 to bf16
// CHECK:      prim.reduce max %{{.*}} dims [1] : tensor<4x16xf32> -> tensor<4x1xf32>

// Causal GQA attention (4 query heads share 2 key/value heads): scores as a contraction whose
// key operand reads head h floordiv 2, one elementwise op that scales and masks with
// prim.coord (key s <= query l), the softmax chain along the keys, and probs @ v.
func.func @attention(%q: tensor<1x4x5x8xf32>, %k: tensor<1x2x5x8xf32>, %v: tensor<1x2x5x8xf32>) -> tensor<1x4x5x8xf32> {
  %0 = torch.sdpa %q, %k, %v {is_causal = true, scale = 0.25, enable_gqa = true} : tensor<1x4x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32> -> tensor<1x4x5x8xf32>
  func.return %0 : tensor<1x4x5x8xf32>
}
// CHECK-LABEL: func.func @attention(
// CHECK:      prim.index_map (%q) [(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)] : (tensor<1x4x5x8xf32>) -> tensor<1x4x5x5x8xf32>
// CHECK-NEXT: prim.index_map (%k) [(d0, d1, d2, d3, d4) -> (d0, (d1 floordiv 2), d3, d4)] : (tensor<1x2x5x8xf32>) -> tensor<1x4x5x5x8xf32>
// CHECK:        arith.mulf
// CHECK:      prim.reduce add %{{.*}} dims [4] : tensor<1x4x5x5x8xf32> -> tensor<1x4x5x5x1xf32>
// CHECK:      %[[SCORES:.*]] = prim.elementwise (%{{.*}}) : (tensor<1x4x5x5xf32>) -> tensor<1x4x5x5xf32> {
// CHECK:        arith.constant 2.500000e-01 : f32
// CHECK:        %[[S:.*]] = prim.coord 3 : index
// CHECK-NEXT:   %[[L:.*]] = prim.coord 2 : index
// CHECK-NEXT:   %[[KEEP:.*]] = arith.cmpi sle, %[[S]], %[[L]] : index
// CHECK-NEXT:   %[[NINF:.*]] = arith.constant 0xff800000 : f32
// CHECK-NEXT:   arith.select %[[KEEP]], %{{.*}}, %[[NINF]] : f32
// CHECK:      prim.reduce max %[[SCORES]] dims [3]
// CHECK:        math.exp
// CHECK:      prim.reduce add %{{.*}} dims [3]
// CHECK:        arith.divf
// CHECK:      prim.index_map (%v) [(d0, d1, d2, d3, d4) -> (d0, (d1 floordiv 2), d4, d3)] : (tensor<1x2x5x8xf32>) -> tensor<1x4x5x8x5xf32>
// CHECK:      prim.reduce add %{{.*}} dims [4] : tensor<1x4x5x8x5xf32> -> tensor<1x4x5x8x1xf32>

// A boolean mask selects -inf where it is false; a float mask is added.
func.func @masked(%q: tensor<3x5x8xf32>, %m: tensor<5x5xi1>, %f: tensor<5x5xf32>) -> (tensor<3x5x8xf32>, tensor<3x5x8xf32>) {
  %0 = torch.sdpa %q, %q, %q, %m {is_causal = false, scale = 0.5, enable_gqa = false} : tensor<3x5x8xf32>, tensor<3x5x8xf32>, tensor<3x5x8xf32>, tensor<5x5xi1> -> tensor<3x5x8xf32>
  %1 = torch.sdpa %q, %q, %q, %f {is_causal = false, scale = 0.5, enable_gqa = false} : tensor<3x5x8xf32>, tensor<3x5x8xf32>, tensor<3x5x8xf32>, tensor<5x5xf32> -> tensor<3x5x8xf32>
  func.return %0, %1 : tensor<3x5x8xf32>, tensor<3x5x8xf32>
}
// CHECK-LABEL: func.func @masked(
// CHECK:      %[[MB:.*]] = prim.index_map (%m) [(d0, d1, d2) -> (d1, d2)] : (tensor<5x5xi1>) -> tensor<3x5x5xi1>
// CHECK:      prim.elementwise (%{{.*}}, %[[MB]]) : (tensor<3x5x5xf32>, tensor<3x5x5xi1>) -> tensor<3x5x5xf32> {
// CHECK-NEXT: ^{{.*}}(%[[X:.*]]: f32, %[[K:.*]]: i1):
// CHECK:        arith.select %[[K]], %{{.*}}, %{{.*}} : f32
// CHECK:      %[[FB:.*]] = prim.index_map (%f) [(d0, d1, d2) -> (d1, d2)] : (tensor<5x5xf32>) -> tensor<3x5x5xf32>
// CHECK:      prim.elementwise (%{{.*}}, %[[FB]])
// CHECK:        arith.mulf
// CHECK-NEXT:   arith.addf

// Embedding is a gather along the table's rows; arange a fill computing start + step * coord;
// integer arithmetic, comparisons, logic, where and casts become arith ops.
func.func @ids(%w: tensor<97x16xf32>, %ids: tensor<1x7xi64>, %m: tensor<7xi1>) -> (tensor<1x7x16xf32>, tensor<7xf32>, tensor<7xf32>) {
  %e = torch.embedding %w, %ids : tensor<97x16xf32>, tensor<1x7xi64> -> tensor<1x7x16xf32>
  %a = torch.arange {start = 3, end = 17, step = 2} : tensor<7xi64>
  %c = torch.constant 1.0 : tensor<i64>
  %s = torch.sub %a, %c : tensor<7xi64>, tensor<i64> -> tensor<7xi64>
  %f = torch.to %s : tensor<7xi64> -> tensor<7xf32>
  %g = torch.gt %a, %c : tensor<7xi64>, tensor<i64> -> tensor<7xi1>
  %n = torch.logical_not %m : tensor<7xi1> -> tensor<7xi1>
  %o = torch.logical_or %g, %n : tensor<7xi1>, tensor<7xi1> -> tensor<7xi1>
  %z = torch.constant 0.0 : tensor<f32>
  %w2 = torch.where %o, %f, %z : tensor<7xi1>, tensor<7xf32>, tensor<f32> -> tensor<7xf32>
  %b = torch.to %m : tensor<7xi1> -> tensor<7xf32>
  func.return %e, %w2, %b : tensor<1x7x16xf32>, tensor<7xf32>, tensor<7xf32>
}
// CHECK-LABEL: func.func @ids(
// CHECK:      prim.gather %w[%ids] axis 0 : (tensor<97x16xf32>, tensor<1x7xi64>) -> tensor<1x7x16xf32>
// CHECK:      prim.elementwise () : () -> tensor<7xi64> {
// CHECK-NEXT:   %[[C:.*]] = prim.coord 0 : index
// CHECK-NEXT:   %[[I:.*]] = arith.index_cast %[[C]] : index to i64
// CHECK-NEXT:   %[[TWO:.*]] = arith.constant 2 : i64
// CHECK-NEXT:   %[[M:.*]] = arith.muli %[[I]], %[[TWO]] : i64
// CHECK-NEXT:   %[[THREE:.*]] = arith.constant 3 : i64
// CHECK-NEXT:   arith.addi %[[M]], %[[THREE]] : i64
// CHECK:        arith.subi
// CHECK:        arith.sitofp %{{.*}} : i64 to f32
// CHECK:        arith.cmpi sgt, %{{.*}}, %{{.*}} : i64
// CHECK:        arith.xori
// CHECK:        arith.ori
// CHECK:        arith.select
// CHECK:        arith.uitofp %{{.*}} : i1 to f32

// The rotary embedding's trigonometry.
func.func @rope(%x: tensor<7x8xf32>) -> (tensor<7x8xf32>, tensor<7x8xf32>) {
  %c = torch.cos %x : tensor<7x8xf32> -> tensor<7x8xf32>
  %s = torch.sin %x : tensor<7x8xf32> -> tensor<7x8xf32>
  func.return %c, %s : tensor<7x8xf32>, tensor<7x8xf32>
}
// CHECK-LABEL: func.func @rope(
// CHECK:        math.cos %{{.*}} : f32
// CHECK:        math.sin %{{.*}} : f32
