// Fuzzer find (test_known_bugs.py): the second stage fill stores at row %c4 instead of its
// forall point, which async-copy once crashed on; it is not a fill the passes rewrite.
builtin.module {
  func.func @forward(%x: memref<8x8xf32>, %w: memref<16x8xf32>) -> memref<8x16xf32> {
    %y = memref.alloc() : memref<8x16xf32>
    tile.kernel @mm grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<8x8xf32>, %b = %w : memref<16x8xf32>, %o = %y : memref<8x16xf32>) {
      tile.forall (%bm, %bn) in [1, 1] over blocks {
        %acc = tile.alloc registers : memref<4x8x2x2xf32>
        tile.forall (%ti, %tj) in [4, 8] over block_threads {
          loop.for %mi = 0 to 2 {
            loop.for %nj = 0 to 2 {
              %zero = arith.constant 0.000000e+00 : f32
              loop.store %zero, %acc[%ti, %tj, %mi, %nj] : memref<4x8x2x2xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "init"}
        %xs = tile.alloc shared : memref<8x4xf32>
        %ws = tile.alloc shared : memref<16x4xf32>
        %c0 = arith.constant 0 : index
        %c1 = arith.constant 1 : index
        %c2 = arith.constant 2 : index
        %c4 = arith.constant 4 : index
        scf.for %k0 = %c0 to %c2 step %c1 {
          tile.forall (%s0, %s1) in [8, 4] over block_threads {
            %u = loop.load %a[((%bm * 8) + %s0), ((%k0 * 4) + %s1)] : memref<8x8xf32>
            loop.store %u, %xs[%s0, %s1] : memref<8x4xf32>
          } {llmopt.role = "stage"}
          tile.forall (%s0_1, %s1_1) in [16, 4] over block_threads {
            %v = loop.load %b[((%bn * 16) + %s0_1), ((%k0 * 4) + %s1_1)] : memref<16x8xf32>
            loop.store %v, %ws[%c4, %s1_1] : memref<16x4xf32>
          } {llmopt.role = "stage"}
          scf.for %kk = %c0 to %c4 step %c1 {
            tile.forall (%ti_1, %tj_1) in [4, 8] over block_threads {
              loop.for %mi_1 = 0 to 2 {
                loop.for %nj_1 = 0 to 2 {
                  %u_1 = loop.load %xs[((%mi_1 * 4) + %ti_1), %kk] : memref<8x4xf32>
                  %v_1 = loop.load %ws[((%nj_1 * 8) + %tj_1), %kk] : memref<16x4xf32>
                  %p = arith.mulf %u_1, %v_1 : f32
                  %old = loop.load %acc[%ti_1, %tj_1, %mi_1, %nj_1] : memref<4x8x2x2xf32>
                  %new = arith.addf %old, %p : f32
                  loop.store %new, %acc[%ti_1, %tj_1, %mi_1, %nj_1] : memref<4x8x2x2xf32>
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {llmopt.role = "update"}
          } {unroll = 0 : i64}
        } {llmopt.role = "k_loop"}
        tile.forall (%ti_2, %tj_2) in [4, 8] over block_threads {
          loop.for %mi_2 = 0 to 2 {
            loop.for %nj_2 = 0 to 2 {
              %sum = loop.load %acc[%ti_2, %tj_2, %mi_2, %nj_2] : memref<4x8x2x2xf32>
              loop.store %sum, %o[(((%bm * 8) + (%mi_2 * 4)) + %ti_2), (((%bn * 16) + (%nj_2 * 8)) + %tj_2)] : memref<8x16xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "epilogue"}
      }
    }
    func.return %y : memref<8x16xf32>
  }
}
