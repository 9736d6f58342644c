// RUN: llm-opt %S/Inputs/wgmma-fragments-registers.mlir -p 'wgmma-fragments{arch=sm_90a register_a=true}' | filecheck %s
// RUN: llm-opt %S/Inputs/wgmma-fragments-registers.mlir -p 'wgmma-fragments{arch=sm_90a}' | filecheck %s --check-prefix=OFF
// RUN: llm-opt %S/Inputs/wgmma-fragments-registers.mlir -p 'wgmma-fragments{arch=sm_90a register_a=true},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda{arch=sm_90a}' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: sed 's/bf16/f16/g' %S/Inputs/wgmma-fragments-registers.mlir | llm-opt -p 'wgmma-fragments{arch=sm_90a register_a=true},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda{arch=sm_90a}' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %S/Inputs/wgmma-fragments-registers.mlir -p 'wgmma-fragments{arch=sm_90a register_a=true},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda{arch=sm_90a}' -t cuda | filecheck %s --check-prefix=CUDA
// P·V with P written by the warps that own its rows, in the accumulator layout (the flash
// kernel with whole rows a warp), and V stored [key, column]. With register_a=true
// wgmma-fragments takes it: the writer also keeps P in a register tile, each of the four
// warpgroup products (k = 0, 16, 32, 48) reads four mma.pack pairs of it a thread (rows
// 16·w + g (+8), keys 16·q + 2·t (+8), as mma.sync's A fragment) and V N-major; the shared
// %p and its store go. By default the chunk loop is left to mma-fragments, which forwards P
// to mma.sync.

// CHECK:      %p_regs = tile.alloc registers : memref<4x1x8x4x1x2x8x2xbf16>
// CHECK-NOT:  %p = tile.alloc
// CHECK:      %vs = tile.alloc shared {llmopt.swizzle = 128 : i64} : memref<64x64xbf16>
// CHECK:      loop.store %{{.*}}, %p_regs[
// CHECK:      %[[A0:.*]] = mma.pack %{{.*}}, %{{.*}} : bf16
// CHECK:      wgmma.fence
// CHECK-NEXT: %{{.*}} = wgmma.mma (%[[A0]], %{{.*}}, %{{.*}}, %{{.*}}), %vs[%{{.*}}, %{{.*}}] transposed + (
// CHECK-COUNT-3: wgmma.mma (%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}), %vs[%{{.*}}, %{{.*}}] transposed + (
// CHECK-NEXT: wgmma.commit

// OFF:     scf.for %kk
// OFF-NOT: wgmma

// NUM: wgmma-fragments {{.*}} ok
// NUM: tile-to-kernel {{.*}} ok

// CUDA:         __bfloat16_as_ushort
// CUDA-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, {%32, %33, %34, %35}, %36, p, 1, 1, 1; }
