// RUN: llm-opt %s -p tile-to-kernel | filecheck %s
// RUN: llm-opt %s -p tile-to-kernel --check-numerics --check-numerics-lengths 3 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// A symbolic length at Kernel IR: the length is a kernel parameter, a forall of runtime
// extent loops to the runtime point count and delinearises by it, a cooperative reduction
// folds up to the runtime bound, and the launch keeps the grid computed from the length.

func.func @forward(%x: memref<?x64xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                   %seq: index {llmopt.symbol = "seq", llmopt.max = 300}) -> (memref<?x64xf32>, memref<1x64xf32>) {
  %out = memref.alloc(%seq) : memref<?x64xf32>
  %c64 = arith.constant 64 : index
  %points = arith.muli %seq, %c64 : index
  %c256 = arith.constant 256 : index
  %grid = arith.ceildivui %points, %c256 : index
  tile.kernel @double grid [%grid max 75, 1, 1] block [256, 1, 1] (%a = %x : memref<?x64xf32>, %o = %out : memref<?x64xf32>, %n = %seq : index) {
    tile.forall (%i, %j) in [%n max 300, 64] over threads {
      %v = loop.load %a[%i, %j] : memref<?x64xf32>
      %w = arith.addf %v, %v : f32
      loop.store %w, %o[%i, %j] : memref<?x64xf32>
    }
  }
  %col = memref.alloc() : memref<1x64xf32>
  tile.kernel @colsum grid [64, 1, 1] block [256, 1, 1] (%a = %x : memref<?x64xf32>, %o = %col : memref<1x64xf32>, %n = %seq : index) {
    tile.forall (%j) in [64] over blocks {
      %s = tile.coop_reduce add %k = 0 to %n max 300 : f32 {
        %v = loop.load %a[%k, %j] : memref<?x64xf32>
        tile.yield %v : f32
      }
      tile.forall (%once) in [1] over block_threads {
        loop.store %s, %o[0, %j] : memref<1x64xf32>
      }
    }
  }
  func.return %out, %col : memref<?x64xf32>, memref<1x64xf32>
}

// CHECK:      kernel.func @double(%{{.*}}: memref<?x64xf32>, %{{.*}}: memref<?x64xf32>, %[[N:.*]]: index) block [256, 1, 1] {
// CHECK:        %[[C64:.*]] = arith.constant 64 : index
// CHECK-NEXT:   %[[POINTS:.*]] = arith.muli %[[N]], %[[C64]] : index
// CHECK-NEXT:   scf.for %[[P:.*]] = %{{.*}} to %[[POINTS]] step %{{.*}} {
// CHECK:          %{{.*}} = arith.remui %[[P]], %{{.*}} : index
// CHECK-NEXT:     %{{.*}} = arith.divui %[[P]], %{{.*}} : index
// CHECK:      kernel.func @colsum(%{{.*}}: memref<?x64xf32>, %{{.*}}: memref<1x64xf32>, %[[M:.*]]: index) block [256, 1, 1] {
// CHECK:          %partial = scf.for %{{.*}} = %{{.*}} to %[[M]] step %{{.*}} iter_args
// CHECK:      func.func @forward
// CHECK:        %[[GRID:.*]] = arith.ceildivui
// CHECK-NEXT:   kernel.launch @double grid [%[[GRID]] max 75, 1, 1] block [256, 1, 1] smem 0 (%x, %{{.*}}, %seq) : memref<?x64xf32>, memref<?x64xf32>, index
// CHECK:        kernel.launch @colsum grid [64, 1, 1] block [256, 1, 1] smem 0 (%x, %{{.*}}, %seq) : memref<?x64xf32>, memref<1x64xf32>, index

// NUM: // numerics: tolerance {{.*}} at seq = {{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}{{$}}
// NUM-NEXT: tile-to-kernel {{.*}} ok
