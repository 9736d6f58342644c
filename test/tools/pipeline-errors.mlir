// Bad pipelines give one clean error line each and a non-zero exit, never a traceback.
// RUN: not llm-opt %s -p canonicalise,cse 2>&1 | filecheck %s --check-prefix=UNKNOWN
// RUN: not llm-opt %s -p 'cse,lower-to-cuda{tiles=4}' 2>&1 | filecheck %s --check-prefix=OPTION
// RUN: not llm-opt %s -p 'canonicalize{bogus=1}' 2>&1 | filecheck %s --check-prefix=PASSOPT
// RUN: not llm-opt %s -p 'cse dce' 2>&1 | filecheck %s --check-prefix=SYNTAX
// RUN: not llm-opt %s -t no-such-target 2>&1 | filecheck %s --check-prefix=TARGET
// RUN: not llm-opt %S/no-such-file.mlir 2>&1 | filecheck %s --check-prefix=NOFILE

func.func @f() {
  func.return
}

// UNKNOWN:     llm-opt: error: unknown pass 'canonicalise'; did you mean {{.*}}'canonicalize'
// UNKNOWN-NOT: Traceback

// OPTION: llm-opt: error: pipeline 'lower-to-cuda' has no option 'tiles' (options: arch, cluster, roles, tensor_copies, warp_specialize)

// PASSOPT: llm-opt: error: invalid options for pass 'canonicalize': {{.*}}"bogus"

// SYNTAX:      llm-opt: error: Error parsing pass pipeline specification:
// SYNTAX:      cse dce
// SYNTAX-NEXT:    ^

// TARGET: llm-opt: error: argument -t/--target: invalid choice: 'no-such-target' (choose from {{.*}}cuda

// NOFILE: llm-opt: error: cannot open input file '{{.*}}no-such-file.mlir': no such file
