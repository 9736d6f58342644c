// RUN: llm-opt %s --split-input-file --verify-diagnostics | filecheck %s

cuda.kernel @k(n : index) {
  %0 = cuda.var n : index
  %1 = cuda.binary "+" %0, %0 : index
  cuda.decl const a : index = %1
}
// CHECK: 'cuda.var' must have exactly one use (it prints as a subexpression), has 2

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.var n : index
  cuda.decl b : index
  cuda.decl const a : index = %0
}
// CHECK: 'cuda.var' and its user are separated by the statement 'cuda.decl'

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.var m : index
  cuda.decl const a : index = %0
}
// CHECK: 'm' is not declared in this scope

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.var n : i32
  cuda.decl const a : i32 = %0
}
// CHECK: 'n' is declared index, referenced as i32

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.literal 1 : index
  cuda.for i : index = %0 to %0 step %0 {
  }
}
// CHECK: 'cuda.literal' must have exactly one use (it prints as a subexpression), has 3

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.literal 0 : index
  %1 = cuda.literal 4 : index
  %2 = cuda.literal 1 : index
  cuda.for i : index = %0 to %1 step %2 {
    %3 = cuda.literal 5 : index
    cuda.decl const x : index = %3
  }
  %4 = cuda.var x : index
  cuda.decl const y : index = %4
}
// CHECK: 'x' is not declared in this scope

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.literal 1 : index
  cuda.decl const a : index = %0
  %1 = cuda.var a : index
  %2 = cuda.literal 2 : index
  cuda.assign %1 = %2 : index
}
// CHECK: cannot assign to 'a' (const, an array or a loop variable)

// -----

cuda.kernel @k(x : !cuda.ptr<f32, const>) {
  %0 = cuda.var x : !cuda.ptr<f32, const>
  %1 = cuda.literal 0 : index
  %2 = cuda.index %0[%1] : !cuda.ptr<f32, const>, index
  %3 = cuda.literal 1.0 : f32
  cuda.assign %2 = %3 : f32
}
// CHECK: cannot assign through a pointer to const

// -----

cuda.kernel @k(n : index) {
  cuda.decl a : f32
  cuda.decl a : f32
}
// CHECK: 'a' is declared twice in one scope

// -----

cuda.kernel @k(n : index) {
  cuda.decl n : f32
}
// CHECK: 'n' is declared twice in one scope

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.literal 1 : index
  %1 = cuda.literal 2 : i32
  %2 = "cuda.binary"(%0, %1) <{operator = "+"}> : (index, i32) -> index
  cuda.decl const a : index = %2
}
// CHECK: operands of '+' differ in type: index and i32

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.literal 1 : index
  %1 = cuda.literal 2 : index
  %2 = cuda.binary "**" %0, %1 : index
  cuda.decl const a : index = %2
}
// CHECK: unknown binary operator '**'

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.literal 1.0 : f32
  %1 = cuda.literal 2.0 : f32
  %2 = cuda.binary "%" %0, %1 : f32
  cuda.decl const a : f32 = %2
}
// CHECK: operator '%' does not apply to f32

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.literal 1 : index
  %1 = cuda.literal 2 : index
  %2 = "cuda.binary"(%0, %1) <{operator = "<"}> : (index, index) -> index
  cuda.decl const a : index = %2
}
// CHECK: '<' on index gives i1, not index

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.literal 1 : index
  %1 = cuda.unary "!" %0 : index
  cuda.decl const a : index = %1
}
// CHECK: operator '!' does not apply to index

// -----

cuda.kernel @k(n : index) {
  cuda.decl const a : f32
}
// CHECK: const variable 'a' needs an initialiser

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.literal 1.0 : f32
  cuda.decl __shared__ a : f32 = %0
}
// CHECK: __shared__ variables cannot be initialised

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.literal 1.0 : f32
  cuda.decl const int : f32 = %0
}
// CHECK: variable 'int' is a C++ keyword

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.literal 1.0 : f32
  %1 = cuda.literal 0 : index
  cuda.decl const a : index = %1
}
// CHECK: 'cuda.literal' must have exactly one use (it prints as a subexpression), has 0

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.literal 1 : index
  "cuda.decl"(%0) <{var_name = "a", var_type = f32, qualifiers = ["const"]}> : (index) -> ()
}
// CHECK: initialiser of 'a' is index, not f32

// -----

cuda.kernel @k(n : index) {
  %0 = "cuda.builtin"() <{builtin = "threadIdx.w"}> : () -> ui32
  cuda.decl const a : ui32 = %0
}
// CHECK: unknown CUDA built-in 'threadIdx.w'

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.literal 1 : index
  %1 = cuda.literal 1.0 : f32
  %2 = cuda.literal 2.0 : f32
  %3 = "cuda.ternary"(%0, %1, %2) : (index, f32, f32) -> f32
  cuda.decl const a : f32 = %3
}
// CHECK: condition must be i1, got index

// -----

cuda.kernel @k(x : !cuda.ptr<f32>) {
  %0 = cuda.var x : !cuda.ptr<f32>
  %1 = cuda.cast %0 : !cuda.ptr<f32> to index
  cuda.decl const a : index = %1
}
// CHECK: cannot cast !cuda.ptr<f32> to index

// -----

cuda.kernel @k(n : index __restrict__) {
}
// CHECK: only pointer parameters can be __restrict__ ('n')

// -----

cuda.kernel @k(n : index) launch_bounds(2048) {
}
// CHECK: launch bounds must be 1 to 1024 threads

// -----

%0 = cuda.literal 1 : index
cuda.kernel @k(n : index) {
}
// CHECK: 'cuda.literal' must sit inside a cuda.kernel, cuda.for or cuda.if body

// -----

cuda.kernel @k(n : index) {
  %0 = arith.constant 1 : index
  cuda.decl const a : index = %0
}
// CHECK: 'cuda.decl' operands must be cuda expressions, got a value defined by 'arith.constant'

// -----

cuda.kernel @k(x : !cuda.ptr<f32>) {
  %0 = cuda.var x : !cuda.ptr<f32>
  %1 = cuda.literal 1.0 : f32
  %2 = "cuda.index"(%0, %1) : (!cuda.ptr<f32>, f32) -> f32
  cuda.decl const a : f32 = %2
}
// CHECK: subscript must be an integer, got f32

// -----

cuda.kernel @k(n : index) {
  %0 = "cuda.literal"() <{value = 1.5 : f32}> : () -> i32
  cuda.decl const a : i32 = %0
}
// CHECK: result type must be the literal's type

// -----

cuda.kernel @k(n : index) {
}
cuda.kernel @k(m : index) {
}
// CHECK: symbol @k is defined twice

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.literal 1 : index
  %1 = cuda.literal 2 : index
  cuda.assign %0 = %1 : index
}
// CHECK: assignment target must be a cuda.var or cuda.index, not 'cuda.literal'

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.literal 0 : index
  %1 = cuda.literal 4 : i32
  %2 = cuda.literal 1 : index
  "cuda.for"(%0, %1, %2) <{iv_name = "i", iv_type = index}> ({
  ^bb0:
  }) : (index, i32, index) -> ()
}
// CHECK: upper bound is i32, the induction variable index

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.literal 0 : index
  %1 = cuda.literal 4 : index
  %2 = cuda.literal 1 : index
  cuda.for i : index = %0 to %1 step %2 {
    %3 = cuda.var i : index
    %4 = cuda.literal 2 : index
    cuda.assign %3 = %4 : index
  }
}
// CHECK: cannot assign to 'i' (const, an array or a loop variable)

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.var n : index
  "cuda.if"(%0) ({
  ^bb0:
  }, {
  }) : (index) -> ()
}
// CHECK: condition must be i1, got index

// -----

cuda.kernel @k(n : index) {
  cuda.decl __shared__ red : f32[32]
  %0 = cuda.var red : f32
  cuda.decl const a : f32 = %0
}
// CHECK: 'red' is declared !cuda.ptr<f32>, referenced as f32

// -----

cuda.kernel @k(n : index) {
  %0 = cuda.literal 1 : index
  %1 = "cuda.call"(%0) <{callee = "not-a-name"}> : (index) -> index
  cuda.decl const a : index = %1
}
// CHECK: callee 'not-a-name' is not a C identifier

// -----

cuda.include "a<b.h"
// CHECK: invalid header name 'a<b.h'

// -----

cuda.kernel @k(x : !cuda.ptr<!cuda.ptr<f32>>) {
}
// CHECK: !cuda.ptr points to a scalar or vector type, not !cuda.ptr<f32>
