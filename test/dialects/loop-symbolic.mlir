// RUN: llm-opt %s | llm-opt | filecheck %s
// RUN: llm-opt %s --print-op-generic | llm-opt | filecheck %s
// RUN: llm-opt %s --check-numerics --check-numerics-lengths 3 2>&1 >/dev/null | filecheck %s --check-prefix=NUM

// Loop IR with a symbolic length: buffers with ? extents (row-major), the length passed to
// the kernel as an index argument, loops (free and reduce) whose trip count is that value
// and whose extent is its maximum.
func.func @rows(%x: memref<1x?x16xf32> {llmopt.input = "x", llmopt.dynamic = ["seq"]},
                %seq: index {llmopt.symbol = "seq", llmopt.max = 128}) -> (memref<1x?x16xf32>, memref<1x1x16xf32>) {
  %out = memref.alloc(%seq) : memref<1x?x16xf32>
  %sum = memref.alloc() : memref<1x1x16xf32>
  loop.kernel @scale (%a = %x : memref<1x?x16xf32>, %o = %out : memref<1x?x16xf32>, %n = %seq : index) {
    loop.for %i = 0 to %n max 128 {
      loop.for %j = 0 to 16 {
        %v = loop.load %a[0, %i, %j] : memref<1x?x16xf32>
        %w = arith.addf %v, %v : f32
        loop.store %w, %o[0, %i, %j] : memref<1x?x16xf32>
      }
    }
  }
  loop.kernel @colsum (%a = %x : memref<1x?x16xf32>, %o = %sum : memref<1x1x16xf32>, %n = %seq : index) {
    loop.for %j = 0 to 16 {
      %s = loop.reduce add %k = 0 to %n max 128 : f32 {
        %v = loop.load %a[0, %k, %j] : memref<1x?x16xf32>
        loop.yield %v : f32
      }
      loop.store %s, %o[0, 0, %j] : memref<1x1x16xf32>
    }
  }
  func.return %out, %sum : memref<1x?x16xf32>, memref<1x1x16xf32>
}

// CHECK-LABEL: func.func @rows
// CHECK:      %[[OUT:.*]] = memref.alloc(%seq) : memref<1x?x16xf32>
// CHECK:      loop.kernel @scale (%{{.*}} = %x : memref<1x?x16xf32>, %{{.*}} = %[[OUT]] : memref<1x?x16xf32>, %[[N:.*]] = %seq : index) {
// CHECK-NEXT:   loop.for %{{.*}} = 0 to %[[N]] max 128 {
// CHECK-NEXT:     loop.for %{{.*}} = 0 to 16 {
// CHECK:      loop.kernel @colsum (%{{.*}} = %x : memref<1x?x16xf32>, %{{.*}} = %{{.*}} : memref<1x1x16xf32>, %[[M:.*]] = %seq : index) {
// CHECK:          loop.reduce add %{{.*}} = 0 to %[[M]] max 128 : f32 {

// NUM: // numerics: tolerance {{.*}} at seq = {{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}{{$}}
