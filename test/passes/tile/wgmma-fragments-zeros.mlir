// RUN: llm-opt %s -p 'torch-to-prim,canonicalize,prim-to-loop,fuse-kernels{recompute_limit=0},canonicalize,cse,hoist-reduce-factors,flash-attention{arch=sm_90a bm=64 bn=64},loop-to-tile{arch=sm_90a},async-copy{arch=sm_90a},wgmma-fragments{arch=sm_90a}' | filecheck %s
// RUN: llm-opt %s -p 'torch-to-prim,canonicalize,prim-to-loop,fuse-kernels{recompute_limit=0},canonicalize,cse,hoist-reduce-factors,flash-attention{arch=sm_90a bm=64 bn=64},loop-to-tile{arch=sm_90a},async-copy{arch=sm_90a},wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda{arch=sm_90a}' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'torch-to-prim,canonicalize,prim-to-loop,fuse-kernels{recompute_limit=0},canonicalize,cse,hoist-reduce-factors,flash-attention{arch=sm_90a bm=64 bn=64},loop-to-tile{arch=sm_90a},async-copy{arch=sm_90a},wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda{arch=sm_90a}' -t cuda | filecheck %s --check-prefix=CUDA
// A flash kernel's scores on warpgroup products (sm_90a, blocks of 64 x 64; causal, GQA,
// 130 tokens: the last key block overhangs). Each key block computes its score tile
// afresh: the forall that zeroed it goes, and the first of the four products of the tile
// starts from zero (`+ zeros(32)`, no loads of the tile before the fence), the next three
// add to it. In CUDA the first product's accumulators are declared without a value and
// its scale-d operand is 0. The output of P·V keeps its zeroing (once a block) and adds.

// CHECK:       scf.for %kb =
// CHECK-NOT:     llmopt.role = "init"
// CHECK:         wgmma.fence
// CHECK-NEXT:    = wgmma.mma %qs[{{.*}}], %ks[{{.*}}] + zeros(32) : memref<64x64xbf16>, memref<3x64x64xbf16>
// CHECK-NEXT:    = wgmma.mma %qs[{{.*}}], %ks[{{.*}}] + (%{{[0-9]+}}, %{{[0-9]+}},
// CHECK-NEXT:    = wgmma.mma {{.*}} + (
// CHECK-NEXT:    = wgmma.mma {{.*}} + (
// CHECK-NEXT:    wgmma.commit

// NUM-NOT: FAIL
// NUM: wgmma-fragments {{.*}} ok
// NUM: tile-to-kernel {{.*}} ok

// CUDA:      float wg0;
// CUDA-NOT:  float wg0 =
// CUDA:      wgmma.fence.sync.aligned;" : "+f"(wg0)
// CUDA:      wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}} : "l"(desc), "l"(desc1), "r"(0) : "memory");
// CUDA:      wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}} : "l"(desc2), "l"(desc3), "r"(1) : "memory");

builtin.module {
  func.func @forward(%q: tensor<1x2x130x64xbf16> {llmopt.input = "q"}, %k: tensor<1x1x130x64xbf16> {llmopt.input = "k"}, %v: tensor<1x1x130x64xbf16> {llmopt.input = "v"}) -> tensor<1x2x130x64xbf16> {
    %sdpa = torch.sdpa %q, %k, %v {is_causal = true, scale = 0.125, enable_gqa = true} : tensor<1x2x130x64xbf16>, tensor<1x1x130x64xbf16>, tensor<1x1x130x64xbf16> -> tensor<1x2x130x64xbf16>
    func.return %sdpa : tensor<1x2x130x64xbf16>
  }
}
