// RUN: llm-opt %s -p register-tile,split-k{split_k=2} | filecheck %s
// RUN: llm-opt %s -p register-tile --check-numerics --check-numerics-lengths 2 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// A matrix product over a symbolic number of rows is not register-tiled yet (nor split): the
// kernel keeps loop-to-tile's schedule, one output a thread up to the runtime length.

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

// CHECK:      tile.kernel @linear grid [%grid max 32, 1, 1] block [256, 1, 1]
// CHECK-NEXT:   tile.forall (%i, %j) in [%n max 256, 32] over threads {
// CHECK-NEXT:     loop.reduce add %k = 0 to 64 : f32 {
// CHECK-NOT:  tile.alloc
// CHECK-NOT:  scf.for

// NUM: register-tile {{.*}} ok
