// Symbolic extents stop at Tensor IR for now: prim-to-loop (and every lowering after it)
// rejects them with one diagnostic at the first op that has one, exit 1, no traceback.
// RUN: not llm-opt %s -p prim-to-loop 2>&1 | filecheck %s
// RUN: not llm-opt %s -p loop-to-tile 2>&1 | filecheck %s --check-prefix=TILE

func.func @forward(%x: tensor<1x?x16xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                   %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<1x1x16xf32> {
  %0 = prim.reduce add %x dims [1] : tensor<1x?x16xf32> -> tensor<1x1x16xf32>
  func.return %0 : tensor<1x1x16xf32>
}

// CHECK:      prim-to-loop-symbolic.mlir:8:3: error: 'prim.reduce' op: symbolic extents are not lowered below Tensor IR yet (prim-to-loop takes static shapes: capture or write the program for one length) (in pass 'prim-to-loop')
// CHECK-NEXT:   %0 = prim.reduce add %x dims [1] : tensor<1x?x16xf32> -> tensor<1x1x16xf32>
// CHECK-NEXT:   ^
// CHECK-NOT:  Traceback

// TILE: error: 'prim.reduce' op: symbolic extents are not lowered below Tensor IR yet (loop-to-tile takes static shapes
