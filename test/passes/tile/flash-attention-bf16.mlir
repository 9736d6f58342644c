// RUN: llm-opt %s -p 'flash-attention{bm=16 bn=16}' | filecheck %s
// RUN: llm-opt %s -p 'flash-attention{bm=16 bn=16},loop-to-tile,async-copy,pad-shared,mma-fragments,vector-fragments,tile-to-kernel' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: sed 's/bf16/f16/g' %s | llm-opt -p 'flash-attention{bm=16 bn=16},loop-to-tile,async-copy,pad-shared,mma-fragments,vector-fragments,tile-to-kernel' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'flash-attention{bm=16 bn=16},loop-to-tile,async-copy,pad-shared,mma-fragments,vector-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' -t cuda | filecheck %s --check-prefix=CUDA
// RUN: llm-opt %s -p 'flash-attention{bm=16 bn=16 min_blocks=1},loop-to-tile,async-copy,pad-shared,mma-fragments,vector-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' -t cuda | filecheck %s --check-prefix=NOCAP
// RUN: llm-opt %s -p 'flash-attention{bm=16 bn=16 register_stats=false}' | filecheck %s --check-prefix=SHARED
// RUN: llm-opt %s -p 'flash-attention{bm=16 bn=16 register_stats=false},loop-to-tile,async-copy,pad-shared,mma-fragments,vector-fragments,tile-to-kernel' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'flash-attention{bm=16 bn=16 tensor_cores=false}' | filecheck %s --check-prefix=WIDE
// RUN: llm-opt %s -p 'flash-attention{bm=16 bn=16 tensor_cores=false},loop-to-tile,async-copy,pad-shared,mma-fragments,vector-fragments,tile-to-kernel' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'flash-attention{bm=16 bn=16 rescale_margin=8}' | filecheck %s --check-prefix=MARGIN
// RUN: llm-opt %s -p 'flash-attention{bm=16 bn=16 rescale_margin=8},loop-to-tile,async-copy,pad-shared,mma-fragments,vector-fragments,tile-to-kernel' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'flash-attention{bm=16 bn=16 rescale_margin=0},loop-to-tile,async-copy,pad-shared,mma-fragments,vector-fragments,tile-to-kernel' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// Causal grouped-query attention in bf16, as a bf16 TinyLlama-like layer leaves it after
// fuse-kernels and hoist-reduce-factors (40 tokens: the last 16-row block is ragged): Q, K
// and V are bf16, widened by arith.extf inside the two products' sums, which accumulate in
// f32; the output is rounded to bf16 by its epilogue. With the tensor cores, flash-attention
// keeps Q, K and V in bf16 tiles (filled by cp.async, read by ldmatrix into m16n8k16
// products, V with ldmatrix.trans), the scores in an f32 tile, and P rounded to bf16 in a
// tile of its own, whose row sums are the softmax's denominators. The row statistics stay in
// the registers of the threads holding the scores (register_stats, the default): each
// thread's row maxima and sums go through the small shared pmax and psum, the scores never
// reach shared memory; with register_stats=false the scores go to an f32 tile ps and the
// statistics are taken from it. Without the tensor cores, the tiles are f32, widened where
// they are staged.

func.func @forward(%q: memref<1x4x40x16xbf16> {llmopt.input = "q"}, %k: memref<1x2x40x16xbf16> {llmopt.input = "k"}, %v: memref<1x2x40x16xbf16> {llmopt.input = "v"}) -> memref<1x40x64xbf16> {
%12 = memref.alloc() : memref<1x4x40x40x1xf32>
loop.kernel @reduce_86 (%13 = %12 : memref<1x4x40x40x1xf32>, %14 = %k : memref<1x2x40x16xbf16>, %15 = %q : memref<1x4x40x16xbf16>) {
  loop.for %i0 = 0 to 1 {
    loop.for %i1 = 0 to 4 {
      loop.for %i2 = 0 to 40 {
        loop.for %i3 = 0 to 40 {
          %16 = loop.reduce add %r = 0 to 16 : f32 {
            %17 = loop.load %15[%i0, %i1, %i2, %r] : memref<1x4x40x16xbf16>
            %18 = loop.load %14[%i0, (%i1 floordiv 2), %i3, %r] : memref<1x2x40x16xbf16>
            %19 = arith.extf %17 : bf16 to f32
            %20 = arith.extf %18 : bf16 to f32
            %21 = arith.mulf %19, %20 : f32
            loop.yield %21 : f32
          }
          loop.store %16, %13[%i0, %i1, %i2, %i3, 0] : memref<1x4x40x40x1xf32>
        }
      }
    }
  }
}
%13 = memref.alloc() : memref<1x4x40x40xf32>
loop.kernel @elementwise_91 (%14 = %13 : memref<1x4x40x40xf32>, %15 = %12 : memref<1x4x40x40x1xf32>) {
  %16 = arith.constant 2.500000e-01 : f32
  %17 = arith.constant 0xff800000 : f32
  loop.for %i0 = 0 to 1 {
    loop.for %i1 = 0 to 4 {
      loop.for %i2 = 0 to 40 {
        %18 = loop.reduce max %r = 0 to 40 : f32 {
          %19 = loop.load %15[0, %i1, %i2, %r, 0] : memref<1x4x40x40x1xf32>
          %20 = arith.mulf %19, %16 : f32
          %21 = arith.cmpi sle, %r, %i2 : index
          %22 = arith.select %21, %20, %17 : f32
          loop.yield %22 : f32
        }
        loop.for %i3 = 0 to 40 {
          %23 = loop.load %15[0, %i1, %i2, %i3, 0] : memref<1x4x40x40x1xf32>
          %24 = arith.mulf %23, %16 : f32
          %25 = arith.cmpi sle, %i3, %i2 : index
          %26 = arith.select %25, %24, %17 : f32
          %27 = arith.subf %26, %18 : f32
          %28 = math.exp %27 : f32
          loop.store %28, %14[%i0, %i1, %i2, %i3] : memref<1x4x40x40xf32>
        }
      }
    }
  }
}
%14 = memref.alloc() : memref<1x4x40x1xf32>
loop.kernel @reduce_92 (%15 = %13 : memref<1x4x40x40xf32>, %16 = %14 : memref<1x4x40x1xf32>) {
  loop.for %i0 = 0 to 1 {
    loop.for %i1 = 0 to 4 {
      loop.for %i2 = 0 to 40 {
        %17 = loop.reduce add %r = 0 to 40 : f32 {
          %18 = loop.load %15[%i0, %i1, %i2, %r] : memref<1x4x40x40xf32>
          loop.yield %18 : f32
        }
        loop.store %17, %16[%i0, %i1, %i2, 0] : memref<1x4x40x1xf32>
      }
    }
  }
}
%15 = memref.alloc() : memref<1x40x64xbf16>
loop.kernel @index_map_102 (%16 = %15 : memref<1x40x64xbf16>, %17 = %v : memref<1x2x40x16xbf16>, %18 = %13 : memref<1x4x40x40xf32>, %19 = %14 : memref<1x4x40x1xf32>) {
  loop.for %i0 = 0 to 1 {
    loop.for %i1 = 0 to 40 {
      loop.for %i2 = 0 to 64 {
        %20 = loop.load %19[0, (%i2 floordiv 16), %i1, 0] : memref<1x4x40x1xf32>
        %21 = loop.reduce add %r = 0 to 40 : f32 {
          %22 = loop.load %18[0, (%i2 floordiv 16), %i1, %r] : memref<1x4x40x40xf32>
          %23 = loop.load %17[0, ((%i2 floordiv 16) floordiv 2), %r, (%i2 mod 16)] : memref<1x2x40x16xbf16>
          %24 = arith.extf %23 : bf16 to f32
          %25 = arith.mulf %22, %24 : f32
          loop.yield %25 : f32
        }
        %26 = arith.divf %21, %20 : f32
        %27 = arith.truncf %26 : f32 to bf16
        loop.store %27, %16[%i0, %i1, %i2] : memref<1x40x64xbf16>
      }
    }
  }
}  func.return %15 : memref<1x40x64xbf16>
}

// CHECK:      tile.kernel @index_map_102
// CHECK-NOT:  loop.kernel
// CHECK:        %qs = tile.alloc shared {{.*}}: memref<16x16xbf16>
// CHECK:        %vs = tile.alloc shared {{.*}}: memref<16x16xbf16>
// CHECK-NEXT:   %pb = tile.alloc shared {{.*}}: memref<16x16xbf16>
// CHECK-NEXT:   %m_run = tile.alloc registers : memref<1x2x8x4x1x2xf32>
// CHECK:        %pmax = tile.alloc shared {{.*}}: memref<16x8xf32>
// CHECK-NOT:    %ps = tile.alloc
// CHECK:        %[[Q:.*]] = loop.load %{{.*}} clamp : memref<1x4x40x16xbf16>
// CHECK-NEXT:   loop.store %[[Q]], %qs
// CHECK:        %[[QK:.*]] = loop.load %qs
// CHECK-NEXT:   arith.extf %[[QK]] : bf16 to f32
// The masked scores stay in s, not yet scaled (the softmax scales them by 1/sqrt(16)); each
// thread's row maxima go to pmax.
// CHECK:        loop.store %{{.*}}, %s[
// CHECK:        } {llmopt.role = "scores"
// CHECK:        loop.reduce max {{.*}} = 0 to 2 : f32 {
// CHECK-NEXT:     loop.load %s[
// CHECK:        loop.store %{{.*}}, %pmax[
// CHECK:        %[[RAW:.*]] = loop.reduce max {{.*}} : f32 {
// CHECK-NEXT:     loop.load %pmax[
// CHECK:        %[[SCALE:.*]] = arith.constant 2.500000e-01 : f32
// CHECK-NEXT:   %[[MAX:.*]] = arith.mulf %[[RAW]], %[[SCALE]] : f32
// CHECK:        arith.maximumf %{{.*}}, %[[MAX]] : f32
// CHECK:        loop.store %{{.*}}, %m_run[
// A 16-bit P is exp2(c·s · log2 e - m · log2 e), rounded once: m · log2 e once a row, then a
// multiply-add by c · log2 e and an exp2 that may approximate a score. The row sums (s) add
// p unrounded.
// CHECK:        %[[ML:.*]] = arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK-NEXT:   %[[SHIFT:.*]] = arith.negf %[[ML]] : f32
// CHECK:        %[[L2E:.*]] = arith.constant 0.3606737{{.*}} : f32
// CHECK-NEXT:   %[[X:.*]] = math.fma %{{.*}}, %[[L2E]], %[[SHIFT]] : f32
// CHECK-NEXT:   %[[P:.*]] = math.exp2 %[[X]] fastmath<afn> : f32
// CHECK-NEXT:   %[[PB:.*]] = arith.truncf %[[P]] : f32 to bf16
// CHECK-NEXT:   loop.store %[[PB]], %pb
// CHECK-NEXT:   loop.store %[[P]], %s
// CHECK:        loop.store %{{.*}}, %psum[
// CHECK:        loop.load %psum[
// CHECK:        loop.load %corr[
// CHECK:        } {llmopt.role = "rescale"
// CHECK:        loop.load %pb
// CHECK:        loop.load %vs
// CHECK:        } {llmopt.role = "row_stats"}
// CHECK:        arith.truncf %{{.*}} : f32 to bf16
// CHECK:      } {llmopt.flash = "16x16", llmopt.schedule = {carry = 1 : i64, min_blocks = 2 : i64}}
// CHECK-NOT:  loop.kernel

// SHARED:       %ps = tile.alloc shared {{.*}}: memref<16x16xf32>
// SHARED-NEXT:  %pb = tile.alloc shared {{.*}}: memref<16x16xbf16>
// SHARED:       %[[SH:.*]] = arith.negf
// SHARED:       loop.store %[[SH]], %shift
// SHARED:       loop.load %shift
// SHARED-NEXT:  arith.constant
// SHARED-NEXT:  math.fma
// SHARED-NEXT:  %[[P:.*]] = math.exp2 {{.*}} fastmath<afn>
// SHARED-NEXT:  %[[PB:.*]] = arith.truncf %[[P]] : f32 to bf16
// SHARED-NEXT:  loop.store %[[PB]], %pb
// SHARED:       loop.reduce add
// SHARED-NEXT:    loop.load %pb
// SHARED-NEXT:    arith.extf

// With rescale_margin=8 a row's maximum moves only past 2^8 (ln 2 · 8 = 5.545), and a
// row of the output is rescaled only when its factor is not 1 (rescale_margin=0: the
// branch alone, the maximum moving at every increase).
// MARGIN:      arith.maximumf
// MARGIN-NEXT: arith.constant 5.54517746 : f32
// MARGIN-NEXT: arith.addf
// MARGIN-NEXT: arith.cmpf ogt
// MARGIN-NEXT: arith.select
// MARGIN:      arith.cmpf une, %{{.*}}, %{{.*}} : f32
// MARGIN-NEXT: scf.if
// MARGIN:      arith.mulf
// MARGIN:      } {llmopt.role = "rescale", llmopt.layout = "mma"}

// NUM: flash-attention {{.*}} ok
// NUM: mma-fragments {{.*}} ok
// NUM: tile-to-kernel {{.*}} ok

// The registers are capped for two blocks a multiprocessor (min_blocks = 2, the default).
// CUDA:      __launch_bounds__(64, 2) index_map_102(
// CUDA:      __nv_bfloat16 ks[
// CUDA:      __nv_bfloat16 vs[
// CUDA:      __pipeline_memcpy_async(&ks[{{.*}}], 16);
// CUDA:      ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CUDA:      mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// CUDA:      asm("ex2.approx.ftz.f32 %0, %1;" : "=f"([[EX:.*]]) : "f"(fmaf(s[
// CUDA-NEXT: pb[{{.*}}] = __float2bfloat16([[EX]]);
// CUDA:      ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {{.*}}&vs[
// CUDA:      mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32

// NOCAP:      __launch_bounds__(64) index_map_102(

// WIDE:       %qs = tile.alloc shared {{.*}}: memref<16x16xf32>
// WIDE-NOT:   %pb
// WIDE:       loop.load %{{.*}} clamp : memref<1x4x40x16xbf16>
// WIDE-NEXT:  arith.extf %{{.*}} : bf16 to f32
