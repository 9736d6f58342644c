// RUN: llm-opt %s -p hoist-constants | filecheck %s
// RUN: llm-opt %s -p hoist-constants,canonicalize | filecheck %s --check-prefix=CANON
// RUN: llm-opt %s -p "hoist-constants,kernel-to-cuda{index_bitwidth=64}" -t cuda | filecheck %s --check-prefix=CUDA
// RUN: llm-opt %s -p "canonicalize,kernel-to-cuda{index_bitwidth=64}" -t cuda | filecheck %s --check-prefix=CUDA
// Constants in a loop nest move in front of its outermost loop in one step (canonicalize
// moves them one loop per sweep of the module); a constant in an scf.if stays in it. The
// CUDA source is the same with or without the pass: constants are literals where used.

kernel.func @nest(%x: memref<64x64xf32>, %y: memref<64x64xf32>) block [64, 1, 1] {
  %t = kernel.thread_id x
  %c0 = arith.constant 0 : index
  %c64 = arith.constant 64 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %c64 step %c1 {
    %two = arith.constant 2.0 : f32
    %c4 = arith.constant 4 : index
    scf.for %j = %c0 to %c64 step %c4 {
      %c3 = arith.constant 3 : index
      %k = arith.addi %j, %c3 : index
      %v = kernel.load %x[%i, %k] : memref<64x64xf32>
      %inside = arith.cmpi ult, %t, %c4 : index
      scf.if %inside {
        %half = arith.constant 0.5 : f32
        %h = arith.mulf %v, %half : f32
        kernel.store %h, %y[%i, %k] : memref<64x64xf32>
      } else {
        %w = arith.mulf %v, %two : f32
        kernel.store %w, %y[%i, %k] : memref<64x64xf32>
      }
    }
  }
  kernel.return
}

// CHECK-LABEL: kernel.func @nest
// CHECK:         %c1 = arith.constant 1 : index
// CHECK-NEXT:    %two = arith.constant 2.000000e+00 : f32
// CHECK-NEXT:    %c4 = arith.constant 4 : index
// CHECK-NEXT:    %c3 = arith.constant 3 : index
// CHECK-NEXT:    scf.for %i = %c0 to %c64 step %c1 {
// CHECK-NEXT:      scf.for %j = %c0 to %c64 step %c4 {
// CHECK-NEXT:        %k = arith.addi %j, %c3 : index
// CHECK:             scf.if %inside {
// CHECK-NEXT:          %half = arith.constant 5.000000e-01 : f32

// After canonicalize the constants are still in front of the nest.
// CANON-LABEL: kernel.func @nest
// CANON:         %c3 = arith.constant 3 : index
// CANON-NEXT:    scf.for
// CANON-NOT:     arith.constant
// CANON:         scf.for
// CANON-NOT:     arith.constant
// CANON:         scf.if
// CANON-NEXT:      arith.constant 5.000000e-01 : f32

// CUDA-LABEL: void __launch_bounds__(64) nest(
// CUDA:         for (long long i = 0; i < 64; i += 1) {
// CUDA-NEXT:      for (long long j = 0; j < 64; j += 4) {
// CUDA-NEXT:        const long long k = j + 3;
// CUDA-NEXT:        const float v = x[i * 64 + k];
// CUDA-NEXT:        if ((unsigned long long)t < 4ull) {
// CUDA-NEXT:          y[i * 64 + k] = v * 0.5f;
// CUDA-NEXT:        } else {
// CUDA-NEXT:          y[i * 64 + k] = v * 2.0f;
