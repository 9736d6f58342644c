// The tuning table is written by schedule_key on this very input, so the test follows any
// change of the structural hash; the entries are keyed "hash|gpu|nvrtc-x.y".
// RUN: rm -f %t.missing.json
// RUN: python -c "import sys, llmopt; from pathlib import Path; from llmopt.tools.tune import entry_key, save_table, schedule_key; m = llmopt.parse(Path(sys.argv[1]).read_text()); k = next(o for o in m.walk() if o.name == 'tile.kernel' and o.sym_name.data == 'lin_a'); h = schedule_key(k); save_table(Path(sys.argv[2]), {entry_key(h, 'Fake GPU A', '12.0'): {'arch': 'sm_90', 'knobs': {'bm': 16, 'bn': 64, 'tm': 2, 'tn': 4, 'bk': 16, 'split_k': 1}}, entry_key(h, 'Fake GPU B', '12.0'): {'arch': 'sm_80', 'knobs': {'bm': 32, 'bn': 32, 'tm': 2, 'tn': 2, 'bk': 8, 'split_k': 2}}, entry_key('0123456789abcdef0123', 'Fake GPU A', '12.0'): {'arch': 'sm_90', 'knobs': {'bm': 64, 'bn': 64, 'tm': 4, 'tn': 4}}})" %s %t.json
// RUN: env LLMOPT_TUNE_CACHE=%t.json llm-opt %s -p apply-tuned | filecheck %s
// RUN: env LLMOPT_TUNE_CACHE=%t.json llm-opt %s -p 'apply-tuned{arch=sm_80}' | filecheck %s --check-prefix=SM80
// RUN: env LLMOPT_TUNE_CACHE=%t.json llm-opt %s -p 'apply-tuned{arch=sm_86}' | filecheck %s --check-prefix=NONE
// RUN: rm -rf %t.home && mkdir -p %t.home/.cache/llmopt && cp %t.json %t.home/.cache/llmopt/tuned.json
// RUN: env -u LLMOPT_TUNE_CACHE HOME=%t.home llm-opt %s -p apply-tuned | filecheck %s --check-prefix=NONE
// RUN: env -u LLMOPT_TUNE_CACHE HOME=%t.home llm-opt %s -p 'apply-tuned{user=1}' | filecheck %s
// RUN: env LLMOPT_TUNE_CACHE=%t.missing.json llm-opt %s -p apply-tuned | filecheck %s --check-prefix=NONE
// RUN: env LLMOPT_TUNE_CACHE=%t.json llm-opt %s -p apply-tuned,split-k,register-tile,stage-inputs | filecheck %s --check-prefix=SCHED
// RUN: env LLMOPT_TUNE_CACHE=%t.json llm-opt %s -p 'apply-tuned{arch=sm_80},split-k{arch=sm_80},register-tile{arch=sm_80},stage-inputs{arch=sm_80}' | filecheck %s --check-prefix=SCHED80
// RUN: env LLMOPT_TUNE_CACHE=%t.json llm-opt %s -p apply-tuned,split-k,register-tile,stage-inputs,pad-shared,tile-to-kernel,canonicalize,cse,kernel-to-cuda --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// Matrix-product kernels measured by `llmopt tune` get the recorded knobs as their
// llmopt.schedule; the scheduling passes then follow them.
//
// @lin_a and @lin_b are one linear + bias (M=32 N=128 K=64) on different buffers: one
// structural hash, both tuned. @lin_c is the same product with knobs of its own, which
// apply-tuned keeps. @lin_k32 (K = 32) has no entry, and @rowsum is not a product.

func.func @forward(%w: memref<128x64xf32>, %bias: memref<128xf32>, %x: memref<32x64xf32>, %x2: memref<32x64xf32>, %w32: memref<128x32xf32>, %x32: memref<32x32xf32>, %s: memref<64x64x16xf32>) -> (memref<32x128xf32>, memref<32x128xf32>, memref<32x128xf32>, memref<32x128xf32>, memref<64x64xf32>) {
  %ya = memref.alloc() : memref<32x128xf32>
  tile.kernel @lin_a grid [16, 1, 1] block [256, 1, 1] (%o = %ya : memref<32x128xf32>, %b = %bias : memref<128xf32>, %wt = %w : memref<128x64xf32>, %in = %x : memref<32x64xf32>) {
    tile.forall (%i, %j) in [32, 128] over threads {
      %acc = loop.reduce add %k = 0 to 64 : f32 {
        %u = loop.load %in[%i, %k] : memref<32x64xf32>
        %v = loop.load %wt[%j, %k] : memref<128x64xf32>
        %p = arith.mulf %u, %v : f32
        loop.yield %p : f32
      }
      %c = loop.load %b[%j] : memref<128xf32>
      %r = arith.addf %acc, %c : f32
      loop.store %r, %o[%i, %j] : memref<32x128xf32>
    }
  }
  %yb = memref.alloc() : memref<32x128xf32>
  tile.kernel @lin_b grid [16, 1, 1] block [256, 1, 1] (%o = %yb : memref<32x128xf32>, %b = %bias : memref<128xf32>, %wt = %w : memref<128x64xf32>, %in = %x2 : memref<32x64xf32>) {
    tile.forall (%i, %j) in [32, 128] over threads {
      %acc = loop.reduce add %k = 0 to 64 : f32 {
        %u = loop.load %in[%i, %k] : memref<32x64xf32>
        %v = loop.load %wt[%j, %k] : memref<128x64xf32>
        %p = arith.mulf %u, %v : f32
        loop.yield %p : f32
      }
      %c = loop.load %b[%j] : memref<128xf32>
      %r = arith.addf %acc, %c : f32
      loop.store %r, %o[%i, %j] : memref<32x128xf32>
    }
  }
  %yc = memref.alloc() : memref<32x128xf32>
  tile.kernel @lin_c grid [16, 1, 1] block [256, 1, 1] (%o = %yc : memref<32x128xf32>, %b = %bias : memref<128xf32>, %wt = %w : memref<128x64xf32>, %in = %x : memref<32x64xf32>) {
    tile.forall (%i, %j) in [32, 128] over threads {
      %acc = loop.reduce add %k = 0 to 64 : f32 {
        %u = loop.load %in[%i, %k] : memref<32x64xf32>
        %v = loop.load %wt[%j, %k] : memref<128x64xf32>
        %p = arith.mulf %u, %v : f32
        loop.yield %p : f32
      }
      %c = loop.load %b[%j] : memref<128xf32>
      %r = arith.addf %acc, %c : f32
      loop.store %r, %o[%i, %j] : memref<32x128xf32>
    }
  } {llmopt.schedule = {bm = 32 : i64, bn = 128 : i64, tm = 2 : i64, tn = 8 : i64}}
  %yd = memref.alloc() : memref<32x128xf32>
  tile.kernel @lin_k32 grid [16, 1, 1] block [256, 1, 1] (%o = %yd : memref<32x128xf32>, %b = %bias : memref<128xf32>, %wt = %w32 : memref<128x32xf32>, %in = %x32 : memref<32x32xf32>) {
    tile.forall (%i, %j) in [32, 128] over threads {
      %acc = loop.reduce add %k = 0 to 32 : f32 {
        %u = loop.load %in[%i, %k] : memref<32x32xf32>
        %v = loop.load %wt[%j, %k] : memref<128x32xf32>
        %p = arith.mulf %u, %v : f32
        loop.yield %p : f32
      }
      %c = loop.load %b[%j] : memref<128xf32>
      %r = arith.addf %acc, %c : f32
      loop.store %r, %o[%i, %j] : memref<32x128xf32>
    }
  }
  %ye = memref.alloc() : memref<64x64xf32>
  tile.kernel @rowsum grid [16, 1, 1] block [256, 1, 1] (%o = %ye : memref<64x64xf32>, %in = %s : memref<64x64x16xf32>) {
    tile.forall (%i, %j) in [64, 64] over threads {
      %acc = loop.reduce add %k = 0 to 16 : f32 {
        %u = loop.load %in[%i, %j, %k] : memref<64x64x16xf32>
        loop.yield %u : f32
      }
      loop.store %acc, %o[%i, %j] : memref<64x64xf32>
    }
  }
  func.return %ya, %yb, %yc, %yd, %ye : memref<32x128xf32>, memref<32x128xf32>, memref<32x128xf32>, memref<32x128xf32>, memref<64x64xf32>
}

// The sm_90 entry (knobs sorted by name), on both kernels of that hash; nothing else.
// CHECK-LABEL: func.func @forward
// CHECK:         tile.kernel @lin_a
// CHECK:         } {llmopt.schedule = {bk = 16 : i64, bm = 16 : i64, bn = 64 : i64, split_k = 1 : i64, tm = 2 : i64, tn = 4 : i64}}
// CHECK-NEXT:    memref.alloc
// CHECK-NEXT:    tile.kernel @lin_b
// CHECK:         } {llmopt.schedule = {bk = 16 : i64, bm = 16 : i64, bn = 64 : i64, split_k = 1 : i64, tm = 2 : i64, tn = 4 : i64}}
// CHECK-NEXT:    memref.alloc
// CHECK-NEXT:    tile.kernel @lin_c
// CHECK:         } {llmopt.schedule = {bm = 32 : i64, bn = 128 : i64, tm = 2 : i64, tn = 8 : i64}}
// CHECK-NEXT:    memref.alloc
// CHECK-NEXT:    tile.kernel @lin_k32
// CHECK:             loop.store
// CHECK-NEXT:      }
// CHECK-NEXT:    }
// CHECK-NEXT:    memref.alloc
// CHECK-NEXT:    tile.kernel @rowsum
// CHECK:             loop.store
// CHECK-NEXT:      }
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return

// SM80-LABEL: func.func @forward
// SM80:         tile.kernel @lin_a
// SM80:         } {llmopt.schedule = {bk = 8 : i64, bm = 32 : i64, bn = 32 : i64, split_k = 2 : i64, tm = 2 : i64, tn = 2 : i64}}
// SM80:         tile.kernel @lin_b
// SM80:         } {llmopt.schedule = {bk = 8 : i64, bm = 32 : i64, bn = 32 : i64, split_k = 2 : i64, tm = 2 : i64, tn = 2 : i64}}
// SM80:         tile.kernel @lin_c
// SM80:         } {llmopt.schedule = {bm = 32 : i64, bn = 128 : i64, tm = 2 : i64, tn = 8 : i64}}

// No entry for the architecture, a cache in the home directory that is not asked for
// (user=1), or no cache: only @lin_c's own knobs.
// NONE-LABEL: func.func @forward
// NONE-COUNT-1: llmopt.schedule
// NONE-NOT:     llmopt.schedule

// The tuned knobs drive the passes: @lin_a and @lin_b get 16x64 tiles of 2x4 and K chunks
// of 16, @lin_c its own 32x128 tiles of 2x8; @lin_k32 the heuristic 32x64 tiles of 2x4 and
// chunks of 32.
// SCHED-LABEL: func.func @forward
// SCHED:         tile.kernel @lin_a grid [4, 1, 1] block [128, 1, 1]
// SCHED-NEXT:      tile.forall (%{{.*}}, %{{.*}}) in [2, 2] over blocks {
// SCHED-NEXT:        tile.alloc registers : memref<8x16x2x4xf32>
// SCHED:             tile.alloc shared : memref<16x16xf32>
// SCHED-NEXT:        tile.alloc shared : memref<64x16xf32>
// SCHED:         tile.kernel @lin_b grid [4, 1, 1] block [128, 1, 1]
// SCHED:             tile.alloc registers : memref<8x16x2x4xf32>
// SCHED:         tile.kernel @lin_c grid [1, 1, 1] block [256, 1, 1]
// SCHED-NEXT:      tile.forall (%{{.*}}, %{{.*}}) in [1, 1] over blocks {
// SCHED-NEXT:        tile.alloc registers : memref<16x16x2x8xf32>
// SCHED:             tile.alloc shared : memref<32x32xf32>
// SCHED-NEXT:        tile.alloc shared : memref<128x32xf32>
// SCHED:         tile.kernel @lin_k32 grid [2, 1, 1] block [256, 1, 1]
// SCHED-NEXT:      tile.forall (%{{.*}}, %{{.*}}) in [1, 2] over blocks {
// SCHED-NEXT:        tile.alloc registers : memref<16x16x2x4xf32>
// SCHED:         tile.kernel @rowsum grid [16, 1, 1] block [256, 1, 1]
// SCHED-NEXT:      tile.forall (%{{.*}}, %{{.*}}) in [64, 64] over threads {

// On sm_80 the entry splits K in two: each product becomes a partial kernel of 32x32 tiles
// of 2x2 (slices of 32 in chunks of 8) and a summing kernel.
// SCHED80-LABEL: func.func @forward
// SCHED80:         memref.alloc() : memref<2x32x128xf32>
// SCHED80-NEXT:    tile.kernel @lin_a_split grid [8, 1, 1] block [256, 1, 1]
// SCHED80-NEXT:      tile.forall (%{{.*}}, %{{.*}}, %{{.*}}) in [2, 1, 4] over blocks {
// SCHED80-NEXT:        tile.alloc registers : memref<16x16x2x2xf32>
// SCHED80:             tile.alloc shared : memref<32x8xf32>
// SCHED80:         tile.kernel @lin_a grid [16, 1, 1] block [256, 1, 1]
// SCHED80:         memref.alloc() : memref<2x32x128xf32>
// SCHED80-NEXT:    tile.kernel @lin_b_split grid [8, 1, 1] block [256, 1, 1]
// SCHED80:         tile.kernel @lin_b grid [16, 1, 1] block [256, 1, 1]
// SCHED80-NOT:     @lin_c_split
// SCHED80:         tile.kernel @lin_c grid [1, 1, 1] block [256, 1, 1]

// NUM:      // numerics: tolerance
// NUM-NEXT: apply-tuned {{.*}} ok
// NUM-NEXT: split-k {{.*}} ok
// NUM-NEXT: register-tile {{.*}} ok
// NUM-NEXT: stage-inputs {{.*}} ok
// NUM-NEXT: pad-shared {{.*}} ok
// NUM-NEXT: tile-to-kernel {{.*}} ok
// NUM-NEXT: canonicalize {{.*}} ok
// NUM-NEXT: cse {{.*}} ok
// NUM-NEXT: kernel-to-cuda {{.*}}(not interpreted
