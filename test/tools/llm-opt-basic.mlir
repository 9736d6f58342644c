// Round trip, a pass pipeline with xDSL's passes, stdin input, -o, and source locations.
// RUN: llm-opt %s | filecheck %s --check-prefix=ROUNDTRIP
// RUN: llm-opt %s -p canonicalize,cse | filecheck %s
// RUN: llm-opt %s -p canonicalize | llm-opt -p cse | filecheck %s
// RUN: llm-opt %s -p canonicalize,cse -o %t.mlir && filecheck %s --input-file %t.mlir
// RUN: llm-opt %s --print-debuginfo | filecheck %s --check-prefix=LOC
// RUN: llm-opt --version | filecheck %s --check-prefix=VERSION

func.func @fold(%a: i32) -> i32 {
  %zero = arith.constant 0 : i32
  %r = arith.addi %a, %zero : i32
  func.return %r : i32
}

func.func @cse(%a: i32, %b: i32) -> (i32, i32) {
  %x = arith.muli %a, %b : i32
  %y = arith.muli %a, %b : i32
  func.return %x, %y : i32, i32
}

// ROUNDTRIP:      func.func @fold(%a: i32) -> i32 {
// ROUNDTRIP-NEXT:   %zero = arith.constant 0 : i32
// ROUNDTRIP-NEXT:   %r = arith.addi %a, %zero : i32
// ROUNDTRIP-NEXT:   func.return %r : i32

// CHECK-LABEL: func.func @fold(%a: i32) -> i32 {
// CHECK-NEXT:    func.return %a : i32
// CHECK-LABEL: func.func @cse(%a: i32, %b: i32) -> (i32, i32) {
// CHECK-NEXT:    %x = arith.muli %a, %b : i32
// CHECK-NEXT:    func.return %x, %x : i32, i32

// LOC: %zero = arith.constant 0 : i32 loc("{{.*}}llm-opt-basic.mlir":10:3)
// LOC: func.return %x, %y : i32, i32 loc("{{.*}}llm-opt-basic.mlir":18:3)

// VERSION: llm-opt (llmopt), built on xDSL {{[0-9.]+}}
