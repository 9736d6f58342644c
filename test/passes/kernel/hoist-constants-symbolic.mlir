// RUN: llm-opt %s -p hoist-constants | filecheck %s
// RUN: llm-opt %s -p hoist-constants --check-numerics --check-numerics-at 1,5,16 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// A loop nest over a symbolic length: the grid-stride loop runs to the runtime %n, the
// inner one to a constant. Its constants move in front of the outer loop as in a static
// nest; the loop bound %n, a kernel argument, and the index arithmetic on it stay where they
// are.

// y[i, j] = 2 * x[i, j] + (i + 1) for the rows i < n.
kernel.func @rows(%x: memref<?x8xf32>, %y: memref<?x8xf32>, %n: index) block [1, 1, 1] {
  %b = kernel.block_id x
  %g = kernel.grid_dim x
  scf.for %i = %b to %n step %g {
    %c0 = arith.constant 0 : index
    %c8 = arith.constant 8 : index
    %c1 = arith.constant 1 : index
    %next = arith.addi %i, %c1 : index
    %w = arith.index_cast %next : index to i64
    %f = arith.uitofp %w : i64 to f32
    scf.for %j = %c0 to %c8 step %c1 {
      %two = arith.constant 2.0 : f32
      %v = kernel.load %x[%i, %j] : memref<?x8xf32>
      %d = arith.mulf %v, %two : f32
      %s = arith.addf %d, %f : f32
      kernel.store %s, %y[%i, %j] : memref<?x8xf32>
    }
  }
  kernel.return
}
func.func @run(%x: memref<?x8xf32> {llmopt.input = "x", llmopt.dynamic = ["n"]}, %n: index {llmopt.symbol = "n", llmopt.max = 16 : i64}) -> memref<?x8xf32> {
  %y = memref.alloc(%n) : memref<?x8xf32>
  kernel.launch @rows grid [%n max 16, 1, 1] block [1, 1, 1] smem 0 (%x, %y, %n) : memref<?x8xf32>, memref<?x8xf32>, index
  func.return %y : memref<?x8xf32>
}

// CHECK-LABEL: kernel.func @rows
// CHECK:         %g = kernel.grid_dim x
// CHECK-NEXT:    %c0 = arith.constant 0 : index
// CHECK-NEXT:    %c8 = arith.constant 8 : index
// CHECK-NEXT:    %c1 = arith.constant 1 : index
// CHECK-NEXT:    %two = arith.constant 2.000000e+00 : f32
// CHECK-NEXT:    scf.for %i = %b to %n step %g {
// CHECK-NEXT:      %next = arith.addi %i, %c1 : index
// CHECK:           scf.for %j = %c0 to %c8 step %c1 {
// CHECK-NEXT:        %v = kernel.load %x[%i, %j] : memref<?x8xf32>

// NUM: hoist-constants {{.*}} ok
