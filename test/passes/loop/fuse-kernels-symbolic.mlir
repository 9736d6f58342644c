// RUN: llm-opt %s -p fuse-kernels | filecheck %s
// RUN: llm-opt %s -p fuse-kernels --check-numerics --check-numerics-lengths 3 2>&1 >/dev/null | filecheck %s --check-prefix=NUM
// Fusion of kernels over a symbolic length: a softmax-like normalisation over keys whose sum
// runs to the runtime length. The producer's reduce, inlined into the consumer, runs to the
// consumer's binding of the same length (one index argument, not two).

func.func @normalise(%x: memref<?x?xf32> {llmopt.input = "x", llmopt.dynamic = ["seq", "seq"]},
                     %seq: index {llmopt.symbol = "seq", llmopt.max = 64}) -> memref<?x?xf32> {
  %sum = memref.alloc(%seq) : memref<?x1xf32>
  loop.kernel @rowsum (%a = %x : memref<?x?xf32>, %o = %sum : memref<?x1xf32>, %n = %seq : index) {
    loop.for %i = 0 to %n max 64 {
      %s = loop.reduce add %k = 0 to %n max 64 : f32 {
        %v = loop.load %a[%i, %k] : memref<?x?xf32>
        %e = math.exp %v : f32
        loop.yield %e : f32
      }
      loop.store %s, %o[%i, 0] : memref<?x1xf32>
    }
  }
  %out = memref.alloc(%seq, %seq) : memref<?x?xf32>
  loop.kernel @divide (%a = %x : memref<?x?xf32>, %s = %sum : memref<?x1xf32>, %o = %out : memref<?x?xf32>, %n = %seq : index) {
    loop.for %i = 0 to %n max 64 {
      loop.for %j = 0 to %n max 64 {
        %v = loop.load %a[%i, %j] : memref<?x?xf32>
        %e = math.exp %v : f32
        %t = loop.load %s[%i, 0] : memref<?x1xf32>
        %r = arith.divf %e, %t : f32
        loop.store %r, %o[%i, %j] : memref<?x?xf32>
      }
    }
  }
  func.return %out : memref<?x?xf32>
}

// CHECK-LABEL: func.func @normalise
// CHECK-NOT:  loop.kernel @rowsum
// CHECK:      %[[OUT:.*]] = memref.alloc(%seq, %seq) : memref<?x?xf32>
// CHECK-NEXT: loop.kernel @divide (%[[A:.*]] = %x : memref<?x?xf32>, %{{.*}} = %[[OUT]] : memref<?x?xf32>, %[[N:.*]] = %seq : index) {
// CHECK-NEXT:   loop.for %[[I:.*]] = 0 to %[[N]] max 64 {
// CHECK-NEXT:     %[[S:.*]] = loop.reduce add %[[K:.*]] = 0 to %[[N]] max 64 : f32 {
// CHECK-NEXT:       loop.load %[[A]][%[[I]], %[[K]]] : memref<?x?xf32>
// CHECK:          loop.for %{{.*}} = 0 to %[[N]] max 64 {
// CHECK:            arith.divf %{{.*}}, %[[S]] : f32
// CHECK-NOT:  memref.alloc

// NUM: // numerics: tolerance {{.*}} at seq = {{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}{{$}}
// NUM-NEXT: fuse-kernels {{.*}} ok
