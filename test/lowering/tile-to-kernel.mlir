// RUN: llm-opt %s --split-input-file -p tile-to-kernel | filecheck %s
// RUN: llm-opt %s --split-input-file -p "tile-to-kernel{unroll_folds=false}" | filecheck %s --check-prefix=STRIDED
// Every tile.kernel becomes a kernel.func and a kernel.launch; foralls become strided loops,
// cooperative reductions become shuffles, shared memory and barriers.

// One point a thread: the global thread id strides over the 700 points, which are
// delinearised innermost first.
func.func @run_odd(%x: memref<7x100xf32>, %y: memref<7x100xf32>) {
  tile.kernel @odd grid [3, 1, 1] block [256, 1, 1] (%a = %x : memref<7x100xf32>, %b = %y : memref<7x100xf32>) {
    tile.forall (%i, %j) in [7, 100] over threads {
      %v = loop.load %a[%i, %j] : memref<7x100xf32>
      loop.store %v, %b[%i, (%j + 1) mod 100] : memref<7x100xf32>
    }
  }
  func.return
}

// CHECK-LABEL: kernel.func @odd(%a: memref<7x100xf32>, %b: memref<7x100xf32>) block [256, 1, 1] {
// CHECK-NEXT:    %[[BID:.*]] = kernel.block_id x
// CHECK-NEXT:    %[[BDIM:.*]] = kernel.block_dim x
// CHECK-NEXT:    %[[TID:.*]] = kernel.thread_id x
// CHECK-NEXT:    %[[T0:.*]] = arith.muli %[[BID]], %[[BDIM]] : index
// CHECK-NEXT:    %[[LIN:.*]] = arith.addi %[[T0]], %[[TID]] : index
// CHECK-NEXT:    %[[GDIM:.*]] = kernel.grid_dim x
// CHECK-NEXT:    %[[STRIDE:.*]] = arith.muli %[[GDIM]], %[[BDIM]] : index
// CHECK-NEXT:    %[[N:.*]] = arith.constant 700 : index
// CHECK-NEXT:    scf.for %[[P:.*]] = %[[LIN]] to %[[N]] step %[[STRIDE]] {
// CHECK-NEXT:      %[[C100:.*]] = arith.constant 100 : index
// CHECK-NEXT:      %j = arith.remui %[[P]], %[[C100]] : index
// CHECK-NEXT:      %i = arith.divui %[[P]], %[[C100]] : index
// CHECK-NEXT:      %v = kernel.load %a[%i, %j] : memref<7x100xf32>
// The coordinate j + 1 is in [1, 100]: remui is exact.
// CHECK-NEXT:      %[[C1:.*]] = arith.constant 1 : index
// CHECK-NEXT:      %[[J1:.*]] = arith.addi %j, %[[C1]] : index
// CHECK-NEXT:      %[[C100B:.*]] = arith.constant 100 : index
// CHECK-NEXT:      %[[JM:.*]] = arith.remui %[[J1]], %[[C100B]] : index
// CHECK-NEXT:      kernel.store %v, %b[%i, %[[JM]]] : memref<7x100xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    kernel.return
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @run_odd
// CHECK-NEXT:    kernel.launch @odd grid [3, 1, 1] block [256, 1, 1] smem 0 (%x, %y) : memref<7x100xf32>, memref<7x100xf32>
// CHECK-NEXT:    func.return

// -----

// A row a block: each thread folds its 2048 / 256 = 8 points of the row in a fixed loop
// marked for full unrolling (its loads all in flight at once), each warp with xor shuffles
// and the 8 warps through shared memory; the block's threads then share the row.
func.func @run_rmsnorm(%x: memref<8x2048xf32>, %y: memref<8x2048xf32>) {
  tile.kernel @rmsnorm grid [8, 1, 1] block [256, 1, 1] (%a = %x : memref<8x2048xf32>, %o = %y : memref<8x2048xf32>) {
    tile.forall (%i) in [8] over blocks {
      %s = tile.coop_reduce add %k = 0 to 2048 : f32 {
        %v = loop.load %a[%i, %k] : memref<8x2048xf32>
        %sq = arith.mulf %v, %v : f32
        tile.yield %sq : f32
      }
      %r = math.rsqrt %s : f32
      tile.forall (%j) in [2048] over block_threads {
        %v = loop.load %a[%i, %j] : memref<8x2048xf32>
        %t = arith.mulf %v, %r : f32
        loop.store %t, %o[%i, %j] : memref<8x2048xf32>
      }
    }
  }
  func.return
}

// CHECK-LABEL: kernel.func @rmsnorm(%a: memref<8x2048xf32>, %o: memref<8x2048xf32>) block [256, 1, 1] {
// CHECK-NEXT:    %[[SH:.*]] = kernel.shared : memref<8xf32>
// CHECK-NEXT:    %[[BID:.*]] = kernel.block_id x
// CHECK-NEXT:    %[[GDIM:.*]] = kernel.grid_dim x
// CHECK-NEXT:    %[[ROWS:.*]] = arith.constant 8 : index
// CHECK-NEXT:    scf.for %i = %[[BID]] to %[[ROWS]] step %[[GDIM]] {
// CHECK-NEXT:      %[[TID:.*]] = kernel.thread_id x
// CHECK-NEXT:      %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:      %[[C0:.*]] = arith.constant 0 : index
// CHECK-NEXT:      %[[NR:.*]] = arith.constant 8 : index
// CHECK-NEXT:      %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT:      %[[PART:.*]] = scf.for %round = %[[C0]] to %[[NR]] step %[[ONE]] iter_args(%[[ACC:.*]] = %[[ZERO]]) -> (f32) {
// CHECK-NEXT:        %[[B:.*]] = arith.constant 256 : index
// CHECK-NEXT:        %[[OFF0:.*]] = arith.muli %round, %[[B]] : index
// CHECK-NEXT:        %k = arith.addi %[[OFF0]], %[[TID]] : index
// CHECK-NEXT:        %v = kernel.load %a[%i, %k] : memref<8x2048xf32>
// CHECK-NEXT:        %sq = arith.mulf %v, %v : f32
// CHECK-NEXT:        %[[NEXT:.*]] = arith.addf %[[ACC]], %sq : f32
// CHECK-NEXT:        scf.yield %[[NEXT]] : f32
// CHECK-NEXT:      } {unroll = 0 : i64}
// CHECK-NEXT:      %[[S16:.*]] = kernel.shuffle_xor %[[PART]], 16 : f32
// CHECK-NEXT:      %[[A16:.*]] = arith.addf %[[PART]], %[[S16]] : f32
// CHECK-NEXT:      %[[S8:.*]] = kernel.shuffle_xor %[[A16]], 8 : f32
// CHECK-NEXT:      %[[A8:.*]] = arith.addf %[[A16]], %[[S8]] : f32
// CHECK-NEXT:      %[[S4:.*]] = kernel.shuffle_xor %[[A8]], 4 : f32
// CHECK-NEXT:      %[[A4:.*]] = arith.addf %[[A8]], %[[S4]] : f32
// CHECK-NEXT:      %[[S2:.*]] = kernel.shuffle_xor %[[A4]], 2 : f32
// CHECK-NEXT:      %[[A2:.*]] = arith.addf %[[A4]], %[[S2]] : f32
// CHECK-NEXT:      %[[S1:.*]] = kernel.shuffle_xor %[[A2]], 1 : f32
// CHECK-NEXT:      %[[WARP_TOTAL:.*]] = arith.addf %[[A2]], %[[S1]] : f32
// CHECK-NEXT:      %[[C32:.*]] = arith.constant 32 : index
// CHECK-NEXT:      %[[LANE:.*]] = arith.remui %[[TID]], %[[C32]] : index
// CHECK-NEXT:      %[[WARP:.*]] = arith.divui %[[TID]], %[[C32]] : index
// CHECK-NEXT:      %[[LEADER:.*]] = arith.cmpi eq, %[[LANE]], %[[C0]] : index
// CHECK-NEXT:      scf.if %[[LEADER]] {
// CHECK-NEXT:        kernel.store %[[WARP_TOTAL]], %[[SH]][%[[WARP]]] : memref<8xf32>
// CHECK-NEXT:      }
// CHECK-NEXT:      kernel.barrier
// CHECK-NEXT:      %s = scf.for %w = %[[C0]] to %[[NR]] step %[[ONE]] iter_args(%[[T:.*]] = %[[ZERO]]) -> (f32) {
// CHECK-NEXT:        %[[X:.*]] = kernel.load %[[SH]][%w] : memref<8xf32>
// CHECK-NEXT:        %[[Y:.*]] = arith.addf %[[T]], %[[X]] : f32
// CHECK-NEXT:        scf.yield %[[Y]] : f32
// CHECK-NEXT:      }
// CHECK-NEXT:      kernel.barrier
// CHECK-NEXT:      %r = math.rsqrt %s : f32
// Every thread owns 2048 / 256 = 8 columns: a fixed, unrolled loop over its rounds.
// CHECK-NEXT:      %[[TID2:.*]] = kernel.thread_id x
// CHECK-NEXT:      %[[R0:.*]] = arith.constant 0 : index
// CHECK-NEXT:      %[[ROUNDS:.*]] = arith.constant 8 : index
// CHECK-NEXT:      %[[R1:.*]] = arith.constant 1 : index
// CHECK-NEXT:      scf.for %[[RND:round_1]] = %[[R0]] to %[[ROUNDS]] step %[[R1]] {
// CHECK-NEXT:        %[[B:.*]] = arith.constant 256 : index
// CHECK-NEXT:        %[[OFF:.*]] = arith.muli %[[RND]], %[[B]] : index
// CHECK-NEXT:        %j = arith.addi %[[OFF]], %[[TID2]] : index
// CHECK-NEXT:        %{{.*}} = kernel.load %a[%i, %j] : memref<8x2048xf32>
// CHECK:             kernel.store %t, %o[%i, %j] : memref<8x2048xf32>
// CHECK-NEXT:      } {unroll = 0 : i64}
// CHECK-NEXT:    }
// CHECK-NEXT:    kernel.return
// CHECK-LABEL: func.func @run_rmsnorm
// CHECK-NEXT:    kernel.launch @rmsnorm grid [8, 1, 1] block [256, 1, 1] smem 0 (%x, %y)

// With unroll_folds=false the same sum keeps the strided fold (the form to compare with).
// STRIDED-LABEL: kernel.func @rmsnorm
// STRIDED:         %[[TID:.*]] = kernel.thread_id x
// STRIDED-NEXT:    %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// STRIDED-NEXT:    %[[K:.*]] = arith.constant 2048 : index
// STRIDED-NEXT:    %[[B:.*]] = arith.constant 256 : index
// STRIDED-NEXT:    %{{.*}} = scf.for %k = %[[TID]] to %[[K]] step %[[B]] iter_args(%{{.*}} = %[[ZERO]]) -> (f32) {
// STRIDED:         }
// STRIDED-NEXT:    kernel.shuffle_xor

// -----

// A sum the block's threads do not divide (2000 points, 256 threads; and one over a runtime
// bound) keeps the strided fold: thread t takes t, t + 256, ... below the trip count.
func.func @run_ragged_sum(%x: memref<2000xf32>, %y: memref<1xf32>) {
  tile.kernel @ragged_sum grid [1, 1, 1] block [256, 1, 1] (%a = %x : memref<2000xf32>, %o = %y : memref<1xf32>) {
    tile.forall (%i) in [1] over blocks {
      %s = tile.coop_reduce add %k = 0 to 2000 : f32 {
        %v = loop.load %a[%k] : memref<2000xf32>
        tile.yield %v : f32
      }
      %c0 = arith.constant 0 : index
      loop.store %s, %o[%c0] : memref<1xf32>
    }
  }
  func.return
}

// CHECK-LABEL: kernel.func @ragged_sum
// CHECK:         %[[TID:.*]] = kernel.thread_id x
// CHECK-NEXT:    %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:    %[[N:.*]] = arith.constant 2000 : index
// CHECK-NEXT:    %[[B:.*]] = arith.constant 256 : index
// CHECK-NEXT:    %{{.*}} = scf.for %k = %[[TID]] to %[[N]] step %[[B]] iter_args(%{{.*}} = %[[ZERO]]) -> (f32) {
// CHECK-NOT:     unroll
// CHECK:         kernel.shuffle_xor

// -----

// A step that reads what an earlier step wrote through other threads waits at a barrier;
// a single-warp cooperative reduction needs no shared memory and no barrier of its own.
func.func @run_softmax(%x: memref<6x30xf32>, %y: memref<6x30xf32>) {
  tile.kernel @softmax grid [6, 1, 1] block [32, 1, 1] (%a = %x : memref<6x30xf32>, %o = %y : memref<6x30xf32>) {
    tile.forall (%i) in [6] over blocks {
      %m = tile.coop_reduce max %k = 0 to 30 : f32 {
        %v = loop.load %a[%i, %k] : memref<6x30xf32>
        tile.yield %v : f32
      }
      tile.forall (%j) in [30] over block_threads {
        %v = loop.load %a[%i, %j] : memref<6x30xf32>
        %d = arith.subf %v, %m : f32
        %e = math.exp %d : f32
        loop.store %e, %o[%i, %j] : memref<6x30xf32>
      }
      %s = tile.coop_reduce add %k = 0 to 30 : f32 {
        %v = loop.load %o[%i, %k] : memref<6x30xf32>
        tile.yield %v : f32
      }
      tile.forall (%j) in [30] over block_threads {
        %v = loop.load %o[%i, %j] : memref<6x30xf32>
        %q = arith.divf %v, %s : f32
        loop.store %q, %o[%i, %j] : memref<6x30xf32>
      }
    }
  }
  func.return
}

// CHECK-LABEL: kernel.func @softmax
// CHECK-NOT:     kernel.shared
// CHECK:         arith.constant 0xff800000 : f32
// CHECK:         scf.for %k = {{.*}} iter_args
// CHECK:           arith.maximumf
// CHECK:         kernel.shuffle_xor %{{.*}}, 16 : f32
// CHECK:         kernel.shuffle_xor %{{.*}}, 1 : f32
// CHECK-NEXT:    %m = arith.maximumf
// CHECK-NOT:     kernel.barrier
// CHECK:         math.exp
// CHECK:         kernel.store %e, %o
// CHECK-NEXT:  }
// CHECK-NEXT:  kernel.barrier
// CHECK-NEXT:  kernel.thread_id x
// CHECK:         scf.for %k{{.*}} iter_args
// CHECK:           kernel.load %o
// CHECK:         %s = arith.addf
// CHECK-NEXT:    kernel.barrier
// CHECK-NEXT:    kernel.thread_id x
// CHECK:         arith.divf
// CHECK:       kernel.return

// -----

// Sequential loops inside a thread: loop.for and loop.reduce become scf.for (the reduction
// with an accumulator from its identity). Coordinates that may be negative use exact
// floor division and a non-negative remainder.
func.func @run_seq(%x: memref<4x8xf32>, %y: memref<4x8xf32>) {
  tile.kernel @seq grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4x8xf32>, %b = %y : memref<4x8xf32>) {
    tile.forall (%i) in [4] over threads {
      %s = loop.reduce min %k = 0 to 8 : f32 {
        %v = loop.load %a[(%i - 1) floordiv 2 + 1, (%k - 3) mod 8] : memref<4x8xf32>
        loop.yield %v : f32
      }
      loop.for %j = 0 to 8 {
        loop.store %s, %b[%i, %j floordiv 1] : memref<4x8xf32>
      }
    }
  }
  func.return
}

// CHECK-LABEL: kernel.func @seq
// CHECK:         scf.for %i = {{.*}} {
// CHECK-NEXT:      %[[LB:.*]] = arith.constant 0 : index
// CHECK-NEXT:      %[[UB:.*]] = arith.constant 8 : index
// CHECK-NEXT:      %[[ST:.*]] = arith.constant 1 : index
// CHECK-NEXT:      %[[INF:.*]] = arith.constant 0x7f800000 : f32
// CHECK-NEXT:      %s = scf.for %k = %[[LB]] to %[[UB]] step %[[ST]] iter_args(%[[ACC:.*]] = %[[INF]]) -> (f32) {
// CHECK-NEXT:        %[[CM1:.*]] = arith.constant -1 : index
// CHECK-NEXT:        %[[IM1:.*]] = arith.addi %i, %[[CM1]] : index
// CHECK-NEXT:        %[[C2:.*]] = arith.constant 2 : index
// CHECK-NEXT:        %[[FD:.*]] = arith.floordivsi %[[IM1]], %[[C2]] : index
// CHECK-NEXT:        %[[C1:.*]] = arith.constant 1 : index
// CHECK-NEXT:        %[[ROW:.*]] = arith.addi %[[FD]], %[[C1]] : index
// CHECK-NEXT:        %[[CM3:.*]] = arith.constant -3 : index
// CHECK-NEXT:        %[[KM3:.*]] = arith.addi %k, %[[CM3]] : index
// CHECK-NEXT:        %[[C8:.*]] = arith.constant 8 : index
// CHECK-NEXT:        %[[R0:.*]] = arith.remsi %[[KM3]], %[[C8]] : index
// CHECK-NEXT:        %[[R1:.*]] = arith.addi %[[R0]], %[[C8]] : index
// CHECK-NEXT:        %[[COL:.*]] = arith.remsi %[[R1]], %[[C8]] : index
// CHECK-NEXT:        %v = kernel.load %a[%[[ROW]], %[[COL]]] : memref<4x8xf32>
// CHECK-NEXT:        %[[MIN:.*]] = arith.minimumf %[[ACC]], %v : f32
// CHECK-NEXT:        scf.yield %[[MIN]] : f32
// CHECK-NEXT:      }
// CHECK:           scf.for %j = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:        kernel.store %s, %b[%i, %j] : memref<4x8xf32>
// CHECK-NEXT:      }

// -----

// Kernel names stay unique at module level.
func.func @f(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
    tile.forall (%i) in [4] over threads {
      %v = loop.load %a[%i] : memref<4xf32>
      loop.store %v, %a[%i] : memref<4xf32>
    }
  }
  func.return
}
func.func @g(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
    tile.forall (%i) in [4] over threads {
      %v = loop.load %a[%i] : memref<4xf32>
      %w = arith.addf %v, %v : f32
      loop.store %w, %a[%i] : memref<4xf32>
    }
  }
  func.return
}

// CHECK:       kernel.func @k(
// CHECK:       func.func @f
// CHECK-NEXT:    kernel.launch @k grid
// CHECK:       kernel.func @k_1(
// CHECK:       func.func @g
// CHECK-NEXT:    kernel.launch @k_1 grid

// -----

// Identical kernels (identical layers) are lowered once: one kernel.func, launched twice
// with each launch's own buffers.
func.func @twice(%x: memref<4xf32>, %y: memref<4xf32>) {
  tile.kernel @layer0 grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
    tile.forall (%i) in [4] over threads {
      %v = loop.load %a[%i] : memref<4xf32>
      loop.store %v, %a[%i] : memref<4xf32>
    }
  }
  tile.kernel @layer1 grid [1, 1, 1] block [32, 1, 1] (%b = %y : memref<4xf32>) {
    tile.forall (%i) in [4] over threads {
      %v = loop.load %b[%i] : memref<4xf32>
      loop.store %v, %b[%i] : memref<4xf32>
    }
  }
  func.return
}

// CHECK:       kernel.func @layer0(
// CHECK-NOT:   kernel.func
// CHECK:       func.func @twice
// CHECK-NEXT:    kernel.launch @layer0 grid [1, 1, 1] block [32, 1, 1] smem 0 (%x)
// CHECK-NEXT:    kernel.launch @layer0 grid [1, 1, 1] block [32, 1, 1] smem 0 (%y)
