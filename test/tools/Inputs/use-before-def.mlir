// An operand used before the op that defines it (xDSL's verifier does not check dominance).
func.func @f(%a: f32) -> f32 {
  %c = arith.addf %b, %a : f32
  %b = arith.mulf %a, %a : f32
  func.return %c : f32
}
