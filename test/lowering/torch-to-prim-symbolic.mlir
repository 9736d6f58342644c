// RUN: llm-opt %s -p torch-to-prim | filecheck %s

// An RMSNorm, a linear and a softmax over a symbolic number of tokens: every broadcast to the
// ? dim takes %seq as its size; reductions along the hidden dim need none.
func.func @rms_linear(%w: tensor<16xf32> {llmopt.param = "norm.weight"},
                      %wl: tensor<8x16xf32> {llmopt.param = "proj.weight"},
                      %x: tensor<1x?x16xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                      %seq: index {llmopt.symbol = "seq", llmopt.max = 2048})
    -> tensor<1x?x8xf32> {
  %0 = torch.rms_norm %x, %w {normalized_rank = 1, eps = 1.0e-05} : tensor<1x?x16xf32>, tensor<16xf32> -> tensor<1x?x16xf32>
  %1 = torch.linear %0, %wl : tensor<1x?x16xf32>, tensor<8x16xf32> -> tensor<1x?x8xf32>
  %2 = torch.softmax %1 {dim = -1} : tensor<1x?x8xf32> -> tensor<1x?x8xf32>
  func.return %2 : tensor<1x?x8xf32>
}
// CHECK-LABEL: func.func @rms_linear(
// CHECK:      %[[SUM:.*]] = prim.reduce add %{{.*}} dims [2] : tensor<1x?x16xf32> -> tensor<1x?x1xf32>
// CHECK:      prim.index_map (%{{.*}}) [(d0, d1, d2) -> (d0, d1, 0)] sizes(%seq) : (tensor<1x?x1xf32>) -> tensor<1x?x16xf32>
// CHECK:      prim.index_map (%w) [(d0, d1, d2) -> (d2)] sizes(%seq) : (tensor<16xf32>) -> tensor<1x?x16xf32>
// CHECK:      prim.index_map (%{{.*}}) [(d0, d1, d2, d3) -> (d0, d1, d3)] sizes(%seq) : (tensor<1x?x16xf32>) -> tensor<1x?x8x16xf32>
// CHECK:      prim.index_map (%wl) [(d0, d1, d2, d3) -> (d2, d3)] sizes(%seq) : (tensor<8x16xf32>) -> tensor<1x?x8x16xf32>
// CHECK:      prim.reduce add %{{.*}} dims [3] : tensor<1x?x8x16xf32> -> tensor<1x?x8x1xf32>
// CHECK:      prim.reduce max %{{.*}} dims [2] : tensor<1x?x8xf32> -> tensor<1x?x1xf32>
// CHECK-NOT:  torch.
// CHECK:      func.return

// Causal GQA attention over ? queries and keys: the scores are 1x4x?x?, both extents %seq,
// the causal mask compares prim.coord 3 with prim.coord 2.
func.func @attention(%q: tensor<1x4x?x16xf32> {llmopt.input = "q", llmopt.dynamic = ["seq"]},
                     %k: tensor<1x2x?x16xf32> {llmopt.input = "k", llmopt.dynamic = ["seq"]},
                     %seq: index {llmopt.symbol = "seq", llmopt.max = 512})
    -> tensor<1x4x?x16xf32> {
  %0 = torch.sdpa %q, %k, %k {is_causal = true, scale = 0.25, enable_gqa = true} : tensor<1x4x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32> -> tensor<1x4x?x16xf32>
  func.return %0 : tensor<1x4x?x16xf32>
}
// CHECK-LABEL: func.func @attention(
// CHECK:      prim.index_map (%q) [(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)] sizes(%seq, %seq) : (tensor<1x4x?x16xf32>) -> tensor<1x4x?x?x16xf32>
// CHECK:      prim.index_map (%k) [(d0, d1, d2, d3, d4) -> (d0, (d1 floordiv 2), d3, d4)] sizes(%seq, %seq) : (tensor<1x2x?x16xf32>) -> tensor<1x4x?x?x16xf32>
// CHECK:      prim.coord 3 : index
// CHECK:      prim.coord 2 : index
// CHECK:      prim.reduce max %{{.*}} dims [3] : tensor<1x4x?x?xf32> -> tensor<1x4x?x1xf32>

// Sizes computed from the symbol: a flattening reshape, a slice that drops the first token
// (start as the map symbol s0, extent %seq - 1), positions from a dynamic arange and a cat
// along the symbolic axis (the second segment starts at s0 = %seq).
func.func @sizes(%x: tensor<1x?x8xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                 %seq: index {llmopt.symbol = "seq", llmopt.max = 64, llmopt.min = 2})
    -> (tensor<?xf32>, tensor<1x?x8xf32>, tensor<?xi64>, tensor<1x?x8xf32>) {
  %c8 = arith.constant 8 : index
  %n = arith.muli %c8, %seq : index
  %0 = torch.reshape %x [%n] : tensor<1x?x8xf32> -> tensor<?xf32>
  %c1 = arith.constant 1 : index
  %1 = torch.slice %x [%c1, %seq] {dim = 1, step = 1} : tensor<1x?x8xf32> -> tensor<1x?x8xf32>
  %2 = torch.arange [%seq] {start = 3, step = 2} : tensor<?xi64>
  %3 = torch.cat %x, %x {dim = 1} : tensor<1x?x8xf32>, tensor<1x?x8xf32> -> tensor<1x?x8xf32>
  func.return %0, %1, %2, %3 : tensor<?xf32>, tensor<1x?x8xf32>, tensor<?xi64>, tensor<1x?x8xf32>
}
// CHECK-LABEL: func.func @sizes(
// CHECK:      %[[N:.*]] = arith.muli %{{.*}}, %seq : index
// CHECK:      prim.index_map (%x) [(d0) -> (0, (d0 floordiv 8), (d0 mod 8))] sizes(%[[N]]) : (tensor<1x?x8xf32>) -> tensor<?xf32>
// CHECK:      %[[LEN:.*]] = arith.subi %seq, %[[C1:.*]] : index
// CHECK:      prim.index_map (%x) [(d0, d1, d2)[s0] -> (d0, (d1 + s0), d2)] symbols(%[[C1]]) sizes(%[[LEN]]) : (tensor<1x?x8xf32>) -> tensor<1x?x8xf32>
// CHECK:      prim.elementwise () sizes(%seq) : () -> tensor<?xi64> {
// CHECK:        prim.coord 0 : index
// CHECK:      %[[TOTAL:.*]] = arith.addi %seq, %seq : index
// CHECK:      prim.index_map (%x, %x) concat 1 [(d0, d1, d2)[s0] -> (d0, d1, d2), (d0, d1, d2)[s0] -> (d0, (d1 + (s0 * -1)), d2)] symbols(%seq) sizes(%[[TOTAL]])
