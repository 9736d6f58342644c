// RUN: llm-opt %s -p 'fuse-kernels{recompute_limit=0}' | filecheck %s
// RUN: llm-opt %s -p fuse-kernels --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// Rotary tables: a producer computing a scalar (the position as f32) in front of its loop
// nest fuses into both consumers, the scalar recomputed where the value is used.
func.func @forward(%inv: memref<32xf32>, %pos: index) -> (memref<64xf32>, memref<64xf32>) {
  %t = memref.alloc() : memref<64xf32>
  loop.kernel @freqs (%o = %t : memref<64xf32>, %w = %inv : memref<32xf32>, %p = %pos : index) {
    %i = arith.index_cast %p : index to i64
    %f = arith.sitofp %i : i64 to f32
    loop.for %k = 0 to 64 {
      %v = loop.load %w[(%k mod 32)] : memref<32xf32>
      %m = arith.mulf %v, %f : f32
      loop.store %m, %o[%k] : memref<64xf32>
    }
  }
  %c = memref.alloc() : memref<64xf32>
  loop.kernel @cosines (%o = %c : memref<64xf32>, %x = %t : memref<64xf32>) {
    loop.for %k = 0 to 64 {
      %v = loop.load %x[%k] : memref<64xf32>
      %r = math.cos %v : f32
      loop.store %r, %o[%k] : memref<64xf32>
    }
  }
  %s = memref.alloc() : memref<64xf32>
  loop.kernel @sines (%o = %s : memref<64xf32>, %x = %t : memref<64xf32>) {
    loop.for %k = 0 to 64 {
      %v = loop.load %x[%k] : memref<64xf32>
      %r = math.sin %v : f32
      loop.store %r, %o[%k] : memref<64xf32>
    }
  }
  func.return %c, %s : memref<64xf32>, memref<64xf32>
}

// CHECK-NOT:   loop.kernel @freqs
// CHECK:       loop.kernel @cosines (%o = %c : memref<64xf32>, %0 = %inv : memref<32xf32>, %pos_1 = %pos : index) {
// CHECK-NEXT:    %i = arith.index_cast %pos_1 : index to i64
// CHECK-NEXT:    %f = arith.sitofp %i : i64 to f32
// CHECK:           %m = arith.mulf %v, %f : f32
// CHECK-NEXT:      %r = math.cos %m : f32
// CHECK:       loop.kernel @sines (%o = %s : memref<64xf32>, %0 = %inv : memref<32xf32>, %pos_1 = %pos : index) {
// CHECK:           %r = math.sin %m : f32
// CHECK-NOT:   loop.kernel

// NUM: fuse-kernels {{.*}} ok
