// RUN: llm-opt %s --split-input-file -p "kernel-to-cuda{index_bitwidth=64}" --verify-diagnostics | filecheck %s
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt --split-input-file -p "kernel-to-cuda{index_bitwidth=64}" -t cuda | filecheck %s --check-prefix=CUDA
// RUN: sed -e '/^\/\/ ERRORS BELOW/,$d' %s | llm-opt --split-input-file -p "kernel-to-cuda{index_bitwidth=64}" > %t
// RUN: llm-opt --split-input-file %t | diff - %t
// RUN: not llm-opt %s --split-input-file -p "kernel-to-cuda{index_bitwidth=64}" 2>&1 >/dev/null | filecheck %s --check-prefix=ERR
// RUN: not llm-opt %s --split-input-file -p 'kernel-to-cuda{arch=sm_80}' 2>&1 >/dev/null | filecheck %s --check-prefix=SM80
// More than 48 KiB of shared memory: CUDA declares at most 48 KiB of __shared__ arrays
// statically, so when a kernel's kernel.shared buffers total more (each rounded up to 16
// bytes) they all live in its dynamic shared memory: one extern __shared__ byte array, each
// buffer a typed pointer at a 16-byte-aligned offset, in declaration order. The cuda.kernel
// records the bytes (dynamic_shared) and every launch of it gets smem of at least that many.

// Three 24 KiB buffers (72 KiB): offsets 0, 24576 and 49152, smem 73728 on the launch that
// asked for none; a launch that already asks for more keeps its smem.
func.func @main(%x: memref<6144xf32>) -> memref<6144xf32> {
  %y = memref.alloc() : memref<6144xf32>
  kernel.launch @stages grid [1, 1, 1] block [256, 1, 1] smem 0 (%x, %y) : memref<6144xf32>, memref<6144xf32>
  kernel.launch @stages grid [1, 1, 1] block [256, 1, 1] smem 100000 (%x, %y) : memref<6144xf32>, memref<6144xf32>
  func.return %y : memref<6144xf32>
}
kernel.func @stages(%x: memref<6144xf32>, %y: memref<6144xf32>) block [256, 1, 1] {
  %a = kernel.shared : memref<6144xf32>
  %b = kernel.shared : memref<24x256xf32>
  %c = kernel.shared : memref<6144xf32>
  %t = kernel.thread_id x
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c24 = arith.constant 24 : index
  %c256 = arith.constant 256 : index
  scf.for %r = %c0 to %c24 step %c1 {
    %p = arith.muli %r, %c256 : index
    %i = arith.addi %p, %t : index
    %v = kernel.load %x[%i] : memref<6144xf32>
    kernel.store %v, %a[%i] : memref<6144xf32>
    %w = arith.addf %v, %v : f32
    kernel.store %w, %b[%r, %t] : memref<24x256xf32>
  }
  kernel.barrier
  scf.for %r = %c0 to %c24 step %c1 {
    %p = arith.muli %r, %c256 : index
    %i = arith.addi %p, %t : index
    %u = kernel.load %a[%i] : memref<6144xf32>
    %w = kernel.load %b[%r, %t] : memref<24x256xf32>
    %s = arith.addf %u, %w : f32
    kernel.store %s, %c[%i] : memref<6144xf32>
    %z = kernel.load %c[%i] : memref<6144xf32>
    kernel.store %z, %y[%i] : memref<6144xf32>
  }
  kernel.return
}

// CHECK-LABEL: func.func @main(
// CHECK:         kernel.launch @stages grid [1, 1, 1] block [256, 1, 1] smem 73728 (
// CHECK-NEXT:    kernel.launch @stages grid [1, 1, 1] block [256, 1, 1] smem 100000 (
// CHECK:       cuda.kernel @stages({{.*}}) launch_bounds(256) dynamic_shared(73728) {
// CHECK-NEXT:    cuda.decl extern __shared__ smem : ui8[] align 16
// CHECK-NEXT:    %[[P0:.*]] = cuda.var smem : !cuda.ptr<ui8>
// CHECK-NEXT:    %[[O0:.*]] = cuda.literal 0 : index
// CHECK-NEXT:    %[[E0:.*]] = cuda.index %[[P0]][%[[O0]]] : !cuda.ptr<ui8>, index
// CHECK-NEXT:    %[[A0:.*]] = cuda.unary "&" %[[E0]] : ui8
// CHECK-NEXT:    %[[C0:.*]] = cuda.cast %[[A0]] : !cuda.ptr<ui8> to !cuda.ptr<f32>
// CHECK-NEXT:    cuda.decl const a : !cuda.ptr<f32> = %[[C0]]
// CHECK:         cuda.literal 24576 : index
// CHECK:         cuda.decl const b : !cuda.ptr<f32> =
// CHECK:         cuda.literal 49152 : index
// CHECK:         cuda.decl const c : !cuda.ptr<f32> =

// CUDA-LABEL: void __launch_bounds__(256) stages(
// CUDA:         extern __shared__ __align__(16) unsigned char smem[];
// CUDA-NEXT:    float* const a = (float*)&smem[0];
// CUDA-NEXT:    float* const b = (float*)&smem[24576];
// CUDA-NEXT:    float* const c = (float*)&smem[49152];
// CUDA-NEXT:    const long long t = (long long)threadIdx.x;
// CUDA:         a[i] = v;
// CUDA-NEXT:    b[r * 256 + t] = v + v;
// CUDA:         c[i1] = a[i1] + b[r1 * 256 + t];
// CUDA-NOT:     __shared__

// -----

// Just over 48 KiB: an 18-byte f16 buffer takes 32 bytes, so the f32 buffer after it starts
// at 32 and the kernel needs 32 + 49152 = 49184 bytes. The f16 pointer brings its header.
func.func @main(%x: memref<12288xf32>) -> memref<12288xf32> {
  %y = memref.alloc() : memref<12288xf32>
  kernel.launch @odd grid [1, 1, 1] block [32, 1, 1] smem 0 (%x, %y) : memref<12288xf32>, memref<12288xf32>
  func.return %y : memref<12288xf32>
}
kernel.func @odd(%x: memref<12288xf32>, %y: memref<12288xf32>) block [32, 1, 1] {
  %h = kernel.shared : memref<9xf16>
  %s = kernel.shared : memref<12288xf32>
  %t = kernel.thread_id x
  %v = kernel.load %x[%t] : memref<12288xf32>
  kernel.store %v, %s[%t] : memref<12288xf32>
  %w = arith.truncf %v : f32 to f16
  kernel.store %w, %h[%t] : memref<9xf16>
  kernel.barrier
  %u = kernel.load %s[%t] : memref<12288xf32>
  kernel.store %u, %y[%t] : memref<12288xf32>
  kernel.return
}

// CHECK-LABEL: func.func @main(
// CHECK:         kernel.launch @odd grid [1, 1, 1] block [32, 1, 1] smem 49184 (
// CHECK:       cuda.kernel @odd({{.*}}) launch_bounds(32) dynamic_shared(49184) {
// CHECK:         cuda.cast %{{.*}} : !cuda.ptr<ui8> to !cuda.ptr<f16>
// CHECK-NEXT:    cuda.decl const h : !cuda.ptr<f16> =
// CHECK:         cuda.literal 32 : index

// CUDA:         #include <cuda_fp16.h>
// CUDA-LABEL: void __launch_bounds__(32) odd(
// CUDA:         extern __shared__ __align__(16) unsigned char smem[];
// CUDA-NEXT:    __half* const h = (__half*)&smem[0];
// CUDA-NEXT:    float* const s = (float*)&smem[32];

// -----

// Exactly 48 KiB stays static: __shared__ arrays, no dynamic_shared, smem 0.
func.func @main(%x: memref<12288xf32>) -> memref<12288xf32> {
  %y = memref.alloc() : memref<12288xf32>
  kernel.launch @fits grid [1, 1, 1] block [32, 1, 1] smem 0 (%x, %y) : memref<12288xf32>, memref<12288xf32>
  func.return %y : memref<12288xf32>
}
kernel.func @fits(%x: memref<12288xf32>, %y: memref<12288xf32>) block [32, 1, 1] {
  %s = kernel.shared : memref<12288xf32>
  %t = kernel.thread_id x
  %v = kernel.load %x[%t] : memref<12288xf32>
  kernel.store %v, %s[%t] : memref<12288xf32>
  kernel.barrier
  %u = kernel.load %s[%t] : memref<12288xf32>
  kernel.store %u, %y[%t] : memref<12288xf32>
  kernel.return
}

// CHECK-LABEL: func.func @main(
// CHECK:         kernel.launch @fits grid [1, 1, 1] block [32, 1, 1] smem 0 (
// CHECK:       cuda.kernel @fits({{.*}}) launch_bounds(32) {
// CHECK-NEXT:    cuda.decl __shared__ s : f32[12288] align 16

// CUDA-LABEL: void __launch_bounds__(32) fits(
// CUDA:         __shared__ __align__(16) float s[12288];

// ERRORS BELOW: more shared memory than a block may use (the RUN lines with sed drop them).

// -----

// 240 KiB of buffers: more than the 227 KiB of an sm_90 block.
kernel.func @huge(%x: memref<4xf32>) block [32, 1, 1] {
  %a = kernel.shared : memref<30720xf32>
  %b = kernel.shared : memref<30720xf32>
  kernel.return
}

// CHECK: kernel @huge needs 245760 bytes of shared memory (2 kernel.shared buffers), more than the 232448 bytes a block may use on sm_90

// ERR:      kernel-to-cuda-dynamic-shared.mlir:[[# @LINE - 8]]:1: error: 'kernel.func' op: kernel @huge needs 245760 bytes of shared memory (2 kernel.shared buffers), more than the 232448 bytes a block may use on sm_90 (in pass 'kernel-to-cuda')
// ERR-NOT:  internal error
// ERR-NOT:  Traceback

// SM80:     kernel @huge needs 245760 bytes of shared memory (2 kernel.shared buffers), more than the 166912 bytes a block may use on sm_80

// -----

// 48 KiB of static shared memory plus a launch's 200000 dynamic bytes do not fit either.
func.func @main(%x: memref<4xf32>) {
  kernel.launch @greedy grid [1, 1, 1] block [32, 1, 1] smem 200000 (%x) : memref<4xf32>
  func.return
}
kernel.func @greedy(%x: memref<4xf32>) block [32, 1, 1] {
  %a = kernel.shared : memref<12288xf32>
  kernel.return
}

// CHECK: the launch of @greedy asks for 49152 bytes of static shared memory and smem 200000, more than the 232448 bytes a block may use on sm_90
