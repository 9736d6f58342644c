// RUN: llm-opt %s -p hoist-reduce-factors | filecheck %s
// RUN: llm-opt %s -p hoist-reduce-factors,canonicalize,cse --check-numerics --check-numerics-lengths 3 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// Attention's P·V over a symbolic number of keys: the sum runs to the runtime length, and the
// softmax denominator still leaves it (the bound is not a factor: it stays on the loop).

func.func @forward(%p: memref<2x?x?xf32> {llmopt.input = "p", llmopt.dynamic = ["seq", "seq"]},
                   %l: memref<2x?x1xf32> {llmopt.input = "l", llmopt.dynamic = ["seq"]},
                   %v: memref<2x?x16xf32> {llmopt.input = "v", llmopt.dynamic = ["seq"]},
                   %seq: index {llmopt.symbol = "seq", llmopt.max = 48}) -> memref<2x?x16xf32> {
  %o = memref.alloc(%seq) : memref<2x?x16xf32>
  loop.kernel @pv (%out = %o : memref<2x?x16xf32>, %pp = %p : memref<2x?x?xf32>, %ll = %l : memref<2x?x1xf32>, %vv = %v : memref<2x?x16xf32>, %n = %seq : index) {
    loop.for %h = 0 to 2 {
      loop.for %i = 0 to %n max 48 {
        loop.for %d = 0 to 16 {
          %den = loop.load %ll[%h, %i, 0] : memref<2x?x1xf32>
          %s = loop.reduce add %k = 0 to %n max 48 : f32 {
            %a = loop.load %pp[%h, %i, %k] : memref<2x?x?xf32>
            %q = arith.divf %a, %den : f32
            %b = loop.load %vv[%h, %k, %d] : memref<2x?x16xf32>
            %t = arith.mulf %q, %b : f32
            loop.yield %t : f32
          }
          loop.store %s, %out[%h, %i, %d] : memref<2x?x16xf32>
        }
      }
    }
  }
  func.return %o : memref<2x?x16xf32>
}

// CHECK-LABEL: loop.kernel @pv
// CHECK:         %den = loop.load %ll
// CHECK-NEXT:    %s = loop.reduce add %k = 0 to %n max 48 : f32 {
// CHECK-NEXT:      %a = loop.load %pp
// CHECK-NEXT:      %b = loop.load %vv
// CHECK-NEXT:      %{{.*}} = arith.mulf %a, %b : f32
// CHECK-NEXT:      loop.yield %{{.*}} : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[Q:.*]] = arith.divf %s, %den : f32
// CHECK-NEXT:    loop.store %[[Q]], %out
// NUM: // numerics: tolerance {{.*}} at seq = {{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}{{$}}
// NUM: hoist-reduce-factors {{.*}} ok
