// RUN: llm-opt %s --split-input-file -p loop-to-tile | filecheck %s
// RUN: llm-opt %s --split-input-file -p 'loop-to-tile{block_size=128 coop_threshold=0}' | filecheck %s --check-prefix=KNOBS
// RUN: not llm-opt %s --split-input-file -p 'loop-to-tile{block_size=100}' 2>&1 | filecheck %s --check-prefix=BADBLOCK
// The default schedule: a band with a nested free loop, or with a reduction over few points,
// runs one point per block (row schedule); everything else one point per thread.

// Elementwise: thread schedule over the whole band, grid = ceil(2048 / 256).
func.func @elementwise(%x: memref<8x256xf32>, %y: memref<8x256xf32>) {
  loop.kernel @add (%a = %x : memref<8x256xf32>, %b = %y : memref<8x256xf32>) {
    loop.for %i = 0 to 8 {
      loop.for %j = 0 to 256 {
        %v = loop.load %a[%i, %j] : memref<8x256xf32>
        %w = arith.addf %v, %v : f32
        loop.store %w, %b[%i, %j] : memref<8x256xf32>
      }
    }
  }
  func.return
}

// CHECK-LABEL: func.func @elementwise
// CHECK-NEXT:  tile.kernel @add grid [8, 1, 1] block [256, 1, 1] (%a = %x : memref<8x256xf32>, %b = %y : memref<8x256xf32>) {
// CHECK-NEXT:    tile.forall (%i, %j) in [8, 256] over threads {
// CHECK-NEXT:      %v = loop.load %a[%i, %j] : memref<8x256xf32>
// CHECK-NEXT:      %w = arith.addf %v, %v : f32
// CHECK-NEXT:      loop.store %w, %b[%i, %j] : memref<8x256xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:  }
// CHECK-NEXT:  func.return

// KNOBS-LABEL: func.func @elementwise
// KNOBS-NEXT:  tile.kernel @add grid [16, 1, 1] block [128, 1, 1]

// -----

// RMSNorm: the reduction becomes cooperative, the inner free loop goes to the block's threads.
func.func @rmsnorm(%x: memref<8x2048xf32>, %w: memref<2048xf32>, %y: memref<8x2048xf32>) {
  loop.kernel @rmsnorm (%a = %x : memref<8x2048xf32>, %g = %w : memref<2048xf32>, %o = %y : memref<8x2048xf32>) {
    %eps = arith.constant 1.0e-05 : f32
    loop.for %i = 0 to 8 {
      %s = loop.reduce add %k = 0 to 2048 : f32 {
        %v = loop.load %a[%i, %k] : memref<8x2048xf32>
        %sq = arith.mulf %v, %v : f32
        loop.yield %sq : f32
      }
      %n = arith.constant 4.8828125e-04 : f32
      %m = arith.mulf %s, %n : f32
      %e = arith.addf %m, %eps : f32
      %r = math.rsqrt %e : f32
      loop.for %j = 0 to 2048 {
        %v = loop.load %a[%i, %j] : memref<8x2048xf32>
        %wj = loop.load %g[%j] : memref<2048xf32>
        %t = arith.mulf %v, %r : f32
        %u = arith.mulf %t, %wj : f32
        loop.store %u, %o[%i, %j] : memref<8x2048xf32>
      }
    }
  }
  func.return
}

// CHECK-LABEL: func.func @rmsnorm
// CHECK-NEXT:  tile.kernel @rmsnorm grid [8, 1, 1] block [256, 1, 1]
// CHECK-NEXT:    %eps = arith.constant
// CHECK-NEXT:    tile.forall (%i) in [8] over blocks {
// CHECK-NEXT:      %s = tile.coop_reduce add %k = 0 to 2048 : f32 {
// CHECK-NEXT:        %v = loop.load %a[%i, %k] : memref<8x2048xf32>
// CHECK-NEXT:        %sq = arith.mulf %v, %v : f32
// CHECK-NEXT:        tile.yield %sq : f32
// CHECK-NEXT:      }
// CHECK:           %r = math.rsqrt %e : f32
// CHECK-NEXT:      tile.forall (%j) in [2048] over block_threads {
// CHECK-NEXT:        %{{.*}} = loop.load %a[%i, %j] : memref<8x2048xf32>
// CHECK:             loop.store %u, %o[%i, %j] : memref<8x2048xf32>
// CHECK-NEXT:      }
// CHECK-NEXT:    }
// CHECK-NEXT:  }

// KNOBS-LABEL: func.func @rmsnorm
// KNOBS-NEXT:  tile.kernel @rmsnorm grid [8, 1, 1] block [128, 1, 1]
// KNOBS:         tile.coop_reduce add

// -----

// Matmul: enough output points for one a thread; the reduction stays sequential.
func.func @matmul(%x: memref<128x64xf32>, %w: memref<256x64xf32>, %y: memref<128x256xf32>) {
  loop.kernel @matmul (%a = %x : memref<128x64xf32>, %b = %w : memref<256x64xf32>, %o = %y : memref<128x256xf32>) {
    loop.for %i = 0 to 128 {
      loop.for %j = 0 to 256 {
        %s = loop.reduce add %k = 0 to 64 : f32 {
          %u = loop.load %a[%i, %k] : memref<128x64xf32>
          %v = loop.load %b[%j, %k] : memref<256x64xf32>
          %p = arith.mulf %u, %v : f32
          loop.yield %p : f32
        }
        loop.store %s, %o[%i, %j] : memref<128x256xf32>
      }
    }
  }
  func.return
}

// CHECK-LABEL: func.func @matmul
// CHECK-NEXT:  tile.kernel @matmul grid [128, 1, 1] block [256, 1, 1]
// CHECK-NEXT:    tile.forall (%i, %j) in [128, 256] over threads {
// CHECK-NEXT:      %s = loop.reduce add %k = 0 to 64 : f32 {
// CHECK:           loop.yield %p : f32
// CHECK-NEXT:      }
// CHECK-NEXT:      loop.store %s, %o[%i, %j] : memref<128x256xf32>

// With coop_threshold=0 no band counts as small: still one point a thread.
// KNOBS-LABEL: func.func @matmul
// KNOBS-NEXT:  tile.kernel @matmul grid [256, 1, 1] block [128, 1, 1]
// KNOBS-NEXT:    tile.forall (%i, %j) in [128, 256] over threads {
// KNOBS-NEXT:      loop.reduce add

// -----

// Matrix-vector product: 96 points are too few for one a thread, so each output gets a block
// (64 threads: the reduction is 64 long); one thread stores the result.
func.func @gemv(%x: memref<1x64xf32>, %w: memref<96x64xf32>, %y: memref<1x96xf32>) {
  loop.kernel @gemv (%a = %x : memref<1x64xf32>, %b = %w : memref<96x64xf32>, %o = %y : memref<1x96xf32>) {
    loop.for %i = 0 to 1 {
      loop.for %j = 0 to 96 {
        %s = loop.reduce add %k = 0 to 64 : f32 {
          %u = loop.load %a[%i, %k] : memref<1x64xf32>
          %v = loop.load %b[%j, %k] : memref<96x64xf32>
          %p = arith.mulf %u, %v : f32
          loop.yield %p : f32
        }
        loop.store %s, %o[%i, %j] : memref<1x96xf32>
      }
    }
  }
  func.return
}

// CHECK-LABEL: func.func @gemv
// CHECK-NEXT:  tile.kernel @gemv grid [96, 1, 1] block [64, 1, 1]
// CHECK-NEXT:    tile.forall (%i, %j) in [1, 96] over blocks {
// CHECK-NEXT:      %s = tile.coop_reduce add %k = 0 to 64 : f32 {
// CHECK:             tile.yield %p : f32
// CHECK-NEXT:      }
// CHECK-NEXT:      tile.forall (%{{.*}}) in [1] over block_threads {
// CHECK-NEXT:        loop.store %s, %o[%i, %j] : memref<1x96xf32>
// CHECK-NEXT:      }
// CHECK-NEXT:    }

// Without the coop threshold too: one thread per output would read rows of W apart (a
// threshold of 0 counts every band as many rows: 64 / 8 points a thread, a warp).
// KNOBS-LABEL: func.func @gemv
// KNOBS-NEXT:  tile.kernel @gemv grid [96, 1, 1] block [32, 1, 1]
// KNOBS-NEXT:    tile.forall (%i, %j) in [1, 96] over blocks {

// -----

// An odd size: 700 points in 3 blocks of 256; the strided forall checks the bound.
func.func @odd(%x: memref<7x100xf32>, %y: memref<7x100xf32>) {
  loop.kernel @odd (%a = %x : memref<7x100xf32>, %b = %y : memref<7x100xf32>) {
    loop.for %i = 0 to 7 {
      loop.for %j = 0 to 100 {
        %v = loop.load %a[%i, %j] : memref<7x100xf32>
        loop.store %v, %b[%i, (%j + 1) mod 100] : memref<7x100xf32>
      }
    }
  }
  func.return
}

// CHECK-LABEL: func.func @odd
// CHECK-NEXT:  tile.kernel @odd grid [3, 1, 1] block [256, 1, 1]
// CHECK-NEXT:    tile.forall (%i, %j) in [7, 100] over threads {
// CHECK-NEXT:      %v = loop.load %a[%i, %j] : memref<7x100xf32>
// CHECK-NEXT:      loop.store %v, %b[%i, ((%j + 1) mod 100)] : memref<7x100xf32>

// -----

// A small band: one warp is enough.
func.func @tiny(%x: memref<5xf32>) {
  loop.kernel @tiny (%a = %x : memref<5xf32>) {
    loop.for %i = 0 to 5 {
      %v = loop.load %a[%i] : memref<5xf32>
      %w = arith.mulf %v, %v : f32
      loop.store %w, %a[%i] : memref<5xf32>
    }
  }
  func.return
}

// CHECK-LABEL: func.func @tiny
// CHECK-NEXT:  tile.kernel @tiny grid [1, 1, 1] block [32, 1, 1]
// CHECK-NEXT:    tile.forall (%i) in [5] over threads {

// -----

// A load and a scalar op beside a single inner loop are sunk into it: the band becomes
// perfect and every point gets a thread.
func.func @broadcast(%x: memref<64xf32>, %y: memref<64x32xf32>) {
  loop.kernel @broadcast (%a = %x : memref<64xf32>, %b = %y : memref<64x32xf32>) {
    loop.for %i = 0 to 64 {
      %v = loop.load %a[%i] : memref<64xf32>
      %w = arith.mulf %v, %v : f32
      loop.for %j = 0 to 32 {
        loop.store %w, %b[%i, %j] : memref<64x32xf32>
      }
    }
  }
  func.return
}

// CHECK-LABEL: func.func @broadcast
// CHECK-NEXT:  tile.kernel @broadcast grid [8, 1, 1] block [256, 1, 1]
// CHECK-NEXT:    tile.forall (%i, %j) in [64, 32] over threads {
// CHECK-NEXT:      %v = loop.load %a[%i] : memref<64xf32>
// CHECK-NEXT:      %w = arith.mulf %v, %v : f32
// CHECK-NEXT:      loop.store %w, %b[%i, %j] : memref<64x32xf32>

// -----

// A full reduction (no free loop): one block reduces, one thread stores.
func.func @full(%x: memref<4096xf32>, %y: memref<1xf32>) {
  loop.kernel @amax (%a = %x : memref<4096xf32>, %o = %y : memref<1xf32>) {
    %s = loop.reduce max %k = 0 to 4096 : f32 {
      %v = loop.load %a[%k] : memref<4096xf32>
      loop.yield %v : f32
    }
    loop.store %s, %o[0] : memref<1xf32>
  }
  func.return
}

// CHECK-LABEL: func.func @full
// CHECK-NEXT:  tile.kernel @amax grid [1, 1, 1] block [256, 1, 1]
// CHECK-NEXT:    tile.forall (%{{.*}}) in [1] over blocks {
// CHECK-NEXT:      %s = tile.coop_reduce max %k = 0 to 4096 : f32 {
// CHECK:           tile.forall (%{{.*}}) in [1] over block_threads {
// CHECK-NEXT:        loop.store %s, %o[0] : memref<1xf32>

// -----

// Several nests: independent ones share a kernel (launch shape: the largest any asks for);
// one that reads what an earlier one writes starts a new kernel.
func.func @nests(%x: memref<64xf32>, %y: memref<64xf32>, %z: memref<32xf32>) {
  loop.kernel @nests (%a = %x : memref<64xf32>, %b = %y : memref<64xf32>, %c = %z : memref<32xf32>) {
    %one = arith.constant 1.0 : f32
    loop.for %i = 0 to 64 {
      %v = loop.load %a[%i] : memref<64xf32>
      %w = arith.addf %v, %one : f32
      loop.store %w, %b[%i] : memref<64xf32>
    }
    loop.for %i = 0 to 32 {
      %v = loop.load %a[%i] : memref<64xf32>
      %w = arith.subf %v, %one : f32
      loop.store %w, %c[%i] : memref<32xf32>
    }
    loop.for %i = 0 to 32 {
      %v = loop.load %b[%i] : memref<64xf32>
      %w = arith.mulf %v, %one : f32
      loop.store %w, %c[%i] : memref<32xf32>
    }
  }
  func.return
}

// CHECK-LABEL: func.func @nests
// CHECK-NEXT:  tile.kernel @nests grid [1, 1, 1] block [64, 1, 1] (%a = %x : memref<64xf32>, %b = %y : memref<64xf32>, %c = %z : memref<32xf32>) {
// CHECK-NEXT:    %one = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:    tile.forall (%i) in [64] over threads {
// CHECK:         tile.forall (%{{.*}}) in [32] over threads {
// CHECK:           arith.subf
// CHECK:       tile.kernel @nests_1 grid [1, 1, 1] block [32, 1, 1] (%a{{.*}} = %x : memref<64xf32>, %b{{.*}} = %y : memref<64xf32>, %c{{.*}} = %z : memref<32xf32>) {
// CHECK-NEXT:    %one{{.*}} = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:    tile.forall (%{{.*}}) in [32] over threads {
// CHECK:           arith.mulf
// CHECK:       func.return

// -----

// A full reduction whose result a loop nest uses: the two cannot be separate foralls, so they
// run in order on one block (row schedule), the nest over the block's threads. Scalar ops
// defined between them without depending on them are hoisted to the top of the kernel.
func.func @vector_norm(%x: memref<300xf32>, %y: memref<300xf32>) {
  loop.kernel @vnorm (%a = %x : memref<300xf32>, %b = %y : memref<300xf32>) {
    %s = loop.reduce add %k = 0 to 300 : f32 {
      %v = loop.load %a[%k] : memref<300xf32>
      loop.yield %v : f32
    }
    %n = arith.constant 3.3333333e-03 : f32
    %m = arith.mulf %s, %n : f32
    loop.for %i = 0 to 300 {
      %v = loop.load %a[%i] : memref<300xf32>
      %w = arith.mulf %v, %m : f32
      loop.store %w, %b[%i] : memref<300xf32>
    }
  }
  func.return
}

// CHECK-LABEL: func.func @vector_norm
// CHECK-NEXT:  tile.kernel @vnorm grid [1, 1, 1] block [256, 1, 1]
// CHECK-NEXT:    %n = arith.constant
// CHECK-NEXT:    tile.forall (%once) in [1] over blocks {
// CHECK-NEXT:      %s = tile.coop_reduce add %k = 0 to 300 : f32 {
// CHECK:           %m = arith.mulf %s, %n : f32
// CHECK-NEXT:      tile.forall (%i) in [300] over block_threads {
// CHECK:             loop.store %w, %b[%i] : memref<300xf32>

// BADBLOCK: llm-opt: error: invalid options for pass 'loop-to-tile': block_size must be an integer from 32 to 1024, a multiple of 32, got 100

// -----

// A matrix-vector product over 4160 outputs (one token through a projection): above the
// coop threshold, yet one thread per output would read rows of W 64 words apart; a block
// per output reads each row coalesced, 64 / 8 = 8 points a thread rounded up to a warp.
func.func @gemv_wide(%x: memref<1x1x64xf32>, %w: memref<4160x64xf32>, %y: memref<1x1x4160xf32>) {
  loop.kernel @gemv_wide (%a = %x : memref<1x1x64xf32>, %b = %w : memref<4160x64xf32>, %o = %y : memref<1x1x4160xf32>) {
    loop.for %i0 = 0 to 1 {
      loop.for %i1 = 0 to 1 {
        loop.for %i2 = 0 to 4160 {
          %s = loop.reduce add %k = 0 to 64 : f32 {
            %u = loop.load %a[%i0, %i1, %k] : memref<1x1x64xf32>
            %v = loop.load %b[%i2, %k] : memref<4160x64xf32>
            %m = arith.mulf %u, %v : f32
            loop.yield %m : f32
          }
          loop.store %s, %o[%i0, %i1, %i2] : memref<1x1x4160xf32>
        }
      }
    }
  }
  func.return
}

// CHECK-LABEL: func.func @gemv_wide
// CHECK:       tile.kernel @gemv_wide grid [4160, 1, 1] block [32, 1, 1]
// CHECK-NEXT:    tile.forall (%{{.*}}, %{{.*}}, %{{.*}}) in [1, 1, 4160] over blocks {
// CHECK-NEXT:      tile.coop_reduce add %{{.*}} = 0 to 64 : f32 {
