// RUN: llm-opt %s --split-input-file -p 'split-k{split_k=2}' | filecheck %s --check-prefix=TWO
// RUN: llm-opt %s --split-input-file -p split-k | filecheck %s --check-prefix=AUTO
// RUN: llm-opt %s --split-input-file -p 'split-k{split_k=2},register-tile' | filecheck %s --check-prefix=TILED
// RUN: llm-opt %s --split-input-file -p 'split-k{split_k=2},register-tile,stage-inputs,async-copy,prefetch-stages,pad-shared,vector-fragments,tile-to-kernel' --check-numerics --check-numerics-lengths 3 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p 'split-k{split_k=2},register-tile{bm=32 bn=64 tm=2 tn=4 blocked=3},stage-inputs,async-copy,prefetch-stages,pad-shared,mma-fragments,vector-fragments,tile-to-kernel' --check-numerics --check-numerics-lengths 3 2>&1 >/dev/null | filecheck %s --check-prefix=MMA
// split-k on a product over a symbolic number of rows (the kernel's length parameter %n,
// bound to the function's %seq): the partial sums are allocated with the length on the row
// dim, both kernels take the length, their foralls run %n rows, and each launch gets a
// grid computed from %seq before the kernels (the old one is erased). register-tile then
// tiles the partial kernel, the slice a batch dim of its blocks, its rows ragged.

// linear + bias + residual, rows at most 32, N = 128, K = 256.
func.func @forward(%w: memref<128x256xf32> {llmopt.param = "w"}, %bias: memref<128xf32> {llmopt.param = "bias"},
                   %x: memref<?x256xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                   %r: memref<?x128xf32> {llmopt.input = "r", llmopt.dynamic = ["seq"]},
                   %seq: index {llmopt.symbol = "seq", llmopt.max = 32}) -> memref<?x128xf32> {
  %out = memref.alloc(%seq) : memref<?x128xf32>
  %c128 = arith.constant 128 : index
  %points = arith.muli %seq, %c128 : index
  %c256 = arith.constant 256 : index
  %grid = arith.ceildivui %points, %c256 : index
  tile.kernel @linear grid [%grid max 16, 1, 1] block [256, 1, 1] (%o = %out : memref<?x128xf32>, %n = %seq : index, %ww = %w : memref<128x256xf32>, %bb = %bias : memref<128xf32>, %a = %x : memref<?x256xf32>, %res = %r : memref<?x128xf32>) {
    tile.forall (%i, %j) in [%n max 32, 128] over threads {
      %s = loop.reduce add %k = 0 to 256 : f32 {
        %v = loop.load %a[%i, %k] : memref<?x256xf32>
        %u = loop.load %ww[%j, %k] : memref<128x256xf32>
        %p = arith.mulf %v, %u : f32
        loop.yield %p : f32
      }
      %bv = loop.load %bb[%j] : memref<128xf32>
      %t = arith.addf %s, %bv : f32
      %rv = loop.load %res[%i, %j] : memref<?x128xf32>
      %y = arith.addf %t, %rv : f32
      loop.store %y, %o[%i, %j] : memref<?x128xf32>
    }
  }
  func.return %out : memref<?x128xf32>
}

// TWO-LABEL: func.func @forward
// TWO-NEXT:    %[[OUT:.*]] = memref.alloc(%seq) : memref<?x128xf32>
// TWO-NEXT:    %[[PART:.*]] = memref.alloc(%seq) : memref<2x?x128xf32>
// TWO-NEXT:    %[[C2:.*]] = arith.constant 256 : index
// TWO-NEXT:    %[[PTS2:.*]] = arith.muli %seq, %[[C2]] : index
// TWO-NEXT:    %[[T2:.*]] = arith.constant 256 : index
// TWO-NEXT:    %[[G2:.*]] = arith.ceildivui %[[PTS2]], %[[T2]] : index
// TWO-NEXT:    %[[C1:.*]] = arith.constant 128 : index
// TWO-NEXT:    %[[PTS1:.*]] = arith.muli %seq, %[[C1]] : index
// TWO-NEXT:    %[[T1:.*]] = arith.constant 256 : index
// TWO-NEXT:    %[[G1:.*]] = arith.ceildivui %[[PTS1]], %[[T1]] : index
// TWO-NEXT:    tile.kernel @linear_split grid [%[[G2]] max 32, 1, 1] block [256, 1, 1] (%{{.*}} = %[[OUT]] : memref<?x128xf32>, %[[N:.*]] = %seq : index, %[[W:.*]] = %w : memref<128x256xf32>, %{{.*}} = %bias : memref<128xf32>, %[[X:.*]] = %x : memref<?x256xf32>, %{{.*}} = %r : memref<?x128xf32>, %[[P:.*]] = %[[PART]] : memref<2x?x128xf32>) {
// TWO-NEXT:      tile.forall (%[[S:.*]], %[[I:.*]], %[[J:.*]]) in [2, %[[N]] max 32, 128] over threads {
// TWO-NEXT:        %[[SUM:.*]] = loop.reduce add %[[KK:.*]] = 0 to 128 : f32 {
// TWO-NEXT:          loop.load %[[X]][%[[I]], ((%[[S]] * 128) + %[[KK]])] : memref<?x256xf32>
// TWO-NEXT:          loop.load %[[W]][%[[J]], ((%[[S]] * 128) + %[[KK]])] : memref<128x256xf32>
// TWO:             loop.store %[[SUM]], %[[P]][%[[S]], %[[I]], %[[J]]] : memref<2x?x128xf32>
// TWO-NEXT:      }
// TWO-NEXT:    } {llmopt.split = "partial"{{.*}}}
// TWO-NEXT:    tile.kernel @linear grid [%[[G1]] max 16, 1, 1] block [256, 1, 1] (%[[O:.*]] = %[[OUT]] : memref<?x128xf32>, %[[N2:.*]] = %seq : index, {{.*}}, %[[R:.*]] = %r : memref<?x128xf32>, %[[P2:.*]] = %[[PART]] : memref<2x?x128xf32>) {
// TWO-NEXT:      tile.forall (%[[I2:.*]], %[[J2:.*]]) in [%[[N2]] max 32, 128] over threads {
// TWO-NEXT:        %[[TOT:.*]] = loop.reduce add %[[SS:.*]] = 0 to 2 : f32 {
// TWO-NEXT:          %[[PV:.*]] = loop.load %[[P2]][%[[SS]], %[[I2]], %[[J2]]] : memref<2x?x128xf32>
// TWO-NEXT:          loop.yield %[[PV]] : f32
// TWO-NEXT:        }
// TWO:             loop.load %[[R]][%[[I2]], %[[J2]]] : memref<?x128xf32>
// TWO:             loop.store %{{.*}}, %[[O]][%[[I2]], %[[J2]]] : memref<?x128xf32>
// TWO-NEXT:      }
// TWO-NEXT:    } {llmopt.split = "total"}
// TWO-NEXT:    func.return %[[OUT]] : memref<?x128xf32>

// The heuristic, for the largest length (32 rows), cuts K in two slices of 128 and names
// the partial kernel's register tile.
// AUTO-LABEL: func.func @forward
// AUTO:         memref.alloc(%seq) : memref<2x?x128xf32>
// AUTO:         tile.kernel @linear_split grid [%{{.*}} max 32, 1, 1]
// AUTO:         } {llmopt.split = "partial", llmopt.schedule = {bm = 32 : i64, bn = 64 : i64, tm = 2 : i64, tn = 4 : i64}}
// AUTO-NEXT:    tile.kernel @linear grid [%{{.*}} max 16, 1, 1]

// register-tile's grid of the partial kernel replaces split-k's: 2 slices ·
// ceildiv(%seq, 32) · 2 column blocks; the summing kernel stays one thread per output.
// TILED-LABEL: func.func @forward
// TILED:         %[[BM:.*]] = arith.constant 32 : index
// TILED-NEXT:    %[[ROWS:.*]] = arith.ceildivui %seq, %[[BM]] : index
// TILED-NEXT:    %[[PER:.*]] = arith.constant 4 : index
// TILED-NEXT:    %[[GRID:.*]] = arith.muli %[[ROWS]], %[[PER]] : index
// TILED-NEXT:    tile.kernel @linear_split grid [%[[GRID]] max 4, 1, 1] block [256, 1, 1] (%{{.*}}, %[[N:.*]] = %seq : index,
// TILED-NEXT:      %[[C:.*]] = arith.constant 32 : index
// TILED-NEXT:      %[[RB:.*]] = arith.ceildivui %[[N]], %[[C]] : index
// TILED-NEXT:      tile.forall (%{{.*}}, %{{.*}}, %{{.*}}) in [2, %[[RB]] max 1, 2] over blocks {
// TILED-NEXT:        tile.alloc registers : memref<16x16x2x4xf32>
// TILED:             arith.cmpi ult, %{{.*}}, %[[N]] : index
// TILED:         } {llmopt.split = "partial"
// TILED-NEXT:    tile.kernel @linear grid [%{{.*}} max 16, 1, 1] block [256, 1, 1]
// TILED-NEXT:      tile.forall (%{{.*}}, %{{.*}}) in [%{{.*}} max 32, 128] over threads {
// TILED-NEXT:        loop.reduce add %{{.*}} = 0 to 2 : f32 {

// NUM:      // numerics: tolerance
// NUM-NEXT: split-k {{.*}} ok
// NUM-NEXT: register-tile {{.*}} ok
// NUM-NEXT: stage-inputs {{.*}} ok
// NUM-NEXT: async-copy {{.*}} ok
// NUM-NEXT: prefetch-stages {{.*}} ok
// NUM-NEXT: pad-shared {{.*}} ok
// NUM-NEXT: vector-fragments {{.*}} ok
// NUM-NEXT: tile-to-kernel {{.*}} ok

// The tensor-core layout on the partial kernel's runtime rows (TF32 mma.sync fragments):
// MMA:      // numerics: tolerance
// MMA-NEXT: split-k {{.*}} ok
// MMA-NEXT: register-tile {{.*}} ok
// MMA:      mma-fragments {{.*}} ok
// MMA-NEXT: vector-fragments {{.*}} ok
// MMA-NEXT: tile-to-kernel {{.*}} ok

// -----

// The fused gate and up projections silu(x·Wg) · (x·Wu) over [1, seq, 128], rows at most
// 64, K = 256: one partial-sum buffer per reduction, the row dim after the slice and the
// batch dim.
func.func @forward(%g.weight: memref<128x256xf32> {llmopt.param = "g.weight"}, %u.weight: memref<128x256xf32> {llmopt.param = "u.weight"}, %x: memref<1x?x256xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> memref<1x?x128xf32> {
  %out = memref.alloc(%seq) : memref<1x?x128xf32>
  %c128 = arith.constant 128 : index
  %points = arith.muli %seq, %c128 : index
  %c256 = arith.constant 256 : index
  %grid = arith.ceildivui %points, %c256 : index
  tile.kernel @mlp grid [%grid max 32, 1, 1] block [256, 1, 1] (%o = %out : memref<1x?x128xf32>, %n = %seq : index, %wu = %u.weight : memref<128x256xf32>, %a = %x : memref<1x?x256xf32>, %wg = %g.weight : memref<128x256xf32>) {
    %one = arith.constant 1.000000e+00 : f32
    tile.forall (%b, %i, %j) in [1, %n max 64, 128] over threads {
      %g = loop.reduce add %k = 0 to 256 : f32 {
        %v = loop.load %a[%b, %i, %k] : memref<1x?x256xf32>
        %w = loop.load %wg[%j, %k] : memref<128x256xf32>
        %p = arith.mulf %v, %w : f32
        loop.yield %p : f32
      }
      %ng = arith.negf %g : f32
      %e = math.exp %ng : f32
      %d = arith.addf %one, %e : f32
      %sg = arith.divf %one, %d : f32
      %silu = arith.mulf %g, %sg : f32
      %u = loop.reduce add %k2 = 0 to 256 : f32 {
        %v2 = loop.load %a[%b, %i, %k2] : memref<1x?x256xf32>
        %w2 = loop.load %wu[%j, %k2] : memref<128x256xf32>
        %p2 = arith.mulf %v2, %w2 : f32
        loop.yield %p2 : f32
      }
      %r = arith.mulf %silu, %u : f32
      loop.store %r, %o[%b, %i, %j] : memref<1x?x128xf32>
    }
  }
  func.return %out : memref<1x?x128xf32>
}

// TWO-LABEL: func.func @forward
// TWO:         %[[PG:.*]] = memref.alloc(%seq) : memref<2x1x?x128xf32>
// TWO-NEXT:    %[[PU:.*]] = memref.alloc(%seq) : memref<2x1x?x128xf32>
// TWO:         tile.kernel @mlp_split grid [%{{.*}} max 64, 1, 1] block [256, 1, 1] (%{{.*}}, %[[N:.*]] = %seq : index, {{.*}}, %[[G:.*]] = %[[PG]] : memref<2x1x?x128xf32>, %[[U:.*]] = %[[PU]] : memref<2x1x?x128xf32>) {
// TWO:           tile.forall (%[[S:.*]], %[[B:.*]], %[[I:.*]], %[[J:.*]]) in [2, 1, %[[N]] max 64, 128] over threads {
// TWO-NEXT:        %[[SG:.*]] = loop.reduce add %{{.*}} = 0 to 128 : f32 {
// TWO:             loop.store %[[SG]], %[[G]][%[[S]], %[[B]], %[[I]], %[[J]]] : memref<2x1x?x128xf32>
// TWO-NEXT:        %[[SU:.*]] = loop.reduce add %{{.*}} = 0 to 128 : f32 {
// TWO:             loop.store %[[SU]], %[[U]][%[[S]], %[[B]], %[[I]], %[[J]]] : memref<2x1x?x128xf32>
// TWO-NEXT:      }
// TWO-NEXT:    } {llmopt.split = "partial"{{.*}}}
// TWO-NEXT:    tile.kernel @mlp grid [%{{.*}} max 32, 1, 1] block [256, 1, 1] (%{{.*}}, %[[N2:.*]] = %seq : index,
// TWO:           tile.forall (%{{.*}}, %{{.*}}, %{{.*}}) in [1, %[[N2]] max 64, 128] over threads {
// TWO-NEXT:        %[[TG:.*]] = loop.reduce add %{{.*}} = 0 to 2 : f32 {
// TWO:             %[[TU:.*]] = loop.reduce add %{{.*}} = 0 to 2 : f32 {
// TWO:             %[[SILU:.*]] = arith.mulf %[[TG]], %{{.*}} : f32
// TWO-NEXT:        %{{.*}} = arith.mulf %[[SILU]], %[[TU]] : f32
// TWO:         } {llmopt.split = "total"}

// The heuristic, for 64 rows, cuts K in two here too.
// AUTO-LABEL: func.func @forward
// AUTO:         memref.alloc(%seq) : memref<2x1x?x128xf32>
// AUTO-NEXT:    memref.alloc(%seq) : memref<2x1x?x128xf32>
// AUTO:         tile.kernel @mlp_split grid [%{{.*}} max 64, 1, 1]
// AUTO:         } {llmopt.split = "partial", llmopt.schedule = {bm = 32 : i64, bn = 64 : i64, tm = 2 : i64, tn = 4 : i64}}

// TILED-LABEL: func.func @forward
// TILED:         tile.kernel @mlp_split
// TILED-NEXT:      %{{.*}} = arith.constant 1.000000e+00 : f32
// TILED:           tile.forall (%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) in [2, 1, %{{.*}} max 2, 2] over blocks {
// TILED-NEXT:        tile.alloc registers
// TILED-NEXT:        tile.alloc registers
// TILED:         } {llmopt.split = "partial"

// NUM:      // numerics: tolerance
// NUM-NEXT: split-k {{.*}} ok
// NUM-NEXT: register-tile {{.*}} ok
// NUM:      tile-to-kernel {{.*}} ok

// MMA:      // numerics: tolerance
// MMA-NEXT: split-k {{.*}} ok
// MMA:      mma-fragments {{.*}} ok
// MMA:      tile-to-kernel {{.*}} ok
