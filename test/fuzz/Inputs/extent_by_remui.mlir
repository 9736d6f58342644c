// Fuzzer find (test_known_bugs.py): a symbolic program whose last kernel runs over a length
// computed by arith.remui (a sibling of arith.remsi); loop-to-tile could not bound it and
// raised ExtentError ("cannot bound an extent computed by arith.remui").
func.func @forward(%x: memref<?x16xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                   %w0: memref<16xf32> {llmopt.param = "layers.0.w"},
                   %w1: memref<16xf32> {llmopt.param = "layers.1.w"},
                   %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> memref<?x16xf32> {
  %h0 = memref.alloc(%seq) : memref<?x16xf32>
  loop.kernel @scale_0 (%o = %h0 : memref<?x16xf32>, %a = %x : memref<?x16xf32>, %w = %w0 : memref<16xf32>, %n = %seq : index) {
    loop.for %i = 0 to %n max 64 {
      loop.for %j = 0 to 16 {
        %v = loop.load %a[%i, %j] : memref<?x16xf32>
        %s = loop.load %w[%j] : memref<16xf32>
        %m = arith.mulf %v, %s : f32
        loop.store %m, %o[%i, %j] : memref<?x16xf32>
      }
    }
  }
  %h1 = memref.alloc(%seq) : memref<?x16xf32>
  loop.kernel @scale_1 (%o = %h1 : memref<?x16xf32>, %a = %h0 : memref<?x16xf32>, %w = %w1 : memref<16xf32>, %n = %seq : index) {
    loop.for %i = 0 to %n max 64 {
      loop.for %j = 0 to 16 {
        %v = loop.load %a[%i, %j] : memref<?x16xf32>
        %s = loop.load %w[%j] : memref<16xf32>
        %m = arith.mulf %v, %s : f32
        loop.store %m, %o[%i, %j] : memref<?x16xf32>
      }
    }
  }
  %c2 = arith.constant 2 : index
  %rows = arith.remui %seq, %c2 : index
  %twice = memref.alloc(%rows) : memref<?x16xf32>
  loop.kernel @fill_0 (%o = %twice : memref<?x16xf32>, %n = %rows : index) {
    loop.for %i = 0 to %n max 128 {
      loop.for %j = 0 to 16 {
        %z = arith.constant 1.0 : f32
        loop.store %z, %o[%i, %j] : memref<?x16xf32>
      }
    }
  }
  loop.kernel @fill_1 (%o = %twice : memref<?x16xf32>, %n = %rows : index) {
    loop.for %i = 0 to %n max 128 {
      loop.for %j = 0 to 16 {
        %z = arith.constant 1.0 : f32
        loop.store %z, %o[%i, %j] : memref<?x16xf32>
      }
    }
  }
  %out = memref.alloc(%seq) : memref<?x16xf32>
  loop.kernel @add (%o = %out : memref<?x16xf32>, %a = %h1 : memref<?x16xf32>, %b = %x : memref<?x16xf32>, %n = %seq : index) {
    loop.for %i = 0 to %n max 64 {
      loop.for %j = 0 to 16 {
        %u = loop.load %a[%i, %j] : memref<?x16xf32>
        %v = loop.load %b[%i, %j] : memref<?x16xf32>
        %r = arith.addf %u, %v : f32
        loop.store %r, %o[%i, %j] : memref<?x16xf32>
      }
    }
  }
  func.return %out : memref<?x16xf32>
}
