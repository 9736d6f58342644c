// RUN: llm-opt %S/Inputs/wgmma-fragments-kn.mlir -p 'wgmma-fragments{arch=sm_90a}' | filecheck %s
// RUN: llm-opt %S/Inputs/wgmma-fragments-kn.mlir -p 'wgmma-fragments{arch=sm_90a n_major=false}' | filecheck %s --check-prefix=OFF
// RUN: llm-opt %S/Inputs/wgmma-fragments-kn.mlir -p 'wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda{arch=sm_90a}' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %S/Inputs/wgmma-fragments-kn.mlir -p 'wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda{arch=sm_90a}' -t cuda | filecheck %s --check-prefix=CUDA
// x·W with W stored [K, N]: the W tile keeps k in its rows, [slot, kk, n]. By default (n_major)
// wgmma-fragments reads it N-major: four chained wgmma.mma (k = 0, 16, 32, 48) whose b starts
// at row 16·q, column 0, marked transposed; both tiles swizzled. The descriptor of such a b
// carries the distance between atoms of 64 columns (64 rows of 128 bytes: 8192 / 16 = 512 in
// bits 16-29) and the instruction imm-trans-b = 1. With n_major=false the tile is
// left to mma-fragments (ldmatrix.trans).

// CHECK:      %stage = tile.alloc shared {llmopt.pad = 8 : i64, llmopt.swizzle = 128 : i64} : memref<3x64x64xbf16>
// CHECK-NEXT: %stage_1 = tile.alloc shared {llmopt.pad = 8 : i64, llmopt.swizzle = 128 : i64} : memref<3x64x64xbf16>
// CHECK:      wgmma.fence
// CHECK-NEXT: %{{.*}} = wgmma.mma %stage[%slot, %{{.*}}, %[[Z:.*]]], %stage_1[%slot, %[[Z]], %[[Z]]] transposed + (
// CHECK-COUNT-3: wgmma.mma %stage[%slot, %{{.*}}, %[[K:.*]]], %stage_1[%slot, %[[K]], %[[Z]]] transposed + (
// CHECK-NEXT: wgmma.commit

// OFF:     scf.for %kk
// OFF-NOT: wgmma

// NUM: wgmma-fragments {{.*}} ok
// NUM: tile-to-kernel {{.*}} ok

// CUDA:          | 0x4000004002000000ull;
// CUDA-COUNT-4:  wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 0, 1; }
