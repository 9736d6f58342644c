// RUN: llm-opt %s -p 'flash-attention{splits=4 bn=16}' | filecheck %s
// RUN: llm-opt %s -p 'flash-attention{splits=4 bn=16 group_heads=false}' | filecheck %s --check-prefix=ALONE
// RUN: llm-opt %s -p 'flash-attention{splits=4 bn=16},loop-to-tile,async-copy,pad-shared,mma-fragments,vector-fragments,tile-to-kernel' --check-numerics --check-numerics-lengths 6 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'flash-attention{splits=4 bn=16},loop-to-tile,async-copy{sink=true}' | filecheck %s --check-prefix=ORDER
// RUN: llm-opt %s -p 'flash-attention{splits=4 bn=16},loop-to-tile,async-copy' | filecheck %s --check-prefix=NOSINK
// RUN: llm-opt %s -p 'flash-attention{group_heads=false},loop-to-tile,async-copy,pad-shared,mma-fragments,vector-fragments,tile-to-kernel' --check-numerics --check-numerics-lengths 3 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'flash-attention,loop-to-tile,async-copy,pad-shared,mma-fragments,vector-fragments,tile-to-kernel' --check-numerics --check-numerics-lengths 3 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// A decode step's attention (one query a head, GQA: 4 query heads on 2 key/value heads, a
// cache of runtime length %ctx, as a decode step is captured and fused at Loop IR): one
// flash kernel whose last grid dimension splits the key blocks four ways (each split its
// share of ceildiv(%ctx, 16) blocks, none for a split past the end), its unnormalised
// partial results in three buffers, then the output kernel's merge of the splits with their
// log-sum-exp weights. The two query heads of a key/value head are the rows of one block
// (rows G·b1 + ii, the rest clamped and stored nowhere), so each block reads its
// key/value head's keys once for both; with group_heads=false a block takes one query head
// (one of its 16 rows used) and reads the keys at (b1 floordiv 2). Without the option the
// split count is chosen.

// async-copy{sink=true} issues the first key and value blocks' copies before the queries
// are staged, whose loads then overlap them (ORDER); by default the queries come first
// (NOSINK).
// ORDER:        } {unroll = 0 : i64, llmopt.role = "prologue"}
// ORDER-NEXT:   tile.forall (%ii, %dd) in [16, 16] over block_threads {
// ORDER-NEXT:     loop.load %{{.*}}[0, ((%b1 * 2) + %ii), (%qb * 16), %dd] clamp
// ORDER-NEXT:     loop.store
// ORDER-NEXT:   } {llmopt.role = "stage"}
// ORDER-NEXT:   scf.for %kb =
// NOSINK:       } {llmopt.role = "stage"}
// NOSINK:       llmopt.role = "prologue"}
// NOSINK-NEXT:  scf.for %kb =

// CHECK:      %acc_part = memref.alloc() : memref<4x1x4x1x16xf32>
// CHECK-NEXT: %m_part = memref.alloc() : memref<4x1x4x1xf32>
// CHECK-NEXT: %l_part = memref.alloc() : memref<4x1x4x1xf32>
// CHECK-NEXT: tile.kernel @index_map_109 grid [8, 1, 1] block [64, 1, 1]
// CHECK:      tile.forall (%b0, %b1, %qb, %split) in [1, 2, 1, 4] over blocks {
// CHECK:        loop.load %{{.*}}[0, ((%b1 * 2) + %ii), (%qb * 16), %dd] clamp
// CHECK:        %[[NKB:.*]] = arith.ceildivui %ctx_1, %{{.*}} : index
// CHECK:        %[[PER:.*]] = arith.ceildivui %[[NKB]], %{{.*}} : index
// CHECK-NEXT:   %first_kb = arith.muli %split, %[[PER]] : index
// CHECK-NEXT:   %[[FIRST:.*]] = arith.minui %first_kb, %[[NKB]] : index
// CHECK-NEXT:   %[[LEFT:.*]] = arith.subi %[[NKB]], %[[FIRST]] : index
// CHECK-NEXT:   %[[SHARE:.*]] = arith.minui %[[PER]], %[[LEFT]] : index
// CHECK-NEXT:   %[[MOST:.*]] = arith.constant 5 : index
// CHECK-NEXT:   %n_kb_split = arith.minui %[[SHARE]], %[[MOST]] : index
// CHECK:        scf.for %kb = %{{.*}} to %n_kb_split step
// CHECK:          loop.load %{{.*}}[(((%first_kb * 16) + (%kb * 16)) + %jj), %b1, %dd_1] clamp
// CHECK:        %[[IN:.*]] = arith.cmpi ult, %{{[0-9]+}}, %{{[0-9]+}} : index
// CHECK-NEXT:   scf.if %[[IN]] {
// CHECK-NEXT:     loop.store %{{.*}}, %acc_part_1[%split, 0, (((((%b1 * 2) +
// CHECK:          loop.store %{{.*}}, %m_part_1[%split, 0, ((%b1 * 2) + %r{{.*}}), (%qb * 16)]
// CHECK-NEXT:     loop.store %{{.*}}, %l_part_1[%split, 0, ((%b1 * 2) + %r{{.*}}), (%qb * 16)]
// CHECK:      loop.kernel @index_map_109_merge (%1 = %0 : memref<1x1x64xf32>, %2 = %acc_part : {{.*}}, %3 = %m_part : {{.*}}, %4 = %l_part : {{.*}}) {
// CHECK:        %[[M:.*]] = loop.reduce max %s = 0 to 4 : f32 {
// CHECK-NEXT:     loop.load %3[%s, 0, (%i2 floordiv 16), 0]
// CHECK:        %[[SHIFT:.*]] = arith.select %{{.*}}, %{{.*}}, %[[M]] : f32
// CHECK-NEXT:   %[[L:.*]] = loop.reduce add %s_1 = 0 to 4 : f32 {
// CHECK:          arith.subf %{{.*}}, %[[SHIFT]] : f32
// CHECK:          loop.load %4[%s_1, 0, (%i2 floordiv 16), 0]
// CHECK:        %[[A:.*]] = loop.reduce add %s_2 = 0 to 4 : f32 {
// CHECK:          loop.load %2[%s_2, 0, (%i2 floordiv 16), 0, (%i2 mod 16)]
// CHECK:        %[[O:.*]] = arith.divf %[[A]], %[[L]] : f32
// CHECK-NEXT:   loop.store %[[O]], %1[%i0, %i1, %i2] : memref<1x1x64xf32>

// ALONE:      tile.kernel @index_map_109 grid [16, 1, 1] block [64, 1, 1]
// ALONE:      tile.forall (%b0, %b1, %qb, %split) in [1, 4, 1, 4] over blocks {
// ALONE:        loop.load %{{.*}}[0, %b1, ((%qb * 16) + %ii), %dd] clamp
// ALONE:        scf.for %kb = %{{.*}} to %n_kb_split step
// ALONE:          loop.load %{{.*}}[(((%first_kb * 16) + (%kb * 16)) + %jj), (%b1 floordiv 2), %dd_1] clamp
// ALONE:        loop.store %{{.*}}, %acc_part_1[%split, 0, %b1,
// ALONE:        loop.store %{{.*}}, %m_part_1[%split, 0, %b1, ((%qb * 16) + %r{{.*}})]

// NUM-COUNT-7: ok
// NUM-NOT: FAIL

builtin.module {
  func.func @decode(%q: memref<1x4x1x16xf32> {llmopt.input = "q"}, %cache_k: memref<?x2x16xf32> {llmopt.input = "k", llmopt.dynamic = ["ctx"]}, %cache_v: memref<?x2x16xf32> {llmopt.input = "v", llmopt.dynamic = ["ctx"]}, %ctx: index {llmopt.symbol = "ctx", llmopt.max = 300 : i64}) -> memref<1x1x64xf32> {
    %13 = memref.alloc(%ctx) : memref<1x4x1x?x1xf32>
    loop.kernel @reduce_94 (%14 = %13 : memref<1x4x1x?x1xf32>, %ctx_1 = %ctx : index, %15 = %q : memref<1x4x1x16xf32>, %16 = %cache_k : memref<?x2x16xf32>) {
      loop.for %i0 = 0 to 1 {
        loop.for %i1 = 0 to 4 {
          loop.for %i2 = 0 to 1 {
            loop.for %i3 = 0 to %ctx_1 max 300 {
              %17 = loop.reduce add %r = 0 to 16 : f32 {
                %18 = loop.load %15[%i0, %i1, %i2, %r] : memref<1x4x1x16xf32>
                %19 = loop.load %16[%i3, (%i1 floordiv 2), %r] : memref<?x2x16xf32>
                %20 = arith.mulf %18, %19 : f32
                loop.yield %20 : f32
              }
              loop.store %17, %14[%i0, %i1, %i2, %i3, 0] : memref<1x4x1x?x1xf32>
            }
          }
        }
      }
    }
    %14 = memref.alloc(%ctx) : memref<1x4x1x?xf32>
    loop.kernel @elementwise_99 (%15 = %14 : memref<1x4x1x?xf32>, %ctx_1 = %ctx : index, %16 = %13 : memref<1x4x1x?x1xf32>) {
      %17 = arith.constant 2.500000e-01 : f32
      loop.for %i0 = 0 to 1 {
        loop.for %i1 = 0 to 4 {
          %18 = loop.reduce max %r = 0 to %ctx_1 max 300 : f32 {
            %19 = loop.load %16[0, %i1, 0, %r, 0] : memref<1x4x1x?x1xf32>
            %20 = arith.mulf %19, %17 : f32
            loop.yield %20 : f32
          }
          loop.for %i2 = 0 to 1 {
            loop.for %i3 = 0 to %ctx_1 max 300 {
              %21 = loop.load %16[0, %i1, 0, %i3, 0] : memref<1x4x1x?x1xf32>
              %22 = arith.mulf %21, %17 : f32
              %23 = arith.subf %22, %18 : f32
              %24 = math.exp %23 : f32
              loop.store %24, %15[%i0, %i1, %i2, %i3] : memref<1x4x1x?xf32>
            }
          }
        }
      }
    }
    %15 = memref.alloc() : memref<1x4x1x1xf32>
    loop.kernel @reduce_100 (%16 = %14 : memref<1x4x1x?xf32>, %17 = %15 : memref<1x4x1x1xf32>, %ctx_1 = %ctx : index) {
      loop.for %i0 = 0 to 1 {
        loop.for %i1 = 0 to 4 {
          loop.for %i2 = 0 to 1 {
            %18 = loop.reduce add %r = 0 to %ctx_1 max 300 : f32 {
              %19 = loop.load %16[%i0, %i1, %i2, %r] : memref<1x4x1x?xf32>
              loop.yield %19 : f32
            }
            loop.store %18, %17[%i0, %i1, %i2, 0] : memref<1x4x1x1xf32>
          }
        }
      }
    }
    %16 = memref.alloc() : memref<1x1x64xf32>
    loop.kernel @index_map_109 (%17 = %16 : memref<1x1x64xf32>, %ctx_1 = %ctx : index, %18 = %14 : memref<1x4x1x?xf32>, %19 = %15 : memref<1x4x1x1xf32>, %20 = %cache_v : memref<?x2x16xf32>) {
      loop.for %i0 = 0 to 1 {
        loop.for %i1 = 0 to 1 {
          loop.for %i2 = 0 to 64 {
            %21 = loop.load %19[0, (%i2 floordiv 16), 0, 0] : memref<1x4x1x1xf32>
            %22 = loop.reduce add %r = 0 to %ctx_1 max 300 : f32 {
              %23 = loop.load %18[0, (%i2 floordiv 16), 0, %r] : memref<1x4x1x?xf32>
              %24 = loop.load %20[%r, ((%i2 floordiv 16) floordiv 2), (%i2 mod 16)] : memref<?x2x16xf32>
              %25 = arith.mulf %23, %24 : f32
              loop.yield %25 : f32
            }
            %26 = arith.divf %22, %21 : f32
            loop.store %26, %17[%i0, %i1, %i2] : memref<1x1x64xf32>
          }
        }
      }
    }
    func.return %16 : memref<1x1x64xf32>
  }
}
