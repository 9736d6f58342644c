// RUN: llm-opt %s | llm-opt | filecheck %s
// RUN: llm-opt %s --print-op-generic | llm-opt | filecheck %s

kernel.func @k(%a: memref<16x8xf32>) block [32, 1, 1] {
  %c0 = arith.constant 0 : index
  %x = kernel.load %a[%c0, %c0] : memref<16x8xf32>
  %h = mma.to_tf32 %x
  %d0, %d1, %d2, %d3 = mma.sync (%h, %x, %x, %x) * (%h, %x) + (%x, %x, %x, %x)
  kernel.store %d3, %a[%c0, %c0] : memref<16x8xf32>
  kernel.return
}

// CHECK:      %[[X:.*]] = kernel.load
// CHECK-NEXT: %[[H:.*]] = mma.to_tf32 %[[X]]
// CHECK-NEXT: %{{.*}}, %{{.*}}, %{{.*}}, %[[D3:.*]] = mma.sync(%[[H]], %[[X]], %[[X]], %[[X]]) * (%[[H]], %[[X]]) + (%[[X]], %[[X]], %[[X]], %[[X]])
// CHECK-NEXT: kernel.store %[[D3]]
