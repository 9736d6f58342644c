// RUN: llm-opt %s -p merge-branches | filecheck %s
// RUN: llm-opt %s -p merge-branches --check-numerics --check-numerics-at 1,2,5,40 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p merge-branches,fuse-launches | filecheck %s --check-prefix=FUSE
// Two products' length buckets, as length-buckets writes them: each its own chain on
// %n <= 1, else %n <= 4, else the rest, with an output allocated between the chains. The
// chains merge level by level (the second chain's conditions are its own cmpi ops on equal
// constants), the allocation moves before them, and fuse-launches then finds the two
// one-row launches and the two short-bucket launches side by side. A chain on another
// bound stays apart.

// out[i, t] = k * in[i, t] for the rows i < n this block's grid-stride loop covers.
kernel.func @scaled(%in: memref<?x4xf32>, %out: memref<?x4xf32>, %n: index, %k: f32) block [4, 1, 1] {
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
func.func @two(%x: memref<?x4xf32> {llmopt.input = "x", llmopt.dynamic = ["n"]}, %n: index {llmopt.symbol = "n", llmopt.max = 64 : i64}) -> (memref<?x4xf32>, memref<?x4xf32>, memref<?x4xf32>) {
  %two = arith.constant 2.0 : f32
  %three = arith.constant 3.0 : f32
  %five = arith.constant 5.0 : f32
  %a = memref.alloc(%n) : memref<?x4xf32>
  %c1 = arith.constant 1 : index
  %le1 = arith.cmpi ule, %n, %c1 : index
  scf.if %le1 {
    kernel.launch @scaled grid [1, 1, 1] block [4, 1, 1] smem 0 (%x, %a, %n, %two) : memref<?x4xf32>, memref<?x4xf32>, index, f32
  } else {
    %c4 = arith.constant 4 : index
    %le4 = arith.cmpi ule, %n, %c4 : index
    scf.if %le4 {
      kernel.launch @scaled grid [%n max 4, 1, 1] block [4, 1, 1] smem 0 (%x, %a, %n, %two) : memref<?x4xf32>, memref<?x4xf32>, index, f32
    } else {
      %c8 = arith.constant 8 : index
      %g = arith.ceildivui %n, %c8 : index
      kernel.launch @scaled grid [%g max 8, 1, 1] block [4, 1, 1] smem 0 (%x, %a, %n, %two) : memref<?x4xf32>, memref<?x4xf32>, index, f32
    }
  }
  %b = memref.alloc(%n) : memref<?x4xf32>
  %c1_b = arith.constant 1 : index
  %le1_b = arith.cmpi ule, %n, %c1_b : index
  scf.if %le1_b {
    kernel.launch @scaled grid [1, 1, 1] block [4, 1, 1] smem 0 (%x, %b, %n, %three) : memref<?x4xf32>, memref<?x4xf32>, index, f32
  } else {
    %c4_b = arith.constant 4 : index
    %le4_b = arith.cmpi ule, %n, %c4_b : index
    scf.if %le4_b {
      kernel.launch @scaled grid [%n max 4, 1, 1] block [4, 1, 1] smem 0 (%x, %b, %n, %three) : memref<?x4xf32>, memref<?x4xf32>, index, f32
    } else {
      kernel.launch @scaled grid [%n max 64, 1, 1] block [4, 1, 1] smem 0 (%x, %b, %n, %three) : memref<?x4xf32>, memref<?x4xf32>, index, f32
    }
  }
  %c = memref.alloc(%n) : memref<?x4xf32>
  %c2 = arith.constant 2 : index
  %le2 = arith.cmpi ule, %n, %c2 : index
  scf.if %le2 {
    kernel.launch @scaled grid [%n max 2, 1, 1] block [4, 1, 1] smem 0 (%x, %c, %n, %five) : memref<?x4xf32>, memref<?x4xf32>, index, f32
  } else {
    kernel.launch @scaled grid [%n max 64, 1, 1] block [4, 1, 1] smem 0 (%x, %c, %n, %five) : memref<?x4xf32>, memref<?x4xf32>, index, f32
  }
  func.return %a, %b, %c : memref<?x4xf32>, memref<?x4xf32>, memref<?x4xf32>
}

// CHECK:      %a = memref.alloc(%n) : memref<?x4xf32>
// CHECK:      %le1 = arith.cmpi ule, %n, %c1 : index
// CHECK-NEXT: %b = memref.alloc(%n) : memref<?x4xf32>
// CHECK:      %le1_b = arith.cmpi ule, %n, %c1_b : index
// CHECK-NEXT: scf.if %le1 {
// CHECK-NEXT:   kernel.launch @scaled grid [1, 1, 1] {{.*}} (%x, %a, %n, %two)
// CHECK-NEXT:   kernel.launch @scaled grid [1, 1, 1] {{.*}} (%x, %b, %n, %three)
// CHECK-NEXT: } else {
// CHECK:        %le4_b = arith.cmpi ule, %n, %c4_b : index
// CHECK-NEXT:   scf.if %le4 {
// CHECK-NEXT:     kernel.launch @scaled grid [%n max 4, 1, 1] {{.*}} (%x, %a, %n, %two)
// CHECK-NEXT:     kernel.launch @scaled grid [%n max 4, 1, 1] {{.*}} (%x, %b, %n, %three)
// CHECK-NEXT:   } else {
// CHECK:          kernel.launch @scaled grid [%g max 8, 1, 1] {{.*}} (%x, %a, %n, %two)
// CHECK-NEXT:     kernel.launch @scaled grid [%n max 64, 1, 1] {{.*}} (%x, %b, %n, %three)
// CHECK-NEXT:   }
// CHECK-NEXT: }
// CHECK-NEXT: %c = memref.alloc(%n) : memref<?x4xf32>
// CHECK:      scf.if %le2 {
// CHECK-NOT:  scf.if

// NUM: merge-branches {{.*}} ok

// FUSE:      scf.if %le1 {
// FUSE-NEXT:   kernel.launch @scaled__scaled grid [2, 1, 1]
// FUSE:        scf.if %le4 {
// FUSE:          kernel.launch @scaled__scaled_2 grid [%grid_fused max 8, 1, 1]
