// RUN: llm-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @maximum(%x: memref<?xf32> {llmopt.input = "x", llmopt.dynamic = ["n"]},
                   %n: index {llmopt.symbol = "n", llmopt.max = 8}) {
  loop.kernel @k (%a = %x : memref<?xf32>, %m = %n : index) {
    loop.for %i = 0 to %m max 0 {
    }
  }
  func.return
}
// CHECK: loop.for maximum must be positive, got 0

// -----

func.func @scalar_binding(%x: memref<4xf32>, %f: f32) {
  loop.kernel @k (%a = %x : memref<4xf32>, %v = %f : f32) {
  }
  func.return
}
// CHECK: operand 'buffers' at positions 0 to 1 does not verify:
// CHECK-NEXT: Unexpected attribute f32

// -----

// A ? buffer must be bound to a declared symbol.
func.func @undeclared(%x: memref<?x8xf32>, %n: index) {
  loop.kernel @k (%a = %x : memref<?x8xf32>, %m = %n : index) {
    loop.for %i = 0 to %m max 8 {
      %v = loop.load %a[%i, 0] : memref<?x8xf32>
    }
  }
  func.return
}
// CHECK: argument %x of type memref<?x8xf32> needs llmopt.dynamic: the symbol each ? extent equals
