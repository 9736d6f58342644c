// RUN: llm-opt %s --split-input-file -p vector-epilogue | filecheck %s
// RUN: llm-opt %s --split-input-file -p 'vector-epilogue,tile-to-kernel,canonicalize,cse' --check-numerics --check-numerics-lengths 5 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p 'vector-epilogue,tile-to-kernel,canonicalize,cse,kernel-to-cuda' -t cuda | filecheck %s --check-prefix=CUDA
// Epilogues in the tensor-core layout (as register-tile leaves them): a warp of 8 x 4
// threads, each holding columns 2t + 8j + rl of rows g + 8rh. vector-epilogue moves each
// thread's column pair (rl = 0, 1) with one copy: the residual in, the output out.

// bf16 with a residual, 12 of 16 rows: the row guard does not depend on rl, so it is
// tested once for the pair.
func.func @residual(%x: memref<16x16xbf16> {llmopt.input = "x"}, %r: memref<12x16xbf16> {llmopt.input = "r"}) -> memref<12x16xbf16> {
  %0 = memref.alloc() : memref<12x16xbf16>
  tile.kernel @residual grid [1, 1, 1] block [32, 1, 1] (%xx = %x : memref<16x16xbf16>, %rr = %r : memref<12x16xbf16>, %out = %0 : memref<12x16xbf16>) {
    tile.forall (%b) in [1] over blocks {
      %acc = tile.alloc registers : memref<8x4x2x2x2xf32>
      tile.forall (%g, %t) in [8, 4] over block_threads {
        loop.for %rh = 0 to 2 {
          loop.for %j = 0 to 2 {
            loop.for %rl = 0 to 2 {
              %v = loop.load %xx[(%g + (%rh * 8)), (((%t * 2) + (%j * 8)) + %rl)] : memref<16x16xbf16>
              %f = arith.extf %v : bf16 to f32
              loop.store %f, %acc[%g, %t, %rh, %j, %rl] : memref<8x4x2x2x2xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {unroll = 0 : i64}
      } {llmopt.role = "init", llmopt.layout = "mma"}
      tile.forall (%g1, %t1) in [8, 4] over block_threads {
        loop.for %rh1 = 0 to 2 {
          loop.for %j1 = 0 to 2 {
            loop.for %rl1 = 0 to 2 {
              %c8 = arith.constant 8 : index
              %1 = arith.muli %rh1, %c8 : index
              %row = arith.addi %g1, %1 : index
              %c12 = arith.constant 12 : index
              %in = arith.cmpi ult, %row, %c12 : index
              scf.if %in {
                %sum = loop.load %acc[%g1, %t1, %rh1, %j1, %rl1] : memref<8x4x2x2x2xf32>
                %2 = arith.truncf %sum : f32 to bf16
                %3 = loop.load %rr[(%g1 + (%rh1 * 8)), (((%t1 * 2) + (%j1 * 8)) + %rl1)] : memref<12x16xbf16>
                %4 = arith.extf %2 : bf16 to f32
                %5 = arith.extf %3 : bf16 to f32
                %6 = arith.addf %4, %5 : f32
                %7 = arith.truncf %6 : f32 to bf16
                loop.store %7, %out[(%g1 + (%rh1 * 8)), (((%t1 * 2) + (%j1 * 8)) + %rl1)] : memref<12x16xbf16>
              }
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {unroll = 0 : i64}
      } {llmopt.role = "epilogue", llmopt.layout = "mma"}
    }
  }
  func.return %0 : memref<12x16xbf16>
}
// CHECK-LABEL: func.func @residual
// CHECK:         %[[RIN:.*]] = tile.alloc registers : memref<8x4x2x2x2xbf16>
// CHECK-NEXT:    %[[OUT:.*]] = tile.alloc registers : memref<8x4x2x2x2xbf16>
// CHECK-NEXT:    tile.forall (%g1, %t1) in [8, 4] over block_threads {
// CHECK:           %[[Z:.*]] = arith.constant 0 : index
// CHECK:           %[[OK:.*]] = arith.cmpi ult
// CHECK-NEXT:      scf.if %[[OK]] {
// CHECK-NEXT:        tile.copy %rr[{{.*}}] to %[[RIN]][%g1, %t1, %rh1, %j1, 0] count 2
// CHECK-NEXT:        loop.for %rl1 = 0 to 2 {
// CHECK:               loop.load %[[RIN]][%g1, %t1, %rh1, %j1, %rl1]
// CHECK:               loop.store %{{.*}}, %[[OUT]][%g1, %t1, %rh1, %j1, %rl1]
// CHECK-NEXT:        } {unroll = 0 : i64}
// CHECK-NEXT:        tile.copy %[[OUT]][%g1, %t1, %rh1, %j1, 0] to %out[{{.*}}] count 2
// NUM: vector-epilogue {{.*}} max abs 0.000e+00 {{.*}} ok
// CUDA-LABEL: void __launch_bounds__(32) residual_1(
// CUDA:         ((unsigned int*)&pair[{{.*}}])[0] = ((const unsigned int*)&rr[
// CUDA:         ((unsigned int*)&out[{{.*}}])[0] = ((unsigned int*)&pair1[{{.*}}])[0];

// -----

// f32 with no guard: each pair is one 8-byte store.
func.func @plain(%x: memref<16x16xf32> {llmopt.input = "x"}) -> memref<16x16xf32> {
  %0 = memref.alloc() : memref<16x16xf32>
  tile.kernel @plain grid [1, 1, 1] block [32, 1, 1] (%xx = %x : memref<16x16xf32>, %out = %0 : memref<16x16xf32>) {
    tile.forall (%b) in [1] over blocks {
      %acc = tile.alloc registers : memref<8x4x2x2x2xf32>
      tile.forall (%g, %t) in [8, 4] over block_threads {
        loop.for %rh = 0 to 2 {
          loop.for %j = 0 to 2 {
            loop.for %rl = 0 to 2 {
              %v = loop.load %xx[(%g + (%rh * 8)), (((%t * 2) + (%j * 8)) + %rl)] : memref<16x16xf32>
              loop.store %v, %acc[%g, %t, %rh, %j, %rl] : memref<8x4x2x2x2xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {unroll = 0 : i64}
      } {llmopt.role = "init", llmopt.layout = "mma"}
      tile.forall (%g1, %t1) in [8, 4] over block_threads {
        loop.for %rh1 = 0 to 2 {
          loop.for %j1 = 0 to 2 {
            loop.for %rl1 = 0 to 2 {
              %sum = loop.load %acc[%g1, %t1, %rh1, %j1, %rl1] : memref<8x4x2x2x2xf32>
              %s = arith.mulf %sum, %sum : f32
              loop.store %s, %out[(%g1 + (%rh1 * 8)), (((%t1 * 2) + (%j1 * 8)) + %rl1)] : memref<16x16xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {unroll = 0 : i64}
      } {llmopt.role = "epilogue", llmopt.layout = "mma"}
    }
  }
  func.return %0 : memref<16x16xf32>
}
// CHECK-LABEL: func.func @plain
// CHECK:         %[[O2:pair.*]] = tile.alloc registers : memref<8x4x2x2x2xf32>
// CHECK:           loop.for %rl1 = 0 to 2 {
// CHECK:             loop.store %{{.*}}, %[[O2]][%g1, %t1, %rh1, %j1, %rl1]
// CHECK:           } {unroll = 0 : i64}
// CHECK-NEXT:      tile.copy %[[O2]][%g1, %t1, %rh1, %j1, 0] to %out[{{.*}}] count 2
// NUM: vector-epilogue {{.*}} max abs 0.000e+00 {{.*}} ok
// CUDA-LABEL: void __launch_bounds__(32) plain_1(
// CUDA:         ((float2*)&out[{{.*}}])[0] = ((float2*)&pair[{{.*}}])[0];

// -----

// 15 columns: the column guard (col < 15) differs between a pair's two columns, so the
// epilogue is left as it is.
func.func @odd(%x: memref<16x16xbf16> {llmopt.input = "x"}) -> memref<16x15xbf16> {
  %0 = memref.alloc() : memref<16x15xbf16>
  tile.kernel @odd grid [1, 1, 1] block [32, 1, 1] (%xx = %x : memref<16x16xbf16>, %out = %0 : memref<16x15xbf16>) {
    tile.forall (%b) in [1] over blocks {
      %acc = tile.alloc registers : memref<8x4x2x2x2xf32>
      tile.forall (%g, %t) in [8, 4] over block_threads {
        loop.for %rh = 0 to 2 {
          loop.for %j = 0 to 2 {
            loop.for %rl = 0 to 2 {
              %v = loop.load %xx[(%g + (%rh * 8)), (((%t * 2) + (%j * 8)) + %rl)] : memref<16x16xbf16>
              %f = arith.extf %v : bf16 to f32
              loop.store %f, %acc[%g, %t, %rh, %j, %rl] : memref<8x4x2x2x2xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {unroll = 0 : i64}
      } {llmopt.role = "init", llmopt.layout = "mma"}
      tile.forall (%g1, %t1) in [8, 4] over block_threads {
        loop.for %rh1 = 0 to 2 {
          loop.for %j1 = 0 to 2 {
            loop.for %rl1 = 0 to 2 {
              %c2 = arith.constant 2 : index
              %1 = arith.muli %t1, %c2 : index
              %c8 = arith.constant 8 : index
              %2 = arith.muli %j1, %c8 : index
              %3 = arith.addi %1, %2 : index
              %col = arith.addi %3, %rl1 : index
              %c15 = arith.constant 15 : index
              %in = arith.cmpi ult, %col, %c15 : index
              scf.if %in {
                %sum = loop.load %acc[%g1, %t1, %rh1, %j1, %rl1] : memref<8x4x2x2x2xf32>
                %4 = arith.truncf %sum : f32 to bf16
                loop.store %4, %out[(%g1 + (%rh1 * 8)), (((%t1 * 2) + (%j1 * 8)) + %rl1)] : memref<16x15xbf16>
              }
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {unroll = 0 : i64}
      } {llmopt.role = "epilogue", llmopt.layout = "mma"}
    }
  }
  func.return %0 : memref<16x15xbf16>
}
// CHECK-LABEL: func.func @odd
// CHECK-NOT:     tile.copy
// CHECK:         loop.store %{{.*}}, %out[
// NUM: vector-epilogue {{.*}} max abs 0.000e+00 {{.*}} ok
// CUDA-LABEL: void __launch_bounds__(32) odd_1(
// CUDA-NOT:     unsigned int*
// CUDA:         out[{{.*}}] = __float2bfloat16(

// -----

// A symbolic number of rows: the row guard's bound is the runtime length, the same for
// both columns of a pair.
func.func @rows(%x: memref<?x16xbf16> {llmopt.input = "x", llmopt.dynamic = ["seq"]}, %r: memref<?x16xbf16> {llmopt.input = "r", llmopt.dynamic = ["seq"]},
                %seq: index {llmopt.symbol = "seq", llmopt.max = 16}) -> memref<?x16xbf16> {
  %0 = memref.alloc(%seq) : memref<?x16xbf16>
  tile.kernel @rows grid [1, 1, 1] block [32, 1, 1] (%xx = %x : memref<?x16xbf16>, %rr = %r : memref<?x16xbf16>, %out = %0 : memref<?x16xbf16>, %n = %seq : index) {
    tile.forall (%b) in [1] over blocks {
      %acc = tile.alloc registers : memref<8x4x2x2x2xf32>
      tile.forall (%g, %t) in [8, 4] over block_threads {
        loop.for %rh = 0 to 2 {
          loop.for %j = 0 to 2 {
            loop.for %rl = 0 to 2 {
              %v = loop.load %xx[(%g + (%rh * 8)), (((%t * 2) + (%j * 8)) + %rl)] clamp : memref<?x16xbf16>
              %f = arith.extf %v : bf16 to f32
              loop.store %f, %acc[%g, %t, %rh, %j, %rl] : memref<8x4x2x2x2xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {unroll = 0 : i64}
      } {llmopt.role = "init", llmopt.layout = "mma"}
      tile.forall (%g1, %t1) in [8, 4] over block_threads {
        loop.for %rh1 = 0 to 2 {
          loop.for %j1 = 0 to 2 {
            loop.for %rl1 = 0 to 2 {
              %c8 = arith.constant 8 : index
              %1 = arith.muli %rh1, %c8 : index
              %row = arith.addi %g1, %1 : index
              %in = arith.cmpi ult, %row, %n : index
              scf.if %in {
                %sum = loop.load %acc[%g1, %t1, %rh1, %j1, %rl1] : memref<8x4x2x2x2xf32>
                %2 = arith.truncf %sum : f32 to bf16
                %3 = loop.load %rr[(%g1 + (%rh1 * 8)), (((%t1 * 2) + (%j1 * 8)) + %rl1)] : memref<?x16xbf16>
                %4 = arith.extf %2 : bf16 to f32
                %5 = arith.extf %3 : bf16 to f32
                %6 = arith.addf %4, %5 : f32
                %7 = arith.truncf %6 : f32 to bf16
                loop.store %7, %out[(%g1 + (%rh1 * 8)), (((%t1 * 2) + (%j1 * 8)) + %rl1)] : memref<?x16xbf16>
              }
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {unroll = 0 : i64}
      } {llmopt.role = "epilogue", llmopt.layout = "mma"}
    }
  }
  func.return %0 : memref<?x16xbf16>
}
// CHECK-LABEL: func.func @rows
// CHECK:           %[[IN:.*]] = arith.cmpi ult, %{{.*}}, %n : index
// CHECK-NEXT:      scf.if %[[IN]] {
// CHECK-NEXT:        tile.copy %rr[{{.*}}] to %pair[%g1, %t1, %rh1, %j1, 0] count 2
// CHECK:             tile.copy %pair_1[%g1, %t1, %rh1, %j1, 0] to %out[{{.*}}] count 2
// NUM: vector-epilogue {{.*}} max abs 0.000e+00 {{.*}} ok
// CUDA-LABEL: void __launch_bounds__(32) rows_1(
// CUDA:         ((unsigned int*)&out[{{.*}}])[0] = ((unsigned int*)&pair1[{{.*}}])[0];
