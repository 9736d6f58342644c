// RUN: llm-opt %s -p 'length-buckets{bounds=8,32}' | filecheck %s
// RUN: llm-opt %s -p 'length-buckets{bounds=8,32},split-k,register-tile,stage-inputs,async-copy,prefetch-stages,pad-shared,vector-fragments,tile-to-kernel' | filecheck %s --check-prefix=KERNEL
// RUN: llm-opt %s -p 'length-buckets{bounds=8,32},split-k,register-tile,stage-inputs,async-copy,prefetch-stages,pad-shared,vector-fragments,tile-to-kernel' --check-numerics --check-numerics-lengths 4 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: not llm-opt %s -p 'length-buckets{bounds=32,8}' 2>&1 | filecheck %s --check-prefix=BAD
// A product over a symbolic number of rows (at most 64) gets a kernel variant per length
// bucket, chosen on the host by scf.if: at most 8 rows its 512 outputs are too few for a
// register tile (it stays one thread per output), above that it is tiled. The bound 32
// gives the same schedule as the maximum, so it shares the maximum's variant.

func.func @forward(%w: memref<64x256xf32> {llmopt.param = "w"},
                   %x: memref<?x256xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                   %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> memref<?x64xf32> {
  %out = memref.alloc(%seq) : memref<?x64xf32>
  %c64 = arith.constant 64 : index
  %points = arith.muli %seq, %c64 : index
  %c256 = arith.constant 256 : index
  %grid = arith.ceildivui %points, %c256 : index
  tile.kernel @linear grid [%grid max 16, 1, 1] block [256, 1, 1] (%o = %out : memref<?x64xf32>, %n = %seq : index, %ww = %w : memref<64x256xf32>, %a = %x : memref<?x256xf32>) {
    tile.forall (%i, %j) in [%n max 64, 64] over threads {
      %s = loop.reduce add %k = 0 to 256 : f32 {
        %v = loop.load %a[%i, %k] : memref<?x256xf32>
        %u = loop.load %ww[%j, %k] : memref<64x256xf32>
        %p = arith.mulf %v, %u : f32
        loop.yield %p : f32
      }
      loop.store %s, %o[%i, %j] : memref<?x64xf32>
    }
  }
  func.return %out : memref<?x64xf32>
}

// CHECK:      %[[C8:.*]] = arith.constant 8 : index
// CHECK-NEXT: %le8 = arith.cmpi ule, %seq, %[[C8]] : index
// CHECK-NEXT: scf.if %le8 {
// CHECK-NEXT:   tile.kernel @linear_le8 grid [%grid max 16, 1, 1]
// CHECK-NEXT:     tile.forall (%{{.*}}, %{{.*}}) in [%n max 8, 64] over threads {
// CHECK:        } {llmopt.bucket = 8 : i64}
// CHECK-NEXT: } else {
// CHECK-NEXT:   tile.kernel @linear grid [%grid max 16, 1, 1]
// CHECK-NEXT:     tile.forall (%{{.*}}, %{{.*}}) in [%n max 64, 64] over threads {
// CHECK:        } {llmopt.bucket = 64 : i64}
// CHECK-NEXT: }
// CHECK-NOT:  tile.kernel
// CHECK:      func.return

// The variants lower to two kernels, launched from the two branches:
// KERNEL:      kernel.func @linear_le8(
// KERNEL:      kernel.func @linear(
// KERNEL:      scf.if %le8 {
// KERNEL-NEXT:   kernel.launch @linear_le8
// KERNEL-NEXT: } else {
// KERNEL:        kernel.launch @linear

// NUM: length-buckets {{.*}} ok
// NUM: register-tile {{.*}} ok
// NUM: tile-to-kernel {{.*}} ok

// BAD: bounds must increase
