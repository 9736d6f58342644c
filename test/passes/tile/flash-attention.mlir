// RUN: llm-opt %s --split-input-file -p 'flash-attention{bm=16 bn=16}' | filecheck %s
// RUN: llm-opt %s --split-input-file -p 'flash-attention{bm=16 bn=16},loop-to-tile,async-copy,pad-shared,mma-fragments,vector-fragments,tile-to-kernel' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p 'flash-attention{bm=16 bn=16 tensor_cores=false},loop-to-tile,async-copy,pad-shared,mma-fragments,vector-fragments,tile-to-kernel' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s --split-input-file -p 'flash-attention{bm=16 bn=16},async-copy,pad-shared,mma-fragments' | filecheck %s --check-prefix=SCHED
// RUN: llm-opt %s --split-input-file -p 'flash-attention{bm=16 bn=16 tensor_cores=false}' | filecheck %s --check-prefix=FMA
// RUN: llm-opt %s --split-input-file -p 'flash-attention{bm=16 bn=16 stages=2}' | filecheck %s --check-prefix=STAGES
// Attention as fuse-kernels and hoist-reduce-factors leave it (scores, max and exp, sums,
// P·V divided by the sums) becomes one kernel with an online softmax, its two products
// register tiles in the tensor-core layout of register-tile{blocked=3} and its loop over key
// blocks a staged loop: the schedule passes then put the products on the tensor cores and
// fill the K and V tiles with cp.async.

// Causal, two query heads on one KV head, the output with its heads concatenated: the loop
// over key blocks stops at the diagonal's (min of the block count and qb·16+31 floordiv 16).
// A 16 x 16 score tile and a 16 x 16 output tile: two warps of 16 x 8 outputs.
// CHECK:      tile.kernel @{{[a-z_0-9]+}} grid [4, 1, 1] block [64, 1, 1]
// The heaviest query blocks (qb = 1 - qr) are dealt out first.
// CHECK:        tile.forall (%qr, %b0, %b1) in [2, 1, 2] over blocks {
// CHECK-NEXT:     %[[LAST:.*]] = arith.constant 1 : index
// CHECK-NEXT:     %qb = arith.subi %[[LAST]], %qr : index
// Rows of Q, K and the scores padded to 4 mod 32 words, of V (read transposed) to 8.
// CHECK:          %qs = tile.alloc shared {llmopt.pad = 4 : i64} : memref<16x16xf32>
// CHECK-NEXT:     %ks = tile.alloc shared {llmopt.pad = 4 : i64} : memref<16x16xf32>
// CHECK-NEXT:     %vs = tile.alloc shared {llmopt.pad = 8 : i64} : memref<16x16xf32>
// CHECK-NEXT:     %ps = tile.alloc shared {llmopt.pad = 4 : i64} : memref<16x16xf32>
// CHECK:          %s = tile.alloc registers : memref<1x2x8x4x1x2x1x2xf32>
// CHECK-NEXT:     %acc = tile.alloc registers : memref<1x2x8x4x1x2x1x2xf32>
// CHECK:          %[[UB:.*]] = arith.minui
// The loop over key blocks starts with the fills of K and V, then only reads them.
// CHECK:          scf.for %kb = %{{.*}} to %[[UB]] step
// CHECK-NEXT:       tile.forall (%jj, %dd_1) in [16, 16] over block_threads {
// CHECK-NEXT:         %[[KV:.*]] = loop.load %1[0, 0, ((%kb * 16) + %jj), %dd_1] : memref<1x1x32x16xf32>
// CHECK-NEXT:         loop.store %[[KV]], %ks[%jj, %dd_1] : memref<16x16xf32>
// CHECK-NEXT:       } {llmopt.role = "stage"}
// CHECK-NEXT:       tile.forall
// CHECK-NEXT:         loop.load %4
// CHECK-NEXT:         loop.store %{{.*}}, %vs
// CHECK-NEXT:       } {llmopt.role = "stage"}
// Q·Kᵀ: per warp (wi, wj) and lane 4g + t, rows g + 8·rh and columns 2t + rl of 16 x 8
// fragments, what mma-fragments matches.
// CHECK:            scf.for %kk = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:         tile.forall (%[[WI:.*]], %[[WJ:.*]], %[[G:.*]], %[[T:.*]]) in [1, 2, 8, 4] over block_threads {
// CHECK:                        %[[Q:.*]] = loop.load %qs[(((({{.*}}[[WI]] * 16) + %[[G]]) + (%{{.*}} * 16)) + (%{{.*}} * 8)), %kk]
// CHECK-NEXT:                   %[[K:.*]] = loop.load %ks[(((({{.*}}[[WJ]] * 8) + (%[[T]] * 2)) + (%{{.*}} * 8)) + %{{.*}}), %kk]
// CHECK-NEXT:                   %[[QK:.*]] = arith.mulf %[[Q]], %[[K]] : f32
// CHECK-NEXT:                   %[[S0:.*]] = loop.load %s[%[[WI]], %[[WJ]], %[[G]], %[[T]],
// CHECK-NEXT:                   %[[S1:.*]] = arith.addf %[[S0]], %[[QK]] : f32
// CHECK-NEXT:                   loop.store %[[S1]], %s[%[[WI]], %[[WJ]], %[[G]], %[[T]],
// CHECK:              } {llmopt.role = "update", llmopt.layout = "mma"}
// CHECK-NEXT:       } {llmopt.role = "k_loop", unroll = 8 : i64}
// A key block whose last key comes after the block's first query (qb·16 < kb·16 + 15) may
// have masked scores: it takes the scale and the causal mask of the matched softmax, at the
// tile's coordinates. The others take the scale alone.
// CHECK:            %[[LAST_K:.*]] = arith.addi %{{.*}}, %{{.*}} : index
// CHECK:            %[[FIRST_Q:.*]] = arith.addi %{{.*}}, %{{.*}} : index
// CHECK-NEXT:       %[[SOME:.*]] = arith.cmpi ult, %[[FIRST_Q]], %[[LAST_K]] : index
// CHECK-NEXT:       scf.if %[[SOME]] {
// CHECK:                    arith.cmpi sle
// CHECK:                    arith.select
// CHECK:              } {llmopt.role = "scores", llmopt.layout = "mma"}
// CHECK-NEXT:       } else {
// CHECK-NEXT:         tile.forall
// CHECK-NOT:            arith.cmpi
// CHECK-NOT:            arith.select
// CHECK:                arith.mulf
// CHECK-NOT:            arith.select
// CHECK:              } {llmopt.role = "scores", llmopt.layout = "mma"}
// CHECK:            {llmopt.role = "row_max"}
// CHECK:            {llmopt.role = "exp"}
// CHECK:            {llmopt.role = "row_sum"}
// CHECK:            {llmopt.role = "rescale", llmopt.layout = "mma"}
// P·V: the probabilities as rows, V read transposed (its key index first).
// CHECK:            scf.for %jj_2 = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:                        %[[P:.*]] = loop.load %ps[{{.*}}, %jj_2]
// CHECK-NEXT:                   %[[V:.*]] = loop.load %vs[%jj_2, {{.*}}]
// CHECK-NEXT:                   arith.mulf %[[P]], %[[V]] : f32
// CHECK:            } {llmopt.role = "k_loop", unroll = 8 : i64}
// CHECK:          } {llmopt.role = "key_blocks"}
// CHECK:          loop.store %{{.*}}, %{{.*}}[0, (((((%qb * 16) + (%wi_{{[0-9]+}} * 16)) + %g_{{[0-9]+}}) + (%i_{{[0-9]+}} * 16)) + (%rh_{{[0-9]+}} * 8)), (((((%b1 * 16) + (%wj_{{[0-9]+}} * 8)) + (%t_{{[0-9]+}} * 2)) + (%j_{{[0-9]+}} * 8)) + %rl_{{[0-9]+}})]
// CHECK:      } {llmopt.flash = "16x16", llmopt.schedule = {carry = 1 : i64, min_blocks = 2 : i64}}
// CHECK-NOT:  loop.kernel
// NUM: flash-attention {{.*}} ok
// NUM: async-copy {{.*}} ok
// NUM: mma-fragments {{.*}} ok
// NUM: tile-to-kernel {{.*}} ok

// Scheduled: K and V in three slots each, filled by cp.async two key blocks ahead; the
// chunk fetched wraps at the diagonal's bound (the loop's trip count is a value, so the
// counters are carried); both products are three TF32 mma.sync per 16 x 8 x 8 step.
// SCHED-LABEL: func.func @forward_causal
// SCHED:         %ks = tile.alloc shared : memref<3x16x20xf32>
// SCHED-NEXT:    %vs = tile.alloc shared : memref<3x16x24xf32>
// SCHED:         %[[UB:.*]] = arith.minui
// SCHED:         scf.for %p =
// SCHED:           tile.async_copy %1[0, 0, ((%p * 16) + %{{.*}}), (%{{.*}} * 4)] to %ks[%p, {{.*}} count 4
// SCHED:         scf.for %kb = %{{.*}} to %[[UB]] step %{{.*}} iter_args(%slot = %{{.*}}, %fill_slot = %{{.*}}, %fetch = %{{.*}})
// SCHED-NEXT:      tile.async_wait 1
// SCHED-NEXT:      kernel.barrier
// SCHED:             tile.async_copy %1[0, 0, ((%fetch * 16) + {{.*}} to %ks[%fill_slot,
// SCHED:             tile.async_copy %4[0, 0, ((%fetch * 16) + {{.*}} to %vs[%fill_slot,
// SCHED:           tile.async_commit
// SCHED-COUNT-3:   mma.sync
// SCHED:           loop.load %vs[%slot,
// SCHED-COUNT-3:   mma.sync
// SCHED:           %[[NEXT:.*]] = arith.addi %fetch, %{{.*}} : index
// SCHED-NEXT:      %[[IN:.*]] = arith.cmpi slt, %[[NEXT]], %[[UB]] : index
// SCHED-NEXT:      %[[FETCH:.*]] = arith.select %[[IN]], %[[NEXT]], %{{.*}} : index
// SCHED-NEXT:      scf.yield %{{.*}}, %{{.*}}, %[[FETCH]] : index, index, index
// SCHED-NEXT:    } {llmopt.role = "key_blocks", llmopt.prefetch = "async3"}
// SCHED-NEXT:    tile.async_wait 0

// Without tensor cores the same threads take the products as multiply-adds: nothing marks
// them for mma-fragments.
// FMA-NOT:     llmopt.layout
// FMA:         {llmopt.flash = "16x16", llmopt.schedule = {carry = 1 : i64, min_blocks = 2 : i64}}
// FMA-NOT:     llmopt.layout

// The stages option is the kernel's schedule knob, for async-copy.
// STAGES:      {llmopt.flash = "16x16", llmopt.schedule = {carry = 1 : i64, stages = 2 : i64, min_blocks = 2 : i64}}
func.func @forward_causal(%q: memref<1x2x32x16xf32> {llmopt.input = "q"}, %k: memref<1x1x32x16xf32> {llmopt.input = "k"}, %v: memref<1x1x32x16xf32> {llmopt.input = "v"}) -> memref<1x32x32xf32> {
  %0 = memref.alloc() : memref<1x2x32x32x1xf32>
  loop.kernel @reduce_3 (%1 = %0 : memref<1x2x32x32x1xf32>, %2 = %k : memref<1x1x32x16xf32>, %3 = %q : memref<1x2x32x16xf32>) {
    loop.for %i0 = 0 to 1 {
      loop.for %i1 = 0 to 2 {
        loop.for %i2 = 0 to 32 {
          loop.for %i3 = 0 to 32 {
            %4 = loop.reduce add %r = 0 to 16 : f32 {
              %5 = loop.load %3[%i0, %i1, %i2, %r] : memref<1x2x32x16xf32>
              %6 = loop.load %2[%i0, (%i1 floordiv 2), %i3, %r] : memref<1x1x32x16xf32>
              %7 = arith.mulf %5, %6 : f32
              loop.yield %7 : f32
            }
            loop.store %4, %1[%i0, %i1, %i2, %i3, 0] : memref<1x2x32x32x1xf32>
          }
        }
      }
    }
  }
  %1 = memref.alloc() : memref<1x2x32x32xf32>
  loop.kernel @elementwise_8 (%2 = %1 : memref<1x2x32x32xf32>, %3 = %0 : memref<1x2x32x32x1xf32>) {
    %4 = arith.constant 2.500000e-01 : f32
    %5 = arith.constant 0xff800000 : f32
    loop.for %i0 = 0 to 1 {
      loop.for %i1 = 0 to 2 {
        loop.for %i2 = 0 to 32 {
          %6 = loop.reduce max %r = 0 to 32 : f32 {
            %7 = loop.load %3[0, %i1, %i2, %r, 0] : memref<1x2x32x32x1xf32>
            %8 = arith.mulf %7, %4 : f32
            %9 = arith.cmpi sle, %r, %i2 : index
            %10 = arith.select %9, %8, %5 : f32
            loop.yield %10 : f32
          }
          loop.for %i3 = 0 to 32 {
            %11 = loop.load %3[0, %i1, %i2, %i3, 0] : memref<1x2x32x32x1xf32>
            %12 = arith.mulf %11, %4 : f32
            %13 = arith.cmpi sle, %i3, %i2 : index
            %14 = arith.select %13, %12, %5 : f32
            %15 = arith.subf %14, %6 : f32
            %16 = math.exp %15 : f32
            loop.store %16, %2[%i0, %i1, %i2, %i3] : memref<1x2x32x32xf32>
          }
        }
      }
    }
  }
  %2 = memref.alloc() : memref<1x2x32x1xf32>
  loop.kernel @reduce_9 (%3 = %1 : memref<1x2x32x32xf32>, %4 = %2 : memref<1x2x32x1xf32>) {
    loop.for %i0 = 0 to 1 {
      loop.for %i1 = 0 to 2 {
        loop.for %i2 = 0 to 32 {
          %5 = loop.reduce add %r = 0 to 32 : f32 {
            %6 = loop.load %3[%i0, %i1, %i2, %r] : memref<1x2x32x32xf32>
            loop.yield %6 : f32
          }
          loop.store %5, %4[%i0, %i1, %i2, 0] : memref<1x2x32x1xf32>
        }
      }
    }
  }
  %3 = memref.alloc() : memref<1x32x32xf32>
  loop.kernel @index_map_18 (%4 = %3 : memref<1x32x32xf32>, %5 = %v : memref<1x1x32x16xf32>, %6 = %1 : memref<1x2x32x32xf32>, %7 = %2 : memref<1x2x32x1xf32>) {
    loop.for %i0 = 0 to 1 {
      loop.for %i1 = 0 to 32 {
        loop.for %i2 = 0 to 32 {
          %8 = loop.load %7[0, (%i2 floordiv 16), %i1, 0] : memref<1x2x32x1xf32>
          %9 = loop.reduce add %r = 0 to 32 : f32 {
            %10 = loop.load %6[0, (%i2 floordiv 16), %i1, %r] : memref<1x2x32x32xf32>
            %11 = loop.load %5[0, ((%i2 floordiv 16) floordiv 2), %r, (%i2 mod 16)] : memref<1x1x32x16xf32>
            %12 = arith.mulf %10, %11 : f32
            loop.yield %12 : f32
          }
          %13 = arith.divf %9, %8 : f32
          loop.store %13, %4[%i0, %i1, %i2] : memref<1x32x32xf32>
        }
      }
    }
  }
  func.return %3 : memref<1x32x32xf32>
}
// -----

// Without a mask fuse-kernels leaves softmax as one kernel that also takes the row sums and
// divides by them (three kernels, P·V a plain product): the flash kernel divides its
// accumulators by the running sum before P·V's epilogue, and visits every key block (the
// loop's bound is a constant).
// CHECK-LABEL: func.func @forward_plain
// CHECK:        tile.kernel @{{[a-z_0-9]+}} grid [4, 1, 1] block [64, 1, 1]
// CHECK-NOT:      arith.minui
// CHECK:          %[[N:.*]] = arith.constant 2 : index
// CHECK-NEXT:     %{{.*}} = arith.constant 0 : index
// CHECK-NEXT:     %{{.*}} = arith.constant 1 : index
// CHECK-NEXT:     scf.for %kb = %{{.*}} to %[[N]] step
// CHECK:          %sum = loop.load %acc
// CHECK-NEXT:     %[[L:.*]] = loop.load %l
// CHECK-NEXT:     arith.divf %sum, %[[L]] : f32
// CHECK:        } {llmopt.flash = "16x16", llmopt.schedule = {carry = 1 : i64, min_blocks = 2 : i64}}
// CHECK-NOT:    loop.kernel
// NUM: flash-attention {{.*}} ok
// NUM: async-copy {{.*}} ok
// NUM: mma-fragments {{.*}} ok
// NUM: tile-to-kernel {{.*}} ok
// A bound that is a constant: the chunk fetched wraps at it.
// SCHED-LABEL: func.func @forward_plain
// SCHED:         %ks = tile.alloc shared : memref<3x16x20xf32>
// SCHED:         scf.for %kb = {{.*}} iter_args
// SCHED:           arith.addi %fill_slot
// SCHED:           %[[TWO:.*]] = arith.constant 2 : index
// SCHED-NEXT:      %[[NEXT:.*]] = arith.addi %fetch, %{{.*}} : index
// SCHED-NEXT:      arith.cmpi slt, %[[NEXT]], %[[TWO]] : index
func.func @forward_plain(%q: memref<1x2x32x16xf32> {llmopt.input = "q"}, %k: memref<1x2x32x16xf32> {llmopt.input = "k"}, %v: memref<1x2x32x16xf32> {llmopt.input = "v"}) -> memref<1x2x32x16xf32> {
  %0 = memref.alloc() : memref<1x2x32x32x1xf32>
  loop.kernel @reduce_3 (%1 = %0 : memref<1x2x32x32x1xf32>, %2 = %k : memref<1x2x32x16xf32>, %3 = %q : memref<1x2x32x16xf32>) {
    loop.for %i0 = 0 to 1 {
      loop.for %i1 = 0 to 2 {
        loop.for %i2 = 0 to 32 {
          loop.for %i3 = 0 to 32 {
            %4 = loop.reduce add %r = 0 to 16 : f32 {
              %5 = loop.load %3[%i0, %i1, %i2, %r] : memref<1x2x32x16xf32>
              %6 = loop.load %2[%i0, %i1, %i3, %r] : memref<1x2x32x16xf32>
              %7 = arith.mulf %5, %6 : f32
              loop.yield %7 : f32
            }
            loop.store %4, %1[%i0, %i1, %i2, %i3, 0] : memref<1x2x32x32x1xf32>
          }
        }
      }
    }
  }
  %1 = memref.alloc() : memref<1x2x32x32xf32>
  loop.kernel @elementwise_11 (%2 = %1 : memref<1x2x32x32xf32>, %3 = %0 : memref<1x2x32x32x1xf32>) {
    %4 = arith.constant 2.500000e-01 : f32
    loop.for %i0 = 0 to 1 {
      loop.for %i1 = 0 to 2 {
        loop.for %i2 = 0 to 32 {
          %5 = loop.reduce max %r = 0 to 32 : f32 {
            %6 = loop.load %3[0, %i1, %i2, %r, 0] : memref<1x2x32x32x1xf32>
            %7 = arith.mulf %6, %4 : f32
            loop.yield %7 : f32
          }
          %8 = loop.reduce add %r_1 = 0 to 32 : f32 {
            %9 = loop.load %3[0, %i1, %i2, %r_1, 0] : memref<1x2x32x32x1xf32>
            %10 = arith.mulf %9, %4 : f32
            %11 = arith.subf %10, %5 : f32
            %12 = math.exp %11 : f32
            loop.yield %12 : f32
          }
          loop.for %i3 = 0 to 32 {
            %13 = loop.load %3[0, %i1, %i2, %i3, 0] : memref<1x2x32x32x1xf32>
            %14 = arith.mulf %13, %4 : f32
            %15 = arith.subf %14, %5 : f32
            %16 = math.exp %15 : f32
            %17 = arith.divf %16, %8 : f32
            loop.store %17, %2[%i0, %i1, %i2, %i3] : memref<1x2x32x32xf32>
          }
        }
      }
    }
  }
  %2 = memref.alloc() : memref<1x2x32x16xf32>
  loop.kernel @index_map_16 (%3 = %2 : memref<1x2x32x16xf32>, %4 = %v : memref<1x2x32x16xf32>, %5 = %1 : memref<1x2x32x32xf32>) {
    loop.for %i0 = 0 to 1 {
      loop.for %i1 = 0 to 2 {
        loop.for %i2 = 0 to 32 {
          loop.for %i3 = 0 to 16 {
            %6 = loop.reduce add %r = 0 to 32 : f32 {
              %7 = loop.load %5[0, %i1, %i2, %r] : memref<1x2x32x32xf32>
              %8 = loop.load %4[0, %i1, %r, %i3] : memref<1x2x32x16xf32>
              %9 = arith.mulf %7, %8 : f32
              loop.yield %9 : f32
            }
            loop.store %6, %3[%i0, %i1, %i2, %i3] : memref<1x2x32x16xf32>
          }
        }
      }
    }
  }
  func.return %2 : memref<1x2x32x16xf32>
}

// -----

// Causal with 20 queries and keys: no block size divides them. Two blocks of 16 cover the
// queries and the keys; the last of each overhangs them: its rows of Q, K and V are read
// clamped, its keys past 20 are masked to -inf after the causal mask, and its rows past 20
// store nothing.
// CHECK-LABEL: func.func @forward_odd
// CHECK-NOT:     loop.kernel
// CHECK:         tile.kernel @{{[a-z_0-9]+}} grid [4, 1, 1] block [64, 1, 1]
// CHECK:           tile.forall (%qr, %b0, %b1) in [2, 1, 2] over blocks {
// CHECK:             loop.load %2[0, %b1, ((%qb * 16) + %ii), %dd] clamp : memref<1x2x20x16xf32>
// CHECK:               loop.load %1[0, 0, ((%kb * 16) + %jj), %dd_1] clamp : memref<1x1x20x16xf32>
// CHECK:               loop.load %4[0, 0, ((%kb * 16) + %jj_1), %dd_2] clamp : memref<1x1x20x16xf32>
// CHECK:                   %[[CAUSAL:.*]] = arith.select %{{.*}}, %{{.*}}, %{{.*}} : f32
// CHECK-NEXT:              %[[KEYS:.*]] = arith.constant 20 : index
// CHECK-NEXT:              %[[NINF:.*]] = arith.constant 0xff800000 : f32
// CHECK-NEXT:              %[[IN:.*]] = arith.cmpi ult, %{{.*}}, %[[KEYS]] : index
// CHECK-NEXT:              arith.select %[[IN]], %[[CAUSAL]], %[[NINF]] : f32
// CHECK:           } {llmopt.role = "key_blocks"}
// CHECK:                 %[[ROWS:.*]] = arith.constant 20 : index
// CHECK-NEXT:            %[[ROW_IN:.*]] = arith.cmpi ult, %{{.*}}, %[[ROWS]] : index
// CHECK-NEXT:            scf.if %[[ROW_IN]] {
// CHECK-NOT:     loop.kernel
// NUM: flash-attention {{.*}} ok
// NUM: async-copy {{.*}} ok
// NUM: mma-fragments {{.*}} ok
// NUM: tile-to-kernel {{.*}} ok
// The K and V copies are clamped too: a copy past the last key reads the last key's row.
// SCHED-LABEL: func.func @forward_odd
// SCHED:         tile.async_copy %1[0, 0, ((%fetch * 16) + {{.*}} clamp to %ks
// SCHED:         tile.async_copy %4[0, 0, ((%fetch * 16) + {{.*}} clamp to %vs
func.func @forward_odd(%q: memref<1x2x20x16xf32> {llmopt.input = "q"}, %k: memref<1x1x20x16xf32> {llmopt.input = "k"}, %v: memref<1x1x20x16xf32> {llmopt.input = "v"}) -> memref<1x20x32xf32> {
  %0 = memref.alloc() : memref<1x2x20x20x1xf32>
  loop.kernel @reduce_3 (%1 = %0 : memref<1x2x20x20x1xf32>, %2 = %k : memref<1x1x20x16xf32>, %3 = %q : memref<1x2x20x16xf32>) {
    loop.for %i0 = 0 to 1 {
      loop.for %i1 = 0 to 2 {
        loop.for %i2 = 0 to 20 {
          loop.for %i3 = 0 to 20 {
            %4 = loop.reduce add %r = 0 to 16 : f32 {
              %5 = loop.load %3[%i0, %i1, %i2, %r] : memref<1x2x20x16xf32>
              %6 = loop.load %2[%i0, (%i1 floordiv 2), %i3, %r] : memref<1x1x20x16xf32>
              %7 = arith.mulf %5, %6 : f32
              loop.yield %7 : f32
            }
            loop.store %4, %1[%i0, %i1, %i2, %i3, 0] : memref<1x2x20x20x1xf32>
          }
        }
      }
    }
  }
  %1 = memref.alloc() : memref<1x2x20x20xf32>
  loop.kernel @elementwise_8 (%2 = %1 : memref<1x2x20x20xf32>, %3 = %0 : memref<1x2x20x20x1xf32>) {
    %4 = arith.constant 2.500000e-01 : f32
    %5 = arith.constant 0xff800000 : f32
    loop.for %i0 = 0 to 1 {
      loop.for %i1 = 0 to 2 {
        loop.for %i2 = 0 to 20 {
          %6 = loop.reduce max %r = 0 to 20 : f32 {
            %7 = loop.load %3[0, %i1, %i2, %r, 0] : memref<1x2x20x20x1xf32>
            %8 = arith.mulf %7, %4 : f32
            %9 = arith.cmpi sle, %r, %i2 : index
            %10 = arith.select %9, %8, %5 : f32
            loop.yield %10 : f32
          }
          loop.for %i3 = 0 to 20 {
            %11 = loop.load %3[0, %i1, %i2, %i3, 0] : memref<1x2x20x20x1xf32>
            %12 = arith.mulf %11, %4 : f32
            %13 = arith.cmpi sle, %i3, %i2 : index
            %14 = arith.select %13, %12, %5 : f32
            %15 = arith.subf %14, %6 : f32
            %16 = math.exp %15 : f32
            loop.store %16, %2[%i0, %i1, %i2, %i3] : memref<1x2x20x20xf32>
          }
        }
      }
    }
  }
  %2 = memref.alloc() : memref<1x2x20x1xf32>
  loop.kernel @reduce_9 (%3 = %1 : memref<1x2x20x20xf32>, %4 = %2 : memref<1x2x20x1xf32>) {
    loop.for %i0 = 0 to 1 {
      loop.for %i1 = 0 to 2 {
        loop.for %i2 = 0 to 20 {
          %5 = loop.reduce add %r = 0 to 20 : f32 {
            %6 = loop.load %3[%i0, %i1, %i2, %r] : memref<1x2x20x20xf32>
            loop.yield %6 : f32
          }
          loop.store %5, %4[%i0, %i1, %i2, 0] : memref<1x2x20x1xf32>
        }
      }
    }
  }
  %3 = memref.alloc() : memref<1x20x32xf32>
  loop.kernel @index_map_18 (%4 = %3 : memref<1x20x32xf32>, %5 = %v : memref<1x1x20x16xf32>, %6 = %1 : memref<1x2x20x20xf32>, %7 = %2 : memref<1x2x20x1xf32>) {
    loop.for %i0 = 0 to 1 {
      loop.for %i1 = 0 to 20 {
        loop.for %i2 = 0 to 32 {
          %8 = loop.load %7[0, (%i2 floordiv 16), %i1, 0] : memref<1x2x20x1xf32>
          %9 = loop.reduce add %r = 0 to 20 : f32 {
            %10 = loop.load %6[0, (%i2 floordiv 16), %i1, %r] : memref<1x2x20x20xf32>
            %11 = loop.load %5[0, ((%i2 floordiv 16) floordiv 2), %r, (%i2 mod 16)] : memref<1x1x20x16xf32>
            %12 = arith.mulf %10, %11 : f32
            loop.yield %12 : f32
          }
          %13 = arith.divf %9, %8 : f32
          loop.store %13, %4[%i0, %i1, %i2] : memref<1x20x32xf32>
        }
      }
    }
  }
  func.return %3 : memref<1x20x32xf32>
}

// -----

// An explicit boolean mask (what transformers builds under torch.compile) with 7 queries
// and keys, GQA: one block of 16 covers both and overhangs them. The mask is read like Q, K
// and V — clamped, so rows and keys past 7 read the edge — and the keys past the end are
// masked to -inf after it; the rows past the end store nothing.
// CHECK-LABEL: func.func @forward_mask
// CHECK-NOT:     loop.kernel
// CHECK:         tile.kernel @{{[a-z_0-9]+}} grid [2, 1, 1] block [64, 1, 1]
// CHECK:               loop.load %1[0, 0, ((%kb * 16) + %jj), %dd_1] clamp : memref<1x1x7x16xf32>
// CHECK:                   %[[MASK:.*]] = loop.load %3[0, 0, ({{.*}}%qb * 16){{.*}}, ({{.*}}%kb * 16){{.*}}] clamp : memref<1x1x7x7xi1>
// CHECK:                   %[[SEL:.*]] = arith.select %[[MASK]], %{{.*}}, %{{.*}} : f32
// CHECK-NEXT:              %[[KEYS:.*]] = arith.constant 7 : index
// CHECK-NEXT:              %[[NINF:.*]] = arith.constant 0xff800000 : f32
// CHECK-NEXT:              %[[IN:.*]] = arith.cmpi ult, %{{.*}}, %[[KEYS]] : index
// CHECK-NEXT:              arith.select %[[IN]], %[[SEL]], %[[NINF]] : f32
// CHECK:           } {llmopt.role = "key_blocks"}
// CHECK:                 %[[ROWS:.*]] = arith.constant 7 : index
// CHECK-NEXT:            %[[ROW_IN:.*]] = arith.cmpi ult, %{{.*}}, %[[ROWS]] : index
// CHECK-NEXT:            scf.if %[[ROW_IN]] {
// CHECK-NOT:     loop.kernel
// NUM: flash-attention {{.*}} ok
// NUM: async-copy {{.*}} ok
// NUM: mma-fragments {{.*}} ok
// NUM: tile-to-kernel {{.*}} ok
func.func @forward_mask(%q: memref<1x2x7x16xf32> {llmopt.input = "q"}, %k: memref<1x1x7x16xf32> {llmopt.input = "k"}, %v: memref<1x1x7x16xf32> {llmopt.input = "v"}, %m: memref<1x1x7x7xi1> {llmopt.input = "m"}) -> memref<1x2x7x16xf32> {
  %0 = memref.alloc() : memref<1x2x7x7x1xf32>
  loop.kernel @reduce_3 (%1 = %0 : memref<1x2x7x7x1xf32>, %2 = %k : memref<1x1x7x16xf32>, %3 = %q : memref<1x2x7x16xf32>) {
    loop.for %i0 = 0 to 1 {
      loop.for %i1 = 0 to 2 {
        loop.for %i2 = 0 to 7 {
          loop.for %i3 = 0 to 7 {
            %4 = loop.reduce add %r = 0 to 16 : f32 {
              %5 = loop.load %3[%i0, %i1, %i2, %r] : memref<1x2x7x16xf32>
              %6 = loop.load %2[%i0, (%i1 floordiv 2), %i3, %r] : memref<1x1x7x16xf32>
              %7 = arith.mulf %5, %6 : f32
              loop.yield %7 : f32
            }
            loop.store %4, %1[%i0, %i1, %i2, %i3, 0] : memref<1x2x7x7x1xf32>
          }
        }
      }
    }
  }
  %1 = memref.alloc() : memref<1x2x7x7xf32>
  loop.kernel @elementwise_12 (%2 = %1 : memref<1x2x7x7xf32>, %3 = %m : memref<1x1x7x7xi1>, %4 = %0 : memref<1x2x7x7x1xf32>) {
    %5 = arith.constant 2.500000e-01 : f32
    %6 = arith.constant 0xff800000 : f32
    loop.for %i0 = 0 to 1 {
      loop.for %i1 = 0 to 2 {
        loop.for %i2 = 0 to 7 {
          %7 = loop.reduce max %r = 0 to 7 : f32 {
            %8 = loop.load %4[0, %i1, %i2, %r, 0] : memref<1x2x7x7x1xf32>
            %9 = loop.load %3[%i0, 0, %i2, %r] : memref<1x1x7x7xi1>
            %10 = arith.mulf %8, %5 : f32
            %11 = arith.select %9, %10, %6 : f32
            loop.yield %11 : f32
          }
          %12 = loop.reduce add %r_1 = 0 to 7 : f32 {
            %13 = loop.load %4[0, %i1, %i2, %r_1, 0] : memref<1x2x7x7x1xf32>
            %14 = loop.load %3[%i0, 0, %i2, %r_1] : memref<1x1x7x7xi1>
            %15 = arith.mulf %13, %5 : f32
            %16 = arith.select %14, %15, %6 : f32
            %17 = arith.subf %16, %7 : f32
            %18 = math.exp %17 : f32
            loop.yield %18 : f32
          }
          loop.for %i3 = 0 to 7 {
            %19 = loop.load %4[0, %i1, %i2, %i3, 0] : memref<1x2x7x7x1xf32>
            %20 = loop.load %3[%i0, 0, %i2, %i3] : memref<1x1x7x7xi1>
            %21 = arith.mulf %19, %5 : f32
            %22 = arith.select %20, %21, %6 : f32
            %23 = arith.subf %22, %7 : f32
            %24 = math.exp %23 : f32
            %25 = arith.divf %24, %12 : f32
            loop.store %25, %2[%i0, %i1, %i2, %i3] : memref<1x2x7x7xf32>
          }
        }
      }
    }
  }
  %2 = memref.alloc() : memref<1x2x7x16xf32>
  loop.kernel @index_map_17 (%3 = %2 : memref<1x2x7x16xf32>, %4 = %v : memref<1x1x7x16xf32>, %5 = %1 : memref<1x2x7x7xf32>) {
    loop.for %i0 = 0 to 1 {
      loop.for %i1 = 0 to 2 {
        loop.for %i2 = 0 to 7 {
          loop.for %i3 = 0 to 16 {
            %6 = loop.reduce add %r = 0 to 7 : f32 {
              %7 = loop.load %5[0, %i1, %i2, %r] : memref<1x2x7x7xf32>
              %8 = loop.load %4[0, (%i1 floordiv 2), %r, %i3] : memref<1x1x7x16xf32>
              %9 = arith.mulf %7, %8 : f32
              loop.yield %9 : f32
            }
            loop.store %6, %3[%i0, %i1, %i2, %i3] : memref<1x2x7x16xf32>
          }
        }
      }
    }
  }
  func.return %2 : memref<1x2x7x16xf32>
}
