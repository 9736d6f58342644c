// ex-strength-reduce rewrites x * 2.0 into x + x inside loop.kernel ops, and nothing else.
// RUN: llm-opt %s -p ex-strength-reduce | filecheck %s
// The same pass loaded from its file, with the installed plugins switched off:
// RUN: env LLMOPT_NO_PLUGINS=1 llm-opt %s --load-plugin %src/llmopt_example/strength_reduce.py \
// RUN:   -p ex-strength-reduce | filecheck %s
// It keeps every result bit for bit:
// RUN: llm-opt %s -p ex-strength-reduce,canonicalize --check-numerics 2>&1 >/dev/null \
// RUN:   | filecheck %s --check-prefix=NUMERICS

func.func @forward(%x: memref<4x64xf32>, %out: memref<4x64xf32>) -> memref<4x64xf32> {
  loop.kernel @scale (%a = %x : memref<4x64xf32>, %o = %out : memref<4x64xf32>) {
    %two = arith.constant 2.000000e+00 : f32
    %three = arith.constant 3.000000e+00 : f32
    loop.for %i = 0 to 4 {
      loop.for %j = 0 to 64 {
        %v = loop.load %a[%i, %j] : memref<4x64xf32>
        %d = arith.mulf %v, %two : f32
        %e = arith.mulf %two, %d : f32
        %t = arith.mulf %e, %three : f32
        loop.store %t, %o[%i, %j] : memref<4x64xf32>
      }
    }
  }
  func.return %out : memref<4x64xf32>
}

// CHECK:      %[[V:.*]] = loop.load
// CHECK-NEXT: %[[D:.*]] = arith.addf %[[V]], %[[V]] : f32
// CHECK-NEXT: %[[E:.*]] = arith.addf %[[D]], %[[D]] : f32
// CHECK-NEXT: arith.mulf %[[E]], %{{.*}} : f32
// CHECK-NOT:  arith.mulf

// NUMERICS:      ex-strength-reduce {{.*}} max abs 0.000e+00 {{.*}} ok
// NUMERICS-NEXT: canonicalize {{.*}} ok
