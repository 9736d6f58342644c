// --ir-dump-dir writes the input and the IR after every pass to numbered files.
// RUN: rm -rf %t && llm-opt %s -p canonicalize,cse --ir-dump-dir %t -o %t.out
// RUN: ls %t | filecheck %s --check-prefix=FILES
// RUN: filecheck %s --check-prefix=INPUT --input-file %t/00-input.mlir
// RUN: filecheck %s --check-prefix=CANON --input-file %t/01-canonicalize.mlir
// RUN: filecheck %s --check-prefix=CSE --input-file %t/02-cse.mlir
// The dumped files are valid input again.
// RUN: llm-opt %t/01-canonicalize.mlir -p cse | filecheck %s --check-prefix=CSE
// With --split-input-file, every chunk gets its own directory.
// RUN: rm -rf %t.split && llm-opt %s --split-input-file -p cse --ir-dump-dir %t.split -o %t.out
// RUN: ls %t.split %t.split/chunk-1 | filecheck %s --check-prefix=SPLIT

func.func @f(%a: i32) -> (i32, i32) {
  %zero = arith.constant 0 : i32
  %r = arith.addi %a, %zero : i32
  %x = arith.muli %r, %r : i32
  %y = arith.muli %r, %r : i32
  func.return %x, %y : i32, i32
}

// -----

func.func @g() {
  func.return
}

// FILES:      00-input.mlir
// FILES-NEXT: 01-canonicalize.mlir
// FILES-NEXT: 02-cse.mlir

// INPUT: %r = arith.addi %a, %zero : i32

// CANON-NOT: arith.addi
// CANON:     %y = arith.muli %a, %a : i32

// CSE-NOT: %y
// CSE:     func.return %x, %x : i32, i32

// SPLIT:      chunk-0
// SPLIT-NEXT: chunk-1
// SPLIT:      00-input.mlir
// SPLIT-NEXT: 01-cse.mlir
