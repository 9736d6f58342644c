// RUN: llm-opt %s -p skip-padded-rows | filecheck %s
// RUN: llm-opt %s -p skip-padded-rows --check-numerics --check-numerics-at 1,2,3,4 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// A register tile of four rows over a runtime length %n, as register-tile and
// vector-fragments write it: thread %t holds rows 2·mi + t and both columns, the K loop
// outermost around the multiply-adds, and the epilogue stores the rows below %n. The
// multiply-adds of a row group (mi) whose first row, 2·mi, is at or past %n go under a guard
// (the thread's term, %t, at 0), the group's loop outermost. @fixed, the same tile with a
// constant bound, is left to NVRTC; @shared_sum reads an accumulator outside the guard and
// stays as it is.

// out[r, c] = sum_k a[r, k] * b[c, k] for the rows r < n.
kernel.func @tile(%a: memref<?x8xf32>, %b: memref<2x8xf32>, %out: memref<?x2xf32>, %n: index) block [2, 1, 1] {
  %acc = kernel.local : memref<2x2xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0.0 : f32
  %last = arith.subi %n, %c1 : index
  %t = kernel.thread_id x
  scf.for %i = %c0 to %c2 step %c1 {
    scf.for %j = %c0 to %c2 step %c1 {
      kernel.store %zero, %acc[%i, %j] : memref<2x2xf32>
    }
  }
  scf.for %k = %c0 to %c8 step %c1 {
    scf.for %mi = %c0 to %c2 step %c1 {
      scf.for %nj = %c0 to %c2 step %c1 {
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
// CHECK:       scf.for %mi = %c0 to %c2 step %c1 {
// CHECK-NEXT:      %row0 = arith.muli %mi, %c2 : index
// CHECK-NEXT:      %live = arith.cmpi ult, %row0, %n : index
// CHECK-NEXT:      scf.if %live {
// CHECK-NEXT:        scf.for %k = %c0 to %c8 step %c1 {
// CHECK-NEXT:          scf.for %nj = %c0 to %c2 step %c1 {
// CHECK-NEXT:            %r0 = arith.muli %mi, %c2 : index
// CHECK:                 kernel.store %s, %acc[%mi, %nj] : memref<2x2xf32>
// CHECK:       scf.if %both {

kernel.func @fixed(%a: memref<4x8xf32>, %b: memref<2x8xf32>, %out: memref<4x2xf32>) block [2, 1, 1] {
  %acc = kernel.local : memref<2x2xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0.0 : f32
  %t = kernel.thread_id x
  scf.for %i = %c0 to %c2 step %c1 {
    scf.for %j = %c0 to %c2 step %c1 {
      kernel.store %zero, %acc[%i, %j] : memref<2x2xf32>
    }
  }
  scf.for %k = %c0 to %c8 step %c1 {
    scf.for %mi = %c0 to %c2 step %c1 {
      scf.for %nj = %c0 to %c2 step %c1 {
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
// CHECK:       scf.for %k = %c0 to %c8 step %c1 {
// CHECK-NEXT:    scf.for %mi = %c0 to %c2 step %c1 {
// CHECK-NEXT:      scf.for %nj = %c0 to %c2 step %c1 {

kernel.func @shared_sum(%a: memref<?x8xf32>, %b: memref<2x8xf32>, %out: memref<?x2xf32>, %n: index) block [2, 1, 1] {
  %acc = kernel.local : memref<2x2xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0.0 : f32
  %last = arith.subi %n, %c1 : index
  %t = kernel.thread_id x
  scf.for %i = %c0 to %c2 step %c1 {
    scf.for %j = %c0 to %c2 step %c1 {
      kernel.store %zero, %acc[%i, %j] : memref<2x2xf32>
    }
  }
  scf.for %k = %c0 to %c8 step %c1 {
    scf.for %mi = %c0 to %c2 step %c1 {
      scf.for %nj = %c0 to %c2 step %c1 {
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
// CHECK:       scf.for %k = %c0 to %c8 step %c1 {
// CHECK-NEXT:    scf.for %mi = %c0 to %c2 step %c1 {
// CHECK-NEXT:      scf.for %nj = %c0 to %c2 step %c1 {

func.func @run(%a: memref<?x8xf32> {llmopt.input = "a", llmopt.dynamic = ["n"]}, %b: memref<2x8xf32> {llmopt.input = "b"}, %n: index {llmopt.symbol = "n", llmopt.max = 4 : i64}) -> (memref<?x2xf32>, memref<?x2xf32>) {
  %o = memref.alloc(%n) : memref<?x2xf32>
  kernel.launch @tile grid [1, 1, 1] block [2, 1, 1] smem 0 (%a, %b, %o, %n) : memref<?x8xf32>, memref<2x8xf32>, memref<?x2xf32>, index
  %q = memref.alloc(%n) : memref<?x2xf32>
  kernel.launch @shared_sum grid [1, 1, 1] block [2, 1, 1] smem 0 (%a, %b, %q, %n) : memref<?x8xf32>, memref<2x8xf32>, memref<?x2xf32>, index
  func.return %o, %q : memref<?x2xf32>, memref<?x2xf32>
}

// NUM: skip-padded-rows {{.*}} ok
