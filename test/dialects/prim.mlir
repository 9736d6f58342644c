// RUN: llm-opt %s | llm-opt | filecheck %s
// RUN: llm-opt %s --print-op-generic | llm-opt | filecheck %s

func.func @f(%x: tensor<1x8x256xf32>, %w: tensor<256xf32>) -> tensor<1x8x256xf32> {
  %1 = prim.elementwise (%x) : (tensor<1x8x256xf32>) -> tensor<1x8x256xf32> {
  ^bb0(%a: f32):
    %s = arith.mulf %a, %a : f32
    prim.yield %s : f32
  }
  %2 = prim.reduce add %1 dims [2] : tensor<1x8x256xf32> -> tensor<1x8x1xf32>
  %4 = prim.index_map (%2) [(d0, d1, d2) -> (d0, d1, 0)] : (tensor<1x8x1xf32>) -> tensor<1x8x256xf32>
  %5 = prim.index_map (%w) [(d0, d1, d2) -> (d2)] : (tensor<256xf32>) -> tensor<1x8x256xf32>
  %6 = prim.index_map (%w, %w) concat 0 [(d0) -> (d0), (d0) -> (d0 - 256)] : (tensor<256xf32>, tensor<256xf32>) -> tensor<512xf32>
  %7 = prim.elementwise () : () -> tensor<f32> {
    %c = arith.constant 1.0 : f32
    prim.yield %c : f32
  }
  func.return %4 : tensor<1x8x256xf32>
}

// CHECK-LABEL: func.func @f
// CHECK: prim.elementwise (%{{.*}}) : (tensor<1x8x256xf32>) -> tensor<1x8x256xf32> {
// CHECK: prim.yield %{{.*}} : f32
// CHECK: prim.reduce add %{{.*}} dims [2] : tensor<1x8x256xf32> -> tensor<1x8x1xf32>
// CHECK: prim.index_map (%{{.*}}) [(d0, d1, d2) -> (d0, d1, 0)] : (tensor<1x8x1xf32>) -> tensor<1x8x256xf32>
// CHECK: prim.index_map (%{{.*}}, %{{.*}}) concat 0 [(d0) -> (d0), (d0) -> ((d0 + -256))]
// CHECK: prim.elementwise () : () -> tensor<f32>

// Gather (embedding) and coordinates in an elementwise body (a causal mask).
func.func @g(%t: tensor<97x64xf32>, %ids: tensor<1x7xi64>) -> tensor<1x7x64xf32> {
  %e = prim.gather %t[%ids] axis 0 : (tensor<97x64xf32>, tensor<1x7xi64>) -> tensor<1x7x64xf32>
  %m = prim.elementwise (%e) : (tensor<1x7x64xf32>) -> tensor<1x7x64xf32> {
  ^bb0(%a: f32):
    %i = prim.coord 1 : index
    %j = prim.coord 2 : index
    %c = arith.cmpi sle, %j, %i : index
    %ninf = arith.constant 0xFF800000 : f32
    %s = arith.select %c, %a, %ninf : f32
    prim.yield %s : f32
  }
  func.return %m : tensor<1x7x64xf32>
}
// CHECK-LABEL: func.func @g
// CHECK: prim.gather %{{.*}}[%{{.*}}] axis 0 : (tensor<97x64xf32>, tensor<1x7xi64>) -> tensor<1x7x64xf32>
// CHECK: %[[I:.*]] = prim.coord 1 : index
// CHECK: %[[J:.*]] = prim.coord 2 : index
// CHECK: arith.cmpi sle, %[[J]], %[[I]] : index
