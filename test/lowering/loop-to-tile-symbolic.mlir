// RUN: llm-opt %s --split-input-file -p loop-to-tile | filecheck %s
// RUN: llm-opt %s --split-input-file -p loop-to-tile --check-numerics --check-numerics-lengths 3 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// A symbolic length at Tile IR: the schedule is chosen for the maximum, a loop that runs to
// the length becomes a forall dim (or a cooperative reduction) of that runtime extent, and
// the grid is computed where the kernel is launched, from the length.

// Thread schedule: 16 * seq points, 256 threads a block, ceil(16 * seq / 256) blocks.
func.func @scale(%x: memref<1x?x16xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                 %seq: index {llmopt.symbol = "seq", llmopt.max = 128}) -> memref<1x?x16xf32> {
  %out = memref.alloc(%seq) : memref<1x?x16xf32>
  loop.kernel @scale (%a = %x : memref<1x?x16xf32>, %o = %out : memref<1x?x16xf32>, %n = %seq : index) {
    loop.for %i = 0 to %n max 128 {
      loop.for %j = 0 to 16 {
        %v = loop.load %a[0, %i, %j] : memref<1x?x16xf32>
        %w = arith.addf %v, %v : f32
        loop.store %w, %o[0, %i, %j] : memref<1x?x16xf32>
      }
    }
  }
  func.return %out : memref<1x?x16xf32>
}

// CHECK-LABEL: func.func @scale
// CHECK:      %[[C16:.*]] = arith.constant 16 : index
// CHECK-NEXT: %[[PTS:.*]] = arith.muli %seq, %[[C16]] : index
// CHECK-NEXT: %[[C256:.*]] = arith.constant 256 : index
// CHECK-NEXT: %grid = arith.ceildivui %[[PTS]], %[[C256]] : index
// CHECK-NEXT: tile.kernel @scale grid [%grid max 8, 1, 1] block [256, 1, 1] (%{{.*}} = %x : memref<1x?x16xf32>, %{{.*}} = %{{.*}} : memref<1x?x16xf32>, %[[N:.*]] = %seq : index) {
// CHECK-NEXT:   tile.forall (%{{.*}}, %{{.*}}) in [%[[N]] max 128, 16] over threads {

// NUM: // numerics: tolerance {{.*}} at seq = {{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}{{$}}
// NUM-NEXT: loop-to-tile {{.*}} ok

// -----

// Row schedule: a block per row (seq blocks), the sum over the row's 64 elements shared by
// the block's threads; and a sum over the symbolic dim, cooperative with a runtime bound.
func.func @rows(%x: memref<?x64xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                %seq: index {llmopt.symbol = "seq", llmopt.max = 300}) -> (memref<?x64xf32>, memref<1x64xf32>) {
  %out = memref.alloc(%seq) : memref<?x64xf32>
  loop.kernel @norm (%a = %x : memref<?x64xf32>, %o = %out : memref<?x64xf32>, %n = %seq : index) {
    loop.for %i = 0 to %n max 300 {
      %s = loop.reduce add %k = 0 to 64 : f32 {
        %v = loop.load %a[%i, %k] : memref<?x64xf32>
        %q = arith.mulf %v, %v : f32
        loop.yield %q : f32
      }
      loop.for %j = 0 to 64 {
        %v = loop.load %a[%i, %j] : memref<?x64xf32>
        %r = arith.divf %v, %s : f32
        loop.store %r, %o[%i, %j] : memref<?x64xf32>
      }
    }
  }
  %col = memref.alloc() : memref<1x64xf32>
  loop.kernel @colsum (%a = %x : memref<?x64xf32>, %o = %col : memref<1x64xf32>, %n = %seq : index) {
    loop.for %j = 0 to 64 {
      %s = loop.reduce add %k = 0 to %n max 300 : f32 {
        %v = loop.load %a[%k, %j] : memref<?x64xf32>
        loop.yield %v : f32
      }
      loop.store %s, %o[0, %j] : memref<1x64xf32>
    }
  }
  func.return %out, %col : memref<?x64xf32>, memref<1x64xf32>
}

// CHECK-LABEL: func.func @rows
// CHECK:      tile.kernel @norm grid [%seq max 300, 1, 1] block [64, 1, 1] (%{{.*}} = %x : memref<?x64xf32>, %{{.*}} = %{{.*}} : memref<?x64xf32>, %[[N:.*]] = %seq : index) {
// CHECK-NEXT:   tile.forall (%{{.*}}) in [%[[N]] max 300] over blocks {
// CHECK-NEXT:     tile.coop_reduce add %{{.*}} = 0 to 64 : f32 {
// CHECK:          tile.forall (%{{.*}}) in [64] over block_threads {
// CHECK:      tile.kernel @colsum grid [64, 1, 1] block [256, 1, 1] (%{{.*}} = %x : memref<?x64xf32>, %{{.*}} = %{{.*}} : memref<1x64xf32>, %[[M:.*]] = %seq : index) {
// CHECK-NEXT:   tile.forall (%{{.*}}) in [64] over blocks {
// CHECK-NEXT:     tile.coop_reduce add %{{.*}} = 0 to %[[M]] max 300 : f32 {

// NUM: // numerics: tolerance {{.*}} at seq = {{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}{{$}}
// NUM-NEXT: loop-to-tile {{.*}} ok
