// The tuning table is written by schedule_key on this very input (see apply-tuned.mlir).
// RUN: python -c "import sys, llmopt; from pathlib import Path; from llmopt.tools.tune import entry_key, save_table, schedule_key; m = llmopt.parse(Path(sys.argv[1]).read_text()); k = next(o for o in m.walk() if o.name == 'tile.kernel' and o.sym_name.data == 'linear'); save_table(Path(sys.argv[2]), {entry_key(schedule_key(k), 'Fake GPU A', '12.0'): {'arch': 'sm_90', 'knobs': {'bm': 16, 'bn': 64, 'tm': 2, 'tn': 4, 'bk': 16, 'split_k': 1}}})" %s %t.json
// RUN: env LLMOPT_TUNE_CACHE=%t.json llm-opt %s -p apply-tuned | filecheck %s
// RUN: env LLMOPT_TUNE_CACHE=%t.json llm-opt %s -p apply-tuned,split-k,register-tile | filecheck %s --check-prefix=SCHED
// RUN: env LLMOPT_TUNE_CACHE=%t.json llm-opt %s -p apply-tuned,split-k,register-tile,stage-inputs,pad-shared,tile-to-kernel,canonicalize,cse,kernel-to-cuda --check-numerics --check-numerics-at 1,7,16,17,64 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// A product over a symbolic number of rows (at most 64) that `llmopt tune` has measured
// gets its knobs like a static one; register-tile then tiles its runtime rows with the
// tuned 16-row blocks (the grid computed from the length), and every pass keeps the result
// at lengths inside and across the tiles.

func.func @forward(%w: memref<64x256xf32> {llmopt.param = "w"},
                   %x: memref<?x256xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                   %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> memref<?x64xf32> {
  %out = memref.alloc(%seq) : memref<?x64xf32>
  %c64 = arith.constant 64 : index
  %points = arith.muli %seq, %c64 : index
  %c256 = arith.constant 256 : index
  %grid = arith.ceildivui %points, %c256 : index
  tile.kernel @linear grid [%grid max 16, 1, 1] block [256, 1, 1] (%o = %out : memref<?x64xf32>, %n = %seq : index, %ww = %w : memref<64x256xf32>, %a = %x : memref<?x256xf32>) {
    tile.forall (%i, %j) in [%n max 64, 64] over threads {
      %s = loop.reduce add %k = 0 to 256 : f32 {
        %v = loop.load %a[%i, %k] : memref<?x256xf32>
        %u = loop.load %ww[%j, %k] : memref<64x256xf32>
        %p = arith.mulf %v, %u : f32
        loop.yield %p : f32
      }
      loop.store %s, %o[%i, %j] : memref<?x64xf32>
    }
  }
  func.return %out : memref<?x64xf32>
}

// CHECK-LABEL: func.func @forward
// CHECK:         tile.kernel @linear grid [%grid max 16, 1, 1]
// CHECK:         } {llmopt.schedule = {bk = 16 : i64, bm = 16 : i64, bn = 64 : i64, split_k = 1 : i64, tm = 2 : i64, tn = 4 : i64}}

// SCHED-LABEL: func.func @forward
// SCHED:         tile.kernel @linear grid [%{{.*}} max 4, 1, 1] block [128, 1, 1]
// SCHED:           tile.forall (%bm, %bn) in [%{{.*}} max 4, 1] over blocks {

// NUM-NOT: FAIL
// NUM: register-tile {{.*}} ok
// NUM: kernel-to-cuda {{.*}} ok
