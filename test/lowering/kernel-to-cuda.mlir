// RUN: llm-opt %s --split-input-file -p "kernel-to-cuda{index_bitwidth=64}" | filecheck %s
// RUN: llm-opt %s --split-input-file -p "kernel-to-cuda{index_bitwidth=64}" -t cuda | filecheck %s --check-prefix=CUDA
// Each kernel.func becomes a cuda.kernel of the same name; the host function is kept.

// A grid-stride loop guarding an elementwise body: read-only buffers are const, single-use
// values inline, values used twice get const locals.
func.func @main(%x: memref<1000xf32>) -> memref<1000xf32> {
  %y = memref.alloc() : memref<1000xf32>
  kernel.launch @scale_exp grid [4, 1, 1] block [256, 1, 1] smem 0 (%x, %y) : memref<1000xf32>, memref<1000xf32>
  func.return %y : memref<1000xf32>
}
kernel.func @scale_exp(%x: memref<1000xf32>, %y: memref<1000xf32>) block [256, 1, 1] {
  %tid = kernel.thread_id x
  %bid = kernel.block_id x
  %bdim = kernel.block_dim x
  %gdim = kernel.grid_dim x
  %c1000 = arith.constant 1000 : index
  %t0 = arith.muli %bid, %bdim : index
  %start = arith.addi %t0, %tid : index
  %stride = arith.muli %gdim, %bdim : index
  scf.for %i = %start to %c1000 step %stride {
    %v = kernel.load %x[%i] : memref<1000xf32>
    %c2 = arith.constant 2.0 : f32
    %w = arith.mulf %v, %c2 : f32
    %e = math.exp %w : f32
    kernel.store %e, %y[%i] : memref<1000xf32>
  }
  kernel.return
}

// CHECK:      func.func @main(%x: memref<1000xf32>) -> memref<1000xf32> {
// CHECK:        kernel.launch @scale_exp grid [4, 1, 1] block [256, 1, 1] smem 0 (%x, %y)
// CHECK:      cuda.kernel @scale_exp(x : !cuda.ptr<f32, const> __restrict__, y : !cuda.ptr<f32> __restrict__) launch_bounds(256) {
// CHECK-NEXT:   %{{.*}} = cuda.builtin blockDim.x : ui32
// CHECK-NEXT:   %{{.*}} = cuda.cast %{{.*}} : ui32 to index
// CHECK-NEXT:   cuda.decl const bdim : index = %{{.*}}
// CHECK:        cuda.decl const stride : index = %{{.*}}
// CHECK:        cuda.for i : index = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:     %{{.*}} = cuda.var y : !cuda.ptr<f32>
// CHECK-NEXT:     %{{.*}} = cuda.var i : index
// CHECK-NEXT:     %[[DST:.*]] = cuda.index %{{.*}}[%{{.*}}] : !cuda.ptr<f32>, index
// CHECK-NEXT:     %{{.*}} = cuda.var x : !cuda.ptr<f32, const>
// CHECK-NEXT:     %{{.*}} = cuda.var i : index
// CHECK-NEXT:     %{{.*}} = cuda.index %{{.*}}[%{{.*}}] : !cuda.ptr<f32, const>, index
// CHECK-NEXT:     %{{.*}} = cuda.literal 2.000000e+00 : f32
// CHECK-NEXT:     %{{.*}} = cuda.binary "*" %{{.*}}, %{{.*}} : f32
// CHECK-NEXT:     %[[E:.*]] = cuda.call expf(%{{.*}}) : (f32) -> f32
// CHECK-NEXT:     cuda.assign %[[DST]] = %[[E]] : f32
// CHECK-NEXT:   }
// CHECK-NEXT: }
// CHECK-NOT:  kernel.func

// CUDA:      extern "C" __global__ void __launch_bounds__(256) scale_exp(
// CUDA-NEXT:     const float* __restrict__ x,
// CUDA-NEXT:     float* __restrict__ y) {
// CUDA-NEXT:   const long long bdim = (long long)blockDim.x;
// CUDA-NEXT:   const long long stride = (long long)gridDim.x * bdim;
// CUDA-NEXT:   for (long long i = (long long)blockIdx.x * bdim + (long long)threadIdx.x; i < 1000; i += stride) {
// CUDA-NEXT:     y[i] = expf(x[i] * 2.0f);
// CUDA-NEXT:   }
// CUDA-NEXT: }

// -----

// A block reduction: a strided loop with an accumulator, warp shuffles, one partial per warp
// in shared memory, a barrier, and a branch with a result.
kernel.func @rowsum(%x: memref<8x1000xf32>, %y: memref<8xf32>) block [64, 1, 1] {
  %red = kernel.shared : memref<2xf32>
  %tid = kernel.thread_id x
  %row = kernel.block_id x
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %c1000 = arith.constant 1000 : index
  %zero = arith.constant 0.0 : f32
  %part = scf.for %j = %tid to %c1000 step %c64 iter_args(%acc = %zero) -> (f32) {
    %v = kernel.load %x[%row, %j] : memref<8x1000xf32>
    %s = arith.addf %acc, %v : f32
    scf.yield %s : f32
  }
  %s16 = kernel.shuffle_xor %part, 16 : f32
  %a16 = arith.addf %part, %s16 : f32
  %lane = arith.remsi %tid, %c32 : index
  %warp = arith.divsi %tid, %c32 : index
  %is0 = arith.cmpi eq, %lane, %c0 : index
  scf.if %is0 {
    kernel.store %a16, %red[%warp] : memref<2xf32>
  }
  kernel.barrier
  %first = arith.cmpi slt, %tid, %c2 : index
  %p = scf.if %first -> (f32) {
    %q = kernel.load %red[%tid] : memref<2xf32>
    scf.yield %q : f32
  } else {
    scf.yield %zero : f32
  }
  %t1 = kernel.shuffle_xor %p, 1 : f32
  %b1 = arith.addf %p, %t1 : f32
  %t0 = arith.cmpi eq, %tid, %c0 : index
  scf.if %t0 {
    kernel.store %b1, %y[%row] : memref<8xf32>
  }
  kernel.return
}

// CHECK:      cuda.kernel @rowsum(x : !cuda.ptr<f32, const> __restrict__, y : !cuda.ptr<f32> __restrict__) launch_bounds(64) {
// CHECK-NEXT:   cuda.decl __shared__ red : f32[2]
// CHECK:        cuda.decl acc : f32 = %{{.*}}
// CHECK:        cuda.for j : index = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:          cuda.assign %{{.*}} = %{{.*}} : f32
// CHECK-NEXT:   }
// CHECK-NEXT:   %{{.*}} = cuda.literal 4294967295 : ui32
// CHECK-NEXT:   %{{.*}} = cuda.var acc : f32
// CHECK-NEXT:   %{{.*}} = cuda.literal 16 : i32
// CHECK-NEXT:   %{{.*}} = cuda.call __shfl_xor_sync(%{{.*}}, %{{.*}}, %{{.*}}) : (ui32, f32, i32) -> f32
// CHECK-NEXT:   cuda.decl const s16 : f32 = %{{.*}}
// CHECK:        %{{.*}} = cuda.call __syncthreads() : () -> !cuda.void
// CHECK-NEXT:   cuda.expr_stmt %{{.*}} : !cuda.void
// CHECK-NEXT:   cuda.decl p : f32
// CHECK:        cuda.if %{{.*}} {
// CHECK:        } else {

// CUDA:      extern "C" __global__ void __launch_bounds__(64) rowsum(
// CUDA-NEXT:     const float* __restrict__ x,
// CUDA-NEXT:     float* __restrict__ y) {
// CUDA-NEXT:   __shared__ __align__(16) float red[2];
// CUDA-NEXT:   const long long tid = (long long)threadIdx.x;
// CUDA-NEXT:   const long long row = (long long)blockIdx.x;
// CUDA-NEXT:   float acc = 0.0f;
// CUDA-NEXT:   for (long long j = tid; j < 1000; j += 64) {
// CUDA-NEXT:     acc = acc + x[row * 1000 + j];
// CUDA-NEXT:   }
// CUDA-NEXT:   const float s16 = __shfl_xor_sync(0xffffffffu, acc, 16);
// CUDA-NEXT:   const float a16 = acc + s16;
// CUDA-NEXT:   const long long warp = tid / 32;
// CUDA-NEXT:   if (tid % 32 == 0) {
// CUDA-NEXT:     red[warp] = a16;
// CUDA-NEXT:   }
// CUDA-NEXT:   __syncthreads();
// CUDA-NEXT:   float p;
// CUDA-NEXT:   if (tid < 2) {
// CUDA-NEXT:     p = red[tid];
// CUDA-NEXT:   } else {
// CUDA-NEXT:     p = 0.0f;
// CUDA-NEXT:   }
// CUDA-NEXT:   const float t1 = __shfl_xor_sync(0xffffffffu, p, 1);
// CUDA-NEXT:   const float b1 = p + t1;
// CUDA-NEXT:   if (tid == 0) {
// CUDA-NEXT:     y[row] = b1;
// CUDA-NEXT:   }
// CUDA-NEXT: }

// -----

// Integer division with MLIR's rounding, exact for negative operands; unsigned division
// through unsigned casts; f64 math; NaN-propagating maximum.
kernel.func @intdiv(%a: memref<16xi64>, %o: memref<16x4xi64>, %f: memref<16xf64>) block [16, 1, 1] {
  %t = kernel.thread_id x
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %k = kernel.load %a[%t] : memref<16xi64>
  %m = arith.constant -3 : i64
  %q = arith.floordivsi %k, %m : i64
  kernel.store %q, %o[%t, %c0] : memref<16x4xi64>
  %cq = arith.ceildivsi %k, %m : i64
  kernel.store %cq, %o[%t, %c1] : memref<16x4xi64>
  %r = arith.remsi %k, %m : i64
  kernel.store %r, %o[%t, %c2] : memref<16x4xi64>
  %u = arith.divui %k, %m : i64
  kernel.store %u, %o[%t, %c3] : memref<16x4xi64>
  %x = kernel.load %f[%t] : memref<16xf64>
  %e = math.exp %x : f64
  %mx = arith.maximumf %e, %x : f64
  kernel.store %mx, %f[%t] : memref<16xf64>
  kernel.return
}

// CUDA:      extern "C" __global__ void __launch_bounds__(16) intdiv(
// CUDA-NEXT:     const long long* __restrict__ a,
// CUDA-NEXT:     long long* __restrict__ o,
// CUDA-NEXT:     double* __restrict__ f) {
// CUDA-NEXT:   const long long t = (long long)threadIdx.x;
// CUDA-NEXT:   const long long k = a[t];
// CUDA-NEXT:   o[t * 4] = k / -3 - (long long)(k % -3 != 0 && (k ^ -3) < 0);
// CUDA-NEXT:   o[t * 4 + 1] = k / -3 + (long long)(k % -3 != 0 && (k ^ -3) >= 0);
// CUDA-NEXT:   o[t * 4 + 2] = k % -3;
// CUDA-NEXT:   o[t * 4 + 3] = (long long)((unsigned long long)k / 0xfffffffffffffffdull);
// CUDA-NEXT:   const double x = f[t];
// CUDA-NEXT:   const double e = exp(x);
// CUDA-NEXT:   f[t] = (e != e || x != x) ? e + x : fmax(e, x);
// CUDA-NEXT: }

// -----

// Loop-carried values assigned in parallel, (p, q) <- (q, p + q): p + q is saved first. The
// launch passes one buffer as both parameters, one of them written: neither is __restrict__,
// and the load of a[t] is not moved past the store to b[t].
func.func @main(%x: memref<64xf32>) -> memref<64xf32> {
  kernel.launch @inplace grid [1, 1, 1] block [64, 1, 1] smem 0 (%x, %x) : memref<64xf32>, memref<64xf32>
  func.return %x : memref<64xf32>
}
kernel.func @inplace(%a: memref<64xf32>, %b: memref<64xf32>) block [64, 1, 1] {
  %t = kernel.thread_id x
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c10 = arith.constant 10 : index
  %one = arith.constant 1.0 : f32
  %two = arith.constant 2.0 : f32
  %r:2 = scf.for %i = %c0 to %c10 step %c1 iter_args(%p = %one, %q = %two) -> (f32, f32) {
    %s = arith.addf %p, %q : f32
    scf.yield %q, %s : f32, f32
  }
  %v = kernel.load %a[%t] : memref<64xf32>
  kernel.store %r#0, %b[%t] : memref<64xf32>
  %w = arith.addf %v, %r#1 : f32
  kernel.store %w, %b[%t] : memref<64xf32>
  kernel.return
}

// CHECK:      cuda.kernel @inplace(a : !cuda.ptr<f32, const>, b : !cuda.ptr<f32>) launch_bounds(64) {

// CUDA:      extern "C" __global__ void __launch_bounds__(64) inplace(const float* a, float* b) {
// CUDA-NEXT:   const long long t = (long long)threadIdx.x;
// CUDA-NEXT:   float p = 1.0f;
// CUDA-NEXT:   float q = 2.0f;
// CUDA-NEXT:   for (long long i = 0; i < 10; i += 1) {
// CUDA-NEXT:     const float q_next = p + q;
// CUDA-NEXT:     p = q;
// CUDA-NEXT:     q = q_next;
// CUDA-NEXT:   }
// CUDA-NEXT:   const float v = a[t];
// CUDA-NEXT:   b[t] = p;
// CUDA-NEXT:   b[t] = v + q;
// CUDA-NEXT: }

// -----

// Kernel symbols that are not usable C names (a keyword, a CUDA function, MLIR-only
// characters) are renamed, and their launches follow.
func.func @names(%x: memref<64xf32>) {
  kernel.launch @double grid [1, 1, 1] block [64, 1, 1] smem 0 (%x) : memref<64xf32>
  kernel.launch @"my-kernel.v2" grid [1, 1, 1] block [64, 1, 1] smem 0 (%x) : memref<64xf32>
  func.return
}
kernel.func @double(%a: memref<64xf32>) block [64, 1, 1] {
  %t = kernel.thread_id x
  %v = kernel.load %a[%t] : memref<64xf32>
  %w = arith.addf %v, %v : f32
  kernel.store %w, %a[%t] : memref<64xf32>
  kernel.return
}
kernel.func @"my-kernel.v2"(%a: memref<64xf32>) block [64, 1, 1] {
  %t = kernel.thread_id x
  %v = kernel.load %a[%t] : memref<64xf32>
  kernel.store %v, %a[%t] : memref<64xf32>
  kernel.return
}

// CHECK-LABEL: func.func @names
// CHECK-NEXT:  kernel.launch @k_double grid
// CHECK-NEXT:  kernel.launch @my_kernel_v2 grid
// CHECK:       cuda.kernel @k_double(
// CHECK:       cuda.kernel @my_kernel_v2(

// CUDA:      extern "C" __global__ void __launch_bounds__(64) k_double(float* __restrict__ a) {
// CUDA:      extern "C" __global__ void __launch_bounds__(64) my_kernel_v2(float* __restrict__ a) {

// -----

// 16-bit floats: bf16 and f16 buffers are __nv_bfloat16 / __half pointers (their headers
// included); explicit casts become the conversion intrinsics (round to nearest even);
// arithmetic on 16-bit values computes in float between conversions, rounded once.
func.func @main_halves(%x: memref<64xbf16>, %y: memref<64xf16>) {
  kernel.launch @half_kernel grid [1, 1, 1] block [64, 1, 1] smem 0 (%x, %y) : memref<64xbf16>, memref<64xf16>
  func.return
}
kernel.func @half_kernel(%x: memref<64xbf16>, %y: memref<64xf16>) block [64, 1, 1] {
  %t = kernel.thread_id x
  %v = kernel.load %x[%t] : memref<64xbf16>
  %w = arith.extf %v : bf16 to f32
  %e = math.exp %w : f32
  %h = arith.truncf %e : f32 to f16
  kernel.store %h, %y[%t] : memref<64xf16>
  %s = arith.addf %v, %v : bf16
  kernel.store %s, %x[%t] : memref<64xbf16>
  kernel.return
}

// CUDA:      #include <cuda_fp16.h>
// CUDA-NEXT: #include <cuda_bf16.h>
// CUDA:      extern "C" __global__ void __launch_bounds__(64) half_kernel(
// CUDA-NEXT:     __nv_bfloat16* __restrict__ x,
// CUDA-NEXT:     __half* __restrict__ y) {
// CUDA-NEXT:   const long long t = (long long)threadIdx.x;
// CUDA-NEXT:   const __nv_bfloat16 v = x[t];
// CUDA-NEXT:   y[t] = __float2half(expf(__bfloat162float(v)));
// CUDA-NEXT:   x[t] = __float2bfloat16(__bfloat162float(v) + __bfloat162float(v));
// CUDA-NEXT: }
