// RUN: llm-opt %s | llm-opt | filecheck %s
// RUN: llm-opt %s --print-op-generic | llm-opt | filecheck %s

cuda.include <"cuda_fp16.h">
cuda.include "local.h"

cuda.kernel @k(x : !cuda.ptr<f32, const> __restrict__, y : !cuda.ptr<f32> __restrict__, n : index) launch_bounds(256, 2) {
  %0 = cuda.builtin blockIdx.x : ui32
  %1 = cuda.cast %0 : ui32 to index
  %2 = cuda.literal 256 : index
  %3 = cuda.binary "*" %1, %2 : index
  %4 = cuda.builtin threadIdx.x : ui32
  %5 = cuda.cast %4 : ui32 to index
  %6 = cuda.binary "+" %3, %5 : index
  cuda.decl const i : index = %6
  %7 = cuda.literal true : i1
  cuda.decl flag : i1 = %7
  cuda.decl r : f32
  cuda.decl __shared__ red : f32[32] align 16
  %8 = cuda.var i : index
  %9 = cuda.var n : index
  %10 = cuda.binary "<" %8, %9 : index
  cuda.if %10 {
    %11 = cuda.var y : !cuda.ptr<f32>
    %12 = cuda.var i : index
    %13 = cuda.index %11[%12] : !cuda.ptr<f32>, index
    %14 = cuda.var x : !cuda.ptr<f32, const>
    %15 = cuda.var i : index
    %16 = cuda.index %14[%15] : !cuda.ptr<f32, const>, index
    %17 = cuda.call rsqrtf(%16) : (f32) -> f32
    %18 = cuda.unary "-" %17 : f32
    cuda.assign %13 = %18 : f32
  } else {
    %19 = cuda.call __syncthreads() : () -> !cuda.void
    cuda.expr_stmt %19 : !cuda.void
  }
  %20 = cuda.literal 0 : index
  %21 = cuda.literal 4 : index
  %22 = cuda.literal 1 : index
  cuda.for j : index = %20 to %21 step %22 unroll 2 {
    %23 = cuda.var flag : i1
    %24 = cuda.var j : index
    %25 = cuda.literal 2 : index
    %26 = cuda.binary "==" %24, %25 : index
    cuda.assign %23 = %26 : i1
    %27 = cuda.var red : !cuda.ptr<f32>
    %28 = cuda.literal 0 : index
    %29 = cuda.index %27[%28] : !cuda.ptr<f32>, index
    %30 = cuda.var flag : i1
    %31 = cuda.literal 1.5 : f32
    %32 = cuda.literal 0x7F800000 : f32
    %33 = cuda.ternary %30, %31, %32 : f32
    cuda.assign %29 = %33 : f32
  }
  %34 = cuda.literal 0 : i32
  %35 = cuda.literal 8 : i32
  %36 = cuda.literal 1 : i32
  cuda.for w : i32 = %34 to %35 step %36 unroll {
    %37 = cuda.var r : f32
    %38 = cuda.literal 4294967295 : ui32
    %39 = cuda.var r : f32
    %40 = cuda.literal 16 : i32
    %41 = cuda.call __shfl_xor_sync(%38, %39, %40) : (ui32, f32, i32) -> f32
    cuda.assign %37 = %41 : f32
  }
}

// CHECK:      cuda.include <"cuda_fp16.h">
// CHECK-NEXT: cuda.include "local.h"
// CHECK-NEXT: cuda.kernel @k(x : !cuda.ptr<f32, const> __restrict__, y : !cuda.ptr<f32> __restrict__, n : index) launch_bounds(256, 2) {
// CHECK-NEXT:   %{{.*}} = cuda.builtin blockIdx.x : ui32
// CHECK-NEXT:   %{{.*}} = cuda.cast %{{.*}} : ui32 to index
// CHECK-NEXT:   %{{.*}} = cuda.literal 256 : index
// CHECK-NEXT:   %{{.*}} = cuda.binary "*" %{{.*}}, %{{.*}} : index
// CHECK:        cuda.decl const i : index = %{{.*}}
// CHECK-NEXT:   %{{.*}} = cuda.literal true : i1
// CHECK-NEXT:   cuda.decl flag : i1 = %{{.*}}
// CHECK-NEXT:   cuda.decl r : f32
// CHECK-NEXT:   cuda.decl __shared__ red : f32[32] align 16
// CHECK:        %{{.*}} = cuda.binary "<" %{{.*}}, %{{.*}} : index
// CHECK-NEXT:   cuda.if %{{.*}} {
// CHECK:          %{{.*}} = cuda.index %{{.*}}[%{{.*}}] : !cuda.ptr<f32, const>, index
// CHECK-NEXT:     %{{.*}} = cuda.call rsqrtf(%{{.*}}) : (f32) -> f32
// CHECK-NEXT:     %{{.*}} = cuda.unary "-" %{{.*}} : f32
// CHECK-NEXT:     cuda.assign %{{.*}} = %{{.*}} : f32
// CHECK-NEXT:   } else {
// CHECK-NEXT:     %{{.*}} = cuda.call __syncthreads() : () -> !cuda.void
// CHECK-NEXT:     cuda.expr_stmt %{{.*}} : !cuda.void
// CHECK-NEXT:   }
// CHECK:        cuda.for j : index = %{{.*}} to %{{.*}} step %{{.*}} unroll 2 {
// CHECK:          %{{.*}} = cuda.literal 1.500000e+00 : f32
// CHECK-NEXT:     %{{.*}} = cuda.literal 0x7f800000 : f32
// CHECK-NEXT:     %{{.*}} = cuda.ternary %{{.*}}, %{{.*}}, %{{.*}} : f32
// CHECK:        cuda.for w : i32 = %{{.*}} to %{{.*}} step %{{.*}} unroll {
// CHECK:          %{{.*}} = cuda.literal 4294967295 : ui32
// CHECK:          %{{.*}} = cuda.call __shfl_xor_sync(%{{.*}}, %{{.*}}, %{{.*}}) : (ui32, f32, i32) -> f32

// The address of an element (`&p[i]`) for an asynchronous copy: a pointer to the element
// type, const when the pointee is.
cuda.kernel @copy(x : !cuda.ptr<f32, const> __restrict__) launch_bounds(16) {
  cuda.decl __shared__ s : f32[64] align 16
  %0 = cuda.var s : !cuda.ptr<f32>
  %1 = cuda.literal 4 : index
  %2 = cuda.index %0[%1] : !cuda.ptr<f32>, index
  %3 = cuda.unary "&" %2 : f32
  %4 = cuda.var x : !cuda.ptr<f32, const>
  %5 = cuda.literal 4 : index
  %6 = cuda.index %4[%5] : !cuda.ptr<f32, const>, index
  %7 = cuda.unary "&" %6 : f32
  %8 = cuda.literal 16 : i32
  %9 = cuda.call __pipeline_memcpy_async(%3, %7, %8) : (!cuda.ptr<f32>, !cuda.ptr<f32, const>, i32) -> !cuda.void
  cuda.expr_stmt %9 : !cuda.void
}

// CHECK-LABEL: cuda.kernel @copy(
// CHECK:        %[[D:.*]] = cuda.unary "&" %{{.*}} : f32
// CHECK:        %[[S:.*]] = cuda.unary "&" %{{.*}} : f32
// CHECK-NEXT:   %[[N:.*]] = cuda.literal 16 : i32
// CHECK-NEXT:   %{{.*}} = cuda.call __pipeline_memcpy_async(%[[D]], %[[S]], %[[N]]) : (!cuda.ptr<f32>, !cuda.ptr<f32, const>, i32) -> !cuda.void

// Inline PTX, plain (scheduled like arithmetic) and volatile (it reads memory).
cuda.kernel @inline_ptx(x : f32, p : !cuda.ptr<ui32>) {
  cuda.decl b : ui32
  %0 = cuda.var b : ui32
  %1 = cuda.var x : f32
  cuda.asm "cvt.rna.tf32.f32 %0, %1;" outs(%0 : ui32) ins(%1 : f32) ["=r", "f"]
  %2 = cuda.var b : ui32
  %3 = cuda.var b : ui32
  cuda.asm volatile "ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" outs(%2 : ui32) ins(%3 : ui32) ["=r", "r"]
}

// CHECK-LABEL: cuda.kernel @inline_ptx
// CHECK:       cuda.asm "cvt.rna.tf32.f32 %0, %1;" outs(%{{.*}} : ui32) ins(%{{.*}} : f32) ["=r", "f"]
// CHECK:       cuda.asm volatile "ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" outs(%{{.*}} : ui32) ins(%{{.*}} : ui32) ["=r", "r"]
