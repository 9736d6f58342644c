// RUN: llm-opt %s --split-input-file -p 'warp-gemv{rows=4}' | filecheck %s
// RUN: llm-opt %s --split-input-file -p 'warp-gemv{rows=4},tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p 'warp-gemv,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p 'warp-gemv{rows=4},tile-to-kernel,canonicalize,cse,kernel-to-cuda' -t cuda | filecheck %s --check-prefix=CUDA
// RUN: llm-opt %s --split-input-file -p 'warp-gemv{rows=4},warp-gemv{rows=2}' | filecheck %s --check-prefix=TWICE
// RUN: not llm-opt %s -p 'warp-gemv{rows=16}' 2>&1 | filecheck %s --check-prefix=BAD
// RUN: llm-opt %s --split-input-file -p 'warp-gemv{rows=4 chunks=2}' | filecheck %s --check-prefix=CHUNKS
// Matrix-vector products as loop-to-tile schedules them (a block per output, a cooperative
// reduction over K): warp-gemv gives each output a warp whose lanes read 16 bytes at a time
// into register fragments, one shared partial a lane, summed by the warp's row after a
// barrier. Inputs: (1) a projection of 10 outputs (no multiple of the 4 rows a block) over
// K = 200 (no multiple of 32 lanes x 4): clamped copies, the lanes past K masked, the last
// block's rows past 10 storing nothing; (2) a fused gate/up product with its SiLU epilogue
// in bf16 (8 elements a copy); (3) an RMSNorm's row sum, which reads no weight row: left
// alone.

// CHECK-LABEL: func.func @proj
// CHECK:      tile.kernel @reduce_1 grid [3, 1, 1] block [128, 1, 1]
// CHECK:        tile.forall (%i0, %i1, %nb) in [1, 1, 3] over blocks {
// CHECK-NEXT:     %part = tile.alloc shared : memref<4x32xf32>
// CHECK-NEXT:     %frag = tile.alloc registers : memref<4x32x4xf32>
// CHECK-NEXT:     %frag_1 = tile.alloc registers : memref<4x32x4xf32>
// CHECK-NEXT:     tile.forall (%w, %l) in [4, 32] over block_threads {
// CHECK:            scf.for %c = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%acc = %{{.*}}) -> (f32) {
// CHECK-NEXT:         tile.copy %{{.*}}[%i0, %i1, ((%c * 128) + (%l * 4))] clamp to %frag[%w, %l, 0] count 4
// CHECK-NEXT:         tile.copy %{{.*}}[((%nb * 4) + %w), ((%c * 128) + (%l * 4))] clamp to %frag_1[%w, %l, 0] count 4
// CHECK:              loop.reduce add %v = 0 to 4 : f32 {
// CHECK:                arith.cmpi ult, %{{.*}}, %{{.*}} : index
// CHECK:                arith.select
// CHECK:              } {unroll = 0 : i64}
// CHECK:            } {unroll = 4 : i64}
// CHECK-NEXT:       loop.store %{{.*}}, %part[%w, %l] : memref<4x32xf32>
// CHECK:          tile.forall (%w_1) in [4] over block_threads {
// CHECK:            arith.cmpi ult
// CHECK-NEXT:       scf.if
// CHECK-NEXT:         loop.reduce add %lane = 0 to 32 : f32 {
// CHECK-NEXT:           loop.load %part[%w_1, %lane] : memref<4x32xf32>
// CHECK:              loop.store %{{.*}}, %{{.*}}[%i0, %i1, ((%nb * 4) + %w_1), 0] : memref<1x1x10x1xf32>
// CHECK:      } {llmopt.gemv = {rows = 4 : i64, vector = 4 : i64}}

// NUM-COUNT-3: tile-to-kernel {{.*}} ok
// NUM-NOT: FAIL

// CUDA-LABEL: void __launch_bounds__(128) reduce_1(
// CUDA:         __align__(16) float frag[4];
// CUDA:         #pragma unroll 4
// CUDA-NEXT:    for (long long c = 0; c < 2; c += 1) {
// CUDA:           ((float4*)&frag[0])[0] = ((const float4*)&arg2[

// TWICE: } {llmopt.gemv = {rows = 4 : i64, vector = 4 : i64}}

// Option chunks: the chunks of 16 bytes a lane has in flight (the chunk loop's unroll).
// CHUNKS: } {unroll = 2 : i64}
// CHUNKS-NOT: {unroll = 4 : i64}

// BAD: rows must be an integer from 1 to 8 or 0 (not set), got 16

builtin.module {
  func.func @proj(%weight: memref<10x200xf32> {llmopt.param = "w"}, %x: memref<1x1x200xf32> {llmopt.input = "x"}) -> memref<1x1x10x1xf32> {
    %0 = memref.alloc() : memref<1x1x10x1xf32>
    tile.kernel @reduce_1 grid [10, 1, 1] block [256, 1, 1] (%1 = %0 : memref<1x1x10x1xf32>, %2 = %weight : memref<10x200xf32>, %3 = %x : memref<1x1x200xf32>) {
      tile.forall (%i0, %i1, %i2) in [1, 1, 10] over blocks {
        %4 = tile.coop_reduce add %r = 0 to 200 : f32 {
          %5 = loop.load %3[%i0, %i1, %r] : memref<1x1x200xf32>
          %6 = loop.load %2[%i2, %r] : memref<10x200xf32>
          %7 = arith.mulf %5, %6 : f32
          tile.yield %7 : f32
        }
        tile.forall (%once) in [1] over block_threads {
          loop.store %4, %1[%i0, %i1, %i2, 0] : memref<1x1x10x1xf32>
        }
      }
    }
    func.return %0 : memref<1x1x10x1xf32>
  }
}

// -----

// CHECK-LABEL: func.func @gate_up
// CHECK:      tile.kernel @elementwise_2 grid [16, 1, 1] block [128, 1, 1]
// CHECK:        tile.copy %{{.*}}[0, 0, ((%c * 256) + (%l * 8))] to %frag[%w, %l, 0] count 8 : memref<1x1x256xbf16>
// CHECK:        tile.copy %{{.*}}[((%nb * 4) + %w), ((%c * 256) + (%l * 8))] to %frag_1[%w, %l, 0] count 8 : memref<64x256xbf16>
// CHECK:        loop.store %{{.*}}, %part[%w, %l]
// CHECK:        loop.store %{{.*}}, %part_1[%w, %l]
// CHECK:      tile.forall (%w_1) in [4] over block_threads {
// CHECK:        math.exp
// CHECK:        loop.store %{{.*}}, %{{.*}}[%i0, %i1, ((%nb * 4) + %w_1)] : memref<1x1x64xbf16>
// CHECK:      } {llmopt.gemv = {rows = 4 : i64, vector = 8 : i64}}

// CUDA-LABEL: void __launch_bounds__(128) elementwise_2(
// CUDA:         ((uint4*)&frag[0])[0] = ((const uint4*)&arg2[

builtin.module {
  func.func @gate_up(%up: memref<64x256xbf16> {llmopt.param = "up"}, %x: memref<1x1x256xbf16> {llmopt.input = "x"}, %gate: memref<64x256xbf16> {llmopt.param = "gate"}) -> memref<1x1x64xbf16> {
    %0 = memref.alloc() : memref<1x1x64xbf16>
    tile.kernel @elementwise_2 grid [64, 1, 1] block [256, 1, 1] (%1 = %0 : memref<1x1x64xbf16>, %2 = %up : memref<64x256xbf16>, %3 = %x : memref<1x1x256xbf16>, %4 = %gate : memref<64x256xbf16>) {
      %5 = arith.constant 1.000000e+00 : f32
      tile.forall (%i0, %i1, %i2) in [1, 1, 64] over blocks {
        %6 = tile.coop_reduce add %r = 0 to 256 : f32 {
          %7 = loop.load %3[0, 0, %r] : memref<1x1x256xbf16>
          %8 = loop.load %4[%i2, %r] : memref<64x256xbf16>
          %9 = arith.extf %7 : bf16 to f32
          %10 = arith.extf %8 : bf16 to f32
          %11 = arith.mulf %9, %10 : f32
          tile.yield %11 : f32
        }
        %12 = arith.negf %6 : f32
        %13 = math.exp %12 : f32
        %14 = arith.addf %5, %13 : f32
        %15 = arith.divf %5, %14 : f32
        %16 = arith.mulf %6, %15 : f32
        %17 = tile.coop_reduce add %r_1 = 0 to 256 : f32 {
          %18 = loop.load %3[0, 0, %r_1] : memref<1x1x256xbf16>
          %19 = loop.load %2[%i2, %r_1] : memref<64x256xbf16>
          %20 = arith.extf %18 : bf16 to f32
          %21 = arith.extf %19 : bf16 to f32
          %22 = arith.mulf %20, %21 : f32
          tile.yield %22 : f32
        }
        %23 = arith.mulf %16, %17 : f32
        %24 = arith.truncf %23 : f32 to bf16
        tile.forall (%once) in [1] over block_threads {
          loop.store %24, %1[%i0, %i1, %i2] : memref<1x1x64xbf16>
        }
      }
    }
    func.return %0 : memref<1x1x64xbf16>
  }
}

// -----

// CHECK-LABEL: func.func @row_sum
// CHECK:      tile.kernel @reduce_3 grid [1, 1, 1] block [256, 1, 1]
// CHECK:        tile.coop_reduce add
// CHECK-NOT:  llmopt.gemv

builtin.module {
  func.func @row_sum(%x: memref<1x1x256xf32> {llmopt.input = "x"}) -> memref<1x1xf32> {
    %0 = memref.alloc() : memref<1x1xf32>
    tile.kernel @reduce_3 grid [1, 1, 1] block [256, 1, 1] (%1 = %0 : memref<1x1xf32>, %2 = %x : memref<1x1x256xf32>) {
      tile.forall (%i0, %i1) in [1, 1] over blocks {
        %3 = tile.coop_reduce add %r = 0 to 256 : f32 {
          %4 = loop.load %2[%i0, %i1, %r] : memref<1x1x256xf32>
          %5 = arith.mulf %4, %4 : f32
          tile.yield %5 : f32
        }
        tile.forall (%once) in [1] over block_threads {
          loop.store %3, %1[%i0, %i1] : memref<1x1xf32>
        }
      }
    }
    func.return %0 : memref<1x1xf32>
  }
}
