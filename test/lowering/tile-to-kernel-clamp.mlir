// RUN: llm-opt %s --split-input-file -p "tile-to-kernel{zero_fill=true}" | filecheck %s
// RUN: llm-opt %s --split-input-file -p "tile-to-kernel{zero_fill=true},canonicalize,cse,kernel-to-cuda{index_bitwidth=64}" -t cuda | filecheck %s --check-prefix=CUDA
// RUN: llm-opt %s --split-input-file -p tile-to-kernel,canonicalize,cse,kernel-to-cuda --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p tile-to-kernel | filecheck %s --check-prefix=CLAMP
// RUN: llm-opt %s --split-input-file -p "tile-to-kernel,canonicalize,cse,kernel-to-cuda{index_bitwidth=64}" -t cuda | filecheck %s --check-prefix=CLAMPCUDA
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
// the row is clamped to 19, the column (at most 4, its last whole copy) is left alone
// (CLAMP). With zero_fill the copy also reads only where the row was within 19: rows 20-31
// read nothing and are zeros (cp.async's source size 0), the values of a ragged edge that a
// real schedule never stores. This kernel stores them, so it would read them back as zeros:
// the numerics are compared without zero_fill, where they are row 19 again.
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
// CHECK:         %[[ROW:.*]] = arith.addi
// CHECK-NEXT:    %[[LAST:.*]] = arith.constant 19 : index
// CHECK-NEXT:    %[[CLAMPED:.*]] = arith.minsi %[[ROW]], %[[LAST]] : index
// CHECK-NOT:     arith.minsi
// CHECK:         %[[OK:.*]] = arith.cmpi sle, %[[ROW]], %[[LAST]] : index
// CHECK-NEXT:    kernel.async_copy %{{.*}}[%[[CLAMPED]], %{{.*}}] to %{{.*}} count 4 if %[[OK]] :

// CUDA: asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :  : "r"((unsigned int)__cvta_generic_to_shared(&s[t * 8 + {{.*}}])), "l"(__cvta_generic_to_global(&a[min([[R:.*]], 19LL) * 8 + {{.*}}])), "r"(([[R]] <= 19) ? 16 : 0) : "memory");

// CLAMP-LABEL: kernel.func @copies_1
// CLAMP:         kernel.async_copy %{{.*}} count 4 : memref<20x8xf32>
// CLAMPCUDA: __pipeline_memcpy_async(&s[t * 8 + {{.*}}], &a[min(b * 16 + t, 19LL) * 8 + {{.*}}], 16);

// NUM: tile-to-kernel {{.*}} ok
// NUM-NOT: FAIL
