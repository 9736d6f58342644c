// An op whose constructor rejects it while it is parsed: the error points at the op.
func.func @f() -> i8 {
  %c = arith.constant 300 : i8
  func.return %c : i8
}
