// RUN: llm-opt %s --split-input-file -p 'warp-gemv{rows=4 prefetch_bytes=32768 shuffle=true}' | filecheck %s
// RUN: llm-opt %s --split-input-file -p 'warp-gemv{rows=4},tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p 'warp-gemv,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p 'warp-gemv{rows=4 prefetch_bytes=32768 shuffle=true},tile-to-kernel,canonicalize,cse,kernel-to-cuda' -t cuda | filecheck %s --check-prefix=CUDA
// RUN: llm-opt %s --split-input-file -p 'warp-gemv{rows=4},warp-gemv{rows=2}' | filecheck %s --check-prefix=TWICE
// RUN: not llm-opt %s -p 'warp-gemv{rows=16}' 2>&1 | filecheck %s --check-prefix=BAD
// RUN: llm-opt %s --split-input-file -p 'warp-gemv{rows=4 chunks=2}' | filecheck %s --check-prefix=CHUNKS
// RUN: llm-opt %s --split-input-file -p 'warp-gemv{rows=4}' | filecheck %s --check-prefix=NOPF
// RUN: llm-opt %s --split-input-file -p 'warp-gemv{rows=4 arch=sm_80}' | filecheck %s --check-prefix=NOPF
// RUN: llm-opt %s --split-input-file -p 'warp-gemv{rows=4 prefetch_bytes=1024}' | filecheck %s --check-prefix=PF1K
// RUN: llm-opt %s --split-input-file -p 'warp-gemv{rows=4 stage=false}' | filecheck %s --check-prefix=NOSTAGE
// RUN: llm-opt %s --split-input-file -p 'warp-gemv{rows=4}' | filecheck %s --check-prefix=NOSHUFFLE
// RUN: llm-opt %s --split-input-file -p 'warp-gemv{rows=4 shuffle=true},tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p 'warp-gemv{rows=2 slices=2}' | filecheck %s --check-prefix=SLICES
// RUN: llm-opt %s --split-input-file -p 'warp-gemv{rows=2 slices=4},tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p 'warp-gemv{slices=2 shuffle=true},tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: not llm-opt %s -p 'warp-gemv{slices=16}' 2>&1 | filecheck %s --check-prefix=BADSLICES
// Matrix-vector products as loop-to-tile schedules them (a block per output, a cooperative
// reduction over K): warp-gemv gives each output a warp whose lanes read 16 bytes at a time
// into register fragments, one shared partial a lane, summed by a thread a row after a
// barrier (the default; NOSHUFFLE below); with shuffle=true (CHECK) the warp combines its
// lanes' partials by shuffles (tile.lane_reduce) and finishes its row, lane 0 storing it. Inputs: (1) a projection of 10 outputs (no multiple of the 4 rows a block) over
// K = 200 (no multiple of 32 lanes x 4): clamped copies, the lanes past K masked, the last
// block's rows past 10 storing nothing; (2) a fused gate/up product with its SiLU epilogue
// in bf16 (8 elements a copy); (3) an RMSNorm's row sum, which reads no weight row: left
// alone; (4) a gate/up product of an RMSNorm's row, as recompute-into-products leaves it
// (the row's statistics first, the normalised element computed in the products' sums).
// With prefetch_bytes (none by default; 32 KiB a block here, split over its rows and
// weights, at most a row; sm_90 and newer) a block first asks the L2 cache for the first
// bytes of each of its weight rows, one thread a row, the last block's rows clamped.

// CHECK-LABEL: func.func @proj
// CHECK:      tile.kernel @reduce_1 grid [3, 1, 1] block [128, 1, 1]
// CHECK:        tile.forall (%i0, %i1, %nb) in [1, 1, 3] over blocks {
// CHECK-NEXT:     tile.forall (%row) in [4] over block_threads {
// CHECK-NEXT:       tile.prefetch %{{.*}}[((%nb * 4) + %row), 0] clamp count 200 : memref<10x200xf32>
// CHECK-NEXT:     }
// CHECK-NEXT:     %frag = tile.alloc registers : memref<4x32x4xf32>
// CHECK-NEXT:     %frag_1 = tile.alloc registers : memref<4x32x4xf32>
// CHECK-NEXT:     tile.forall (%w, %l) in [4, 32] over block_threads {
// CHECK:            %[[SUM:.*]] = scf.for %c = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%acc = %{{.*}}) -> (f32) {
// CHECK-NEXT:         tile.copy %{{.*}}[%i0, %i1, ((%c * 128) + (%l * 4))] clamp to %frag[%w, %l, 0] count 4
// CHECK-NEXT:         tile.copy %{{.*}}[((%nb * 4) + %w), ((%c * 128) + (%l * 4))] clamp to %frag_1[%w, %l, 0] count 4
// CHECK:              loop.reduce add %v = 0 to 4 : f32 {
// CHECK:                arith.cmpi ult, %{{.*}}, %{{.*}} : index
// CHECK:                arith.select
// CHECK:              } {unroll = 0 : i64}
// CHECK:            } {unroll = 4 : i64}
// CHECK-NEXT:       %[[TOTAL:.*]] = tile.lane_reduce add %[[SUM]] : f32
// CHECK:            arith.cmpi ult
// CHECK-NEXT:       scf.if
// CHECK:              arith.cmpi ult, %l, %{{.*}} : index
// CHECK-NEXT:         scf.if
// CHECK:                loop.store %[[TOTAL]], %{{.*}}[%i0, %i1, ((%nb * 4) + %w), 0] : memref<1x1x10x1xf32>
// CHECK-NOT:    tile.alloc shared
// CHECK:      } {llmopt.gemv = {rows = 4 : i64, slices = 1 : i64, vector = 4 : i64}}

// The default finish (shuffle=false): a shared partial a lane, a thread a row summing them.
// NOSHUFFLE-LABEL: func.func @proj
// NOSHUFFLE:         %part = tile.alloc shared : memref<4x32xf32>
// NOSHUFFLE:         loop.store %{{.*}}, %part[%w, %l] : memref<4x32xf32>
// NOSHUFFLE:         tile.forall (%w_1) in [4] over block_threads {
// NOSHUFFLE:           arith.cmpi ult
// NOSHUFFLE-NEXT:      scf.if
// NOSHUFFLE-NEXT:        loop.reduce add %lane = 0 to 32 : f32 {
// NOSHUFFLE-NEXT:          loop.load %part[%w_1, %lane] : memref<4x32xf32>
// NOSHUFFLE:             loop.store %{{.*}}, %{{.*}}[%i0, %i1, ((%nb * 4) + %w_1), 0] : memref<1x1x10x1xf32>
// NOSHUFFLE-NOT:     tile.lane_reduce

// Option slices: two warps a row (64 lanes) walk its chunks 64 at a time, the shared
// partials [rows, 64] hold the sum across the slices, and a thread a row adds them all.
// SLICES-LABEL: func.func @proj
// SLICES:      tile.kernel @reduce_1 grid [5, 1, 1] block [128, 1, 1]
// SLICES:        tile.forall (%w, %l) in [2, 64] over block_threads {
// SLICES:            tile.copy %{{.*}}[((%nb * 2) + %w), ((%c * 256) + (%l * 4))] clamp to %frag_1[%w, %l, 0] count 4
// SLICES:          loop.store %{{.*}}, %part[%w, %l] : memref<2x64xf32>
// SLICES:        tile.forall (%w_1) in [2] over block_threads {
// SLICES:            loop.reduce add %lane = 0 to 64 : f32 {
// SLICES-NOT:    tile.lane_reduce
// SLICES:      } {llmopt.gemv = {rows = 2 : i64, slices = 2 : i64, vector = 4 : i64}}
// BADSLICES: slices must be an integer from 1 to 8 or 0 (not set), got 16

// NUM-COUNT-3: tile-to-kernel {{.*}} ok
// NUM-NOT: FAIL

// CUDA-LABEL: void __launch_bounds__(128) reduce_1(
// CUDA:         __align__(16) float frag[4];
// CUDA:         asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :  : "l"(__cvta_generic_to_global(&arg1[{{.*}}])), "r"(800) : "memory");
// CUDA:         #pragma unroll 4
// CUDA-NEXT:    for (long long c = 0; c < 2; c += 1) {
// CUDA:           ((float4*)&frag[0])[0] = ((const float4*)&arg2[
// CUDA:         __shfl_xor_sync(0xffffffffu, acc, 16);
// CUDA-NOT:     __syncthreads
// CUDA:         if ((unsigned long long)l < 1ull) {

// TWICE: } {llmopt.gemv = {rows = 4 : i64, slices = 1 : i64, vector = 4 : i64}}

// Option chunks: the chunks of 16 bytes a lane has in flight (the chunk loop's unroll).
// CHUNKS: } {unroll = 2 : i64}
// CHUNKS-NOT: {unroll = 4 : i64}

// BAD: rows must be an integer from 1 to 8 or 0 (not set), got 16

// Without prefetches (the default prefetch_bytes=0, or an arch without bulk prefetches)
// the block starts with its lanes; with 1 KiB a block, the gate/up product's 4 rows of 2 weights get 128
// bytes each.
// NOPF-NOT: tile.prefetch
// PF1K-LABEL: func.func @gate_up
// PF1K:         tile.prefetch %{{.*}}[((%nb * 4) + %row), 0] count 64 : memref<64x256xbf16>
// PF1K-NEXT:    tile.prefetch %{{.*}}[((%nb * 4) + %row), 0] count 64 : memref<64x256xbf16>

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
// CHECK:        tile.forall (%row) in [4] over block_threads {
// CHECK-NEXT:     tile.prefetch %4[((%nb * 4) + %row), 0] count 256 : memref<64x256xbf16>
// CHECK-NEXT:     tile.prefetch %2[((%nb * 4) + %row), 0] count 256 : memref<64x256xbf16>
// CHECK-NEXT:   }
// CHECK:        tile.copy %{{.*}}[0, 0, ((%c * 256) + (%l * 8))] to %frag[%w, %l, 0] count 8 : memref<1x1x256xbf16>
// CHECK:        tile.copy %{{.*}}[((%nb * 4) + %w), ((%c * 256) + (%l * 8))] to %frag_1[%w, %l, 0] count 8 : memref<64x256xbf16>
// CHECK:        tile.lane_reduce add
// CHECK:        tile.lane_reduce add
// CHECK:        math.exp
// CHECK:        arith.cmpi ult, %l, %{{.*}} : index
// CHECK-NEXT:   scf.if
// CHECK:          loop.store %{{.*}}, %{{.*}}[%i0, %i1, ((%nb * 4) + %w)] : memref<1x1x64xbf16>
// CHECK:      } {llmopt.gemv = {rows = 4 : i64, slices = 1 : i64, vector = 8 : i64}}

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

// -----

// The normalised row, x·rsqrt(…)·g rounded to bf16, is computed once a block into a shared
// tile (stored 16-bit, widened where the lanes read it), after the statistics; both
// products' lanes copy it 16 bytes at a time like a loaded operand. stage=false: every lane
// computes it again per weight element, as before.
// CHECK-LABEL: func.func @normed_gate_up
// CHECK:        %rs = math.rsqrt
// CHECK-NEXT:   %xs = tile.alloc shared : memref<128xbf16>
// CHECK-NEXT:   tile.forall (%k) in [128] over block_threads {
// CHECK:          %yb = arith.truncf %y : f32 to bf16
// CHECK:          loop.store %yb, %xs[%k] : memref<128xbf16>
// CHECK-NEXT:   }
// CHECK-NOT:    tile.alloc shared : memref<128xbf16>
// CHECK:        tile.copy %xs[((%c * 256) + (%l * 8))] clamp to %frag[%{{w[_0-9]*}}, %l, 0] count 8
// CHECK:        loop.load %frag[%{{w[_0-9]*}}, %l, %{{v[_0-9]*}}]
// CHECK-NEXT:   arith.extf
// CHECK-NOT:    math.rsqrt
// CHECK:        tile.copy %xs[((%{{c[_0-9]*}} * 256) + (%l * 8))] clamp to %frag_2[%{{w[_0-9]*}}, %l, 0] count 8
// NOSTAGE-LABEL: func.func @normed_gate_up
// NOSTAGE-NOT:  %xs
// NOSTAGE:      tile.forall (%{{w[_0-9]*}}, %l) in [4, 32] over block_threads {
// NOSTAGE:        arith.truncf

builtin.module {
  func.func @normed_gate_up(%x: memref<1x128xbf16> {llmopt.input = "x"}, %w: memref<128xbf16> {llmopt.param = "norm"}, %Wg: memref<48x128xbf16> {llmopt.param = "gate"}, %Wu: memref<48x128xbf16> {llmopt.param = "up"}) -> memref<1x48xbf16> {
    %out = memref.alloc() : memref<1x48xbf16>
    tile.kernel @gate_up grid [48, 1, 1] block [128, 1, 1] (%o = %out : memref<1x48xbf16>, %wg = %Wg : memref<48x128xbf16>, %wu = %Wu : memref<48x128xbf16>, %a = %x : memref<1x128xbf16>, %g = %w : memref<128xbf16>) {
      tile.forall (%i0, %n) in [1, 48] over blocks {
        %0 = arith.constant 0 : index
        %eps = arith.constant 1.000000e-05 : f32
        %inv = arith.constant 7.812500e-03 : f32
        %s = tile.coop_reduce add %r = 0 to 128 : f32 {
          %v = loop.load %a[%0, %r] : memref<1x128xbf16>
          %e = arith.extf %v : bf16 to f32
          %sq = arith.mulf %e, %e : f32
          tile.yield %sq : f32
        }
        %mean = arith.mulf %s, %inv : f32
        %m = arith.addf %mean, %eps : f32
        %rs = math.rsqrt %m : f32
        %g_1 = tile.coop_reduce add %k = 0 to 128 : f32 {
          %v_1 = loop.load %a[%0, %k] : memref<1x128xbf16>
          %gv = loop.load %g[%k] : memref<128xbf16>
          %e_1 = arith.extf %v_1 : bf16 to f32
          %n_1 = arith.mulf %e_1, %rs : f32
          %nb = arith.truncf %n_1 : f32 to bf16
          %ne = arith.extf %nb : bf16 to f32
          %ge = arith.extf %gv : bf16 to f32
          %y = arith.mulf %ge, %ne : f32
          %yb = arith.truncf %y : f32 to bf16
          %b = loop.load %wg[%n, %k] : memref<48x128xbf16>
          %ae = arith.extf %yb : bf16 to f32
          %be = arith.extf %b : bf16 to f32
          %p = arith.mulf %ae, %be : f32
          tile.yield %p : f32
        }
        %u = tile.coop_reduce add %k2 = 0 to 128 : f32 {
          %v_2 = loop.load %a[%0, %k2] : memref<1x128xbf16>
          %gv_1 = loop.load %g[%k2] : memref<128xbf16>
          %e_2 = arith.extf %v_2 : bf16 to f32
          %n_2 = arith.mulf %e_2, %rs : f32
          %nb_1 = arith.truncf %n_2 : f32 to bf16
          %ne_1 = arith.extf %nb_1 : bf16 to f32
          %ge_1 = arith.extf %gv_1 : bf16 to f32
          %y_1 = arith.mulf %ge_1, %ne_1 : f32
          %yb_1 = arith.truncf %y_1 : f32 to bf16
          %b_1 = loop.load %wu[%n, %k2] : memref<48x128xbf16>
          %ae_1 = arith.extf %yb_1 : bf16 to f32
          %be_1 = arith.extf %b_1 : bf16 to f32
          %p_1 = arith.mulf %ae_1, %be_1 : f32
          tile.yield %p_1 : f32
        }
        %gu = arith.mulf %g_1, %u : f32
        %r_1 = arith.truncf %gu : f32 to bf16
        tile.forall (%once) in [1] over block_threads {
          loop.store %r_1, %o[%i0, %n] : memref<1x48xbf16>
        }
      }
    }
    func.return %out : memref<1x48xbf16>
  }
}
