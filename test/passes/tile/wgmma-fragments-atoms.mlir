// RUN: llm-opt %S/Inputs/wgmma-fragments-wide.mlir -p 'wgmma-fragments{arch=sm_90a atoms=2}' | filecheck %s
// RUN: llm-opt %S/Inputs/wgmma-fragments-wide.mlir -p 'wgmma-fragments{arch=sm_90a atoms=1}' | filecheck %s --check-prefix=ONE
// RUN: llm-opt %S/Inputs/wgmma-fragments-wide.mlir -p 'wgmma-fragments{arch=sm_90a atoms=2},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda{arch=sm_90a}' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %S/Inputs/wgmma-fragments-wide.mlir -p 'wgmma-fragments{arch=sm_90a atoms=2},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda{arch=sm_90a}' -t cuda | filecheck %s --check-prefix=CUDA
// RUN: not llm-opt %S/Inputs/wgmma-fragments-wide.mlir -p 'wgmma-fragments{arch=sm_90a atoms=3}' 2>&1 | filecheck %s --check-prefix=BAD
// A bf16 x·Wᵀ (M = 128, N = 64, K = 256) after register-tile{bm=64 bn=64 tm=2 tn=16
// blocked=3}, stage-inputs{bk=128}, async-copy and prefetch-stages: a warpgroup's m64n64
// accumulator, chunks of 128 bf16, tile rows of 256 bytes. With atoms=2 the chunk loop
// becomes eight chained wgmma.mma (k = 0, 16, …, 112) and both tiles are swizzled; CUDA lays
// each 64 x 128 tile out as two atoms of 64 x 64, 4096 values apart, the column's atom
// (c >> 6) first, then its chunk in the atom's row (c & 63) xor the row's place in its group.
// With atoms=1 a chunk of 128 is left to mma-fragments.

// CHECK:      %stage = tile.alloc shared {llmopt.pad = 8 : i64, llmopt.swizzle = 128 : i64} : memref<3x64x128xbf16>
// CHECK-NEXT: %stage_1 = tile.alloc shared {llmopt.pad = 8 : i64, llmopt.swizzle = 128 : i64} : memref<3x64x128xbf16>
// CHECK-NOT:  scf.for %kk
// CHECK:      wgmma.fence
// CHECK-COUNT-8: wgmma.mma %stage[%slot, %{{.*}}, %{{.*}}], %stage_1[%slot, %{{.*}}, %{{.*}}] + ({{.*}}) : memref<3x64x128xbf16>, memref<3x64x128xbf16>
// CHECK-NEXT: wgmma.commit
// CHECK-NEXT: wgmma.wait 0

// ONE:     scf.for %kk
// ONE-NOT: wgmma

// NUM: wgmma-fragments {{.*}} ok
// NUM: tile-to-kernel {{.*}} ok

// CUDA:      extern __shared__ __align__(1024) unsigned char smem[];
// CUDA:      __pipeline_memcpy_async(&stage[p * 8192 + c0 * 64 + (v2 >> 6) * 4096 + ((v2 & 63) ^ ((c0 & 7) * 8))]
// CUDA-COUNT-8: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16

// BAD: invalid options for pass 'wgmma-fragments': atoms must be one of 1, 2, got 3
