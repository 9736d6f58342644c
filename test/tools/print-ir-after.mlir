// --print-ir-after-all / --print-ir-after / --print-ir-before print to stderr, with headers.
// RUN: llm-opt %s -p canonicalize,cse --print-ir-after-all -o %t.out 2>&1 | filecheck %s
// RUN: llm-opt %s -p canonicalize,cse --print-ir-after=cse -o %t.out 2>&1 \
// RUN:   | filecheck %s --check-prefix=ONE
// RUN: llm-opt %s -p canonicalize,cse,dce --print-ir-after cse,dce -o %t.out 2>&1 \
// RUN:   | filecheck %s --check-prefix=TWO
// RUN: llm-opt %s -p canonicalize,cse --print-ir-before=cse -o %t.out 2>&1 \
// RUN:   | filecheck %s --check-prefix=BEFORE
// RUN: llm-opt %s -p canonicalize,cse --print-ir-after-all 2>/dev/null \
// RUN:   | filecheck %s --check-prefix=STDOUT
// RUN: not llm-opt %s -p cse --print-ir-after=cs 2>&1 | filecheck %s --check-prefix=BAD

func.func @f(%a: i32) -> (i32, i32) {
  %zero = arith.constant 0 : i32
  %r = arith.addi %a, %zero : i32
  %x = arith.muli %r, %r : i32
  %y = arith.muli %r, %r : i32
  func.return %x, %y : i32, i32
}

// CHECK:      // -----// IR Dump After canonicalize //----- //
// CHECK-NEXT: builtin.module {
// CHECK:        %x = arith.muli %a, %a : i32
// CHECK-NEXT:   %y = arith.muli %a, %a : i32
// CHECK:      // -----// IR Dump After cse //----- //
// CHECK-NEXT: builtin.module {
// CHECK:        %x = arith.muli %a, %a : i32
// CHECK-NEXT:   func.return %x, %x : i32, i32
// CHECK-NOT:  IR Dump

// ONE-NOT:  IR Dump After canonicalize
// ONE:      // -----// IR Dump After cse //----- //
// ONE:        func.return %x, %x : i32, i32
// ONE-NOT:  IR Dump

// TWO-NOT:  IR Dump After canonicalize
// TWO:      // -----// IR Dump After cse //----- //
// TWO:      // -----// IR Dump After dce //----- //

// BEFORE:      // -----// IR Dump Before cse //----- //
// BEFORE:        %y = arith.muli %a, %a : i32
// BEFORE-NOT:  IR Dump

// STDOUT-NOT: IR Dump
// STDOUT:     func.return %x, %x : i32, i32

// BAD: llm-opt: error: --print-ir-after: unknown pass 'cs'; did you mean {{.*}}'cse'
