// RUN: llm-opt %s -p 'flash-attention{bm=16 bn=16}' | filecheck %s
// RUN: llm-opt %s -p 'flash-attention{bm=16 bn=16},loop-to-tile,async-copy,pad-shared,mma-fragments,vector-fragments,tile-to-kernel' --check-numerics --check-numerics-lengths 4 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'flash-attention{bm=16 bn=16 tensor_cores=false},loop-to-tile,async-copy,pad-shared,mma-fragments,vector-fragments,tile-to-kernel' --check-numerics --check-numerics-lengths 4 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'flash-attention{bm=16 bn=16},loop-to-tile,async-copy' | filecheck %s --check-prefix=ASYNC
// Causal GQA attention over a symbolic length (captured from sdpa(is_causal=True,
// enable_gqa=True) at Loop IR): one flash kernel whose query blocks (ceildiv(%n, 16), the
// heaviest first), grid (computed from the length before the launch) and key-block loop
// (to the diagonal's block, at most ceildiv(%n, 16)) follow the length; keys from %n on are
// masked and rows from %n on stored nowhere. async-copy pipelines the key-block loop as a
// static causal one: its trip count is a runtime value, at most ceildiv(40, 16) = 3 key
// blocks by the length's declared maximum (which caps the slots at the blocks there can be),
// and its counters are carried (ASYNC).

builtin.module {
    func.func @forward(%q: memref<1x4x?x16xf32> {llmopt.input = "q", llmopt.dynamic = ["seq"]}, %k: memref<1x2x?x16xf32> {llmopt.input = "k", llmopt.dynamic = ["seq"]}, %v: memref<1x2x?x16xf32> {llmopt.input = "v", llmopt.dynamic = ["seq"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 40 : i64}) -> memref<1x4x?x16xf32> {
      %0 = memref.alloc(%seq, %seq) : memref<1x4x?x?x1xf32>
      loop.kernel @reduce_3 (%1 = %0 : memref<1x4x?x?x1xf32>, %seq_1 = %seq : index, %2 = %k : memref<1x2x?x16xf32>, %3 = %q : memref<1x4x?x16xf32>) {
        loop.for %i0 = 0 to 1 {
          loop.for %i1 = 0 to 4 {
            loop.for %i2 = 0 to %seq_1 max 40 {
              loop.for %i3 = 0 to %seq_1 max 40 {
                %4 = loop.reduce add %r = 0 to 16 : f32 {
                  %5 = loop.load %3[%i0, %i1, %i2, %r] : memref<1x4x?x16xf32>
                  %6 = loop.load %2[%i0, (%i1 floordiv 2), %i3, %r] : memref<1x2x?x16xf32>
                  %7 = arith.mulf %5, %6 : f32
                  loop.yield %7 : f32
                }
                loop.store %4, %1[%i0, %i1, %i2, %i3, 0] : memref<1x4x?x?x1xf32>
              }
            }
          }
        }
      }
      %1 = memref.alloc(%seq, %seq) : memref<1x4x?x?xf32>
      loop.kernel @elementwise_11 (%2 = %1 : memref<1x4x?x?xf32>, %seq_1 = %seq : index, %3 = %0 : memref<1x4x?x?x1xf32>) {
        %4 = arith.constant 2.500000e-01 : f32
        %5 = arith.constant 0xff800000 : f32
        loop.for %i0 = 0 to 1 {
          loop.for %i1 = 0 to 4 {
            loop.for %i2 = 0 to %seq_1 max 40 {
              %6 = loop.reduce max %r = 0 to %seq_1 max 40 : f32 {
                %7 = loop.load %3[0, %i1, %i2, %r, 0] : memref<1x4x?x?x1xf32>
                %8 = arith.mulf %7, %4 : f32
                %9 = arith.cmpi sle, %r, %i2 : index
                %10 = arith.select %9, %8, %5 : f32
                loop.yield %10 : f32
              }
              %11 = loop.reduce add %r_1 = 0 to %seq_1 max 40 : f32 {
                %12 = loop.load %3[0, %i1, %i2, %r_1, 0] : memref<1x4x?x?x1xf32>
                %13 = arith.mulf %12, %4 : f32
                %14 = arith.cmpi sle, %r_1, %i2 : index
                %15 = arith.select %14, %13, %5 : f32
                %16 = arith.subf %15, %6 : f32
                %17 = math.exp %16 : f32
                loop.yield %17 : f32
              }
              loop.for %i3 = 0 to %seq_1 max 40 {
                %18 = loop.load %3[0, %i1, %i2, %i3, 0] : memref<1x4x?x?x1xf32>
                %19 = arith.mulf %18, %4 : f32
                %20 = arith.cmpi sle, %i3, %i2 : index
                %21 = arith.select %20, %19, %5 : f32
                %22 = arith.subf %21, %6 : f32
                %23 = math.exp %22 : f32
                %24 = arith.divf %23, %11 : f32
                loop.store %24, %2[%i0, %i1, %i2, %i3] : memref<1x4x?x?xf32>
              }
            }
          }
        }
      }
      %2 = memref.alloc(%seq) : memref<1x4x?x16xf32>
      loop.kernel @index_map_16 (%3 = %2 : memref<1x4x?x16xf32>, %seq_1 = %seq : index, %4 = %v : memref<1x2x?x16xf32>, %5 = %1 : memref<1x4x?x?xf32>) {
        loop.for %i0 = 0 to 1 {
          loop.for %i1 = 0 to 4 {
            loop.for %i2 = 0 to %seq_1 max 40 {
              loop.for %i3 = 0 to 16 {
                %6 = loop.reduce add %r = 0 to %seq_1 max 40 : f32 {
                  %7 = loop.load %5[0, %i1, %i2, %r] : memref<1x4x?x?xf32>
                  %8 = loop.load %4[0, (%i1 floordiv 2), %r, %i3] : memref<1x2x?x16xf32>
                  %9 = arith.mulf %7, %8 : f32
                  loop.yield %9 : f32
                }
                loop.store %6, %3[%i0, %i1, %i2, %i3] : memref<1x4x?x16xf32>
              }
            }
          }
        }
      }
      func.return %2 : memref<1x4x?x16xf32>
    }
  }
// CHECK:      %[[C16:.*]] = arith.constant 16 : index
// CHECK-NEXT: %[[QB:.*]] = arith.ceildivui %seq, %[[C16]] : index
// CHECK-NEXT: %[[HEADS:.*]] = arith.constant 4 : index
// CHECK-NEXT: %grid = arith.muli %[[QB]], %[[HEADS]] : index
// CHECK-NEXT: tile.kernel @index_map_16 grid [%grid max 12, 1, 1] block [64, 1, 1] (%[[N:[^ ]*]] = %seq : index,
// CHECK:        %[[NQB:.*]] = arith.ceildivui %[[N]], %{{.*}} : index
// CHECK-NEXT:   tile.forall (%qr, %b0, %b1) in [%[[NQB]] max 3, 1, 4] over blocks {
// CHECK:          %[[NKB:.*]] = arith.ceildivui %[[N]], %{{.*}} : index
// CHECK:          %[[UB:.*]] = arith.minui %{{.*}}, %[[NKB]] : index
// CHECK:          scf.for %kb = %{{.*}} to %[[UB]] step %{{.*}} {
// A key block reaching past the diagonal or to the length (%n ≤ its last key) masks the
// causal half and the keys from %n on; the others take the scale alone.
// CHECK:            %[[AFTER:.*]] = arith.cmpi ult, %{{.*}}, %[[LAST:.*]] : index
// CHECK-NEXT:       %[[OUT:.*]] = arith.cmpi ule, %[[N]], %[[LAST]] : index
// CHECK-NEXT:       %[[SOME:.*]] = arith.ori %[[AFTER]], %[[OUT]] : i1
// CHECK-NEXT:       scf.if %[[SOME]] {
// CHECK:              arith.cmpi ult, %{{.*}}, %[[N]] : index
// CHECK:              arith.select
// CHECK:            } else {
// CHECK:          } {llmopt.role = "key_blocks"}
// CHECK:              %[[IN:.*]] = arith.cmpi ult, %{{.*}}, %[[N]] : index
// CHECK-NEXT:         scf.if %[[IN]] {
// CHECK:        } {llmopt.flash = "16x16", llmopt.schedule = {carry = 1 : i64, min_blocks = 2 : i64}}
// CHECK-NOT:  loop.kernel

// NUM: flash-attention {{.*}} ok
// NUM: tile-to-kernel {{.*}} ok

// ASYNC:      tile.async_copy %{{.*}} clamp to %ks[%p, {{.*}} : memref<1x2x?x16xf32> to memref<3x16x16xf32>
// ASYNC:      tile.async_commit
// ASYNC:      scf.for %kb = {{.*}} iter_args(%slot = {{.*}}, %fill_slot = {{.*}}, %fetch = {{.*}})
// ASYNC-NEXT:   tile.async_wait 1
// ASYNC:        tile.async_copy %{{.*}}[0, (%b1 floordiv 2), ((%fetch * 16) + {{.*}} clamp to %ks[%fill_slot
// ASYNC:        tile.async_copy %{{.*}}[0, (%b1 floordiv 2), ((%fetch * 16) + {{.*}} clamp to %vs[%fill_slot
// ASYNC:      } {llmopt.role = "key_blocks", llmopt.prefetch = "async3"}
