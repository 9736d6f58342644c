// Fuzzer find (test_known_bugs.py): the staged K loop twice, both loops filling the same
// shared tiles; async-copy once replaced the tiles by slotted ones while the second loop
// still used them ("delete SSA value that still has uses").
builtin.module {
  func.func @forward(%l.weight: memref<128x64xf32> {llmopt.param = "l.weight"}, %l.bias: memref<128xf32> {llmopt.param = "l.bias"}, %x: memref<32x64xf32> {llmopt.input = "x"}, %r: memref<32x128xf32> {llmopt.input = "r"}) -> memref<32x128xf32> {
    %0 = memref.alloc() : memref<32x128xf32>
    tile.kernel @elementwise_7 grid [2, 1, 1] block [256, 1, 1] (%1 = %r : memref<32x128xf32>, %2 = %0 : memref<32x128xf32>, %3 = %l.bias : memref<128xf32>, %4 = %l.weight : memref<128x64xf32>, %5 = %x : memref<32x64xf32>) {
      tile.forall (%bm, %bn) in [1, 2] over blocks {
        %acc = tile.alloc registers : memref<16x16x2x4xf32>
        tile.forall (%ti, %tj) in [16, 16] over block_threads {
          loop.for %mi = 0 to 2 {
            loop.for %nj = 0 to 4 {
              %6 = arith.constant 0.000000e+00 : f32
              loop.store %6, %acc[%ti, %tj, %mi, %nj] : memref<16x16x2x4xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "init"}
        %7 = arith.constant 0 : index
        %8 = arith.constant 64 : index
        %9 = arith.constant 1 : index
        %stage = tile.alloc shared : memref<32x16xf32>
        %stage_1 = tile.alloc shared : memref<64x16xf32>
        %10 = arith.constant 0 : index
        %11 = arith.constant 4 : index
        %12 = arith.constant 1 : index
        %13 = arith.constant 16 : index
        scf.for %k0 = %10 to %11 step %12 {
          tile.forall (%s0, %s1) in [32, 16] over block_threads {
            %14 = loop.load %5[((%bm * 32) + %s0), ((%k0 * 16) + %s1)] : memref<32x64xf32>
            loop.store %14, %stage[%s0, %s1] : memref<32x16xf32>
          } {llmopt.role = "stage"}
          tile.forall (%s0_1, %s1_1) in [64, 16] over block_threads {
            %15 = loop.load %4[((%bn * 64) + %s0_1), ((%k0 * 16) + %s1_1)] : memref<128x64xf32>
            loop.store %15, %stage_1[%s0_1, %s1_1] : memref<64x16xf32>
          } {llmopt.role = "stage"}
          scf.for %kk = %10 to %13 step %12 {
            %16 = arith.muli %k0, %13 : index
            %k = arith.addi %16, %kk : index
            tile.forall (%ti_1, %tj_1) in [16, 16] over block_threads {
              loop.for %mi_1 = 0 to 2 {
                loop.for %nj_1 = 0 to 4 {
                  %17 = loop.load %stage[((%mi_1 * 16) + %ti_1), %kk] : memref<32x16xf32>
                  %18 = loop.load %stage_1[((%nj_1 * 16) + %tj_1), %kk] : memref<64x16xf32>
                  %19 = arith.mulf %17, %18 : f32
                  %20 = loop.load %acc[%ti_1, %tj_1, %mi_1, %nj_1] : memref<16x16x2x4xf32>
                  %21 = arith.addf %20, %19 : f32
                  loop.store %21, %acc[%ti_1, %tj_1, %mi_1, %nj_1] : memref<16x16x2x4xf32>
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {llmopt.role = "update"}
          } {unroll = 0 : i64}
        } {llmopt.role = "k_loop"}
        scf.for %k0_1 = %10 to %11 step %12 {
          tile.forall (%s0_2, %s1_2) in [32, 16] over block_threads {
            %22 = loop.load %5[((%bm * 32) + %s0_2), ((%k0_1 * 16) + %s1_2)] : memref<32x64xf32>
            loop.store %22, %stage[%s0_2, %s1_2] : memref<32x16xf32>
          } {llmopt.role = "stage"}
          tile.forall (%s0_3, %s1_3) in [64, 16] over block_threads {
            %23 = loop.load %4[((%bn * 64) + %s0_3), ((%k0_1 * 16) + %s1_3)] : memref<128x64xf32>
            loop.store %23, %stage_1[%s0_3, %s1_3] : memref<64x16xf32>
          } {llmopt.role = "stage"}
          scf.for %kk_1 = %10 to %13 step %12 {
            %24 = arith.muli %k0_1, %13 : index
            %k_1 = arith.addi %24, %kk_1 : index
            tile.forall (%ti_2, %tj_2) in [16, 16] over block_threads {
              loop.for %mi_2 = 0 to 2 {
                loop.for %nj_2 = 0 to 4 {
                  %25 = loop.load %stage[((%mi_2 * 16) + %ti_2), %kk_1] : memref<32x16xf32>
                  %26 = loop.load %stage_1[((%nj_2 * 16) + %tj_2), %kk_1] : memref<64x16xf32>
                  %27 = arith.mulf %25, %26 : f32
                  %28 = loop.load %acc[%ti_2, %tj_2, %mi_2, %nj_2] : memref<16x16x2x4xf32>
                  %29 = arith.addf %28, %27 : f32
                  loop.store %29, %acc[%ti_2, %tj_2, %mi_2, %nj_2] : memref<16x16x2x4xf32>
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {llmopt.role = "update"}
          } {unroll = 0 : i64}
        } {llmopt.role = "k_loop"}
        tile.forall (%ti_3, %tj_3) in [16, 16] over block_threads {
          loop.for %mi_3 = 0 to 2 {
            loop.for %nj_3 = 0 to 4 {
              %sum = loop.load %acc[%ti_3, %tj_3, %mi_3, %nj_3] : memref<16x16x2x4xf32>
              %30 = loop.load %3[(((%bn * 64) + (%nj_3 * 16)) + %tj_3)] : memref<128xf32>
              %31 = arith.addf %sum, %30 : f32
              %32 = loop.load %1[(((%bm * 32) + (%mi_3 * 16)) + %ti_3), (((%bn * 64) + (%nj_3 * 16)) + %tj_3)] : memref<32x128xf32>
              %33 = arith.addf %31, %32 : f32
              loop.store %33, %2[(((%bm * 32) + (%mi_3 * 16)) + %ti_3), (((%bn * 64) + (%nj_3 * 16)) + %tj_3)] : memref<32x128xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "epilogue"}
      }
    }
    func.return %0 : memref<32x128xf32>
  }
}