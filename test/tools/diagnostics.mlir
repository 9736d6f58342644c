// Parse and verifier errors point at the source and exit non-zero without a traceback;
// --verify-diagnostics prints them and exits 0.
// RUN: not llm-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=VERIFY
// RUN: llm-opt %s --split-input-file --verify-diagnostics | filecheck %s --check-prefix=DIAG
// RUN: not llm-opt %S/Inputs/parse-error.mlir 2>&1 | filecheck %s --check-prefix=PARSE
// RUN: llm-opt %S/Inputs/parse-error.mlir --parsing-diagnostics | filecheck %s --check-prefix=PARSEDIAG
// RUN: llm-opt %S/Inputs/parse-error.mlir --verify-diagnostics | filecheck %s --check-prefix=PARSEDIAG

func.func @wrong_result(%a: i32) -> i64 {
  %c = arith.constant 0 : i32
  %r = arith.addi %a, %c : i32
  // VERIFY: diagnostics.mlir:[[# @LINE + 1]]:3: error: 'func.return' op Expected arguments to have the same types as the function output types: expected [i64], got [i32]
  func.return %r : i32
}

// -----

func.func @fine(%a: i32) -> i32 {
  func.return %a : i32
}

// VERIFY-NEXT:   func.return %r : i32
// VERIFY-NEXT:   ^
// VERIFY-NOT:  Traceback

// DIAG:      Expected arguments to have the same types as the function output types
// DIAG:      "func.return"(%r) : (i32) -> ()
// DIAG-NEXT: ^^^^^^^^^^^^^
// DIAG:      {{//}} {{-----}}
// DIAG:      func.func @fine(%a: i32) -> i32 {

// PARSE:      parse-error.mlir:4:19: error: operand is used with type i64, but has been previously used or defined with type i32
// PARSE-NEXT:   %r = arith.addi %a, %a : i64
// PARSE-NEXT:                   ^^
// PARSE-NOT:  Traceback

// PARSEDIAG:      parse-error.mlir:4:19
// PARSEDIAG-NEXT:   %r = arith.addi %a, %a : i64
// PARSEDIAG-NEXT:                   ^^
// PARSEDIAG-NEXT:                   operand is used with type i64
