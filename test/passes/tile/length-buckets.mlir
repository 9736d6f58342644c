// RUN: llm-opt %s -p 'length-buckets{bounds=8,32}' | filecheck %s
// RUN: llm-opt %s -p 'length-buckets{bounds=8,32},split-k,register-tile,stage-inputs,async-copy,prefetch-stages,pad-shared,vector-fragments,tile-to-kernel' | filecheck %s --check-prefix=KERNEL
// RUN: llm-opt %s -p 'length-buckets{bounds=8,32},split-k,register-tile,stage-inputs,async-copy,prefetch-stages,pad-shared,vector-fragments,tile-to-kernel' --check-numerics --check-numerics-at 1,8,9,40 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'length-buckets{bounds=8,32 coop_rows=0}' | filecheck %s --check-prefix=NOCOOP
// RUN: llm-opt %s -p 'length-buckets{bounds=8,32},warp-gemv' | filecheck %s --check-prefix=GEMV
// RUN: llm-opt %s -p 'length-buckets{bounds=8,32},warp-gemv,tile-to-kernel' --check-numerics --check-numerics-at 1,2,3,40 2>&1 >/dev/null | filecheck %s --check-prefix=NUM1
// RUN: llm-opt %s -p 'length-buckets{bounds=8,32 coop_rows=1}' | filecheck %s --check-prefix=ONE
// RUN: not llm-opt %s -p 'length-buckets{bounds=32,8}' 2>&1 | filecheck %s --check-prefix=BAD
// RUN: not llm-opt %s -p 'length-buckets{coop_rows=-1}' 2>&1 | filecheck %s --check-prefix=BADCOOP
// A product over a symbolic number of rows (at most 64) gets a kernel variant per length
// bucket, chosen on the host by scf.if: one row, then two, get the cooperative schedule (a
// block per output, the reduction shared by its threads, the rows innermost; the one-row
// variant static); at most 8 rows its 512
// outputs are too few for a register tile (it stays one thread per output), above that it
// is tiled. The bound 32 gives the same schedule as the maximum, so it shares the
// maximum's variant.

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

// CHECK:      %[[C1:.*]] = arith.constant 1 : index
// CHECK-NEXT: %le1 = arith.cmpi ule, %seq, %[[C1]] : index
// CHECK-NEXT: scf.if %le1 {
// CHECK-NEXT:   tile.kernel @linear_coop1 grid [64, 1, 1] block [256, 1, 1]
// CHECK-NEXT:     tile.forall (%j, %i) in [64, 1] over blocks {
// CHECK-NEXT:       %s = tile.coop_reduce add %k = 0 to 256 : f32 {
// CHECK:            tile.forall (%once) in [1] over block_threads {
// CHECK-NEXT:         loop.store %s, %o[%i, %j]
// CHECK:        } {llmopt.bucket = 1 : i64, llmopt.coop}
// CHECK-NEXT: } else {
// CHECK-NEXT:   %[[C2:.*]] = arith.constant 2 : index
// CHECK-NEXT:   %le2 = arith.cmpi ule, %seq, %[[C2]] : index
// CHECK-NEXT:   scf.if %le2 {
// CHECK-NEXT:     %[[OUTPUTS:.*]] = arith.constant 64 : index
// CHECK-NEXT:     %grid_coop2 = arith.muli %seq, %[[OUTPUTS]] : index
// CHECK-NEXT:     tile.kernel @linear_coop2 grid [%grid_coop2 max 128, 1, 1] block [256, 1, 1]
// CHECK-NEXT:       tile.forall (%j, %i) in [64, %n max 2] over blocks {
// CHECK:          } {llmopt.bucket = 2 : i64, llmopt.coop}
// CHECK-NEXT:   } else {
// CHECK-NEXT:     %[[C8:.*]] = arith.constant 8 : index
// CHECK-NEXT:     %le8 = arith.cmpi ule, %seq, %[[C8]] : index
// CHECK-NEXT:     scf.if %le8 {
// CHECK-NEXT:       tile.kernel @linear_le8 grid [%grid max 16, 1, 1]
// CHECK-NEXT:         tile.forall (%{{.*}}, %{{.*}}) in [%n max 8, 64] over threads {
// CHECK:            } {llmopt.bucket = 8 : i64}
// CHECK-NEXT:     } else {
// CHECK-NEXT:       tile.kernel @linear grid [%grid max 16, 1, 1]
// CHECK-NEXT:         tile.forall (%{{.*}}, %{{.*}}) in [%n max 64, 64] over threads {
// CHECK:            } {llmopt.bucket = 64 : i64}
// CHECK-NEXT:     }
// CHECK-NEXT:   }
// CHECK-NEXT: }
// CHECK-NOT:  tile.kernel
// CHECK:      func.return

// One row of a symbol (at least 1) is exactly one row: the variant is static, a
// matrix-vector product as a static program's, and warp-gemv schedules it (a warp per
// output, 16-byte loads); the second row's variant keeps the runtime rows and grid. With
// coop_rows=1 only the static one is made:
// GEMV:       tile.kernel @linear_coop1 grid [64, 1, 1] block [32, 1, 1]
// GEMV:       } {llmopt.bucket = 1 : i64, llmopt.coop, llmopt.gemv = {rows = 1 : i64, slices = 1 : i64, vector = 4 : i64}}
// ONE:        scf.if %le1 {
// ONE-NEXT:     tile.kernel @linear_coop1 grid [64, 1, 1]
// ONE-NOT:    coop2

// Without the cooperative variant the chain starts at the first bound:
// NOCOOP:     scf.if %le8 {
// NOCOOP-NOT: coop

// The variants lower to kernels launched from the branches (the maximum's is split-k's pair):
// KERNEL:      kernel.func @linear_coop1(
// KERNEL:      kernel.func @linear_le8(
// KERNEL:      kernel.func @linear(
// KERNEL:      scf.if %le1 {
// KERNEL-NEXT:   kernel.launch @linear_coop1 grid [64, 1, 1] block [256, 1, 1]
// KERNEL:      scf.if %le8 {
// KERNEL-NEXT:   kernel.launch @linear_le8
// KERNEL-NEXT: } else {
// KERNEL:        kernel.launch @linear

// NUM: at seq = 1, 8, 9, 40
// NUM1: at seq = 1, 2, 3, 40
// NUM: length-buckets {{.*}} ok
// NUM: register-tile {{.*}} ok
// NUM: tile-to-kernel {{.*}} ok

// BAD: bounds must increase
// BADCOOP: coop_rows
