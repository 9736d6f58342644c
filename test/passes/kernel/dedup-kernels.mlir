// RUN: llm-opt %s -p dedup-kernels | filecheck %s
// RUN: llm-opt %s -p dedup-kernels,dedup-kernels | filecheck %s
// Kernels identical up to their symbol and value names become one; launches of the removed
// copies are retargeted to it and keep their own grids and arguments.

kernel.func @scale_0(%out: memref<64xf32>, %in: memref<64xf32>) block [64, 1, 1] {
  %t = kernel.thread_id x
  %v = kernel.load %in[%t] : memref<64xf32>
  %c = arith.constant 2.0 : f32
  %m = arith.mulf %v, %c : f32
  kernel.store %m, %out[%t] : memref<64xf32>
  kernel.return
}
// The same kernel with other names: a copy.
kernel.func @scale_1(%y: memref<64xf32>, %x: memref<64xf32>) block [64, 1, 1] {
  %tid = kernel.thread_id x
  %a = kernel.load %x[%tid] : memref<64xf32>
  %two = arith.constant 2.0 : f32
  %b = arith.mulf %a, %two : f32
  kernel.store %b, %y[%tid] : memref<64xf32>
  kernel.return
}
// Another constant: a different kernel.
kernel.func @scale_2(%out: memref<64xf32>, %in: memref<64xf32>) block [64, 1, 1] {
  %t = kernel.thread_id x
  %v = kernel.load %in[%t] : memref<64xf32>
  %c = arith.constant 3.0 : f32
  %m = arith.mulf %v, %c : f32
  kernel.store %m, %out[%t] : memref<64xf32>
  kernel.return
}
// Operands swapped (the wiring differs): a different kernel.
kernel.func @sub_0(%out: memref<64xf32>, %a: memref<64xf32>, %b: memref<64xf32>) block [64, 1, 1] {
  %t = kernel.thread_id x
  %x = kernel.load %a[%t] : memref<64xf32>
  %y = kernel.load %b[%t] : memref<64xf32>
  %d = arith.subf %x, %y : f32
  kernel.store %d, %out[%t] : memref<64xf32>
  kernel.return
}
kernel.func @sub_1(%out: memref<64xf32>, %a: memref<64xf32>, %b: memref<64xf32>) block [64, 1, 1] {
  %t = kernel.thread_id x
  %x = kernel.load %a[%t] : memref<64xf32>
  %y = kernel.load %b[%t] : memref<64xf32>
  %d = arith.subf %y, %x : f32
  kernel.store %d, %out[%t] : memref<64xf32>
  kernel.return
}
// Another launch block: a different kernel.
kernel.func @scale_3(%out: memref<64xf32>, %in: memref<64xf32>) block [32, 1, 1] {
  %t = kernel.thread_id x
  %v = kernel.load %in[%t] : memref<64xf32>
  %c = arith.constant 2.0 : f32
  %m = arith.mulf %v, %c : f32
  kernel.store %m, %out[%t] : memref<64xf32>
  kernel.return
}
// Nested regions are compared too: a copy of @loop_0.
kernel.func @loop_0(%out: memref<64xf32>, %in: memref<64xf32>) block [32, 1, 1] {
  %t = kernel.thread_id x
  %c64 = arith.constant 64 : index
  %c32 = arith.constant 32 : index
  scf.for %i = %t to %c64 step %c32 {
    %v = kernel.load %in[%i] : memref<64xf32>
    kernel.store %v, %out[%i] : memref<64xf32>
  }
  kernel.return
}
kernel.func @loop_1(%o: memref<64xf32>, %n: memref<64xf32>) block [32, 1, 1] {
  %t = kernel.thread_id x
  %c64 = arith.constant 64 : index
  %c32 = arith.constant 32 : index
  scf.for %j = %t to %c64 step %c32 {
    %w = kernel.load %n[%j] : memref<64xf32>
    kernel.store %w, %o[%j] : memref<64xf32>
  }
  kernel.return
}

func.func @forward(%x: memref<64xf32>) -> memref<64xf32> {
  %0 = memref.alloc() : memref<64xf32>
  kernel.launch @scale_0 grid [1, 1, 1] block [64, 1, 1] smem 0 (%0, %x) : memref<64xf32>, memref<64xf32>
  %1 = memref.alloc() : memref<64xf32>
  kernel.launch @scale_1 grid [2, 1, 1] block [64, 1, 1] smem 0 (%1, %0) : memref<64xf32>, memref<64xf32>
  %2 = memref.alloc() : memref<64xf32>
  kernel.launch @scale_2 grid [1, 1, 1] block [64, 1, 1] smem 0 (%2, %1) : memref<64xf32>, memref<64xf32>
  %3 = memref.alloc() : memref<64xf32>
  kernel.launch @sub_0 grid [1, 1, 1] block [64, 1, 1] smem 0 (%3, %2, %1) : memref<64xf32>, memref<64xf32>, memref<64xf32>
  %4 = memref.alloc() : memref<64xf32>
  kernel.launch @sub_1 grid [1, 1, 1] block [64, 1, 1] smem 0 (%4, %3, %2) : memref<64xf32>, memref<64xf32>, memref<64xf32>
  %5 = memref.alloc() : memref<64xf32>
  kernel.launch @scale_3 grid [1, 1, 1] block [32, 1, 1] smem 0 (%5, %4) : memref<64xf32>, memref<64xf32>
  %6 = memref.alloc() : memref<64xf32>
  kernel.launch @loop_0 grid [1, 1, 1] block [32, 1, 1] smem 0 (%6, %5) : memref<64xf32>, memref<64xf32>
  %7 = memref.alloc() : memref<64xf32>
  kernel.launch @loop_1 grid [1, 1, 1] block [32, 1, 1] smem 0 (%7, %6) : memref<64xf32>, memref<64xf32>
  kernel.launch @scale_1 grid [3, 1, 1] block [64, 1, 1] smem 0 (%7, %6) : memref<64xf32>, memref<64xf32>
  func.return %7 : memref<64xf32>
}

// CHECK:     kernel.func @scale_0(
// CHECK-NOT: kernel.func @scale_1(
// CHECK:     kernel.func @scale_2(
// CHECK:     kernel.func @sub_0(
// CHECK:     kernel.func @sub_1(
// CHECK:     kernel.func @scale_3(
// CHECK:     kernel.func @loop_0(
// CHECK-NOT: kernel.func
// CHECK:     func.func @forward
// CHECK:     kernel.launch @scale_0 grid [1, 1, 1]
// CHECK:     kernel.launch @scale_0 grid [2, 1, 1] block [64, 1, 1] smem 0 (%1, %0)
// CHECK:     kernel.launch @scale_2
// CHECK:     kernel.launch @sub_0
// CHECK:     kernel.launch @sub_1
// CHECK:     kernel.launch @scale_3
// CHECK:     kernel.launch @loop_0 grid [1, 1, 1] block [32, 1, 1] smem 0 (%6, %5)
// CHECK:     kernel.launch @loop_0 grid [1, 1, 1] block [32, 1, 1] smem 0 (%7, %6)
// CHECK:     kernel.launch @scale_0 grid [3, 1, 1] block [64, 1, 1] smem 0 (%7, %6)
// CHECK:     func.return
