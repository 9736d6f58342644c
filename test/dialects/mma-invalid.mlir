// RUN: llm-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @f(%x: f32) {
  %d0, %d1, %d2, %d3 = mma.sync (%x, %x, %x) * (%x, %x) + (%x, %x, %x, %x)
  func.return
}
// CHECK: mma.sync takes 4 'a' values per thread (m16n8k8, tf32), got 3

// -----

func.func @f(%x: f32) {
  %d0, %d1, %d2, %d3 = mma.sync (%x, %x, %x, %x) * (%x) + (%x, %x, %x, %x)
  func.return
}
// CHECK: mma.sync takes 2 'b' values per thread (m16n8k8, tf32), got 1

// -----

func.func @f(%x: f64) {
  %h = mma.to_tf32 %x
  func.return
}
// CHECK: f32
