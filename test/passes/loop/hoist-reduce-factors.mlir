// RUN: llm-opt %s --split-input-file -p hoist-reduce-factors | filecheck %s
// RUN: llm-opt %s --split-input-file -p hoist-reduce-factors,canonicalize,cse --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// Factors that are the same for every term of a sum leave it: attention's P·V divides each
// term by the softmax denominator, loaded outside the sum; afterwards the sum is of p·v
// and is divided once.

// P·V with the softmax denominator inside the sum, as fuse-kernels leaves it.
func.func @forward(%p: memref<2x8x8xf32>, %l: memref<2x8x1xf32>, %v: memref<2x8x16xf32>) -> memref<2x8x16xf32> {
  %o = memref.alloc() : memref<2x8x16xf32>
  loop.kernel @pv (%out = %o : memref<2x8x16xf32>, %pp = %p : memref<2x8x8xf32>, %ll = %l : memref<2x8x1xf32>, %vv = %v : memref<2x8x16xf32>) {
    loop.for %h = 0 to 2 {
      loop.for %i = 0 to 8 {
        loop.for %d = 0 to 16 {
          %den = loop.load %ll[%h, %i, 0] : memref<2x8x1xf32>
          %s = loop.reduce add %k = 0 to 8 : f32 {
            %a = loop.load %pp[%h, %i, %k] : memref<2x8x8xf32>
            %q = arith.divf %a, %den : f32
            %b = loop.load %vv[%h, %k, %d] : memref<2x8x16xf32>
            %t = arith.mulf %q, %b : f32
            loop.yield %t : f32
          }
          loop.store %s, %out[%h, %i, %d] : memref<2x8x16xf32>
        }
      }
    }
  }
  func.return %o : memref<2x8x16xf32>
}

// CHECK-LABEL: loop.kernel @pv
// CHECK:         %den = loop.load %ll
// CHECK-NEXT:    %s = loop.reduce add %k = 0 to 8 : f32 {
// CHECK-NEXT:      %a = loop.load %pp
// CHECK-NEXT:      %b = loop.load %vv
// CHECK-NEXT:      %{{.*}} = arith.mulf %a, %b : f32
// CHECK-NEXT:      loop.yield %{{.*}} : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[Q:.*]] = arith.divf %s, %den : f32
// CHECK-NEXT:    loop.store %[[Q]], %out
// NUM: hoist-reduce-factors {{.*}} ok

// -----

// A scale multiplied in (a scaled dot product) leaves too; the body's own divisor stays.
func.func @forward(%x: memref<4x8xf32>, %y: memref<4x8xf32>, %z: memref<8xf32>, %c: memref<4xf32>) -> memref<4xf32> {
  %o = memref.alloc() : memref<4xf32>
  loop.kernel @dot (%out = %o : memref<4xf32>, %xx = %x : memref<4x8xf32>, %yy = %y : memref<4x8xf32>, %zz = %z : memref<8xf32>, %cc = %c : memref<4xf32>) {
    %half = arith.constant 5.000000e-01 : f32
    loop.for %i = 0 to 4 {
      %sc = loop.load %cc[%i] : memref<4xf32>
      %s = loop.reduce add %k = 0 to 8 : f32 {
        %a = loop.load %xx[%i, %k] : memref<4x8xf32>
        %b = loop.load %yy[%i, %k] : memref<4x8xf32>
        %n = loop.load %zz[%k] : memref<8xf32>
        %e = math.exp %n : f32
        %ab = arith.mulf %a, %sc : f32
        %abh = arith.mulf %half, %ab : f32
        %t = arith.mulf %abh, %b : f32
        %u = arith.divf %t, %e : f32
        loop.yield %u : f32
      }
      loop.store %s, %out[%i] : memref<4xf32>
    }
  }
  func.return %o : memref<4xf32>
}

// CHECK-LABEL: loop.kernel @dot
// CHECK:         %s = loop.reduce add %k = 0 to 8 : f32 {
// CHECK:           %e = math.exp %n : f32
// CHECK-NEXT:      %[[AB:.*]] = arith.mulf %a, %b : f32
// CHECK-NEXT:      %[[U:.*]] = arith.divf %[[AB]], %e : f32
// CHECK-NEXT:      loop.yield %[[U]] : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[H:.*]] = arith.mulf %s, %half : f32
// CHECK-NEXT:    %[[S:.*]] = arith.mulf %[[H]], %sc : f32
// CHECK-NEXT:    loop.store %[[S]], %out[%i]
// NUM: hoist-reduce-factors {{.*}} ok

// -----

// Left alone: a max reduction, a sum with an addition on the way, and a sum whose every
// factor is invariant (nothing of the body would be left to sum).
func.func @forward(%x: memref<4x8xf32>, %c: memref<4xf32>) -> memref<4xf32> {
  %o = memref.alloc() : memref<4xf32>
  loop.kernel @other (%out = %o : memref<4xf32>, %xx = %x : memref<4x8xf32>, %cc = %c : memref<4xf32>) {
    loop.for %i = 0 to 4 {
      %sc = loop.load %cc[%i] : memref<4xf32>
      %m = loop.reduce max %k = 0 to 8 : f32 {
        %a = loop.load %xx[%i, %k] : memref<4x8xf32>
        %t = arith.mulf %a, %sc : f32
        loop.yield %t : f32
      }
      %s = loop.reduce add %k = 0 to 8 : f32 {
        %a = loop.load %xx[%i, %k] : memref<4x8xf32>
        %t = arith.mulf %a, %sc : f32
        %u = arith.addf %t, %sc : f32
        loop.yield %u : f32
      }
      %n = loop.reduce add %k = 0 to 8 : f32 {
        %t = arith.mulf %sc, %sc : f32
        loop.yield %t : f32
      }
      %ms = arith.addf %m, %s : f32
      %r = arith.addf %ms, %n : f32
      loop.store %r, %out[%i] : memref<4xf32>
    }
  }
  func.return %o : memref<4xf32>
}

// CHECK-LABEL: loop.kernel @other
// CHECK:         %m = loop.reduce max
// CHECK-NEXT:      %a = loop.load
// CHECK-NEXT:      %t = arith.mulf %a, %sc : f32
// CHECK:         %s = loop.reduce add
// CHECK-NEXT:      %a_1 = loop.load
// CHECK-NEXT:      %t_1 = arith.mulf %a_1, %sc : f32
// CHECK-NEXT:      %u = arith.addf %t_1, %sc : f32
// CHECK:         %n = loop.reduce add
// CHECK-NEXT:      %t_2 = arith.mulf %sc, %sc : f32
// CHECK-NEXT:      loop.yield %t_2 : f32
