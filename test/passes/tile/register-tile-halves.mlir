// RUN: llm-opt %S/Inputs/linear-bf16-symbolic.mlir -p 'torch-to-prim,canonicalize,prim-to-loop,fuse-kernels{recompute_limit=0},canonicalize,cse,loop-to-tile,split-k{split_k=1},register-tile{bm=128 bn=256 tm=8 tn=16 blocked=3}' | filecheck %s
// RUN: llm-opt %S/Inputs/linear-bf16-symbolic.mlir -p 'torch-to-prim,canonicalize,prim-to-loop,fuse-kernels{recompute_limit=0},canonicalize,cse,loop-to-tile,split-k{split_k=1},register-tile{bm=128 bn=256 tm=8 tn=16 blocked=3 raster=1}' | filecheck %s --check-prefix=COLS
// RUN: llm-opt %S/Inputs/linear-bf16-symbolic.mlir -p 'torch-to-prim,canonicalize,prim-to-loop,fuse-kernels{recompute_limit=0},canonicalize,cse,loop-to-tile,split-k{split_k=1},register-tile{bm=128 bn=256 tm=8 tn=16 blocked=3},stage-inputs,async-copy,prefetch-stages,pad-shared,mma-fragments,vector-fragments,tile-to-kernel,canonicalize,cse,kernel-to-cuda' -t cuda | filecheck %s --check-prefix=CUDA
// RUN: llm-opt %S/Inputs/linear-bf16-symbolic.mlir -p 'torch-to-prim,canonicalize,prim-to-loop,fuse-kernels{recompute_limit=0},canonicalize,cse,loop-to-tile,split-k{split_k=1},register-tile{bm=128 bn=256 tm=8 tn=16 blocked=3},stage-inputs,async-copy,prefetch-stages,pad-shared,mma-fragments,vector-fragments,tile-to-kernel' --check-numerics --check-numerics-at 300 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %S/Inputs/linear-bf16.mlir -p lower-to-cuda -t cuda | filecheck %s --check-prefix=PIPE
// 16-bit products on the tensor cores in warp tiles of 64 × 64 (tm = 8, tn = 16: 128
// accumulators a thread): a 128 × 256 block is 2 × 4 warps. A bf16 x·Wᵀ over a symbolic
// number of rows (at most 300, three row tiles, the last ragged) and 300 columns (two tiles
// of 256, the second ragged). Its blocks take the tiles down the columns first (raster=2,
// the default of 16-bit tensor-core products): consecutive blocks read the same rows of W.

// CHECK:      tile.forall (%{{.*}}, %[[BN:bn]], %[[BM:bm]]) in [1, 2, %{{.*}} max 3] over blocks {
// CHECK-NEXT:   %acc = tile.alloc registers : memref<2x4x8x4x4x2x8x2xf32>
// CHECK-NEXT:   tile.forall (%wi, %wj, %g, %t) in [2, 4, 8, 4] over block_threads {
// raster=1: along the rows of tiles first.
// COLS:       tile.forall (%{{.*}}, %bm, %bn) in [1, %{{.*}} max 3, 2] over blocks {

// The m tile is the block index modulo the (runtime) number of row tiles, in int: the
// length is at most the symbol's maximum (300). Per step of 16,
// a warp loads four A fragments (ldmatrix.x4, 16 rows each) and four pairs of B fragments
// (ldmatrix.x4, two 8-column pieces each) for 4 × 8 mma.sync.
// CUDA:       __launch_bounds__(256)
// CUDA:       float acc[128];
// CUDA:       const int bm = (int)((unsigned int)p % (unsigned int)[[ROWS:v[0-9]+]]);
// CUDA-NEXT:  const int bn = (int)((unsigned int)p / (unsigned int)[[ROWS]]);
// CUDA:       for (int kq = 0; kq < 2; kq += 1) {
// CUDA-COUNT-8: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CUDA-COUNT-32: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// CUDA-NOT:   ldmatrix
// CUDA-NOT:   mma.sync

// NUM:        register-tile {{.*}} ok
// NUM:        mma-fragments {{.*}} ok
// NUM:        tile-to-kernel {{.*}} ok
// NUM-NOT:    FAIL

// The heuristics on a 512 × 2048 × 2048 bf16 projection: 128 × 256 blocks of 64 × 64 warp
// tiles, the four row tiles fastest, indices in int (16-bit tensor-core kernels).
// PIPE:       __launch_bounds__(256) elementwise_5_split(
// PIPE:       float acc[128];
// PIPE:       const int bm = (int)((unsigned int)p % 4u);
