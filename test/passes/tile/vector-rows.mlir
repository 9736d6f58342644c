// RUN: llm-opt %s --split-input-file -p vector-rows | filecheck %s
// RUN: llm-opt %s --split-input-file -p 'vector-rows{bytes=8}' | filecheck %s --check-prefix=EIGHT
// RUN: llm-opt %s --split-input-file -p 'vector-rows,tile-to-kernel,canonicalize,cse' --check-numerics --check-numerics-lengths 5 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p 'vector-rows,tile-to-kernel,canonicalize,cse,kernel-to-cuda' -t cuda | filecheck %s --check-prefix=CUDA
// Row kernels as loop-to-tile schedules them: a block a row, its threads striding over the
// row in cooperative reductions and in a map over the block's threads. vector-rows gives
// each thread 16 bytes of the row at a time: the reduction folds chunks, each chunk a copy
// into the thread's registers and an unrolled reduction over its elements; the map copies
// chunks in and out.

// RMSNorm in bf16 (rows of 256, 32 threads): one 8-element chunk a thread in the sum of
// squares and in the scaled map; the broadcast weight is a chunk too.
func.func @rmsnorm(%x: memref<4x256xbf16> {llmopt.input = "x"}, %w: memref<256xbf16> {llmopt.param = "w"}) -> memref<4x256xbf16> {
  %0 = memref.alloc() : memref<4x256xbf16>
  tile.kernel @rmsnorm grid [4, 1, 1] block [32, 1, 1] (%out = %0 : memref<4x256xbf16>, %ww = %w : memref<256xbf16>, %xx = %x : memref<4x256xbf16>) {
    %eps = arith.constant 1.000000e-05 : f32
    %inv = arith.constant 3.906250e-03 : f32
    tile.forall (%i) in [4] over blocks {
      %s = tile.coop_reduce add %r = 0 to 256 : f32 {
        %1 = loop.load %xx[%i, %r] : memref<4x256xbf16>
        %2 = arith.extf %1 : bf16 to f32
        %3 = arith.mulf %2, %2 : f32
        tile.yield %3 : f32
      }
      %4 = arith.mulf %s, %inv : f32
      %5 = arith.addf %4, %eps : f32
      %6 = math.rsqrt %5 : f32
      tile.forall (%j) in [256] over block_threads {
        %7 = loop.load %xx[%i, %j] : memref<4x256xbf16>
        %8 = arith.extf %7 : bf16 to f32
        %9 = arith.mulf %8, %6 : f32
        %10 = loop.load %ww[%j] : memref<256xbf16>
        %11 = arith.extf %10 : bf16 to f32
        %12 = arith.mulf %9, %11 : f32
        %13 = arith.truncf %12 : f32 to bf16
        loop.store %13, %out[%i, %j] : memref<4x256xbf16>
      }
    }
  }
  func.return %0 : memref<4x256xbf16>
}
// CHECK-LABEL: func.func @rmsnorm
// CHECK:         %s = tile.coop_reduce add %q = 0 to 32 : f32 {
// CHECK-NEXT:      %[[X:.*]] = tile.alloc registers : memref<8xbf16>
// CHECK-NEXT:      tile.copy %xx[%i, (%q * 8)] to %[[X]][0] count 8
// CHECK-NEXT:      %[[P:.*]] = loop.reduce add %v = 0 to 8 : f32 {
// CHECK:             loop.load %[[X]][%v] : memref<8xbf16>
// CHECK:             loop.yield %{{.*}} : f32
// CHECK-NEXT:      } {unroll = 0 : i64}
// CHECK-NEXT:      tile.yield %[[P]] : f32
// CHECK:         tile.forall (%q_1) in [32] over block_threads {
// CHECK-NEXT:      %[[XM:.*]] = tile.alloc registers : memref<8xbf16>
// CHECK-NEXT:      tile.copy %xx[%i, (%q_1 * 8)] to %[[XM]][0] count 8
// CHECK-NEXT:      %[[W:.*]] = tile.alloc registers : memref<8xbf16>
// CHECK-NEXT:      tile.copy %ww[(%q_1 * 8)] to %[[W]][0] count 8
// CHECK-NEXT:      %[[O:.*]] = tile.alloc registers : memref<8xbf16>
// CHECK:           scf.for %v_1 =
// CHECK:             loop.store %{{.*}}, %[[O]][%v_1] : memref<8xbf16>
// CHECK:           tile.copy %[[O]][0] to %out[%i, (%q_1 * 8)] count 8
// EIGHT-LABEL: func.func @rmsnorm
// EIGHT:         tile.coop_reduce add %q = 0 to 64 : f32 {
// EIGHT:           tile.copy %xx[%i, (%q * 4)] to %{{.*}}[0] count 4
// NUM: vector-rows {{.*}} ok
// CUDA-LABEL: void __launch_bounds__(32) rmsnorm_1(
// CUDA:         ((uint4*)&vec[0])[0] = ((const uint4*)&xx[{{.*}}])[0];
// CUDA:         ((uint4*)&out[{{.*}}])[0] = ((uint4*)&vec{{[0-9]*}}[0])[0];

// -----

// Softmax over f32 rows of 128 (32 threads): four elements a chunk, in the maximum, the sum of
// exponentials and the map.
func.func @softmax(%x: memref<2x128xf32> {llmopt.input = "x"}) -> memref<2x128xf32> {
  %0 = memref.alloc() : memref<2x128xf32>
  tile.kernel @softmax grid [2, 1, 1] block [32, 1, 1] (%out = %0 : memref<2x128xf32>, %xx = %x : memref<2x128xf32>) {
    tile.forall (%i) in [2] over blocks {
      %m = tile.coop_reduce max %r = 0 to 128 : f32 {
        %1 = loop.load %xx[%i, %r] : memref<2x128xf32>
        tile.yield %1 : f32
      }
      %l = tile.coop_reduce add %r1 = 0 to 128 : f32 {
        %2 = loop.load %xx[%i, %r1] : memref<2x128xf32>
        %3 = arith.subf %2, %m : f32
        %4 = math.exp %3 : f32
        tile.yield %4 : f32
      }
      tile.forall (%j) in [128] over block_threads {
        %5 = loop.load %xx[%i, %j] : memref<2x128xf32>
        %6 = arith.subf %5, %m : f32
        %7 = math.exp %6 : f32
        %8 = arith.divf %7, %l : f32
        loop.store %8, %out[%i, %j] : memref<2x128xf32>
      }
    }
  }
  func.return %0 : memref<2x128xf32>
}
// CHECK-LABEL: func.func @softmax
// CHECK:         %m = tile.coop_reduce max %q = 0 to 32 : f32 {
// CHECK:           loop.reduce max %v = 0 to 4 : f32 {
// CHECK:         %l = tile.coop_reduce add %q_1 = 0 to 32 : f32 {
// CHECK:           loop.reduce add %v_1 = 0 to 4 : f32 {
// CHECK:         tile.forall (%q_2) in [32] over block_threads {
// NUM: vector-rows {{.*}} ok
// CUDA-LABEL: void __launch_bounds__(32) softmax_1(
// CUDA:         ((float4*)&vec[0])[0] = ((const float4*)&xx[{{.*}}])[0];
// CUDA:         ((float4*)&out[{{.*}}])[0] = ((float4*)&vec{{[0-9]*}}[0])[0];

// -----

// Rows of 384 halves over 32 threads: 48 chunks, so some threads take two and the others one
// (the fold's strided loop and the map's second round are guarded).
func.func @uneven(%x: memref<3x384xbf16> {llmopt.input = "x"}) -> memref<3x384xbf16> {
  %0 = memref.alloc() : memref<3x384xbf16>
  tile.kernel @uneven grid [3, 1, 1] block [32, 1, 1] (%out = %0 : memref<3x384xbf16>, %xx = %x : memref<3x384xbf16>) {
    tile.forall (%i) in [3] over blocks {
      %s = tile.coop_reduce add %r = 0 to 384 : f32 {
        %1 = loop.load %xx[%i, %r] : memref<3x384xbf16>
        %2 = arith.extf %1 : bf16 to f32
        tile.yield %2 : f32
      }
      tile.forall (%j) in [384] over block_threads {
        %3 = loop.load %xx[%i, %j] : memref<3x384xbf16>
        %4 = arith.extf %3 : bf16 to f32
        %5 = arith.subf %4, %s : f32
        %6 = arith.truncf %5 : f32 to bf16
        loop.store %6, %out[%i, %j] : memref<3x384xbf16>
      }
    }
  }
  func.return %0 : memref<3x384xbf16>
}
// CHECK-LABEL: func.func @uneven
// CHECK:         %s = tile.coop_reduce add %q = 0 to 48 : f32 {
// CHECK:         tile.forall (%q_1) in [48] over block_threads {
// NUM: vector-rows {{.*}} ok

// -----

// A symbolic number of rows (a runtime forall over blocks and grid): the row's own extent is
// static, so its chunks are as above.
func.func @rows(%x: memref<?x64xbf16> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                %seq: index {llmopt.symbol = "seq", llmopt.max = 8}) -> memref<?x64xbf16> {
  %0 = memref.alloc(%seq) : memref<?x64xbf16>
  tile.kernel @rows grid [%seq max 8, 1, 1] block [32, 1, 1] (%out = %0 : memref<?x64xbf16>, %xx = %x : memref<?x64xbf16>, %n = %seq : index) {
    tile.forall (%i) in [%n max 8] over blocks {
      %m = tile.coop_reduce max %r = 0 to 64 : f32 {
        %1 = loop.load %xx[%i, %r] : memref<?x64xbf16>
        %2 = arith.extf %1 : bf16 to f32
        tile.yield %2 : f32
      }
      tile.forall (%j) in [64] over block_threads {
        %3 = loop.load %xx[%i, %j] : memref<?x64xbf16>
        %4 = arith.extf %3 : bf16 to f32
        %5 = arith.subf %4, %m : f32
        %6 = arith.truncf %5 : f32 to bf16
        loop.store %6, %out[%i, %j] : memref<?x64xbf16>
      }
    }
  }
  func.return %0 : memref<?x64xbf16>
}
// CHECK-LABEL: func.func @rows
// CHECK:         %m = tile.coop_reduce max %q = 0 to 8 : f32 {
// CHECK:           tile.copy %xx[%i, (%q * 8)] to %{{.*}}[0] count 8
// CHECK:         tile.forall (%q_1) in [8] over block_threads {
// NUM: vector-rows {{.*}} ok

// -----

// Left alone: a reduction over a runtime extent, a row whose width 8 does not divide (12
// halves), and a map that reads the buffer it writes.
func.func @alone(%x: memref<2x12xbf16> {llmopt.input = "x"}, %y: memref<2x64xbf16> {llmopt.input = "y"},
                 %k: index {llmopt.symbol = "k", llmopt.max = 64}) -> memref<2x64xbf16> {
  tile.kernel @alone grid [2, 1, 1] block [32, 1, 1] (%xx = %x : memref<2x12xbf16>, %yy = %y : memref<2x64xbf16>, %kk = %k : index) {
    tile.forall (%i) in [2] over blocks {
      %a = tile.coop_reduce add %r = 0 to %kk max 64 : f32 {
        %1 = loop.load %yy[%i, %r] : memref<2x64xbf16>
        %2 = arith.extf %1 : bf16 to f32
        tile.yield %2 : f32
      }
      %b = tile.coop_reduce add %r1 = 0 to 12 : f32 {
        %3 = loop.load %xx[%i, %r1] : memref<2x12xbf16>
        %4 = arith.extf %3 : bf16 to f32
        tile.yield %4 : f32
      }
      %c = arith.addf %a, %b : f32
      tile.forall (%j) in [64] over block_threads {
        %5 = loop.load %yy[%i, %j] : memref<2x64xbf16>
        %6 = arith.extf %5 : bf16 to f32
        %7 = arith.addf %6, %c : f32
        %8 = arith.truncf %7 : f32 to bf16
        loop.store %8, %yy[%i, %j] : memref<2x64xbf16>
      }
    }
  }
  func.return %y : memref<2x64xbf16>
}
// CHECK-LABEL: func.func @alone
// CHECK:         tile.coop_reduce add %r = 0 to %kk max 64 : f32 {
// CHECK-NEXT:      loop.load %yy[%i, %r]
// CHECK:         tile.coop_reduce add %r1 = 0 to 12 : f32 {
// CHECK-NEXT:      loop.load %xx[%i, %r1]
// CHECK:         tile.forall (%j) in [64] over block_threads {
// CHECK-NEXT:      loop.load %yy[%i, %j]
