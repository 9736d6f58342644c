// RUN: llm-opt %s -p version-row-groups | filecheck %s
// RUN: llm-opt %s -p version-row-groups --check-numerics --check-numerics-at 1,2,3,4 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p version-row-groups,kernel-to-cuda -t cuda | filecheck %s --check-prefix=CUDA
// A register tile of four rows over a runtime length %n, as register-tile and
// vector-fragments write it: thread %t holds rows 2·mi + t and both columns, the K loop
// (llmopt.role = "k_loop", with a pipeline slot as its result) around the multiply-adds,
// and the epilogue stores the rows below %n. The groups whose first row, 2·mi (the
// thread's term %t at 0), is below %n are counted before the K loop, and a copy of it per
// count runs that many groups. @fixed, the same tile with a constant bound, is left to
// NVRTC; @shared_sum reads an accumulator outside the guard and stays as it is.

// out[r, c] = sum_k a[r, k] * b[c, k] for the rows r < n.
kernel.func @tile(%a: memref<?x8xf32>, %b: memref<2x8xf32>, %out: memref<?x2xf32>, %n: index) block [2, 1, 1] {
  %acc = kernel.local : memref<2x2xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant 0.0 : f32
  %last = arith.subi %n, %c1 : index
  %t = kernel.thread_id x
  scf.for %i = %c0 to %c2 step %c1 {
    scf.for %j = %c0 to %c2 step %c1 {
      kernel.store %zero, %acc[%i, %j] : memref<2x2xf32>
    }
  }
  %slot = scf.for %k0 = %c0 to %c2 step %c1 iter_args(%prev = %c0) -> (index) {
    scf.for %kv = %c0 to %c4 step %c1 {
    scf.for %mi = %c0 to %c2 step %c1 {
      scf.for %nj = %c0 to %c2 step %c1 {
        %k4 = arith.muli %k0, %c4 : index
        %k = arith.addi %k4, %kv : index
        %r0 = arith.muli %mi, %c2 : index
        %r = arith.addi %r0, %t : index
        %rc = arith.minui %r, %last : index
        %x = kernel.load %a[%rc, %k] : memref<?x8xf32>
        %w = kernel.load %b[%nj, %k] : memref<2x8xf32>
        %p = arith.mulf %x, %w : f32
        %o = kernel.load %acc[%mi, %nj] : memref<2x2xf32>
        %s = arith.addf %o, %p : f32
        kernel.store %s, %acc[%mi, %nj] : memref<2x2xf32>
      }
    }
    }
    %next = arith.addi %prev, %c1 : index
    scf.yield %next : index
  } {llmopt.role = "k_loop"}
  %tt = kernel.thread_id x
  scf.for %ei = %c0 to %c2 step %c1 {
    scf.for %ej = %c0 to %c2 step %c1 {
      %e0 = arith.muli %ei, %c2 : index
      %row = arith.addi %e0, %tt : index
      %col = arith.cmpi ult, %ej, %c2 : index
      %in = arith.cmpi ult, %row, %n : index
      %both = arith.andi %col, %in : i1
      scf.if %both {
        %v = kernel.load %acc[%ei, %ej] : memref<2x2xf32>
        kernel.store %v, %out[%row, %ej] : memref<?x2xf32>
      }
    }
  }
  kernel.return
}

// CHECK-LABEL: kernel.func @tile(
// CHECK:       %live = arith.addi
// CHECK:       %{{.*}} = arith.cmpi eq, %live, %{{.*}} : index
// CHECK-NEXT:  %slot = scf.if %{{.*}} -> (index) {
// CHECK-NEXT:    [[TWO:%.*]] = arith.constant 2 : index
// CHECK-NEXT:    %{{.*}} = scf.for %k0 = %c0 to %c2 step %c1 iter_args(%prev = %c0) -> (index) {
// CHECK-NEXT:      scf.for %kv = %c0 to %c4 step %c1 {
// CHECK-NEXT:        scf.for %mi = %c0 to [[TWO]] step %c1 {
// CHECK:         } {llmopt.role = "k_loop", llmopt.row_groups = 2 : index}
// CHECK:       } else {
// CHECK-NEXT:    [[ONE:%.*]] = arith.constant 1 : index
// CHECK-NEXT:    [[TRIPS1:%.*]] = kernel.opaque %c2 : index
// CHECK-NEXT:    %{{.*}} = scf.for %k0_1 = %c0 to [[TRIPS1]] step %c1 iter_args(%prev_1 = %c0) -> (index) {
// CHECK-NEXT:      scf.for %kv_1 = %c0 to %c4 step %c1 {
// CHECK-NEXT:        scf.for %mi_1 = %c0 to [[ONE]] step %c1 {
// CHECK:         } {llmopt.role = "k_loop", llmopt.row_groups = 1 : index}
// CHECK:       {llmopt.role = "row_groups"}
// CHECK:       scf.if %both {

kernel.func @fixed(%a: memref<4x8xf32>, %b: memref<2x8xf32>, %out: memref<4x2xf32>) block [2, 1, 1] {
  %acc = kernel.local : memref<2x2xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant 0.0 : f32
  %t = kernel.thread_id x
  scf.for %i = %c0 to %c2 step %c1 {
    scf.for %j = %c0 to %c2 step %c1 {
      kernel.store %zero, %acc[%i, %j] : memref<2x2xf32>
    }
  }
  scf.for %k0 = %c0 to %c2 step %c1 {
    scf.for %kv = %c0 to %c4 step %c1 {
    scf.for %mi = %c0 to %c2 step %c1 {
      scf.for %nj = %c0 to %c2 step %c1 {
        %k4 = arith.muli %k0, %c4 : index
        %k = arith.addi %k4, %kv : index
        %r0 = arith.muli %mi, %c2 : index
        %r = arith.addi %r0, %t : index
        %x = kernel.load %a[%r, %k] : memref<4x8xf32>
        %w = kernel.load %b[%nj, %k] : memref<2x8xf32>
        %p = arith.mulf %x, %w : f32
        %o = kernel.load %acc[%mi, %nj] : memref<2x2xf32>
        %s = arith.addf %o, %p : f32
        kernel.store %s, %acc[%mi, %nj] : memref<2x2xf32>
      }
    }
    }
  } {llmopt.role = "k_loop"}
  scf.for %ei = %c0 to %c2 step %c1 {
    scf.for %ej = %c0 to %c2 step %c1 {
      %e0 = arith.muli %ei, %c2 : index
      %row = arith.addi %e0, %t : index
      %in = arith.cmpi ult, %row, %c3 : index
      scf.if %in {
        %v = kernel.load %acc[%ei, %ej] : memref<2x2xf32>
        kernel.store %v, %out[%row, %ej] : memref<4x2xf32>
      }
    }
  }
  kernel.return
}

// CHECK-LABEL: kernel.func @fixed(
// CHECK:       scf.for %k0 = %c0 to %c2 step %c1 {
// CHECK-NEXT:    scf.for %kv = %c0 to %c4 step %c1 {
// CHECK-NEXT:      scf.for %mi = %c0 to %c2 step %c1 {

kernel.func @shared_sum(%a: memref<?x8xf32>, %b: memref<2x8xf32>, %out: memref<?x2xf32>, %n: index) block [2, 1, 1] {
  %acc = kernel.local : memref<2x2xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant 0.0 : f32
  %last = arith.subi %n, %c1 : index
  %t = kernel.thread_id x
  scf.for %i = %c0 to %c2 step %c1 {
    scf.for %j = %c0 to %c2 step %c1 {
      kernel.store %zero, %acc[%i, %j] : memref<2x2xf32>
    }
  }
  scf.for %k0 = %c0 to %c2 step %c1 {
    scf.for %kv = %c0 to %c4 step %c1 {
    scf.for %mi = %c0 to %c2 step %c1 {
      scf.for %nj = %c0 to %c2 step %c1 {
        %k4 = arith.muli %k0, %c4 : index
        %k = arith.addi %k4, %kv : index
        %r0 = arith.muli %mi, %c2 : index
        %r = arith.addi %r0, %t : index
        %rc = arith.minui %r, %last : index
        %x = kernel.load %a[%rc, %k] : memref<?x8xf32>
        %w = kernel.load %b[%nj, %k] : memref<2x8xf32>
        %p = arith.mulf %x, %w : f32
        %o = kernel.load %acc[%mi, %nj] : memref<2x2xf32>
        %s = arith.addf %o, %p : f32
        kernel.store %s, %acc[%mi, %nj] : memref<2x2xf32>
      }
    }
    }
  } {llmopt.role = "k_loop"}
  // Row 0's sums go to every row below n: a group past n is still read.
  %first = kernel.load %acc[%c0, %c0] : memref<2x2xf32>
  scf.for %ei = %c0 to %c2 step %c1 {
    scf.for %ej = %c0 to %c2 step %c1 {
      %e0 = arith.muli %ei, %c2 : index
      %row = arith.addi %e0, %t : index
      %in = arith.cmpi ult, %row, %n : index
      scf.if %in {
        %v = kernel.load %acc[%ei, %ej] : memref<2x2xf32>
        %u = arith.addf %v, %first : f32
        kernel.store %u, %out[%row, %ej] : memref<?x2xf32>
      }
    }
  }
  kernel.return
}

// CHECK-LABEL: kernel.func @shared_sum(
// CHECK:       scf.for %k0 = %c0 to %c2 step %c1 {
// CHECK-NEXT:    scf.for %kv = %c0 to %c4 step %c1 {
// CHECK-NEXT:      scf.for %mi = %c0 to %c2 step %c1 {

func.func @run(%a: memref<?x8xf32> {llmopt.input = "a", llmopt.dynamic = ["n"]}, %b: memref<2x8xf32> {llmopt.input = "b"}, %n: index {llmopt.symbol = "n", llmopt.max = 4 : i64}) -> (memref<?x2xf32>, memref<?x2xf32>) {
  %o = memref.alloc(%n) : memref<?x2xf32>
  kernel.launch @tile grid [1, 1, 1] block [2, 1, 1] smem 0 (%a, %b, %o, %n) : memref<?x8xf32>, memref<2x8xf32>, memref<?x2xf32>, index
  %q = memref.alloc(%n) : memref<?x2xf32>
  kernel.launch @shared_sum grid [1, 1, 1] block [2, 1, 1] smem 0 (%a, %b, %q, %n) : memref<?x8xf32>, memref<2x8xf32>, memref<?x2xf32>, index
  func.return %o, %q : memref<?x2xf32>, memref<?x2xf32>
}

// NUM: version-row-groups {{.*}} ok

// The whole tile's copy keeps its constant trip count; in every other copy it is a
// register the CUDA compiler cannot see into.
// CUDA-LABEL: __launch_bounds__(2) tile(
// CUDA:       for (long long k0 = 0; k0 < 2; k0 += 1) {
// CUDA:       const long long opaque_in = 2;
// CUDA-NEXT:  long long opaque;
// CUDA-NEXT:  asm("mov.b64 %0, %1;" : "=l"(opaque) : "l"(opaque_in));
// CUDA:       for (long long k01 = 0; k01 < opaque; k01 += 1) {
