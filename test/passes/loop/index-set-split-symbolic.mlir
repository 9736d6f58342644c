// RUN: llm-opt %s -p index-set-split | filecheck %s
// RUN: llm-opt %s -p 'index-set-split,fuse-kernels{recompute_limit=0}' | filecheck %s --check-prefix=FUSED
// RUN: llm-opt %s -p 'index-set-split,fuse-kernels{recompute_limit=0},loop-to-tile,warp-gemv' | filecheck %s --check-prefix=GEMV
// RUN: llm-opt %s -p 'index-set-split,fuse-kernels{recompute_limit=0},loop-to-tile,warp-gemv,tile-to-kernel,canonicalize,cse,kernel-to-cuda' --check-numerics --check-numerics-at 1,5,32 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// A decode step's key projection (one row) with its rotary embedding and the append to a
// key cache of runtime length `ctx` (at most 32): the new key goes to row `ctx - 1`. The
// rotate-half loop is split into its halves and the projection becomes the append's two
// sums, whatever the cache's length.

// CHECK-LABEL: func.func @key_append
// CHECK:       loop.kernel @insert
// CHECK:         loop.for %i2 = 0 to 8 {
// CHECK-NOT:       arith.select
// CHECK:           loop.store %{{.*}}, %{{.*}}[(%i0 + %{{.*}}), %i1, %i2] : memref<?x1x16xf32>
// CHECK:           loop.store %{{.*}}, %{{.*}}[(%i0 + %{{.*}}), %i1, (%i2 + 8)] : memref<?x1x16xf32>

// FUSED-LABEL: func.func @key_append
// FUSED-NOT:   loop.kernel @proj
// FUSED:       loop.kernel @insert
// FUSED:         loop.reduce add
// FUSED:           loop.load %{{.*}}[%i2, %{{.*}}] : memref<16x32xf32>
// FUSED:         loop.reduce add
// FUSED:           loop.load %{{.*}}[(%i2 + 8), %{{.*}}] : memref<16x32xf32>

// GEMV: tile.kernel @insert
// GEMV: } {llmopt.gemv = {rows = 1 : i64, slices = 1 : i64, vector = 4 : i64}}

// NUM-NOT: FAIL
// NUM: index-set-split {{.*}} ok
// NUM: warp-gemv {{.*}} ok

func.func @key_append(%x: memref<1x1x32xf32>, %W: memref<16x32xf32>, %cos: memref<1x1x16xf32>, %sin: memref<1x1x16xf32>, %cache_k: memref<?x1x16xf32> {llmopt.dynamic = ["ctx"], llmopt.written}, %ctx: index {llmopt.symbol = "ctx", llmopt.max = 32 : i64}) -> memref<?x1x16xf32> {
  %m1 = arith.constant -1 : index
  %pos = arith.addi %ctx, %m1 : index
  %k = memref.alloc() : memref<1x1x16x1xf32>
  loop.kernel @proj (%o = %k : memref<1x1x16x1xf32>, %w = %W : memref<16x32xf32>, %a = %x : memref<1x1x32xf32>) {
    loop.for %i0 = 0 to 1 {
      loop.for %i1 = 0 to 1 {
        loop.for %i2 = 0 to 16 {
          %s = loop.reduce add %r = 0 to 32 : f32 {
            %av = loop.load %a[%i0, %i1, %r] : memref<1x1x32xf32>
            %wv = loop.load %w[%i2, %r] : memref<16x32xf32>
            %p = arith.mulf %av, %wv : f32
            loop.yield %p : f32
          }
          loop.store %s, %o[%i0, %i1, %i2, 0] : memref<1x1x16x1xf32>
        }
      }
    }
  }
  loop.kernel @insert (%c = %cache_k : memref<?x1x16xf32>, %at = %pos : index, %sn = %sin : memref<1x1x16xf32>, %cs = %cos : memref<1x1x16xf32>, %q = %k : memref<1x1x16x1xf32>) {
    %eight = arith.constant 8 : index
    loop.for %i0 = 0 to 1 {
      loop.for %i1 = 0 to 1 {
        loop.for %i2 = 0 to 16 {
          %v = loop.load %q[0, 0, %i2, 0] : memref<1x1x16x1xf32>
          %cv = loop.load %cs[0, 0, %i2] : memref<1x1x16xf32>
          %x1 = arith.mulf %v, %cv : f32
          %hi = loop.load %q[0, 0, (%i2 mod 8) + 8, 0] : memref<1x1x16x1xf32>
          %neg = arith.negf %hi : f32
          %lo = loop.load %q[0, 0, (%i2 - 8) mod 8, 0] : memref<1x1x16x1xf32>
          %first = arith.cmpi ult, %i2, %eight : index
          %rot = arith.select %first, %neg, %lo : f32
          %sv = loop.load %sn[0, 0, %i2] : memref<1x1x16xf32>
          %x2 = arith.mulf %rot, %sv : f32
          %y = arith.addf %x1, %x2 : f32
          loop.store %y, %c[%i0 + %at, %i1, %i2] : memref<?x1x16xf32>
        }
      }
    }
  }
  func.return %cache_k : memref<?x1x16xf32>
}
