// RUN: llm-opt %s --split-input-file -p prim-to-loop | filecheck %s
// RUN: llm-opt %s --split-input-file -p prim-to-loop --check-numerics --check-numerics-lengths 3 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// A symbolic length below Tensor IR: a buffer with a ? extent is allocated with the index value
// that holds it, every kernel looping over it takes that value as an index argument, and its
// loops (free or reduce) run to it, with the extent at the symbol's maximum as their bound.

func.func @symbolic(%w: tensor<16xf32> {llmopt.param = "w"},
                    %x: tensor<1x?x16xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                    %seq: index {llmopt.symbol = "seq", llmopt.max = 64, llmopt.min = 2})
    -> (tensor<1x?x16xf32>, tensor<1x?x16xf32>, tensor<1x1x16xf32>, tensor<?xf32>) {
  %b = prim.index_map (%w) [(d0, d1, d2) -> (d2)] sizes(%seq) : (tensor<16xf32>) -> tensor<1x?x16xf32>
  %m = prim.elementwise (%x, %b) : (tensor<1x?x16xf32>, tensor<1x?x16xf32>) -> tensor<1x?x16xf32> {
  ^bb0(%a: f32, %c: f32):
    %p = arith.mulf %a, %c : f32
    prim.yield %p : f32
  }
  %c1 = arith.constant 1 : index
  %n = arith.subi %seq, %c1 : index
  %tail = prim.index_map (%m) [(d0, d1, d2)[s0] -> (d0, d1 + s0, d2)] symbols(%c1) sizes(%n) : (tensor<1x?x16xf32>) -> tensor<1x?x16xf32>
  %sum = prim.reduce add %m dims [1] : tensor<1x?x16xf32> -> tensor<1x1x16xf32>
  %c16 = arith.constant 16 : index
  %flat = arith.muli %seq, %c16 : index
  %f = prim.index_map (%m) [(d0) -> (0, d0 floordiv 16, d0 mod 16)] sizes(%flat) : (tensor<1x?x16xf32>) -> tensor<?xf32>
  func.return %m, %tail, %sum, %f : tensor<1x?x16xf32>, tensor<1x?x16xf32>, tensor<1x1x16xf32>, tensor<?xf32>
}

// CHECK-LABEL: func.func @symbolic(%w: memref<16xf32> {llmopt.param = "w"}, %x: memref<1x?x16xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]}, %seq: index {{.*}}) -> (memref<1x?x16xf32>, memref<1x?x16xf32>, memref<1x1x16xf32>, memref<?xf32>)
// CHECK:      %[[B:.*]] = memref.alloc(%seq) : memref<1x?x16xf32>
// CHECK-NEXT: loop.kernel @index_map_0 (%{{.*}} = %w : memref<16xf32>, %{{.*}} = %[[B]] : memref<1x?x16xf32>, %[[S0:.*]] = %seq : index) {
// CHECK-NEXT:   loop.for %{{.*}} = 0 to 1 {
// CHECK-NEXT:     loop.for %{{.*}} = 0 to %[[S0]] max 64 {
// CHECK-NEXT:       loop.for %{{.*}} = 0 to 16 {
// CHECK:      memref.alloc(%seq) : memref<1x?x16xf32>
// CHECK-NEXT: loop.kernel @elementwise_1
// The slice x[:, 1:]: n = seq - 1 rows (at most 63), read from row d1 + 1 (the symbol s0 is a
// kernel argument and a trailing map operand).
// CHECK:      %[[N:.*]] = arith.subi %seq, %[[C1:.*]] : index
// CHECK:      %[[T:.*]] = memref.alloc(%[[N]]) : memref<1x?x16xf32>
// CHECK-NEXT: loop.kernel @index_map_2 (%[[M:.*]] = %{{.*}} : memref<1x?x16xf32>, %{{.*}} = %[[T]] : memref<1x?x16xf32>, %[[KN:.*]] = %[[N]] : index, %[[K1:.*]] = %[[C1]] : index) {
// CHECK:          loop.for %[[I1:.*]] = 0 to %[[KN]] max 63 {
// CHECK-NEXT:       loop.for %[[I2:.*]] = 0 to 16 {
// CHECK-NEXT:         loop.load %[[M]][%{{.*}}, (%[[I1]] + %[[K1]]), %[[I2]]] : memref<1x?x16xf32>
// The sum over the symbolic dim: a reduce loop whose bound is the runtime length.
// CHECK:      memref.alloc() : memref<1x1x16xf32>
// CHECK-NEXT: loop.kernel @reduce_3 (%{{.*}} = %{{.*}} : memref<1x?x16xf32>, %{{.*}} = %{{.*}} : memref<1x1x16xf32>, %[[S3:.*]] = %seq : index) {
// CHECK:        loop.reduce add %{{.*}} = 0 to %[[S3]] max 64 : f32 {
// The flatten: 16 * seq elements, at most 1024.
// CHECK:      %[[FLAT:.*]] = arith.muli %seq, %{{.*}} : index
// CHECK:      memref.alloc(%[[FLAT]]) : memref<?xf32>
// CHECK-NEXT: loop.kernel @index_map_4 (%{{.*}} = %{{.*}} : memref<1x?x16xf32>, %{{.*}} = %{{.*}} : memref<?xf32>, %[[KF:.*]] = %[[FLAT]] : index) {
// CHECK-NEXT:   loop.for %{{.*}} = 0 to %[[KF]] max 1024 {

// NUM: // numerics: tolerance {{.*}} at seq = {{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}{{$}}
// NUM-NEXT: prim-to-loop {{.*}} ok

// -----

// A gather (an embedding) of a symbolic number of token ids.
func.func @embed(%table: tensor<10x8xf32> {llmopt.param = "table"},
                 %ids: tensor<1x?xi64> {llmopt.input = "ids", llmopt.dynamic = ["seq"]},
                 %seq: index {llmopt.symbol = "seq", llmopt.max = 32}) -> tensor<1x?x8xf32> {
  %0 = prim.gather %table[%ids] axis 0 : (tensor<10x8xf32>, tensor<1x?xi64>) -> tensor<1x?x8xf32>
  func.return %0 : tensor<1x?x8xf32>
}

// CHECK-LABEL: func.func @embed
// CHECK:      memref.alloc(%seq) : memref<1x?x8xf32>
// CHECK-NEXT: loop.kernel @gather_0 (%{{.*}} = %table : memref<10x8xf32>, %[[IDS:.*]] = %ids : memref<1x?xi64>, %{{.*}} = %{{.*}} : memref<1x?x8xf32>, %[[S:.*]] = %seq : index) {
// CHECK-NEXT:   loop.for %{{.*}} = 0 to 1 {
// CHECK-NEXT:     loop.for %{{.*}} = 0 to %[[S]] max 32 {

// NUM: // numerics: tolerance {{.*}} at seq = {{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}{{$}}
// NUM-NEXT: prim-to-loop {{.*}} ok
