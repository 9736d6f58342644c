// RUN: llm-opt %s --split-input-file -p tile-to-kernel | filecheck %s
// RUN: llm-opt %s --split-input-file -p "tile-to-kernel,canonicalize,cse,kernel-to-cuda{index_bitwidth=64}" -t cuda | filecheck %s --check-prefix=CUDA
// RUN: llm-opt %s --split-input-file -p tile-to-kernel,canonicalize,cse,kernel-to-cuda --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// Asynchronous copies: `tile.async_copy` becomes `kernel.async_copy` with both index lists
// computed like a load's, commit and wait their `kernel` forms, and CUDA's pipeline
// primitives in the source. The copy's write to shared memory is not an access of the step
// that issues it, so the barriers are the ones the Tile IR states; its global read is a read.

// A row pipeline: each block's row goes through a two-slot shared buffer in chunks of 16,
// four threads each copying four floats; the copy of chunk k0 + 1 is in flight while chunk
// k0 is used (`tile.async_wait 1`), and the explicit barriers make the data visible and
// keep a slot from being overwritten while it is read.
func.func @forward(%x: memref<4x64xf32>) -> memref<4x64xf32> {
  %y = memref.alloc() : memref<4x64xf32>
  tile.kernel @pipelined grid [2, 1, 1] block [16, 1, 1] (%a = %x : memref<4x64xf32>, %o = %y : memref<4x64xf32>) {
    tile.forall (%b) in [4] over blocks {
      %s = tile.alloc shared : memref<2x16xf32>
      tile.forall (%t) in [4] over block_threads {
        tile.async_copy %a[%b, %t * 4] to %s[0, %t * 4] count 4 : memref<4x64xf32> to memref<2x16xf32>
      }
      tile.async_commit
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c4 = arith.constant 4 : index
      scf.for %k0 = %c0 to %c4 step %c1 {
        tile.forall (%t) in [4] over block_threads {
          tile.async_copy %a[%b, ((%k0 + 1) mod 4) * 16 + %t * 4] to %s[(%k0 + 1) mod 2, %t * 4] count 4 : memref<4x64xf32> to memref<2x16xf32>
        }
        tile.async_commit
        tile.async_wait 1
        kernel.barrier
        tile.forall (%j) in [16] over block_threads {
          %v = loop.load %s[%k0 mod 2, %j] : memref<2x16xf32>
          %w = arith.mulf %v, %v : f32
          loop.store %w, %o[%b, %k0 * 16 + %j] : memref<4x64xf32>
        }
        kernel.barrier
      }
      tile.async_wait 0
    }
  }
  func.return %y : memref<4x64xf32>
}

// CHECK-LABEL: kernel.func @pipelined(
// CHECK-NEXT:    %[[S:.*]] = kernel.shared : memref<2x16xf32>
// CHECK:         scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:           scf.for %[[T:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:        %[[FOUR:.*]] = arith.constant 4 : index
// CHECK-NEXT:        %[[COL:.*]] = arith.muli %[[T]], %[[FOUR]] : index
// CHECK-NEXT:        %[[ZERO:.*]] = arith.constant 0 : index
// CHECK-NEXT:        %[[DCOL:.*]] = arith.muli %[[T]], %[[FOUR]] : index
// CHECK-NEXT:        kernel.async_copy %{{.*}}[%[[B]], %[[COL]]] to %[[S]][%[[ZERO]], %[[DCOL]]] count 4 : memref<4x64xf32> to memref<2x16xf32>
// CHECK-NEXT:      }
// CHECK-NEXT:      kernel.async_commit
// CHECK-NOT:       kernel.barrier
// CHECK:           scf.for %[[K0:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NOT:         kernel.barrier
// The loop counter is known to be non-negative: its remainder is an unsigned one.
// CHECK:             %[[TWO:.*]] = arith.constant 2 : index
// CHECK-NEXT:        %[[SLOT:.*]] = arith.remui %{{.*}}, %[[TWO]] : index
// CHECK-NEXT:        %[[SCOL:.*]] = arith.muli %{{.*}}, %[[FOUR2:.*]] : index
// CHECK-NEXT:        kernel.async_copy %{{.*}}[%[[B]], %{{.*}}] to %[[S]][%[[SLOT]], %[[SCOL]]] count 4
// CHECK-NEXT:      }
// CHECK-NEXT:      kernel.async_commit
// CHECK-NEXT:      kernel.async_wait 1
// CHECK-NEXT:      kernel.barrier
// CHECK-NOT:       kernel.barrier
// CHECK:           kernel.load %[[S]]
// CHECK:           kernel.store
// CHECK-NEXT:      kernel.barrier
// CHECK-NEXT:    }
// CHECK-NEXT:    kernel.async_wait 0
// CHECK-NEXT:  }
// CHECK-NEXT:  kernel.return

// CUDA:      #include <cuda_pipeline_primitives.h>
// CUDA-LABEL: void __launch_bounds__(16) pipelined(
// CUDA-NEXT:    const float* __restrict__ a,
// CUDA-NEXT:    float* __restrict__ o) {
// CUDA-NEXT:    __shared__ __align__(16) float s[32];
// CUDA:           __pipeline_memcpy_async(&s[v0], &a[b * 64 + v0], 16);
// CUDA-NEXT:    }
// CUDA-NEXT:    __pipeline_commit();
// CUDA:           __pipeline_memcpy_async(&s[(long long)((unsigned long long)v1 % 2ull) * 16 + v2], &a[b * 64 + ((long long)((unsigned long long)v1 % 4ull) * 16 + v2)], 16);
// CUDA-NEXT:    }
// CUDA-NEXT:    __pipeline_commit();
// CUDA-NEXT:    __pipeline_wait_prior(1);
// CUDA-NEXT:    __syncthreads();
// CUDA:         __pipeline_wait_prior(0);

// NUM:      // numerics: tolerance
// NUM-NEXT: tile-to-kernel {{.*}} ok
// NUM-NEXT: canonicalize {{.*}} ok
// NUM-NEXT: cse {{.*}} ok
// NUM-NEXT: kernel-to-cuda {{.*}}(not interpreted

// -----

// The copy's global read is a read like a load's: the row its threads read was written by
// other threads of the block in the step before, so a barrier goes between the two steps.
// Its shared write is not: after the copies only the stated wait and barrier appear. Eight
// bytes (two f32) a thread.
func.func @forward(%x: memref<2x32xf32>) -> memref<2x32xf32> {
  %t0 = memref.alloc() : memref<2x32xf32>
  %y = memref.alloc() : memref<2x32xf32>
  tile.kernel @read_after_write grid [2, 1, 1] block [32, 1, 1] (%a = %x : memref<2x32xf32>, %m = %t0 : memref<2x32xf32>, %o = %y : memref<2x32xf32>) {
    tile.forall (%b) in [2] over blocks {
      %s = tile.alloc shared : memref<32xf32>
      tile.forall (%j) in [32] over block_threads {
        %v = loop.load %a[%b, 31 - %j] : memref<2x32xf32>
        loop.store %v, %m[%b, %j] : memref<2x32xf32>
      }
      tile.forall (%t) in [16] over block_threads {
        tile.async_copy %m[%b, %t * 2] to %s[%t * 2] count 2 : memref<2x32xf32> to memref<32xf32>
      }
      tile.async_commit
      tile.async_wait 0
      kernel.barrier
      tile.forall (%j) in [32] over block_threads {
        %v = loop.load %s[%j] : memref<32xf32>
        loop.store %v, %o[%b, %j] : memref<2x32xf32>
      }
    }
  }
  func.return %y : memref<2x32xf32>
}

// CHECK-LABEL: kernel.func @read_after_write(
// CHECK:         kernel.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : memref<2x32xf32>
// CHECK-NEXT:    kernel.barrier
// CHECK-NOT:     kernel.barrier
// CHECK:         kernel.async_copy %{{.*}} count 2 : memref<2x32xf32> to memref<32xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    kernel.async_commit
// CHECK-NEXT:    kernel.async_wait 0
// CHECK-NEXT:    kernel.barrier
// CHECK-NOT:     kernel.barrier
// CHECK:         kernel.return

// CUDA-LABEL: void __launch_bounds__(32) read_after_write(
// CUDA:         __pipeline_memcpy_async(&s[v0], &m[b * 32 + v0], 8);

// NUM:      // numerics: tolerance
// NUM-NEXT: tile-to-kernel {{.*}} ok
// NUM-NEXT: canonicalize {{.*}} ok
// NUM-NEXT: cse {{.*}} ok
// NUM-NEXT: kernel-to-cuda {{.*}}(not interpreted
