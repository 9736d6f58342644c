builtin.module {
  func.func @normalise(%x: memref<?x?xf32> {llmopt.input = "x", llmopt.dynamic = ["seq", "seq"]}, %seq: index {llmopt.symbol = "seq", llmopt.max = 64 : i64}) -> memref<?x?xf32> {
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
      loop.for %i_1 = 0 to %n max 64 {
        loop.for %j_1 = 0 to %n max 64 {
          %v_1 = loop.load %a[%i_1, %j_1] : memref<?x?xf32>
          %e_1 = math.exp %v_1 : f32
          %t_1 = loop.load %s[%i_1, 0] : memref<?x1xf32>
          %r_1 = arith.divf %e_1, %t_1 : f32
          loop.store %r_1, %o[%i_1, %j_1] : memref<?x?xf32>
        }
      }
    }
    func.return %out : memref<?x?xf32>
  }
}
