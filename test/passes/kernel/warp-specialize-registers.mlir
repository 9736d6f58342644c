// RUN: llm-opt %S/Inputs/wgmma-k512.mlir -p 'wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,warp-specialize{pending=1 producer_registers=40 consumer_registers=232}' | filecheck %s
// RUN: llm-opt %S/Inputs/wgmma-k512.mlir -p 'wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,warp-specialize{pending=1 producer_registers=40 consumer_registers=232}' | filecheck %s --check-prefix=ROLES
// RUN: llm-opt %S/Inputs/wgmma-k512.mlir -p 'wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,warp-specialize{pending=1 producer_registers=40 consumer_registers=232},canonicalize,cse,kernel-to-cuda{arch=sm_90a}' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %S/Inputs/wgmma-k512.mlir -p 'wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,warp-specialize{pending=0 producer_registers=40 consumer_registers=232},canonicalize,cse' --check-numerics 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// RUN: llm-opt %S/Inputs/wgmma-k512.mlir -p 'wgmma-fragments{arch=sm_90a},pad-shared,mma-fragments,vector-fragments,tile-to-kernel,warp-specialize{pending=1 producer_registers=40 consumer_registers=232},canonicalize,cse,kernel-to-cuda{arch=sm_90a}' -t cuda | filecheck %s --check-prefix=CUDA
// RUN: not llm-opt %S/Inputs/wgmma-k512.mlir -p 'warp-specialize{producer_registers=40}' 2>&1 | filecheck %s --check-prefix=ONE
// RUN: not llm-opt %S/Inputs/wgmma-k512.mlir -p 'warp-specialize{producer_registers=44 consumer_registers=232}' 2>&1 | filecheck %s --check-prefix=RANGE
// The product of warp-specialize.mlir (one consumer warpgroup, eight K chunks through three
// slots), with registers a role: after the barriers' initialisation and its block barrier,
// the body is one scf.if on the role test (thread id < 128) whose branches run to the end of
// the kernel. The consumers' branch opens with kernel.set_max_registers inc 232 and holds
// the accumulators' initialisation, the products and the epilogue, its loop of steps
// starting at 2 (D) with no guard; the producer's opens with kernel.set_max_registers dec 40
// and holds only the copies, its loop running the eight chunks 0 … 8. Neither branch tests
// the role again. The kernel asks for one resident block (min_blocks = 1:
// __launch_bounds__(256, 1)), and the CUDA source writes setmaxnreg. The interpreters run
// both branches beside each other (the consumers wait for slots only the producer's later
// steps fill) and get the unsplit kernel's bits, with the products left in flight across a
// step or not. The two options come together, as multiples of 8 from 24 to 256.

// CHECK:      kernel.func @elementwise_5({{.*}}) block [256, 1, 1] {
// CHECK:        %bars = kernel.shared : memref<2x3xi64>
// CHECK-COUNT-6: mbarrier.init
// CHECK:        kernel.barrier
// CHECK-NEXT:   %[[TID:.*]] = kernel.thread_id x
// CHECK-NEXT:   %[[C:.*]] = arith.constant 128 : index
// CHECK-NEXT:   %[[ROLE:.*]] = arith.cmpi ult, %[[TID]], %[[C]] : index
// CHECK-NEXT:   scf.if %[[ROLE]] {
// CHECK-NEXT:     kernel.set_max_registers inc 232
// CHECK:          scf.for %p =
// CHECK:            kernel.store {{.*}} %acc
// CHECK:            %[[D:.*]] = arith.constant 2 : index
// CHECK:            scf.for %it = %[[D]] to %{{.*}} step %{{.*}} {
// CHECK:              mbarrier.wait %bars
// CHECK:              wgmma.mma
// CHECK:              wgmma.wait 1
// CHECK:              mbarrier.arrive %bars
// CHECK:              wgmma.wait 0
// CHECK:            } {llmopt.role = "ws_loop"}
// CHECK-NOT:        wgmma.wait
// CHECK:            mbarrier.arrive %bars
// CHECK:            kernel.async_wait 0
// CHECK:            kernel.store
// CHECK:        } else {
// CHECK-NEXT:     kernel.set_max_registers dec 40
// CHECK:          scf.for %p_1 =
// CHECK:            %[[ZERO:.*]] = arith.constant 0 : index
// CHECK:            %[[K:.*]] = arith.constant 8 : index
// CHECK:            scf.for %it_1 = %[[ZERO]] to %[[K]] step %{{.*}} {
// CHECK:              mbarrier.wait %bars
// CHECK:              kernel.async_copy
// CHECK:              mbarrier.arrive_copies %bars
// CHECK:            } {llmopt.role = "ws_loop"}
// CHECK-NEXT:       kernel.async_wait 0
// CHECK-NEXT:     }
// CHECK-NEXT:   }
// CHECK-NEXT:   kernel.return
// CHECK-NEXT: } {llmopt.schedule = {min_blocks = 1 : i64}}
// CHECK:      kernel.launch @elementwise_5 grid [4, 1, 1] block [256, 1, 1]

// ROLES:      kernel.set_max_registers inc 232
// ROLES-NOT:  arith.cmpi ult
// ROLES-NOT:  kernel.async_copy
// ROLES-NOT:  mbarrier.arrive_copies
// ROLES-NOT:  kernel.set_max_registers
// ROLES:      } else {
// ROLES-NEXT:   kernel.set_max_registers dec 40
// ROLES-NOT:  arith.cmpi ult
// ROLES-NOT:  wgmma.
// ROLES-NOT:  kernel.store
// ROLES-NOT:  mbarrier.arrive %
// ROLES-NOT:  kernel.set_max_registers
// ROLES:      kernel.return

// NUM:        warp-specialize {{.*}} ok
// NUM:        cse {{.*}} ok

// CUDA:       __launch_bounds__(256, 1) elementwise_5(
// CUDA:       mbarrier.init.shared::cta.b64
// CUDA:       __syncthreads();
// CUDA-NEXT:  if ({{.*}} < 128{{.*}}) {
// CUDA-NEXT:    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;" ::: "memory");
// CUDA:         for (long long it = 2; it < 10; it += 1) {
// CUDA:           mbarrier.try_wait.parity.shared::cta.b64
// CUDA:           wgmma.mma_async
// CUDA:       } else {
// CUDA-NEXT:    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;" ::: "memory");
// CUDA:         for (long long it1 = 0; it1 < 8; it1 += 1) {
// CUDA:           mbarrier.try_wait.parity.shared::cta.b64
// CUDA:           __pipeline_memcpy_async
// CUDA:           cp.async.mbarrier.arrive.noinc.shared::cta.b64
// CUDA:         __pipeline_wait_prior(0);
// CUDA-NEXT:    }
// CUDA-NEXT:  }
// CUDA-NEXT: }

// ONE:        producer_registers and consumer_registers are given together (got 40 and 0)
// RANGE:      producer_registers must be an integer from 24 to 256, a multiple of 8 or 0 (not set), got 44
