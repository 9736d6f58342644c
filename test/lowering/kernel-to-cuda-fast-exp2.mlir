// RUN: llm-opt %s -p kernel-to-cuda -t cuda | filecheck %s
// RUN: llm-opt %s -p kernel-to-cuda --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// An f32 exp2 that may approximate (fastmath afn) is the bare hardware exponential,
// ex2.approx.ftz: exp2f would wrap it in a fix-up for results below 2^-126. Without the
// flag, or in f64, exp2 stays the math library's.
func.func @main(%x: memref<64xf32>, %d: memref<64xf64>) -> memref<64xf32> {
  %y = memref.alloc() : memref<64xf32>
  kernel.launch @ex grid [1, 1, 1] block [64, 1, 1] smem 0 (%x, %d, %y) : memref<64xf32>, memref<64xf64>, memref<64xf32>
  func.return %y : memref<64xf32>
}
kernel.func @ex(%x: memref<64xf32>, %d: memref<64xf64>, %y: memref<64xf32>) block [64, 1, 1] {
  %tid = kernel.thread_id x
  %v = kernel.load %x[%tid] : memref<64xf32>
  %fast = math.exp2 %v fastmath<afn> : f32
  %exact = math.exp2 %v : f32
  %all = math.exp2 %exact fastmath<fast> : f32
  %w = kernel.load %d[%tid] : memref<64xf64>
  %wide = math.exp2 %w fastmath<afn> : f64
  %wf = arith.truncf %wide : f64 to f32
  %s1 = arith.addf %fast, %all : f32
  %s = arith.addf %s1, %wf : f32
  kernel.store %s, %y[%tid] : memref<64xf32>
  kernel.return
}

// CHECK:      float fast;
// CHECK-NEXT: asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(fast) : "f"(v));
// CHECK-NEXT: float all;
// CHECK-NEXT: asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(all) : "f"(exp2f(v)));
// CHECK:      (float)exp2(d[tid])
// CHECK-NOT:  ex2.approx

// NUM: kernel-to-cuda {{.*}} ok
