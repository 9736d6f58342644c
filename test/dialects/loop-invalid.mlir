// RUN: llm-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @arity(%x: memref<4x8xf32>) {
  loop.kernel @k (%a = %x : memref<4x8xf32>) {
    loop.for %i = 0 to 4 {
      %v = loop.load %a[%i] : memref<4x8xf32>
    }
  }
  func.return
}
// CHECK: loop.load: 1 indices for a rank-2 buffer

// -----

func.func @extent(%x: memref<4xf32>) {
  loop.kernel @k (%a = %x : memref<4xf32>) {
    loop.for %i = 0 to 0 {
    }
  }
  func.return
}
// CHECK: loop.for extent must be positive, got 0

// -----

func.func @yield_type(%x: memref<4xf32>) {
  loop.kernel @k (%a = %x : memref<4xf32>) {
    %s = loop.reduce add %r = 0 to 4 : f64 {
      %v = loop.load %a[%r] : memref<4xf32>
      loop.yield %v : f32
    }
  }
  func.return
}
// CHECK: body yields f32, the reduction is f64

// -----

func.func @store_type(%x: memref<4xf32>) {
  loop.kernel @k (%a = %x : memref<4xf32>) {
    loop.for %i = 0 to 4 {
      %c = arith.constant 1.0 : f64
      loop.store %c, %a[%i] : memref<4xf32>
    }
  }
  func.return
}
// CHECK: operand is used with type f32, but has been previously used or defined with type f64

// -----

func.func @unsigned_reduction(%x: memref<8xui32>) {
  loop.kernel @k (%a = %x : memref<8xui32>) {
    %s = loop.reduce add %k = 0 to 8 : ui32 {
      %v = loop.load %a[%k] : memref<8xui32>
      loop.yield %v : ui32
    }
  }
  func.return
}
// CHECK: a reduction yields a float, signless integer or index scalar, got ui32

// -----

func.func @divide_by_zero(%x: memref<8xf32>) {
  loop.kernel @k (%a = %x : memref<8xf32>) {
    loop.for %i = 0 to 8 {
      %v = loop.load %a[%i mod 0] : memref<8xf32>
    }
  }
  func.return
}
// CHECK: loop.load: an index divides by zero ('mod 0')

// -----

// A negative divisor (affine divisions and modulo take positive ones; the rewrites of
// affine expressions assert on them).
func.func @negative_modulo(%x: memref<32x32xf32>) {
  loop.kernel @k (%a = %x : memref<32x32xf32>) {
    loop.for %i = 0 to 32 {
      %v = loop.load %a[%i, %i mod -3] : memref<32x32xf32>
    }
  }
  func.return
}
// CHECK: loop.load: an index divides by a negative constant ('mod -3')

// -----

func.func @dynamic_strides(%x: memref<8x?xf32>) {
  loop.kernel @k (%a = %x : memref<8x?xf32>) {
    loop.for %i = 0 to 8 {
      %v = loop.load %a[%i, 0] : memref<8x?xf32>
    }
  }
  func.return
}
// CHECK: loop.load: buffer memref<8x?xf32> has no static layout (its strides and offset must be known)

// -----

func.func @operand_named_in_the_body(%x: memref<8xf32>) {
  loop.kernel @k (%a = %b : memref<8xf32>, %b = %x : memref<8xf32>) {
  }
  func.return
}
// CHECK: use of undefined value %b (a name defined inside the body is not visible to the operands)

// -----

// A constant index outside the buffer's static extent.
func.func @constant_out_of_bounds(%x: memref<5xf32>) {
  loop.kernel @k (%a = %x : memref<5xf32>) {
    loop.for %i = 0 to 5 {
      %v = loop.load %a[32000] : memref<5xf32>
      loop.store %v, %a[%i] : memref<5xf32>
    }
  }
  func.return
}
// CHECK: loop.load: index 32000 is outside dimension 0 of memref<5xf32> (0 to 4)

// -----

func.func @constant_negative(%x: memref<4x8xf32>) {
  loop.kernel @k (%a = %x : memref<4x8xf32>) {
    loop.for %i = 0 to 4 {
      %v = loop.load %a[%i, 0] : memref<4x8xf32>
      loop.store %v, %a[%i, 3 - 4] : memref<4x8xf32>
    }
  }
  func.return
}
// CHECK: loop.store: index -1 is outside dimension 1 of memref<4x8xf32> (0 to 7)

// -----

func.func @zero_extent_buffer(%x: memref<0x8xf32>) {
  loop.kernel @k (%a = %x : memref<0x8xf32>) {
    loop.for %i = 0 to 8 {
      %v = loop.load %a[%i floordiv 8, %i] : memref<0x8xf32>
    }
  }
  func.return
}
// CHECK: loop.load: buffer memref<0x8xf32> has a zero extent: no index is in bounds

// -----

func.func @unroll_attribute(%x: memref<4xf32>) {
  loop.kernel @k (%a = %x : memref<4xf32>) {
    loop.for %i = 0 to 4 {
      %v = loop.load %a[%i] : memref<4xf32>
      loop.store %v, %a[%i] : memref<4xf32>
    } {unroll = -3 : i64}
  }
  func.return
}
// CHECK: attribute 'unroll' must be an integer from 0 (unroll fully) to 2147483647, got -3

// -----

// An index that leaves the buffer on some iteration of its loops (found by the fuzzer: after
// lowering, constant folding made it a constant -1 that the Kernel-IR verifier rejected).
func.func @index_range(%x: memref<4x8xf32>) {
  loop.kernel @k (%a = %x : memref<4x8xf32>) {
    loop.for %i = 0 to 4 {
      loop.for %j = 0 to 8 {
        %v = loop.load %a[%i, %j] : memref<4x8xf32>
        loop.store %v, %a[%i, %j - 1] : memref<4x8xf32>
      }
    }
  }
  func.return
}
// CHECK: loop.store: index (%j + -1) takes values -1 to 6 over its loops, outside dimension 1 of memref<4x8xf32> (0 to 7)

// -----

func.func @index_range_high(%x: memref<4x8xf32>) {
  loop.kernel @k (%a = %x : memref<4x8xf32>) {
    loop.for %i = 0 to 4 {
      loop.for %j = 0 to 8 {
        %v = loop.load %a[%i floordiv 2 + 3, %j] : memref<4x8xf32>
        loop.store %v, %a[%i, %j] : memref<4x8xf32>
      }
    }
  }
  func.return
}
// CHECK: loop.load: index ((%i floordiv 2) + 3) takes values 3 to 4 over its loops, outside dimension 0 of memref<4x8xf32> (0 to 3)

// -----

// A terminator of another op's region (found by the fuzzer: a pass appended ops after it).
func.func @yield_outside_reduce(%x: memref<4xf32>) {
  loop.kernel @k (%a = %x : memref<4xf32>) {
    loop.for %i = 0 to 4 {
      %v = loop.load %a[%i] : memref<4xf32>
      loop.yield %v : f32
    }
  }
  func.return
}
// CHECK: loop.yield must end a loop.reduce body

// -----

// A runtime bound that is not a runtime extent of the kernel (found by the fuzzer:
// loop-to-tile computes a runtime grid from the function-level value bound to it).
func.func @bound_by_a_loop_variable(%x: memref<4x8xf32>) {
  loop.kernel @k (%a = %x : memref<4x8xf32>) {
    loop.for %i = 0 to 4 {
      loop.for %j = 0 to %i max 8 {
        %v = loop.load %a[%i, %j] : memref<4x8xf32>
        loop.store %v, %a[%i, %j] : memref<4x8xf32>
      }
    }
  }
  func.return
}
// CHECK: loop.for: a runtime bound inside a loop.kernel must be one of the kernel's arguments (a runtime extent bound to it)
