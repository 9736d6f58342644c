// RUN: llm-opt %s | llm-opt | filecheck %s
// RUN: llm-opt %s --print-op-generic | llm-opt | filecheck %s

func.func @f(%x: memref<8x256xf32>) -> memref<8x256xf32> {
  %out = memref.alloc() : memref<8x256xf32>
  tile.kernel @k grid [8, 1, 1] block [256, 1, 1] (%a = %x : memref<8x256xf32>, %o = %out : memref<8x256xf32>) {
    tile.forall (%i) in [8] over blocks {
      %s = tile.coop_reduce add %k = 0 to 256 : f32 {
        %v = loop.load %a[%i, %k] : memref<8x256xf32>
        tile.yield %v : f32
      }
      tile.forall (%j) in [256] over block_threads {
        %v = loop.load %a[%i, %j] : memref<8x256xf32>
        %r = arith.mulf %v, %s : f32
        loop.store %r, %o[%i, %j] : memref<8x256xf32>
      }
    }
  }
  func.return %out : memref<8x256xf32>
}

// CHECK: tile.kernel @k grid [8, 1, 1] block [256, 1, 1] (%{{.*}} = %x : memref<8x256xf32>, %{{.*}} = %out : memref<8x256xf32>) {
// CHECK-NEXT: tile.forall (%[[I:.*]]) in [8] over blocks {
// CHECK-NEXT: %[[S:.*]] = tile.coop_reduce add %{{.*}} = 0 to 256 : f32 {
// CHECK: tile.yield %{{.*}} : f32
// CHECK: tile.forall (%{{.*}}) in [256] over block_threads {

// Block-local buffers: a shared tile and a register tile, each directly in a forall over
// blocks; both print and parse back (generic form included) with their space and type.
func.func @alloc(%x: memref<2x64xf32>) -> memref<2x64xf32> {
  %out = memref.alloc() : memref<2x64xf32>
  tile.kernel @alloc grid [2, 1, 1] block [64, 1, 1] (%a = %x : memref<2x64xf32>, %o = %out : memref<2x64xf32>) {
    tile.forall (%b) in [2] over blocks {
      %tile = tile.alloc shared : memref<64x33xf32>
      %acc = tile.alloc registers {note = "acc"} : memref<8x8x2x4xf32>
      tile.forall (%t) in [64] over block_threads {
        %v = loop.load %a[%b, %t] : memref<2x64xf32>
        loop.store %v, %tile[%t, 0] : memref<64x33xf32>
      }
      tile.forall (%t) in [64] over block_threads {
        %v = loop.load %tile[%t, 0] : memref<64x33xf32>
        loop.store %v, %o[%b, %t] : memref<2x64xf32>
      }
    }
  }
  func.return %out : memref<2x64xf32>
}

// CHECK-LABEL: func.func @alloc
// CHECK: tile.forall (%[[B:.*]]) in [2] over blocks {
// CHECK-NEXT: %[[TILE:.*]] = tile.alloc shared : memref<64x33xf32>
// CHECK-NEXT: %{{.*}} = tile.alloc registers {note = "acc"} : memref<8x8x2x4xf32>
// CHECK-NEXT: tile.forall (%[[T:.*]]) in [64] over block_threads {
// CHECK: loop.store %{{.*}}, %[[TILE]][%[[T]], 0] : memref<64x33xf32>
// CHECK: loop.load %[[TILE]][%{{.*}}, 0] : memref<64x33xf32>

// Asynchronous copies: each thread of a block starts a 16-byte copy of four floats from a
// kernel buffer into a shared tile (both accesses are maps of the same indices), commits the
// group and waits for it; the same op with attributes and an 8-byte copy of two f16.
func.func @async(%x: memref<4x64xf32>, %h: memref<4x64xf16>) -> memref<4x64xf32> {
  %out = memref.alloc() : memref<4x64xf32>
  tile.kernel @async grid [2, 1, 1] block [16, 1, 1] (%a = %x : memref<4x64xf32>, %ah = %h : memref<4x64xf16>, %o = %out : memref<4x64xf32>) {
    tile.forall (%b) in [4] over blocks {
      %s = tile.alloc shared : memref<2x64xf32>
      %sh = tile.alloc shared : memref<64xf16>
      tile.forall (%t) in [16] over block_threads {
        tile.async_copy %a[%b, %t * 4] to %s[%b mod 2, %t * 4] count 4 : memref<4x64xf32> to memref<2x64xf32>
        tile.async_copy %ah[%b, %t * 4 + 2] to %sh[%t * 4] count 2 {note = "half"} : memref<4x64xf16> to memref<64xf16>
        tile.async_copy %a[%b + 3, %t * 4] clamp to %s[1, %t * 4] count 4 : memref<4x64xf32> to memref<2x64xf32>
      }
      tile.async_commit
      tile.async_wait 1 {note = "wait"}
      tile.async_wait 0
      kernel.barrier
      tile.forall (%j) in [64] over block_threads {
        %v = loop.load %s[0, %j] : memref<2x64xf32>
        loop.store %v, %o[%b, %j] : memref<4x64xf32>
      }
    }
  }
  func.return %out : memref<4x64xf32>
}

// CHECK-LABEL: func.func @async
// CHECK: tile.forall (%[[B:.*]]) in [4] over blocks {
// CHECK-NEXT: %[[S:.*]] = tile.alloc shared : memref<2x64xf32>
// CHECK-NEXT: %[[SH:.*]] = tile.alloc shared : memref<64xf16>
// CHECK-NEXT: tile.forall (%[[T:.*]]) in [16] over block_threads {
// CHECK-NEXT: tile.async_copy %{{.*}}[%[[B]], (%[[T]] * 4)] to %[[S]][(%[[B]] mod 2), (%[[T]] * 4)] count 4 : memref<4x64xf32> to memref<2x64xf32>
// CHECK-NEXT: tile.async_copy %{{.*}}[%[[B]], ((%[[T]] * 4) + 2)] to %[[SH]][(%[[T]] * 4)] count 2 {note = "half"} : memref<4x64xf16> to memref<64xf16>
// CHECK-NEXT: tile.async_copy %{{.*}}[(%[[B]] + 3), (%[[T]] * 4)] clamp to %[[S]][1, (%[[T]] * 4)] count 4 : memref<4x64xf32> to memref<2x64xf32>
// CHECK-NEXT: }
// CHECK-NEXT: tile.async_commit
// CHECK-NEXT: tile.async_wait 1 {note = "wait"}
// CHECK-NEXT: tile.async_wait 0
// CHECK-NEXT: kernel.barrier

// L2 prefetches of a global buffer's rows: plain and clamped, with attributes.
func.func @prefetch(%x: memref<4x64xbf16>) {
  tile.kernel @prefetch grid [2, 1, 1] block [32, 1, 1] (%a = %x : memref<4x64xbf16>) {
    tile.forall (%b) in [2] over blocks {
      tile.forall (%r) in [2] over block_threads {
        tile.prefetch %a[%b * 2 + %r, 0] count 64 : memref<4x64xbf16>
        tile.prefetch %a[%b * 2 + %r + 1, 8] clamp count 32 {note = "ahead"} : memref<4x64xbf16>
      }
    }
  }
  func.return
}
// CHECK-LABEL: func.func @prefetch
// CHECK: tile.forall (%[[R:.*]]) in [2] over block_threads {
// CHECK-NEXT: tile.prefetch %{{.*}}[((%{{.*}} * 2) + %[[R]]), 0] count 64 : memref<4x64xbf16>
// CHECK-NEXT: tile.prefetch %{{.*}}[(((%{{.*}} * 2) + %[[R]]) + 1), 8] clamp count 32 {note = "ahead"} : memref<4x64xbf16>

// Empty bodies print as empty braces, which parse back.
func.func @empty_bodies(%x: memref<4xf32>) {
  tile.kernel @idle grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
    tile.forall (%b) in [4] over blocks {
    }
  }
  func.return
}
// CHECK-LABEL: func.func @empty_bodies
// CHECK:       tile.forall (%{{.*}}) in [4] over blocks {
// CHECK-NEXT:  }

// A warp's lanes combine their values (a row's partial sums, a warp a row); lane 0 stores.
func.func @lanes(%x: memref<8x32xf32>) -> memref<8xf32> {
  %out = memref.alloc() : memref<8xf32>
  tile.kernel @rowsum grid [4, 1, 1] block [64, 1, 1] (%a = %x : memref<8x32xf32>, %o = %out : memref<8xf32>) {
    tile.forall (%nb) in [4] over blocks {
      tile.forall (%w, %l) in [2, 32] over block_threads {
        %v = loop.load %a[%nb * 2 + %w, %l] : memref<8x32xf32>
        %t = tile.lane_reduce add %v : f32
        %m = tile.lane_reduce max %v : f32
        %one = arith.constant 1 : index
        %first = arith.cmpi ult, %l, %one : index
        scf.if %first {
          %r = arith.subf %t, %m : f32
          loop.store %r, %o[%nb * 2 + %w] : memref<8xf32>
        }
      }
    }
  }
  func.return %out : memref<8xf32>
}

// CHECK-LABEL: func.func @lanes
// CHECK:         tile.forall (%{{.*}}, %{{.*}}) in [2, 32] over block_threads {
// CHECK:           %[[T:.*]] = tile.lane_reduce add %[[V:.*]] : f32
// CHECK-NEXT:      %{{.*}} = tile.lane_reduce max %[[V]] : f32

// Groups of 4 lanes (a row's partials in the tensor-core layout), in a static loop.
func.func @quads(%x: memref<16x4x2xf32>) {
  tile.kernel @quads grid [1, 1, 1] block [64, 1, 1] (%a = %x : memref<16x4x2xf32>) {
    tile.forall (%b) in [1] over blocks {
      tile.forall (%g, %t) in [16, 4] over block_threads {
        loop.for %i = 0 to 2 {
          %v = loop.load %a[%g, %t, %i] : memref<16x4x2xf32>
          %s = tile.lane_reduce add %v lanes 4 : f32
        }
      }
    }
  }
  func.return
}
// CHECK-LABEL: func.func @quads
// CHECK:         loop.for
// CHECK-NEXT:      %[[Q:.*]] = loop.load
// CHECK-NEXT:      %{{.*}} = tile.lane_reduce add %[[Q]] lanes 4 : f32
