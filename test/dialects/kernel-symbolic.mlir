// RUN: llm-opt %s | llm-opt | filecheck %s
// RUN: llm-opt %s --print-op-generic | llm-opt | filecheck %s
// RUN: llm-opt %s --check-numerics --check-numerics-lengths 2 2>&1 >/dev/null | filecheck %s --check-prefix=NUM

// Kernel IR with a symbolic length: the length is a kernel parameter (an index), buffers
// with ? extents are row-major, and a launch's grid may be a runtime value with its maximum.
kernel.func @double(%a: memref<?x64xf32>, %o: memref<?x64xf32>, %n: index) block [256, 1, 1] {
  %0 = kernel.block_id x
  %1 = kernel.block_dim x
  %2 = kernel.thread_id x
  %3 = arith.muli %0, %1 : index
  %4 = arith.addi %3, %2 : index
  %5 = kernel.grid_dim x
  %6 = arith.muli %5, %1 : index
  %7 = arith.constant 64 : index
  %8 = arith.muli %n, %7 : index
  scf.for %p = %4 to %8 step %6 {
    %9 = arith.constant 64 : index
    %j = arith.remui %p, %9 : index
    %i = arith.divui %p, %9 : index
    %v = kernel.load %a[%i, %j] : memref<?x64xf32>
    %w = arith.addf %v, %v : f32
    kernel.store %w, %o[%i, %j] : memref<?x64xf32>
  }
  kernel.return
}
kernel.func @colsum(%a: memref<?x64xf32>, %o: memref<1x64xf32>, %n: index) block [256, 1, 1] {
  %partials = kernel.shared : memref<8xf32>
  %0 = kernel.block_id x
  %1 = kernel.grid_dim x
  %2 = arith.constant 64 : index
  scf.for %j = %0 to %2 step %1 {
    %3 = kernel.thread_id x
    %4 = arith.constant 0.000000e+00 : f32
    %5 = arith.constant 256 : index
    %partial = scf.for %k = %3 to %n step %5 iter_args(%acc = %4) -> (f32) {
      %v = kernel.load %a[%k, %j] : memref<?x64xf32>
      %6 = arith.addf %acc, %v : f32
      scf.yield %6 : f32
    }
    %7 = kernel.shuffle_xor %partial, 16 : f32
    %8 = arith.addf %partial, %7 : f32
    %9 = kernel.shuffle_xor %8, 8 : f32
    %10 = arith.addf %8, %9 : f32
    %11 = kernel.shuffle_xor %10, 4 : f32
    %12 = arith.addf %10, %11 : f32
    %13 = kernel.shuffle_xor %12, 2 : f32
    %14 = arith.addf %12, %13 : f32
    %15 = kernel.shuffle_xor %14, 1 : f32
    %16 = arith.addf %14, %15 : f32
    %17 = arith.constant 32 : index
    %18 = arith.remui %3, %17 : index
    %19 = arith.divui %3, %17 : index
    %20 = arith.constant 0 : index
    %21 = arith.cmpi eq, %18, %20 : index
    scf.if %21 {
      kernel.store %16, %partials[%19] : memref<8xf32>
    }
    kernel.barrier
    %22 = arith.constant 8 : index
    %23 = arith.constant 1 : index
    %s = scf.for %w = %20 to %22 step %23 iter_args(%acc_1 = %4) -> (f32) {
      %24 = kernel.load %partials[%w] : memref<8xf32>
      %25 = arith.addf %acc_1, %24 : f32
      scf.yield %25 : f32
    }
    kernel.barrier
    %26 = kernel.thread_id x
    %27 = kernel.block_dim x
    %28 = arith.constant 1 : index
    scf.for %p = %26 to %28 step %27 {
      %29 = arith.constant 0 : index
      %30 = arith.constant 0 : index
      kernel.store %s, %o[%30, %j] : memref<1x64xf32>
    }
  }
  kernel.return
}
func.func @forward(%x: memref<?x64xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 300 : i64}) -> (memref<?x64xf32>, memref<1x64xf32>) {
  %out = memref.alloc(%seq) : memref<?x64xf32>
  %c64 = arith.constant 64 : index
  %points = arith.muli %seq, %c64 : index
  %c256 = arith.constant 256 : index
  %grid = arith.ceildivui %points, %c256 : index
  kernel.launch @double grid [%grid max 75, 1, 1] block [256, 1, 1] smem 0 (%x, %out, %seq) : memref<?x64xf32>, memref<?x64xf32>, index
  %col = memref.alloc() : memref<1x64xf32>
  kernel.launch @colsum grid [64, 1, 1] block [256, 1, 1] smem 0 (%x, %col, %seq) : memref<?x64xf32>, memref<1x64xf32>, index
  func.return %out, %col : memref<?x64xf32>, memref<1x64xf32>
}

// CHECK:      kernel.func @double(%a: memref<?x64xf32>, %o: memref<?x64xf32>, %n: index) block [256, 1, 1] {
// CHECK:        kernel.load %a[%{{.*}}, %{{.*}}] : memref<?x64xf32>
// CHECK:      kernel.launch @double grid [%grid max 75, 1, 1] block [256, 1, 1] smem 0 (%x, %out, %seq) : memref<?x64xf32>, memref<?x64xf32>, index

// NUM: // numerics: tolerance {{.*}} at seq = {{[0-9]+}}, {{[0-9]+}}{{$}}
