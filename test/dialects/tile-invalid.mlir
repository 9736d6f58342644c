// RUN: llm-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @too_many_threads(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [2048, 1, 1] (%a = %x : memref<4xf32>) {
  }
  func.return
}
// CHECK: 2048 threads per block exceed 1024

// -----

func.func @coop_in_threads(%x: memref<4x8xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4x8xf32>) {
    tile.forall (%i) in [4] over threads {
      %s = tile.coop_reduce add %r = 0 to 8 : f32 {
        %v = loop.load %a[%i, %r] : memref<4x8xf32>
        tile.yield %v : f32
      }
    }
  }
  func.return
}
// CHECK: tile.coop_reduce needs every thread of the block: it cannot sit inside a forall over threads

// -----

func.func @mapping(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
    tile.forall (%i) in [4] over warps {
    }
  }
  func.return
}
// CHECK: unknown mapping 'warps'

// -----

func.func @grid_too_large(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 65536, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
  }
  func.return
}
// CHECK: grid [1, 65536, 1] exceeds CUDA's limits [2147483647, 65535, 65535]

// -----

func.func @too_many_points(%x: memref<4xf32>) {
  tile.kernel @k grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<4xf32>) {
    tile.forall (%i, %j) in [4294967296, 4294967296] over threads {
    }
  }
  func.return
}
// CHECK: extents [4294967296, 4294967296] make 18446744073709551616 points, more than an index counts (9223372036854775807)
