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
