// RUN: llm-opt %s --split-input-file -p pad-shared | filecheck %s
// RUN: llm-opt %s --split-input-file -p 'pad-shared{pad=3}' | filecheck %s --check-prefix=PAD3
// RUN: llm-opt %s --split-input-file -p 'pad-shared{pad=0}' | filecheck %s --check-prefix=NONE
// RUN: not llm-opt %s --split-input-file -p 'pad-shared{pad=-1}' 2>&1 | filecheck %s --check-prefix=NEG
// RUN: llm-opt %s --split-input-file -p pad-shared,tile-to-kernel,canonicalize,cse,kernel-to-cuda --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// Shared tiles of rank >= 2 whose rows are an even number of words get `pad` more words a
// row (or the number their llmopt.pad asks for), so that a column spreads over all 32 banks;
// the accesses keep their indices.

// What stage-inputs{kmajor=2} makes of an 8x16 product (K = 8 in chunks of 4, 32 threads
// of 2x2, cyclic): an 8x4 and a 16x4 tile, read down a column by consecutive threads.
func.func @forward(%x: memref<8x8xf32>, %w: memref<16x8xf32>) -> memref<8x16xf32> {
  %y = memref.alloc() : memref<8x16xf32>
  tile.kernel @mm grid [1, 1, 1] block [32, 1, 1] (%a = %x : memref<8x8xf32>, %b = %w : memref<16x8xf32>, %o = %y : memref<8x16xf32>) {
    tile.forall (%bm, %bn) in [1, 1] over blocks {
      %acc = tile.alloc registers : memref<4x8x2x2xf32>
      tile.forall (%ti, %tj) in [4, 8] over block_threads {
        loop.for %mi = 0 to 2 {
          loop.for %nj = 0 to 2 {
            %zero = arith.constant 0.0 : f32
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
          %u = loop.load %a[%bm * 8 + %s0, %k0 * 4 + %s1] : memref<8x8xf32>
          loop.store %u, %xs[%s0, %s1] : memref<8x4xf32>
        } {llmopt.role = "stage"}
        tile.forall (%s0, %s1) in [16, 4] over block_threads {
          %v = loop.load %b[%bn * 16 + %s0, %k0 * 4 + %s1] : memref<16x8xf32>
          loop.store %v, %ws[%s0, %s1] : memref<16x4xf32>
        } {llmopt.role = "stage"}
        scf.for %kk = %c0 to %c4 step %c1 {
          tile.forall (%ti, %tj) in [4, 8] over block_threads {
            loop.for %mi = 0 to 2 {
              loop.for %nj = 0 to 2 {
                %u = loop.load %xs[%mi * 4 + %ti, %kk] : memref<8x4xf32>
                %v = loop.load %ws[%nj * 8 + %tj, %kk] : memref<16x4xf32>
                %p = arith.mulf %u, %v : f32
                %old = loop.load %acc[%ti, %tj, %mi, %nj] : memref<4x8x2x2xf32>
                %new = arith.addf %old, %p : f32
                loop.store %new, %acc[%ti, %tj, %mi, %nj] : memref<4x8x2x2xf32>
              } {unroll = 0 : i64}
            } {unroll = 0 : i64}
          } {llmopt.role = "update"}
        } {unroll = 0 : i64}
      } {llmopt.role = "k_loop"}
      tile.forall (%ti, %tj) in [4, 8] over block_threads {
        loop.for %mi = 0 to 2 {
          loop.for %nj = 0 to 2 {
            %sum = loop.load %acc[%ti, %tj, %mi, %nj] : memref<4x8x2x2xf32>
            loop.store %sum, %o[%bm * 8 + %mi * 4 + %ti, %bn * 16 + %nj * 8 + %tj] : memref<8x16xf32>
          } {unroll = 0 : i64}
        } {unroll = 0 : i64}
      } {llmopt.role = "epilogue"}
    }
  }
  func.return %y : memref<8x16xf32>
}

// CHECK-LABEL: func.func @forward
// CHECK:         %[[ACC:.*]] = tile.alloc registers : memref<4x8x2x2xf32>
// CHECK:         %[[XS:.*]] = tile.alloc shared : memref<8x5xf32>
// CHECK-NEXT:    %[[WS:.*]] = tile.alloc shared : memref<16x5xf32>
// CHECK:         loop.store %{{.*}}, %[[XS]][%{{.*}}, %{{.*}}] : memref<8x5xf32>
// CHECK:         loop.store %{{.*}}, %[[WS]][%{{.*}}, %{{.*}}] : memref<16x5xf32>
// CHECK:         loop.load %[[XS]][((%{{.*}} * 4) + %{{.*}}), %{{.*}}] : memref<8x5xf32>
// CHECK-NEXT:    loop.load %[[WS]][((%{{.*}} * 8) + %{{.*}}), %{{.*}}] : memref<16x5xf32>
// CHECK:         loop.load %[[ACC]][{{.*}}] : memref<4x8x2x2xf32>

// PAD3-LABEL: func.func @forward
// PAD3:         tile.alloc registers : memref<4x8x2x2xf32>
// PAD3:         tile.alloc shared : memref<8x7xf32>
// PAD3-NEXT:    tile.alloc shared : memref<16x7xf32>

// NONE-LABEL: func.func @forward
// NONE:         tile.alloc shared : memref<8x4xf32>
// NONE-NEXT:    tile.alloc shared : memref<16x4xf32>

// NUM:      // numerics: tolerance
// NUM-NEXT: pad-shared {{.*}} ok
// NUM-NEXT: tile-to-kernel {{.*}} ok
// NUM-NEXT: canonicalize {{.*}} ok
// NUM-NEXT: cse {{.*}} ok
// NUM-NEXT: kernel-to-cuda {{.*}}(not interpreted

// -----

// A transpose through a 32x32 tile is padded; a tile whose rows are already odd and a
// one-dimensional buffer are left alone.
func.func @forward(%x: memref<32x32xf32>) -> memref<32x32xf32> {
  %y = memref.alloc() : memref<32x32xf32>
  tile.kernel @transpose grid [1, 1, 1] block [256, 1, 1] (%a = %x : memref<32x32xf32>, %o = %y : memref<32x32xf32>) {
    tile.forall (%b) in [1] over blocks {
      %t = tile.alloc shared : memref<32x32xf32>
      %odd = tile.alloc shared : memref<16x33xf32>
      %flat = tile.alloc shared : memref<64xf32>
      tile.forall (%i, %j) in [32, 32] over block_threads {
        %v = loop.load %a[%i, %j] : memref<32x32xf32>
        loop.store %v, %t[%i, %j] : memref<32x32xf32>
      }
      tile.forall (%i, %j) in [32, 32] over block_threads {
        %v = loop.load %t[%j, %i] : memref<32x32xf32>
        loop.store %v, %o[%i, %j] : memref<32x32xf32>
      }
    }
  }
  func.return %y : memref<32x32xf32>
}

// CHECK-LABEL: func.func @forward
// CHECK:         %[[T:.*]] = tile.alloc shared : memref<32x33xf32>
// CHECK-NEXT:    tile.alloc shared : memref<16x33xf32>
// CHECK-NEXT:    tile.alloc shared : memref<64xf32>
// CHECK:         loop.store %{{.*}}, %[[T]][%[[I:.*]], %[[J:.*]]] : memref<32x33xf32>
// CHECK:         tile.forall (%[[I2:.*]], %[[J2:.*]]) in [32, 32] over block_threads {
// CHECK-NEXT:      loop.load %[[T]][%[[J2]], %[[I2]]] : memref<32x33xf32>

// PAD3-LABEL: func.func @forward
// PAD3:         tile.alloc shared : memref<32x35xf32>
// PAD3-NEXT:    tile.alloc shared : memref<16x33xf32>
// PAD3-NEXT:    tile.alloc shared : memref<64xf32>

// NONE-LABEL: func.func @forward
// NONE:         tile.alloc shared : memref<32x32xf32>

// NEG: llm-opt: error: invalid options for pass 'pad-shared': pad must be an integer from 0 to 64, got -1

// NUM:      // numerics: tolerance
// NUM-NEXT: pad-shared {{.*}} ok
// NUM-NEXT: tile-to-kernel {{.*}} ok
// NUM-NEXT: canonicalize {{.*}} ok
// NUM-NEXT: cse {{.*}} ok
// NUM-NEXT: kernel-to-cuda {{.*}}(not interpreted

// -----

// The same product staged K-major by stage-inputs: its tiles ask for 4 words of padding
// (llmopt.pad), which keeps every row 16-byte aligned; they get it whatever the pass's pad,
// and the request is dropped. pad=0 turns the pass off, requests included.
builtin.module {
  func.func @forward(%x: memref<8x8xf32>, %w: memref<16x8xf32>) -> memref<8x16xf32> {
    %y = memref.alloc() : memref<8x16xf32>
    tile.kernel @mm grid [1, 1, 1] block [32, 1, 1] (%0 = %x : memref<8x8xf32>, %1 = %w : memref<16x8xf32>, %2 = %y : memref<8x16xf32>) {
      tile.forall (%bm, %bn) in [1, 1] over blocks {
        %acc = tile.alloc registers : memref<4x8x2x2xf32>
        tile.forall (%ti, %tj) in [4, 8] over block_threads {
          loop.for %mi = 0 to 2 {
            loop.for %nj = 0 to 2 {
              %3 = arith.constant 0.000000e+00 : f32
              loop.store %3, %acc[%ti, %tj, %mi, %nj] : memref<4x8x2x2xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "init"}
        %4 = arith.constant 0 : index
        %5 = arith.constant 8 : index
        %6 = arith.constant 1 : index
        %stage = tile.alloc shared {llmopt.pad = 4 : i64} : memref<4x8xf32>
        %stage_1 = tile.alloc shared {llmopt.pad = 4 : i64} : memref<4x16xf32>
        %7 = arith.constant 0 : index
        %8 = arith.constant 2 : index
        %9 = arith.constant 1 : index
        %10 = arith.constant 4 : index
        scf.for %k0 = %7 to %8 step %9 {
          tile.forall (%s0, %s1) in [8, 4] over block_threads {
            %11 = loop.load %0[((%bm * 8) + %s0), ((%k0 * 4) + %s1)] : memref<8x8xf32>
            loop.store %11, %stage[%s1, %s0] : memref<4x8xf32>
          } {llmopt.role = "stage"}
          tile.forall (%s0_1, %s1_1) in [16, 4] over block_threads {
            %12 = loop.load %1[((%bn * 16) + %s0_1), ((%k0 * 4) + %s1_1)] : memref<16x8xf32>
            loop.store %12, %stage_1[%s1_1, %s0_1] : memref<4x16xf32>
          } {llmopt.role = "stage"}
          scf.for %kk = %7 to %10 step %9 {
            %13 = arith.muli %k0, %10 : index
            %k = arith.addi %13, %kk : index
            tile.forall (%ti_1, %tj_1) in [4, 8] over block_threads {
              loop.for %mi_1 = 0 to 2 {
                loop.for %nj_1 = 0 to 2 {
                  %u = loop.load %stage[%kk, ((%ti_1 * 2) + %mi_1)] : memref<4x8xf32>
                  %v = loop.load %stage_1[%kk, ((%tj_1 * 2) + %nj_1)] : memref<4x16xf32>
                  %p = arith.mulf %u, %v : f32
                  %14 = loop.load %acc[%ti_1, %tj_1, %mi_1, %nj_1] : memref<4x8x2x2xf32>
                  %15 = arith.addf %14, %p : f32
                  loop.store %15, %acc[%ti_1, %tj_1, %mi_1, %nj_1] : memref<4x8x2x2xf32>
                } {unroll = 0 : i64}
              } {unroll = 0 : i64}
            } {llmopt.role = "update"}
          } {unroll = 0 : i64}
        } {llmopt.role = "k_loop"}
        tile.forall (%ti_2, %tj_2) in [4, 8] over block_threads {
          loop.for %mi_2 = 0 to 2 {
            loop.for %nj_2 = 0 to 2 {
              %sum = loop.load %acc[%ti_2, %tj_2, %mi_2, %nj_2] : memref<4x8x2x2xf32>
              loop.store %sum, %2[(((%bm * 8) + (%ti_2 * 2)) + %mi_2), (((%bn * 16) + (%tj_2 * 2)) + %nj_2)] : memref<8x16xf32>
            } {unroll = 0 : i64}
          } {unroll = 0 : i64}
        } {llmopt.role = "epilogue"}
      }
    }
    func.return %y : memref<8x16xf32>
  }
}

// CHECK-LABEL: func.func @forward
// CHECK:         %[[XS:.*]] = tile.alloc shared : memref<4x12xf32>
// CHECK-NEXT:    %[[WS:.*]] = tile.alloc shared : memref<4x20xf32>
// CHECK:         loop.store %{{.*}}, %[[XS]][%{{.*}}, %{{.*}}] : memref<4x12xf32>
// CHECK:         loop.store %{{.*}}, %[[WS]][%{{.*}}, %{{.*}}] : memref<4x20xf32>
// CHECK:         loop.load %[[XS]][%{{.*}}, ((%{{.*}} * 2) + %{{.*}})] : memref<4x12xf32>
// CHECK-NEXT:    loop.load %[[WS]][%{{.*}}, ((%{{.*}} * 2) + %{{.*}})] : memref<4x20xf32>
// CHECK-NOT:     llmopt.pad

// PAD3-LABEL: func.func @forward
// PAD3:         tile.alloc shared : memref<4x12xf32>
// PAD3-NEXT:    tile.alloc shared : memref<4x20xf32>

// NONE-LABEL: func.func @forward
// NONE:         tile.alloc shared {llmopt.pad = 4 : i64} : memref<4x8xf32>
// NONE-NEXT:    tile.alloc shared {llmopt.pad = 4 : i64} : memref<4x16xf32>

// NUM:      // numerics: tolerance
// NUM-NEXT: pad-shared {{.*}} ok
// NUM-NEXT: tile-to-kernel {{.*}} ok
// NUM-NEXT: canonicalize {{.*}} ok
// NUM-NEXT: cse {{.*}} ok
// NUM-NEXT: kernel-to-cuda {{.*}}(not interpreted

// -----

// 16-bit tiles: one that a product in the tensor-core layout reads (ldmatrix, after
// mma-fragments) gets rows of an odd multiple of 16 bytes — 32 elements become 40 whatever
// the pad option, and an asked pad that gives that is kept (16 + 8 = 24); any other tile the
// usual padding.
func.func @halves(%x: memref<16x32xbf16>) -> memref<16x32xbf16> {
  %y = memref.alloc() : memref<16x32xbf16>
  tile.kernel @k grid [1, 1, 1] block [128, 1, 1] (%a = %x : memref<16x32xbf16>, %o = %y : memref<16x32xbf16>) {
    tile.forall (%b) in [1] over blocks {
      %t = tile.alloc shared : memref<16x32xbf16>
      %h = tile.alloc shared {llmopt.pad = 8 : i64} : memref<32x16xbf16>
      %u = tile.alloc shared : memref<16x32xbf16>
      tile.forall (%r, %c) in [16, 32] over block_threads {
        %v = loop.load %a[%r, %c] : memref<16x32xbf16>
        loop.store %v, %t[%r, %c] : memref<16x32xbf16>
        loop.store %v, %u[%r, %c] : memref<16x32xbf16>
        loop.store %v, %h[%c, %r] : memref<32x16xbf16>
      }
      tile.forall (%r, %c) in [16, 32] over block_threads {
        %v = loop.load %t[%r, %c] : memref<16x32xbf16>
        %w = loop.load %h[%c, %r] : memref<32x16xbf16>
        %s = arith.addf %v, %w : bf16
        loop.store %s, %o[%r, %c] : memref<16x32xbf16>
      } {llmopt.layout = "mma"}
      tile.forall (%r, %c) in [16, 32] over block_threads {
        %v = loop.load %u[%r, %c] : memref<16x32xbf16>
        %w = loop.load %o[%r, %c] : memref<16x32xbf16>
        %s = arith.subf %w, %v : bf16
        loop.store %s, %o[%r, %c] : memref<16x32xbf16>
      }
    }
  }
  func.return %y : memref<16x32xbf16>
}

// CHECK-LABEL: func.func @halves
// CHECK:         tile.alloc shared : memref<16x40xbf16>
// CHECK-NEXT:    tile.alloc shared : memref<32x24xbf16>
// CHECK-NEXT:    tile.alloc shared : memref<16x33xbf16>

// PAD3-LABEL: func.func @halves
// PAD3:         tile.alloc shared : memref<16x40xbf16>
// PAD3-NEXT:    tile.alloc shared : memref<32x24xbf16>
// PAD3-NEXT:    tile.alloc shared : memref<16x35xbf16>

// NONE-LABEL: func.func @halves
// NONE:         tile.alloc shared : memref<16x32xbf16>

// -----

// A tile padded already (rows of 16 + 4) that 4-element copies fill, run through the pass
// again (lower-to-cuda on scheduled Tile IR): one word more would put every other copy off
// 16 bytes, so its rows grow to a multiple of 4 instead (24); with pad=0 nothing changes.
func.func @copied(%x: memref<32x16xf32>) -> memref<32x16xf32> {
  %y = memref.alloc() : memref<32x16xf32>
  tile.kernel @k grid [1, 1, 1] block [128, 1, 1] (%a = %x : memref<32x16xf32>, %o = %y : memref<32x16xf32>) {
    tile.forall (%b) in [1] over blocks {
      %t = tile.alloc shared : memref<32x20xf32>
      tile.forall (%r, %c) in [32, 4] over block_threads {
        tile.copy %a[%r, (%c * 4)] to %t[%r, (%c * 4)] count 4 : memref<32x16xf32> to memref<32x20xf32>
      }
      tile.forall (%r, %c) in [32, 16] over block_threads {
        %v = loop.load %t[%r, %c] : memref<32x20xf32>
        loop.store %v, %o[%r, %c] : memref<32x16xf32>
      }
    }
  }
  func.return %y : memref<32x16xf32>
}

// CHECK-LABEL: func.func @copied
// CHECK:         tile.alloc shared : memref<32x24xf32>
// CHECK:         tile.copy %{{.*}} to %{{.*}} count 4 : memref<32x16xf32> to memref<32x24xf32>

// PAD3-LABEL: func.func @copied
// PAD3:         tile.alloc shared : memref<32x24xf32>

// NONE-LABEL: func.func @copied
// NONE:         tile.alloc shared : memref<32x20xf32>

// NUM:      // numerics: tolerance
// NUM-NEXT: pad-shared {{.*}} ok
// NUM-NEXT: tile-to-kernel {{.*}} ok
