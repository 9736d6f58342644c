// What torch-to-prim cannot lower on symbolic input yet, each a diagnostic at the op.
// RUN: llm-opt %s --split-input-file --verify-diagnostics -p torch-to-prim | filecheck %s

// The 1/N of a mean over the ? dim would be a runtime value.
func.func @mean_over_seq(%x: tensor<1x?x16xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                         %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<1x1x16xf32> {
  %0 = torch.mean %x {dims = [1], keepdim = true} : tensor<1x?x16xf32> -> tensor<1x1x16xf32>
  func.return %0 : tensor<1x1x16xf32>
}
// CHECK: torch-to-prim-symbolic-unsupported.mlir:7:3: 'torch.mean' op: a mean over a symbolic (?) extent is not supported yet: its 1/N would be a runtime value

// -----

// Flattening [16, ?] needs the stride ?, which is no affine map.
func.func @inner_symbolic(%x: tensor<16x?xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                          %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<?xf32> {
  %c16 = arith.constant 16 : index
  %n = arith.muli %seq, %c16 : index
  %0 = torch.reshape %x [%n] : tensor<16x?xf32> -> tensor<?xf32>
  func.return %0 : tensor<?xf32>
}
// CHECK: torch-to-prim-symbolic-unsupported.mlir:19:3: 'torch.reshape' op: reshape [16, ?] to [?] merges or splits a symbolic extent that is not the outermost of its group
