// RUN: llm-opt %s --split-input-file --verify-diagnostics | filecheck %s

kernel.func @k(%a: memref<4xf32>) block [32, 1, 1] {
  %v = arith.constant 1.0 : f32
  %w = kernel.shuffle_xor %v, 3 : f32
  kernel.return
}
// CHECK: shuffle offset must be 1, 2, 4, 8 or 16, got 3

// -----

kernel.func @k(%a: memref<4xf32>) block [32, 1, 1] {
  %v = arith.constant 1.0 : f32
  %w = kernel.opaque %v : f32
  kernel.return
}
// CHECK: f32 should be of base attribute index

// -----

kernel.func @k(%a: memref<4xf32>) block [32, 1, 1] {
  kernel.return
}
func.func @f(%x: memref<8xf32>) {
  kernel.launch @k grid [1, 1, 1] block [32, 1, 1] smem 0 (%x) : memref<8xf32>
  func.return
}
// CHECK: do not match the kernel's

// -----

kernel.func @k(%a: memref<4x4xf32>) block [32, 1, 1] {
  %t = kernel.thread_id x
  %v = kernel.load %a[%t] : memref<4x4xf32>
  kernel.return
}
// CHECK: kernel.load: 1 indices for a rank-2 buffer

// -----

kernel.func @k(%a: memref<4xf32>) block [32, 1, 1] {
  %t = kernel.thread_id w
  kernel.return
}
// CHECK: dimension must be one of ('x', 'y', 'z'), got 'w'

// -----

kernel.func @k(%a: memref<4xf32>) block [32, 1, 1] {
  %s = kernel.shared : memref<?xf32>
  kernel.return
}
// CHECK: a shared buffer has a static shape and the default layout, got memref<?xf32>

// -----

kernel.func @k(%a: memref<4xf32>) block [32, 1, 1] {
  kernel.return
}
func.func @f(%x: memref<4xf32>) {
  kernel.launch @k grid [4294967296, 1, 1] block [32, 1, 1] smem 0 (%x) : memref<4xf32>
  func.return
}
// CHECK: grid [4294967296, 1, 1] exceeds CUDA's limits [2147483647, 65535, 65535]

// -----

// A thread-private array is declared at the top level of a kernel, not inside a loop.
kernel.func @k(%a: memref<4xf32>) block [32, 1, 1] {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %c4 step %c1 {
    %l = kernel.local : memref<4xf32>
  }
  kernel.return
}
// CHECK: kernel.local must sit at the top level of a kernel.func

// -----

// Nor in a host function.
func.func @host() {
  %l = kernel.local : memref<4xf32>
  func.return
}
// CHECK: kernel.local must sit at the top level of a kernel.func

// -----

kernel.func @k(%a: memref<4xf32>) block [32, 1, 1] {
  %l = kernel.local : memref<?xf32>
  kernel.return
}
// CHECK: a local buffer has a static shape and the default layout, got memref<?xf32>

// -----

// An asynchronous copy moves 4, 8 or 16 bytes: eight floats are 32.
kernel.func @k(%a: memref<64xf32>) block [8, 1, 1] {
  %s = kernel.shared : memref<64xf32>
  %t = kernel.thread_id x
  kernel.async_copy %a[%t] to %s[%t] count 8 : memref<64xf32> to memref<64xf32>
  kernel.return
}
// CHECK: kernel.async_copy: count 8 of f32 moves 32 bytes; an asynchronous copy moves 4, 8 or 16 bytes

// -----

// Only an asynchronous copy takes a condition.
kernel.func @k(%a: memref<64xf32>) block [8, 1, 1] {
  %s = kernel.shared : memref<64xf32>
  %t = kernel.thread_id x
  %ok = arith.constant true
  kernel.copy %a[%t] to %s[%t] count 4 if %ok : memref<64xf32> to memref<64xf32>
  kernel.return
}
// CHECK: this copy takes no condition ('if')

// -----

kernel.func @k(%a: memref<64xi32>) block [8, 1, 1] {
  %s = kernel.shared : memref<64xf32>
  %t = kernel.thread_id x
  kernel.async_copy %a[%t] to %s[%t] count 4 : memref<64xi32> to memref<64xf32>
  kernel.return
}
// CHECK: kernel.async_copy: source and destination element types differ: i32 and f32

// -----

kernel.func @k(%a: memref<64xf32>) block [8, 1, 1] {
  %s = kernel.shared : memref<8x8xf32>
  %t = kernel.thread_id x
  kernel.async_copy %a[%t] to %s[%t] count 4 : memref<64xf32> to memref<8x8xf32>
  kernel.return
}
// CHECK: kernel.async_copy: 1 indices for a rank-2 buffer

// -----

// cp.async writes shared memory, never a kernel argument.
kernel.func @k(%a: memref<64xf32>, %b: memref<64xf32>) block [8, 1, 1] {
  %t = kernel.thread_id x
  kernel.async_copy %a[%t] to %b[%t] count 4 : memref<64xf32> to memref<64xf32>
  kernel.return
}
// CHECK: kernel.async_copy: the destination must be a kernel.shared buffer, not a kernel argument

// -----

// It reads global memory, not shared memory.
kernel.func @k(%a: memref<64xf32>) block [8, 1, 1] {
  %s = kernel.shared : memref<64xf32>
  %u = kernel.shared : memref<64xf32>
  %t = kernel.thread_id x
  kernel.async_copy %s[%t] to %u[%t] count 4 : memref<64xf32> to memref<64xf32>
  kernel.return
}
// CHECK: kernel.async_copy: the source must be a global buffer (a kernel argument), not a kernel.shared buffer

// -----

kernel.func @k(%a: memref<64xf32>) block [8, 1, 1] {
  kernel.async_wait -2
  kernel.return
}
// CHECK: kernel.async_wait: the number of pending groups must be >= 0, got -2

// -----

// A launch provides less dynamic shared memory than its (CUDA-IR) kernel needs.
func.func @main(%x: memref<4xf32>) {
  kernel.launch @k grid [1, 1, 1] block [32, 1, 1] smem 49152 (%x) : memref<4xf32>
  func.return
}
cuda.kernel @k(x : !cuda.ptr<f32>) launch_bounds(32) dynamic_shared(73728) {
  cuda.decl extern __shared__ smem : ui8[] align 16
}
// CHECK: smem 49152 is less than the 73728 bytes of dynamic shared memory that @k needs

// -----

// A constant coordinate outside the buffer (a guarded access, in an scf.if, may have one).
kernel.func @k(%a: memref<8xf32>) block [32, 1, 1] {
  %c8 = arith.constant 8 : index
  %v = kernel.load %a[%c8] : memref<8xf32>
  kernel.return
}
// CHECK: kernel.load: index 8 is outside dimension 0 of memref<8xf32> (0 to 7)

// -----

kernel.func @k(%a: memref<8xf32>) block [32, 1, 1] {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %c8 step %c1 {
    %v = kernel.load %a[%i] : memref<8xf32>
    kernel.store %v, %a[%i] : memref<8xf32>
  } {unroll = true}
  kernel.return
}
// CHECK: attribute 'unroll' must be an integer from 0 (unroll fully) to 2147483647, got true

// -----

kernel.func @k(%a: memref<8xf32>) block [32, 1, 1] {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %c8 step %c1 {
    %v = kernel.load %a[%i] : memref<8xf32>
    kernel.store %v, %a[%i] : memref<8xf32>
  } {unroll = -1 : i64}
  kernel.return
}
// CHECK: attribute 'unroll' must be an integer from 0 (unroll fully) to 2147483647, got -1

// -----

kernel.func @k(%a: memref<8xf32>) block [32, 1, 1] {
  %l = kernel.local : memref<65536x4096xf32>
  kernel.return
}
// CHECK: a local buffer of 1073741824 bytes (memref<65536x4096xf32>) is more than the 524288 bytes a CUDA thread may have

// -----

kernel.func @k(%a: memref<8xf32>) block [32, 1, 1] {
  %s = kernel.shared : memref<0xf32>
  kernel.return
}
// CHECK: a shared buffer has positive extents, got memref<0xf32>

// -----

kernel.func @k(%a: memref<8xf32>) block [32, 1, 1] {
  kernel.return
} {llmopt.schedule = {min_blocks = 100000 : i64}}
// CHECK: 'llmopt.schedule': knob 'min_blocks' must be an integer from 0 to 32, got 100000

// -----

kernel.func @k(%a: memref<8xf32>) block [32, 1, 1] {
  %c0 = arith.constant 0 : index
  kernel.prefetch %a[%c0] count 2 : memref<8xf32>
  kernel.return
}
// CHECK: kernel.prefetch: count 2 of f32 is 8 bytes; a prefetch moves a positive multiple of 16 bytes

// -----

kernel.func @k(%a: memref<8xf32>) block [32, 1, 1] {
  %s = kernel.shared : memref<8xf32>
  %c0 = arith.constant 0 : index
  kernel.prefetch %s[%c0] count 4 : memref<8xf32>
  kernel.return
}
// CHECK: kernel.prefetch: prefetches from a global buffer (a kernel argument), not a kernel.shared buffer

// -----

kernel.func @k(%a: memref<4xf32>, %n: memref<2xi32>) block [32, 1, 1] {
  kernel.last_block %n : memref<2xi32> {
  }
  kernel.return
}
// CHECK: kernel.last_block: the counter is a memref<1xi32>, got memref<2xi32>

// -----

kernel.func @k(%a: memref<4xf32>) block [32, 1, 1] {
  %n = kernel.shared : memref<1xi32>
  kernel.last_block %n : memref<1xi32> {
  }
  kernel.return
}
// CHECK: the counter is a global buffer (a kernel argument), not a kernel.shared buffer

// -----

kernel.func @k(%a: memref<4xf32>, %n: memref<1xi32>) block [32, 1, 1] {
  %t = kernel.thread_id x
  %c0 = arith.constant 0 : index
  %first = arith.cmpi eq, %t, %c0 : index
  scf.if %first {
    kernel.last_block %n : memref<1xi32> {
    }
  }
  kernel.return
}
// CHECK: kernel.last_block must stand at the top level of a kernel.func, where every thread reaches it

// -----

kernel.func @k(%a: memref<4xf32>, %n: memref<1xi32>) block [32, 1, 1] {
  kernel.last_block %n : memref<1xi32> {
    %b = kernel.block_id x
    %one = arith.constant 1.0 : f32
    kernel.store %one, %a[%b] : memref<4xf32>
  }
  kernel.return
}
// CHECK: kernel.last_block: kernel.block_id is not allowed inside (the region runs in whichever block is last)

// -----

kernel.func @k(%a: memref<4xf32>, %n: memref<1xi32>) block [32, 1, 1] {
  %b = kernel.block_id x
  %c1 = arith.constant 1 : index
  %i = arith.addi %b, %c1 : index
  kernel.last_block %n : memref<1xi32> {
    %one = arith.constant 1.0 : f32
    kernel.store %one, %a[%i] : memref<4xf32>
  }
  kernel.return
}
// CHECK: kernel.last_block: a value computed from kernel.block_id is used inside (the region runs in whichever block is last)

// -----

kernel.func @k(%a: memref<4xf32>, %n: memref<1xi32, strided<[1], offset: 3>>) block [32, 1, 1] {
  kernel.last_block %n : memref<1xi32, strided<[1], offset: 3>> {
  }
  kernel.return
}
// CHECK: kernel.last_block: the counter is a memref<1xi32>, got memref<1xi32, strided<[1], offset: 3>>

// -----

kernel.func @k() block [256, 1, 1] {
  kernel.set_max_registers inc 236
  kernel.return
}
// CHECK: kernel.set_max_registers: count must be a multiple of 8 from 24 to 256, got 236

// -----

kernel.func @k() block [256, 1, 1] {
  kernel.set_max_registers dec 16
  kernel.return
}
// CHECK: kernel.set_max_registers: count must be a multiple of 8 from 24 to 256, got 16

// -----

kernel.func @k() block [256, 1, 1] {
  "kernel.set_max_registers"() <{action = "add", count = 64 : i64}> : () -> ()
  kernel.return
}
// CHECK: kernel.set_max_registers: action must be 'inc' or 'dec', got 'add'

// -----

kernel.func @k() block [256, 1, 1] {
  kernel.set_max_registers more 64
  kernel.return
}
// CHECK: expected 'inc' or 'dec', got 'more'
