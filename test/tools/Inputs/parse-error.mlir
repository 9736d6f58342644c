// An input with a type error, read by diagnostics.mlir.

func.func @f(%a: i32) -> i32 {
  %r = arith.addi %a, %a : i64
  func.return %r : i32
}
