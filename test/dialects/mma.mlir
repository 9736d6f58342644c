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

// bf16 and f16 pairs: m16n8k16 (the type follows the operands), fragments from ldmatrix.
kernel.func @halves(%a: memref<16x8xf32>) block [32, 1, 1] {
  %s = kernel.shared : memref<2x16x24xbf16>
  %h = kernel.shared : memref<16x8xf16>
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %lane = kernel.thread_id x
  %x = kernel.load %a[%c0, %c0] : memref<16x8xf32>
  %r0, %r1, %r2, %r3 = mma.ldmatrix x4 %s[%c0, %lane, %c8] : memref<2x16x24xbf16>
  %q0, %q1 = mma.ldmatrix x2 trans %s[%c0, %lane, %c0] {note = "kn"} : memref<2x16x24xbf16>
  %e0, %e1, %e2, %e3 = mma.sync (%r0, %r1, %r2, %r3) * (%q0, %q1) + (%x, %x, %x, %x) : vector<2xbf16>
  %p = mma.ldmatrix x1 %h[%lane, %c0] : memref<16x8xf16>
  %f0, %f1, %f2, %f3 = mma.sync (%p, %p, %p, %p) * (%p, %p) + (%e0, %e1, %e2, %e3) : vector<2xf16>
  kernel.store %f3, %a[%c0, %c0] : memref<16x8xf32>
  kernel.return
}

// CHECK-LABEL: kernel.func @halves
// CHECK:      %[[R0:.*]], %[[R1:.*]], %[[R2:.*]], %[[R3:.*]] = mma.ldmatrix x4 %s[%c0{{.*}}, %lane, %c8] : memref<2x16x24xbf16>
// CHECK-NEXT: %[[Q0:.*]], %[[Q1:.*]] = mma.ldmatrix x2 trans %s[%c0{{.*}}, %lane, %c0{{.*}}] {note = "kn"} : memref<2x16x24xbf16>
// CHECK-NEXT: %[[E0:.*]], %[[E1:.*]], %[[E2:.*]], %[[E3:.*]] = mma.sync(%[[R0]], %[[R1]], %[[R2]], %[[R3]]) * (%[[Q0]], %[[Q1]]) + (%x{{.*}}) : vector<2xbf16>
// CHECK-NEXT: %[[P:.*]] = mma.ldmatrix x1 %h[%lane, %c0{{.*}}] : memref<16x8xf16>
// CHECK-NEXT: mma.sync(%[[P]], %[[P]], %[[P]], %[[P]]) * (%[[P]], %[[P]]) + (%[[E0]], %[[E1]], %[[E2]], %[[E3]]) : vector<2xf16>
