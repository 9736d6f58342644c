// RUN: llm-opt %s | llm-opt | filecheck %s
// RUN: llm-opt %s --print-op-generic | llm-opt | filecheck %s
// RUN: llm-opt %s --check-numerics --check-numerics-lengths 3 2>&1 >/dev/null | filecheck %s --check-prefix=NUM

// Tile IR with a symbolic length: a grid computed from it (with its largest value), foralls
// whose extent is the length, a cooperative reduction that runs to it.
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

// CHECK:      %[[GRID:.*]] = arith.ceildivui
// CHECK-NEXT: tile.kernel @double grid [%[[GRID]] max 75, 1, 1] block [256, 1, 1] (%{{.*}} = %x : memref<?x64xf32>, %{{.*}} = %{{.*}} : memref<?x64xf32>, %[[N:.*]] = %seq : index) {
// CHECK-NEXT:   tile.forall (%{{.*}}, %{{.*}}) in [%[[N]] max 300, 64] over threads {
// CHECK:      tile.kernel @colsum grid [64, 1, 1] block [256, 1, 1] (%{{.*}} = %x : memref<?x64xf32>, %{{.*}} = %{{.*}} : memref<1x64xf32>, %[[M:.*]] = %seq : index) {
// CHECK:          tile.coop_reduce add %{{.*}} = 0 to %[[M]] max 300 : f32 {

// NUM: // numerics: tolerance {{.*}} at seq = {{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}{{$}}
