// RUN: llm-opt %s | llm-opt | filecheck %s
// RUN: llm-opt %s --print-op-generic | llm-opt | filecheck %s

func.func @f(%x: memref<1x8x256xf32>, %w: memref<256xf32>) -> memref<1x8x256xf32> {
  %out = memref.alloc() : memref<1x8x256xf32>
  loop.kernel @rms (%a = %x : memref<1x8x256xf32>, %b = %w : memref<256xf32>, %o = %out : memref<1x8x256xf32>) {
    loop.for %i0 = 0 to 1 {
      loop.for %i1 = 0 to 8 {
        %s = loop.reduce add %k = 0 to 256 : f32 {
          %v = loop.load %a[%i0, %i1, %k] : memref<1x8x256xf32>
          %sq = arith.mulf %v, %v : f32
          loop.yield %sq : f32
        }
        loop.for %i2 = 0 to 256 {
          %v = loop.load %a[%i0, %i1, %i2] : memref<1x8x256xf32>
          %wv = loop.load %b[(%i2 + 3) mod 256] : memref<256xf32>
          %edge = loop.load %b[%i2 + 8] clamp {note = "ragged"} : memref<256xf32>
          %m = arith.mulf %v, %s : f32
          %r = arith.mulf %m, %wv : f32
          loop.store %r, %o[%i0, %i1, %i2] : memref<1x8x256xf32>
        }
      }
    }
  }
  func.return %out : memref<1x8x256xf32>
}

// CHECK: loop.kernel @rms (%{{.*}} = %x : memref<1x8x256xf32>, %{{.*}} = %w : memref<256xf32>, %{{.*}} = %out : memref<1x8x256xf32>) {
// CHECK-NEXT: loop.for %[[I0:.*]] = 0 to 1 {
// CHECK-NEXT: loop.for %[[I1:.*]] = 0 to 8 {
// CHECK-NEXT: %[[S:.*]] = loop.reduce add %[[K:.*]] = 0 to 256 : f32 {
// CHECK-NEXT: loop.load %{{.*}}[%[[I0]], %[[I1]], %[[K]]] : memref<1x8x256xf32>
// CHECK: loop.yield %{{.*}} : f32
// CHECK: loop.for %[[I2:.*]] = 0 to 256 {
// CHECK: loop.load %{{.*}}[((%[[I2]] + 3) mod 256)] : memref<256xf32>
// CHECK-NEXT: loop.load %{{.*}}[(%[[I2]] + 8)] clamp {note = "ragged"} : memref<256xf32>
// CHECK: loop.store %{{.*}}, %{{.*}}[%[[I0]], %[[I1]], %[[I2]]] : memref<1x8x256xf32>

// Empty bodies print as empty braces, which parse back (not as a block label with the
// induction variable, which the loop syntax names already).
func.func @empty_bodies(%x: memref<4xf32>) {
  loop.kernel @nothing (%a = %x : memref<4xf32>) {
  }
  loop.kernel @idle (%a = %x : memref<4xf32>) {
    loop.for %i = 0 to 4 {
    }
  }
  func.return
}
// CHECK-LABEL: func.func @empty_bodies
// CHECK:       loop.kernel @nothing (%{{.*}} = %{{.*}} : memref<4xf32>) {
// CHECK-NEXT:  }
// CHECK:       loop.for %{{.*}} = 0 to 4 {
// CHECK-NEXT:  }
