// RUN: llm-opt %s --split-input-file -p tile-to-kernel | filecheck %s
// RUN: llm-opt %s --split-input-file -p "tile-to-kernel,canonicalize,cse,kernel-to-cuda{index_bitwidth=64}" -t cuda | filecheck %s --check-prefix=CUDA
// RUN: llm-opt %s --split-input-file -p tile-to-kernel,canonicalize,cse,kernel-to-cuda --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// Clamped loads and copies, the guards of a ragged tile: a coordinate the range analysis
// cannot bound below the buffer's last index goes through `arith.minsi` with it (for a
// copy of n elements, the innermost with `extent - n`); coordinates it can bound stay as
// they are. A block of 16 threads reads rows 16·b + t of a 20-row buffer: rows 20 to 31
// read row 19.

func.func @rows(%x: memref<20x8xf32>) -> memref<2x16x8xf32> {
  %out = memref.alloc() : memref<2x16x8xf32>
  tile.kernel @rows grid [2, 1, 1] block [16, 1, 1] (%a = %x : memref<20x8xf32>, %o = %out : memref<2x16x8xf32>) {
    tile.forall (%b) in [2] over blocks {
      tile.forall (%t, %j) in [16, 8] over block_threads {
        %v = loop.load %a[%b * 16 + %t, %j] clamp : memref<20x8xf32>
        loop.store %v, %o[%b, %t, %j] : memref<2x16x8xf32>
      }
    }
  }
  func.return %out : memref<2x16x8xf32>
}

// CHECK-LABEL: kernel.func @rows_1
// CHECK:         %[[ROW:.*]] = arith.addi %{{.*}}, %t : index
// CHECK-NEXT:    %[[LAST:.*]] = arith.constant 19 : index
// CHECK-NEXT:    %[[CLAMPED:.*]] = arith.minsi %[[ROW]], %[[LAST]] : index
// CHECK-NEXT:    kernel.load %{{.*}}[%[[CLAMPED]], %{{.*}}] : memref<20x8xf32>

// CUDA: a[min(b * 16 + t, 19LL) * 8 + j];

// NUM: tile-to-kernel {{.*}} ok

// -----

// A 16-byte copy of four floats from rows 16·b + t of a 20 x 8 buffer into a shared tile:
// the row is clamped to 19, the column (at most 4, its last whole copy) is left alone.
func.func @copies(%x: memref<20x8xf32>) -> memref<2x16x8xf32> {
  %out = memref.alloc() : memref<2x16x8xf32>
  tile.kernel @copies grid [2, 1, 1] block [32, 1, 1] (%a = %x : memref<20x8xf32>, %o = %out : memref<2x16x8xf32>) {
    tile.forall (%b) in [2] over blocks {
      %s = tile.alloc shared : memref<16x8xf32>
      tile.forall (%t, %c) in [16, 2] over block_threads {
        tile.async_copy %a[%b * 16 + %t, %c * 4] clamp to %s[%t, %c * 4] count 4 : memref<20x8xf32> to memref<16x8xf32>
      }
      tile.async_commit
      tile.async_wait 0
      kernel.barrier
      tile.forall (%t, %j) in [16, 8] over block_threads {
        %v = loop.load %s[%t, %j] : memref<16x8xf32>
        loop.store %v, %o[%b, %t, %j] : memref<2x16x8xf32>
      }
    }
  }
  func.return %out : memref<2x16x8xf32>
}

// CHECK-LABEL: kernel.func @copies_1
// CHECK:         %[[LAST:.*]] = arith.constant 19 : index
// CHECK-NEXT:    %[[CLAMPED:.*]] = arith.minsi %{{.*}}, %[[LAST]] : index
// CHECK-NOT:     arith.minsi
// CHECK:         kernel.async_copy %{{.*}}[%[[CLAMPED]], %{{.*}}] to %{{.*}} count 4

// CUDA: __pipeline_memcpy_async(&s[t * 8 + {{.*}}], &a[min(b * 16 + t, 19LL) * 8 + {{.*}}], 16);

// NUM: tile-to-kernel {{.*}} ok
