// What prim-to-loop does not lower yet on symbolic programs: one located diagnostic, exit 1,
// no traceback.
// RUN: not llm-opt %s -p prim-to-loop 2>&1 | filecheck %s

// Concatenation along the symbolic axis: its second segment starts at a runtime offset.
func.func @forward(%a: tensor<?x4xf32> {llmopt.input = "a", llmopt.dynamic = ["seq"]},
                   %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<?x4xf32> {
  %n = arith.addi %seq, %seq : index
  %0 = prim.index_map (%a, %a) concat 0 [(d0, d1)[s0] -> (d0, d1), (d0, d1)[s0] -> (d0 - s0, d1)] symbols(%seq) sizes(%n) : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  func.return %0 : tensor<?x4xf32>
}

// CHECK:      prim-to-loop-symbolic-unsupported.mlir:9:3: error: 'prim.index_map' op: a concat along a ? extent is not lowered to Loop IR yet (in pass 'prim-to-loop')
// CHECK-NEXT:   %0 = prim.index_map (%a, %a) concat 0
// CHECK-NOT:  Traceback

