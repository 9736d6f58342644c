// Diagnostics point at the op: a pass that cannot handle an op names it, its source position
// and line, and the pass; verifier errors of llmopt's dialects say what was expected; an op
// used before its definition, an op rejected while parsing and an out-of-range integer are
// located too. None of them is an internal error or a traceback.
// RUN: not llm-opt %s -p lower-to-cuda 2>&1 | filecheck %s --check-prefix=PASS
// RUN: not llm-opt %S/Inputs/use-before-def.mlir 2>&1 | filecheck %s --check-prefix=DOM
// RUN: not llm-opt %S/Inputs/rejected-at-parse.mlir 2>&1 | filecheck %s --check-prefix=CTOR
// RUN: sed -e 's/to 8 :/to 99999999999999999999 :/' %s | not llm-opt 2>&1 | filecheck %s --check-prefix=RANGE
// RUN: not llm-opt %S/Inputs/unsigned-reduce.mlir 2>&1 | filecheck %s --check-prefix=VERIFY

func.func @f(%x: memref<8xi8>, %y: memref<8xi8>) {
  loop.kernel @shuffle_i8 (%a = %x : memref<8xi8>, %b = %y : memref<8xi8>) {
    %s = loop.reduce add %k = 0 to 8 : i8 {
      %v = loop.load %a[%k] : memref<8xi8>
      loop.yield %v : i8
    }
    loop.store %s, %b[0] : memref<8xi8>
  }
  func.return
}

// The cooperative reduction's warp shuffle of an i8 cannot be printed as CUDA: the error
// names the op that the shuffle was lowered from, in the input.
// PASS:      op-diagnostics.mlir:13:5: error: 'kernel.shuffle_xor' op: cannot shuffle i8 (in pass 'kernel-to-cuda')
// PASS-NEXT:     %s = loop.reduce add %k = 0 to 8 : i8 {
// PASS-NEXT:     ^
// PASS-NOT:  internal error
// PASS-NOT:  Traceback

// DOM:      use-before-def.mlir:3:3: error: 'arith.addf' op operand #0 (%b) is used before its definition at {{.*}}use-before-def.mlir:4:3
// DOM-NEXT:   %c = arith.addf %b, %a : f32
// DOM-NEXT:   ^

// CTOR:      rejected-at-parse.mlir:3:3: error: 'arith.constant' op is invalid: Integer value 300 is out of range for type i8
// CTOR-NEXT:   %c = arith.constant 300 : i8
// CTOR-NEXT:   ^^

// RANGE:      stdin:13:36: error: integer 99999999999999999999 does not fit in 64 bits
// RANGE-NEXT:     %s = loop.reduce add %k = 0 to 99999999999999999999 : i8 {
// RANGE-NEXT:                                    ^^^^^^^^^^^^^^^^^^^^
// RANGE-NOT:  internal error

// VERIFY:      unsigned-reduce.mlir:4:5: error: 'loop.reduce' op a reduction yields a float, signless integer or index scalar, got ui8
// VERIFY-NEXT:     %s = loop.reduce add %k = 0 to 8 : ui8 {
// VERIFY-NEXT:     ^
