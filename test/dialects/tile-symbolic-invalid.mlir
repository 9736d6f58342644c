// RUN: llm-opt %s --split-input-file --verify-diagnostics --parsing-diagnostics | filecheck %s

func.func @grid_y(%x: memref<?xf32> {llmopt.input = "x", llmopt.dynamic = ["n"]},
                  %n: index {llmopt.symbol = "n", llmopt.max = 8}) {
  tile.kernel @k grid [1, %n max 8, 1] block [32, 1, 1] (%a = %x : memref<?xf32>) {
  }
  func.return
}
// CHECK: only the grid's x extent may be a runtime value

// -----

func.func @dims(%n: index {llmopt.symbol = "n", llmopt.max = 8}) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%m = %n : index) {
    "tile.forall"(%m) <{extents = array<i64: 8, 4>, dynamic = array<i64: 2>, mapping = "threads"}> ({
    ^bb0(%i: index, %j: index):
    }) : (index) -> ()
  }
  func.return
}
// CHECK: dynamic dims [2] must be increasing positions of the 2 extents, one per size operand
