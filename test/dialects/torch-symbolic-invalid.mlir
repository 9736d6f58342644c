// RUN: llm-opt %s --split-input-file --verify-diagnostics | filecheck %s

// A ? extent needs a symbol declared by the function.
func.func @no_symbol(%x: tensor<1x?x16xf32>) -> tensor<1x?x16xf32> {
  %0 = torch.neg %x : tensor<1x?x16xf32> -> tensor<1x?x16xf32>
  func.return %0 : tensor<1x?x16xf32>
}
// CHECK: ? extents need a symbol declared by the enclosing function (an index argument with llmopt.symbol and llmopt.max)

// -----

func.func @symbol_not_index(%x: tensor<1x?x16xf32> {llmopt.dynamic = ["seq"]}, %seq: i64 {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<1x?x16xf32> {
  func.return %x : tensor<1x?x16xf32>
}
// CHECK: symbol 'seq' (argument #1) must have type index, got i64

// -----

func.func @no_max(%x: tensor<1x?x16xf32> {llmopt.dynamic = ["seq"]}, %seq: index {llmopt.symbol = "seq"}) -> tensor<1x?x16xf32> {
  func.return %x : tensor<1x?x16xf32>
}
// CHECK: symbol 'seq' (argument #1) needs llmopt.max, a positive integer (the largest value it takes)

// -----

func.func @min_above_max(%x: tensor<1x?x16xf32> {llmopt.dynamic = ["seq"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 8, llmopt.min = 9}) -> tensor<1x?x16xf32> {
  func.return %x : tensor<1x?x16xf32>
}
// CHECK: symbol 'seq' (argument #1): llmopt.min must be an integer in [1, 8]

// -----

func.func @twice(%a: index {llmopt.symbol = "seq", llmopt.max = 8}, %b: index {llmopt.symbol = "seq", llmopt.max = 8}) {
  func.return
}
// CHECK: symbol 'seq' (argument #1) is already declared by argument #0

// -----

func.func @unbound_argument(%x: tensor<1x?x16xf32> {llmopt.input = "x"}, %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<1x?x16xf32> {
  func.return %x : tensor<1x?x16xf32>
}
// CHECK: argument 'x' of type tensor<1x?x16xf32> needs llmopt.dynamic: the symbol each ? extent equals

// -----

func.func @unknown_symbol(%x: tensor<1x?x16xf32> {llmopt.input = "x", llmopt.dynamic = ["len"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<1x?x16xf32> {
  %0 = torch.neg %x : tensor<1x?x16xf32> -> tensor<1x?x16xf32>
  func.return %0 : tensor<1x?x16xf32>
}
// CHECK: function argument 'x' has ? extents that llmopt.dynamic does not bind to declared symbols

// -----

func.func @dynamic_count(%x: tensor<?x?xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<?x?xf32> {
  func.return %x : tensor<?x?xf32>
}
// CHECK: argument 'x' of type tensor<?x?xf32>: llmopt.dynamic names 1 symbol(s) for 2 ? extent(s)

// -----

func.func @reshape_needs_size(%x: tensor<1x?x16xf32> {llmopt.dynamic = ["seq"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<?xf32> {
  %0 = torch.reshape %x : tensor<1x?x16xf32> -> tensor<?xf32>
  func.return %0 : tensor<?xf32>
}
// CHECK: expected 1 index operand(s), one per ? extent of the result, got 0

// -----

func.func @static_slice_of_symbolic(%x: tensor<1x?x16xf32> {llmopt.dynamic = ["seq"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<1x4x16xf32> {
  %0 = torch.slice %x {dim = 1, start = 0, end = 4, step = 1} : tensor<1x?x16xf32> -> tensor<1x4x16xf32>
  func.return %0 : tensor<1x4x16xf32>
}
// CHECK: slice along the ? extent of dim 1 takes its bounds as index operands, not properties

// -----

func.func @slice_one_bound(%x: tensor<1x?x16xf32> {llmopt.dynamic = ["seq"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<1x?x16xf32> {
  %0 = torch.slice %x [%seq] {dim = 1, step = 1} : tensor<1x?x16xf32> -> tensor<1x?x16xf32>
  func.return %0 : tensor<1x?x16xf32>
}
// CHECK: slice takes its bounds either as properties or as two index operands [start, end], got 1 index operand(s)

// -----

func.func @symbolic_against_static(%x: tensor<1x?x16xf32> {llmopt.dynamic = ["seq"]}, %y: tensor<1x4x16xf32>, %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<1x4x16xf32> {
  %0 = torch.add %x, %y : tensor<1x?x16xf32>, tensor<1x4x16xf32> -> tensor<1x4x16xf32>
  func.return %0 : tensor<1x4x16xf32>
}
// CHECK: shapes [1, ?, 16] and [1, 4, 16] do not broadcast (extents [?, 4] at result dim 1)

// -----

func.func @arange_without_end(%seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<8xi64> {
  %0 = torch.arange [%seq] {start = 0, step = 1} : tensor<8xi64>
  func.return %0 : tensor<8xi64>
}
// CHECK: arange without end has a ? extent (an index operand)

// -----

func.func @no_index_operands(%x: tensor<1x?x16xf32> {llmopt.dynamic = ["seq"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> tensor<1x?x16xf32> {
  %0 = torch.neg %x [%seq] : tensor<1x?x16xf32> -> tensor<1x?x16xf32>
  func.return %0 : tensor<1x?x16xf32>
}
// CHECK: torch.neg takes no index operands
