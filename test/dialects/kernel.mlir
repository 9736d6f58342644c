// RUN: llm-opt %s | llm-opt | filecheck %s
// RUN: llm-opt %s --print-op-generic | llm-opt | filecheck %s

kernel.func @k(%a: memref<8x256xf32>, %o: memref<8x256xf32>) block [256, 1, 1] {
  %sh = kernel.shared : memref<8xf32>
  %t = kernel.thread_id x
  %b = kernel.block_id x
  %v = kernel.load %a[%b, %t] : memref<8x256xf32>
  %w = kernel.shuffle_xor %v, 16 : f32
  kernel.barrier
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %c1 = arith.constant 1 : index
  %n = kernel.opaque %c8 : index
  scf.for %i = %c0 to %n step %c1 {
    kernel.store %w, %o[%b, %t] : memref<8x256xf32>
  }
  kernel.return
}
func.func @f(%x: memref<8x256xf32>) -> memref<8x256xf32> {
  %out = memref.alloc() : memref<8x256xf32>
  kernel.launch @k grid [8, 1, 1] block [256, 1, 1] smem 0 (%x, %out) : memref<8x256xf32>, memref<8x256xf32>
  func.return %out : memref<8x256xf32>
}

// CHECK: kernel.func @k(%{{.*}}: memref<8x256xf32>, %{{.*}}: memref<8x256xf32>) block [256, 1, 1] {
// CHECK-NEXT: kernel.shared : memref<8xf32>
// CHECK-NEXT: kernel.thread_id x
// CHECK-NEXT: kernel.block_id x
// CHECK-NEXT: kernel.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<8x256xf32>
// CHECK-NEXT: kernel.shuffle_xor %{{.*}}, 16 : f32
// CHECK-NEXT: kernel.barrier
// CHECK: %[[N:.*]] = kernel.opaque %{{.*}} : index
// CHECK-NEXT: scf.for %{{.*}} = %{{.*}} to %[[N]] step %{{.*}} {
// CHECK: kernel.store
// CHECK: kernel.return
// CHECK: kernel.launch @k grid [8, 1, 1] block [256, 1, 1] smem 0 (%{{.*}}, %{{.*}}) : memref<8x256xf32>, memref<8x256xf32>

// A thread-private array declared at the top of the kernel, stored and loaded like any
// buffer.
kernel.func @with_local(%o: memref<256xf32>) block [256, 1, 1] {
  %acc = kernel.local : memref<2x4xf32>
  %one = kernel.local {note = "scalar"} : memref<1xf32>
  %t = kernel.thread_id x
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  kernel.store %z, %acc[%c1, %c0] : memref<2x4xf32>
  %v = kernel.load %acc[%c1, %c0] : memref<2x4xf32>
  kernel.store %v, %o[%t] : memref<256xf32>
  kernel.return
}

// CHECK-LABEL: kernel.func @with_local(%{{.*}}: memref<256xf32>) block [256, 1, 1] {
// CHECK-NEXT: %[[ACC:.*]] = kernel.local : memref<2x4xf32>
// CHECK-NEXT: kernel.local {note = "scalar"} : memref<1xf32>
// CHECK: kernel.store %{{.*}}, %[[ACC]][%{{.*}}, %{{.*}}] : memref<2x4xf32>
// CHECK-NEXT: kernel.load %[[ACC]][%{{.*}}, %{{.*}}] : memref<2x4xf32>

// Asynchronous copies into a shared buffer: 16 bytes of f32 and 4 bytes of f16 a thread,
// the second only where %ok (zeros elsewhere), a commit and waits.
kernel.func @async(%x: memref<4x64xf32>, %h: memref<64xf16>) block [16, 1, 1] {
  %s = kernel.shared : memref<64xf32>
  %sh = kernel.shared : memref<2x64xf16>
  %t = kernel.thread_id x
  %b = kernel.block_id x
  %c4 = arith.constant 4 : index
  %c0 = arith.constant 0 : index
  %i = arith.muli %t, %c4 : index
  kernel.async_copy %x[%b, %i] to %s[%i] count 4 : memref<4x64xf32> to memref<64xf32>
  %ok = arith.cmpi slt, %b, %c4 : index
  kernel.async_copy %h[%i] to %sh[%c0, %i] count 2 if %ok {note = "half"} : memref<64xf16> to memref<2x64xf16>
  kernel.async_commit
  kernel.async_wait 1
  kernel.async_wait 0 {note = "all"}
  kernel.barrier
  kernel.return
}

// CHECK-LABEL: kernel.func @async(%{{.*}}: memref<4x64xf32>, %{{.*}}: memref<64xf16>) block [16, 1, 1] {
// CHECK-NEXT: %[[S:.*]] = kernel.shared : memref<64xf32>
// CHECK-NEXT: %[[SH:.*]] = kernel.shared : memref<2x64xf16>
// CHECK: %[[I:.*]] = arith.muli
// CHECK-NEXT: kernel.async_copy %{{.*}}[%{{.*}}, %[[I]]] to %[[S]][%[[I]]] count 4 : memref<4x64xf32> to memref<64xf32>
// CHECK-NEXT: %[[OK:.*]] = arith.cmpi slt
// CHECK-NEXT: kernel.async_copy %{{.*}}[%[[I]]] to %[[SH]][%{{.*}}, %[[I]]] count 2 if %[[OK]] {note = "half"} : memref<64xf16> to memref<2x64xf16>
// CHECK-NEXT: kernel.async_commit
// CHECK-NEXT: kernel.async_wait 1
// CHECK-NEXT: kernel.async_wait 0 {note = "all"}
// CHECK-NEXT: kernel.barrier

// An L2 prefetch of 128 bytes of a row.
kernel.func @prefetch(%w: memref<4x64xf32>) block [32, 1, 1] {
  %b = kernel.block_id x
  %c0 = arith.constant 0 : index
  kernel.prefetch %w[%b, %c0] count 32 {note = "row"} : memref<4x64xf32>
  kernel.return
}
// CHECK-LABEL: kernel.func @prefetch(
// CHECK: kernel.prefetch %{{.*}}[%{{.*}}, %{{.*}}] count 32 {note = "row"} : memref<4x64xf32>

// A constant coordinate outside the buffer is fine in code that may not run (an scf.if):
// what a ragged tile edge leaves after constants are folded.
kernel.func @guarded(%a: memref<8xf32>) block [32, 1, 1] {
  %c9 = arith.constant 9 : index
  %t = kernel.thread_id x
  %in = arith.cmpi ult, %c9, %t : index
  scf.if %in {
    %v = kernel.load %a[%c9] : memref<8xf32>
    kernel.store %v, %a[%t] : memref<8xf32>
  }
  kernel.return
}

// CHECK-LABEL: kernel.func @guarded
// CHECK:       kernel.load %{{.*}}[%{{.*}}] : memref<8xf32>

// Work that the block arriving last does, once every block's writes before it are visible.
kernel.func @last(%a: memref<64xf32>, %total: memref<1xf32>, %count: memref<1xi32>) block [32, 1, 1] {
  %t = kernel.thread_id x
  %c0 = arith.constant 0 : index
  %one = arith.constant 1.0 : f32
  kernel.store %one, %a[%t] : memref<64xf32>
  kernel.last_block %count : memref<1xi32> {
    %first = arith.cmpi eq, %t, %c0 : index
    scf.if %first {
      %v = kernel.load %a[%c0] : memref<64xf32>
      kernel.store %v, %total[%c0] : memref<1xf32>
    }
  } {note = "tail"}
  kernel.return
}
// CHECK-LABEL: kernel.func @last(
// CHECK:       kernel.last_block %{{.*}} : memref<1xi32> {
// CHECK-NEXT:    %{{.*}} = arith.cmpi eq, %{{.*}}, %{{.*}} : index
// CHECK:       } {note = "tail"}
// CHECK-NEXT:  kernel.return

// A producer warpgroup gives registers back, the consumers take them (setmaxnreg).
kernel.func @registers() block [256, 1, 1] {
  %t = kernel.thread_id x
  %c128 = arith.constant 128 : index
  %consumer = arith.cmpi ult, %t, %c128 : index
  scf.if %consumer {
    kernel.set_max_registers inc 232
  } else {
    kernel.set_max_registers dec 40 {note = "producer"}
  }
  kernel.return
}
// CHECK-LABEL: kernel.func @registers()
// CHECK:         kernel.set_max_registers inc 232
// CHECK:       } else {
// CHECK-NEXT:    kernel.set_max_registers dec 40 {note = "producer"}
