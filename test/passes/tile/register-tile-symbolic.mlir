// RUN: llm-opt %s -p register-tile | filecheck %s
// RUN: llm-opt %s -p register-tile,stage-inputs,async-copy,tile-to-kernel | filecheck %s --check-prefix=KERNEL
// RUN: llm-opt %s -p register-tile,stage-inputs,async-copy,prefetch-stages,pad-shared,vector-fragments,tile-to-kernel --check-numerics --check-numerics-lengths 3 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'register-tile{bm=64 bn=32 tm=4 tn=4 blocked=3},stage-inputs,async-copy,prefetch-stages,pad-shared,mma-fragments,vector-fragments,tile-to-kernel' --check-numerics --check-numerics-lengths 3 2>&1 >/dev/null | filecheck %s --check-prefix=MMA
// A matrix product over a symbolic number of rows: register-tile tiles it for the maximum,
// ceildiv(%n, bm) blocks along the rows (the grid computed from the length before the
// launch), loads clamped along the length and stores guarded by it. At Kernel IR the clamp
// of a ? extent is min(row, %n - 1). (split-k on runtime rows, and register-tile on its
// partial kernel: split-k-symbolic.mlir.)

func.func @forward(%w: memref<32x64xf32> {llmopt.param = "w"},
                   %x: memref<?x64xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                   %seq: index {llmopt.symbol = "seq", llmopt.max = 256}) -> memref<?x32xf32> {
  %out = memref.alloc(%seq) : memref<?x32xf32>
  %c32 = arith.constant 32 : index
  %points = arith.muli %seq, %c32 : index
  %c256 = arith.constant 256 : index
  %grid = arith.ceildivui %points, %c256 : index
  tile.kernel @linear grid [%grid max 32, 1, 1] block [256, 1, 1] (%o = %out : memref<?x32xf32>, %n = %seq : index, %ww = %w : memref<32x64xf32>, %a = %x : memref<?x64xf32>) {
    tile.forall (%i, %j) in [%n max 256, 32] over threads {
      %s = loop.reduce add %k = 0 to 64 : f32 {
        %v = loop.load %a[%i, %k] : memref<?x64xf32>
        %u = loop.load %ww[%j, %k] : memref<32x64xf32>
        %p = arith.mulf %v, %u : f32
        loop.yield %p : f32
      }
      loop.store %s, %o[%i, %j] : memref<?x32xf32>
    }
  }
  func.return %out : memref<?x32xf32>
}

// CHECK:      %[[BM:.*]] = arith.constant 64 : index
// CHECK-NEXT: %grid = arith.ceildivui %seq, %[[BM]] : index
// CHECK-NEXT: tile.kernel @linear grid [%grid max 4, 1, 1] block [256, 1, 1] (%[[O:.*]] = %out : memref<?x32xf32>, %[[N:.*]] = %seq : index, %{{.*}} = %w : memref<32x64xf32>, %[[A:.*]] = %x : memref<?x64xf32>) {
// CHECK-NEXT:   %[[C:.*]] = arith.constant 64 : index
// CHECK-NEXT:   %[[ROWS:.*]] = arith.ceildivui %[[N]], %[[C]] : index
// CHECK-NEXT:   tile.forall (%bm, %bn) in [%[[ROWS]] max 4, 1] over blocks {
// CHECK:          scf.for %k
// CHECK:            loop.load %[[A]][{{.*}}] clamp : memref<?x64xf32>
// CHECK:        } {llmopt.role = "k_loop"}
// CHECK:          %[[IN:.*]] = arith.cmpi ult, %{{.*}}, %[[N]] : index
// CHECK-NEXT:     scf.if %[[IN]] {
// CHECK:            loop.store %{{.*}}, %[[O]][{{.*}}] : memref<?x32xf32>

// KERNEL:      kernel.func @linear(%{{.*}}: memref<?x32xf32>, %[[LEN:.*]]: index,
// KERNEL:      %[[LAST:.*]] = arith.subi %[[LEN]], %{{.*}} : index
// KERNEL-NEXT: %[[ROW:.*]] = arith.minsi %{{.*}}, %[[LAST]] : index
// KERNEL:      kernel.async_copy %{{.*}}[%[[ROW]], %{{.*}}] to %stage

// NUM: register-tile {{.*}} ok
// NUM: tile-to-kernel {{.*}} ok

// The tensor-core layout on runtime rows (TF32 mma.sync fragments):
// MMA: mma-fragments {{.*}} ok
// MMA: tile-to-kernel {{.*}} ok
