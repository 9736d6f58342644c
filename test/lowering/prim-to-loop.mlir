// RUN: llm-opt %s --split-input-file -p prim-to-loop | filecheck %s
// Each prim op becomes one unfused kernel filling a fresh buffer; tensors become memrefs.

func.func @f(%x: tensor<1x8x256xf32>, %w: tensor<256xf32>) -> tensor<1x8x256xf32> {
  %1 = prim.elementwise (%x) : (tensor<1x8x256xf32>) -> tensor<1x8x256xf32> {
  ^bb0(%a: f32):
    %s = arith.mulf %a, %a : f32
    prim.yield %s : f32
  }
  %2 = prim.reduce add %1 dims [2] : tensor<1x8x256xf32> -> tensor<1x8x1xf32>
  %3 = prim.elementwise (%2) : (tensor<1x8x1xf32>) -> tensor<1x8x1xf32> {
  ^bb0(%a: f32):
    %c = arith.constant 3.906250e-03 : f32
    %m = arith.mulf %a, %c : f32
    %e = arith.constant 1.0e-05 : f32
    %s = arith.addf %m, %e : f32
    %r = math.rsqrt %s : f32
    prim.yield %r : f32
  }
  %4 = prim.index_map (%3) [(d0, d1, d2) -> (d0, d1, 0)] : (tensor<1x8x1xf32>) -> tensor<1x8x256xf32>
  %5 = prim.index_map (%w) [(d0, d1, d2) -> (d2)] : (tensor<256xf32>) -> tensor<1x8x256xf32>
  %6 = prim.elementwise (%x, %4, %5) : (tensor<1x8x256xf32>, tensor<1x8x256xf32>, tensor<1x8x256xf32>) -> tensor<1x8x256xf32> {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    %r = arith.mulf %m, %c : f32
    prim.yield %r : f32
  }
  func.return %6 : tensor<1x8x256xf32>
}

// CHECK-LABEL: func.func @f(%x: memref<1x8x256xf32>, %w: memref<256xf32>) -> memref<1x8x256xf32>
// CHECK: %[[SQ:.*]] = memref.alloc() : memref<1x8x256xf32>
// CHECK-NEXT: loop.kernel @elementwise_0 (%[[A:.*]] = %x : memref<1x8x256xf32>, %[[O:.*]] = %[[SQ]] : memref<1x8x256xf32>) {
// CHECK-NEXT: loop.for %[[I0:.*]] = 0 to 1 {
// CHECK-NEXT: loop.for %[[I1:.*]] = 0 to 8 {
// CHECK-NEXT: loop.for %[[I2:.*]] = 0 to 256 {
// CHECK-NEXT: %[[V:.*]] = loop.load %[[A]][%[[I0]], %[[I1]], %[[I2]]]
// CHECK-NEXT: %[[M:.*]] = arith.mulf %[[V]], %[[V]] : f32
// CHECK-NEXT: loop.store %[[M]], %[[O]][%[[I0]], %[[I1]], %[[I2]]]
// CHECK: memref.alloc() : memref<1x8x1xf32>
// CHECK: loop.kernel @reduce_1
// CHECK: loop.for %[[J0:.*]] = 0 to 1 {
// CHECK-NEXT: loop.for %[[J1:.*]] = 0 to 8 {
// CHECK-NEXT: %[[R:.*]] = loop.reduce add %[[K:.*]] = 0 to 256 : f32 {
// CHECK-NEXT: loop.load %{{.*}}[%[[J0]], %[[J1]], %[[K]]]
// CHECK: loop.store %[[R]], %{{.*}}[%[[J0]], %[[J1]], 0] : memref<1x8x1xf32>
// CHECK: loop.kernel @elementwise_2
// CHECK: math.rsqrt
// CHECK: loop.kernel @index_map_3
// CHECK: loop.load %{{.*}}[%{{.*}}, %{{.*}}, 0] : memref<1x8x1xf32>
// CHECK: loop.kernel @index_map_4
// CHECK: loop.load %{{.*}}[%[[H:.*]]] : memref<256xf32>
// CHECK: loop.kernel @elementwise_5
// CHECK: func.return %{{.*}} : memref<1x8x256xf32>

// -----


// Concat: every segment is read through a map wrapped in `mod extent` (always in bounds) and
// the value is selected by comparing the axis coordinate with the segment start.
func.func @cat(%a: tensor<2x3xf32>, %b: tensor<2x5xf32>) -> tensor<2x8xf32> {
  %0 = prim.index_map (%a, %b) concat 1 [(d0, d1) -> (d0, d1), (d0, d1) -> (d0, d1 - 3)] : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x8xf32>
  func.return %0 : tensor<2x8xf32>
}
// CHECK-LABEL: func.func @cat
// CHECK: loop.for %[[I:.*]] = 0 to 2 {
// CHECK-NEXT: loop.for %[[J:.*]] = 0 to 8 {
// CHECK-NEXT: %[[VA:.*]] = loop.load %{{.*}}[%[[I]], (%[[J]] mod 3)] : memref<2x3xf32>
// CHECK-NEXT: %[[VB:.*]] = loop.load %{{.*}}[%[[I]], ((%[[J]] + -3) mod 5)] : memref<2x5xf32>
// CHECK-NEXT: %[[C3:.*]] = arith.constant 3 : index
// CHECK-NEXT: %[[LT:.*]] = arith.cmpi ult, %[[J]], %[[C3]] : index
// CHECK-NEXT: %[[SEL:.*]] = arith.select %[[LT]], %[[VA]], %[[VB]] : f32
// CHECK-NEXT: loop.store %[[SEL]]

// -----

// Gather: the index is loaded, cast to index and used as the table coordinate; prim.coord
// becomes the iv of its loop.
func.func @gather(%t: tensor<97x16xf32>, %ids: tensor<2x7xi64>) -> (tensor<2x7x16xf32>, tensor<7x7xf32>) {
  %0 = prim.gather %t[%ids] axis 0 : (tensor<97x16xf32>, tensor<2x7xi64>) -> tensor<2x7x16xf32>
  %1 = prim.elementwise () : () -> tensor<7x7xf32> {
    %l = prim.coord 0 : index
    %s = prim.coord 1 : index
    %c = arith.cmpi sle, %s, %l : index
    %one = arith.constant 1.0 : f32
    %zero = arith.constant 0.0 : f32
    %r = arith.select %c, %one, %zero : f32
    prim.yield %r : f32
  }
  func.return %0, %1 : tensor<2x7x16xf32>, tensor<7x7xf32>
}
// CHECK-LABEL: func.func @gather
// CHECK: loop.kernel @gather_0 (%[[T:.*]] = %t : memref<97x16xf32>, %[[IDS:.*]] = %ids : memref<2x7xi64>, %[[O:.*]] = %{{.*}} : memref<2x7x16xf32>) {
// CHECK-NEXT: loop.for %[[I0:.*]] = 0 to 2 {
// CHECK-NEXT: loop.for %[[I1:.*]] = 0 to 7 {
// CHECK-NEXT: loop.for %[[I2:.*]] = 0 to 16 {
// CHECK-NEXT: %[[ID:.*]] = loop.load %[[IDS]][%[[I0]], %[[I1]]] : memref<2x7xi64>
// CHECK-NEXT: %[[ROW:.*]] = arith.index_cast %[[ID]] : i64 to index
// CHECK-NEXT: %[[V:.*]] = loop.load %[[T]][%[[ROW]], %[[I2]]] : memref<97x16xf32>
// CHECK-NEXT: loop.store %[[V]], %[[O]][%[[I0]], %[[I1]], %[[I2]]] : memref<2x7x16xf32>
// CHECK: loop.kernel @elementwise_1
// CHECK-NEXT: loop.for %[[L:.*]] = 0 to 7 {
// CHECK-NEXT: loop.for %[[S:.*]] = 0 to 7 {
// CHECK-NEXT: arith.cmpi sle, %[[S]], %[[L]] : index
