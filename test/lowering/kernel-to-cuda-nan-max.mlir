// RUN: llm-opt %s -p kernel-to-cuda -t cuda | filecheck %s
// RUN: llm-opt %s -p 'kernel-to-cuda{arch=sm_75}' -t cuda | filecheck %s --check-prefix=PORTABLE
// RUN: llm-opt %s -p 'kernel-to-cuda{nan_min_max=false}' -t cuda | filecheck %s --check-prefix=PORTABLE
// NaN-propagating maximumf/minimumf: on sm_80 and newer an f32 one is one max.NaN/min.NaN
// instruction; an f64 one, an older target or nan_min_max=false keep C's test of both
// operands for NaN.
func.func @main(%x: memref<64xf32>, %d: memref<64xf64>) -> memref<64xf32> {
  %y = memref.alloc() : memref<64xf32>
  kernel.launch @mm grid [1, 1, 1] block [64, 1, 1] smem 0 (%x, %d, %y) : memref<64xf32>, memref<64xf64>, memref<64xf32>
  func.return %y : memref<64xf32>
}
kernel.func @mm(%x: memref<64xf32>, %d: memref<64xf64>, %y: memref<64xf32>) block [64, 1, 1] {
  %tid = kernel.thread_id x
  %v = kernel.load %x[%tid] : memref<64xf32>
  %c = arith.constant 0.5 : f32
  %hi = arith.maximumf %v, %c : f32
  %lo = arith.minimumf %hi, %v : f32
  %w = kernel.load %d[%tid] : memref<64xf64>
  %wm = arith.maximumf %w, %w : f64
  %wf = arith.truncf %wm : f64 to f32
  %s = arith.addf %lo, %wf : f32
  kernel.store %s, %y[%tid] : memref<64xf32>
  kernel.return
}

// CHECK:      float hi;
// CHECK-NEXT: asm("max.NaN.f32 %0, %1, %2;" : "=f"(hi) : "f"(v), "f"(0.5f));
// CHECK-NEXT: float lo;
// CHECK-NEXT: asm("min.NaN.f32 %0, %1, %2;" : "=f"(lo) : "f"(hi), "f"(v));
// CHECK:      (w != w || w != w) ? w + w : fmax(w, w)
// CHECK-NOT:  NaN

// PORTABLE-NOT: NaN.f32
// PORTABLE:     (v != v || 0.5f != 0.5f) ? v + 0.5f : fmaxf(v, 0.5f)
// PORTABLE:     fminf(
