// RUN: llm-opt %s -p fuse-launches | filecheck %s
// RUN: llm-opt %s -p fuse-launches --check-numerics --check-numerics-at 1,5,23,64 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p "fuse-launches,kernel-to-cuda{index_bitwidth=64}" -t cuda | filecheck %s --check-prefix=CUDA
// RUN: sed -e 's/(%%x, %%b, %%n, %%three)/(%%x, %%b, %%c3, %%three)/' %s | llm-opt -p fuse-launches | filecheck %s --check-prefix=OTHER
// Launches of runtime grids (a symbolic length %n) fuse like static ones: the rows kernels'
// grids are computed on the host from %n; the fused kernel computes them again from its
// length parameter, runs member i in blocks [offset_i, offset_i + g_i), and its launch's
// grid is their sum (its maximum the sum of theirs). A static member (the first-row
// kernel) takes its place among them with a constant grid.

// Row i of out = k * row i of in, i < n, a grid-stride loop over the rows.
kernel.func @rows(%in: memref<?x4xf32>, %out: memref<?x4xf32>, %n: index, %k: f32) block [4, 1, 1] {
  %b = kernel.block_id x
  %g = kernel.grid_dim x
  %t = kernel.thread_id x
  scf.for %i = %b to %n step %g {
    %v = kernel.load %in[%i, %t] : memref<?x4xf32>
    %w = arith.mulf %v, %k : f32
    kernel.store %w, %out[%i, %t] : memref<?x4xf32>
  }
  kernel.return
}
// out[t] = in[0, t] + 1 (one block).
kernel.func @first(%in: memref<?x4xf32>, %out: memref<4xf32>) block [4, 1, 1] {
  %t = kernel.thread_id x
  %c0 = arith.constant 0 : index
  %one = arith.constant 1.0 : f32
  %v = kernel.load %in[%c0, %t] : memref<?x4xf32>
  %w = arith.addf %v, %one : f32
  kernel.store %w, %out[%t] : memref<4xf32>
  kernel.return
}
func.func @two(%x: memref<?x4xf32> {llmopt.input = "x", llmopt.dynamic = ["n"]}, %n: index {llmopt.symbol = "n", llmopt.max = 64 : i64}) -> (memref<?x4xf32>, memref<?x4xf32>, memref<4xf32>) {
  %two = arith.constant 2.0 : f32
  %three = arith.constant 3.0 : f32
  %a = memref.alloc(%n) : memref<?x4xf32>
  %c2 = arith.constant 2 : index
  %ga = arith.ceildivui %n, %c2 : index
  kernel.launch @rows grid [%ga max 32, 1, 1] block [4, 1, 1] smem 0 (%x, %a, %n, %two) : memref<?x4xf32>, memref<?x4xf32>, index, f32
  %f = memref.alloc() : memref<4xf32>
  kernel.launch @first grid [1, 1, 1] block [4, 1, 1] smem 0 (%x, %f) : memref<?x4xf32>, memref<4xf32>
  %b = memref.alloc(%n) : memref<?x4xf32>
  %c3 = arith.constant 3 : index
  %gb = arith.ceildivui %n, %c3 : index
  kernel.launch @rows grid [%gb max 22, 1, 1] block [4, 1, 1] smem 0 (%x, %b, %n, %three) : memref<?x4xf32>, memref<?x4xf32>, index, f32
  func.return %a, %b, %f : memref<?x4xf32>, memref<?x4xf32>, memref<4xf32>
}

// CHECK:      kernel.func @rows__first__rows(%x: memref<?x4xf32>, %a: memref<?x4xf32>, %n: index, %two: f32, %f: memref<4xf32>, %b: memref<?x4xf32>, %three: f32) block [4, 1, 1] {
// CHECK-NEXT:   %[[B:.*]] = kernel.block_id x
// CHECK-NEXT:   %[[C2:.*]] = arith.constant 2 : index
// CHECK-NEXT:   %[[GA:.*]] = arith.ceildivui %n, %[[C2]] : index
// CHECK-NEXT:   %[[IN0:.*]] = arith.cmpi ult, %[[B]], %[[GA]] : index
// CHECK-NEXT:   scf.if %[[IN0]] {
// CHECK:          scf.for %i = %[[B]] to %n step %[[GA]] {
// CHECK:        } else {
// CHECK-NEXT:     %[[L1:.*]] = arith.subi %[[B]], %[[GA]] : index
// CHECK-NEXT:     %[[G1:.*]] = arith.constant 1 : index
// CHECK-NEXT:     %[[IN1:.*]] = arith.cmpi ult, %[[L1]], %[[G1]] : index
// CHECK-NEXT:     scf.if %[[IN1]] {
// CHECK:          } else {
// CHECK-NEXT:       %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT:       %[[OFF:.*]] = arith.addi %[[GA]], %[[ONE]] : index
// CHECK-NEXT:       %[[L2:.*]] = arith.subi %[[B]], %[[OFF]] : index
// CHECK-NEXT:       %[[C3:.*]] = arith.constant 3 : index
// CHECK-NEXT:       %[[GB:.*]] = arith.ceildivui %n, %[[C3]] : index
// CHECK-NEXT:       %[[IN2:.*]] = arith.cmpi ult, %[[L2]], %[[GB]] : index
// CHECK-NEXT:       scf.if %[[IN2]] {
// CHECK:              scf.for %{{.*}} = %[[L2]] to %n step %[[GB]] {
// CHECK-NOT:  kernel.func @first(
// CHECK:      func.func @two(
// CHECK:        %[[C1:.*]] = arith.constant 1 : index
// CHECK-NEXT:   %[[S1:.*]] = arith.addi %ga, %[[C1]] : index
// CHECK-NEXT:   %grid_fused = arith.addi %[[S1]], %gb : index
// CHECK-NEXT:   kernel.launch @rows__first__rows grid [%grid_fused max 55, 1, 1] block [4, 1, 1] smem 0 (%x, %a, %n, %two, %f, %b, %three)
// CHECK-NOT:    kernel.launch

// A launch whose grid is not arithmetic of the length it passes (here it passes 3, its grid
// is computed from %n) keeps its own kernel; the other two still fuse.
// OTHER:        kernel.launch @rows__first grid [%grid_fused max 33, 1, 1] {{.*}} (%x, %a, %n, %two, %f)
// OTHER-NEXT:   kernel.launch @rows grid [%gb max 22, 1, 1] {{.*}} (%x, %b, %c3, %three)

// NUM: fuse-launches {{.*}} ok

// The kernel computes the grids again from its length; a member's blocks start after the
// grids before it.
// CUDA:      extern "C" __global__ void __launch_bounds__(4) rows__first__rows(
// CUDA:          int n,
// CUDA:        const long long g = (long long)((unsigned long long)n_index / 2ull
// CUDA:        for (long long i = b1; i < n_index; i += g) {
// CUDA:          const long long b2 = b1 - (g + 1);
// CUDA-NEXT:     const long long g1 = (long long)((unsigned long long)n_index / 3ull
