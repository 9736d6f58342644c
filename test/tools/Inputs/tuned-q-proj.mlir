// TinyLlama's q projection at seq 128 (1x128x2048 times 2048x2048, transposed), in Tile IR as
// loop-to-tile leaves it in the whole model: a kernel the committed table of sm_90 has an
// entry for, so apply-tuned gives it the table's schedule. The install test lowers it with
// an installed llmopt (test/test_install.py); test/passes/test_tuned_table.py checks that the
// table still holds its entry.
func.func @forward(%w: memref<2048x2048xf32>, %x: memref<1x128x2048xf32>) -> memref<1x128x2048x1xf32> {
  %y = memref.alloc() : memref<1x128x2048x1xf32>
  tile.kernel @q_proj grid [1024, 1, 1] block [256, 1, 1] (%o = %y : memref<1x128x2048x1xf32>, %wt = %w : memref<2048x2048xf32>, %in = %x : memref<1x128x2048xf32>) {
    tile.forall (%i0, %i1, %i2) in [1, 128, 2048] over threads {
      %acc = loop.reduce add %r = 0 to 2048 : f32 {
        %a = loop.load %in[%i0, %i1, %r] : memref<1x128x2048xf32>
        %b = loop.load %wt[%i2, %r] : memref<2048x2048xf32>
        %p = arith.mulf %a, %b : f32
        loop.yield %p : f32
      }
      loop.store %acc, %o[%i0, %i1, %i2, 0] : memref<1x128x2048x1xf32>
    }
  }
  func.return %y : memref<1x128x2048x1xf32>
}
