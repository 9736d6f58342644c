// flash-attention-naive-f32.mlir with V repeated from a projection's raw output [1, 40, 32, 1]
// (the heads not yet split off, as transformers' repeated heads of an SDPA call with an
// explicit mask leave it): inlined, V's head dimension would merge into another coordinate.
builtin.module {
  func.func @forward(%causal_mask: memref<40x40xi1> {llmopt.param = "causal_mask"}, %q: memref<1x4x40x16xf32> {llmopt.input = "q"}, %k: memref<1x2x40x16xf32> {llmopt.input = "k"}, %v: memref<1x40x32x1xf32> {llmopt.input = "v"}) -> memref<1x4x40x16xf32> {
    %0 = memref.alloc() : memref<1x4x40x16xf32>
    loop.kernel @index_map_5 (%1 = %0 : memref<1x4x40x16xf32>, %2 = %v : memref<1x40x32x1xf32>) {
      loop.for %i0 = 0 to 1 {
        loop.for %i1 = 0 to 4 {
          loop.for %i2 = 0 to 40 {
            loop.for %i3 = 0 to 16 {
              %3 = loop.load %2[0, %i2, (((%i1 floordiv 2) * 16) + %i3), 0] : memref<1x40x32x1xf32>
              loop.store %3, %1[%i0, %i1, %i2, %i3] : memref<1x4x40x16xf32>
            }
          }
        }
      }
    }
    %1 = memref.alloc() : memref<1x4x16x40xf32>
    loop.kernel @index_map_6 (%2 = %1 : memref<1x4x16x40xf32>, %3 = %k : memref<1x2x40x16xf32>) {
      loop.for %i0 = 0 to 1 {
        loop.for %i1 = 0 to 4 {
          loop.for %i2 = 0 to 16 {
            loop.for %i3 = 0 to 40 {
              %4 = loop.load %3[0, (%i1 floordiv 2), %i3, %i2] : memref<1x2x40x16xf32>
              loop.store %4, %2[%i0, %i1, %i2, %i3] : memref<1x4x16x40xf32>
            }
          }
        }
      }
    }
    %2 = memref.alloc() : memref<1x4x40x40x1xf32>
    loop.kernel @reduce_10 (%3 = %2 : memref<1x4x40x40x1xf32>, %4 = %1 : memref<1x4x16x40xf32>, %5 = %q : memref<1x4x40x16xf32>) {
      loop.for %i0 = 0 to 1 {
        loop.for %i1 = 0 to 4 {
          loop.for %i2 = 0 to 40 {
            loop.for %i3 = 0 to 40 {
              %6 = loop.reduce add %r = 0 to 16 : f32 {
                %7 = loop.load %5[%i0, %i1, %i2, %r] : memref<1x4x40x16xf32>
                %8 = loop.load %4[%i0, %i1, %r, %i3] : memref<1x4x16x40xf32>
                %9 = arith.mulf %7, %8 : f32
                loop.yield %9 : f32
              }
              loop.store %6, %3[%i0, %i1, %i2, %i3, 0] : memref<1x4x40x40x1xf32>
            }
          }
        }
      }
    }
    %3 = memref.alloc() : memref<1x4x40x40xf32>
    loop.kernel @elementwise_24 (%4 = %3 : memref<1x4x40x40xf32>, %5 = %causal_mask : memref<40x40xi1>, %6 = %2 : memref<1x4x40x40x1xf32>) {
      %7 = arith.constant 0xff800000 : f32
      %8 = arith.constant 2.500000e-01 : f32
      loop.for %i0 = 0 to 1 {
        loop.for %i1 = 0 to 4 {
          loop.for %i2 = 0 to 40 {
            %9 = loop.reduce max %r = 0 to 40 : f32 {
              %10 = loop.load %5[%i2, %r] : memref<40x40xi1>
              %11 = loop.load %6[0, %i1, %i2, %r, 0] : memref<1x4x40x40x1xf32>
              %12 = arith.mulf %11, %8 : f32
              %13 = arith.select %10, %7, %12 : f32
              loop.yield %13 : f32
            }
            %14 = loop.reduce add %r_1 = 0 to 40 : f32 {
              %15 = loop.load %5[%i2, %r_1] : memref<40x40xi1>
              %16 = loop.load %6[0, %i1, %i2, %r_1, 0] : memref<1x4x40x40x1xf32>
              %17 = arith.mulf %16, %8 : f32
              %18 = arith.select %15, %7, %17 : f32
              %19 = arith.subf %18, %9 : f32
              %20 = math.exp %19 : f32
              loop.yield %20 : f32
            }
            loop.for %i3 = 0 to 40 {
              %21 = loop.load %5[%i2, %i3] : memref<40x40xi1>
              %22 = loop.load %6[0, %i1, %i2, %i3, 0] : memref<1x4x40x40x1xf32>
              %23 = arith.mulf %22, %8 : f32
              %24 = arith.select %21, %7, %23 : f32
              %25 = arith.subf %24, %9 : f32
              %26 = math.exp %25 : f32
              %27 = arith.divf %26, %14 : f32
              loop.store %27, %4[%i0, %i1, %i2, %i3] : memref<1x4x40x40xf32>
            }
          }
        }
      }
    }
    %4 = memref.alloc() : memref<1x4x40x16xf32>
    loop.kernel @index_map_29 (%5 = %4 : memref<1x4x40x16xf32>, %6 = %0 : memref<1x4x40x16xf32>, %7 = %3 : memref<1x4x40x40xf32>) {
      loop.for %i0 = 0 to 1 {
        loop.for %i1 = 0 to 4 {
          loop.for %i2 = 0 to 40 {
            loop.for %i3 = 0 to 16 {
              %8 = loop.reduce add %r = 0 to 40 : f32 {
                %9 = loop.load %7[0, %i1, %i2, %r] : memref<1x4x40x40xf32>
                %10 = loop.load %6[0, %i1, %r, %i3] : memref<1x4x40x16xf32>
                %11 = arith.mulf %9, %10 : f32
                loop.yield %11 : f32
              }
              loop.store %8, %5[%i0, %i1, %i2, %i3] : memref<1x4x40x16xf32>
            }
          }
        }
      }
    }
    func.return %4 : memref<1x4x40x16xf32>
  }
}
