// RUN: llm-opt %s | llm-opt | filecheck %s
// RUN: llm-opt %s --print-op-generic | llm-opt | filecheck %s
// RUN: llm-opt %s -p kernel-to-cuda -t cuda | filecheck %s --check-prefix=CUDA
// Two slots handed from the second warp (the producer) to the first (the consumer): the
// producer copies in[8·s, 8·s + 8) into slot s and arrives on full[s] when the copy lands;
// the consumer waits for full[s], doubles the slot into out and releases it on empty[s].
// test/interp/test_mbarrier.py runs it, and variants that drop a wait or an arrival.

kernel.func @handoff(%out: memref<16xf32>, %in: memref<16xf32>) block [64, 1, 1] {
  %slots = kernel.shared : memref<2x8xf32>
  %bars = kernel.shared : memref<2x2xi64>
  %tid = kernel.thread_id x
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c32 = arith.constant 32 : index
  %two = arith.constant 2.0 : f32
  %first = arith.cmpi eq, %tid, %c0 : index
  scf.if %first {
    mbarrier.init %bars[%c0, %c0] count 2 : memref<2x2xi64>
    mbarrier.init %bars[%c0, %c1] count 2 : memref<2x2xi64>
    mbarrier.init %bars[%c1, %c0] count 8 : memref<2x2xi64>
    mbarrier.init %bars[%c1, %c1] count 8 : memref<2x2xi64>
  }
  kernel.barrier
  %consumer = arith.cmpi ult, %tid, %c8 : index
  %producer_lane = arith.subi %tid, %c32 : index
  %producer = arith.cmpi ult, %producer_lane, %c2 : index
  scf.for %s = %c0 to %c2 step %c1 {
    scf.if %producer {
      mbarrier.wait %bars[%c1, %s] parity %c1 : memref<2x2xi64>
      %lane = arith.muli %producer_lane, %c4 : index
      %base = arith.muli %s, %c8 : index
      %at = arith.addi %base, %lane : index
      kernel.async_copy %in[%at] to %slots[%s, %lane] count 4 : memref<16xf32> to memref<2x8xf32>
      mbarrier.arrive_copies %bars[%c0, %s] : memref<2x2xi64>
    }
    scf.if %consumer {
      mbarrier.wait %bars[%c0, %s] parity %c0 : memref<2x2xi64>
      %v = kernel.load %slots[%s, %tid] : memref<2x8xf32>
      %w = arith.mulf %v, %two : f32
      %base = arith.muli %s, %c8 : index
      %at = arith.addi %base, %tid : index
      kernel.store %w, %out[%at] : memref<16xf32>
      mbarrier.arrive %bars[%c1, %s] : memref<2x2xi64>
    }
  }
  kernel.return
}

func.func @main(%in: memref<16xf32>) -> memref<16xf32> {
  %out = memref.alloc() : memref<16xf32>
  kernel.launch @handoff grid [1, 1, 1] block [64, 1, 1] smem 0 (%out, %in) : memref<16xf32>, memref<16xf32>
  func.return %out : memref<16xf32>
}

// CHECK:      mbarrier.init %{{.*}}[%{{.*}}, %{{.*}}] count 2 : memref<2x2xi64>
// CHECK:      mbarrier.wait %{{.*}}[%{{.*}}, %{{.*}}] parity %{{.*}} : memref<2x2xi64>
// CHECK:      mbarrier.arrive_copies %{{.*}}[%{{.*}}, %{{.*}}] : memref<2x2xi64>
// CHECK:      mbarrier.wait
// CHECK:      mbarrier.arrive %{{.*}}[%{{.*}}, %{{.*}}] : memref<2x2xi64>

// CUDA:       __shared__ __align__(16) long long bars[4];
// CUDA:       mbarrier.init.shared::cta.b64 [%0], %1;" :  : "r"((unsigned int)__cvta_generic_to_shared(&bars[0])), "r"(2)
// CUDA:       mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1; @!p bra WAIT; }
// CUDA:       cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];
// CUDA:       mbarrier.arrive.shared::cta.b64 _, [%0];
