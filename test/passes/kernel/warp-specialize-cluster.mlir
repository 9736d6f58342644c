// RUN: llm-opt %s -p 'lower-to-cuda{arch=sm_90a cluster=2 roles=2}' --print-ir-after warp-specialize 2>&1 >/dev/null | filecheck %s
// RUN: llm-opt %s -p 'lower-to-cuda{arch=sm_90a cluster=2 roles=2}' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %s -p 'lower-to-cuda{arch=sm_90a cluster=2 roles=2}' -t cuda | filecheck %s --check-prefix=CUDA
// RUN: llm-opt %s -p 'lower-to-cuda{arch=sm_90a cluster=1 roles=2}' -t cuda | filecheck %s --check-prefix=NONE
// A 200 × 512 × 256 bf16 product with a residual, two roles, in clusters of two blocks.
// Its 64 × 128 tiles are numbered row band fastest (four row bands), so blocks 2c and 2c+1
// compute two row bands of one column band and read the same weight tile. Each block's
// producer copies its own activations' tile and half the weight tile (64 of its 128 rows)
// into the slot of both blocks: the weight's tma.load is a multicast, and each block's
// full barrier still expects the whole slot's bytes from one arrival. A slot is refilled by
// both producers, so its empty barrier counts one release a consumer warpgroup of each
// block (count 2): thread r of a warpgroup arrives on block r's barrier. A cluster barrier
// follows the barriers' initialisation, and after its last tile each block's producer
// waits for the four slots' last releases. The interpreters give the same bits (the
// multicast part lands in both blocks); the CUDA source declares the cluster, computes the
// part from %cluster_ctarank and multicasts to both blocks (mask 3). With cluster=1 the
// kernel is specialised without clusters.

// CHECK:      kernel.func @elementwise_6({{.*}}) block [256, 1, 1] cluster 2 {
// CHECK-COUNT-4: mbarrier.init %bars[{{.*}}] count 1 : memref<2x4xi64>
// CHECK-COUNT-4: mbarrier.init %bars[{{.*}}] count 2 : memref<2x4xi64>
// CHECK:        kernel.cluster_barrier
// CHECK:          mbarrier.wait %bars
// CHECK:            mbarrier.arrive_cluster %bars[%{{.*}}, %{{.*}}] cta %{{.*}} : memref<2x4xi64>
// CHECK:        } {llmopt.role = "ws_loop"}
// CHECK:            tma.load %{{.*}} to %stage[%{{.*}}] on %bars[%{{.*}}, %{{.*}}] : memref<1x200x256xbf16>
// CHECK:            tma.load %{{.*}} to %stage_1[%{{.*}}] on %bars[%{{.*}}, %{{.*}}] multicast 2 : memref<512x256xbf16> to memref<4x128x64xbf16>
// CHECK:        } {llmopt.role = "ws_loop"}
// CHECK-COUNT-4: mbarrier.wait %bars

// NUM:        warp-specialize {{.*}} ok
// NUM:        programmatic-launch {{.*}} ok

// CUDA:       __cluster_dims__(2, 1, 1)
// CUDA:       barrier.cluster.arrive.release;
// CUDA:       barrier.cluster.wait.acquire;
// CUDA:       mapa.shared::cluster.u32 remote, %0, %1; mbarrier.arrive.shared::cluster.b64 _, [remote];
// CUDA:       mov.u32 rk, %%cluster_ctarank; mad.lo.u32 at, rk, 8192, %0; mad.lo.s32 crd, rk, 64, %3; mov.b16 mask, 3; cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [at], [%1, {%2, crd}], [%4], mask;

// NONE-NOT:   __cluster_dims__
// NONE-NOT:   multicast

func.func @forward(%proj.weight: tensor<512x256xbf16> {llmopt.param = "proj.weight"},
                   %x: tensor<1x200x256xbf16> {llmopt.input = "x"},
                   %r: tensor<1x200x512xbf16> {llmopt.input = "r"}) -> tensor<1x200x512xbf16> {
  %0 = torch.linear %x, %proj.weight : tensor<1x200x256xbf16>, tensor<512x256xbf16> -> tensor<1x200x512xbf16>
  %1 = torch.add %0, %r : tensor<1x200x512xbf16>, tensor<1x200x512xbf16> -> tensor<1x200x512xbf16>
  func.return %1 : tensor<1x200x512xbf16>
}
