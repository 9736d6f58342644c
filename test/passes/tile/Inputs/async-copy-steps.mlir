// Block b sums the columns of the first min(b + 1, 4) chunks of 16 rows of x: a staged loop
// whose fill is followed by a step that reads the tile (no chunk loop), beside another shared
// buffer, with a bound that is a value — the shape of flash-attention's loop over key blocks
// (causal: up to the diagonal's). Read by async-copy.mlir.
builtin.module {
  func.func @forward(%x: memref<64x16xf32> {llmopt.input = "x"}) -> memref<4x16xf32> {
    %0 = memref.alloc() : memref<4x16xf32>
    tile.kernel @prefix_sums grid [4, 1, 1] block [64, 1, 1] (%1 = %x : memref<64x16xf32>, %2 = %0 : memref<4x16xf32>) {
      tile.forall (%b) in [4] over blocks {
        %t = tile.alloc shared : memref<16x16xf32>
        %sums = tile.alloc shared : memref<16xf32>
        tile.forall (%c) in [16] over block_threads {
          %3 = arith.constant 0.000000e+00 : f32
          loop.store %3, %sums[%c] : memref<16xf32>
        } {llmopt.role = "init"}
        %c0 = arith.constant 0 : index
        %c1 = arith.constant 1 : index
        %c4 = arith.constant 4 : index
        %4 = arith.addi %b, %c1 : index
        %ub = arith.minui %4, %c4 : index
        scf.for %k0 = %c0 to %ub step %c1 {
          tile.forall (%r, %c) in [16, 16] over block_threads {
            %5 = loop.load %1[((%k0 * 16) + %r), %c] : memref<64x16xf32>
            loop.store %5, %t[%r, %c] : memref<16x16xf32>
          } {llmopt.role = "stage"}
          tile.forall (%c) in [16] over block_threads {
            %6 = loop.reduce add %r = 0 to 16 : f32 {
              %7 = loop.load %t[%r, %c] : memref<16x16xf32>
              loop.yield %7 : f32
            }
            %8 = loop.load %sums[%c] : memref<16xf32>
            %9 = arith.addf %8, %6 : f32
            loop.store %9, %sums[%c] : memref<16xf32>
          } {llmopt.role = "column_sums"}
          scf.yield
        }
        tile.forall (%c) in [16] over block_threads {
          %10 = loop.load %sums[%c] : memref<16xf32>
          loop.store %10, %2[%b, %c] : memref<4x16xf32>
        } {llmopt.role = "epilogue"}
      }
    }
    func.return %0 : memref<4x16xf32>
  }
}
