// A crashing pass, or one that leaves invalid IR, is an internal error: the message names
// the pass, and a reproducer (the input plus the command) is written.
// RUN: not llm-opt %s --load-plugin %S/Inputs/plugin_passes.py -p canonicalize,test-crash \
// RUN:   --crash-reproducer %t.repro.mlir 2>&1 | filecheck %s --check-prefix=CRASH
// RUN: filecheck %s --check-prefix=REPRO --input-file %t.repro.mlir
// The reproducer reproduces.
// RUN: not llm-opt %t.repro.mlir --load-plugin %S/Inputs/plugin_passes.py -p test-crash \
// RUN:   --crash-reproducer %t.repro2.mlir 2>&1 | filecheck %s --check-prefix=CRASH
// RUN: not llm-opt %s --load-plugin %S/Inputs/plugin_passes.py -p cse,test-break-types,dce \
// RUN:   --crash-reproducer %t.repro3.mlir 2>&1 | filecheck %s --check-prefix=INVALID

func.func @f(%a: i32) -> i32 {
  func.return %a : i32
}

// CRASH:      llm-opt: internal error in pass 'test-crash': RuntimeError: the test-crash pass crashed on purpose
// CRASH-NEXT: llm-opt: note: raised at {{.*}}plugin_passes.py:{{[0-9]+}}
// CRASH-NEXT: llm-opt: note: reproducer written to {{.*}}repro{{2?}}.mlir
// CRASH-NOT:  Traceback

// REPRO:      // llm-opt crash reproducer for {{.*}}internal-error.mlir
// REPRO-NEXT: // internal error in pass 'test-crash': RuntimeError: the test-crash pass crashed on purpose
// REPRO-NEXT: // {{RUN}}: llm-opt %s -p canonicalize,test-crash --load-plugin {{.*}}plugin_passes.py
// REPRO:      // RuntimeError: the test-crash pass crashed on purpose
// REPRO:      func.func @f(%a: i32) -> i32 {

// INVALID:      llm-opt: internal error: PassVerificationError: the IR does not verify after pass 'test-break-types': Expected arguments to have the same types as the function output types: expected [i64], got [i32]
// INVALID:        "func.return"(%a) : (i32) -> ()
// INVALID-NEXT:   ^^^^^^^^^^^^^
// INVALID:      llm-opt: note: reproducer written to {{.*}}repro3.mlir
